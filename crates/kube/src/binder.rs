//! The binder: binds (`pods/{name}/binding`) and evictions (`pods/{name}/eviction`) in
//! flight, bounded, through the shared `Gate` (an API server that does not answer is probed,
//! not hammered).
//!
//! A pod being bound or evicted carries an assumption in the cache (see
//! `cache::Assumption`) from the cycle that decided it until the watch shows the result or
//! the call fails, so the room it takes is not handed out again meanwhile. A bind the API
//! server refuses puts the pod back to pending and tells the gang's recovery (a gang left
//! short of its minimum is completed first, or released); a 409 saying the pod is already
//! on the same node is a bind that went through before (a retry after a lost answer).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ::kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use ::kube::Client;
use k8s_openapi::api::core::v1::Pod;
use tokio::sync::Notify;
use tokio::time::Instant;
use tracing::debug;

use super::bind_limit::BindLimit;
use super::events::{pod_ref, Event, EventType};
use super::in_flight::Sending;
pub use super::in_flight::{InFlight, BINDS_FIRST_LIMIT, BINDS_SEEN_LIMIT};
use super::index::{Index, IndexView};
use super::metrics::Metrics;
use super::retry::{cause_of, delay, warn_limited, Failure, Gate};
use crate::framework::{Bind, Eviction};

/// What binds and evicts need; cheap to clone into each call's task.
#[derive(Clone)]
pub struct Binder {
    pub client: Client,
    /// Read, and answered into (see `index::view`).
    pub index: IndexView,
    pub wake: Arc<Notify>,
    pub metrics: Arc<Metrics>,
    pub gate: Arc<Gate>,
    /// How many calls may be in flight (adaptive).
    pub limit: Arc<BindLimit>,
    /// Pods whose last bind was refused: how many times in a row, and not before when to
    /// try again (the engine places such a pod again at once; the binder holds the call
    /// back, the room stays assumed meanwhile).
    pub refused: Arc<Mutex<Refusals>>,
    /// Binds and evictions sent and not yet answered (a graceful shutdown waits for them
    /// before releasing the leader lease).
    pub in_flight: Arc<InFlight>,
    /// With leader election: annotations that name the lease and this replica on every
    /// Binding and Eviction, so the API server refuses them once another replica holds the
    /// lease (deploy/'s ValidatingAdmissionPolicy `rust-batch-leader-fence`): a replica
    /// paused with calls already on their way cannot bind or evict after its successor
    /// took over.
    pub fence: Option<Arc<serde_json::Value>>,
    /// Send each bound pod a Scheduled event, as kube-scheduler does (one more write per
    /// pod). Off by default: the PodGroup's Scheduled event says it once per gang, and the
    /// API server's PodScheduled=True condition is on every bound pod.
    pub pod_scheduled_events: bool,
}

/// The annotation naming the lease (`namespace/name`) a bind or eviction is made under.
pub const LEASE_ANNOTATION: &str = "rust-batch.io/leader-lease";
/// The annotation naming the replica (its identity in the lease) that made it.
pub const LEADER_ANNOTATION: &str = "rust-batch.io/leader";

/// The fence annotations for binds and evictions made under `lease` by `identity`.
pub fn fence_annotations(
    lease_namespace: &str,
    lease_name: &str,
    identity: &str,
) -> serde_json::Value {
    serde_json::json!({
        LEASE_ANNOTATION: format!("{lease_namespace}/{lease_name}"),
        LEADER_ANNOTATION: identity,
    })
}

/// Per pod uid: binds refused in a row, and when the next may be sent.
pub type Refusals = HashMap<Arc<str>, (u32, Instant)>;

/// Back-off between binds of a pod the API server refused.
const REFUSED_MIN_DELAY: Duration = Duration::from_secs(1);
const REFUSED_MAX_DELAY: Duration = Duration::from_secs(60);

/// How a bind ended.
#[derive(Debug, PartialEq, Eq)]
enum BindOutcome {
    Bound,
    /// An earlier try went through (its answer was lost): bound, already told.
    AlreadyBound,
    /// The pod is gone: nothing to do, its deletion is on its way.
    Gone,
    Refused(String),
}

