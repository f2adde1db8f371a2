//! `Push::reload`: a sender whose block did not change keeps running untouched; a changed one is replaced and the
//! new one takes over its queue (memory: the items; disk: the same directory) and its counters; a removed one
//! goes; a block whose files cannot be read fails the reload with nothing changed.

use std::sync::Arc;
use std::time::Duration;

use telemon_fleet::{MetricKind, Protocol, Publisher, Registry};
use telemon_push::Push;
use telemon_push::PushConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A receiver that answers every request 204 and counts them.
async fn receiver(listener: tokio::net::TcpListener, requests: Arc<std::sync::atomic::AtomicU64>) {
    loop {
        let Ok((mut s, _)) = listener.accept().await else { return };
        let requests = requests.clone();
        tokio::spawn(async move {
            let mut buf = Vec::new();
            let mut chunk = [0u8; 8192];
            loop {
                let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                    match s.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                    continue;
                };
                let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                let len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
                while buf.len() < end + 4 + len {
                    match s.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                buf.drain(..end + 4 + len);
                requests.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if s.write_all(b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n").await.is_err() {
                    return;
                }
            }
        });
    }
}

fn config(url: &str, a_batch: &str, queue_dir: &std::path::Path, extra: &str) -> PushConfig {
    let text = format!(
        "[[remote_write]]\nname = \"a\"\nurl = \"{url}\"\nbatch = \"{a_batch}\"\n\
         [[remote_write]]\nname = \"b\"\nurl = \"{url}\"\nbatch = \"20ms\"\n\
         [[remote_write]]\nname = \"d\"\nurl = \"{url}\"\nbatch = \"20ms\"\nqueue_dir = \"{}\"\n{extra}",
        queue_dir.display()
    );
    PushConfig::parse("push.toml", &text).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_changed_senders_are_replaced_and_they_keep_their_queues() {
    let registry = Registry::new();
    let mut publisher = Publisher::new(&registry, "t", Protocol::SMON, Vec::new(), 100);
    publisher.up();
    publisher.put("g", "a gauge", MetricKind::Gauge, &[], 1.0);
    publisher.flush();
    // The receiver's port, closed for now: every sender queues.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let url = format!("http://{addr}/api/v1/write");
    let dir = tempfile::tempdir().unwrap();
    let mut push = Push::start(&config(&url, "20ms", dir.path(), ""), None, &registry, "i").unwrap();
    let before = push.stats();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let queued = before[0].queue_bytes();
    assert!(queued > 0, "a's queue fills while the receiver is down");
    let oldest = before[0].oldest_unsent_ms().expect("a has samples waiting");

    // A file that cannot be read: nothing changes.
    let bad = config(
        &url,
        "30ms",
        dir.path(),
        "[[otlp]]\nendpoint = \"http://x\"\nbearer_token_file = \"/nonexistent\"\n",
    );
    let err = push.reload(&bad, None, &registry, Duration::from_millis(200)).await.unwrap_err();
    assert!(err.to_string().contains("/nonexistent"), "{err}");
    assert!(push.stats().iter().zip(&before).all(|(a, b)| Arc::ptr_eq(a, b)), "nothing changed");

    // a's batch changes, d's batch changes (a disk queue), b is as it was.
    let mut new = config(&url, "30ms", dir.path(), "");
    new.remote_write[2].batch = Duration::from_millis(25);
    let started = push.reload(&new, None, &registry, Duration::from_millis(200)).await.unwrap();
    assert_eq!(started, 2);
    let after = push.stats();
    assert!(Arc::ptr_eq(&after[1], &before[1]), "b kept running untouched");
    assert!(Arc::ptr_eq(&after[0], &before[0]), "a's replacement keeps its counters");
    // And its queue: the oldest sample waiting is still the one from before the reload (in the queue, or
    // in the replacement's request in flight).
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(after[0].oldest_unsent_ms(), Some(oldest), "a's replacement has the old sender's samples");
    assert!(Arc::ptr_eq(&after[2], &before[2]), "d's replacement keeps its counters");
    assert!(after[2].disk_bytes() > 0, "and reopened its queue directory");
    assert_eq!(after.iter().map(|s| s.dropped_total()).sum::<u64>(), 0, "nothing dropped");

    // The receiver comes back: the replacements send what the old senders had queued.
    let requests = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    tokio::spawn(receiver(listener, requests.clone()));
    tokio::time::timeout(Duration::from_secs(20), async {
        while after[0].queue_bytes() > 0 || after[2].disk_bytes() > 0 || after[0].sent() == 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the queues drain once the receiver is back");

    // Removing a sender shuts it down.
    let mut fewer = new.clone();
    fewer.remote_write.truncate(1);
    assert_eq!(push.reload(&fewer, None, &registry, Duration::from_millis(200)).await.unwrap(), 0);
    assert_eq!(push.stats().len(), 1);
    push.shutdown(Duration::from_millis(200)).await;
}
