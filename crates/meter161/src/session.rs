//! The client's protocol state machine, sans IO: it turns decoded [`ServerMessage`]s into a
//! [`Header`] and [`Sample`]s with per-field wrapping deltas.

use std::sync::Arc;

use crate::error::ProtocolError;
use crate::message::{ServerMessage, PROTOCOL_VERSION, U32_FIELDS};

/// The fields of the current `HEAD`, their suggested widths and how each one wraps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    names: Vec<String>,
    widths: Vec<u32>,
    wraps_at_u32: Vec<bool>,
}

impl Header {
    /// A header for `names`; each width starts as the name's length until a `WIDTH` line says more.
    pub fn new(names: Vec<String>) -> Self {
        let widths = names.iter().map(|n| u32::try_from(n.len()).unwrap_or(u32::MAX)).collect();
        let wraps_at_u32 = names.iter().map(|n| U32_FIELDS.contains(&n.as_str())).collect();
        Header { names, widths, wraps_at_u32 }
    }

    /// The field names, as received.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The suggested print width of each field (from `WIDTH`, or the name's length).
    pub fn widths(&self) -> &[u32] {
        &self.widths
    }

    /// The number of fields.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether there are no fields.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// The position of field `name`.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.names.iter().position(|n| n == name)
    }

    /// Whether field `index` is one of sys161's 32-bit counters ([`U32_FIELDS`]).
    pub fn wraps_at_u32(&self, index: usize) -> bool {
        self.wraps_at_u32.get(index).copied().unwrap_or(false)
    }

    /// The per-field deltas from `previous` to `current` (equal lengths).
    ///
    /// Every delta is a wrapping u64 subtraction, except that a 32-bit counter which decreased while both
    /// values are below 2^32 wrapped at 2^32: its delta is taken modulo 2^32.
    pub fn deltas(&self, previous: &[u64], current: &[u64]) -> Vec<u64> {
        previous
            .iter()
            .zip(current)
            .enumerate()
            .map(|(i, (&prev, &cur))| {
                let fits_u32 = prev <= u64::from(u32::MAX) && cur <= u64::from(u32::MAX);
                if cur < prev && fits_u32 && self.wraps_at_u32(i) {
                    u64::from((cur as u32).wrapping_sub(prev as u32))
                } else {
                    cur.wrapping_sub(prev)
                }
            })
            .collect()
    }

    fn set_widths(&mut self, widths: Vec<u32>) {
        self.widths = widths;
    }
}

/// One `DATA` row: cumulative values and, except on the first row of a connection or header, the
/// deltas since the previous row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    header: Arc<Header>,
    values: Vec<u64>,
    deltas: Option<Vec<u64>>,
}

impl Sample {
    /// The header the row belongs to.
    pub fn header(&self) -> &Arc<Header> {
        &self.header
    }

    /// The cumulative values, one per header field.
    pub fn values(&self) -> &[u64] {
        &self.values
    }

    /// The per-field deltas since the previous row, absent on the first row.
    pub fn deltas(&self) -> Option<&[u64]> {
        self.deltas.as_deref()
    }

    /// The cumulative value of field `name`.
    pub fn get(&self, name: &str) -> Option<u64> {
        self.header.index_of(name).map(|i| self.values[i])
    }

    /// The delta of field `name`, when there is one.
    pub fn delta(&self, name: &str) -> Option<u64> {
        let i = self.header.index_of(name)?;
        self.deltas.as_ref().map(|d| d[i])
    }
}

/// What a server message changed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Update {
    /// A new `HEAD`, or new widths for the current one.
    Header(Arc<Header>),
    /// A `DATA` row.
    Sample(Sample),
}

/// The most headers [`shared`] keeps for later sessions.
const MAX_SHARED_HEADERS: usize = 16;

/// `header`, or an equal one that another session of the process holds. Every simulator of a sys161
/// version sends the same `HEAD` and `WIDTH` lines, and a program that watches many (a fleet) held a
/// copy per connection: about 700 bytes, a dozen allocations, for sys161 2.0's eleven fields. Only
/// `HEAD` and `WIDTH` come here, once or twice a connection; the table holds weak references, at
/// most [`MAX_SHARED_HEADERS`] of them.
fn shared(header: Header) -> Arc<Header> {
    static SHARED: std::sync::Mutex<Vec<std::sync::Weak<Header>>> = std::sync::Mutex::new(Vec::new());
    let mut shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(same) = shared.iter().filter_map(std::sync::Weak::upgrade).find(|h| **h == header) {
        return same;
    }
    shared.retain(|h| h.strong_count() > 0);
    let header = Arc::new(header);
    if shared.len() < MAX_SHARED_HEADERS {
        shared.push(Arc::downgrade(&header));
    }
    header
}