/// Whether a 409 on a bind says the pod already is on `node` (our own earlier try).
pub fn already_on(message: &str, node: &str) -> bool {
    message.contains("already assigned to node")
        && message.trim_end().ends_with(&format!("\"{node}\""))
}

impl Binder {
    /// Waits until no bind or eviction is in flight, at most `limit`; whether none is.
    pub async fn drained(&self, limit: Duration) -> bool {
        self.in_flight.answered(limit).await
    }

    /// Counts again the binds the watch has yet to show, after assumptions were laid or
    /// dropped (here, and for binds a cycle calls off).
    pub fn recount_unseen(&self, ix: &Index) {
        self.in_flight.count_unseen(&ix.cache);
    }

    /// Waits for a permit to send a call, counting the wait.
    async fn permit(&self) -> tokio::sync::OwnedSemaphorePermit {
        let asked = Instant::now();
        let (permit, waited) = self.limit.acquire().await;
        let wait = if waited {
            asked.elapsed()
        } else {
            Duration::ZERO
        };
        self.metrics.bind_permit_wait.observe(wait.as_secs_f64());
        permit
    }

    /// One call answered after `latency`: the limit may move (a 429, a 5xx or no answer
    /// says the API server is overloaded).
    fn answered(&self, latency: Duration, sent: &Result<serde_json::Value, ::kube::Error>) {
        let overloaded = matches!(sent, Err(e) if Failure::of(e) == Failure::Transient);
        let limit = self.limit.answered(latency, overloaded);
        let was = self.metrics.bind_limit.get();
        if was != limit as i64 {
            debug!(
                was,
                limit,
                ?latency,
                overloaded,
                "binds in flight limit moved"
            );
        }
        self.metrics.bind_limit.set(limit as i64);
    }

    /// Sends binds and evictions marked with `assume`, as many at a time as the limit allows.
    pub async fn send(&self, binds: Vec<Bind>, evictions: Vec<Eviction>) {
        for e in evictions {
            let permit = self.permit().await;
            let this = self.clone();
            tokio::spawn(async move {
                this.evict(e).await;
                this.limit.release(permit);
            });
        }
        for b in binds {
            let this = self.clone();
            tokio::spawn(async move {
                let not_before = this.refused_lock().get(&b.task).map(|(_, at)| *at);
                if let Some(at) = not_before {
                    tokio::time::sleep_until(at).await;
                }
                let permit = this.permit().await;
                let outcome = this.bind_until_answered(&b).await;
                this.limit.release(permit);
                this.settle(b, outcome);
            });
        }
    }

