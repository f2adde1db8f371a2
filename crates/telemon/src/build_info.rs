//! What this telemon was built from, as every Prometheus exporter says it: `telemon --version` and
//! `telemon_build_info{branch, revision, rustversion, version} 1` on `/metrics`.
//!
//! The values come from `build.rs` (git and rustc at build time); a build outside git says `unknown`. They
//! belong to the binary, not to the fleet core, which renders the targets' families: the HTTP server adds this
//! family to `/metrics` beside its own, and a `/probe` answer, which answers only its target, has none.

use telemon_fleet::series::escape_label_value;

/// telemon's version (`0.1.0`).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The git commit built (40 hex digits), with `-dirty` when the work tree differed from it; `unknown` outside
/// git.
pub const REVISION: &str = env!("TELEMON_BUILD_REVISION");

/// The git branch built (`HEAD` when detached); `unknown` outside git.
pub const BRANCH: &str = env!("TELEMON_BUILD_BRANCH");

/// The version of the Rust compiler that built it (`1.85.0`); `unknown` when `rustc --version` did not say.
pub const RUST_VERSION: &str = env!("TELEMON_BUILD_RUSTVERSION");

/// What `telemon --version` prints after the name: `0.1.0 (revision 0123…abcd-dirty, branch main, rustc 1.85.0)`.
pub const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (revision ",
    env!("TELEMON_BUILD_REVISION"),
    ", branch ",
    env!("TELEMON_BUILD_BRANCH"),
    ", rustc ",
    env!("TELEMON_BUILD_RUSTVERSION"),
    ")"
);

/// The `telemon_build_info` family, `# HELP` and `# TYPE` included, in the text format 0.0.4 or OpenMetrics
/// (an `info` family there): its labels in name order, as client_golang writes them.
pub fn render(open_metrics: bool) -> String {
    let mut out = String::with_capacity(256);
    if open_metrics {
        out.push_str("# HELP telemon_build telemon build information.\n# TYPE telemon_build info\n");
    } else {
        out.push_str(
            "# HELP telemon_build_info telemon build information.\n# TYPE telemon_build_info gauge\n",
        );
    }
    out.push_str("telemon_build_info{");
    let labels =
        [("branch", BRANCH), ("revision", REVISION), ("rustversion", RUST_VERSION), ("version", VERSION)];
    for (i, (name, value)) in labels.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(name);
        out.push_str("=\"");
        escape_label_value(&mut out, value);
        out.push('"');
    }
    out.push_str("} 1\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_formats_have_the_four_labels() {
        let labels = format!(
            "{{branch=\"{BRANCH}\",revision=\"{REVISION}\",rustversion=\"{RUST_VERSION}\",version=\"{VERSION}\"}}"
        );
        let text = render(false);
        assert_eq!(
            text,
            format!(
                "# HELP telemon_build_info telemon build information.\n# TYPE telemon_build_info gauge\n\
                 telemon_build_info{labels} 1\n"
            )
        );
        let open_metrics = render(true);
        assert!(open_metrics.contains("# TYPE telemon_build info\n"), "{open_metrics}");
        assert!(open_metrics.ends_with(&format!("telemon_build_info{labels} 1\n")), "{open_metrics}");
    }

    #[test]
    fn the_version_line_names_each_value() {
        assert_eq!(
            LONG_VERSION,
            format!("{VERSION} (revision {REVISION}, branch {BRANCH}, rustc {RUST_VERSION})")
        );
        assert!(
            !VERSION.is_empty() && !REVISION.is_empty() && !BRANCH.is_empty() && !RUST_VERSION.is_empty()
        );
    }
}
