//! How the driver treats a failed API call: what kind of failure it is, how long to wait
//! before the next try (exponential, capped, jittered), and how often to say so in the log
//! (one line per distinct cause per interval, with a count).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use backon::{BackoffBuilder, ExponentialBuilder};
use tracing::warn;

/// What a failed call means for the caller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// The API server could not be reached, was overloaded (429) or failed (5xx): try again
    /// after a back-off.
    Transient,
    /// The object changed since it was read (409): read it again.
    Conflict(String),
    /// The object is gone (404).
    NotFound,
    /// The API server refused the request for good (400, 403, 422, …).
    Refused(String),
}

impl Failure {
    pub fn of(err: &::kube::Error) -> Self {
        match err {
            ::kube::Error::Api(status) => match status.code {
                404 => Failure::NotFound,
                409 => Failure::Conflict(status.message.clone()),
                429 => Failure::Transient,
                code if code >= 500 => Failure::Transient,
                _ => Failure::Refused(status.message.clone()),
            },
            _ => Failure::Transient,
        }
    }
}

/// Delays between tries: from `min`, doubling, at most `max`, with jitter so that many
/// callers failing together do not retry together.
pub fn backoff(min: Duration, max: Duration) -> impl Iterator<Item = Duration> {
    ExponentialBuilder::default()
        .with_min_delay(min)
        .with_max_delay(max)
        .with_jitter()
        .without_max_times()
        .build()
}

/// The `attempt`-th delay (0-based) of `backoff(min, max)`, for callers that keep a count
/// rather than an iterator (a retry queue of many objects).
pub fn delay(attempt: u32, min: Duration, max: Duration) -> Duration {
    backoff(min, max)
        .nth(attempt.min(32) as usize)
        .unwrap_or(max)
}

/// Whether the API server is answering, shared by every writer (binds, evictions, status,
/// events). After a transient failure the gate closes; it reopens for one probe after a
/// back-off (growing per failure, capped, jittered) while the others wait, and for everyone
/// once a call succeeds. So an outage costs a handful of calls, not one per pod per retry.
///
/// The gate is also the leadership fence: with leader election on, nothing passes unless
/// this replica holds the lease and has seen its renewal within the renew deadline.
pub struct Gate {
    state: Mutex<GateState>,
    reopened: tokio::sync::Notify,
    leadership: std::sync::Arc<crate::leadership::Leadership>,
}

#[derive(Default)]
struct GateState {
    failures: u32,
    next_probe: Option<tokio::time::Instant>,
    probing: bool,
}

/// The gate's delays between probes.
const GATE_MIN_DELAY: Duration = Duration::from_millis(250);
const GATE_MAX_DELAY: Duration = Duration::from_secs(10);

impl Default for Gate {
    fn default() -> Self {
        Gate::new(crate::leadership::Leadership::always())
    }
}