    async fn bind_until_answered(&self, b: &Bind) -> BindOutcome {
        let api = Api::<Pod>::namespaced(self.client.clone(), &b.namespace);
        let mut body = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": &*b.name, "namespace": &*b.namespace},
            "target": {"apiVersion": "v1", "kind": "Node", "name": &*b.node}
        });
        if let Some(fence) = &self.fence {
            body["metadata"]["annotations"] = (**fence).clone();
        }
        loop {
            self.gate.pass().await;
            // A node deleted since the decision would take the bind and never run the pod.
            if self
                .index
                .read(|ix| ix.cache.state().node_by_name(&b.node).is_none())
            {
                return BindOutcome::Refused(format!("node {} no longer exists", b.node));
            }
            let sending = Sending::new(&self.in_flight);
            let started = Instant::now();
            tracing::trace!(pod = %b.name, "bind sent");
            let sent = api
                .create_subresource::<_, serde_json::Value>(
                    "binding",
                    &b.name,
                    &PostParams::default(),
                    &body,
                )
                .await;
            drop(sending);
            self.gate.record(&sent);
            self.metrics
                .api_write_timed("binding", started.elapsed(), sent.as_ref().err());
            self.answered(started.elapsed(), &sent);
            let err = match sent {
                Ok(_) => {
                    tracing::trace!(pod = %b.name, took = ?started.elapsed(), "bind answered");
                    self.metrics
                        .volcano
                        .observe_stage("Bind", started.elapsed());
                    return BindOutcome::Bound;
                }
                Err(e) => e,
            };
            match Failure::of(&err) {
                Failure::Transient => {
                    warn_limited(
                        &format!("bind not answered ({})", cause_of(&err)),
                        "retrying when the API server answers",
                    );
                }
                Failure::NotFound => return BindOutcome::Gone,
                Failure::Conflict(message) if already_on(&message, &b.node) => {
                    return BindOutcome::AlreadyBound
                }
                Failure::Conflict(message) | Failure::Refused(message) => {
                    return BindOutcome::Refused(message)
                }
            }
        }
    }

    fn refused_lock(&self) -> std::sync::MutexGuard<'_, Refusals> {
        self.refused.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn settle(&self, b: Bind, outcome: BindOutcome) {
        {
            let mut refused = self.refused_lock();
            if matches!(outcome, BindOutcome::Refused(_)) {
                let now = Instant::now();
                if refused.len() > 10_000 {
                    refused.retain(|_, (_, at)| *at + REFUSED_MAX_DELAY > now);
                }
                let entry = refused.entry(b.task.clone()).or_insert((0, now));
                entry.1 = now + delay(entry.0, REFUSED_MIN_DELAY, REFUSED_MAX_DELAY);
                entry.0 += 1;
            } else {
                refused.remove(&b.task);
            }
        }
        let refused = self.index.answer(|ix| match outcome {
            BindOutcome::Bound => {
                debug!(pod = %b.name, node = %b.node, "bound");
                self.metrics.pods_bound.inc();
                self.metrics
                    .volcano
                    .schedule_attempts
                    .with_label_values(&["scheduled"])
                    .inc();
                if let Some(created) = ix.cache.pod(&b.task).map(|p| p.task.created) {
                    let now = crate::clock::now_ms();
                    if created > 0 {
                        self.metrics
                            .e2e_latency
                            .observe((now - created).max(0) as f64 / 1000.0);
                    }
                    self.metrics
                        .volcano
                        .observe_task_stage("Bound", created, now);
                }
                if self.pod_scheduled_events {
                    ix.event(Event {
                        regarding: pod_ref(&b.namespace, &b.name, &b.task),
                        type_: EventType::Normal,
                        reason: "Scheduled".into(),
                        note: format!(
                            "Successfully assigned {}/{} to {}",
                            b.namespace, b.name, b.node
                        ),
                    });
                }
                false
            }
            BindOutcome::AlreadyBound => false,
            BindOutcome::Gone => {
                ix.not_done(&b.task);
                self.recount_unseen(ix);
                false
            }
            BindOutcome::Refused(why) => {
                warn_limited(
                    "bind refused",
                    &format!("{}/{} to {}: {why}", b.namespace, b.name, b.node),
                );
                self.metrics.bind_failures.inc();
                self.metrics
                    .volcano
                    .schedule_attempts
                    .with_label_values(&["error"])
                    .inc();
                ix.bind_refused(&b, &why, crate::clock::now_ms());
                self.recount_unseen(ix);
                true
            }
        });
        if refused {
            self.wake.notify_one();
        }
    }

    /// Evicts one pod. The eviction API honours PodDisruptionBudgets; a refusal leaves the
    /// pod running and the preemptor waiting for the next cycle.
    ///
    /// A victim of preempt or reclaim (the eviction names its preemptor) goes as
    /// kube-scheduler's go: the `DisruptionTarget` condition (reason
    /// `PreemptionByScheduler`) patched on its status, then the pod deleted. The eviction
    /// API would overwrite that reason with its own (`EvictionByEvictionAPI`), so it is
    /// asked first as a dry run: the budget check and the leader fence still say yes or no
    /// before anything is written. The delete itself carries no fence (a DELETE has no
    /// object to annotate): a replica frozen between the two could still delete one
    /// victim it chose as leader.
    async fn evict(&self, e: Eviction) {
        let api = Api::<Pod>::namespaced(self.client.clone(), &e.namespace);
        let r = pod_ref(&e.namespace, &e.name, &e.task);
        let mut body = serde_json::json!({
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": &*e.name, "namespace": &*e.namespace},
        });
        if let Some(fence) = &self.fence {
            body["metadata"]["annotations"] = (**fence).clone();
        }
        let preempting = e.preemptor.is_some();
        if preempting {
            body["deleteOptions"] = serde_json::json!({"dryRun": ["All"]});
        }
        let refused = loop {
            self.gate.pass().await;
            let sending = Sending::new(&self.in_flight);
            let started = Instant::now();
            let sent = api
                .create_subresource::<_, serde_json::Value>(
                    "eviction",
                    &e.name,
                    &PostParams::default(),
                    &body,
                )
                .await;
            drop(sending);
            self.gate.record(&sent);
            self.metrics
                .api_write_timed("eviction", started.elapsed(), sent.as_ref().err());
            let err = match sent {
                Ok(_) => break None,
                Err(err) => err,
            };
            match Failure::of(&err) {
                // 429 here is a disruption budget saying no, not an overloaded server.
                Failure::Transient if !matches!(&err, ::kube::Error::Api(s) if s.code == 429) => {
                    warn_limited(
                        &format!("eviction not answered ({})", cause_of(&err)),
                        "retrying when the API server answers",
                    );
                }
                Failure::NotFound => break None,
                _ => break Some(err.to_string()),
            }
        };
        let refused = match refused {
            None if preempting => self.preempt(&api, &e).await.err(),
            other => other,
        };
        match refused {
            None => self.index.answer(|ix| {
                ix.event(Event {
                    regarding: r,
                    type_: EventType::Normal,
                    reason: "Preempted".into(),
                    note: e.reason.clone(),
                })
            }),
            Some(err) => {
                warn_limited(
                    "eviction refused",
                    &format!("{}/{}: {err}", e.namespace, e.name),
                );
                self.index.answer(|ix| ix.eviction_refused(&e, &err));
                self.wake.notify_one();
            }
        }
    }

    /// What kube-scheduler does to a victim once the dry-run eviction said yes: the
    /// `DisruptionTarget` condition on its status, then the delete (of this pod, by uid).
    /// A pod already gone is preempted.
    async fn preempt(&self, api: &Api<Pod>, e: &Eviction) -> Result<(), String> {
        let message = self
            .index
            .read(|ix| disruption_message(ix, e.preemptor.as_deref()));
        let patch = disruption_target_patch(&message, crate::clock::now_ms());
        self.gate.pass().await;
        let sending = Sending::new(&self.in_flight);
        let started = Instant::now();
        let patched = api
            .patch_status(&e.name, &PatchParams::default(), &Patch::Strategic(&patch))
            .await;
        drop(sending);
        self.gate.record(&patched);
        self.metrics
            .api_write_timed("pod_status", started.elapsed(), patched.as_ref().err());
        match patched {
            Ok(_) => {}
            Err(err) if matches!(Failure::of(&err), Failure::NotFound) => return Ok(()),
            Err(err) => return Err(format!("the DisruptionTarget condition: {err}")),
        }
        self.gate.pass().await;
        let sending = Sending::new(&self.in_flight);
        let started = Instant::now();
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(e.task.to_string()),
                resource_version: None,
            }),
            ..Default::default()
        };
        let deleted = api.delete(&e.name, &params).await;
        drop(sending);
        self.gate.record(&deleted);
        self.metrics
            .api_write_timed("pod_delete", started.elapsed(), deleted.as_ref().err());
        match deleted {
            Ok(_) => Ok(()),
            Err(err) if matches!(Failure::of(&err), Failure::NotFound) => Ok(()),
            Err(err) => Err(err.to_string()),
        }
    }
}

