//! The 3-minute form of `cargo xtask soak --all` (`sims/product-soak`): the whole product at once with every kind
//! of fault, over fewer targets (60 in the config, 6 in file_sd, 3 dialling HMON interpreters) and with this
//! build's telemon, with the same checks. Prometheus, VictoriaMetrics, Chromium with chromedriver, the push
//! virtualenv (`target/push-venv` or `TELEMON_PUSH_VENV`) and root (the queues' tmpfs in a mount namespace) are
//! needed: missing, the test fails under `CI=true` and elsewhere prints `SKIPPED:` and passes. About 4 minutes.

use std::path::Path;

mod support;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_minutes_of_everything_with_faults() {
    let test = "three_minutes_of_everything_with_faults";
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let venv = std::env::var_os("TELEMON_PUSH_VENV")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| root.join("target/push-venv"));
    let components = match product_soak::Components::find(&venv) {
        Ok(c) => c,
        Err(missing) => {
            for (what, hint) in &missing {
                support::need(test, what, None, hint);
            }
            return;
        }
    };
    let seed = std::env::var("TELEMON_SOAK_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(49);
    let mut options = product_soak::Options::full(
        support::TELEMON.into(),
        root.canonicalize().unwrap(),
        components,
        3.0,
        seed,
    );
    options.per_kind = 12;
    options.file_sd = 6;
    options.hmon_dialers = 3;
    options.otlp_batch = "2s";
    let report = product_soak::run(options).await.expect("the soak runs");
    eprintln!("{}", report.text);
    assert!(report.passed, "a check failed:\n{}", report.text);
}
