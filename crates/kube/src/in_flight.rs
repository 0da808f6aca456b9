//! Binds and evictions in flight, as every writer sees them: other writes (status, events)
//! let the binds of the same cycle go first, and wait a little for the watch to show them.
//! Shared by the binder (which counts), the watches (which report what they show) and the
//! status and event writers (which wait): a module below all of them.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// How long a write other than a bind lets the binds of the same cycle go first: a gang's
/// phase and its Scheduled event are news once its pods are bound, and sent beside the
/// binds they take the API server from them (the gang is bound when its last bind is).
/// Each such write then also waits for the binds in flight to be answered, at most
/// `BINDS_FIRST_LIMIT` (in a burst binds never all end: writes slow, not stop).
pub const BINDS_FIRST: Duration = Duration::from_millis(10);

/// Binds and evictions sent and not yet answered. Other writes (PodGroup status, events)
/// wait for them, a little: a gang is bound when its last bind is, and what they say is
/// news only after that.
#[derive(Default)]
pub struct InFlight {
    count: AtomicUsize,
    answered: Notify,
    /// Binds assumed in the cache that the watch does not show yet (sent, answered or
    /// about to be), as last counted; woken when it falls.
    unseen: AtomicUsize,
    seen: Notify,
}

/// How long another write waits for the binds in flight (in a burst they never all end).
pub const BINDS_FIRST_LIMIT: Duration = Duration::from_millis(50);
/// How long a write that is news once binds are done (a gang's status, its Scheduled
/// event) then waits for the watch to show them, on a quiet API server: the pods' bind
/// events reach everyone watching them (kubelets, operators) before the write competes
/// with them.
pub const BINDS_SEEN_LIMIT: Duration = Duration::from_millis(30);

impl InFlight {
    pub fn count(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }

    /// Waits until nothing is in flight, at most `limit`; whether nothing is.
    pub async fn answered(&self, limit: Duration) -> bool {
        let until = Instant::now() + limit;
        loop {
            let answered = self.answered.notified();
            if self.count() == 0 {
                return true;
            }
            if tokio::time::timeout_at(until, answered).await.is_err() {
                return self.count() == 0;
            }
        }
    }

    /// Takes the cache's count of the binds it assumes and the watch does not show yet
    /// (kept by the cache; called after anything that may change it: binds assumed or
    /// refused, a watch event applied), waking writes waiting for it to fall.
    pub fn count_unseen(&self, cache: &crate::cache::Cache) {
        self.set_unseen(cache.binds_assumed());
    }

    /// Takes `now` as the count of binds assumed and not shown yet by the watch (see
    /// `count_unseen`).
    pub fn set_unseen(&self, now: usize) {
        if self.unseen.swap(now, Ordering::SeqCst) > now {
            self.seen.notify_waiters();
        }
    }

    /// Whether the watch shows every bind the cache assumed.
    pub fn all_seen(&self) -> bool {
        self.unseen.load(Ordering::SeqCst) == 0
    }

    /// Waits until `done` holds, asking again each time the watch shows binds, at most
    /// `limit`; whether it holds.
    pub async fn seen(&self, limit: Duration, mut done: impl FnMut() -> bool) -> bool {
        let until = Instant::now() + limit;
        loop {
            let seen = self.seen.notified();
            if done() {
                return true;
            }
            if tokio::time::timeout_at(until, seen).await.is_err() {
                return done();
            }
        }
    }
}

/// Counts one call in flight while it lives.
pub(crate) struct Sending<'a>(&'a InFlight);

impl<'a> Sending<'a> {
    pub(crate) fn new(n: &'a InFlight) -> Self {
        n.count.fetch_add(1, Ordering::SeqCst);
        Sending(n)
    }
}

impl Drop for Sending<'_> {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.answered.notify_waiters();
        }
    }
}
