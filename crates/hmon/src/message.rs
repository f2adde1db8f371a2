//! The JSON messages: `[name, {arguments}]`, requests from the monitor and responses from the interpreter.

use std::fmt;

use serde::de::{self, IgnoredAny, SeqAccess, Visitor};
use serde::ser::SerializeTuple;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::facts::Fact;
use crate::ids::IdOrName;
use crate::time::Timestamp;
use crate::wire::{Extra, Key};
use crate::wire_object;

/// The default polling interval of `PollFacts` in milliseconds.
pub const DEFAULT_POLL_INTERVAL_MS: u64 = 1000;
/// The shortest polling interval in milliseconds; shorter requests are taken as this.
pub const MIN_POLL_INTERVAL_MS: u64 = 500;

wire_object! {
    /// `GetFacts`: ask for facts once.
    pub struct GetFacts {
        /// Echoed in the reply.
        uid: String = "UID",
        /// The facts, by ID or name, in the order the reply lists them.
        facts: Vec<IdOrName> = "Facts",
    }
}

wire_object! {
    /// `PollFacts`: send facts now and then every `Interval` ms (default 1000, at least 500).
    pub struct PollFacts {
        /// Echoed in every poll reply.
        uid: String = "UID",
        /// The facts, by ID or name.
        facts: Vec<IdOrName> = "Facts",
        /// The period in milliseconds.
        interval: i64 = "Interval",
    }
}

wire_object! {
    /// `StopFacts`: stop polling (no UID allowed).
    pub struct StopFacts {
        /// Not allowed: the interpreter answers `DisallowedUID`.
        uid: String = "UID",
    }
}

wire_object! {
    /// `BumpFacts`: send the next poll reply now (no UID allowed).
    pub struct BumpFacts {
        /// Not allowed: the interpreter answers `DisallowedUID`.
        uid: String = "UID",
    }
}

wire_object! {
    /// `Subscribe`: replace the set of subscribed events.
    pub struct Subscribe {
        /// Echoed in `Subscribed` and every later `Notification`.
        uid: String = "UID",
        /// The events, by ID or name; may be empty.
        events: Vec<IdOrName> = "Events",
    }
}

wire_object! {
    /// `GetLastKnownState`: answered even when the interpreter is busy.
    pub struct GetLastKnownState {
        /// Echoed in the reply.
        uid: String = "UID",
    }
}

wire_object! {
    /// `ConnectRide` (20.0): connect RIDE when `Address` is a string and `Port` a number, else disconnect.
    pub struct ConnectRide {
        /// Echoed in the reply.
        uid: String = "UID",
        /// Where RIDE should connect (any JSON: only a string means connect).
        address: Value = "Address",
        /// The port (any JSON: only a number means connect).
        port: Value = "Port",
    }
}

wire_object! {
    /// `Facts`: the reply to `GetFacts`, `PollFacts`, `StopFacts` and `BumpFacts`.
    pub struct Facts {
        /// The request's UID.
        uid: String = "UID",
        /// Present only when polling; `0` in the reply to `StopFacts`.
        interval: i64 = "Interval",
        /// The facts, in request order.
        facts: Vec<Fact> = "Facts",
    }
}

wire_object! {
    /// `Subscribed`: the reply to `Subscribe`, listing every event and whether it is on.
    pub struct Subscribed {
        /// The request's UID.
        uid: String = "UID",
        /// Every event with `Value` 0 or 1.
        events: Vec<EventState> = "Events",
    }
}

wire_object! {
    /// One entry of `Subscribed.Events`.
    pub struct EventState {
        /// The event ID.
        id: i64 = "ID",
        /// The event name.
        name: String = "Name",
        /// Whether it is subscribed.
        value: bool = "Value",
    }
}

wire_object! {
    /// `Notification.Event`.
    pub struct EventId {
        /// The event ID.
        id: i64 = "ID",
        /// The event name.
        name: String = "Name",
    }
}

