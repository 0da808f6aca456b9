//! Whether this replica may write now: the fence every write passes (`retry::Gate::pass`).
//! Leader election (`leader`) moves it; the gate, the driver and the HTTP endpoints read it.
//! A module of its own, below both, so the gate does not import the election.

use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use prometheus::IntGauge;
use tokio::sync::watch;
use tokio::time::Instant;

/// Whether this replica may write now, shared by the driver, the gate and the HTTP
/// endpoints.
pub struct Leadership {
    /// False when leader election is off: always the leader.
    elected: bool,
    pub(crate) status: watch::Sender<Status>,
    /// Writes are allowed until then (the last renewal seen plus the renew deadline).
    fence: Mutex<Option<Instant>>,
    gauge: Option<IntGauge>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Status {
    /// The lease manager says we hold the lease.
    pub holding: bool,
    /// Why we stopped being the leader (the process must stop).
    pub lost: Option<String>,
}

impl Leadership {
    /// No election: this process is the only scheduler (`rust-batch run` on a laptop).
    pub fn always() -> Arc<Self> {
        Arc::new(Leadership {
            elected: false,
            status: watch::channel(Status::default()).0,
            fence: Mutex::new(None),
            gauge: None,
        })
    }

    /// Elected: a standby until the lease is ours.
    pub fn elected(gauge: Option<IntGauge>) -> Arc<Self> {
        if let Some(g) = &gauge {
            g.set(0);
        }
        Arc::new(Leadership {
            elected: true,
            status: watch::channel(Status::default()).0,
            fence: Mutex::new(None),
            gauge,
        })
    }

    pub(crate) fn fence(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        self.fence.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether this replica may write now.
    pub fn is_leader(&self) -> bool {
        if !self.elected {
            return true;
        }
        let st = self.status.borrow();
        st.holding && st.lost.is_none() && self.fence().is_some_and(|t| Instant::now() < t)
    }

    pub fn is_elected(&self) -> bool {
        self.elected
    }

    /// Why the lease was lost, once it was.
    pub fn lost(&self) -> Option<String> {
        self.status.borrow().lost.clone()
    }

    /// Changes of holding or losing the lease, and the moment writes may start (not each
    /// move of the fence).
    pub fn subscribe(&self) -> watch::Receiver<Status> {
        self.status.subscribe()
    }

    /// Waits until this replica may write.
    pub async fn wait_leading(&self) {
        let mut rx = self.status.subscribe();
        while !self.is_leader() {
            // The fence moves without a notification: look again now and then.
            tokio::select! {
                _ = rx.changed() => {}
                _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            }
        }
    }

    pub(crate) fn set_holding(&self, holding: bool) {
        self.status.send_modify(|s| s.holding = holding);
        if !holding {
            *self.fence() = None;
        }
        self.update_gauge();
    }

    /// A renewal of ours was seen: writes are allowed until `until`.
    pub(crate) fn confirm(&self, until: Instant) {
        let before = self.is_leader();
        *self.fence() = Some(until);
        if !before && self.is_leader() {
            // Writes may start: wake whoever waits (the driver starts its cycles at once).
            self.status.send_modify(|_| {});
        }
        self.update_gauge();
    }

    /// The lease is gone: no write from here on, and the driver stops.
    pub(crate) fn lose(&self, why: String) {
        *self.fence() = None;
        self.status.send_modify(|s| {
            s.holding = false;
            s.lost.get_or_insert(why);
        });
        self.update_gauge();
    }

    /// Graceful shutdown: stop writing before the lease is released.
    pub fn step_down(&self) {
        if self.elected {
            self.set_holding(false);
        }
    }

    fn update_gauge(&self) {
        if let Some(g) = &self.gauge {
            g.set(i64::from(self.is_leader()));
        }
    }
}
