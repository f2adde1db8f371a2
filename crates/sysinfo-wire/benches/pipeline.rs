//! A tick's seven reports over the host transport, `Client::request_raw` seven times (a channel, the command,
//! the reply and the close, one after the other) against `Client::request_many_raw` (every `ConnectService`,
//! then every command, replies matched by channel), with an in-process service on a `tokio::io::duplex` pipe.
//! Client and service run on one current-thread runtime, so the time is the CPU both spend per tick; the
//! replies are ~1.5 KB each (two chunks), as rvos-sim's Ps, Memstat and histograms are.
//! Every case also runs in count mode, for `cargo xtask bench --table` (the `bench-harness` crate).

use std::cell::RefCell;
use std::rc::Rc;

use bench_harness::{Case, Group};
use criterion::Throughput;
use futures::{SinkExt, StreamExt};
use sysinfo_wire::{
    chunk_text, BootResponse, ChannelId, Client, ClientConfig, Frame, HostCodec, Message, SYSINFO_SERVICE,
};
use tokio_util::codec::Framed;

const REPORTS: [u8; 7] = [0, 1, 4, 5, 6, 7, 8];

/// A service that answers every command with the same ~1.5 KB text, in chunks, then the sentinel and a close.
async fn service(stream: tokio::io::DuplexStream) {
    let text = "  SCHED_SWITCHES           1234567\n".repeat(45);
    let mut framed = Framed::new(stream, HostCodec);
    let mut next = 1u32;
    while let Some(Ok(frame)) = framed.next().await {
        match frame {
            Frame::Message { channel: ChannelId::BOOT, message } => {
                assert!(message.data().ends_with(SYSINFO_SERVICE.as_bytes()));
                let mut ok = Message::encode(&BootResponse::Ok).unwrap();
                ok.push_cap(ChannelId(next)).unwrap();
                next += 1;
                framed.feed(Frame::Message { channel: ChannelId::BOOT, message: ok }).await.unwrap();
            }
            Frame::Message { channel, .. } => {
                for chunk in chunk_text(text.as_bytes()).chain([&[][..]]) {
                    let message = Message::with_data(chunk).unwrap().with_sender(3);
                    framed.feed(Frame::Message { channel, message }).await.unwrap();
                }
                framed.feed(Frame::Close { channel }).await.unwrap();
            }
            Frame::Close { .. } => {}
        }
        // Flush what is due once the client has nothing more queued, as a server with a write buffer does.
        if framed.read_buffer().is_empty() {
            SinkExt::<Frame>::flush(&mut framed).await.unwrap();
        }
    }
}

/// A client connected to [`service`] on its own runtime.
struct Setup {
    runtime: tokio::runtime::Runtime,
    client: RefCell<Client>,
}

fn setup() -> Rc<Setup> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let client = runtime.block_on(async {
        let (ours, theirs) = tokio::io::duplex(1 << 16);
        tokio::spawn(service(theirs));
        Client::new(ours, ClientConfig::default())
    });
    Rc::new(Setup { runtime, client: RefCell::new(client) })
}

fn groups() -> Vec<Group> {
    let (seq, many) = (setup(), setup());
    vec![Group::new("tick_of_seven_reports", Throughput::Elements(REPORTS.len() as u64), 200)
        .case(Case::iter("sequential", move || {
            let mut client = seq.client.borrow_mut();
            seq.runtime.block_on(async {
                for command in REPORTS {
                    client.request_raw(&[command]).await.unwrap();
                }
            })
        }))
        .case(
            Case::iter("pipelined", move || {
                let mut client = many.client.borrow_mut();
                let requests: Vec<&[u8]> = REPORTS.iter().map(std::slice::from_ref).collect();
                many.runtime.block_on(async {
                    let replies = client.request_many_raw(&requests).await.unwrap();
                    assert!(replies.iter().all(Result::is_ok));
                })
            })
            .vs("sequential"),
        )]
}

fn main() {
    bench_harness::main(env!("CARGO_PKG_NAME"), groups);
}
