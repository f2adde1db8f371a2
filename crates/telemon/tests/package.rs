//! The Debian package (issue 48): `cargo xtask deb` builds it, `cargo xtask deb --test` runs
//! [`the_package_installs_upgrades_and_purges`] on it, and `.ci/run` does both (`.ci/deb.sh`).
//!
//! That test installs into this machine (`dpkg -i`, as root), so a plain `cargo test` skips it (`#[ignore]`: a
//! release build and a package take minutes). It lints the package (`lintian`: no error, and exactly the warnings
//! `deploy/debian/README.md` lists and explains), installs it, checks what is where (the binary, the unit as
//! `deploy/systemd/` has it and enabled, the conffile, a man page per subcommand, the completions, the dashboards
//! and rules, the copyright and changelogs), runs the installed `telemon --version`, `man -w telemon`, bash's
//! completion of `telemon s<TAB>`, `systemd-analyze verify` on the installed unit, and the installed binary with
//! the installed config as the unit starts it (it serves telemon's own families alone); then upgrades to a rebuilt
//! package whose conffile changed (the operator's edit is kept, the new file put beside it), and purges it
//! (nothing of it is left). It purges the package when it fails too. Without a tool it needs it fails under
//! `CI=true` and skips loudly elsewhere.
//!
//! The other tests run in every `cargo test`, on the debug binary: the example config passes `--check-config` as
//! shipped and with its examples uncommented, and `telemon generate-docs` writes a man page per subcommand and a
//! bash completion that completes them.

mod support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

#[allow(dead_code)]
#[path = "../build.rs"]
mod build_script;

