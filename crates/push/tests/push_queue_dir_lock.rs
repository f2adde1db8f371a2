//! Two senders never share a `queue_dir`: the disk queue locks its directory, and a second `Push` on the same
//! directory fails to start with a message that names the block and the directory, until the first is gone.

use std::time::Duration;

use telemon_fleet::Registry;
use telemon_push::{Push, PushConfig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_sender_on_a_queue_dir_is_refused_until_the_first_is_gone() {
    let registry = Registry::new();
    let dir = tempfile::tempdir().unwrap();
    // Nothing listens there: the senders only queue.
    let text = format!(
        "[[remote_write]]\nname = \"d\"\nurl = \"http://127.0.0.1:9/api/v1/write\"\nqueue_dir = \"{}\"\n",
        dir.path().display()
    );
    let config = PushConfig::parse("push.toml", &text).unwrap();
    let first = Push::start(&config, None, &registry, "i").unwrap();

    let Err(refused) = Push::start(&config, None, &registry, "i") else { panic!("a second sender started") };
    assert_eq!(
        refused.to_string(),
        format!(
            "[[remote_write]] d: queue_dir {} is in use by another process (its lock file is held): \
             each telemon needs a queue_dir of its own",
            dir.path().display()
        )
    );

    first.shutdown(Duration::from_millis(200)).await;
    let again =
        Push::start(&config, None, &registry, "i").expect("the directory is free once the first is gone");
    again.shutdown(Duration::from_millis(200)).await;
}
