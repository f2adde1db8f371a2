//! The subcommands, one file each: the one-target views of each protocol, the fleet commands (`serve`,
//! `top`, `record`) and the recording commands (`replay`, `export`).

pub mod export;
pub mod hash_password;
pub mod hmon;
pub mod meter161;
pub mod mono;
pub mod record;
pub mod replay;
pub mod serve;
pub mod smon;
pub mod sysinfo;
pub mod targets;
pub mod top;

/// Completes on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
