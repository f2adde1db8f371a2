//! An `arbitrary` sequence of server messages and raw lines driving a `Session`: see `meter161::fuzz::session`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| meter161::fuzz::session(data));
