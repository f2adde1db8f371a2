//! The typed messages of both directions, the counter model and the wire constants.

use std::fmt;

/// The only protocol version ("0.1" is sent as the short `1`).
pub const PROTOCOL_VERSION: i16 = 1;

/// Whether `first`, the first bytes an agent sent on a connection (or the start of a counters file), can start
/// a Mono agent's stream: a Hello, `[0]` then a version from 1 to 255 as a little-endian short (this crate
/// speaks [`PROTOCOL_VERSION`]; another one is an agent of another version), then a header count that is not
/// negative. `None` while the bytes seen fit one but are too few to tell. It looks at 5 bytes at most.
///
/// ```
/// assert_eq!(mono_counters::sniff(&[0x00, 0x01, 0x00, 0x02, 0x00]), Some(true));
/// assert_eq!(mono_counters::sniff(&[0x00, 0x01]), None);
/// assert_eq!(mono_counters::sniff(b"GET / HTTP/1.1\r\n"), Some(false));
/// ```
pub fn sniff(first: &[u8]) -> Option<bool> {
    match first {
        [] | [agent_op::HELLO] => None,
        [op, ..] if *op != agent_op::HELLO => Some(false),
        // Version 0 (an HMON frame's length starts so).
        [_, 0, ..] => Some(false),
        [_, _] => None,
        [_, _, version_high, ..] if *version_high != 0 => Some(false),
        [_, _, _, _, count_high, ..] => Some(count_high & 0x80 == 0),
        _ => Some(true),
    }
}

/// Agent-to-inspector opcodes (the same under both request numberings).
pub mod agent_op {
    /// Hello, first message of a connection.
    pub const HELLO: u8 = 0;
    /// List response.
    pub const LIST: u8 = 1;
    /// Add response.
    pub const ADD: u8 = 2;
    /// Remove response.
    pub const REMOVE: u8 = 3;
    /// Sampling.
    pub const SAMPLING: u8 = 4;
}

/// The Good Bye command byte (both numberings).
pub const GOOD_BYE: u8 = 127;

/// The terminator of a Sampling message's value list (index -1).
pub const END_OF_VALUES: i16 = -1;

/// Which inspector-to-agent request opcodes are on the wire.
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RequestOpcodes {
    /// The real agent's numbering: List 0, Add 1, Remove 2 (the default).
    #[default]
    Agent,
    /// The gist's numbering, for old inspectors: List 1, Add 2, Remove 3.
    Gist,
}

impl RequestOpcodes {
    /// The List request byte.
    pub const fn list(self) -> u8 {
        match self {
            RequestOpcodes::Agent => 0,
            RequestOpcodes::Gist => 1,
        }
    }
    /// The Add request byte.
    pub const fn add(self) -> u8 {
        self.list() + 1
    }
    /// The Remove request byte.
    pub const fn remove(self) -> u8 {
        self.list() + 2
    }
}

