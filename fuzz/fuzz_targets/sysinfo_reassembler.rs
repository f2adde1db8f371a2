//! An `arbitrary` sequence of chunks, sentinels, closes and restarts driving a `Reassembler`: see
//! `sysinfo_wire::fuzz::reassembler`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| sysinfo_wire::fuzz::reassembler(data));
