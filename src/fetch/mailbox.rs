//! How publications reach a serving shard on another thread without waking it for nothing.
//!
//! The raft shard publishes two or three times per commit (the append, the flush, the high
//! watermark). A serving shard needs them promptly only while something on it waits for
//! one: a parked Fetch, or a task waiting for the next publication. A follower's fetch shard
//! usually has neither, and an unbounded channel woke it at every publication anyway: with
//! 2,000 commits a second, about 3,600 wakes and 190 ms of CPU a second on each follower, to
//! apply publications that nobody read before the next arrived.
//!
//! A post wakes the receiving shard only when it listens (`Mailbox::listen`, set while
//! something waits) and the post could end a wait (`Post::Prompt`), when the publication
//! resets the reader or names a new snapshot (`Post::Urgent`), or when `WAKE_AT_BACKLOG` posts
//! have piled up (so what is queued stays bounded). A leader's post that only moves its
//! durable end (`Post::Quiet`) answers no parked fetch, so it never wakes on its own.
//! Everything else waits in the box until the shard next looks: every entry point that
//! answers from the view first takes what is queued (`Mailbox::take`).
//!
//! No post is lost between a listen and a take: both hold the box's lock, and a post decides
//! whether to wake under the same lock.

use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Poll, Waker};

/// Posts that pile up before one wakes the receiver even though it is not listening: one
/// wake per this many posts, instead of one per post.
pub const WAKE_AT_BACKLOG: usize = 64;

struct State<T> {
    queue: Vec<T>,
    listening: bool,
    closed: bool,
    waker: Option<Waker>,
    /// A post woke the receiver since its last `next`: that `next` returns even if a `take`
    /// emptied the queue meanwhile, so the receiver's pass after a wake always runs.
    woken: bool,
}

struct Shared<T> {
    state: Mutex<State<T>>,
}

impl<T> Shared<T> {
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        // A poisoned lock means a thread panicked holding it; the queue is still a valid Vec.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Closes the box when the last `Poster` clone is dropped.
struct Closer<T>(Arc<Shared<T>>);

impl<T> Drop for Closer<T> {
    fn drop(&mut self) {
        let waker = {
            let mut s = self.0.lock();
            s.closed = true;
            s.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

/// How much a post needs the receiver awake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Post {
    /// Wakes it even when it does not listen.
    Urgent,
    /// Wakes it when it listens.
    Prompt,
    /// Never wakes it by itself (only as the post that fills the backlog).
    Quiet,
}

/// The raft shard's end.
pub struct Poster<T>(Arc<Closer<T>>);

impl<T> Clone for Poster<T> {
    fn clone(&self) -> Self {
        Poster(self.0.clone())
    }
}

/// The serving shard's end.
pub struct Mailbox<T>(Arc<Shared<T>>);

/// A new box: the poster for the raft shard, the mailbox for the serving shard.
pub fn mailbox<T>() -> (Poster<T>, Mailbox<T>) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            queue: Vec::new(),
            listening: false,
            closed: false,
            waker: None,
            woken: false,
        }),
    });
    (Poster(Arc::new(Closer(shared.clone()))), Mailbox(shared))
}

