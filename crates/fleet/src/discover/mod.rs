//! Discovery, in one place: the watcher of a `[[file_sd]]` block, which reads its target files when the file
//! system says they changed (inotify, through `notify`) and every `refresh_interval` in any case, as
//! Prometheus's file_sd does; and [`glob`], the directories a `dir_glob` matches.
//!
//! A file that cannot be read or parsed keeps the targets it last gave (and counts in
//! `telemon_file_sd_read_errors_total`); a file that is gone gives none. A target refused on its own (not
//! `HOST:PORT`, a bad label) is left out and counted too.

use std::collections::btree_map::Entry;
use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use crate::config::file_sd::{Discovered, FileSdSection};
use crate::protocol::Protocols;

pub mod glob;

/// How long the watcher waits after a change before reading, so that a burst of writes reads once.
pub const SETTLE: Duration = Duration::from_millis(100);
/// How often directories that could not be watched (they did not exist) are tried again, and read.
pub const RETRY_WATCH: Duration = Duration::from_secs(2);

/// One file_sd block's watcher.
#[derive(Debug)]
pub struct Watcher {
    key: String,
    section: FileSdSection,
    protocols: Protocols,
    /// The last targets each file gave (a file that fails to parse keeps its entry).
    files: BTreeMap<PathBuf, Vec<Discovered>>,
    /// What each file said last time it failed, to log a failure once.
    failing: BTreeMap<PathBuf, String>,
    /// The targets given by more than one file with different blocks, as last warned about.
    clashes: Vec<String>,
    reported: Option<Vec<Discovered>>,
}

impl Watcher {
    /// The watcher of `section`, reporting under `key`, its targets read by `protocols`.
    pub fn new(key: String, section: FileSdSection, protocols: Protocols) -> Watcher {
        Watcher {
            key,
            section,
            protocols,
            files: BTreeMap::new(),
            failing: BTreeMap::new(),
            clashes: Vec::new(),
            reported: None,
        }
    }

    /// Reads every file the patterns match; the targets of all of them, in file order, at most
    /// [`crate::config::file_sd::MAX_TARGETS_PER_BLOCK`].
    pub fn read(&mut self) -> Vec<Discovered> {
        let matching = self.section.matching_files();
        self.files.retain(|f, _| matching.contains(f));
        self.failing.retain(|f, _| matching.contains(f));
        for file in matching {
            match self.section.read_file(&self.protocols, &file) {
                Ok((found, refused)) => {
                    for why in &refused {
                        tracing::warn!("file_sd: {}:{why}", file.display());
                    }
                    crate::own::file_sd_read_errors(refused.len() as u64);
                    self.failing.remove(&file);
                    self.files.insert(file, found);
                }
                Err(why) => {
                    crate::own::file_sd_read_errors(1);
                    if self.failing.get(&file) != Some(&why) {
                        tracing::warn!(file = %file.display(), error = %why, "file_sd: cannot read the file; keeping its last targets");
                    }
                    self.failing.insert(file, why);
                }
            }
        }
        self.warn_clashes();
        let mut all: Vec<Discovered> = self.files.values().flatten().cloned().collect();
        let max = crate::config::file_sd::MAX_TARGETS_PER_BLOCK;
        if all.len() > max {
            crate::own::file_sd_read_errors((all.len() - max) as u64);
            all.truncate(max);
        }
        all
    }

    /// Says (once per change) which targets more than one group gives with different blocks (labels):
    /// a name is one target, and the first file in name order (the first group in a file) wins.
    fn warn_clashes(&mut self) {
        let mut first: BTreeMap<&str, (&PathBuf, &Discovered)> = BTreeMap::new();
        let mut clashes = Vec::new();
        for (file, found) in &self.files {
            for target in found {
                match first.entry(target.name()) {
                    Entry::Vacant(v) => {
                        v.insert((file, target));
                    }
                    Entry::Occupied(o) if o.get().1 != target => {
                        let other = o.get().0.display();
                        clashes.push(format!(
                            "target {:?} is in {other} and in {} with different labels; it is one target, and {other}'s wins",
                            target.name(),
                            file.display(),
                        ));
                    }
                    Entry::Occupied(_) => {}
                }
            }
        }
        if clashes != self.clashes {
            for clash in &clashes {
                tracing::warn!("file_sd: {clash}");
            }
            self.clashes = clashes;
        }
    }

