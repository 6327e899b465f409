//! A shard-local stop signal: set once, awaited by any number of tasks on the same shard.
//! Not `Send`: each shard has its own, triggered from the shard's mesh receiver.

use std::cell::{Cell, RefCell};
use std::future::poll_fn;
use std::rc::Rc;
use std::task::{Poll, Waker};

#[derive(Clone, Default)]
pub struct StopSignal {
    inner: Rc<Inner>,
}

#[derive(Default)]
struct Inner {
    stopped: Cell<bool>,
    wakers: RefCell<Vec<Waker>>,
}

impl StopSignal {
    pub fn trigger(&self) {
        if self.inner.stopped.replace(true) {
            return;
        }
        for waker in self.inner.wakers.borrow_mut().drain(..) {
            waker.wake();
        }
    }

    pub fn is_stopped(&self) -> bool {
        self.inner.stopped.get()
    }

    /// Resolves once `trigger` has been called.
    pub async fn wait(&self) {
        poll_fn(|cx| {
            if self.inner.stopped.get() {
                return Poll::Ready(());
            }
            let mut wakers = self.inner.wakers.borrow_mut();
            if !wakers.iter().any(|w| w.will_wake(cx.waker())) {
                wakers.push(cx.waker().clone());
            }
            Poll::Pending
        })
        .await
    }
}
