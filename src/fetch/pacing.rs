//! Observers' answers, paced (`ringraft.fetch.observer.interval.ms`).
//!
//! A voter's Fetch is answered as soon as there is something to send: the commit waits on it.
//! An observer's is not on any commit path, and at one answer per commit a thousand observers
//! cost a leader a thousand answers per commit. So once an observer has caught up (its last
//! answer was not cut short by its `max_bytes`), its next Fetch waits for its *turn*, and
//! observers parked for records are woken at their turns rather than at every publication.
//!
//! Turns are spread over the interval: the shard ticks `slots` times per interval (while some
//! observer waits), on a fixed grid, and each observer owns one slot (its id modulo `slots`).
//! An observer's turn is its slot's next tick after the one its last caught-up answer was
//! released at, so it gets at most one such answer per round of ticks (an interval); a
//! thousand observers are answered a sixteenth at a time, not all in one turn. An observer
//! whose Fetch comes after its turn has passed goes at once and keeps its slot: being late
//! does not cost it a round. One turn for all of them made a burst of a
//! thousand answers every interval, on the shard's core and on the cores of whoever reads
//! them, and the voters' commits that fell into it waited (`ringraft bench fetch`).
//!
//! An observer that is catching up is answered at once, every time: pacing it would cap
//! catch-up at `max_bytes` per interval.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

/// Observer ids remembered as caught up; past this the map starts over (a peer choosing
/// replica ids must not grow it without bound; forgetting costs each observer one unpaced
/// answer).
const CAUGHT_UP_MAX: usize = 16_384;

/// Ticks per interval at most: each observer's turn comes at one of them. Fewer when the
/// interval is short, so that ticks stay at least a millisecond apart.
const SLOTS_MAX: u64 = 16;

#[derive(Debug)]
pub struct Pacing {
    interval: Duration,
    /// Ticks per interval (`SLOTS_MAX`, or the interval in whole milliseconds when that is
    /// fewer); at least 1.
    slots: u64,
    ticks: Cell<u64>,
    /// Per slot: Fetches waiting for their turn, with the tick it comes at.
    waiters: RefCell<Vec<Vec<(u64, Waker)>>>,
    /// Someone waits for a tick; the ticker sleeps until then.
    due: Cell<bool>,
    ticker: RefCell<Option<Waker>>,
    /// Where the last tick was due on the grid (`next_tick_due`).
    last_tick: Cell<Option<Instant>>,
    /// Ticks go on until this one while observers are parked: a publication owes every
    /// slot's parked observers their tick (`publication`).
    round_until: Cell<u64>,
    /// Per observer id: the tick its last caught-up answer was released at (its turn's, when
    /// it came through `wait_turn`).
    caught_up: RefCell<HashMap<i32, u64>>,
}

impl Pacing {
    /// `interval` zero: no pacing (every answer goes at once, as a voter's does).
    pub fn new(interval: Duration) -> Self {
        let slots = (interval.as_millis() as u64).clamp(1, SLOTS_MAX);
        Pacing {
            interval,
            slots,
            ticks: Cell::new(0),
            waiters: RefCell::new((0..slots).map(|_| Vec::new()).collect()),
            due: Cell::new(false),
            ticker: RefCell::new(None),
            last_tick: Cell::new(None),
            round_until: Cell::new(0),
            caught_up: RefCell::new(HashMap::new()),
        }
    }

    pub fn enabled(&self) -> bool {
        !self.interval.is_zero()
    }

    pub fn ticks(&self) -> u64 {
        self.ticks.get()
    }

    /// The slot `observer`'s turns come at.
    fn slot(&self, observer: i32) -> u64 {
        i64::from(observer).rem_euclid(self.slots as i64) as u64
    }

    /// Whether tick `tick` is `observer`'s slot: a parked observer is woken only then.
    pub fn is_slot(&self, observer: i32, tick: u64) -> bool {
        tick % self.slots == self.slot(observer)
    }

    /// The first tick of `observer`'s slot after `released`.
    fn turn(&self, observer: i32, released: u64) -> u64 {
        let earliest = released + 1;
        let behind = (self.slot(observer) + self.slots - earliest % self.slots) % self.slots;
        earliest + behind
    }

    /// Asks for a tick (parked observers, or an observer waiting for its turn).
    pub fn request_tick(&self) {
        if !self.due.replace(true) {
            if let Some(w) = self.ticker.borrow_mut().take() {
                w.wake();
            }
        }
    }

    /// Records were published while observers are parked: tick through a whole round of
    /// slots, so that each parked observer is woken at its own.
    pub fn publication(&self) {
        self.round_until.set(self.ticks.get() + self.slots);
        self.request_tick();
    }

    /// Waits until a tick has been asked for, and until its time on the grid: a slot's share of
    /// the interval after the last tick's time, so that a late tick does not push back all the
    /// ones after it. The caller then ticks (`tick`).
    pub async fn next_tick_due(&self) {
        let mut idle = false;
        std::future::poll_fn(|cx| {
            if self.due.get() {
                return Poll::Ready(());
            }
            idle = true;
            *self.ticker.borrow_mut() = Some(cx.waker().clone());
            Poll::Pending
        })
        .await;
        let now = Instant::now();
        let at = self.tick_time(now, idle);
        if at > now {
            glommio::timer::sleep(at - now).await;
        }
        self.last_tick.set(Some(at));
    }

