//! A protocol is one component: everything the fleet knows of it is in its folder, behind [`Component`],
//! and [`Protocols`] lists the components a fleet knows.
//!
//! A component gives its config blocks (type, defaults, checks, each error at its `FILE:LINE: KEY`), what a
//! block runs ([`Unit`]: a target's collector, a directory glob's, a listener's), what a bare address becomes
//! (a `[[file_sd]]` target, a `/probe` target, a shorthand flag), how a recorded connection replays through
//! its collector, its recordings' link type and its headline figures for the views. Nothing else in the fleet
//! or above it names a protocol: units, export, probe, replay, file_sd and the views ask the registry.
//!
//! The anchors of this shape are Vector's `SourceConfig` (a component's config type knows how to build it)
//! with one folder per source, and the OpenTelemetry Collector's receiver factories registered in one list.
//! A program can add a protocol of its own: implement [`Component`] and pass [`Protocols::with`].

use std::any::Any;
use std::borrow::Cow;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use telemon_capture::{Connection, ReplayStream};

use crate::config::document::{Block, ConfigError};
use crate::config::shard::Shard;
use crate::model::{Protocol, SeriesRef, TargetSnapshot};
use crate::recording::Recording;
use crate::registry::Registry;
use crate::target::{Failure, Publisher};

pub mod hmon;
pub mod meter161;
pub mod mono;
pub mod smon;
pub mod sysinfo;

/// A boxed future, as trait objects return them.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The protocols telemon is built with: the registry, one line each.
pub const BUILT_IN: [&dyn Component; 5] =
    [&meter161::Meter161, &hmon::Hmon, &mono::Mono, &smon::Smon, &sysinfo::Sysinfo];

/// A protocol of the fleet.
pub trait Component: Send + Sync + 'static {
    /// Its name: the `protocol` label, its config section `[[NAME]]`, `/probe?protocol=NAME`, file_sd's
    /// `protocol = "NAME"`.
    fn name(&self) -> &'static str;

    /// Its name as a target's snapshot carries it.
    fn protocol(&self) -> Protocol {
        Protocol::new(self.name())
    }

    /// The config sections it reads (`hmon` and `hmon_listen`; `mono_listen`), in the order a config's
    /// summary lists them.
    fn sections(&self) -> &'static [&'static str];

    /// The pcapng link type of its recordings (`LINKTYPE_USER0` + n; see docs/recordings.md).
    fn link_type(&self) -> u16;

    /// Reads one block of `section` (one of [`Component::sections`]) into what it runs: typed, defaulted
    /// and checked, each error at its key.
    fn read(&self, section: &str, block: &Block<'_>) -> Result<Arc<dyn Unit>, ConfigError>;

    /// How a bare address becomes a block of it; `None` when its peers only dial in.
    fn address(&self) -> Option<Address> {
        None
    }

    /// Replays a recorded connection through its collector, until the recording ends.
    fn replay<'a>(
        &'a self,
        p: &'a mut Publisher,
        connection: &'a Connection,
        stream: ReplayStream,
    ) -> BoxFuture<'a, Failure>;

    /// Whether a peer's first bytes can start its protocol (`Some(false)`: they cannot; `None`: too few to
    /// say), as its crate's `sniff` says; the default never claims bytes.
    fn sniff(&self, _first: &[u8]) -> Option<bool> {
        None
    }

    /// What a peer of it is, for a message that says what a client reached instead of the peer it expected
    /// (`a System/161 meter socket`).
    fn peer(&self) -> &'static str;

    /// The two or three figures a view that lists many targets shows of one (`/`, `telemon top`'s list).
    /// `carry` is kept by the view for the target from one call to the next (for a figure made of two
    /// samples, such as smon's CPU busy share).
    fn headlines<'a>(&self, t: &'a TargetSnapshot, carry: &mut Carry) -> Vec<Headline<'a>>;
}

/// How a bare address (`10.0.0.5`, `10.0.0.5:4502`, `/home/ann/os161/root`) becomes a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Address {
    /// The key of the block it goes in (`connect`, `dir`).
    pub key: &'static str,
    /// For a network address: the port of one that has none (it then can be probed). `None`: a path.
    pub default_port: Option<u16>,
}

impl Address {
    /// A `HOST[:PORT]` that goes in `connect`, `port` when it has none.
    pub const fn connect(port: u16) -> Address {
        Address { key: "connect", default_port: Some(port) }
    }