/// The message of the `DisruptionTarget` condition, in kube-scheduler's words ("<its
/// scheduler name>: preempting to accommodate a higher priority pod" — or "podgroup", as
/// 1.37 says of a gang preempting).
fn disruption_message(ix: &Index, preemptor: Option<&str>) -> String {
    let state = ix.cache.state();
    let gang = preemptor
        .and_then(|p| state.job_by_uid(p))
        .map(|id| state.job(id));
    let kind = match gang {
        Some(g) if g.origin == crate::model::GangOrigin::SinglePod => "pod",
        _ => "podgroup",
    };
    format!(
        "{}: preempting to accommodate a higher priority {kind}",
        ix.scheduler_name()
    )
}

/// The strategic merge patch that sets a pod's `DisruptionTarget` condition (conditions
/// merge by type: the others stay).
pub fn disruption_target_patch(message: &str, now_ms: i64) -> serde_json::Value {
    let now = k8s_openapi::jiff::Timestamp::from_millisecond(now_ms)
        .map(|t| t.to_string())
        .unwrap_or_default();
    serde_json::json!({"status": {"conditions": [{
        "type": DISRUPTION_TARGET,
        "status": "True",
        "reason": PREEMPTION_BY_SCHEDULER,
        "message": message,
        "lastTransitionTime": now,
    }]}})
}

