//! The status writer: PodGroup status (Volcano's, scheduler-plugins' and the legacy kind)
//! and Queue status, written by one task from a coalescing queue.
//!
//! A cycle only marks objects whose status should change; the writer computes the patch
//! when it sends it, from the newest object the index has (the watch's, or the answer to
//! its own last write — see `index::store_newest`) and the engine's current gang, so a
//! burst of cycles costs one write per object, a status never goes backwards to an older
//! conditions list, and an object deleted meanwhile (no longer in the index) is dropped
//! at once. Every write carries the object's resourceVersion: a conflict rereads the object
//! and computes again.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ::kube::api::{Api, Patch, PatchParams};
use ::kube::{Client, ResourceExt};
use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::dialects::coscheduling::{cosched_status_patch, Dialect, SigsPodGroup, XK8sPodGroup};
use super::dialects::volcano::{queue_status_patch, status_patch, GroupStatus, PodGroup, Queue};
use super::index::{lock, Index, StoredGroup};
use super::metrics::Metrics;
use super::retry::{cause_of, delay, warn_limited, Failure, Gate};
use crate::framework::JobCondition;
use crate::model::PodGroupPhase;

/// An object whose status the scheduler writes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// A PodGroup of a dialect, `namespace/name`.
    Group(Dialect, String),
    /// A Queue, by name.
    Queue(String),
    /// A pending pod of ours (its PodScheduled condition), by uid.
    Pod(String),
}

/// Targets waiting to be written: each at most once (a later mark coalesces with it).
#[derive(Default)]
struct WriteQueue {
    ready: VecDeque<Target>,
    queued: HashSet<Target>,
    /// Targets whose last write failed for a reason of their own: when to try again, and
    /// how many tries failed in a row.
    later: HashMap<Target, (Instant, u32)>,
}

impl WriteQueue {
    fn mark(&mut self, t: Target) -> bool {
        if self.queued.contains(&t) || self.later.contains_key(&t) {
            return false;
        }
        self.queued.insert(t.clone());
        self.ready.push_back(t);
        true
    }

    /// The next target due, or how long until one is.
    fn next(&mut self, now: Instant) -> Result<(Target, u32), Option<Duration>> {
        while let Some(t) = self.ready.pop_front() {
            if self.queued.remove(&t) {
                return Ok((t, 0));
            }
        }
        let due = self
            .later
            .iter()
            .filter(|(_, (at, _))| *at <= now)
            .map(|(t, _)| t.clone())
            .next();
        if let Some(t) = due {
            let (_, tries) = self.later.remove(&t).unwrap_or((now, 0));
            return Ok((t, tries));
        }
        Err(self.later.values().map(|(at, _)| *at - now).min())
    }

    fn len(&self) -> usize {
        self.queued.len() + self.later.len()
    }
}

/// The handle cycles and watches use.
#[derive(Clone)]
pub struct StatusWriter {
    queue: Arc<Mutex<WriteQueue>>,
    wake: Arc<Notify>,
}

impl Default for StatusWriter {
    fn default() -> Self {
        StatusWriter {
            queue: Arc::new(Mutex::new(WriteQueue::default())),
            wake: Arc::new(Notify::new()),
        }
    }
}

/// How an attempt to write one target ended.
enum Written {
    /// Written, or nothing (left) to write.
    Done,
    /// The object changed under us: read it again and compute again.
    Conflict,
    /// Failed for this object (refused, or the API server did not answer).
    Failed,
}

impl StatusWriter {
    fn queue(&self) -> std::sync::MutexGuard<'_, WriteQueue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Asks for `t`'s status to be written (again).
    pub fn mark(&self, t: Target) {
        if self.queue().mark(t) {
            self.wake.notify_one();
        }
    }

    /// How many objects wait to be written.
    pub fn backlog(&self) -> usize {
        self.queue().len()
    }

    /// Marks every object whose status differs from what the scheduler wants.
    pub fn mark_changed(&self, ix: &Index, now_ms: i64) {
        for key in ix.pod_groups.keys() {
            if patch_for(ix, &Target::Group(Dialect::Volcano, key.clone()), now_ms).is_some() {
                self.mark(Target::Group(Dialect::Volcano, key.clone()));
            }
        }
        for (dialect, keys) in [
            (Dialect::XK8sPodGroup, ix.group_keys::<XK8sPodGroup>()),
            (Dialect::SigsPodGroup, ix.group_keys::<SigsPodGroup>()),
        ] {
            for key in keys {
                let t = Target::Group(dialect, key);
                if patch_for(ix, &t, now_ms).is_some() {
                    self.mark(t);
                }
            }
        }
        for name in ix.queues.keys() {
            let t = Target::Queue(name.clone());
            if patch_for(ix, &t, now_ms).is_some() {
                self.mark(t);
            }
        }
        for uid in ix.pod_conditions.keys() {
            let t = Target::Pod(uid.clone());
            if patch_for(ix, &t, now_ms).is_some() {
                self.mark(t);
            }
        }
    }

