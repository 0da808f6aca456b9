//! Leader election: several replicas run, one schedules.
//!
//! Every replica keeps its watches and cache warm; only the holder of a Lease
//! (coordination.k8s.io, taken and renewed by `kube-lease-manager`) runs cycles and writes.
//! `Leadership` is the fence every write passes (`retry::Gate::pass`): a replica writes
//! only while it holds the lease *and* has seen its own renewal within the renew deadline.
//!
//! Why a fence of our own: the lease manager renews in the background and says when the
//! holder changes, but a leader cut off from the API server is never told it lost
//! anything. So a second task reads the Lease back: each time it finds us the holder, the
//! fence moves to `renewTime + renew deadline` (renewTime is written from our own clock,
//! so no skew enters). With the renew deadline shorter than the lease duration, a leader
//! that cannot renew stops writing `duration − deadline` before any other replica may take
//! the lease (which waits for `renewTime + duration` by its clock): never two binders.
//! A replica that lost the lease exits (as kube-scheduler does), so decisions it made as
//! leader can never be sent in a later term; its restart comes back as a warm standby.
//!
//! A fence in the process cannot stop a call that had passed it when the process froze
//! (a stall, a paused VM) and goes out on waking. So binds and evictions also carry the
//! lease and this replica's identity (`binder::fence_annotations`), and deploy/'s
//! ValidatingAdmissionPolicy has the API server refuse them unless the Lease names this
//! replica at that moment.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use ::kube::api::Api;
use ::kube::Client;
use k8s_openapi::api::coordination::v1::Lease;
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder};
use tokio::time::Instant;
use tracing::{info, warn};

use super::retry::{delay, warn_limited};
pub use crate::leadership::{Leadership, Status};

/// What a leader election needs; built from `rust-batch run --leader-elect-*`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ElectionConfig {
    pub lease_name: String,
    pub namespace: String,
    /// How long a lease holds after its last renewal (others wait this long for a silent
    /// holder). Whole seconds: the Lease API counts in seconds.
    pub lease_duration: Duration,
    /// How long the holder may go without a renewal before it stops writing.
    pub renew_deadline: Duration,
    /// This replica's identity in the Lease (unique per process).
    pub identity: String,
}

/// A leader-election setting that cannot work.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LeaderError {
    #[error("--leader-elect-lease-duration must be whole seconds, at least 2s (got {0:?})")]
    LeaseDuration(Duration),
    #[error(
        "--leader-elect-renew-deadline ({deadline:?}) must be at least 1s and shorter than \
         --leader-elect-lease-duration ({duration:?}): a leader that cannot renew must stop \
         writing before another may take over"
    )]
    RenewDeadline {
        deadline: Duration,
        duration: Duration,
    },
    #[error("lost the leader lease: {0}")]
    Lost(String),
}

impl ElectionConfig {
    pub fn new(
        lease_name: String,
        namespace: String,
        lease_duration: Duration,
        renew_deadline: Duration,
        identity: String,
    ) -> Result<Self, LeaderError> {
        if lease_duration.subsec_nanos() != 0 || lease_duration < Duration::from_secs(2) {
            return Err(LeaderError::LeaseDuration(lease_duration));
        }
        if renew_deadline < Duration::from_secs(1) || renew_deadline >= lease_duration {
            return Err(LeaderError::RenewDeadline {
                deadline: renew_deadline,
                duration: lease_duration,
            });
        }
        Ok(ElectionConfig {
            lease_name,
            namespace,
            lease_duration,
            renew_deadline,
            identity,
        })
    }

    /// How often the holder renews: twice per renew deadline, so one failed renewal still
    /// leaves time for another try before the fence closes.
    pub fn renew_interval(&self) -> Duration {
        (self.renew_deadline / 2).max(Duration::from_secs(1))
    }

