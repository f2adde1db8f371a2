//! The rvOS sysinfo service on the wire: `rvos-wire` commands, 1024-byte chunked text replies, typed
//! report parsers, and a host transport that carries rvOS channels over a Unix socket or TCP.
//!
//! ```text
//!  client process                       init (boot channel 0)              sysinfo service
//!  ── ch 0: BootRequest::ConnectService{"sysinfo"}  00 07 00 73 79 73 69 6e 66 6f ──▶
//!  ◀── ch 0: BootResponse::Ok{}  00   caps[0] = NEW channel N, cap_count 1 ──
//!  ── ch N: SysinfoCommand  one tag byte 00..08 (Ps .. Watchdog) ─────────────────────────────▶
//!  ◀── ch N: text[0..1024] ◀── ch N: text[1024..2048] … ◀── last, shorter chunk ──────────────
//!  ◀── ch N: sentinel, len 0 ─────────────── ◀── ch N: CLOSE (the service closes after the sentinel)
//!  anything undecodable (empty, tag ≥ 9) gets the raw text "Unknown command\n" + sentinel;
//!  no request within the deadline (5 s) gets a silent CLOSE.
//!
//!  host framing of every channel message (see [`transport`]):
//!  kind:u8=1 channel:u32le sender_pid:u64le cap_count:u8 caps:u32le×n len:u16le data[len ≤ 1024]
//!  kind:u8=2 channel:u32le                                      CLOSE: one side dropped its end
//! ```
//!
//! * [`wire`]: the `rvos-wire` subset (integers, bool, `Option`, strings, bytes) with its errors.
//! * [`message`]: [`SysinfoCommand`], [`BootRequest`], [`BootResponse`], [`NewConnection`], [`Message`].
//! * [`reassembly`]: [`chunk_text`] (the service side) and [`Reassembler`] (the client side).
//! * [`report`]: a parser and an exact formatter for every command's text.
//! * [`transport`] and [`client`]: the host stand-in for rvOS channels, and an async [`Client`].
//!
//! Sans-IO, from the command bytes to a parsed report:
//!
//! ```
//! use sysinfo_wire::{chunk_text, wire, Reassembler, Report, SysinfoCommand};
//!
//! assert_eq!(wire::to_bytes(&SysinfoCommand::Watchdog).unwrap(), [0x08]);
//! assert_eq!(wire::from_bytes::<SysinfoCommand>(&[0x00, 0xff, 0xff]).unwrap(), SysinfoCommand::Ps);
//!
//! let text = "  PID  STATE     CPU1s  CPU1m  MEM     BLOCKED ON     NAME\n\
//!             \x20 ---  --------  -----  -----  ------  -------------  ----------------\n\
//!             \x20   2  Blocked    0.0%   0.1%    16K  recv(ep 4)     serial-con\n";
//! let mut reassembler = Reassembler::default();
//! for chunk in chunk_text(text.as_bytes()) {
//!     reassembler.push(chunk).unwrap();
//! }
//! assert!(reassembler.push(&[]).unwrap()); // the zero-length sentinel
//! let reply = reassembler.finish();
//! let Report::Ps(ps) = Report::parse(SysinfoCommand::Ps, &reply.text) else { unreachable!() };
//! assert_eq!(ps.processes[0].name, "serial-con");
//! assert_eq!(ps.processes[0].cpu_1m.fraction(), 0.001);
//! assert_eq!(Report::Ps(ps).render(), text);
//! ```
//!
//! Against a server (`rvos-sim`, or anything speaking the host transport):
//!
//! ```no_run
//! # async fn demo() -> Result<(), sysinfo_wire::ClientError> {
//! use sysinfo_wire::{Client, ClientConfig, Endpoint, SysinfoCommand};
//!
//! let mut client = Client::connect(&Endpoint::Tcp("127.0.0.1:7461".into()), ClientConfig::default()).await?;
//! let response = client.request(SysinfoCommand::Kstat).await?; // a new channel per request
//! print!("{}", response.reply.text);
//! # Ok(()) }
//! ```

#![warn(missing_docs)]

pub mod client;
pub mod message;
pub mod reassembly;
pub mod report;
pub mod transport;
pub mod wire;

pub use client::{
    Client, ClientConfig, ClientError, Endpoint, Response, DEFAULT_ADDR, DEFAULT_REQUEST_TIMEOUT,
};
pub use message::{
    BootRequest, BootResponse, ChannelId, Message, NewConnection, SysinfoCommand, BOOT_ERRORS, MAX_CAPS,
    SYSINFO_SERVICE, UNKNOWN_COMMAND_TEXT,
};
pub use reassembly::{chunk_text, End, Reassembler, ReassemblyError, Reply, DEFAULT_MAX_RESPONSE};
pub use report::Report;
pub use transport::{Frame, HostCodec, TransportError};
pub use wire::{WireError, MAX_MSG_SIZE};

