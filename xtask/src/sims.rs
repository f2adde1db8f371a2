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
}

/// Every emulator that exists so far, in start-up order.
pub const SIMS: &[Sim] = &[
    // one entry per protocol
];