/// The state of one connection, fed with decoded messages.
///
/// ```
/// use meter161::{ServerMessage, Session, Update};
///
/// let mut session = Session::new();
/// session.handle(ServerMessage::Hello(2)).unwrap();
/// session.handle(ServerMessage::Head(vec!["nsec".into(), "irqs".into()])).unwrap();
/// session.handle(ServerMessage::Data(vec![100, 4294967290])).unwrap();
/// let Some(Update::Sample(s)) = session.handle(ServerMessage::Data(vec![300, 5])).unwrap() else { panic!() };
/// assert_eq!(s.deltas(), Some(&[200, 11][..]));
/// ```
#[derive(Debug, Clone, Default)]
pub struct Session {
    version: Option<u32>,
    header: Option<Arc<Header>>,
    previous: Option<Vec<u64>>,
}

impl Session {
    /// A fresh session (a new connection).
    pub fn new() -> Self {
        Self::default()
    }

    /// The version from `HELLO`, once received.
    pub fn version(&self) -> Option<u32> {
        self.version
    }

    /// The current header, once a `HEAD` arrived.
    pub fn header(&self) -> Option<&Arc<Header>> {
        self.header.as_ref()
    }

    /// Applies one message. `Ok(None)` means nothing to report (`HELLO 2`, `OK`).
    ///
    /// Errors are per message: the session stays usable, except after a fatal one
    /// ([`ProtocolError::is_fatal`]), after which the caller should close the connection.
    pub fn handle(&mut self, msg: ServerMessage) -> Result<Option<Update>, ProtocolError> {
        match msg {
            ServerMessage::Hello(version) => {
                self.version = Some(version);
                if version != PROTOCOL_VERSION {
                    return Err(ProtocolError::UnsupportedVersion { got: version });
                }
                Ok(None)
            }
            ServerMessage::Head(names) if names.is_empty() => Err(ProtocolError::EmptyHead),
            ServerMessage::Head(names) => {
                let header = shared(Header::new(names));
                self.header = Some(Arc::clone(&header));
                self.previous = None;
                Ok(Some(Update::Header(header)))
            }
            ServerMessage::Width(widths) => {
                let header = self.header.as_mut().ok_or(ProtocolError::WidthBeforeHead)?;
                if widths.len() != header.len() {
                    return Err(ProtocolError::WidthCount { expected: header.len(), got: widths.len() });
                }
                let mut with_widths = Header::clone(header);
                with_widths.set_widths(widths);
                *header = shared(with_widths);
                Ok(Some(Update::Header(Arc::clone(header))))
            }
            ServerMessage::Data(values) => {
                let header = self.header.as_ref().ok_or(ProtocolError::DataBeforeHead)?;
                if values.len() != header.len() {
                    return Err(ProtocolError::FieldCount { expected: header.len(), got: values.len() });
                }
                let deltas = self.previous.as_deref().map(|prev| header.deltas(prev, &values));
                // Reuse the previous row's buffer rather than allocating a copy per row.
                let previous = self.previous.get_or_insert_with(|| Vec::with_capacity(values.len()));
                previous.clear();
                previous.extend_from_slice(&values);
                Ok(Some(Update::Sample(Sample { header: Arc::clone(header), values, deltas })))
            }
            ServerMessage::Ok => Ok(None),
            ServerMessage::Bad(text) => Err(ProtocolError::Rejected { text }),
            ServerMessage::Error(text) => Err(ProtocolError::ServerError { text }),
            ServerMessage::Unknown(line) => Err(ProtocolError::UnknownMessage { line }),
        }
    }
}

/// `{"nsec": 1, ..., "delta": {"nsec": 1, ...}}`: the values under their `HEAD` names, in `HEAD` order, then the
/// deltas since the previous row (absent on the first row).
#[cfg(feature = "serde")]
impl serde::Serialize for Sample {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;

        struct Fields<'a>(&'a [String], &'a [u64]);