    /// The name of the target at `address`: the address with its port (a network address), or a path's
    /// last component.
    pub fn target_name(&self, address: &str) -> Result<String, String> {
        match self.default_port {
            Some(port) => crate::config::addr::with_default_port(address, port).map(Cow::into_owned),
            None => Ok(std::path::Path::new(address)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()),
        }
    }
}

/// The unit of a target of `component` named `name` at `address` (a file_sd target, a `/probe` target),
/// with `labels` over `defaults`' labels and `defaults` as the other keys of its block: the block is made
/// and read as a config block is, with the same checks. `Err` says why, for a person.
pub fn address_unit(
    component: &dyn Component,
    name: &str,
    address: &str,
    labels: &std::collections::BTreeMap<String, String>,
    defaults: &toml::Table,
) -> Result<Arc<dyn Unit>, String> {
    let key = component
        .address()
        .ok_or_else(|| format!("{} targets do not take an address", component.name()))?
        .key;
    let mut table = defaults.clone();
    let mut merged: toml::Table = match table.remove("labels") {
        Some(toml::Value::Table(t)) => t,
        Some(_) => return Err("labels: must be a table".into()),
        None => toml::Table::new(),
    };
    for (k, v) in labels.iter().filter(|(k, _)| !k.starts_with("__")) {
        merged.insert(k.clone(), toml::Value::String(v.clone()));
    }
    table.insert("labels".into(), toml::Value::Table(merged));
    table.insert(key.into(), toml::Value::String(address.into()));
    table.insert("name".into(), toml::Value::String(name.into()));
    let section = component.sections()[0];
    let mut doc = toml::Table::new();
    doc.insert(section.into(), toml::Value::Array(vec![toml::Value::Table(table)]));
    let text = toml::to_string(&doc).map_err(|e| e.to_string())?;
    let fail = |e: ConfigError| format!("{}: {}", e.key, e.message);
    let doc = crate::config::document::Document::parse(component.name(), &text).map_err(fail)?;
    let mut read = doc.read_section(section, |b| component.read(section, &b)).map_err(fail)?;
    read.pop().ok_or_else(|| "no block".to_owned())
}

/// What a view keeps of a target between two calls of [`Component::headlines`].
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Carry(pub Option<(f64, f64)>);

/// One figure of a target that a view shows beside its name.
#[derive(Debug, Clone)]
pub struct Headline<'a> {
    /// What it is (`kernel instr/s`, `workspace used`).
    pub title: Cow<'a, str>,
    /// Where its value comes from.
    pub figure: Figure<'a>,
}

/// Where a headline's value comes from.
#[derive(Debug, Clone)]
pub enum Figure<'a> {
    /// A series of the target (its rate when it is a counter): `None` while the target has none.
    Series(Option<SeriesRef<'a>>),
    /// A value the component works out from several series.
    Derived {
        /// Its unit (`B`, `ratio`, or empty).
        unit: &'static str,
        /// A key naming it in a view's history (`=cpu_busy`; a series' keys never begin with `=`).
        key: &'static str,
        /// The value, when there is one yet.
        value: Option<f64>,
    },
}

impl<'a> Headline<'a> {
    /// The figure of a series.
    pub fn series(title: impl Into<Cow<'a, str>>, s: Option<SeriesRef<'a>>) -> Headline<'a> {
        Headline { title: title.into(), figure: Figure::Series(s) }
    }

    /// A value worked out by the component.
    pub fn derived(
        title: &'static str,
        unit: &'static str,
        key: &'static str,
        value: Option<f64>,
    ) -> Headline<'a> {
        Headline { title: Cow::Borrowed(title), figure: Figure::Derived { unit, key, value } }
    }
}

/// What a config block runs: a target's collector, a directory glob's, a dial-in listener's.
pub trait Unit: fmt::Debug + Send + Sync + 'static {
    /// Its name (a target's, or a glob's or listener's block name): a reload matches units by it.
    fn name(&self) -> &str;

    /// Whether `[serve] shard` decides it by its name (a target), or it shards what it finds (a glob, a
    /// listener: false).
    fn sharded(&self) -> bool {
        true
    }

    /// The address it listens on, if it does: a reload binds a new listener before it stops anything,
    /// unless a running unit holds the address.
    fn binds(&self) -> Option<&str> {
        None
    }

    /// Whether `other` is the same block (a reload keeps a unit whose block did not change). Implement it
    /// as [`same_as`].
    fn same(&self, other: &dyn Unit) -> bool;

    /// Starts it: binds what it listens on (an error that names the block), then gives the task that runs
    /// it until it is dropped.
    fn start<'a>(&'a self, ctx: &'a Start) -> BoxFuture<'a, std::io::Result<BoxFuture<'static, ()>>>;

    /// Itself, for [`same_as`].
    fn as_any(&self) -> &dyn Any;
}