impl Gate {
    pub fn new(leadership: std::sync::Arc<crate::leadership::Leadership>) -> Self {
        Gate {
            state: Mutex::new(GateState::default()),
            reopened: tokio::sync::Notify::new(),
            leadership,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, GateState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until a call may go out: at once while the API server answers (and this
    /// replica leads); while it does not, until this caller is the next probe.
    pub async fn pass(&self) {
        loop {
            if !self.leadership.is_leader() {
                self.leadership.wait_leading().await;
                continue;
            }
            let wait = {
                let mut st = self.lock();
                let now = tokio::time::Instant::now();
                match st.next_probe {
                    None => return,
                    Some(at) if !st.probing && now >= at => {
                        st.probing = true;
                        return;
                    }
                    Some(at) if !st.probing => at - now,
                    // A probe is out: wait for its answer (or a while, should it be lost).
                    Some(_) => GATE_MAX_DELAY,
                }
            };
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = self.reopened.notified() => {}
            }
        }
    }

    /// The call got an answer (even a refusal): the API server is up.
    pub fn answered(&self) {
        let mut st = self.lock();
        if st.next_probe.is_some() || st.probing {
            *st = GateState::default();
            drop(st);
            tracing::info!("the API server answers again");
            self.reopened.notify_waiters();
        }
    }

    /// The call failed transiently: close (or keep closed) the gate for a back-off.
    pub fn failed(&self) {
        let mut st = self.lock();
        let wait = delay(st.failures, GATE_MIN_DELAY, GATE_MAX_DELAY);
        st.failures += 1;
        st.probing = false;
        st.next_probe = Some(tokio::time::Instant::now() + wait);
        drop(st);
        self.reopened.notify_waiters();
    }

    /// Records the outcome of a call.
    pub fn record<T>(&self, outcome: &Result<T, ::kube::Error>) {
        match outcome {
            Err(e) if Failure::of(e) == Failure::Transient => self.failed(),
            _ => self.answered(),
        }
    }

    /// Whether the gate is closed.
    #[cfg(test)]
    pub fn closed(&self) -> bool {
        self.lock().next_probe.is_some()
    }
}

/// How long repeats of one cause stay quiet in the log.
pub const LOG_INTERVAL: Duration = Duration::from_secs(10);

static LOG_LIMITER: Mutex<Option<LogLimiter>> = Mutex::new(None);

/// Remembers, per cause, when it was last logged and how often it recurred since.
#[derive(Default)]
pub struct LogLimiter {
    causes: HashMap<String, (Instant, u64)>,
}

impl LogLimiter {
    /// Whether to log `cause` now, and how many repeats were kept quiet before it.
    pub fn admit(&mut self, cause: &str, now: Instant, interval: Duration) -> Option<u64> {
        if self.causes.len() > 4096 {
            self.causes
                .retain(|_, (at, _)| now.duration_since(*at) < interval);
        }
        match self.causes.get_mut(cause) {
            Some((at, quiet)) if now.duration_since(*at) < interval => {
                *quiet += 1;
                None
            }
            Some((at, quiet)) => {
                let repeats = *quiet;
                *at = now;
                *quiet = 0;
                Some(repeats)
            }
            None => {
                self.causes.insert(cause.to_string(), (now, 0));
                Some(0)
            }
        }
    }
}

/// A warning, at most once per `LOG_INTERVAL` for each distinct `cause` (what failed and
/// why, without the object's name), saying how many like it were kept quiet.
pub fn warn_limited(cause: &str, detail: &str) {
    let admitted = {
        let mut guard = LOG_LIMITER.lock().unwrap_or_else(|e| e.into_inner());
        guard
            .get_or_insert_with(LogLimiter::default)
            .admit(cause, Instant::now(), LOG_INTERVAL)
    };
    match admitted {
        Some(0) => warn!("{cause}: {detail}"),
        Some(n) => warn!(
            "{cause}: {detail} ({n} more like it in the last {}s)",
            LOG_INTERVAL.as_secs()
        ),
        None => {}
    }
}

/// The cause of every call that got no answer.
pub const UNREACHABLE: &str = "API server unreachable";

/// A short cause for the log from an error: its kind and code, not the object it named.
pub fn cause_of(err: &::kube::Error) -> String {
    match err {
        ::kube::Error::Api(status) => format!("{} {}", status.code, status.reason),
        ::kube::Error::HyperError(_) | ::kube::Error::Service(_) => UNREACHABLE.to_string(),
        other => {
            let text = other.to_string();
            text.split(':').next().unwrap_or(&text).to_string()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cause_is_logged_once_per_interval_with_the_count_of_repeats() {
        let mut limiter = LogLimiter::default();
        let t0 = Instant::now();
        let interval = Duration::from_secs(10);
        assert_eq!(limiter.admit("bind failed", t0, interval), Some(0));
        for i in 1..=5 {
            assert_eq!(
                limiter.admit("bind failed", t0 + Duration::from_secs(i), interval),
                None
            );
        }
        assert_eq!(
            limiter.admit("status failed", t0, interval),
            Some(0),
            "another cause is its own"
        );
        assert_eq!(
            limiter.admit("bind failed", t0 + Duration::from_secs(11), interval),
            Some(5)
        );
    }

    #[test]
    fn delays_grow_and_stay_capped() {
        let (min, max) = (Duration::from_millis(100), Duration::from_secs(5));
        let delays: Vec<Duration> = backoff(min, max).take(12).collect();
        assert!(delays[0] >= min && delays[0] <= min * 2, "{delays:?}");
        assert!(delays[4] >= Duration::from_millis(1600), "{delays:?}");
        // Jitter adds at most the delay again.
        assert!(delays.iter().all(|d| *d <= max * 2), "{delays:?}");
        assert!(delay(40, min, max) <= max * 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_closed_gate_lets_one_probe_through_and_everyone_once_it_is_answered() {
        let gate = std::sync::Arc::new(Gate::default());
        gate.pass().await; // open: at once
        gate.failed();
        assert!(gate.closed());
        let waiting: Vec<_> = (0..5)
            .map(|_| {
                let g = gate.clone();
                tokio::spawn(async move { g.pass().await })
            })
            .collect();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let through = waiting.iter().filter(|h| h.is_finished()).count();
        assert_eq!(through, 1, "one probe after the back-off");
        gate.answered();
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(
            waiting.iter().all(|h| h.is_finished()),
            "all pass once it answers"
        );
        assert!(!gate.closed());
    }

    #[test]
    fn failures_are_classified_by_status_code() {
        let api = |code: u16| {
            ::kube::Error::Api(
                ::kube::core::Status::failure("m", "R")
                    .with_code(code)
                    .boxed(),
            )
        };
        assert_eq!(Failure::of(&api(404)), Failure::NotFound);
        assert_eq!(Failure::of(&api(409)), Failure::Conflict("m".into()));
        assert_eq!(Failure::of(&api(429)), Failure::Transient);
        assert_eq!(Failure::of(&api(503)), Failure::Transient);
        assert_eq!(Failure::of(&api(422)), Failure::Refused("m".into()));
        assert_eq!(Failure::of(&api(403)), Failure::Refused("m".into()));
    }
}