    /// Writes marked targets until the process ends.
    pub async fn run(
        self,
        client: Client,
        index: Arc<Mutex<Index>>,
        gate: Arc<Gate>,
        metrics: Arc<Metrics>,
    ) {
        loop {
            let next = self.queue().next(Instant::now());
            let (target, tries) = match next {
                Ok(t) => t,
                Err(wait) => {
                    let wait = wait.unwrap_or(Duration::from_secs(3600));
                    tokio::select! {
                        _ = self.wake.notified() => {}
                        _ = tokio::time::sleep(wait) => {}
                    }
                    continue;
                }
            };
            let mut conflicts = 0;
            loop {
                gate.pass().await;
                match write(&client, &index, &gate, &metrics, &target).await {
                    Written::Done => break,
                    Written::Conflict if conflicts < 3 => {
                        conflicts += 1;
                        reread(&client, &index, &gate, &target).await;
                    }
                    Written::Conflict | Written::Failed => {
                        let at = Instant::now()
                            + delay(tries, Duration::from_secs(1), Duration::from_secs(300));
                        self.queue().later.insert(target.clone(), (at, tries + 1));
                        break;
                    }
                }
            }
        }
    }
}

/// The patch `t` needs now, with the resourceVersion it is computed from, or None when the
/// object is gone, not ours, or already says it all.
fn patch_for(ix: &Index, t: &Target, now_ms: i64) -> Option<(Value, Option<String>)> {
    let snapshot = ix.cache.state();
    match t {
        Target::Group(dialect, key) => {
            if ix.group_dialect(key) != Some(*dialect) {
                return None; // gone, or another kind defines the gang
            }
            let job = snapshot.job(snapshot.job_by_uid(key)?);
            if ix.foreign(key, job) {
                return None; // another scheduler's gang
            }
            match dialect {
                Dialect::Volcano => {
                    let pg = ix.pod_groups.get(key)?;
                    // A gang this process never judged (bound by an earlier instance that
                    // died before writing so) but that runs says Scheduled, not whatever
                    // the object last said.
                    let condition = match ix.verdicts.get(key).and_then(|(c, _)| c.clone()) {
                        Some(c) => Some(c),
                        None if matches!(
                            job.phase,
                            PodGroupPhase::Running | PodGroupPhase::Completed
                        ) =>
                        {
                            Some(JobCondition::scheduled(job))
                        }
                        None => None,
                    };
                    let desired = GroupStatus::of(job, condition.as_ref());
                    Some((status_patch(pg, &desired, now_ms)?, pg.resource_version()))
                }
                Dialect::XK8sPodGroup => {
                    let pg = ix.x_k8s_groups.get(key)?;
                    Some((
                        cosched_status_patch(pg, job, now_ms)?,
                        pg.resource_version(),
                    ))
                }
                Dialect::SigsPodGroup => {
                    let pg = ix.sigs_groups.get(key)?;
                    Some((
                        cosched_status_patch(pg, job, now_ms)?,
                        pg.resource_version(),
                    ))
                }
            }
        }
        Target::Pod(uid) => pod_condition_patch(ix, uid),
        Target::Queue(name) => {
            let q = ix.queues.get(name)?;
            let jobs = snapshot
                .jobs()
                .map(|(_, j)| j)
                .filter(|j| &*j.queue == name);
            Some((queue_status_patch(q, jobs)?, q.resource_version()))
        }
    }
}

/// The PodScheduled=False condition a pending pod of ours lacks, if any: not for a pod
/// being bound (the binding sets PodScheduled=True), nor one that already says it. Merged
/// by condition type (strategic merge), its transition time kept while it stays False.
fn pod_condition_patch(ix: &Index, uid: &str) -> Option<(Value, Option<String>)> {
    let seen = ix.pending_pods.get(uid)?;
    let (reason, message) = ix.pod_conditions.get(uid)?;
    // A refused pod is not in the engine: the index alone says why it waits.
    let placed = ix.cache.pod(uid).is_some_and(|p| p.task.node.is_some());
    if ix.cache.assumption(uid).is_some() || placed {
        return None;
    }
    let was_false = match &seen.scheduled {
        Some((status, r, m)) if status == "False" => {
            if r == reason && m == message {
                return None;
            }
            true
        }
        _ => false,
    };
    let mut condition = serde_json::json!({
        "type": "PodScheduled",
        "status": "False",
        "reason": reason,
        "message": message,
    });
    if !was_false {
        condition["lastTransitionTime"] =
            humantime::format_rfc3339_seconds(std::time::SystemTime::now())
                .to_string()
                .into();
    }
    Some((
        serde_json::json!({ "status": { "conditions": [condition] } }),
        seen.resource_version.clone(),
    ))
}