    /// The lease manager's grace (renew this long before expiry), in whole seconds.
    fn grace_secs(&self) -> u64 {
        let duration = self.lease_duration.as_secs();
        let interval = self.renew_interval().as_secs().clamp(1, duration - 1);
        duration - interval
    }

    /// How often the holder reads its lease back to move the fence.
    fn confirm_interval(&self) -> Duration {
        (self.renew_interval() / 4).clamp(Duration::from_millis(100), Duration::from_secs(1))
    }
}

/// An identity unique to this process: the pod's name (or host name), pid and start time.
pub fn identity() -> String {
    let base = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| "rust-batch".into());
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{base}_{}_{nanos:08x}", std::process::id())
}

/// The running election: `step_down`, then `release` the lease on graceful shutdown.
pub struct Election {
    manager: Arc<Mutex<Option<Arc<LeaseManager>>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    leadership: Arc<Leadership>,
}

/// Starts taking part in the election for `cfg`'s lease; `leadership` follows it.
pub fn start(client: Client, cfg: ElectionConfig, leadership: Arc<Leadership>) -> Election {
    let manager = Arc::new(Mutex::new(None));
    let confirm_now = Arc::new(tokio::sync::Notify::new());
    let campaign = tokio::spawn(campaign(
        client.clone(),
        cfg.clone(),
        leadership.clone(),
        manager.clone(),
        confirm_now.clone(),
    ));
    let confirmer = tokio::spawn(confirm(client, cfg, leadership.clone(), confirm_now));
    Election {
        manager,
        tasks: vec![campaign, confirmer],
        leadership,
    }
}

impl Election {
    /// Stops writing, then gives the lease up so a standby takes over at once.
    /// Stops writing (graceful shutdown); whether this replica was holding the lease.
    pub fn step_down(&self) -> bool {
        let holding = self.leadership.status.borrow().holding;
        self.leadership.step_down();
        holding
    }

    /// Gives the lease up (after `step_down` said it was ours and the writes in flight are
    /// done), so that a standby takes over without waiting for it to expire.
    pub async fn release(self) {
        self.leadership.step_down();
        for t in &self.tasks {
            t.abort();
        }
        let manager = self
            .manager
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if let Some(m) = manager {
            match tokio::time::timeout(Duration::from_secs(5), m.release()).await {
                Ok(Ok(())) => info!("leader lease released"),
                Ok(Err(e)) => warn!(error = %e, "cannot release the leader lease"),
                Err(_) => warn!("releasing the leader lease timed out"),
            }
        }
    }
}

/// Takes the lease when it is free and keeps it renewed (inside `LeaseManager::changed`);
/// tells `leadership` when we start or stop holding it.
///
/// A standby's lease manager sleeps until the expiry of the last renewal it saw, so on
/// its own it would notice a lease released by a graceful shutdown only up to a lease
/// duration later. So a standby starts over from a fresh read of the Lease every renew
/// interval: a released lease is taken within that interval.
async fn campaign(
    client: Client,
    cfg: ElectionConfig,
    leadership: Arc<Leadership>,
    slot: Arc<Mutex<Option<Arc<LeaseManager>>>>,
    confirm_now: Arc<tokio::sync::Notify>,
) {
    let mut manager = lease_manager(&client, &cfg).await;
    *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(manager.clone());
    info!(lease = %format!("{}/{}", cfg.namespace, cfg.lease_name), identity = %cfg.identity,
        "standing by for the leader lease");
    let (min, max) = (Duration::from_millis(250), Duration::from_secs(5));
    let mut failures = 0;
    loop {
        let holding = leadership.status.borrow().holding;
        let changed = if holding {
            Some(manager.changed().await)
        } else {
            tokio::time::timeout(cfg.renew_interval(), manager.changed())
                .await
                .ok()
        };
        match changed {
            None => {
                // A fresh manager reads the Lease now (same identity: a lock that went
                // through just before the timeout is recognised as ours).
                if let Ok(m) = build(&client, &cfg).await {
                    manager = Arc::new(m);
                    *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(manager.clone());
                }
            }
            Some(Ok(true)) => {
                failures = 0;
                info!(identity = %cfg.identity, "acquired the leader lease");
                leadership.set_holding(true);
                confirm_now.notify_one();
            }
            Some(Ok(false)) => {
                failures = 0;
                if leadership.status.borrow().holding {
                    leadership.lose("another replica holds it".into());
                }
            }
            Some(Err(e)) => {
                warn_limited("leader lease not renewed", &e.to_string());
                tokio::time::sleep(delay(failures, min, max)).await;
                failures += 1;
            }
        }
    }
}