wire_object! {
    /// `Notification`: one subscribed event happened. Its details are siblings of `Event`.
    pub struct Notification {
        /// The `Subscribe` request's UID.
        uid: String = "UID",
        /// Which event.
        event: EventId = "Event",
        /// `WorkspaceResize`: the new size in bytes.
        size: i64 = "Size",
        /// Compaction and signal events: the thread.
        tid: i64 = "Tid",
        /// Compaction and signal events: the SI stack.
        stack: Vec<crate::facts::StackEntry> = "Stack",
        /// Signal events: `⎕DMX`.
        dmx: Option<Box<crate::facts::Dmx>> = "DMX",
        /// Signal events: `⎕EXCEPTION`.
        exception: Option<Box<crate::facts::Exception>> = "Exception",
    }
}

wire_object! {
    /// `LastKnownState`: the reply to `GetLastKnownState`. Only `TS` is guaranteed.
    pub struct LastKnownState {
        /// The request's UID.
        uid: String = "UID",
        /// The interpreter's clock.
        ts: Timestamp = "TS",
        /// What the interpreter is doing and since when.
        activity: Activity = "Activity",
        /// The line being executed and since when.
        location: Location = "Location",
        /// When a WS FULL last happened.
        ws_full: WsFull = "WS FULL",
    }
}

wire_object! {
    /// `LastKnownState.Activity`.
    pub struct Activity {
        /// 1 other, 2 allocation, 3 compaction, 4 workspace check, 222 sleeping.
        code: i64 = "Code",
        /// Since when.
        ts: Timestamp = "TS",
    }
}

wire_object! {
    /// `LastKnownState.Location`.
    pub struct Location {
        /// The function, e.g. `#.f`.
        function: String = "Function",
        /// The line number.
        line: i64 = "Line",
        /// When the line started or resumed.
        ts: Timestamp = "TS",
    }
}

wire_object! {
    /// `LastKnownState."WS FULL"`.
    pub struct WsFull {
        /// When it happened.
        ts: Timestamp = "TS",
    }
}

wire_object! {
    /// `RideConnection` (20.0): the reply to `ConnectRide`.
    pub struct RideConnection {
        /// The request's UID.
        uid: String = "UID",
        /// Set when the access level is below 3 (then nothing else is sent).
        restricted: bool = "Restricted",
        /// Whether a connection was requested.
        connect: bool = "Connect",
        /// The `3502⌶` return code.
        status: i64 = "Status",
    }
}

wire_object! {
    /// `UserMessage`: sent by the application (`111⌶`), unsolicited.
    pub struct UserMessage {
        /// `111⌶`'s optional left argument.
        uid: String = "UID",
        /// The text.
        message: String = "Message",
    }
}

wire_object! {
    /// `InvalidSyntax`: the request was not JSON or not a `[name, {arguments}]` pair. Never has a UID.
    pub struct InvalidSyntax {
        /// Never sent by the interpreter; kept if it ever is.
        uid: String = "UID",
    }
}

wire_object! {
    /// `DisallowedUID`, `UnknownCommand` or `MalformedCommand`: the request's name and UID.
    pub struct CommandError {
        /// The request's UID.
        uid: String = "UID",
        /// The request's name.
        name: String = "Name",
    }
}

/// The message name and its arguments, the common shape of [`Request`] and [`Response`].
pub trait Message: Serialize + for<'de> Deserialize<'de> + fmt::Debug + Clone + PartialEq {
    /// The message name on the wire.
    fn name(&self) -> &str;
    /// The `UID` argument, if any.
    fn uid(&self) -> Option<&str>;
}

