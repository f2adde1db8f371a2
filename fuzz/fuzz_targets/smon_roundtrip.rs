#![no_main]
use libfuzzer_sys::fuzz_target;

// Structured input: the first byte picks the options, the rest drives a generator of valid samples
// (names with fixed kinds, index vectors, u64 edge values, strings full of 0xFF).
fuzz_target!(|data: &[u8]| smon_codec::fuzz::roundtrip(data));
