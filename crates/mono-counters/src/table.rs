//! The inspector's view of the counters: headers plus the last value of each, because samples
//! only carry the values that changed.

use std::collections::BTreeMap;

use crate::message::{Header, Hello, Sample, ValueData};

/// One counter and its latest value.
#[derive(Debug, Clone, PartialEq)]
pub struct Reading {
    /// The counter's header.
    pub header: Header,
    /// The last value received, `None` before its first sample.
    pub value: Option<ValueData>,
}

/// Every known counter by index, with its last value. Sans-IO: fed with decoded messages.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CounterTable {
    counters: BTreeMap<i16, Reading>,
    timestamp: Option<i64>,
}

impl CounterTable {
    /// A table holding the counters a Hello announced.
    pub fn from_hello(hello: &Hello) -> Self {
        let mut table = CounterTable::default();
        hello.headers.iter().for_each(|h| table.insert(h.clone()));
        table
    }

    /// Adds (or replaces) a counter, as after an Add response; its value starts unknown.
    pub fn insert(&mut self, header: Header) {
        self.counters.insert(header.index, Reading { header, value: None });
    }

    /// Forgets a counter after a Remove response; a negative index forgets all of them.
    pub fn remove(&mut self, index: i16) {
        if index < 0 {
            self.counters.clear();
        } else {
            self.counters.remove(&index);
        }
    }

    /// Applies a sample: each value replaces its counter's last one, absent counters keep theirs.
    /// Returns the indexes that changed. Values for unknown indexes (removed counters) are ignored.
    pub fn apply(&mut self, sample: &Sample) -> Vec<i16> {
        self.timestamp = Some(sample.timestamp);
        let mut changed = Vec::with_capacity(sample.values.len());
        for v in &sample.values {
            if let Some(reading) = self.counters.get_mut(&v.index) {
                reading.value = Some(v.data.clone());
                changed.push(v.index);
            }
        }
        changed
    }

    /// The counter at `index`.
    pub fn get(&self, index: i16) -> Option<&Reading> {
        self.counters.get(&index)
    }

    /// The counter called `full_name` (`"Category/Name"`, see [`Header::full_name`]), if known.
    pub fn find(&self, full_name: &str) -> Option<&Reading> {
        self.counters.values().find(|r| r.header.full_name() == full_name)
    }

    /// All counters in index order.
    pub fn readings(&self) -> impl Iterator<Item = &Reading> {
        self.counters.values()
    }

    /// How many counters are known.
    pub fn len(&self) -> usize {
        self.counters.len()
    }

    /// Whether no counter is known.
    pub fn is_empty(&self) -> bool {
        self.counters.is_empty()
    }

    /// The timestamp of the last sample applied.
    pub fn timestamp(&self) -> Option<i64> {
        self.timestamp
    }
}