    /// Watches and reads until dropped, calling `report(key, targets)` with the targets at first and
    /// whenever they change.
    pub async fn run<F, Fut>(mut self, mut report: F)
    where
        F: FnMut(String, Vec<Discovered>) -> Fut,
        Fut: Future<Output = ()>,
    {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<()>(1);
        let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            if event.is_ok_and(|e| !e.kind.is_access()) {
                let _ = tx.try_send(());
            }
        })
        .map_err(|e| tracing::warn!(error = %e, "file_sd: no file-system notifications; reading every refresh_interval"))
        .ok();
        let mut unwatched = self.section.watch_dirs();
        let mut refresh = tokio::time::interval(self.section.refresh_interval);
        refresh.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut retry = tokio::time::interval(RETRY_WATCH);
        retry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            if let Some(w) = watcher.as_mut() {
                use notify::Watcher as _;
                unwatched.retain(|dir| w.watch(dir, notify::RecursiveMode::NonRecursive).is_err());
            }
            let found = self.read();
            if self.reported.as_ref() != Some(&found) {
                self.reported = Some(found.clone());
                report(self.key.clone(), found).await;
            }
            tokio::select! {
                _ = refresh.tick() => {}
                Some(()) = rx.recv() => tokio::time::sleep(SETTLE).await,
                _ = retry.tick(), if !unwatched.is_empty() || watcher.is_none() => {}
            }
            // Coalesce what arrived meanwhile.
            while rx.try_recv().is_ok() {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn next(rx: &mut tokio::sync::mpsc::UnboundedReceiver<Vec<String>>) -> Vec<String> {
        tokio::time::timeout(Duration::from_secs(10), rx.recv()).await.unwrap().unwrap()
    }

    #[test]
    fn a_target_two_files_give_with_different_labels_is_one_and_said_once() {
        let dir = tempfile::tempdir().unwrap();
        let text = format!("files = ['{}/*.json']\nprotocol = 'smon'\n", dir.path().display());
        let mut watcher = Watcher::new("k".into(), toml::from_str(&text).unwrap(), Protocols::built_in());
        std::fs::write(
            dir.path().join("a.json"),
            r#"[{"targets": ["127.0.0.1:1"], "labels": {"rack": "1"}}]"#,
        )
        .unwrap();
        std::fs::write(
            dir.path().join("b.json"),
            r#"[{"targets": ["127.0.0.1:1"], "labels": {"rack": "2"}}]"#,
        )
        .unwrap();
        std::fs::write(
            dir.path().join("c.json"),
            r#"[{"targets": ["127.0.0.1:1"], "labels": {"rack": "1"}}]"#,
        )
        .unwrap();
        let found = watcher.read();
        assert_eq!(found.len(), 3, "each file's, the first of a name wins when applied");
        assert_eq!(watcher.clashes.len(), 1, "{:?}", watcher.clashes);
        let clash = &watcher.clashes[0];
        assert!(
            clash.contains("a.json and in ") && clash.contains("b.json with different labels"),
            "{clash}"
        );
        assert!(clash.ends_with("a.json's wins"), "{clash}");
        std::fs::remove_file(dir.path().join("b.json")).unwrap();
        watcher.read();
        assert!(watcher.clashes.is_empty(), "c.json says the same as a.json");
    }

    #[tokio::test]
    async fn follows_writes_keeps_the_last_good_targets_and_drops_deleted_files() {
        let dir = tempfile::tempdir().unwrap();
        let text = format!("files = ['{}/*.json']\nprotocol = 'smon'\n", dir.path().display());
        let section: FileSdSection = toml::from_str(&text).unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let task =
            tokio::spawn(Watcher::new("k".into(), section, Protocols::built_in()).run(move |_, found| {
                let tx = tx.clone();
                async move {
                    let _ = tx.send(found.iter().map(|d| d.name().to_owned()).collect::<Vec<_>>());
                }
            }));
        assert!(next(&mut rx).await.is_empty());
        let file = dir.path().join("a.json");
        std::fs::write(&file, r#"[{"targets": ["127.0.0.1:1", "127.0.0.1:2"]}]"#).unwrap();
        assert_eq!(next(&mut rx).await, ["127.0.0.1:1", "127.0.0.1:2"]);
        std::fs::write(&file, r#"[{"targets": ["127.0.0.1:3"]}]"#).unwrap();
        assert_eq!(next(&mut rx).await, ["127.0.0.1:3"]);
        let before = crate::own::file_sd_read_error_count();
        std::fs::write(&file, "[{").unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(rx.try_recv().is_err(), "a corrupt file keeps its targets");
        assert!(crate::own::file_sd_read_error_count() > before);
        std::fs::remove_file(&file).unwrap();
        assert!(next(&mut rx).await.is_empty());
        task.abort();
    }
}
