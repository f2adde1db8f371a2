//! The facts of a `Facts` message: typed values for IDs 1–6, raw JSON for anything else.
//!
//! Facts 1, 2, 3 and 6 carry a `"Value"` object and facts 4 and 5 a `"Values"` array (the notes' rule
//! 12). The other key is accepted too (a single object becomes a one-thread list, a one-element array
//! becomes the object); a fact whose ID and name are both unknown, or whose body fits neither rule, is
//! kept as [`FactValue::Raw`]. Encoding always uses the rule's key.

use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::ids::FactKind;
use crate::wire::{Extra, Key};
use crate::wire_object;

wire_object! {
    /// The `Host` fact (ID 1).
    pub struct Host {
        /// Facts about the host machine.
        machine: Machine = "Machine",
        /// Facts about the interpreter.
        interpreter: Interpreter = "Interpreter",
        /// The comms layer serving the Health Monitor.
        comms_layer: CommsLayer = "CommsLayer",
        /// The comms layer serving RIDE.
        ride: Ride = "RIDE",
    }
}

wire_object! {
    /// `Host.Machine`.
    pub struct Machine {
        /// The machine's name.
        name: String = "Name",
        /// The user account.
        user: String = "User",
        /// The interpreter's process ID.
        pid: i64 = "PID",
        /// The application's description (`110⌶`): a string in 19.0, any JSON value in 20.0.
        desc: Value = "Desc",
        /// The access level the monitor has (0–3).
        access_level: i64 = "AccessLevel",
    }
}

wire_object! {
    /// `Host.Interpreter`.
    pub struct Interpreter {
        /// `A.B.C`.
        version: String = "Version",
        /// 32 or 64.
        bit_width: i64 = "BitWidth",
        /// A Unicode (not Classic) edition.
        is_unicode: bool = "IsUnicode",
        /// A runtime (not development) edition.
        is_runtime: bool = "IsRuntime",
        /// The session UUID (20.0 only; RFC 9562 text).
        session_uuid: String = "SessionUUID",
    }
}

wire_object! {
    /// `Host.CommsLayer`.
    pub struct CommsLayer {
        /// The Conga version.
        version: String = "Version",
        /// The interpreter's network address.
        address: String = "Address",
        /// The port.
        port4: i64 = "Port4",
        /// The alternate port.
        port6: i64 = "Port6",
    }
}

wire_object! {
    /// `Host.RIDE`: only `Listening` when RIDE is not listening.
    pub struct Ride {
        /// Whether the interpreter listens for RIDE.
        listening: bool = "Listening",
        /// Whether it is a zero-footprint RIDE HTTP server.
        http_server: bool = "HTTPServer",
        /// The Conga version.
        version: String = "Version",
        /// The address.
        address: String = "Address",
        /// The port.
        port4: i64 = "Port4",
        /// The alternate port.
        port6: i64 = "Port6",
    }
}

wire_object! {
    /// The `AccountInformation` fact (ID 2): elements of `⎕AI`, in milliseconds.
    pub struct AccountInformation {
        /// The user number.
        user_identification: i64 = "UserIdentification",
        /// CPU time.
        compute_time: i64 = "ComputeTime",
        /// Time connected.
        connect_time: i64 = "ConnectTime",
        /// Keying time.
        keying_time: i64 = "KeyingTime",
    }
}

wire_object! {
    /// The `Workspace` fact (ID 3): statistics from `2000⌶`.
    pub struct Workspace {
        /// The workspace name.
        wsid: String = "WSID",
        /// Bytes available.
        available: i64 = "Available",
        /// Bytes used.
        used: i64 = "Used",
        /// Compactions so far.
        compactions: i64 = "Compactions",
        /// Garbage collections so far.
        garbage_collections: i64 = "GarbageCollections",
        /// Garbage pockets.
        garbage_pockets: i64 = "GarbagePockets",
        /// Free pockets.
        free_pockets: i64 = "FreePockets",
        /// Used pockets.
        used_pockets: i64 = "UsedPockets",
        /// Sediment.
        sediment: i64 = "Sediment",
        /// Bytes allocated.
        allocation: i64 = "Allocation",
        /// Allocation high-water mark.
        allocation_hwm: i64 = "AllocationHWM",
        /// Trap reserve wanted.
        trap_reserve_wanted: i64 = "TrapReserveWanted",
        /// Trap reserve actual.
        trap_reserve_actual: i64 = "TrapReserveActual",
    }
}

