//! Bytes from a Mono agent, as the inspector decodes them (see `mono_counters::fuzz::agent_stream`).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| mono_counters::fuzz::agent_stream(data));