macro_rules! ordinal_enum {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident = $value:literal => $label:literal),* $(,)? }) => {
        $(#[$doc])*
        #[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum $name {
            $($(#[$vdoc])* $variant,)*
            /// A value outside the known ordinals, kept as sent.
            Unknown(i32),
        }

        impl $name {
            /// The enum for a raw wire int (unknown values are kept).
            pub const fn from_raw(raw: i32) -> Self {
                match raw {
                    $($value => $name::$variant,)*
                    other => $name::Unknown(other),
                }
            }
            /// The raw wire int.
            pub const fn raw(self) -> i32 {
                match self {
                    $($name::$variant => $value,)*
                    $name::Unknown(raw) => raw,
                }
            }
            /// The name the agent uses, `None` for unknown values.
            pub const fn label(self) -> Option<&'static str> {
                match self {
                    $($name::$variant => Some($label),)*
                    $name::Unknown(_) => None,
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                match self.label() {
                    Some(label) => f.write_str(label),
                    None => write!(f, "{}({})", stringify!($name), self.raw()),
                }
            }
        }
    };
}

ordinal_enum! {
    /// A counter's category (`MonoCounterCategory` of `mono-counters-internals.h`).
    Category {
        /// "Mono JIT".
        Jit = 0 => "Mono JIT",
        /// "Mono GC".
        Gc = 1 => "Mono GC",
        /// "Mono Metadata".
        Metadata = 2 => "Mono Metadata",
        /// "Mono Generics".
        Generics = 3 => "Mono Generics",
        /// "Mono Security".
        Security = 4 => "Mono Security",
        /// "Mono Thread".
        Thread = 5 => "Mono Thread",
        /// "Mono ThreadPool".
        ThreadPool = 6 => "Mono ThreadPool",
        /// "Mono System".
        System = 7 => "Mono System",
        /// Any other category string; the agent names such counters `"<category>:<name>"`.
        Custom = 8 => "Custom",
    }
}

impl Category {
    /// The category for a category string as used by List, Add and `counters=`: one of the eight
    /// "Mono ..." names, or [`Category::Custom`] for anything else.
    pub fn from_name(name: &str) -> Category {
        (0..8).map(Category::from_raw).find(|c| c.label() == Some(name)).unwrap_or(Category::Custom)
    }
}

ordinal_enum! {
    /// A counter's value type (`MonoCounterType`).
    CounterType {
        /// 4-byte signed int.
        Int = 0 => "int",
        /// 8-byte signed long.
        Long = 1 => "long",
        /// Pointer-sized int, 4 or 8 bytes depending on the agent.
        Word = 2 => "word",
        /// 8-byte IEEE-754 double.
        Double = 3 => "double",
    }
}

ordinal_enum! {
    /// A counter's unit (`MonoCounterUnit`).
    Unit {
        /// A plain number.
        None = 0 => "none",
        /// Bytes.
        Bytes = 1 => "bytes",
        /// Time in 100 ns ticks.
        Time = 2 => "time",
        /// A count of events.
        Events = 3 => "events",
        /// A configuration value.
        Config = 4 => "config",
        /// A percentage.
        Percentage = 5 => "percentage",
    }
}

ordinal_enum! {
    /// How a counter's value changes (`MonoCounterVariance`).
    Variance {
        /// Never changes.
        Constant = 1 => "constant",
        /// Only grows.
        Monotonic = 2 => "monotonic",
        /// Goes up and down.
        Variable = 3 => "variable",
    }
}

/// Describes a counter that samples will carry, under its `index`.
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Header {
    /// The category.
    pub category: Category,
    /// The counter's name (for custom counters `"<category>:<name>"`).
    pub name: String,
    /// The value type.
    pub kind: CounterType,
    /// The unit.
    pub unit: Unit,
    /// The variance.
    pub variance: Variance,
    /// The handle used in samples and Remove requests.
    pub index: i16,
}

impl Header {
    /// `"Category/Name"`, the form `counters=`, `--add` and telemon's JSON use. A custom counter's
    /// `"<category>:<name>"` becomes `"<category>/<name>"`.
    pub fn full_name(&self) -> String {
        match self.category {
            Category::Custom => match self.name.split_once(':') {
                Some((cat, name)) => format!("{cat}/{name}"),
                None => format!("Custom/{}", self.name),
            },
            other => format!("{other}/{}", self.name),
        }
    }
}

/// A counter as named by List and Add: category string, then name.
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CounterName {
    /// The category string ("Mono JIT", ..., or a custom one).
    pub category: String,
    /// The counter's name.
    pub name: String,
}

impl CounterName {
    /// A counter name from its two parts.
    pub fn new(category: impl Into<String>, name: impl Into<String>) -> Self {
        CounterName { category: category.into(), name: name.into() }
    }

    /// Parses `"Category/Name"` (split at the first `/`).
    pub fn parse(s: &str) -> Option<Self> {
        let (category, name) = s.split_once('/')?;
        (!category.is_empty() && !name.is_empty()).then(|| CounterName::new(category, name))
    }
}

impl fmt::Display for CounterName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.category, self.name)
    }
}

