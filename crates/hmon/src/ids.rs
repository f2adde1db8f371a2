//! Facts and events, referred to by numeric ID or by name.

use std::fmt;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A fact or event as a request names it: `3` or `"Workspace"`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum IdOrName {
    /// The numeric ID.
    Id(i64),
    /// The name.
    Name(String),
}

impl From<FactKind> for IdOrName {
    fn from(kind: FactKind) -> Self {
        IdOrName::Name(kind.name().to_owned())
    }
}

impl From<EventKind> for IdOrName {
    fn from(kind: EventKind) -> Self {
        IdOrName::Name(kind.name().to_owned())
    }
}

impl fmt::Display for IdOrName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IdOrName::Id(id) => write!(f, "{id}"),
            IdOrName::Name(name) => f.write_str(name),
        }
    }
}

impl IdOrName {
    /// Parses a command-line word: digits are an ID, anything else a name.
    pub fn parse_word(word: &str) -> Self {
        match word.trim().parse::<i64>() {
            Ok(id) => IdOrName::Id(id),
            Err(_) => IdOrName::Name(word.trim().to_owned()),
        }
    }
}

impl Serialize for IdOrName {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            IdOrName::Id(id) => s.serialize_i64(*id),
            IdOrName::Name(name) => s.serialize_str(name),
        }
    }
}

impl<'de> Deserialize<'de> for IdOrName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = IdOrName;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a numeric ID or a name")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<IdOrName, E> {
                Ok(IdOrName::Id(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<IdOrName, E> {
                i64::try_from(v)
                    .map(IdOrName::Id)
                    .map_err(|_| E::invalid_value(de::Unexpected::Unsigned(v), &self))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<IdOrName, E> {
                Ok(IdOrName::Name(v.to_owned()))
            }
        }
        d.deserialize_any(V)
    }
}

macro_rules! kinds {
    ($(#[$meta:meta])* $kind:ident { $($(#[$vmeta:meta])* $variant:ident = $id:literal,)* }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $kind {
            $($(#[$vmeta])* $variant = $id,)*
        }

        impl $kind {
            /// Every known kind, in ID order.
            pub const ALL: &'static [$kind] = &[$($kind::$variant),*];

            /// The numeric ID.
            pub fn id(self) -> i64 {
                self as i64
            }

            /// The name, as the spec spells it.
            pub fn name(self) -> &'static str {
                match self { $($kind::$variant => stringify!($variant),)* }
            }

            /// The kind with this numeric ID.
            pub fn from_id(id: i64) -> Option<Self> {
                match id { $($id => Some($kind::$variant),)* _ => None }
            }

            /// The kind with this name (exact spelling, as the interpreter compares it).
            pub fn from_name(name: &str) -> Option<Self> {
                match name { $(stringify!($variant) => Some($kind::$variant),)* _ => None }
            }

            /// The kind an ID or a name refers to.
            pub fn resolve(r: &IdOrName) -> Option<Self> {
                match r {
                    IdOrName::Id(id) => Self::from_id(*id),
                    IdOrName::Name(name) => Self::from_name(name),
                }
            }
        }

        impl fmt::Display for $kind {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

kinds! {
    /// The facts `GetFacts` and `PollFacts` can ask for (IDs 1–6; no others exist in 19.0 or 20.0).
    FactKind {
        /// Machine, interpreter, comms layer and RIDE facts.
        Host = 1,
        /// Elements of `⎕AI`.
        AccountInformation = 2,
        /// Workspace statistics from `2000⌶`.
        Workspace = 3,
        /// Every thread with its stack (a `Values` array).
        Threads = 4,
        /// The suspended threads (a `Values` array).
        SuspendedThreads = 5,
        /// Thread totals.
        ThreadCount = 6,
    }
}

kinds! {
    /// The events `Subscribe` can enable (IDs 1–4; the demo's 5 `ThreadSwitch` and 6 `All` are not in any spec).
    EventKind {
        /// A workspace compaction happened.
        WorkspaceCompaction = 1,
        /// The workspace grew or shrank.
        WorkspaceResize = 2,
        /// An APL exception was signalled and not trapped.
        UntrappedSignal = 3,
        /// An APL exception was signalled and trapped.
        TrappedSignal = 4,
    }
}

impl FactKind {
    /// Whether the fact carries a `Values` array (Threads, SuspendedThreads) rather than a `Value` object.
    pub fn is_list(self) -> bool {
        matches!(self, FactKind::Threads | FactKind::SuspendedThreads)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_names_agree() {
        for kind in FactKind::ALL {
            assert_eq!(FactKind::from_id(kind.id()), Some(*kind));
            assert_eq!(FactKind::from_name(kind.name()), Some(*kind));
        }
        assert_eq!(EventKind::from_id(5), None, "ThreadSwitch is not in the spec");
        assert_eq!(EventKind::from_name("All"), None);
        assert_eq!(FactKind::resolve(&IdOrName::parse_word("3")), Some(FactKind::Workspace));
        assert_eq!(FactKind::resolve(&IdOrName::parse_word("Host")), Some(FactKind::Host));
    }
}
