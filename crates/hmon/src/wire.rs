//! The JSON building blocks every HMON object shares.
//!
//! HMON objects are open: the interpreter may add fields at any time, and this crate keeps the ones it
//! does not know in an `extra` map instead of failing. Known fields are all optional (the spec makes most
//! of them conditional on access level, version or state), booleans arrive as `0`/`1` (or `true`/`false`)
//! and are sent as `0`/`1`. [`wire_object!`](crate::wire_object) writes the struct, its `Deserialize`
//! (one pass over the map, keys borrowed from the input where possible, no intermediate `Value`) and its
//! `Serialize` from one field list, so the field names exist exactly once.

use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize};

/// Unknown fields of an HMON object, kept as raw JSON.
pub type Extra = serde_json::Map<String, serde_json::Value>;

/// How one field type is read from and written to a JSON object.
///
/// Implemented for the plain serde types the messages use and for `bool`, which HMON sends as `0`/`1`.
#[doc(hidden)]
pub(crate) trait WireField: Sized {
    /// Reads the value of the current map entry.
    fn read<'de, A: MapAccess<'de>>(map: &mut A) -> Result<Self, A::Error>;
    /// Writes `key: value` into the map being serialized.
    fn write<M: SerializeMap>(&self, key: &str, map: &mut M) -> Result<(), M::Error>;
}

macro_rules! plain_wire_field {
    ($($ty:ty),* $(,)?) => {$(
        impl WireField for $ty {
            fn read<'de, A: MapAccess<'de>>(map: &mut A) -> Result<Self, A::Error> {
                map.next_value()
            }
            fn write<M: SerializeMap>(&self, key: &str, map: &mut M) -> Result<(), M::Error> {
                map.serialize_entry(key, self)
            }
        }
    )*};
}

plain_wire_field!(i64, u64, String, serde_json::Value, crate::Timestamp, crate::IdOrName);

impl<T: for<'de> Deserialize<'de> + Serialize> WireField for Vec<T> {
    fn read<'de, A: MapAccess<'de>>(map: &mut A) -> Result<Self, A::Error> {
        map.next_value()
    }
    fn write<M: SerializeMap>(&self, key: &str, map: &mut M) -> Result<(), M::Error> {
        map.serialize_entry(key, self)
    }
}

/// `null` or a value: used for `DMX` and `Exception`, which the spec allows to be `null`.
impl<T: for<'de> Deserialize<'de> + Serialize> WireField for Option<T> {
    fn read<'de, A: MapAccess<'de>>(map: &mut A) -> Result<Self, A::Error> {
        map.next_value()
    }
    fn write<M: SerializeMap>(&self, key: &str, map: &mut M) -> Result<(), M::Error> {
        map.serialize_entry(key, self)
    }
}

impl WireField for bool {
    fn read<'de, A: MapAccess<'de>>(map: &mut A) -> Result<Self, A::Error> {
        map.next_value_seed(FlagSeed)
    }
    fn write<M: SerializeMap>(&self, key: &str, map: &mut M) -> Result<(), M::Error> {
        map.serialize_entry(key, &u8::from(*self))
    }
}

/// Reads an HMON boolean: `0`, `1`, `false` or `true`.
struct FlagSeed;

impl<'de> DeserializeSeed<'de> for FlagSeed {
    type Value = bool;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_any(self)
    }
}

impl Visitor<'_> for FlagSeed {
    type Value = bool;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a boolean: 0, 1, false or true")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<bool, E> {
        Ok(v)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<bool, E> {
        match v {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(E::invalid_value(de::Unexpected::Unsigned(v), &self)),
        }
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<bool, E> {
        match v {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(E::invalid_value(de::Unexpected::Signed(v), &self)),
        }
    }
}

/// An object key, borrowed from the input when it has no escapes.
#[doc(hidden)]
pub(crate) enum Key<'de> {
    /// Borrowed from the input.
    Borrowed(&'de str),
    /// Unescaped into a new string.
    Owned(String),
}

impl Key<'_> {
    /// The key text.
    pub(crate) fn as_str(&self) -> &str {
        match self {
            Key::Borrowed(s) => s,
            Key::Owned(s) => s,
        }
    }

    /// The key as an owned string.
    pub(crate) fn into_string(self) -> String {
        match self {
            Key::Borrowed(s) => s.to_owned(),
            Key::Owned(s) => s,
        }
    }
}

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key::Borrowed(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key::Owned(v.to_owned()))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key::Owned(v))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