wire_object! {
    /// One thread of the `Threads` (ID 4) or `SuspendedThreads` (ID 5) fact.
    pub struct Thread {
        /// The thread ID.
        tid: i64 = "Tid",
        /// The SI stack, innermost first.
        stack: Vec<StackEntry> = "Stack",
        /// Whether the thread is suspended (absent in `SuspendedThreads`).
        suspended: bool = "Suspended",
        /// Where the thread is.
        state: String = "State",
        /// `Normal`, `Paused`, `Terminated`, ...
        flags: String = "Flags",
        /// `⎕DMX` of a suspended thread: `null` or an object.
        dmx: Option<Box<Dmx>> = "DMX",
        /// `⎕EXCEPTION` of a suspended thread: `null` or an object.
        exception: Option<Box<Exception>> = "Exception",
    }
}

wire_object! {
    /// One line of an SI stack.
    pub struct StackEntry {
        /// Whether the access level hides the description.
        restricted: bool = "Restricted",
        /// The stack line (only when not restricted).
        description: String = "Description",
    }
}

wire_object! {
    /// `⎕DMX` of a thread.
    pub struct Dmx {
        /// Whether the access level hides the details.
        restricted: bool = "Restricted",
        /// The error category.
        category: String = "Category",
        /// The diagnostic message lines.
        dm: Vec<String> = "DM",
        /// The event message.
        em: String = "EM",
        /// The event number.
        en: i64 = "EN",
        /// The extended event number.
        enx: i64 = "ENX",
        /// `[file, line]` inside the interpreter.
        internal_location: Value = "InternalLocation",
        /// The vendor.
        vendor: String = "Vendor",
        /// The message.
        message: String = "Message",
        /// `[int, int, string]`.
        os_error: Value = "OSError",
    }
}

wire_object! {
    /// `⎕EXCEPTION` of a thread.
    pub struct Exception {
        /// Whether the access level hides the details.
        restricted: bool = "Restricted",
        /// The source.
        source: String = "Source",
        /// The .NET stack trace.
        stack_trace: String = "StackTrace",
        /// The message.
        message: String = "Message",
    }
}

wire_object! {
    /// The `ThreadCount` fact (ID 6).
    pub struct ThreadCount {
        /// All threads.
        total: i64 = "Total",
        /// Suspended threads.
        suspended: i64 = "Suspended",
    }
}

/// A fact's content.
#[derive(Debug, Clone, PartialEq)]
pub enum FactValue {
    /// Fact 1.
    Host(Box<Host>),
    /// Fact 2.
    AccountInformation(AccountInformation),
    /// Fact 3.
    Workspace(Workspace),
    /// Fact 4.
    Threads(Vec<Thread>),
    /// Fact 5.
    SuspendedThreads(Vec<Thread>),
    /// Fact 6.
    ThreadCount(ThreadCount),
    /// An unknown fact, or a body that fits neither the `Value` nor the `Values` rule: kept as sent.
    Raw {
        /// The `"Value"` entry, if any.
        value: Option<Value>,
        /// The `"Values"` entry, if any.
        values: Option<Value>,
    },
}

impl FactValue {
    /// The kind of a typed value (`None` for [`FactValue::Raw`]).
    pub fn kind(&self) -> Option<FactKind> {
        Some(match self {
            FactValue::Host(_) => FactKind::Host,
            FactValue::AccountInformation(_) => FactKind::AccountInformation,
            FactValue::Workspace(_) => FactKind::Workspace,
            FactValue::Threads(_) => FactKind::Threads,
            FactValue::SuspendedThreads(_) => FactKind::SuspendedThreads,
            FactValue::ThreadCount(_) => FactKind::ThreadCount,
            FactValue::Raw { .. } => return None,
        })
    }
}

/// One element of a `Facts` message's `"Facts"` list.
#[derive(Debug, Clone, PartialEq)]
pub struct Fact {
    /// `"ID"`.
    pub id: Option<i64>,
    /// `"Name"`.
    pub name: Option<String>,
    /// `"Value"` or `"Values"`, typed by the ID (or, without a known ID, by the name).
    pub value: FactValue,
    /// Other fields, kept as raw JSON.
    pub extra: Extra,
}

impl Fact {
    /// A typed fact with its ID and name filled in.
    pub fn new(value: FactValue) -> Self {
        let kind = value.kind();
        Fact {
            id: kind.map(FactKind::id),
            name: kind.map(|k| k.name().to_owned()),
            value,
            extra: Extra::new(),
        }
    }

    /// The kind the ID (or else the name) refers to.
    pub fn kind(&self) -> Option<FactKind> {
        kind_of(self.id, self.name.as_deref())
    }
}

fn kind_of(id: Option<i64>, name: Option<&str>) -> Option<FactKind> {
    match id {
        Some(id) => FactKind::from_id(id).or_else(|| name.and_then(FactKind::from_name)),
        None => name.and_then(FactKind::from_name),
    }
}