/// Names for commands on command lines: `ps memstat trace trace-clear kstat channels schedlat ipclat watchdog`.
impl std::str::FromStr for SysinfoCommand {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "ps" => SysinfoCommand::Ps,
            "memstat" | "mem" => SysinfoCommand::Memstat,
            "trace" => SysinfoCommand::Trace,
            "trace-clear" => SysinfoCommand::TraceClear,
            "kstat" => SysinfoCommand::Kstat,
            "channels" | "chstat" => SysinfoCommand::Channels,
            "schedlat" => SysinfoCommand::SchedLatency,
            "ipclat" => SysinfoCommand::IpcLatency,
            "watchdog" => SysinfoCommand::Watchdog,
            _ => {
                return Err(format!(
                "unknown report {s:?}: expected ps, memstat, trace, trace-clear, kstat, channels, schedlat, \
                     ipclat or watchdog"
            ))
            }
        })
    }
}

impl SysinfoCommand {
    /// The command's name on the command line (the inverse of `FromStr`).
    pub fn name(self) -> &'static str {
        match self {
            SysinfoCommand::Ps => "ps",
            SysinfoCommand::Memstat => "memstat",
            SysinfoCommand::Trace => "trace",
            SysinfoCommand::TraceClear => "trace-clear",
            SysinfoCommand::Kstat => "kstat",
            SysinfoCommand::Channels => "channels",
            SysinfoCommand::SchedLatency => "schedlat",
            SysinfoCommand::IpcLatency => "ipclat",
            SysinfoCommand::Watchdog => "watchdog",
        }
    }
}

/// Property checks shared by the fuzz targets and the corpus-replay tests.
#[doc(hidden)]
pub mod fuzz {
    use bytes::BytesMut;

    use crate::message::{BootRequest, BootResponse, NewConnection, SysinfoCommand};
    use crate::reassembly::Reassembler;
    use crate::report::Report;
    use crate::transport::{decode_frame, encode_frame, Frame};
    use crate::wire::{from_bytes, to_bytes, Wire};

    fn reencodes<T: Wire + PartialEq + std::fmt::Debug>(data: &[u8]) {
        if let Ok(v) = from_bytes::<T>(data) {
            let bytes = to_bytes(&v).expect("a decoded value re-encodes");
            assert_eq!(from_bytes::<T>(&bytes).expect("and decodes again"), v);
            assert!(data.starts_with(&bytes), "decoding read a prefix: the encoding is that prefix");
        }
    }

    /// Wire values and host frames: decoding never panics; what decodes re-encodes and re-decodes equal.
    pub fn wire(data: &[u8]) {
        // Wire values travel in one message's data, at most MAX_MSG_SIZE bytes.
        let payload = &data[..data.len().min(crate::MAX_MSG_SIZE)];
        reencodes::<SysinfoCommand>(payload);
        reencodes::<BootRequest>(payload);
        reencodes::<BootResponse>(payload);
        reencodes::<NewConnection>(payload);
        reencodes::<Option<u32>>(payload);
        reencodes::<String>(payload);

        let mut src = BytesMut::from(data);
        let mut frames: Vec<Frame> = Vec::new();
        while let Ok(Some(f)) = decode_frame(&mut src) {
            frames.push(f);
        }
        let mut again = BytesMut::new();
        for f in &frames {
            encode_frame(f, &mut again);
        }
        // The same frames fed one byte at a time decode identically.
        let mut split = BytesMut::new();
        let mut decoded = Vec::new();
        for b in again.iter() {
            split.extend_from_slice(&[*b]);
            while let Some(f) = decode_frame(&mut split).expect("re-encoded frames are valid") {
                decoded.push(f);
            }
        }
        assert_eq!(decoded, frames);
    }

    /// Report text: chunked anywhere, reassembled and parsed as every command, never panics; a report with no
    /// unknown lines renders to text that parses back to the same report.
    pub fn reports(data: &[u8]) {
        let (cut, body) = match data.split_first() {
            Some((&c, rest)) => (usize::from(c).max(1), rest),
            None => (1, data),
        };
        let mut r = Reassembler::new(1 << 20);
        for chunk in body.chunks(cut) {
            if r.push(chunk).is_err() {
                return;
            }
        }
        r.close();
        let reply = r.finish();
        assert_eq!(reply.text.as_bytes() == body, !reply.lossy);
        for command in SysinfoCommand::ALL {
            let report = Report::parse(command, &reply.text);
            let rendered = report.render();
            if report.unknown_lines().is_empty() {
                assert_eq!(Report::parse(command, &rendered), report, "{rendered:?}");
            }
        }
    }
}