async fn write(
    client: &Client,
    index: &Mutex<Index>,
    gate: &Gate,
    metrics: &Metrics,
    t: &Target,
) -> Written {
    let Some((mut patch, rv)) = patch_for(&lock(index), t, super::driver::now_ms()) else {
        return Written::Done;
    };
    // Written only over the version it was computed from.
    if let Some(rv) = rv {
        patch["metadata"] = serde_json::json!({ "resourceVersion": rv });
    }
    let pp = PatchParams::default();
    if let Target::Pod(uid) = t {
        let Some(seen) = lock(index).pending_pods.get(uid).cloned() else {
            return Written::Done;
        };
        let r = Api::<Pod>::namespaced(client.clone(), &seen.namespace)
            .patch_status(&seen.name, &pp, &Patch::Strategic(&patch))
            .await
            .map(|p| lock(index).note_pod_status(&p));
        return outcome_of(gate, metrics, t, "pod condition", r);
    }
    let patch = Patch::Merge(&patch);
    let (what, outcome) = match t {
        Target::Group(Dialect::Volcano, key) => {
            let (ns, name) = split(key);
            // Volcano's PodGroup has no status subresource: the patch goes to the object.
            let r = Api::<PodGroup>::namespaced(client.clone(), ns)
                .patch(name, &pp, &patch)
                .await;
            ("podgroup status", stored(index, r))
        }
        Target::Group(Dialect::XK8sPodGroup, key) => {
            let (ns, name) = split(key);
            let r = Api::<XK8sPodGroup>::namespaced(client.clone(), ns)
                .patch_status(name, &pp, &patch)
                .await;
            ("podgroup status", stored(index, r))
        }
        Target::Group(Dialect::SigsPodGroup, key) => {
            let (ns, name) = split(key);
            let r = Api::<SigsPodGroup>::namespaced(client.clone(), ns)
                .patch_status(name, &pp, &patch)
                .await;
            ("podgroup status", stored(index, r))
        }
        Target::Queue(name) => {
            let r = Api::<Queue>::all(client.clone())
                .patch_status(name, &pp, &patch)
                .await;
            let r = r.map(|q| lock(index).apply_queue(&q));
            ("queue status", r)
        }
        Target::Pod(_) => return Written::Done,
    };
    outcome_of(gate, metrics, t, what, outcome)
}

/// What a write's answer means for the writer.
fn outcome_of(
    gate: &Gate,
    metrics: &Metrics,
    t: &Target,
    what: &str,
    outcome: Result<(), ::kube::Error>,
) -> Written {
    gate.record(&outcome);
    metrics.api_write(what, outcome.as_ref().err());
    match outcome {
        Ok(()) => Written::Done,
        Err(e) => match Failure::of(&e) {
            Failure::NotFound => Written::Done, // deleted: its watch event is on its way
            Failure::Conflict(_) => Written::Conflict,
            Failure::Transient => Written::Failed,
            Failure::Refused(why) => {
                warn_limited(
                    &format!("{what} refused ({})", cause_of(&e)),
                    &format!("{t:?}: {why}"),
                );
                Written::Failed
            }
        },
    }
}

/// Keeps the API server's answer to a write as the newest object.
fn stored<G: StoredGroup>(
    index: &Mutex<Index>,
    written: Result<G, ::kube::Error>,
) -> Result<(), ::kube::Error> {
    written.map(|g| lock(index).apply_group(&g))
}

/// Reads `t`'s object again after a conflict.
async fn reread(client: &Client, index: &Mutex<Index>, gate: &Gate, t: &Target) {
    gate.pass().await;
    let outcome = match t {
        Target::Group(Dialect::Volcano, key) => {
            let (ns, name) = split(key);
            let r = Api::<PodGroup>::namespaced(client.clone(), ns)
                .get(name)
                .await;
            stored(index, r)
        }
        Target::Group(Dialect::XK8sPodGroup, key) => {
            let (ns, name) = split(key);
            let r = Api::<XK8sPodGroup>::namespaced(client.clone(), ns)
                .get(name)
                .await;
            stored(index, r)
        }
        Target::Group(Dialect::SigsPodGroup, key) => {
            let (ns, name) = split(key);
            let r = Api::<SigsPodGroup>::namespaced(client.clone(), ns)
                .get(name)
                .await;
            stored(index, r)
        }
        Target::Queue(name) => Api::<Queue>::all(client.clone())
            .get(name)
            .await
            .map(|q| lock(index).apply_queue(&q)),
        Target::Pod(uid) => {
            let Some(seen) = lock(index).pending_pods.get(uid).cloned() else {
                return;
            };
            Api::<Pod>::namespaced(client.clone(), &seen.namespace)
                .get(&seen.name)
                .await
                .map(|p| lock(index).note_pod_status(&p))
        }
    };
    gate.record(&outcome);
}