        impl serde::Serialize for Fields<'_> {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                let mut map = serializer.serialize_map(Some(self.0.len()))?;
                for (name, value) in self.0.iter().zip(self.1) {
                    map.serialize_entry(name, value)?;
                }
                map.end()
            }
        }

        let names = self.header.names();
        let mut map = serializer.serialize_map(None)?;
        for (name, value) in names.iter().zip(&self.values) {
            map.serialize_entry(name, value)?;
        }
        if let Some(deltas) = &self.deltas {
            map.serialize_entry("delta", &Fields(names, deltas))?;
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(names: &[&str]) -> Header {
        Header::new(names.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn u64_fields_wrap_at_2_pow_64() {
        let h = header(&["nsec", "kinsns"]);
        assert_eq!(h.deltas(&[200, 7], &[u64::MAX, 9]), vec![18446744073709551415, 2]);
        assert_eq!(h.deltas(&[u64::MAX, 9], &[5, 12]), vec![6, 3]);
    }

    #[test]
    fn u32_fields_wrap_at_2_pow_32() {
        let h = header(&["irqs", "net", "kinsns"]);
        assert_eq!(
            h.deltas(&[4294967290, 4294967295, 4294967290], &[5, 0, 5]),
            vec![11, 1, 5u64.wrapping_sub(4294967290)]
        );
        // A value above 2^32 cannot come from a 32-bit counter: plain u64 arithmetic.
        assert_eq!(h.deltas(&[1 << 33, 0, 0], &[5, 0, 0]), vec![5u64.wrapping_sub(1 << 33), 0, 0]);
    }

    #[test]
    fn sessions_with_the_same_head_and_width_share_one_header() {
        let head = |s: &mut Session, names: &[&str]| {
            let names = names.iter().map(|n| n.to_string()).collect();
            let Ok(Some(Update::Header(h))) = s.handle(ServerMessage::Head(names)) else { panic!() };
            h
        };
        let width = |s: &mut Session, w: Vec<u32>| {
            let Ok(Some(Update::Header(h))) = s.handle(ServerMessage::Width(w)) else { panic!() };
            h
        };
        let (mut one, mut two, mut three) = (Session::new(), Session::new(), Session::new());
        // Names of this test alone: the other tests' sessions share the process's table.
        let names = ["shared_a", "shared_b"];
        assert!(Arc::ptr_eq(&head(&mut one, &names), &head(&mut two, &names)));
        let (w1, w2) = (width(&mut one, vec![9, 9]), width(&mut two, vec![9, 9]));
        assert!(Arc::ptr_eq(&w1, &w2) && w1.widths() == [9, 9]);
        assert!(!Arc::ptr_eq(&head(&mut three, &names), &w1), "other widths: another header");
        let other = width(&mut three, vec![9, 8]);
        assert!(!Arc::ptr_eq(&other, &w1) && other.widths() == [9, 8] && w1.widths() == [9, 9]);
    }

    #[test]
    fn a_new_head_restarts_deltas_and_width_updates_the_header() {
        let mut s = Session::new();
        assert_eq!(s.handle(ServerMessage::Data(vec![1])), Err(ProtocolError::DataBeforeHead));
        assert_eq!(s.handle(ServerMessage::Width(vec![1])), Err(ProtocolError::WidthBeforeHead));
        s.handle(ServerMessage::Head(vec!["a".into()])).unwrap();
        let Some(Update::Header(h)) = s.handle(ServerMessage::Width(vec![7])).unwrap() else { panic!() };
        assert_eq!(h.widths(), &[7]);
        assert_eq!(
            s.handle(ServerMessage::Width(vec![7, 8])),
            Err(ProtocolError::WidthCount { expected: 1, got: 2 })
        );
        s.handle(ServerMessage::Data(vec![1])).unwrap();
        s.handle(ServerMessage::Head(vec!["a".into()])).unwrap();
        let Some(Update::Sample(sample)) = s.handle(ServerMessage::Data(vec![5])).unwrap() else { panic!() };
        assert_eq!(sample.deltas(), None);
        assert_eq!(sample.get("a"), Some(5));
    }

    #[test]
    fn errors_are_typed_and_only_version_and_error_are_fatal() {
        let mut s = Session::new();
        let e = s.handle(ServerMessage::Hello(3)).unwrap_err();
        assert_eq!(e, ProtocolError::UnsupportedVersion { got: 3 });
        assert!(e.is_fatal());
        assert!(s.handle(ServerMessage::Error(None)).unwrap_err().is_fatal());
        let bad = s.handle(ServerMessage::bad("Interval too small")).unwrap_err();
        assert_eq!(bad.bad_reason(), Some(crate::BadReason::IntervalTooSmall));
        assert!(!bad.is_fatal());
        assert_eq!(s.handle(ServerMessage::Head(vec![])), Err(ProtocolError::EmptyHead));
        assert_eq!(s.handle(ServerMessage::Ok), Ok(None));
    }
}
