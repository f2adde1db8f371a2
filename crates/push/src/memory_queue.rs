//! The bounded in-memory queue between a sender's sampler and its HTTP loop (a block without `queue_dir`;
//! with one, the [`disk`](crate::disk) queue takes its place).
//!
//! The sampler pushes without ever waiting; when the queue would go over its byte bound, the oldest
//! items are dropped (and counted) to make room. The HTTP loop takes batches from the front, so
//! items leave in the order they came: a series' samples are sent in timestamp order.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard};

use tokio::sync::Notify;

/// What the queue needs to know of an item.
pub trait Queued {
    /// The bytes the item counts for against the bound (its share of a request, roughly).
    fn weight(&self) -> usize;
    /// Its timestamp, in Unix milliseconds.
    fn timestamp_ms(&self) -> i64;
}

/// A FIFO of items bounded by the sum of their weights.
#[derive(Debug)]
pub struct Queue<T> {
    inner: Mutex<Inner<T>>,
    notify: Notify,
    limit: usize,
}

#[derive(Debug)]
struct Inner<T> {
    items: VecDeque<T>,
    bytes: usize,
}

impl<T: Queued> Queue<T> {
    /// An empty queue holding at most `limit` bytes.
    pub fn new(limit: usize) -> Self {
        Queue { inner: Mutex::new(Inner { items: VecDeque::new(), bytes: 0 }), notify: Notify::new(), limit }
    }

    fn lock(&self) -> MutexGuard<'_, Inner<T>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends `items` (oldest first); drops the oldest queued items while over the bound, and
    /// returns how many were dropped. An item heavier than the whole bound is dropped itself.
    pub fn push(&self, items: impl IntoIterator<Item = T>) -> u64 {
        let mut dropped = 0u64;
        {
            let mut q = self.lock();
            for item in items {
                let w = item.weight();
                if w > self.limit {
                    dropped += 1;
                    continue;
                }
                q.bytes += w;
                q.items.push_back(item);
                dropped += self.shed(&mut q);
            }
        }
        self.notify.notify_one();
        dropped
    }

    /// Drops the oldest items while over the bound; how many.
    fn shed(&self, q: &mut Inner<T>) -> u64 {
        let mut dropped = 0;
        while q.bytes > self.limit {
            let Some(old) = q.items.pop_front() else { break };
            q.bytes -= old.weight();
            dropped += 1;
        }
        dropped
    }

    /// Puts `items` (taken with [`Queue::take`] and not sent) back at the front, oldest first; drops the
    /// oldest while over the bound and returns how many were dropped.
    pub fn put_back(&self, items: Vec<T>) -> u64 {
        let dropped = {
            let mut q = self.lock();
            for item in items.into_iter().rev() {
                q.bytes += item.weight();
                q.items.push_front(item);
            }
            self.shed(&mut q)
        };
        self.notify.notify_one();
        dropped
    }

    /// Takes up to `max` items from the front.
    pub fn take(&self, max: usize) -> Vec<T> {
        let mut q = self.lock();
        let n = max.min(q.items.len());
        let batch: Vec<T> = q.items.drain(..n).collect();
        q.bytes -= batch.iter().map(Queued::weight).sum::<usize>();
        batch
    }

    /// Waits until [`Queue::push`] was called since the last wait (returns at once if it was).
    pub async fn pushed(&self) {
        self.notify.notified().await;
    }

    /// The bytes queued.
    pub fn bytes(&self) -> usize {
        self.lock().bytes
    }

    /// The items queued.
    pub fn len(&self) -> usize {
        self.lock().items.len()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.lock().items.is_empty()
    }

    /// The timestamp of the oldest item, if any.
    pub fn oldest_ms(&self) -> Option<i64> {
        self.lock().items.front().map(Queued::timestamp_ms)
    }

    /// The bound, in bytes.
    pub fn limit(&self) -> usize {
        self.limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq)]
    struct Item(i64, usize);
    impl Queued for Item {
        fn weight(&self) -> usize {
            self.1
        }
        fn timestamp_ms(&self) -> i64 {
            self.0
        }
    }

    #[test]
    fn drops_the_oldest_over_the_bound_and_keeps_order() {
        let q = Queue::new(100);
        assert_eq!(q.push((0..10).map(|i| Item(i, 10))), 0);
        assert_eq!(q.bytes(), 100);
        assert_eq!(q.push([Item(10, 25)]), 3, "three of 10 bytes make room for 25");
        assert_eq!((q.len(), q.bytes(), q.oldest_ms()), (8, 95, Some(3)));
        assert_eq!(q.push([Item(11, 101)]), 1, "heavier than the bound: dropped itself");
        let batch = q.take(3);
        assert_eq!(batch.iter().map(|i| i.0).collect::<Vec<_>>(), [3, 4, 5]);
        assert_eq!((q.len(), q.bytes()), (5, 65));
        assert_eq!(q.take(100).len(), 5);
        assert!(q.is_empty() && q.bytes() == 0 && q.oldest_ms().is_none());
    }

    proptest::proptest! {
        #[test]
        fn the_bound_always_holds(weights in proptest::collection::vec(1usize..300, 0..200), take in 0usize..20) {
            let q = Queue::new(1000);
            let mut dropped = 0;
            for (i, w) in weights.iter().enumerate() {
                dropped += q.push([Item(i as i64, *w)]);
                proptest::prop_assert!(q.bytes() <= 1000);
                if i % 7 == 0 {
                    let _ = q.take(take);
                }
            }
            let left = q.take(usize::MAX);
            proptest::prop_assert!(left.windows(2).all(|w| w[0].0 < w[1].0), "order kept");
            proptest::prop_assert!(dropped as usize <= weights.len());
        }
    }
}