macro_rules! message_enum {
    (
        $(#[$meta:meta])*
        $enum:ident { $( $(#[$vmeta:meta])* $variant:ident ( $args:ty ) = $wire:literal, )* }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq)]
        #[non_exhaustive]
        pub enum $enum {
            $( $(#[$vmeta])* $variant($args), )*
            /// A message this crate does not know, kept as sent.
            Unknown {
                /// Its name.
                name: String,
                /// Its arguments.
                args: Extra,
            },
        }

        impl $enum {
            /// Every known message name.
            pub const NAMES: &'static [&'static str] = &[$($wire),*];
        }

        impl Message for $enum {
            fn name(&self) -> &str {
                match self {
                    $( $enum::$variant(_) => $wire, )*
                    $enum::Unknown { name, .. } => name,
                }
            }

            fn uid(&self) -> Option<&str> {
                match self {
                    $( $enum::$variant(a) => a.uid.as_deref(), )*
                    $enum::Unknown { args, .. } => args.get("UID").and_then(Value::as_str),
                }
            }
        }

        impl Serialize for $enum {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let mut t = s.serialize_tuple(2)?;
                t.serialize_element(self.name())?;
                match self {
                    $( $enum::$variant(a) => t.serialize_element(a)?, )*
                    $enum::Unknown { args, .. } => t.serialize_element(args)?,
                }
                t.end()
            }
        }

        impl<'de> Deserialize<'de> for $enum {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl<'de> Visitor<'de> for V {
                    type Value = $enum;
                    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                        f.write_str("a [name, {arguments}] pair")
                    }
                    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<$enum, A::Error> {
                        let name: Key<'de> =
                            seq.next_element()?.ok_or_else(|| de::Error::invalid_length(0, &self))?;
                        let message = match name.as_str() {
                            $( $wire => seq.next_element::<$args>()?.map($enum::$variant), )*
                            _ => seq
                                .next_element::<Extra>()?
                                .map(|args| $enum::Unknown { name: name.into_string(), args }),
                        };
                        let message = message.ok_or_else(|| de::Error::invalid_length(1, &self))?;
                        if seq.next_element::<IgnoredAny>()?.is_some() {
                            return Err(de::Error::invalid_length(3, &self));
                        }
                        Ok(message)
                    }
                }
                d.deserialize_seq(V)
            }
        }
    };
}

message_enum! {
    /// A message from the monitor to the interpreter.
    Request {
        /// Facts once.
        GetFacts(GetFacts) = "GetFacts",
        /// Facts now and periodically.
        PollFacts(PollFacts) = "PollFacts",
        /// Stop polling.
        StopFacts(StopFacts) = "StopFacts",
        /// Poll now.
        BumpFacts(BumpFacts) = "BumpFacts",
        /// Replace the subscribed events.
        Subscribe(Subscribe) = "Subscribe",
        /// The last known state, even when busy.
        GetLastKnownState(GetLastKnownState) = "GetLastKnownState",
        /// Connect or disconnect RIDE (20.0).
        ConnectRide(ConnectRide) = "ConnectRide",
    }
}

message_enum! {
    /// A message from the interpreter to the monitor.
    Response {
        /// Facts (a reply, or a poll).
        Facts(Facts) = "Facts",
        /// The reply to `Subscribe`.
        Subscribed(Subscribed) = "Subscribed",
        /// A subscribed event.
        Notification(Notification) = "Notification",
        /// The reply to `GetLastKnownState`.
        LastKnownState(LastKnownState) = "LastKnownState",
        /// The reply to `ConnectRide` (20.0).
        RideConnection(RideConnection) = "RideConnection",
        /// Sent by the application.
        UserMessage(UserMessage) = "UserMessage",
        /// The request was not a JSON `[name, {arguments}]` pair.
        InvalidSyntax(InvalidSyntax) = "InvalidSyntax",
        /// A UID was sent where none is allowed.
        DisallowedUid(CommandError) = "DisallowedUID",
        /// The request's name is unknown.
        UnknownCommand(CommandError) = "UnknownCommand",
        /// The request's arguments do not conform.
        MalformedCommand(CommandError) = "MalformedCommand",
    }
}

impl Response {
    /// Whether this is one of the four error responses.
    pub fn is_error(&self) -> bool {
        matches!(
            self,
            Response::InvalidSyntax(_)
                | Response::DisallowedUid(_)
                | Response::UnknownCommand(_)
                | Response::MalformedCommand(_)
        )
    }
}

/// Builds a `DisallowedUID`, `UnknownCommand` or `MalformedCommand` body.
pub fn command_error(name: impl Into<String>, uid: Option<String>) -> CommandError {
    CommandError { uid, name: Some(name.into()), ..Default::default() }
}
