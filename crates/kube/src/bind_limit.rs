//! How many binds and evictions may be in flight at once: adaptive, so the scheduler finds
//! the API server's real ceiling instead of sitting at a fixed number.
//!
//! A fixed limit is wrong both ways: 16 leaves most of an idle API server unused (binds
//! are cheap writes, and etcd commits concurrent writes together), and a large fixed number
//! drives a busy one into queueing, 429s and timeouts. The limit therefore moves by rounds,
//! in the manner of TCP's congestion window: a round is as many answered calls as the limit
//! allows at once. What it climbs is throughput, not latency: with the limit's calls
//! continuously in flight (some call waited for a permit: "saturated"), Little's law gives
//! the round's rate as limit / mean latency. At the end of a saturated round
//!
//! - while climbing, it grows by a quarter if the last growth raised that rate by at least
//!   `GAIN` (the server had room); if it did not, the server is at its ceiling and more in
//!   flight would only queue: the growth is undone and the limit holds for `HOLD` rounds,
//!   then probes a quarter higher again (the ceiling moves as load comes and goes);
//! - it shrinks by a quarter when latency rose past `RISE` times the best round seen and
//!   past `SLOW` (the server queues badly), or at once when the server said it is
//!   overloaded (429, a 5xx, no answer);
//! - it stays between a floor and a ceiling the operator sets (`--bind-concurrency` is
//!   where it starts, `--max-bind-concurrency` the ceiling; equal: a fixed limit).
//!
//! Latency alone is the wrong signal on a shared API server: when other clients slow it
//! down (kwok or kubelets reporting thousands of pods started), every call is slower at
//! any limit, and a latency rule shrinks to the floor exactly when a share of the server
//! is worth most; the rate rule holds instead. The best round slowly drifts up towards what
//! rounds see, so a server that became slower for good resets the yardstick.
//! `LimitController` decides (pure, tested deterministically); `BindLimit` applies its
//! decisions to a semaphore.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// A growth pays if it raised the rate by at least this fraction.
const GAIN: f64 = 0.05;
/// Saturated rounds the limit holds at a ceiling before probing higher again.
const HOLD: u32 = 8;
/// Latency above this multiple of the best round, and above `SLOW`, means the server
/// queues badly: shrink.
const RISE: f64 = 2.0;
/// Mean bind latency a busy server may reach before the limit gives way (seconds): under
/// it, slower answers are the server's other load, not ours to cut.
const SLOW: f64 = 1.0;
/// How far the best round moves towards a slower round's latency (per round).
const DRIFT: f64 = 0.05;

/// What one round has seen so far.
#[derive(Clone, Debug, Default)]
struct Round {
    answered: usize,
    latency_sum: f64,
    /// A call waited for a permit: the limit, not the work, bounded the calls.
    saturated: bool,
}

/// Where the limit is going.
#[derive(Clone, Copy, Debug)]
enum Course {
    /// The last saturated round ran at `limit` with `rate` calls/s: growing paid so far.
    Climbing { limit: usize, rate: f64 },
    /// At the server's ceiling: this many saturated rounds until the next probe.
    Holding(u32),
}

/// Decides the limit from the calls' answers. No clock, no I/O.
#[derive(Clone, Debug)]
pub struct LimitController {
    limit: usize,
    min: usize,
    max: usize,
    /// The lowest mean latency of a round (seconds), drifting up slowly.
    best: Option<f64>,
    course: Course,
    round: Round,
}

