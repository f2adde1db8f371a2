//! Recordings of real peers, replayed through the decoders and the fleet collectors and checked against the peer's own figures.
#[path = "real_peers/mono.rs"]
mod mono;
mod support;