/// The checkout.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// Runs `cmd` to its end with no stdin; fails the test, with what it said, unless it succeeds.
fn ok(cmd: &mut Command) -> String {
    let out = cmd.stdin(Stdio::null()).output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(out.status.success(), "{cmd:?}: {}\n{}{}", out.status, text(&out.stdout), text(&out.stderr));
    text(&out.stdout)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The subcommands that `program ARGS --help` lists (`help` aside), each with its own (`hmon connect`, ...).
fn subcommands(program: &Path, args: &[&str]) -> Vec<Vec<String>> {
    let help = ok(Command::new(program).args(args).arg("--help"));
    let mut found = Vec::new();
    let listed = help.lines().skip_while(|l| *l != "Commands:").skip(1).take_while(|l| l.starts_with("  "));
    for name in listed.filter_map(|l| l.split_whitespace().next()).filter(|n| *n != "help") {
        let path: Vec<String> = args.iter().map(|a| a.to_string()).chain([name.to_owned()]).collect();
        let refs: Vec<&str> = path.iter().map(String::as_str).collect();
        found.extend(subcommands(program, &refs));
        found.push(path);
    }
    found
}

/// The man page of every command of `program`: `telemon.1` and `telemon-SUB[-SUB].1`.
fn man_pages(program: &Path) -> BTreeSet<String> {
    let mut pages: BTreeSet<String> =
        subcommands(program, &[]).iter().map(|path| format!("telemon-{}.1", path.join("-"))).collect();
    pages.insert("telemon.1".into());
    pages
}

/// What bash offers for the last of `words` with `completion` sourced: the function `complete -p telemon` names,
/// called as readline calls it.
fn bash_candidates(completion: &Path, words: &[&str]) -> BTreeSet<String> {
    let script = r#"
        source "$1" || exit 3
        spec=$(complete -p telemon) || exit 4
        function=${spec#*-F }; function=${function%% *}
        shift
        COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}
        "$function" telemon "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]}"
        printf '%s\n' "${COMPREPLY[@]}"
    "#;
    let out = ok(Command::new("bash")
        .args(["--norc", "--noprofile", "-c", script, "bash"])
        .arg(completion)
        .args(words));
    out.lines().filter(|l| !l.is_empty()).map(str::to_owned).collect()
}

/// `deploy/debian/telemon.toml` with every example block and key uncommented (`# [[hmon]]`, `# name = ...`), but
/// `web_config`, whose file the example does not ship.
fn uncommented(config: &str) -> String {
    config
        .lines()
        .map(|line| match line.strip_prefix("# ") {
            Some(rest)
                if !rest.starts_with("web_config")
                    && ((rest.starts_with("[[") && rest.ends_with("]]"))
                        || rest.split_once(" = ").is_some_and(|(key, _)| {
                            key.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
                        })) =>
            {
                rest
            }
            _ => line,
        })
        .map(|line| format!("{line}\n"))
        .collect()
}

#[tokio::test]
async fn the_example_config_passes_check_config_as_shipped_and_uncommented() {
    let shipped = std::fs::read_to_string(root().join("deploy/debian/telemon.toml")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("telemon.toml");
    std::fs::write(&path, &shipped).unwrap();
    let out = support::run(&["serve", "--check-config", path.to_str().unwrap()], None).await;
    assert_eq!(support::code(&out), 0, "{}", support::stderr(&out));
    // No target until edited: telemon's own families alone.
    assert!(support::stdout(&out)
        .contains("ok (0 meter161, 0 hmon, 0 hmon_listen, 0 mono_listen, 0 smon, 0 sysinfo)"));

    let every = uncommented(&shipped);
    std::fs::write(&path, &every).unwrap();
    let out = support::run(&["serve", "--check-config", path.to_str().unwrap()], None).await;
    assert_eq!(support::code(&out), 0, "{}\n{every}", support::stderr(&out));
    let said = support::stdout(&out);
    for block in
        ["1 meter161", "1 hmon", "1 mono_listen", "1 smon", "1 sysinfo", "1 file_sd", "1 remote_write"]
    {
        assert!(said.contains(block), "{block} in {said}");
    }
}

#[test]
fn generated_docs_have_a_page_per_subcommand_and_a_bash_completion_of_them() {
    let dir = tempfile::tempdir().unwrap();
    let telemon = Path::new(support::TELEMON);
    ok(Command::new(telemon).arg("generate-docs").arg(dir.path()));
    let written: BTreeSet<String> = std::fs::read_dir(dir.path().join("man"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    let pages = man_pages(telemon);
    assert!(pages.contains("telemon-serve.1") && pages.contains("telemon-hmon-connect.1"), "{pages:?}");
    assert_eq!(written, pages);
    // A page is the subcommand's: its options are there (and no page of the hidden generate-docs).
    let serve = std::fs::read_to_string(dir.path().join("man/telemon-serve.1")).unwrap();
    assert!(serve.contains("check\\-config"), "{serve}");
    let completions = dir.path().join("completions");
    for file in ["telemon.bash", "_telemon", "telemon.fish"] {
        assert!(completions.join(file).is_file(), "{file}");
    }
    let bash = completions.join("telemon.bash");
    assert_eq!(
        bash_candidates(&bash, &["telemon", "s"]),
        ["serve", "smon", "sysinfo"].map(String::from).into()
    );
    assert_eq!(
        bash_candidates(&bash, &["telemon", "serve", "--check"]),
        ["--check-config".to_owned()].into()
    );
}

/// Purges the package when dropped: the machine is left as it was, even when the test fails.
struct Purge;

impl Drop for Purge {
    fn drop(&mut self) {
        if installed().is_some() {
            let status = Command::new("dpkg").args(["--purge", "telemon"]).stdin(Stdio::null()).status();
            eprintln!("package test: dpkg --purge telemon: {status:?}");
        }
    }
}

/// The installed version of the package `telemon`, if any.
fn installed() -> Option<String> {
    let out = Command::new("dpkg-query")
        .args(["--show", "--showformat", "${db:Status-Status} ${Version}", "telemon"])
        .output()
        .ok()?;
    let said = text(&out.stdout);
    let version = said.strip_prefix("installed ")?;
    (out.status.success()).then(|| version.to_owned())
}

/// The warning tags `deploy/debian/README.md` lists in its table (rows starting with a tag in backticks).
fn documented_warnings() -> BTreeSet<String> {
    let readme = std::fs::read_to_string(root().join("deploy/debian/README.md")).unwrap();
    let table =
        readme.split("<!-- lintian warnings -->").nth(1).expect("a table after <!-- lintian warnings -->");
    table
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .filter_map(|l| l.strip_prefix("| `")?.split('`').next().map(str::to_owned))
        .collect()
}

/// `lintian` on `deb`: (errors, warning tags).
fn lint(lintian: &Path, deb: &Path) -> (Vec<String>, BTreeSet<String>) {
    let out: Output = Command::new(lintian)
        .args(["--tag-display-limit", "0", "--fail-on", "none"])
        .arg(deb)
        .stdin(Stdio::null())
        .output()
        .expect("lintian runs");
    assert!(out.status.success(), "lintian failed: {}{}", text(&out.stdout), text(&out.stderr));
    let said = text(&out.stdout);
    eprintln!("lintian:\n{said}");
    let errors = said.lines().filter(|l| l.starts_with("E: ")).map(str::to_owned).collect();
    let warnings = said
        .lines()
        .filter_map(|l| l.strip_prefix("W: telemon: "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect();
    (errors, warnings)
}

/// `deb` unpacked, its conffile changed (a line appended) and its version raised, packed again: what the next
/// release of the package is to dpkg. Returns the new package and the conffile it holds.
fn rebuilt_with_a_changed_conffile(deb: &Path, dir: &Path) -> (PathBuf, String) {
    let tree = dir.join("tree");
    ok(Command::new("dpkg-deb").arg("--raw-extract").arg(deb).arg(&tree));
    let conffile = tree.join("etc/telemon/telemon.toml");
    let mut changed = std::fs::read_to_string(&conffile).unwrap();
    changed.push_str("# A line the next release of the package added.\n");
    std::fs::write(&conffile, &changed).unwrap();
    let control = tree.join("DEBIAN/control");
    let fields = std::fs::read_to_string(&control).unwrap();
    let version =
        fields.lines().find_map(|l| l.strip_prefix("Version: ")).expect("a Version field").to_owned();
    std::fs::write(
        &control,
        fields.replace(&format!("Version: {version}\n"), &format!("Version: {version}+next\n")),
    )
    .unwrap();
    let md5sums = tree.join("DEBIAN/md5sums");
    if let Ok(sums) = std::fs::read_to_string(&md5sums) {
        let sum = ok(Command::new("md5sum").arg(&conffile));
        let sum = sum.split_whitespace().next().unwrap();
        let sums: String = sums
            .lines()
            .map(|l| match l.split_once("  ") {
                Some((_, "etc/telemon/telemon.toml")) => format!("{sum}  etc/telemon/telemon.toml\n"),
                _ => format!("{l}\n"),
            })
            .collect();
        std::fs::write(&md5sums, sums).unwrap();
    }
    let next = dir.join("telemon-next.deb");
    ok(Command::new("dpkg-deb").args(["--build", "--root-owner-group"]).arg(&tree).arg(&next));
    (next, changed)
}

#[tokio::test]
#[ignore = "installs into this machine as root: run by `cargo xtask deb --test` (and .ci/run), which builds the package"]
async fn the_package_installs_upgrades_and_purges() {
    let test = "the_package_installs_upgrades_and_purges";
    let deb = PathBuf::from(
        std::env::var_os("TELEMON_DEB").expect("TELEMON_DEB: the package (cargo xtask deb --test)"),
    );
    assert!(deb.is_file(), "no package at {}", deb.display());
    let hint = "bash .ci/deb.sh installs it";
    let mut tools = Vec::new();
    for (tool, package) in [
        ("dpkg", "dpkg"),
        ("dpkg-deb", "dpkg"),
        ("lintian", "lintian"),
        ("man", "man-db"),
        ("systemd-analyze", "systemd"),
        ("deb-systemd-helper", "init-system-helpers"),
        ("bash", "bash"),
    ] {
        match support::need_on_path(test, tool, &format!("apt-get install {package}; {hint}")) {
            Some(path) => tools.push(path),
            None => return,
        }
    }
    let root_user = ok(Command::new("id").arg("-u")).trim() == "0";
    if support::need(
        test,
        "root (dpkg -i installs into this machine)",
        root_user.then(PathBuf::new),
        "run as root",
    )
    .is_none()
    {
        return;
    }
    if let Some(version) = installed() {
        panic!("telemon {version} is installed on this machine: this test would replace and purge it; remove it first");
    }
    let state = [Path::new("/var/lib/telemon"), Path::new("/var/lib/private/telemon")];
    assert!(state.iter().all(|p| !p.exists()), "{state:?} exist already: this test would purge them");

    // lintian: no error, and the warnings the README explains.
    let (errors, warnings) = lint(&tools[2], &deb);
    assert!(errors.is_empty(), "lintian errors:\n{}", errors.join("\n"));
    assert_eq!(
        warnings,
        documented_warnings(),
        "lintian's warnings, and those deploy/debian/README.md explains"
    );

    let _purge = Purge;
    ok(Command::new("dpkg").arg("--install").arg(&deb));
    let version = installed().expect("installed");

    // What is where.
    let listed = ok(Command::new("dpkg").args(["--listfiles", "telemon"]));
    let files: BTreeSet<PathBuf> = listed.lines().map(PathBuf::from).filter(|p| p.is_file()).collect();
    let telemon = Path::new("/usr/bin/telemon");
    let unit = Path::new("/usr/lib/systemd/system/telemon.service");
    let conffile = Path::new("/etc/telemon/telemon.toml");
    let doc = Path::new("/usr/share/doc/telemon");
    let mut expected = vec![
        telemon.to_path_buf(),
        unit.to_path_buf(),
        conffile.to_path_buf(),
        "/usr/share/bash-completion/completions/telemon".into(),
        "/usr/share/zsh/vendor-completions/_telemon".into(),
        "/usr/share/fish/vendor_completions.d/telemon.fish".into(),
        "/usr/share/telemon/prometheus/rules.yml".into(),
        doc.join("copyright"),
        doc.join("changelog.gz"),
        doc.join("changelog.Debian.gz"),
    ];
    for page in man_pages(telemon) {
        expected.push(Path::new("/usr/share/man/man1").join(format!("{page}.gz")));
    }
    for dashboard in std::fs::read_dir(root().join("deploy/grafana")).unwrap() {
        let name = dashboard.unwrap().file_name();
        if Path::new(&name).extension().is_some_and(|e| e == "json") {
            expected.push(Path::new("/usr/share/telemon/grafana").join(name));
        }
    }
    for path in &expected {
        assert!(files.contains(path), "{} is not in the package:\n{listed}", path.display());
    }
    let read =
        |path: &Path| std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(
        read(unit),
        read(&root().join("deploy/systemd/telemon.service")),
        "the unit of deploy/systemd"
    );
    let shipped = read(&root().join("deploy/debian/telemon.toml"));
    assert_eq!(read(conffile), shipped);
    let conffiles =
        ok(Command::new("dpkg-query").args(["--show", "--showformat", "${Conffiles}", "telemon"]));
    assert!(conffiles.contains(" /etc/telemon/telemon.toml "), "a conffile: {conffiles}");
    // Enabled at install, as Debian's exporters are (deb-systemd-helper's link, made even without systemd running).
    let wants = Path::new("/etc/systemd/system/multi-user.target.wants/telemon.service");
    // Bookworm's deb-systemd-helper links /lib/systemd/system/..., the same file on a merged /usr.
    let link = std::fs::read_link(wants).unwrap_or_else(|e| panic!("{}: {e}", wants.display()));
    assert_eq!(
        link.canonicalize().ok(),
        unit.canonicalize().ok(),
        "{} links to the unit: {}",
        wants.display(),
        link.display()
    );

    // The installed binary says what built it.
    let said = ok(Command::new(telemon).arg("--version"));
    let rest = said.strip_prefix("telemon 0.1.0 (revision ").unwrap_or_else(|| panic!("--version: {said:?}"));
    let (revision, rest) = rest.split_once(", branch ").unwrap_or_else(|| panic!("--version: {said:?}"));
    let (branch, rust) = rest.split_once(", rustc ").unwrap_or_else(|| panic!("--version: {said:?}"));
    assert!(rust.ends_with(")\n") && rust.starts_with(|c: char| c.is_ascii_digit()), "--version: {said:?}");
    if build_script::describe(&root()).revision == "unknown" {
        assert_eq!((revision, branch), ("unknown", "unknown"));
    } else {
        let commit = revision.strip_suffix("-dirty").unwrap_or(revision);
        ok(Command::new("git").arg("-C").arg(root()).args([
            "cat-file",
            "-e",
            &format!("{commit}^{{commit}}"),
        ]));
        assert_ne!(branch, "unknown");
    }

    // man finds the pages; bash completes the subcommands from the installed file.
    assert_eq!(ok(Command::new("man").args(["-w", "telemon"])).trim(), "/usr/share/man/man1/telemon.1.gz");
    assert_eq!(
        ok(Command::new("man").args(["-w", "telemon-serve"])).trim(),
        "/usr/share/man/man1/telemon-serve.1.gz"
    );
    let bash = Path::new("/usr/share/bash-completion/completions/telemon");
    assert_eq!(
        bash_candidates(bash, &["telemon", "s"]),
        ["serve", "smon", "sysinfo"].map(String::from).into()
    );

    // The installed unit verifies, quietly.
    let out = Command::new("systemd-analyze").arg("verify").arg(unit).output().unwrap();
    let said = text(&out.stdout) + &text(&out.stderr);
    assert!(
        out.status.success() && said.trim().is_empty(),
        "systemd-analyze verify {}: {said}",
        unit.display()
    );

    // The installed config, as the unit starts telemon (on a free port: 9464 may be taken here): valid, and
    // serving telemon's own families alone.
    let exec =
        read(unit).lines().find_map(|l| l.strip_prefix("ExecStart=/usr/bin/env telemon ").map(str::to_owned));
    let exec = exec.expect("ExecStart=/usr/bin/env telemon ...");
    let args: Vec<&str> = exec.split_whitespace().collect();
    assert_eq!(args, ["serve", "--config", "/etc/telemon/telemon.toml"]);
    ok(Command::new(telemon).args(["serve", "--check-config", "/etc/telemon/telemon.toml"]));
    let addr = support::free_addr().to_string();
    let serving = support::Telemon::spawn_program(telemon, &[&args[..], &["--listen", &addr]].concat());
    let page =
        support::until("the installed telemon to serve /metrics", Duration::from_millis(20), async || {
            let got = support::http_get(addr.parse().unwrap(), "/metrics", &[]).await.ok();
            got.filter(|(status, _)| *status == 200).map(|(_, page)| page)
        })
        .await;
    serving.kill().await;
    let samples: Vec<&str> = page.lines().filter(|l| !l.starts_with('#')).collect();
    assert!(samples.iter().any(|l| l.starts_with("telemon_build_info{")), "{page}");
    assert!(samples.iter().all(|l| l.starts_with("telemon_") && !l.starts_with("telemon_target_")), "{page}");

    // An upgrade to a package whose conffile changed keeps the operator's edit, and puts the new file beside it.
    let mut edited = shipped.clone();
    edited.push_str("# The operator's edit.\n");
    std::fs::write(conffile, &edited).unwrap();
    let work = tempfile::tempdir().unwrap();
    let (next, next_conffile) = rebuilt_with_a_changed_conffile(&deb, work.path());
    // What apt does unattended (Dpkg::Options --force-confdef --force-confold): keep the edited file.
    ok(Command::new("dpkg").args(["--force-confdef", "--force-confold", "--install"]).arg(&next));
    assert_eq!(installed(), Some(format!("{version}+next")));
    assert_eq!(read(conffile), edited, "the operator's edit is kept");
    assert_eq!(
        read(Path::new("/etc/telemon/telemon.toml.dpkg-dist")),
        next_conffile,
        "the new file beside it"
    );

    // Purge: nothing of the package is left, nor the state directory the service would have had.
    let listed = ok(Command::new("dpkg").args(["--listfiles", "telemon"]));
    let files: Vec<PathBuf> = listed.lines().map(PathBuf::from).filter(|p| p.is_file()).collect();
    std::fs::create_dir_all("/var/lib/private/telemon/recordings").unwrap();
    std::os::unix::fs::symlink("private/telemon", "/var/lib/telemon").unwrap();
    ok(Command::new("dpkg").args(["--purge", "telemon"]));
    assert_eq!(installed(), None);
    let known = Command::new("dpkg-query").args(["--show", "telemon"]).output().unwrap();
    assert!(!known.status.success(), "dpkg forgot the package: {}", text(&known.stdout));
    let left: Vec<&PathBuf> = files.iter().filter(|p| p.symlink_metadata().is_ok()).collect();
    assert!(left.is_empty(), "left after the purge: {left:?}");
    for gone in [
        Path::new("/etc/telemon"),
        Path::new("/usr/share/telemon"),
        doc,
        wants,
        Path::new("/var/lib/systemd/deb-systemd-helper-enabled/telemon.service.dsh-also"),
        Path::new("/var/lib/systemd/deb-systemd-helper-enabled/multi-user.target.wants/telemon.service"),
        state[0],
        state[1],
    ] {
        assert!(gone.symlink_metadata().is_err(), "{} is left after the purge", gone.display());
    }
}
