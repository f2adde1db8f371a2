//! Replays the committed seed corpora of the fuzz targets `fleet_file_sd` and `fleet_probe_allow` through the
//! same functions on stable (`cargo xtask fuzz` grows them).

#[test]
fn fleet_file_sd_corpus_replays() {
    bench_harness::corpus::replay("fleet_file_sd", 4000, telemon_fleet::fuzz::file_sd);
}

#[test]
fn fleet_probe_allow_corpus_replays() {
    bench_harness::corpus::replay("fleet_probe_allow", 400, telemon_fleet::fuzz::probe_allow);
}