    /// When the next tick is due, at `now`; `idle`: the ticker slept since the last one.
    fn tick_time(&self, now: Instant, idle: bool) -> Instant {
        let period = self.interval / self.slots as u32;
        match self.last_tick.get().and_then(|t| t.checked_add(period)) {
            // A ticker that slept, or fell an interval behind, starts the grid again.
            Some(grid) if idle || now.saturating_duration_since(grid) > self.interval => {
                grid.max(now)
            }
            Some(grid) => grid,
            None => now,
        }
    }

    /// A tick: the Fetches whose turn it is go. Returns its number; the caller wakes the
    /// parked observers whose slot it is (`is_slot`). `observers_parked`: whether any are
    /// parked (ticks go on through a publication's round for them).
    pub fn tick(&self, observers_parked: bool) -> u64 {
        let tick = self.ticks.get() + 1;
        self.ticks.set(tick);
        let mut waiters = self.waiters.borrow_mut();
        let slot = &mut waiters[(tick % self.slots) as usize];
        slot.retain(|(turn, waker)| {
            if *turn <= tick {
                waker.wake_by_ref();
                false
            } else {
                true
            }
        });
        let waiting = waiters.iter().any(|w| !w.is_empty());
        self.due
            .set(waiting || (observers_parked && tick < self.round_until.get()));
        tick
    }

    /// An observer's Fetch waits here for its turn (`turn`); the tick it was released at: its
    /// slot's latest, even when it came later. Fetches that may not wait a whole interval
    /// (`max_wait_ms` below it) go at once.
    pub async fn wait_turn(&self, observer: i32, max_wait_ms: i32) -> u64 {
        if !self.enabled() || (max_wait_ms.max(0) as u128) < self.interval.as_millis() {
            return self.ticks.get();
        }
        let Some(released) = self.caught_up.borrow().get(&observer).copied() else {
            return self.ticks.get();
        };
        let turn = self.turn(observer, released);
        std::future::poll_fn(|cx| {
            let now = self.ticks.get();
            if now >= turn {
                // Its slot's latest tick: a Fetch rounds late still gets one answer.
                let slot = self.slot(observer);
                return Poll::Ready(now - (now + self.slots - slot) % self.slots);
            }
            self.waiters.borrow_mut()[self.slot(observer) as usize]
                .push((turn, cx.waker().clone()));
            self.request_tick();
            Poll::Pending
        })
        .await
    }

