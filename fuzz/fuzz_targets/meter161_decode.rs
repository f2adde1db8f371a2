//! Server lines and client commands from arbitrary bytes, whole and split: see `meter161::fuzz::decode`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| meter161::fuzz::decode(data));