async fn build(client: &Client, cfg: &ElectionConfig) -> kube_lease_manager::Result<LeaseManager> {
    LeaseManagerBuilder::new(client.clone(), &cfg.lease_name)
        .with_namespace(&cfg.namespace)
        .with_identity(&cfg.identity)
        .with_duration(cfg.lease_duration.as_secs())
        .with_grace(cfg.grace_secs())
        .build()
        .await
}

/// A lease manager, retried (with back-off) until the Lease can be read or created.
async fn lease_manager(client: &Client, cfg: &ElectionConfig) -> Arc<LeaseManager> {
    let (min, max) = (Duration::from_millis(250), Duration::from_secs(5));
    let mut failures = 0;
    loop {
        match build(client, cfg).await {
            Ok(m) => return Arc::new(m),
            Err(e) => {
                warn_limited(
                    "cannot set up the leader lease",
                    &format!("{}/{}: {e}", cfg.namespace, cfg.lease_name),
                );
                tokio::time::sleep(delay(failures, min, max)).await;
                failures += 1;
            }
        }
    }
}

/// While we hold the lease, reads it back and moves the fence to our last renewal plus the
/// renew deadline; declares the lease lost when the fence passes or another holds it.
async fn confirm(
    client: Client,
    cfg: ElectionConfig,
    leadership: Arc<Leadership>,
    confirm_now: Arc<tokio::sync::Notify>,
) {
    let api = Api::<Lease>::namespaced(client, &cfg.namespace);
    let interval = cfg.confirm_interval();
    loop {
        tokio::select! {
            _ = confirm_now.notified() => {}
            _ = tokio::time::sleep(interval) => {}
        }
        if !leadership.status.borrow().holding {
            continue;
        }
        match api.get(&cfg.lease_name).await {
            Ok(lease) => match fence_from(&lease, &cfg, SystemTime::now()) {
                Ok(left) => leadership.confirm(Instant::now() + left),
                Err(why) => leadership.lose(why),
            },
            Err(e) => warn_limited("cannot read the leader lease back", &e.to_string()),
        }
        let expired = leadership
            .fence()
            .is_some_and(|until| Instant::now() >= until);
        if expired {
            leadership.lose(format!(
                "not renewed within the renew deadline ({:?})",
                cfg.renew_deadline
            ));
        }
        if let Some(why) = leadership.lost() {
            warn!(identity = %cfg.identity, "{why}; stopping (writes are fenced)");
            return;
        }
    }
}

