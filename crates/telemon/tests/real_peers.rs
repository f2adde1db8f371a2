//! Recordings of real peers, replayed through the decoders and the fleet collectors and checked against
//! the peer's own figures. The recordings and what produced them are in `tests/peers/*/README.md`.

mod support;

#[path = "real_peers/mono.rs"]
mod mono;
#[path = "real_peers/rvos.rs"]
mod rvos;
#[path = "real_peers/sys161.rs"]
mod sys161;
