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
//! Nothing on the raft shard's side blocks: the queue is a lock-free channel, and whether a
//! post wakes the receiver is decided with atomics. No post is lost between a listen and a
//! take: a post and a listen are each followed by a sequentially consistent fence, so either
//! the post sees the listener or the listener's take sees the post.

use std::cell::RefCell;
use std::sync::atomic::{fence, AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::task::Poll;

use futures_channel::mpsc;
use futures_util::task::AtomicWaker;

/// Posts that pile up before one wakes the receiver even though it is not listening: one
/// wake per this many posts, instead of one per post.
pub const WAKE_AT_BACKLOG: usize = 64;

/// What both ends share besides the queue. Nothing here blocks: the raft shard must never
/// wait for a serving shard's thread (a lock held by a thread the scheduler preempted would
/// make it).
#[derive(Default)]
struct Shared {
    listening: AtomicBool,
    /// Posts since the receiver last took the queue (approximate: only bounds the backlog).
    pending: AtomicUsize,
    /// A post woke the receiver since its last `next`: that `next` returns even if a `take`
    /// emptied the queue meanwhile, so the receiver's pass after a wake always runs.
    woken: AtomicBool,
    /// Every poster is gone (set after their last post).
    closed: AtomicBool,
    waker: AtomicWaker,
}

impl Shared {
    fn wake(&self) {
        self.woken.store(true, SeqCst);
        self.waker.wake();
    }
}

/// Closes the queue and wakes the receiver when the last `Poster` clone is dropped.
struct Closer<T> {
    tx: mpsc::UnboundedSender<T>,
    shared: Arc<Shared>,
}

impl<T> Drop for Closer<T> {
    fn drop(&mut self) {
        self.tx.close_channel();
        self.shared.closed.store(true, SeqCst);
        self.shared.wake();
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

/// The serving shard's end (one shard's: not shared between threads).
pub struct Mailbox<T> {
    rx: RefCell<mpsc::UnboundedReceiver<T>>,
    shared: Arc<Shared>,
}

/// A new box: the poster for the raft shard, the mailbox for the serving shard.
pub fn mailbox<T>() -> (Poster<T>, Mailbox<T>) {
    let (tx, rx) = mpsc::unbounded();
    let shared = Arc::new(Shared::default());
    let closer = Closer {
        tx,
        shared: shared.clone(),
    };
    (
        Poster(Arc::new(closer)),
        Mailbox {
            rx: RefCell::new(rx),
            shared,
        },
    )
}

impl<T> Poster<T> {
    /// Queues `p`, waking the receiver as `how` says, or if the backlog is `WAKE_AT_BACKLOG`
    /// long. Lock-free: the queue is a channel whose receiver never registers its own waker,
    /// so a send alone wakes nobody.
    pub fn post(&self, p: T, how: Post) {
        let shared = &self.0.shared;
        // Fails only once the receiver is gone, and then nobody is left to tell.
        let _ = self.0.tx.unbounded_send(p);
        let pending = shared.pending.fetch_add(1, SeqCst) + 1;
        // Pairs with the fence in `Mailbox::listen`: either this post sees the receiver
        // listening, or the receiver's take after listening sees this post.
        fence(SeqCst);
        let wake = match how {
            Post::Urgent => true,
            Post::Prompt => shared.listening.load(SeqCst),
            Post::Quiet => false,
        } || pending >= WAKE_AT_BACKLOG;
        if wake {
            shared.wake();
        }
    }
}

impl<T> Mailbox<T> {
    /// What has been posted and not taken, oldest first, without waiting.
    pub fn take(&self) -> Vec<T> {
        self.shared.pending.store(0, SeqCst);
        let mut rx = self.rx.borrow_mut();
        let mut out = Vec::new();
        while let Ok(p) = rx.try_recv() {
            out.push(p);
        }
        out
    }

    /// Whether every post wakes the receiver (while something on its shard waits for one).
    /// A caller that turns it on takes the queue after: a post it missed is there.
    pub fn listen(&self, on: bool) {
        self.shared.listening.store(on, SeqCst);
        fence(SeqCst);
    }

    /// Waits until a post wakes this receiver, then takes what is queued (perhaps nothing,
    /// when a `take` came first); `None` once every poster is gone and nothing is queued.
    pub async fn next(&self) -> Option<Vec<T>> {
        std::future::poll_fn(|cx| {
            self.shared.waker.register(cx.waker());
            let woken = self.shared.woken.swap(false, SeqCst);
            // Read before the take: a closed box's last posts are in the queue by then.
            let closed = self.shared.closed.load(SeqCst);
            let taken = self.take();
            if !taken.is_empty() {
                return Poll::Ready(Some(taken));
            }
            if closed {
                return Poll::Ready(None);
            }
            if woken {
                return Poll::Ready(Some(taken));
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
    use std::task::{Context, Wake, Waker};

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

    /// A receiver on another thread that waits only through `next` must get every post, in
    /// order: when listening, each post on its own (the poster waits for each to arrive, so a
    /// lost wake fails the timeout); when not, quiet posts through the backlog's wakes and
    /// the poster's drop.
    #[test]
    fn a_receiver_on_another_thread_gets_every_post_in_order() {
        use std::sync::mpsc::channel;
        use std::time::Duration;
        const N: u32 = 2_000;
        for (listening, how) in [(true, Post::Prompt), (false, Post::Quiet)] {
            let (poster, mailbox) = mailbox::<u32>();
            mailbox.listen(listening);
            let (arrived, arrivals) = channel();
            std::thread::spawn(move || {
                while let Some(batch) = futures_lite::future::block_on(mailbox.next()) {
                    for p in batch {
                        let _ = arrived.send(p);
                    }
                }
            });
            let wait = Duration::from_secs(10);
            let mut got = Vec::new();
            for i in 0..N {
                poster.post(i, how);
                if listening {
                    let p = arrivals.recv_timeout(wait);
                    got.push(p.unwrap_or_else(|_| panic!("post {i} did not wake the listener")));
                }
            }
            drop(poster);
            while let Ok(p) = arrivals.recv_timeout(wait) {
                got.push(p);
            }
            assert_eq!(got, (0..N).collect::<Vec<_>>(), "{how:?}");
        }
    }
}