/// How long from `now` we may still write according to `lease`: until its renewTime (ours)
/// plus the renew deadline. Err when another replica holds it.
fn fence_from(lease: &Lease, cfg: &ElectionConfig, now: SystemTime) -> Result<Duration, String> {
    let spec = lease.spec.as_ref();
    let holder = spec.and_then(|s| s.holder_identity.as_deref());
    if holder != Some(cfg.identity.as_str()) {
        return Err(format!(
            "the lease is held by {}",
            holder.unwrap_or("nobody")
        ));
    }
    let Some(renewed) = spec.and_then(|s| s.renew_time.as_ref()) else {
        return Ok(Duration::ZERO);
    };
    let renewed: SystemTime = renewed.0.into();
    Ok((renewed + cfg.renew_deadline)
        .duration_since(now)
        .unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

    fn cfg(duration: u64, deadline: u64) -> ElectionConfig {
        ElectionConfig::new(
            "rb".into(),
            "ns".into(),
            Duration::from_secs(duration),
            Duration::from_secs(deadline),
            "me".into(),
        )
        .unwrap()
    }

    #[test]
    fn the_renew_deadline_must_be_shorter_than_the_lease() {
        let d = Duration::from_secs;
        let new = |duration, deadline| {
            ElectionConfig::new("a".into(), "b".into(), duration, deadline, "c".into())
        };
        assert!(new(d(15), d(10)).is_ok());
        assert!(matches!(
            new(d(10), d(10)),
            Err(LeaderError::RenewDeadline { .. })
        ));
        assert!(matches!(
            new(Duration::from_millis(2500), d(1)),
            Err(LeaderError::LeaseDuration(_))
        ));
        assert!(matches!(
            new(d(1), Duration::from_millis(500)),
            Err(LeaderError::LeaseDuration(_))
        ));
    }

    #[test]
    fn the_holder_renews_twice_per_deadline() {
        let c = cfg(15, 10);
        assert_eq!(c.renew_interval(), Duration::from_secs(5));
        assert_eq!(c.grace_secs(), 10, "renewed 5 s after the last renewal");
        let c = cfg(3, 2);
        assert_eq!(c.grace_secs(), 2, "renewed every second");
        assert!(c.confirm_interval() <= Duration::from_millis(250));
    }

    fn lease(holder: &str, renewed: SystemTime) -> Lease {
        Lease {
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.into()),
                renew_time: Some(MicroTime(renewed.try_into().unwrap())),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn the_fence_is_our_last_renewal_plus_the_deadline() {
        let c = cfg(15, 10);
        let now = SystemTime::now();
        let renewed = now - Duration::from_secs(3);
        let left = fence_from(&lease("me", renewed), &c, now).unwrap();
        assert!(
            left > Duration::from_millis(6_900) && left <= Duration::from_secs(7),
            "{left:?}"
        );
        let stale = now - Duration::from_secs(11);
        assert_eq!(fence_from(&lease("me", stale), &c, now), Ok(Duration::ZERO));
        assert!(fence_from(&lease("other", now), &c, now)
            .unwrap_err()
            .contains("held by other"));
    }

    #[tokio::test(start_paused = true)]
    async fn writes_stop_when_the_fence_passes_and_for_good_once_lost() {
        let l = Leadership::elected(None);
        assert!(!l.is_leader(), "a standby until the lease is ours");
        l.set_holding(true);
        assert!(!l.is_leader(), "not before a renewal of ours is seen");
        l.confirm(Instant::now() + Duration::from_secs(2));
        assert!(l.is_leader());
        tokio::time::advance(Duration::from_secs(3)).await;
        assert!(!l.is_leader(), "fenced once the deadline passes unrenewed");
        l.confirm(Instant::now() + Duration::from_secs(2));
        assert!(l.is_leader());
        l.lose("test".into());
        l.confirm(Instant::now() + Duration::from_secs(2));
        assert!(!l.is_leader(), "a lost lease is never written under again");
        assert!(Leadership::always().is_leader());
    }

    #[tokio::test(start_paused = true)]
    async fn the_gate_lets_no_write_through_on_a_standby() {
        let l = Leadership::elected(None);
        let gate = Arc::new(super::super::retry::Gate::new(l.clone()));
        let waiting = tokio::spawn({
            let gate = gate.clone();
            async move { gate.pass().await }
        });
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(!waiting.is_finished(), "a standby writes nothing");
        l.set_holding(true);
        l.confirm(Instant::now() + Duration::from_secs(2));
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(waiting.is_finished(), "the leader writes");
        tokio::time::sleep(Duration::from_secs(3)).await;
        let fenced = tokio::spawn(async move { gate.pass().await });
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(
            !fenced.is_finished(),
            "fenced once its renewal is not seen in time"
        );
    }
}
