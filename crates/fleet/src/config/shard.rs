//! `[serve] shard`: which share of the targets an instance collects.

use serde::{Deserialize, Deserializer};

/// An instance's share of the targets: `index` of `count` (1-based), written `"2/4"`.
///
/// A target belongs to shard `1 + fnv1a64(name) % count`, where `fnv1a64` is the 64-bit FNV-1a
/// hash of the target name's UTF-8 bytes (offset basis `0xcbf29ce484222325`, prime
/// `0x100000001b3`). This function is part of the config's contract: it never changes, so the
/// same config splits the same way on every release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// This instance's shard, 1..=count.
    pub index: u32,
    /// How many shards there are.
    pub count: u32,
}

impl Shard {
    /// Parses `"I/N"` with `1 <= I <= N`.
    pub fn parse(s: &str) -> Result<Shard, String> {
        let bad = || format!("bad shard {s:?}; write INDEX/COUNT, e.g. \"2/4\" (1 <= INDEX <= COUNT)");
        let (i, n) = s.trim().split_once('/').ok_or_else(bad)?;
        let index: u32 = i.trim().parse().map_err(|_| bad())?;
        let count: u32 = n.trim().parse().map_err(|_| bad())?;
        if count == 0 || index == 0 || index > count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }

    /// Whether the target named `name` belongs to this shard.
    pub fn owns(&self, name: &str) -> bool {
        fnv1a64(name.as_bytes()) % u64::from(self.count) == u64::from(self.index - 1)
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl std::str::FromStr for Shard {
    type Err = String;
    fn from_str(s: &str) -> Result<Shard, String> {
        Shard::parse(s)
    }
}

/// 64-bit FNV-1a: the shard hash (see [`Shard`]).
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Deserializes an optional shard written `"I/N"`.
pub fn shard_option<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Shard>, D::Error> {
    let s = String::deserialize(d)?;
    Shard::parse(&s).map(Some).map_err(serde::de::Error::custom)
}
