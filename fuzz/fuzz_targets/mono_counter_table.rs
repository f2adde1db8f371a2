//! An `arbitrary` sequence of Hellos, adds, removes and samples driving a `CounterTable`, directly and through
//! the inspector's codec: see `mono_counters::fuzz::counter_table`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| mono_counters::fuzz::counter_table(data));
