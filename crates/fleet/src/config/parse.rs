//! What every part of the config uses: the error that names file, line and key, durations, lines.

use std::time::Duration;

use serde::{Deserialize, Deserializer};

/// A configuration that cannot be used: names the file, the line and the key.
///
/// It reads `FILE:LINE: KEY: why`; a line of 0 (not known, or a command-line flag) and a key of `-` or `""`
/// (the whole file) are left out: `FILE: why`, `<flags>: --listen: why`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    /// The config file (or `<flags>` for shorthand flags).
    pub file: String,
    /// 1-based line of the offending key (0 when unknown).
    pub line: usize,
    /// The offending key.
    pub key: String,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.file)?;
        if self.line > 0 {
            write!(f, ":{}", self.line)?;
        }
        if !self.key.is_empty() && self.key != "-" {
            write!(f, ": {}", self.key)?;
        }
        write!(f, ": {}", self.message)
    }
}

/// A humantime duration ("1s", "250ms").
pub(crate) fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let s = String::deserialize(d)?;
    humantime::parse_duration(&s).map_err(|e| {
        serde::de::Error::custom(format!("bad duration {s:?} ({e}); write e.g. \"1s\" or \"250ms\""))
    })
}

/// The 1-based line of byte `offset` in `text`.
pub fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())].iter().filter(|&&b| b == b'\n').count() + 1
}

/// The lines of a text, to find the line of many offsets: [`line_of`] counts from the start each time, which
/// for every key of a file of 10,000 blocks took 15 s.
#[derive(Debug)]
pub struct LineIndex(Vec<usize>);

impl LineIndex {
    /// Where each of `text`'s newlines is.
    pub fn new(text: &str) -> LineIndex {
        LineIndex(text.bytes().enumerate().filter(|&(_, b)| b == b'\n').map(|(i, _)| i).collect())
    }

    /// The line (from 1) of byte `offset`, as [`line_of`] gives it.
    pub fn line(&self, offset: usize) -> usize {
        self.0.partition_point(|&newline| newline < offset) + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn the_index_gives_the_line_that_counting_gives(text in "[a\n=\"]{0,64}", offsets in prop::collection::vec(0usize..80, 1..16)) {
            let index = LineIndex::new(&text);
            for offset in offsets {
                prop_assert_eq!(index.line(offset), line_of(&text, offset), "{:?} at {}", text, offset);
            }
        }
    }
}