    /// An answer released at tick `released` went to `observer`; `caught_up`: it held
    /// everything the observer could be sent (it was not cut at its `max_bytes`), so its next
    /// Fetch waits for its turn.
    pub fn answered(&self, observer: i32, caught_up: bool, released: u64) {
        if !self.enabled() {
            return;
        }
        let mut map = self.caught_up.borrow_mut();
        if caught_up {
            if map.len() >= CAUGHT_UP_MAX && !map.contains_key(&observer) {
                map.clear();
            }
            map.insert(observer, released);
        } else {
            map.remove(&observer);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::pin::Pin;

    type Turn<'a> = Pin<Box<dyn Future<Output = u64> + 'a>>;

    fn ready<F: Future<Output = u64> + ?Sized>(f: &mut Pin<Box<F>>) -> Option<u64> {
        let waker = Waker::noop().clone();
        let mut cx = std::task::Context::from_waker(&waker);
        match f.as_mut().poll(&mut cx) {
            Poll::Ready(t) => Some(t),
            Poll::Pending => None,
        }
    }

    #[test]
    fn only_a_caught_up_observer_waits_and_only_until_its_turn() {
        let p = Pacing::new(Duration::from_millis(25));
        assert_eq!(p.slots, SLOTS_MAX);
        // Never answered, or catching up: no wait.
        assert_eq!(ready(&mut Box::pin(p.wait_turn(7, 500))), Some(0));
        p.answered(7, false, 0);
        assert_eq!(ready(&mut Box::pin(p.wait_turn(7, 500))), Some(0));
        // Caught up: waits for its slot's next tick (7), and asks for ticks until then.
        p.answered(7, true, 0);
        let mut f: Turn = Box::pin(p.wait_turn(7, 500));
        assert_eq!(ready(&mut f), None);
        assert!(p.due.get(), "a waiting observer asks for a tick");
        for _ in 1..7 {
            p.tick(false);
            assert!(p.due.get(), "ticks go on while an observer waits");
            assert_eq!(ready(&mut f), None, "before its turn at tick 7");
        }
        p.tick(false);
        assert_eq!(ready(&mut f), Some(7));
        assert!(!p.due.get(), "nobody waits any more");
        drop(f);
        // Then a whole round on.
        p.answered(7, true, 7);
        assert_eq!(p.turn(7, 7), 23);
        // A Fetch that may not wait an interval goes at once.
        assert_eq!(ready(&mut Box::pin(p.wait_turn(7, 10))), Some(7));
        // Off: nothing waits.
        let off = Pacing::new(Duration::ZERO);
        off.answered(7, true, 0);
        assert_eq!(ready(&mut Box::pin(off.wait_turn(7, 500))), Some(0));
    }

    /// Observers answered together are released a slot at a time afterwards, each once per
    /// round of ticks.
    #[test]
    fn turns_are_spread_over_the_interval_and_come_once_per_interval() {
        let p = Pacing::new(Duration::from_millis(25));
        let slots = p.slots;
        let observers = 1000;
        let mut last = vec![0u64; observers as usize];
        for id in 0..observers {
            p.answered(id, true, 0);
        }
        let mut released_per_tick = HashMap::<u64, usize>::new();
        for round in 0..5 {
            let mut waiting: Vec<(i32, Turn)> = (0..observers)
                .map(|id| (id, Box::pin(p.wait_turn(id, 500)) as Turn))
                .collect();
            while !waiting.is_empty() {
                waiting.retain_mut(|(id, f)| match ready(f) {
                    Some(t) => {
                        let i = *id as usize;
                        let gap = t - last[i];
                        assert!(
                            if round == 0 {
                                gap >= 1 && gap <= slots
                            } else {
                                gap == slots
                            },
                            "observer {id}: {} then {t}",
                            last[i]
                        );
                        last[i] = t;
                        *released_per_tick.entry(t).or_default() += 1;
                        p.answered(*id, true, t);
                        false
                    }
                    None => true,
                });
                if !waiting.is_empty() {
                    p.tick(false);
                }
            }
        }
        let most = released_per_tick.values().max().copied().unwrap_or(0);
        // A sixteenth of them per tick, at most.
        assert!(most <= 63, "{most} observers released in one tick");
    }

    #[test]
    fn a_late_fetch_keeps_its_slot_and_gets_one_answer_per_round() {
        let p = Pacing::new(Duration::from_millis(25));
        p.answered(3, true, 3);
        assert_eq!(p.turn(3, 3), 19);
        for _ in 0..40 {
            p.tick(false);
        }
        // Two rounds late: released at its slot's latest tick, 35, not at 19 then 35.
        assert_eq!(ready(&mut Box::pin(p.wait_turn(3, 500))), Some(35));
        p.answered(3, true, 35);
        assert_eq!(ready(&mut Box::pin(p.wait_turn(3, 500))), None);
        // Answered off its slot (a parked Fetch's deadline): its slot's next tick.
        assert_eq!(p.turn(3, 37), 51);
    }

    #[test]
    fn a_publication_ticks_a_whole_round_for_parked_observers() {
        let p = Pacing::new(Duration::from_millis(25));
        p.publication();
        assert!(p.due.get());
        let mut ticks = 0;
        while p.due.get() {
            let t = p.tick(true);
            ticks += 1;
            assert!((0..16).filter(|id| p.is_slot(*id, t)).count() == 1);
        }
        assert_eq!(ticks, p.slots, "one tick per slot, then the ticker sleeps");
        // Nobody parked: one tick is enough.
        p.publication();
        p.tick(false);
        assert!(!p.due.get());
    }

    #[test]
    fn ticks_keep_to_a_grid_unless_the_ticker_slept_or_fell_an_interval_behind() {
        let p = Pacing::new(Duration::from_millis(32));
        let ms = Duration::from_millis;
        let t0 = Instant::now();
        assert_eq!(p.tick_time(t0, true), t0, "the first tick goes at once");
        p.last_tick.set(Some(t0));
        // 2 ms apart; a tick that ran late does not move the next one.
        assert_eq!(p.tick_time(t0 + ms(1), false), t0 + ms(2));
        assert_eq!(
            p.tick_time(t0 + ms(3), false),
            t0 + ms(2),
            "late: due already"
        );
        // Woken from sleep: not before its slot's share, and not in the past.
        assert_eq!(p.tick_time(t0 + ms(1), true), t0 + ms(2));
        assert_eq!(p.tick_time(t0 + ms(9), true), t0 + ms(9));
        // More than an interval behind: from now.
        assert_eq!(p.tick_time(t0 + ms(40), false), t0 + ms(40));
    }

    #[test]
    fn short_intervals_tick_at_most_once_a_millisecond() {
        assert_eq!(Pacing::new(Duration::from_millis(4)).slots, 4);
        assert_eq!(Pacing::new(Duration::from_millis(1)).slots, 1);
        assert_eq!(Pacing::new(Duration::from_millis(60_000)).slots, SLOTS_MAX);
        assert_eq!(Pacing::new(Duration::from_millis(25)).slot(-1), 15);
    }

    #[test]
    fn hostile_observer_ids_do_not_grow_the_map_without_bound() {
        let p = Pacing::new(Duration::from_millis(25));
        for id in 0..(CAUGHT_UP_MAX as i32 * 3) {
            p.answered(id, true, 0);
        }
        assert!(p.caught_up.borrow().len() <= CAUGHT_UP_MAX);
    }
}