/// One counter value, decoded by its size and its counter's type.
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CounterValue {
    /// INT, 4 bytes.
    Int(i32),
    /// LONG, 8 bytes.
    Long(i64),
    /// WORD from a 32-bit agent, 4 bytes.
    Word32(i32),
    /// WORD from a 64-bit agent, 8 bytes.
    Word64(i64),
    /// DOUBLE, 8 bytes IEEE-754.
    Double(f64),
}

impl CounterValue {
    /// The number of bytes on the wire.
    pub const fn size(&self) -> usize {
        match self {
            CounterValue::Int(_) | CounterValue::Word32(_) => 4,
            CounterValue::Long(_) | CounterValue::Word64(_) | CounterValue::Double(_) => 8,
        }
    }

    /// The value as a float (for display and arithmetic).
    pub fn as_f64(&self) -> f64 {
        match *self {
            CounterValue::Int(v) | CounterValue::Word32(v) => v as f64,
            CounterValue::Long(v) | CounterValue::Word64(v) => v as f64,
            CounterValue::Double(v) => v,
        }
    }

    /// The type this value belongs to.
    pub const fn kind(&self) -> CounterType {
        match self {
            CounterValue::Int(_) => CounterType::Int,
            CounterValue::Long(_) => CounterType::Long,
            CounterValue::Word32(_) | CounterValue::Word64(_) => CounterType::Word,
            CounterValue::Double(_) => CounterType::Double,
        }
    }

    /// The little-endian wire bytes.
    pub fn to_le_bytes(&self) -> Vec<u8> {
        match *self {
            CounterValue::Int(v) | CounterValue::Word32(v) => v.to_le_bytes().to_vec(),
            CounterValue::Long(v) | CounterValue::Word64(v) => v.to_le_bytes().to_vec(),
            CounterValue::Double(v) => v.to_le_bytes().to_vec(),
        }
    }
}

impl fmt::Display for CounterValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CounterValue::Int(v) | CounterValue::Word32(v) => write!(f, "{v}"),
            CounterValue::Long(v) | CounterValue::Word64(v) => write!(f, "{v}"),
            CounterValue::Double(v) => write!(f, "{v}"),
        }
    }
}

/// The payload of one Sampling value: typed, or the raw bytes of a counter whose type is unknown.
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[derive(Debug, Clone, PartialEq)]
pub enum ValueData {
    /// A value of a known type.
    Typed(CounterValue),
    /// The bytes of a value whose counter has an unknown type, kept as sent.
    Raw(Vec<u8>),
}

impl ValueData {
    /// The number of bytes on the wire.
    pub fn size(&self) -> usize {
        match self {
            ValueData::Typed(v) => v.size(),
            ValueData::Raw(b) => b.len(),
        }
    }

    /// The typed value, if the type is known.
    pub fn typed(&self) -> Option<CounterValue> {
        match self {
            ValueData::Typed(v) => Some(*v),
            ValueData::Raw(_) => None,
        }
    }
}

impl From<CounterValue> for ValueData {
    fn from(v: CounterValue) -> Self {
        ValueData::Typed(v)
    }
}

/// One `[index][size][bytes]` entry of a Sampling message.
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[derive(Debug, Clone, PartialEq)]
pub struct SampleValue {
    /// The counter's index (from its header).
    pub index: i16,
    /// The value.
    pub data: ValueData,
}

/// A Sampling message: the values that changed since the last sample, at `timestamp`.
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// 100 ns ticks; the epoch depends on the agent's build, so treat it as relative.
    pub timestamp: i64,
    /// The values whose bytes changed (all of them in a counter's first sample).
    pub values: Vec<SampleValue>,
}

/// The agent's first message.
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// The protocol version (always [`PROTOCOL_VERSION`]).
    pub version: i16,
    /// The counters sampled from the start.
    pub headers: Vec<Header>,
}

/// The status byte of a response.
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    /// 0: done.
    Ok,
    /// 1: failed (no agent sends it, but it decodes).
    Nok,
    /// 2: no such counter.
    NotFound,
    /// 3: the counter is already sampled.
    Existing,
}

