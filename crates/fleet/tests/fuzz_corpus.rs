//! Replays the committed seed corpus of the fuzz target `fleet_file_sd` through the same function on stable
//! (`cargo xtask fuzz` grows it).

#[test]
fn fleet_file_sd_corpus_replays() {
    bench_harness::corpus::replay("fleet_file_sd", 4000, telemon_fleet::fuzz::file_sd);
}
