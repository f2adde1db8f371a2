//! Recording what the collectors read and write (pcapng, see docs/recordings.md and the
//! `telemon-capture` crate), for `telemon record`, `telemon serve --record` and the one-target
//! subcommands' `--record`.

/// `shb_userappl` of telemon's recordings: `telemon <version>`.
pub fn application() -> String {
    format!("telemon {}", env!("CARGO_PKG_VERSION"))
}
