//! An `arbitrary` sequence of handshake frames, requests, responses and reconnections driving `hmon::proto`:
//! see `hmon::fuzz::proto`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| hmon::fuzz::proto(data));