/// [`Unit::same`] of a unit type that is `PartialEq`.
pub fn same_as<T: PartialEq + 'static>(me: &T, other: &dyn Unit) -> bool {
    other.as_any().downcast_ref::<T>().is_some_and(|o| o == me)
}

/// What a unit starts with.
#[derive(Debug, Clone)]
pub struct Start {
    /// Where its targets publish.
    pub registry: Registry,
    /// `[serve] series_limit`.
    pub series_limit: usize,
    /// `[serve] shard`: which of the targets a glob or listener finds are this instance's.
    pub shard: Option<Shard>,
    /// Where its connections are recorded, if anywhere.
    pub recording: Option<Arc<Recording>>,
}

impl Start {
    /// The publisher of a target of `protocol` named `name`, recorded when the fleet records, removed
    /// from the registry when dropped.
    pub fn publisher(
        &self,
        name: &str,
        protocol: &dyn Component,
        labels: Vec<(String, String)>,
    ) -> Publisher {
        Publisher::new(&self.registry, name, protocol.protocol(), labels, self.series_limit)
            .recording(self.recording.clone(), protocol.link_type())
            .remove_on_drop()
    }

    /// [`Start::publisher`], unless a target of that name is in the registry already (a glob's match that
    /// another block's target has the name of).
    pub fn try_publisher(
        &self,
        name: String,
        protocol: &dyn Component,
        labels: Vec<(String, String)>,
    ) -> Option<Publisher> {
        let p =
            Publisher::try_new(&self.registry, name, protocol.protocol(), labels, self.series_limit, |_| {
                false
            })?;
        Some(p.recording(self.recording.clone(), protocol.link_type()).remove_on_drop())
    }
}

/// The protocols a fleet knows: the built-in five, and any a program adds.
#[derive(Clone)]
pub struct Protocols {
    list: Vec<&'static dyn Component>,
}

impl fmt::Debug for Protocols {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.list.iter().map(|c| c.name())).finish()
    }
}

impl PartialEq for Protocols {
    fn eq(&self, other: &Protocols) -> bool {
        self.names() == other.names()
    }
}

impl Default for Protocols {
    fn default() -> Protocols {
        Protocols { list: BUILT_IN.to_vec() }
    }
}

impl Protocols {
    /// The built-in protocols.
    pub fn built_in() -> Protocols {
        Protocols::default()
    }

    /// These and `component` (which replaces a protocol of the same name).
    pub fn with(mut self, component: &'static dyn Component) -> Protocols {
        self.list.retain(|c| c.name() != component.name());
        self.list.push(component);
        self
    }

    /// Every protocol, in the registry's order.
    pub fn iter(&self) -> impl Iterator<Item = &'static dyn Component> + '_ {
        self.list.iter().copied()
    }

    /// The component of `protocol` (by name: `hmon`).
    pub fn get(&self, protocol: &str) -> Option<&'static dyn Component> {
        self.iter().find(|c| c.name() == protocol)
    }

    /// The protocol whose recordings have `link_type`.
    pub fn by_link_type(&self, link_type: u16) -> Option<&'static dyn Component> {
        self.iter().find(|c| c.link_type() == link_type)
    }

    /// The protocol that reads config section `section`.
    pub fn by_section(&self, section: &str) -> Option<&'static dyn Component> {
        self.iter().find(|c| c.sections().contains(&section))
    }

    /// Every config section of every protocol, in the registry's order.
    pub fn sections(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.iter().flat_map(|c| c.sections().iter().copied())
    }

    /// `meter161, hmon, mono, smon, sysinfo`: their names, for messages.
    pub fn names(&self) -> String {
        self.iter().map(|c| c.name()).collect::<Vec<_>>().join(", ")
    }
}

// The built-in protocols as a target's snapshot names them, for code and tests that mean one of them.
impl Protocol {
    /// System/161 metering.
    pub const METER161: Protocol = Protocol::new(meter161::NAME);
    /// Dyalog APL's Health Monitor.
    pub const HMON: Protocol = Protocol::new(hmon::NAME);
    /// The Mono counters agent.
    pub const MONO: Protocol = Protocol::new(mono::NAME);
    /// Tino's smon stream.
    pub const SMON: Protocol = Protocol::new(smon::NAME);
    /// rvOS sysinfo.
    pub const SYSINFO: Protocol = Protocol::new(sysinfo::NAME);
}