impl LimitController {
    /// Starts at `initial`, kept within `[min, max]` (each at least 1).
    pub fn new(initial: usize, min: usize, max: usize) -> Self {
        let max = max.max(1);
        let min = min.clamp(1, max);
        LimitController {
            limit: initial.clamp(min, max),
            min,
            max,
            best: None,
            course: Course::Climbing {
                limit: 0,
                rate: 0.0,
            },
            round: Round::default(),
        }
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// A call had to wait for a permit.
    pub fn saturated(&mut self) {
        self.round.saturated = true;
    }

    /// One call answered after `latency`; `overloaded` if the server said it is (429, 5xx,
    /// no answer). Returns the limit from now on.
    pub fn answered(&mut self, latency: Duration, overloaded: bool) -> usize {
        if overloaded {
            self.limit = self.shrunk();
            self.round = Round::default();
            // Climbing again starts from what this smaller limit achieves.
            self.course = Course::Holding(HOLD);
            return self.limit;
        }
        self.round.answered += 1;
        self.round.latency_sum += latency.as_secs_f64();
        if self.round.answered < self.limit {
            return self.limit;
        }
        let round = std::mem::take(&mut self.round);
        let mean = round.latency_sum / round.answered as f64;
        let best = match self.best {
            Some(b) if mean >= b => b + (mean - b) * DRIFT,
            _ => mean,
        };
        self.best = Some(best);
        if mean > best * RISE && mean > SLOW {
            self.limit = self.shrunk();
            self.course = Course::Holding(HOLD);
            return self.limit;
        }
        if !round.saturated {
            // The work, not the limit, bounded the calls: nothing learnt about the ceiling.
            return self.limit;
        }
        let rate = self.limit as f64 / mean.max(1e-6);
        (self.limit, self.course) = match self.course {
            Course::Climbing {
                limit,
                rate: before,
            } if limit < self.limit => {
                if rate >= before * (1.0 + GAIN) {
                    (
                        self.grown(),
                        Course::Climbing {
                            limit: self.limit,
                            rate,
                        },
                    )
                } else {
                    // The growth bought nothing: back to where it was, and hold there.
                    (limit.max(self.min), Course::Holding(HOLD))
                }
            }
            Course::Climbing { .. } | Course::Holding(0) => (
                self.grown(),
                Course::Climbing {
                    limit: self.limit,
                    rate,
                },
            ),
            Course::Holding(n) => (self.limit, Course::Holding(n - 1)),
        };
        self.limit
    }

    fn grown(&self) -> usize {
        (self.limit + (self.limit / 4).max(1)).min(self.max)
    }

    fn shrunk(&self) -> usize {
        (self.limit - self.limit / 4).max(self.min)
    }
}

/// The permits of binds and evictions in flight, their number set by a `LimitController`.
pub struct BindLimit {
    permits: Arc<Semaphore>,
    controller: Mutex<LimitController>,
    /// Permits to take out of use as calls end (the limit shrank below what is in use).
    owed: AtomicUsize,
}

impl BindLimit {
    pub fn new(controller: LimitController) -> Self {
        BindLimit {
            permits: Arc::new(Semaphore::new(controller.limit())),
            controller: Mutex::new(controller),
            owed: AtomicUsize::new(0),
        }
    }

    fn controller(&self) -> std::sync::MutexGuard<'_, LimitController> {
        self.controller.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn limit(&self) -> usize {
        self.controller().limit()
    }

    /// Waits for a permit; whether it had to wait (the limit bounded the calls).
    pub async fn acquire(&self) -> (OwnedSemaphorePermit, bool) {
        if let Ok(p) = self.permits.clone().try_acquire_owned() {
            return (p, false);
        }
        self.controller().saturated();
        let p = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .expect("the bind semaphore is never closed");
        (p, true)
    }

    /// Gives a permit back, or takes it out of use if the limit shrank.
    pub fn release(&self, permit: OwnedSemaphorePermit) {
        let took = self
            .owed
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if took.is_ok() {
            permit.forget();
        }
    }

    /// One call answered: the controller may move the limit. Returns the new limit.
    pub fn answered(&self, latency: Duration, overloaded: bool) -> usize {
        let mut controller = self.controller();
        let before = controller.limit();
        let after = controller.answered(latency, overloaded);
        if after > before {
            // Growing first cancels what is still owed, then adds permits.
            let mut grow = after - before;
            let _ = self
                .owed
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |owed| {
                    let cancel = owed.min(after - before);
                    grow = after - before - cancel;
                    Some(owed - cancel)
                });
            self.permits.add_permits(grow);
        } else if after < before {
            // Idle permits go at once; the rest as calls in flight end.
            let mut shrink = before - after;
            while shrink > 0 {
                match self.permits.try_acquire() {
                    Ok(p) => {
                        p.forget();
                        shrink -= 1;
                    }
                    Err(_) => break,
                }
            }
            self.owed.fetch_add(shrink, Ordering::SeqCst);
        }
        after
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// Feeds `rounds` full rounds of calls answered after `latency`, saturated or not.
    fn rounds(c: &mut LimitController, rounds: usize, latency: Duration, saturated: bool) {
        for _ in 0..rounds {
            if saturated {
                c.saturated();
            }
            for _ in 0..c.limit() {
                c.answered(latency, false);
            }
        }
    }

    /// Feeds saturated rounds from a server whose latency at a limit is `latency(limit)`;
    /// the limits the rounds ended with.
    fn served(
        c: &mut LimitController,
        rounds: usize,
        latency: impl Fn(usize) -> f64,
    ) -> Vec<usize> {
        (0..rounds)
            .map(|_| {
                c.saturated();
                let l = Duration::from_secs_f64(latency(c.limit()));
                for _ in 0..c.limit() {
                    c.answered(l, false);
                }
                c.limit()
            })
            .collect()
    }