impl Status {
    /// The wire byte.
    pub const fn byte(self) -> u8 {
        match self {
            Status::Ok => 0,
            Status::Nok => 1,
            Status::NotFound => 2,
            Status::Existing => 3,
        }
    }

    /// The status for a wire byte.
    pub const fn from_byte(b: u8) -> Option<Status> {
        match b {
            0 => Some(Status::Ok),
            1 => Some(Status::Nok),
            2 => Some(Status::NotFound),
            3 => Some(Status::Existing),
            _ => None,
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Status::Ok => "OK",
            Status::Nok => "NOK",
            Status::NotFound => "NOTFOUND",
            Status::Existing => "EXISTING",
        })
    }
}

/// The answer to an Add request: a header only on OK.
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AddResponse {
    /// Added; samples will carry it under `header.index`.
    Ok(Header),
    /// `[2][1]`: failed (decoded, never sent by the real agent).
    Nok,
    /// `[2][2]`: no such counter.
    NotFound,
    /// `[2][3]`: already sampled (the real agent closes the connection instead).
    Existing,
}

impl AddResponse {
    /// The status byte's meaning.
    pub fn status(&self) -> Status {
        match self {
            AddResponse::Ok(_) => Status::Ok,
            AddResponse::Nok => Status::Nok,
            AddResponse::NotFound => Status::NotFound,
            AddResponse::Existing => Status::Existing,
        }
    }
}

/// A message from the agent to the inspector.
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[derive(Debug, Clone, PartialEq)]
pub enum AgentMessage {
    /// `[0][version][count][headers]`.
    Hello(Hello),
    /// `[1]([category][name])* [ff ff ff ff]`.
    List(Vec<CounterName>),
    /// `[2][status]([header] on OK)`.
    Add(AddResponse),
    /// `[3][status]`.
    Remove(Status),
    /// `[4][timestamp]([index][size][bytes])* [ff ff]`.
    Sampling(Sample),
}

impl AgentMessage {
    /// The message's kind, for logs and errors.
    pub fn kind(&self) -> &'static str {
        match self {
            AgentMessage::Hello(_) => "hello",
            AgentMessage::List(_) => "list response",
            AgentMessage::Add(_) => "add response",
            AgentMessage::Remove(_) => "remove response",
            AgentMessage::Sampling(_) => "sampling",
        }
    }
}

/// A message from the inspector to the agent.
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InspectorMessage {
    /// List every counter the agent can sample.
    List,
    /// `[op][category][name]`: sample one more counter.
    Add(CounterName),
    /// `[op][index]`: stop sampling a counter; a negative index removes all of them.
    Remove(i16),
    /// `[127]`: the agent closes without replying.
    GoodBye,
    /// A command byte the agent does not know: it logs it and reads nothing after it.
    Unknown(u8),
}

#[cfg(test)]
mod sniff_tests {
    use super::sniff;

    #[test]
    fn the_first_bytes_of_other_protocols_are_not_a_mono_agent() {
        assert_eq!(sniff(&[0x00, 0x01, 0x00, 0x02, 0x00, 0x00]), Some(true));
        assert_eq!(sniff(&[0x00, 0x02, 0x00]), Some(true), "an agent of another version");
        for unsure in [&[][..], &[0x00], &[0x00, 0x01]] {
            assert_eq!(sniff(unsure), None);
        }
        let others: [&[u8]; 7] = [
            b"\0\0\0\x1bHMONSupportedProtocols=2",
            b"\xff\xff\xff\xff\xff\xff\xff\xff",
            b"HELLO 2\r\n",
            b"\x01\0\0\0\0",
            b"GET / HTTP/1.1\r\n",
            &[0x04, 0x01, 0x00], // a Sampling: an agent's stream starts with its Hello
            &[0x00, 0x01, 0x00, 0x00, 0x80], // a negative header count
        ];
        for other in others {
            assert_eq!(sniff(other), Some(false), "{:?}", other.escape_ascii().to_string());
        }
    }
}