/// The pod condition a victim carries before it is deleted, and its reason, as
/// kube-scheduler writes them.
pub const DISRUPTION_TARGET: &str = "DisruptionTarget";
pub const PREEMPTION_BY_SCHEDULER: &str = "PreemptionByScheduler";

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn other_writes_wait_for_the_binds_in_flight_within_a_limit() {
        let in_flight = Arc::new(InFlight::default());
        assert!(
            in_flight.answered(Duration::from_secs(1)).await,
            "nothing in flight: no wait"
        );
        let started = Instant::now();
        {
            let _bind = Sending::new(&in_flight);
            assert!(
                !in_flight.answered(Duration::from_millis(50)).await,
                "a bind that stays in flight: the wait ends at its limit"
            );
            assert_eq!(started.elapsed(), Duration::from_millis(50));
        }
        let started = Instant::now();
        let bind = Sending::new(&in_flight);
        let waiter = {
            let in_flight = in_flight.clone();
            tokio::spawn(async move { in_flight.answered(Duration::from_secs(10)).await })
        };
        tokio::time::sleep(Duration::from_millis(7)).await;
        drop(bind);
        assert!(waiter.await.unwrap(), "answered before the limit");
        assert_eq!(
            started.elapsed(),
            Duration::from_millis(7),
            "and not waited longer"
        );
    }

    #[test]
    fn a_victim_gets_the_disruption_target_condition_kube_scheduler_writes() {
        let mut ix = Index::new(vec!["rust-batch".into()]);
        assert_eq!(
            disruption_message(&ix, None),
            "rust-batch: preempting to accommodate a higher priority podgroup"
        );
        ix.cache.apply_job(crate::model::JobSpec {
            uid: "ns/podgroup-x".into(),
            namespace: "ns".into(),
            name: "podgroup-x".into(),
            queue: "default".into(),
            min_member: 1,
            origin: crate::model::GangOrigin::SinglePod,
            ..Default::default()
        });
        assert_eq!(
            disruption_message(&ix, Some("ns/podgroup-x")),
            "rust-batch: preempting to accommodate a higher priority pod",
            "a pod of no gang preempts as a pod"
        );
        let patch = disruption_target_patch("m", 0);
        let c = &patch["status"]["conditions"][0];
        assert_eq!(c["type"], "DisruptionTarget");
        assert_eq!(c["status"], "True");
        assert_eq!(c["reason"], "PreemptionByScheduler");
        assert_eq!(c["message"], "m");
        assert_eq!(c["lastTransitionTime"], "1970-01-01T00:00:00Z");
    }

    #[test]
    fn a_conflict_naming_the_same_node_is_a_bind_that_went_through() {
        let m = "Operation cannot be fulfilled on pods/binding \"p\": pod p is already assigned to node \"n1\"";
        assert!(already_on(m, "n1"));
        assert!(!already_on(m, "n"));
        assert!(!already_on(m, "n2"));
        assert!(!already_on("the object has been modified", "n1"));
    }
}