impl Serialize for Fact {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        if let Some(id) = self.id {
            map.serialize_entry("ID", &id)?;
        }
        if let Some(name) = &self.name {
            map.serialize_entry("Name", name)?;
        }
        let written: [&str; 2] = ["ID", "Name"];
        match &self.value {
            FactValue::Host(v) => map.serialize_entry("Value", v)?,
            FactValue::AccountInformation(v) => map.serialize_entry("Value", v)?,
            FactValue::Workspace(v) => map.serialize_entry("Value", v)?,
            FactValue::ThreadCount(v) => map.serialize_entry("Value", v)?,
            FactValue::Threads(v) | FactValue::SuspendedThreads(v) => map.serialize_entry("Values", v)?,
            FactValue::Raw { value, values } => {
                if let Some(v) = value {
                    map.serialize_entry("Value", v)?;
                }
                if let Some(v) = values {
                    map.serialize_entry("Values", v)?;
                }
            }
        }
        let body_keys: &[&str] = match &self.value {
            FactValue::Raw { .. } => &["Value", "Values"],
            v if v.kind().is_some_and(FactKind::is_list) => &["Values"],
            _ => &["Value"],
        };
        for (k, v) in &self.extra {
            if !written.contains(&k.as_str()) && !body_keys.contains(&k.as_str()) {
                map.serialize_entry(k, v)?;
            }
        }
        map.end()
    }
}

/// The JSON of a typed body.
fn body_json(v: &FactValue) -> Result<Value, serde_json::Error> {
    match v {
        FactValue::Host(h) => serde_json::to_value(h),
        FactValue::AccountInformation(a) => serde_json::to_value(a),
        FactValue::Workspace(w) => serde_json::to_value(w),
        FactValue::Threads(t) | FactValue::SuspendedThreads(t) => serde_json::to_value(t),
        FactValue::ThreadCount(c) => serde_json::to_value(c),
        FactValue::Raw { value, values } => {
            Ok(value.clone().or_else(|| values.clone()).unwrap_or(Value::Null))
        }
    }
}

/// Decodes the body of a known fact straight from the input (the fast path, when the ID came first).
struct TypedBody(FactKind);

impl<'de> DeserializeSeed<'de> for TypedBody {
    type Value = FactValue;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<FactValue, D::Error> {
        Ok(match self.0 {
            FactKind::Host => FactValue::Host(Box::new(Host::deserialize(d)?)),
            FactKind::AccountInformation => {
                FactValue::AccountInformation(AccountInformation::deserialize(d)?)
            }
            FactKind::Workspace => FactValue::Workspace(Workspace::deserialize(d)?),
            FactKind::Threads => FactValue::Threads(Vec::deserialize(d)?),
            FactKind::SuspendedThreads => FactValue::SuspendedThreads(Vec::deserialize(d)?),
            FactKind::ThreadCount => FactValue::ThreadCount(ThreadCount::deserialize(d)?),
        })
    }
}

/// Types a body that was buffered because the ID came after it, or that used the other key.
fn type_buffered(
    kind: FactKind,
    body: Value,
    canonical: bool,
) -> Result<FactValue, (Value, serde_json::Error)> {
    let body = match (canonical, kind.is_list(), body) {
        (true, _, body) => body,
        // `"Values":[obj]` for an object fact.
        (false, false, Value::Array(mut items)) if items.len() == 1 => items.pop().unwrap_or(Value::Null),
        // `"Value":obj` for a list fact.
        (false, true, obj @ Value::Object(_)) => Value::Array(vec![obj]),
        (false, _, body) => body,
    };
    TypedBody(kind).deserialize(&body).map_err(|e| (body, e))
}