/// Defines an open HMON object: every field optional, unknown fields kept in `extra`.
///
/// ```text
/// wire_object! {
///     /// doc
///     pub struct ThreadCount {
///         /// doc
///         total: i64 = "Total",
///     }
/// }
/// ```
#[doc(hidden)]
#[macro_export]
macro_rules! wire_object {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( $(#[$fmeta:meta])* $field:ident : $ty:ty = $key:literal, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Default)]
        pub struct $name {
            $( $(#[$fmeta])* #[doc = concat!("\n\nWire key: `", $key, "`.")] pub $field: Option<$ty>, )*
            /// Fields this crate does not know, kept as raw JSON.
            pub extra: $crate::wire::Extra,
        }

        impl $name {
            /// The wire keys of the known fields, in the order they are sent.
            pub const KEYS: &'static [&'static str] = &[$($key),*];
        }

        impl<'de> ::serde::Deserialize<'de> for $name {
            fn deserialize<D: ::serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl<'de> ::serde::de::Visitor<'de> for V {
                    type Value = $name;
                    fn expecting(&self, f: &mut ::std::fmt::Formatter) -> ::std::fmt::Result {
                        f.write_str(concat!("a ", stringify!($name), " object"))
                    }
                    fn visit_map<A: ::serde::de::MapAccess<'de>>(self, mut map: A) -> Result<$name, A::Error> {
                        #[allow(unused_mut)]
                        let mut out = $name::default();
                        while let Some(key) = map.next_key::<$crate::wire::Key<'de>>()? {
                            match key.as_str() {
                                $( $key => out.$field = Some(<$ty as $crate::wire::WireField>::read(&mut map)?), )*
                                _ => {
                                    let value: ::serde_json::Value = map.next_value()?;
                                    out.extra.insert(key.into_string(), value);
                                }
                            }
                        }
                        Ok(out)
                    }
                }
                d.deserialize_map(V)
            }
        }

        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                use ::serde::ser::SerializeMap;
                let mut map = s.serialize_map(None)?;
                $( if let Some(v) = &self.$field { $crate::wire::WireField::write(v, $key, &mut map)?; } )*
                for (k, v) in &self.extra {
                    // A known key in `extra` would be sent twice; the typed field wins.
                    if !Self::KEYS.contains(&k.as_str()) {
                        map.serialize_entry(k, v)?;
                    }
                }
                map.end()
            }
        }

        impl $crate::wire::WireField for $name {
            fn read<'de, A: ::serde::de::MapAccess<'de>>(map: &mut A) -> Result<Self, A::Error> {
                map.next_value()
            }
            fn write<M: ::serde::ser::SerializeMap>(&self, key: &str, map: &mut M) -> Result<(), M::Error> {
                map.serialize_entry(key, self)
            }
        }
    };
}

#[cfg(test)]
#[allow(unreachable_pub)]
mod tests {
    crate::wire_object! {
        /// A test object.
        pub struct Sample {
            /// A flag.
            on: bool = "On",
            /// A number.
            n: i64 = "N",
            /// Nullable.
            maybe: Option<String> = "Maybe",
        }
    }

    #[test]
    fn flags_accept_numbers_and_booleans_and_send_numbers() {
        for (text, want) in [("1", true), ("true", true), ("0", false), ("false", false)] {
            let s: Sample = serde_json::from_str(&format!(r#"{{"On":{text}}}"#)).unwrap();
            assert_eq!(s.on, Some(want), "{text}");
        }
        assert!(serde_json::from_str::<Sample>(r#"{"On":2}"#).is_err());
        assert!(serde_json::from_str::<Sample>(r#"{"On":"1"}"#).is_err());
        let s = Sample { on: Some(true), ..Default::default() };
        assert_eq!(serde_json::to_string(&s).unwrap(), r#"{"On":1}"#);
    }

    #[test]
    fn unknown_fields_are_kept_and_null_is_not_absent() {
        let text = r#"{"N":5,"Maybe":null,"New\u0041":[1,{"x":2}]}"#;
        let s: Sample = serde_json::from_str(text).unwrap();
        assert_eq!(s.n, Some(5));
        assert_eq!(s.maybe, Some(None));
        assert_eq!(s.extra["NewA"], serde_json::json!([1, {"x": 2}]));
        let again: Sample = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(again, s);
    }
}