    #[test]
    fn grows_while_more_in_flight_answers_more() {
        let mut c = LimitController::new(16, 4, 256);
        rounds(&mut c, 1, 10 * MS, true);
        assert_eq!(c.limit(), 20);
        rounds(&mut c, 20, 10 * MS, true);
        assert_eq!(c.limit(), 256, "up to the ceiling, not past it");
    }

    #[test]
    fn holds_at_the_servers_ceiling_and_probes_past_it_now_and_then() {
        // Latency 10 ms up to 64 in flight, then the server queues: 6,400 calls/s at most
        // whatever the limit (as a CPU-bound API server does).
        let mut c = LimitController::new(16, 4, 256);
        let limits = served(&mut c, 200, |limit| (limit as f64 / 6400.0).max(0.010));
        let settled = &limits[50..];
        assert!(
            settled.iter().all(|&l| (40..=100).contains(&l)),
            "the limit stays near the knee (64): {settled:?}"
        );
        assert!(
            settled.windows(2).any(|w| w[1] > w[0]),
            "and probes above it now and then: {settled:?}"
        );
    }

    #[test]
    fn a_server_slowed_by_other_clients_keeps_its_share() {
        // Others' load makes every call ten times slower (at any limit): the rate rule
        // holds; a latency rule would shrink to the floor.
        let mut c = LimitController::new(32, 4, 256);
        served(&mut c, 2, |_| 0.010);
        let before = c.limit();
        served(&mut c, 50, |_| 0.100);
        assert!(c.limit() >= before, "{} >= {before}", c.limit());
    }

    #[test]
    fn does_not_grow_when_the_work_not_the_limit_bounds_the_calls() {
        let mut c = LimitController::new(16, 4, 256);
        rounds(&mut c, 10, 10 * MS, false);
        assert_eq!(c.limit(), 16);
    }

    #[test]
    fn shrinks_when_the_server_queues_badly_and_at_once_on_overload() {
        let mut c = LimitController::new(64, 4, 256);
        rounds(&mut c, 1, 100 * MS, true);
        assert_eq!(c.limit(), 80);
        rounds(&mut c, 1, 1500 * MS, true);
        assert_eq!(
            c.limit(),
            60,
            "latency fifteen times the best round and over a second: a quarter off"
        );
        c.answered(10 * MS, true);
        assert_eq!(c.limit(), 45, "a 429 shrinks without waiting for the round");
        for _ in 0..20 {
            c.answered(10 * MS, true);
        }
        assert_eq!(c.limit(), 4, "never below the floor");
    }

    #[test]
    fn a_server_slower_for_good_becomes_the_new_yardstick() {
        let mut c = LimitController::new(32, 4, 256);
        rounds(&mut c, 1, 100 * MS, false);
        // Fifteen times slower from now on: the limit shrinks at first, then the best
        // round drifts up and the limit grows again while growing pays.
        let limits = served(&mut c, 80, |limit| {
            1.5 * (limit as f64 / 32.0).max(1.0).sqrt()
        });
        let low = *limits.iter().min().unwrap();
        assert!(low < 32, "it shrank first: {limits:?}");
        assert!(limits.last().unwrap() > &low, "then grew again: {limits:?}");
    }

    #[test]
    fn a_fixed_limit_never_moves() {
        let mut c = LimitController::new(16, 16, 16);
        rounds(&mut c, 5, 10 * MS, true);
        c.answered(10 * MS, true);
        assert_eq!(c.limit(), 16);
    }

    #[tokio::test]
    async fn permits_follow_the_limit_including_those_in_use_when_it_shrinks() {
        let limit = BindLimit::new(LimitController::new(8, 2, 64));
        let mut held = Vec::new();
        for _ in 0..8 {
            held.push(limit.acquire().await.0);
        }
        assert_eq!(limit.permits.available_permits(), 0);
        // Overloaded with every permit in use: 6 from now on, 2 owed by calls in flight.
        assert_eq!(limit.answered(MS, true), 6);
        for p in held.drain(..) {
            limit.release(p);
        }
        assert_eq!(limit.permits.available_permits(), 6);
        // Shrinking with idle permits takes them at once.
        assert_eq!(limit.answered(MS, true), 5);
        assert_eq!(limit.permits.available_permits(), 5);
        // Growing adds permits: after an overload the limit holds HOLD saturated rounds,
        // then probes a quarter higher (5 + 1).
        let (p, _) = limit.acquire().await;
        limit.release(p);
        for _ in 0..=HOLD {
            limit.controller().saturated();
            for _ in 0..5 {
                limit.answered(MS, false);
            }
        }
        assert_eq!(limit.limit(), 6);
        assert_eq!(limit.permits.available_permits(), 6);
    }
}