impl<'de> Deserialize<'de> for Fact {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Fact;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a fact object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Fact, A::Error> {
                let mut id = None;
                let mut name: Option<String> = None;
                let mut typed: Option<FactValue> = None;
                let mut value: Option<Value> = None;
                let mut values: Option<Value> = None;
                let mut extra = Extra::new();
                let (mut seen_value, mut seen_values) = (false, false);
                while let Some(key) = map.next_key::<Key<'de>>()? {
                    match key.as_str() {
                        "ID" => id = Some(map.next_value::<i64>()?),
                        "Name" => name = Some(map.next_value::<String>()?),
                        k @ ("Value" | "Values") => {
                            let list_key = k == "Values";
                            let seen = if list_key { &mut seen_values } else { &mut seen_value };
                            if std::mem::replace(seen, true) {
                                return Err(de::Error::duplicate_field(if list_key {
                                    "Values"
                                } else {
                                    "Value"
                                }));
                            }
                            match kind_of(id, name.as_deref()) {
                                Some(kind) if kind.is_list() == list_key && typed.is_none() => {
                                    typed = Some(map.next_value_seed(TypedBody(kind))?);
                                }
                                _ if list_key => values = Some(map.next_value()?),
                                _ => value = Some(map.next_value()?),
                            }
                        }
                        _ => {
                            let v: Value = map.next_value()?;
                            extra.insert(key.into_string(), v);
                        }
                    }
                }
                let kind = kind_of(id, name.as_deref());
                // The ID may have arrived after the body and named another kind: retype it.
                if let Some(t) = typed.take() {
                    if t.kind() == kind {
                        typed = Some(t);
                    } else {
                        let body = body_json(&t).map_err(de::Error::custom)?;
                        match t.kind() {
                            Some(k) if k.is_list() => values = Some(body),
                            _ => value = Some(body),
                        }
                    }
                }
                let fact_value = match (typed, kind) {
                    (Some(t), _) => {
                        // A second body under the other key is kept beside the typed one.
                        if let Some(v) = value {
                            extra.insert("Value".into(), v);
                        }
                        if let Some(v) = values {
                            extra.insert("Values".into(), v);
                        }
                        t
                    }
                    (None, Some(kind)) => {
                        let (canonical, other) = if kind.is_list() {
                            (values.take(), value.take())
                        } else {
                            (value.take(), values.take())
                        };
                        match (canonical, other) {
                            (Some(body), other) => match type_buffered(kind, body, true) {
                                Ok(t) => {
                                    if let Some(o) = other {
                                        extra.insert(
                                            if kind.is_list() { "Value" } else { "Values" }.into(),
                                            o,
                                        );
                                    }
                                    t
                                }
                                Err((_, e)) => {
                                    return Err(de::Error::custom(format_args!("{kind} fact: {e}")))
                                }
                            },
                            (None, Some(body)) => match type_buffered(kind, body, false) {
                                Ok(t) => t,
                                Err((body, _)) if kind.is_list() => {
                                    FactValue::Raw { value: Some(body), values: None }
                                }
                                Err((body, _)) => FactValue::Raw { value: None, values: Some(body) },
                            },
                            (None, None) => FactValue::Raw { value: None, values: None },
                        }
                    }
                    (None, None) => FactValue::Raw { value, values },
                };
                Ok(Fact { id, name, value: fact_value, extra })
            }
        }
        d.deserialize_map(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn value_before_id_is_still_typed() {
        let f: Fact =
            serde_json::from_str(r#"{"Value":{"Total":2,"Suspended":1},"Name":"ThreadCount","ID":6}"#)
                .unwrap();
        assert_eq!(
            f.value,
            FactValue::ThreadCount(ThreadCount { total: Some(2), suspended: Some(1), ..Default::default() })
        );
    }

    #[test]
    fn other_key_is_accepted() {
        let f: Fact = serde_json::from_str(r#"{"ID":4,"Value":{"Tid":0}}"#).unwrap();
        assert!(matches!(&f.value, FactValue::Threads(t) if t.len() == 1 && t[0].tid == Some(0)));
        let f: Fact = serde_json::from_str(r#"{"ID":6,"Values":[{"Total":1}]}"#).unwrap();
        assert!(matches!(&f.value, FactValue::ThreadCount(c) if c.total == Some(1)));
        let f: Fact = serde_json::from_str(r#"{"ID":6,"Values":[1,2]}"#).unwrap();
        assert_eq!(f.value, FactValue::Raw { value: None, values: Some(json!([1, 2])) });
    }

    #[test]
    fn a_second_body_under_the_other_key_is_kept_and_duplicates_are_errors() {
        let text = r#"{"ID":4,"Values":[],"Value":{"X":1}}"#;
        let f: Fact = serde_json::from_str(text).unwrap();
        assert_eq!(f.value, FactValue::Threads(vec![]));
        assert_eq!(serde_json::to_value(&f).unwrap(), serde_json::from_str::<Value>(text).unwrap());
        let err = serde_json::from_str::<Fact>(r#"{"ID":5,"Values":[],"Values":[1]}"#).unwrap_err();
        assert!(err.to_string().contains("duplicate field `Values`"), "{err}");
    }

    #[test]
    fn unknown_fact_ids_stay_raw() {
        let text = r#"{"ID":99,"Name":"Future","Value":{"X":1},"Note":"n"}"#;
        let f: Fact = serde_json::from_str(text).unwrap();
        assert_eq!(f.value, FactValue::Raw { value: Some(json!({"X": 1})), values: None });
        assert_eq!(f.extra["Note"], json!("n"));
        assert_eq!(serde_json::to_value(&f).unwrap(), serde_json::from_str::<Value>(text).unwrap());
    }

    #[test]
    fn bad_known_body_is_an_error_naming_the_fact() {
        let err = serde_json::from_str::<Fact>(r#"{"Value":{"Total":"x"},"ID":6}"#).unwrap_err();
        assert!(err.to_string().contains("ThreadCount"), "{err}");
        assert!(serde_json::from_str::<Fact>(r#"{"ID":6,"Value":{"Total":"x"}}"#).is_err());
    }
}
