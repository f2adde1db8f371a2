//! Report text chunked anywhere, reassembled and parsed as every command: see `sysinfo_wire::fuzz::reports`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| sysinfo_wire::fuzz::reports(data));
