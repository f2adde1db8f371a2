//! Property: however a server interleaves the replies of a pipelined batch (chunk by chunk, across channels,
//! in any order, each ended by the sentinel or by a close), `Client::request_many_raw` gives back each reply
//! whole, in the order of the requests, and leaves no channel open.

use futures::{SinkExt, StreamExt};
use proptest::prelude::*;
use sysinfo_wire::{
    chunk_text, BootResponse, ChannelId, Client, ClientConfig, End, Frame, HostCodec, Message,
};
use tokio_util::codec::Framed;

/// One reply: its text, and whether it ends with a close instead of the sentinel.
#[derive(Debug, Clone)]
struct Planned {
    text: Vec<u8>,
    closed: bool,
}

fn planned() -> impl Strategy<Value = Planned> {
    (prop::collection::vec(b'a'..=b'z', 1..3000), any::<bool>())
        .prop_map(|(text, closed)| Planned { text, closed })
}

/// Plays the server's side: answers each ConnectService with a channel, reads every command, then sends the
/// frames of every reply interleaved in the order `picks` gives (each pick takes the next frame of one reply).
async fn serve(stream: tokio::io::DuplexStream, replies: Vec<Planned>, picks: Vec<usize>) {
    let mut framed = Framed::new(stream, HostCodec);
    let n = replies.len();
    for i in 0..n {
        let Some(Ok(Frame::Message { channel: ChannelId::BOOT, .. })) = framed.next().await else { panic!() };
        let mut ok = Message::encode(&BootResponse::Ok).unwrap();
        ok.push_cap(ChannelId(100 + i as u32)).unwrap();
        framed.send(Frame::Message { channel: ChannelId::BOOT, message: ok }).await.unwrap();
    }
    for _ in 0..n {
        let Some(Ok(Frame::Message { .. })) = framed.next().await else { panic!() };
    }
    let mut frames: Vec<std::collections::VecDeque<Frame>> = replies
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let channel = ChannelId(100 + i as u32);
            let mut v: std::collections::VecDeque<Frame> = chunk_text(&r.text)
                .map(|c| Frame::Message { channel, message: Message::with_data(c).unwrap() })
                .collect();
            if !r.closed {
                v.push_back(Frame::Message { channel, message: Message::new() });
            }
            v.push_back(Frame::Close { channel });
            v
        })
        .collect();
    let mut picks = picks.into_iter().cycle();
    while frames.iter().any(|f| !f.is_empty()) {
        let start = picks.next().unwrap_or(0) % n;
        let i = (start..start + n).map(|k| k % n).find(|&k| !frames[k].is_empty()).unwrap();
        // The client has every reply it asked for once the last needed frame is out, and may hang
        // up before the rest (frames after a CLOSE) is written: that is not the property under test.
        if framed.feed(frames[i].pop_front().unwrap()).await.is_err() {
            return;
        }
    }
    if SinkExt::<Frame>::flush(&mut framed).await.is_err() {
        return;
    }
    // Keep the pipe open until the client is done.
    while framed.next().await.is_some() {}
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn any_interleaving_of_a_batch_gives_every_reply_whole_and_in_order(
        replies in prop::collection::vec(planned(), 1..8),
        picks in prop::collection::vec(any::<usize>(), 1..64),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let (ours, theirs) = tokio::io::duplex(4096);
            let server = tokio::spawn(serve(theirs, replies.clone(), picks));
            let mut client = Client::new(ours, ClientConfig::default());
            let requests: Vec<&[u8]> = replies.iter().map(|_| &[0x04u8][..]).collect();
            let got = client.request_many_raw(&requests).await.unwrap();
            prop_assert_eq!(got.len(), replies.len());
            for (reply, planned) in got.into_iter().zip(&replies) {
                let reply = reply.unwrap();
                prop_assert_eq!(reply.text.as_bytes(), &planned.text[..]);
                prop_assert_eq!(reply.end, if planned.closed { End::Closed } else { End::Sentinel });
            }
            drop(client);
            server.await.unwrap();
            Ok(())
        })?;
    }
}

fn any_frame() -> impl Strategy<Value = Frame> {
    let channel = (0u32..4).prop_map(ChannelId);
    prop_oneof![
        (channel.clone(), prop::collection::vec(any::<u8>(), 0..40), prop::collection::vec(0u32..4, 0..3))
            .prop_map(|(channel, data, caps)| {
                let mut message = Message::with_data(data).unwrap();
                for cap in caps {
                    message.push_cap(ChannelId(cap)).unwrap();
                }
                Frame::Message { channel, message }
            }),
        channel.prop_map(|channel| Frame::Close { channel }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Whatever a server sends (channels it never handed out, the boot channel as a reply channel, the same
    /// channel twice, closes of anything), a batch ends with replies or a typed error, within the timeout.
    #[test]
    fn a_batch_against_any_server_ends_without_panicking(frames in prop::collection::vec(any_frame(), 0..40)) {
        let runtime =
            tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap();
        runtime.block_on(async {
            let (ours, theirs) = tokio::io::duplex(1 << 16);
            let server = tokio::spawn(async move {
                let mut framed = Framed::new(theirs, HostCodec);
                for frame in frames {
                    framed.feed(frame).await.unwrap();
                }
                SinkExt::<Frame>::flush(&mut framed).await.unwrap();
                while framed.next().await.is_some() {}
            });
            let config = ClientConfig { request_timeout: std::time::Duration::from_secs(5), ..ClientConfig::default() };
            let mut client = Client::new(ours, config);
            let outcome = client.request_many_raw(&[&[0x00], &[0x04], &[0x08]]).await;
            if let Ok(replies) = outcome {
                prop_assert_eq!(replies.len(), 3);
            }
            drop(client);
            server.await.unwrap();
            Ok(())
        })?;
    }
}
