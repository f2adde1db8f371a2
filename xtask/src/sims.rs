//! The emulators `cargo xtask sim` knows about: one entry per protocol.
//!
//! Paths are relative to the workspace root, which is the working directory of every child.

/// One emulator and the `telemon` command that watches it.
pub struct Sim {
    /// The short name used on the command line (`cargo xtask sim NAME`) and as the output prefix.
    pub name: &'static str,
    /// The cargo package that builds the emulator.
    pub package: &'static str,
    /// The emulator's binary name.
    pub bin: &'static str,
    /// Arguments that put the emulator on its default address or directory for `cargo xtask sim`.
    pub args: &'static [&'static str],
    /// `telemon` arguments that watch it.
    pub telemon: &'static [&'static str],
    /// Its block in the fleet config of `telemon top` (the dashboard `cargo xtask sim` opens).
    pub fleet: &'static str,
    /// The fleet protocol it speaks (`telemon serve`'s `protocol` label, `cargo xtask fleet-bench --protocol`).
    pub protocol: &'static str,
    /// Whether it serves clients (all but the Mono agent, which dials out to an inspector): `cargo xtask
    /// soak` drives those.
    pub serves: bool,
}

/// Where `cargo xtask sim` serves the web view of the emulators (`telemon top --web`, or in `--plain` mode a
/// `telemon serve` beside the per-emulator telemons).
pub const WEB: &str = "127.0.0.1:9465";

/// Every emulator that exists so far, in start-up order.
pub const SIMS: &[Sim] = &[
    // one entry per protocol
    Sim {
        name: "smon",
        package: "smon-sim",
        bin: "smon-sim",
        // Real /proc figures every second on a loopback port; telemon shows the changed rows of each
        // sample, retrying while the emulator starts and reconnecting if it restarts.
        args: &["--listen", "127.0.0.1:7399", "--interval", "1s"],
        telemon: &["smon", "connect", "127.0.0.1:7399", "--wait", "60s", "--reconnect"],
        fleet: "[[smon]]\nname = \"smon\"\nconnect = \"127.0.0.1:7399\"\n",
        protocol: "smon",
        serves: true,
    },
    Sim {
        name: "dyalog",
        package: "dyalog-sim",
        bin: "dyalog-sim",
        // SERVE on the loopback port of the docs' HMON_INIT example, with a UserMessage every 10 s;
        // telemon polls two facts, prints two kinds of events, and keeps retrying until the emulator listens.
        args: &["--serve", "127.0.0.1:4512", "--user-message-every", "10s"],
        telemon: &[
            "hmon",
            "connect",
            "127.0.0.1:4512",
            "--reconnect",
            "--poll",
            "5s",
            "--facts",
            "Workspace,ThreadCount",
            "--subscribe",
            "WorkspaceResize,UntrappedSignal",
        ],
        fleet: "[[hmon]]\nname = \"dyalog\"\nconnect = \"127.0.0.1:4512\"\n",
        protocol: "hmon",
        serves: true,
    },
    Sim {
        name: "rvos",
        package: "rvos-sim",
        bin: "rvos-sim",
        // The host transport on TCP; telemon asks for a fresh process table every 2 s (and retries until
        // the emulator listens).
        args: &["--listen", "127.0.0.1:7461"],
        telemon: &["sysinfo", "--connect", "127.0.0.1:7461", "--watch", "2s", "ps"],
        fleet: "[[sysinfo]]\nname = \"rvos\"\nconnect = \"127.0.0.1:7461\"\n",
        protocol: "sysinfo",
        serves: true,
    },
    Sim {
        name: "sys161",
        package: "sys161-sim",
        bin: "sys161-sim",
        // Like sys161, it serves .sockets/meter in its working directory (the workspace root).
        args: &["--dir", "."],
        telemon: &["meter161", "--dir", ".", "--interval", "1s"],
        fleet: "[[meter161]]\nname = \"sys161\"\ndir = \".\"\n",
        protocol: "meter161",
        serves: true,
    },
    Sim {
        name: "mono",
        package: "mono-agent-sim",
        bin: "mono-agent-sim",
        // The real agent's default inspector address; the agent retries until telemon listens.
        args: &[
            "--address",
            "127.0.0.1:8888",
            "--interval",
            "1000",
            "--counters",
            "Mono JIT/Compiled methods;Mono GC/Minor GC collections;Mono System/Working Set;Mono System/Total Time",
        ],
        telemon: &["mono", "listen", "127.0.0.1:8888", "--add", "Mono System/Page Faults"],
        fleet: "[[mono_listen]]\nname = \"mono\"\nlisten = \"127.0.0.1:8888\"\nadd = [\"Mono System/Page Faults\"]\n",
        protocol: "mono",
        serves: false,
    },
];

/// The sim of `protocol` (a fleet protocol's name).
pub fn of_protocol(protocol: &str) -> Option<&'static Sim> {
    SIMS.iter().find(|s| s.protocol == protocol)
}
