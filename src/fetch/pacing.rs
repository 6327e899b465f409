//! Observers' answers, paced (`ringraft.fetch.observer.interval.ms`).
//!
//! A voter's Fetch is answered as soon as there is something to send: the commit waits on it.
//! An observer's is not on any commit path, and at one answer per commit a thousand observers
//! cost a leader a thousand answers per commit. So once an observer has caught up (its last
//! answer was not cut short by its `max_bytes`), its next Fetch waits for the shard's next
//! *tick*, and observers parked for records are woken at ticks rather than at every
//! publication. Ticks come at most once per interval and only while some observer waits for
//! one, so every tail observer gets at most one answer per interval, all of them in the same
//! turn, from the same view (their reads hit the same cache entries). An observer that is
//! catching up is answered at once, every time: pacing it would cap catch-up at `max_bytes`
//! per interval.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

/// Observer ids remembered as caught up; past this the map starts over (a peer choosing
/// replica ids must not grow it without bound; forgetting costs each observer one unpaced
/// answer).
const CAUGHT_UP_MAX: usize = 16_384;

#[derive(Debug, Default)]
pub struct Pacing {
    interval: Duration,
    ticks: Cell<u64>,
    waiters: RefCell<Vec<Waker>>,
    /// Someone waits for a tick; the ticker sleeps until then.
    due: Cell<bool>,
    ticker: RefCell<Option<Waker>>,
    last_tick: Cell<Option<Instant>>,
    /// Per observer id: the tick count when its last caught-up answer was sent.
    caught_up: RefCell<HashMap<i32, u64>>,
}

impl Pacing {
    /// `interval` zero: no pacing (every answer goes at once, as a voter's does).
    pub fn new(interval: Duration) -> Self {
        Pacing {
            interval,
            ..Pacing::default()
        }
    }

    pub fn enabled(&self) -> bool {
        !self.interval.is_zero()
    }

    pub fn ticks(&self) -> u64 {
        self.ticks.get()
    }

    /// Asks for a tick (parked observers, or an observer waiting for its turn).
    pub fn request_tick(&self) {
        if !self.due.replace(true) {
            if let Some(w) = self.ticker.borrow_mut().take() {
                w.wake();
            }
        }
    }

    /// Waits until a tick has been asked for, and until at least `interval` has passed since
    /// the last one; the caller then ticks (`tick`). Returns at once when pacing is off.
    pub async fn next_tick_due(&self) {
        std::future::poll_fn(|cx| {
            if self.due.get() {
                return Poll::Ready(());
            }
            *self.ticker.borrow_mut() = Some(cx.waker().clone());
            Poll::Pending
        })
        .await;
        if let Some(next) = self
            .last_tick
            .get()
            .and_then(|t| t.checked_add(self.interval))
        {
            let now = Instant::now();
            if next > now {
                glommio::timer::sleep(next - now).await;
            }
        }
    }

    /// A tick: everyone waiting for one goes.
    pub fn tick(&self) {
        self.due.set(false);
        self.last_tick.set(Some(Instant::now()));
        self.ticks.set(self.ticks.get() + 1);
        for w in self.waiters.borrow_mut().drain(..) {
            w.wake();
        }
    }

    /// An observer's Fetch waits here for its turn: until the tick after its last caught-up
    /// answer. Fetches that may not wait a whole interval (`max_wait_ms` below it) go at once.
    pub async fn wait_turn(&self, observer: i32, max_wait_ms: i32) {
        if !self.enabled() || (max_wait_ms.max(0) as u128) < self.interval.as_millis() {
            return;
        }
        let Some(seen) = self.caught_up.borrow().get(&observer).copied() else {
            return;
        };
        if seen != self.ticks.get() {
            return;
        }
        self.request_tick();
        std::future::poll_fn(|cx| {
            if self.ticks.get() != seen {
                return Poll::Ready(());
            }
            self.waiters.borrow_mut().push(cx.waker().clone());
            Poll::Pending
        })
        .await;
    }

    /// An answer went to `observer`; `caught_up`: it held everything the observer could be
    /// sent (it was not cut at its `max_bytes`), so its next Fetch waits for a tick.
    pub fn answered(&self, observer: i32, caught_up: bool) {
        if !self.enabled() {
            return;
        }
        let mut map = self.caught_up.borrow_mut();
        if caught_up {
            if map.len() >= CAUGHT_UP_MAX && !map.contains_key(&observer) {
                map.clear();
            }
            map.insert(observer, self.ticks.get());
        } else {
            map.remove(&observer);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_caught_up_observer_waits_and_only_until_the_next_tick() {
        let p = Pacing::new(Duration::from_millis(25));
        let ready = |f: &mut std::pin::Pin<Box<dyn std::future::Future<Output = ()> + '_>>| {
            let waker = futures_task_noop();
            let mut cx = std::task::Context::from_waker(&waker);
            f.as_mut().poll(&mut cx).is_ready()
        };
        // Never answered, or catching up: no wait.
        let mut f: std::pin::Pin<Box<dyn std::future::Future<Output = ()>>> =
            Box::pin(p.wait_turn(7, 500));
        assert!(ready(&mut f));
        p.answered(7, false);
        let mut f: std::pin::Pin<Box<dyn std::future::Future<Output = ()>>> =
            Box::pin(p.wait_turn(7, 500));
        assert!(ready(&mut f));
        // Caught up: waits for a tick, and asks for one.
        p.answered(7, true);
        let mut f: std::pin::Pin<Box<dyn std::future::Future<Output = ()>>> =
            Box::pin(p.wait_turn(7, 500));
        assert!(!ready(&mut f));
        assert!(p.due.get(), "a waiting observer asks for a tick");
        p.tick();
        assert!(ready(&mut f));
        drop(f);
        // A Fetch that may not wait an interval goes at once.
        p.answered(7, true);
        let mut f: std::pin::Pin<Box<dyn std::future::Future<Output = ()>>> =
            Box::pin(p.wait_turn(7, 10));
        assert!(ready(&mut f));
        // Off: nothing waits.
        let off = Pacing::new(Duration::ZERO);
        off.answered(7, true);
        let mut f: std::pin::Pin<Box<dyn std::future::Future<Output = ()>>> =
            Box::pin(off.wait_turn(7, 500));
        assert!(ready(&mut f));
    }

    #[test]
    fn hostile_observer_ids_do_not_grow_the_map_without_bound() {
        let p = Pacing::new(Duration::from_millis(25));
        for id in 0..(CAUGHT_UP_MAX as i32 * 3) {
            p.answered(id, true);
        }
        assert!(p.caught_up.borrow().len() <= CAUGHT_UP_MAX);
    }

    fn futures_task_noop() -> Waker {
        std::task::Waker::noop().clone()
    }
}
