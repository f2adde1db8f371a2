//! Bytes from a Mono inspector, as the agent decodes them (see `mono_counters::fuzz::inspector_stream`).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| mono_counters::fuzz::inspector_stream(data));