fn split(key: &str) -> (&str, &str) {
    key.split_once('/').unwrap_or(("", key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_coalesce_per_object() {
        let mut q = WriteQueue::default();
        let a = Target::Group(Dialect::Volcano, "ns/a".into());
        let b = Target::Queue("q".into());
        assert!(q.mark(a.clone()));
        assert!(!q.mark(a.clone()), "one entry per object");
        assert!(q.mark(b.clone()));
        let now = Instant::now();
        assert_eq!(q.next(now).ok().map(|(t, _)| t), Some(a));
        assert_eq!(q.next(now).ok().map(|(t, _)| t), Some(b));
        assert!(q.next(now).is_err());
        assert_eq!(q.len(), 0);
    }

    #[test]
    fn a_deleted_pod_group_is_never_written() {
        let mut ix = Index::default();
        let pg: PodGroup = serde_json::from_value(serde_json::json!({
            "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
            "metadata": {"name": "a", "namespace": "ns", "resourceVersion": "7"},
            "spec": {"minMember": 1}
        }))
        .unwrap();
        ix.apply_group(&pg);
        let t = Target::Group(Dialect::Volcano, "ns/a".into());
        let (patch, rv) = patch_for(&ix, &t, 0).expect("a new PodGroup gets its status");
        assert_eq!(
            rv.as_deref(),
            Some("7"),
            "written over the version it was computed from"
        );
        assert_eq!(patch["status"]["phase"], "Pending");
        ix.delete_group(Dialect::Volcano, "ns/a");
        assert!(
            patch_for(&ix, &t, 0).is_none(),
            "gone from the index: nothing to write"
        );
    }

    #[test]
    fn a_pending_pod_gets_its_condition_once_and_never_while_binding() {
        let mut ix = Index::new(vec!["rb".into()]);
        let pod = |rv: &str, cond: serde_json::Value| -> Pod {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "resourceVersion": rv},
                "spec": {"schedulerName": "rb", "containers": [{"name": "c", "image": "i"}]},
                "status": {"phase": "Pending", "conditions": cond}
            }))
            .unwrap()
        };
        ix.apply_pod(&pod("5", serde_json::json!([])));
        let t = Target::Pod("u1".into());
        assert!(patch_for(&ix, &t, 0).is_none(), "no verdict yet");
        ix.pod_conditions
            .insert("u1".into(), ("Unschedulable".into(), "gang msg".into()));
        let (patch, rv) = patch_for(&ix, &t, 0).expect("the condition is missing");
        assert_eq!(rv.as_deref(), Some("5"));
        let c = &patch["status"]["conditions"][0];
        assert_eq!(
            (
                c["type"].as_str(),
                c["status"].as_str(),
                c["reason"].as_str()
            ),
            (Some("PodScheduled"), Some("False"), Some("Unschedulable"))
        );
        assert!(c["lastTransitionTime"].is_string(), "False is new");
        ix.apply_pod(&pod(
            "6",
            serde_json::json!([{"type": "PodScheduled", "status": "False",
                "reason": "Unschedulable", "message": "gang msg"}]),
        ));
        assert!(patch_for(&ix, &t, 0).is_none(), "written only on change");
        ix.pod_conditions
            .insert("u1".into(), ("QueueLimit".into(), "queue full".into()));
        let (patch, _) = patch_for(&ix, &t, 0).unwrap();
        assert!(
            patch["status"]["conditions"][0]["lastTransitionTime"].is_null(),
            "still False: its transition time stays"
        );
        ix.cache
            .assume("u1", crate::cache::Assumption::Bind("n1".into()));
        assert!(
            patch_for(&ix, &t, 0).is_none(),
            "the bind sets PodScheduled"
        );
    }

    #[test]
    fn a_failed_object_waits_for_its_own_back_off() {
        let mut q = WriteQueue::default();
        let a = Target::Queue("q".into());
        let now = Instant::now();
        q.later.insert(a.clone(), (now + Duration::from_secs(2), 1));
        assert!(!q.mark(a.clone()), "already waiting");
        assert_eq!(q.next(now).err(), Some(Some(Duration::from_secs(2))));
        let (t, tries) = q.next(now + Duration::from_secs(2)).unwrap();
        assert_eq!((t, tries), (a, 1));
    }
}
