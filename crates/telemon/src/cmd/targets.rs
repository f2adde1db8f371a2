//! Where a fleet command's targets come from: `--config FILE` and/or shorthand flags, shared by `telemon
//! serve`, `top` and `record`.

use std::path::{Path, PathBuf};

use telemon::config::{Config, Source};
use telemon_fleet::config::{ConfigError, Document};
use telemon_fleet::Protocols;

/// `--config FILE` and/or shorthand flags (each repeatable; a shorthand target is named by its argument).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct TargetArgs {
    /// Fleet config file (TOML; see the README).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// A System/161 directory holding `.sockets/meter`.
    #[arg(long = "meter161", value_name = "DIR")]
    pub meter161: Vec<PathBuf>,
    /// A Dyalog interpreter in SERVE mode.
    #[arg(long = "hmon", value_name = "HOST:PORT")]
    pub hmon: Vec<String>,
    /// Listen for Dyalog interpreters in POLL mode.
    #[arg(long = "hmon-listen", value_name = "ADDR")]
    pub hmon_listen: Vec<String>,
    /// Listen for Mono agents.
    #[arg(long = "mono-listen", value_name = "ADDR")]
    pub mono_listen: Vec<String>,
    /// A smon stream: an address to connect to, or a file to follow.
    #[arg(long = "smon", value_name = "ADDR|FILE")]
    pub smon: Vec<String>,
    /// An rvOS sysinfo service.
    #[arg(long = "sysinfo", value_name = "ADDR")]
    pub sysinfo: Vec<String>,
}

impl TargetArgs {
    /// The shorthand flags as blocks of a config document of their own (named `<flags>` in errors), read
    /// by the same code as a file's blocks: `--hmon A` is `[[hmon]] name = "A" connect = "A"`.
    pub fn flags(&self) -> Result<Document, ConfigError> {
        let mut doc = toml::Table::new();
        let mut push = |section: &str, name: String, key: &str, value: &str| {
            let mut block = toml::Table::new();
            block.insert("name".into(), toml::Value::String(name));
            block.insert(key.into(), toml::Value::String(value.into()));
            let list = doc.entry(section).or_insert_with(|| toml::Value::Array(Vec::new()));
            if let toml::Value::Array(list) = list {
                list.push(toml::Value::Table(block));
            }
        };
        for d in &self.meter161 {
            let dir = d.display().to_string();
            push("meter161", dir.replace('/', "_"), "dir", &dir);
        }
        for a in &self.hmon {
            push("hmon", a.clone(), "connect", a);
        }
        for a in &self.hmon_listen {
            push("hmon_listen", a.clone(), "listen", a);
        }
        for a in &self.mono_listen {
            push("mono_listen", a.clone(), "listen", a);
        }
        for a in &self.smon {
            let is_file = Path::new(a).exists() || !a.contains(':');
            push("smon", a.replace('/', "_"), if is_file { "file" } else { "connect" }, a);
        }
        for a in &self.sysinfo {
            push("sysinfo", a.clone(), "connect", a);
        }
        let text = toml::to_string(&doc).map_err(|e| ConfigError {
            file: "<flags>".into(),
            line: 0,
            key: String::new(),
            message: e.to_string(),
        })?;
        Document::parse("<flags>", &text)
    }

    /// Where the config comes from: the config file (if any) and the shorthand targets, read as one config
    /// by [`Source::read`] (errors as for a file, with `<flags>` as the file for shorthand problems, e.g.
    /// a name used twice).
    pub fn source(&self) -> Result<Source, ConfigError> {
        let flags = self.flags()?;
        Ok(Source {
            file: self.config.clone(),
            flags: Some(flags),
            shard: None,
            web_config: None,
            protocols: Protocols::built_in(),
        })
    }

    /// The config of the file (if any) and the shorthand targets.
    pub fn to_config(&self) -> Result<Config, ConfigError> {
        self.source()?.read()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        targets: TargetArgs,
    }

    fn unit<T: 'static>(c: &Config, i: usize) -> &T {
        c.fleet.targets[i].unit.as_any().downcast_ref::<T>().expect("the block type")
    }

    #[test]
    fn shorthand_flags_make_targets_named_by_their_argument() {
        use telemon_fleet::protocol::{
            hmon::HmonBlock, meter161::Meter161Block, mono::MonoBlock, smon::SmonBlock,
        };
        let cli = Cli::parse_from([
            "t",
            "--hmon",
            "127.0.0.1:4512",
            "--smon",
            "127.0.0.1:7399",
            "--smon",
            "/tmp/run.smon",
            "--sysinfo",
            "127.0.0.1:7461",
            "--mono-listen",
            "127.0.0.1:8888",
            "--meter161",
            "/x/root",
        ]);
        let c = cli.targets.to_config().unwrap();
        let names: Vec<&str> = c.fleet.targets.iter().map(|t| t.unit.name()).collect();
        assert_eq!(
            names,
            [
                "_x_root",
                "127.0.0.1:4512",
                "127.0.0.1:8888",
                "127.0.0.1:7399",
                "_tmp_run.smon",
                "127.0.0.1:7461"
            ]
        );
        assert_eq!(unit::<Meter161Block>(&c, 0).dir.as_deref(), Some(Path::new("/x/root")));
        assert_eq!(unit::<HmonBlock>(&c, 1).connect.as_deref(), Some("127.0.0.1:4512"));
        assert_eq!(unit::<MonoBlock>(&c, 2).listen, "127.0.0.1:8888");
        assert_eq!(unit::<SmonBlock>(&c, 3).connect.as_deref(), Some("127.0.0.1:7399"));
        assert_eq!(unit::<SmonBlock>(&c, 4).file.as_deref(), Some(Path::new("/tmp/run.smon")));
        let dup = Cli::parse_from(["t", "--hmon", "a:1", "--hmon", "a:1"]);
        assert_eq!(dup.targets.to_config().unwrap_err().file, "<flags>");
    }
}
