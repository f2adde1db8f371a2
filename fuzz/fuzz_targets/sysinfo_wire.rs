//! rvos-wire values and host-transport frames from arbitrary bytes: see `sysinfo_wire::fuzz::wire`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| sysinfo_wire::fuzz::wire(data));
