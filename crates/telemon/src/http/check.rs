//! One check of everything a `telemon serve` configuration names, made by `serve --check-config`, at
//! start and by every reload, so that what one accepts the others accept:
//!
//! - the config itself, each layer's sections as that layer reads them ([`crate::config`]);
//! - the web configuration file that `[serve] web_config` or `--web.config.file` names (TLS, users);
//! - every file a push sender reads (`bearer_token_file`, `basic_auth.password_file`, `tls.ca_file`).
//!
//! Each problem is one line, `FILE:LINE: KEY: why`, and `telemon` exits with 2.

use std::path::Path;

use telemon_fleet::config::ConfigError;

use crate::config::Config;

use super::conn::{WebConfig, WebConfigError};

/// A configuration that passed [`check`]: the config and the web configuration it names, read once.
#[derive(Debug)]
pub struct Checked {
    /// The config.
    pub config: Config,
    /// The web configuration (`None` without one: plain HTTP, no users).
    pub web: Option<WebConfig>,
}

/// Why a configuration cannot be used: one line, `FILE:LINE: KEY: why`.
#[derive(Debug, thiserror::Error)]
pub enum BadConfig {
    /// The config file, or a file it names, seen from the config: the file, line and key that name it.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The web configuration file: its own file, line and key.
    #[error(transparent)]
    Web(#[from] WebConfigError),
}

/// Checks everything `config` names; what `serve` then runs is what passed.
pub fn check(config: Config) -> Result<Checked, BadConfig> {
    let web = match &config.serve.web_config {
        Some(path) => Some(web_config(&config, path)?),
        None => None,
    };
    telemon_push::check(&config.push)?;
    Ok(Checked { config, web })
}

/// The web configuration at `path`. A file that cannot be read is an error of what named it: the config's
/// `[serve] web_config` line, or `--web.config.file` when the config names none.
fn web_config(config: &Config, path: &Path) -> Result<WebConfig, BadConfig> {
    if let Err(e) = std::fs::File::open(path) {
        let message = format!("cannot read {}: {e}", path.display());
        return Err(BadConfig::Config(match config.serve_place.as_ref().filter(|p| p.has("web_config")) {
            Some(place) => place.section_error("web_config", message),
            None => ConfigError { file: "<flags>".into(), line: 0, key: "--web.config.file".into(), message },
        }));
    }
    Ok(WebConfig::load(path)?)
}