impl<T> Poster<T> {
    /// Queues `p`, waking the receiver as `how` says, or if the backlog is `WAKE_AT_BACKLOG`
    /// long.
    pub fn post(&self, p: T, how: Post) {
        let waker = {
            let mut s = self.0 .0.lock();
            s.queue.push(p);
            let wake = match how {
                Post::Urgent => true,
                Post::Prompt => s.listening,
                Post::Quiet => false,
            } || s.queue.len() >= WAKE_AT_BACKLOG;
            if wake {
                s.woken = true;
                s.waker.take()
            } else {
                None
            }
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl<T> Mailbox<T> {
    /// What has been posted and not taken, oldest first, without waiting.
    pub fn take(&self) -> Vec<T> {
        std::mem::take(&mut self.0.lock().queue)
    }

    /// Whether every post wakes the receiver (while something on its shard waits for one).
    pub fn listen(&self, on: bool) {
        self.0.lock().listening = on;
    }

    /// Waits until a post wakes this receiver, then takes what is queued (perhaps nothing,
    /// when a `take` came first); `None` once every poster is gone and nothing is queued.
    pub async fn next(&self) -> Option<Vec<T>> {
        std::future::poll_fn(|cx| {
            let mut s = self.0.lock();
            if !s.queue.is_empty() || s.woken {
                s.woken = false;
                return Poll::Ready(Some(std::mem::take(&mut s.queue)));
            }
            if s.closed {
                return Poll::Ready(None);
            }
            match &s.waker {
                Some(w) if w.will_wake(cx.waker()) => {}
                _ => s.waker = Some(cx.waker().clone()),
            }
            Poll::Pending
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Context, Wake};

    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Polls `next` once with a counting waker: what it returned, and the counter.
    fn poll_next(m: &Mailbox<u32>, count: &Arc<Count>) -> Poll<Option<Vec<u32>>> {
        let waker = Waker::from(count.clone());
        let mut cx = Context::from_waker(&waker);
        let mut next = std::pin::pin!(m.next());
        next.as_mut().poll(&mut cx)
    }

    fn woken(count: &Arc<Count>) -> usize {
        count.0.load(Ordering::SeqCst)
    }

    #[test]
    fn posts_wake_a_listener_unless_quiet_and_anyone_when_urgent_or_the_backlog_is_full() {
        let (poster, mailbox) = mailbox::<u32>();
        let count = Arc::new(Count(AtomicUsize::new(0)));
        assert_eq!(poll_next(&mailbox, &count), Poll::Pending);
        // Not listening: queued, nobody woken.
        poster.post(1, Post::Prompt);
        poster.post(2, Post::Prompt);
        assert_eq!(woken(&count), 0);
        // Taken in order without waiting.
        assert_eq!(mailbox.take(), vec![1, 2]);
        // Listening: every post wakes.
        mailbox.listen(true);
        assert_eq!(poll_next(&mailbox, &count), Poll::Pending);
        poster.post(3, Post::Prompt);
        assert_eq!(woken(&count), 1);
        assert_eq!(poll_next(&mailbox, &count), Poll::Ready(Some(vec![3])));
        // A quiet post does not wake even a listener.
        assert_eq!(poll_next(&mailbox, &count), Poll::Pending);
        poster.post(30, Post::Quiet);
        assert_eq!(woken(&count), 1);
        assert_eq!(mailbox.take(), vec![30]);
        // Urgent wakes a receiver that does not listen.
        mailbox.listen(false);
        assert_eq!(poll_next(&mailbox, &count), Poll::Pending);
        poster.post(4, Post::Urgent);
        assert_eq!(woken(&count), 2);
        assert_eq!(poll_next(&mailbox, &count), Poll::Ready(Some(vec![4])));
        // A wake whose post a take got first still ends the next `next`, with nothing.
        assert_eq!(poll_next(&mailbox, &count), Poll::Pending);
        poster.post(5, Post::Urgent);
        assert_eq!(mailbox.take(), vec![5]);
        assert_eq!(poll_next(&mailbox, &count), Poll::Ready(Some(vec![])));
        // The backlog: the post that makes it WAKE_AT_BACKLOG long wakes, none before.
        assert_eq!(poll_next(&mailbox, &count), Poll::Pending);
        for i in 0..WAKE_AT_BACKLOG as u32 - 1 {
            poster.post(i, Post::Quiet);
        }
        assert_eq!(woken(&count), 3);
        poster.post(99, Post::Quiet);
        assert_eq!(woken(&count), 4);
        let all = match poll_next(&mailbox, &count) {
            Poll::Ready(Some(all)) => all,
            other => panic!("expected the backlog, got {other:?}"),
        };
        assert_eq!(all.len(), WAKE_AT_BACKLOG);
    }

    #[test]
    fn the_last_poster_gone_ends_next_after_what_was_queued() {
        let (poster, mailbox) = mailbox::<u32>();
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let second = poster.clone();
        assert_eq!(poll_next(&mailbox, &count), Poll::Pending);
        drop(poster);
        // One clone left: still open, not woken.
        assert_eq!(woken(&count), 0);
        second.post(7, Post::Prompt);
        drop(second);
        assert_eq!(woken(&count), 1);
        assert_eq!(poll_next(&mailbox, &count), Poll::Ready(Some(vec![7])));
        assert_eq!(poll_next(&mailbox, &count), Poll::Ready(None));
    }
}
