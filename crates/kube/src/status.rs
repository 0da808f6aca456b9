//! The status writer: PodGroup status (Volcano's, scheduler-plugins' and the legacy kind)
//! and Queue status, and pending pods' PodScheduled condition, written by one task from a
//! coalescing queue.
//!
//! After each cycle the driver marks what changed since the last look (`mark_touched`):
//! the gangs the engine changed, found by pointer, and the objects a verdict or a watch
//! event touched — never every PodGroup and Queue. Each object waits in the queue at most
//! once, until it is due: a phase change at once (after `BINDS_FIRST`), a change of counts or messages at most
//! once per `PACE` (a burst of cycles costs one write), a gang losing members after
//! `TEARDOWN_GRACE` (so that its PodGroup's own delete event, usually just behind, drops
//! the write instead of a 404), a pod's condition after `POD_CONDITION_GRACE`. The writer
//! computes the patch when it sends it, from the newest object the index has (the watch's,
//! or the answer to its own last write — kept only while the index still has that object)
//! and the engine's current gang, so a status never goes backwards to an older conditions
//! list, nothing is sent that the object already says, and an object deleted meanwhile
//! (no longer in the index, or with a deletionTimestamp) is not written. Every write carries
//! the object's resourceVersion: a conflict rereads the object and computes again.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ::kube::api::{Api, Patch, PatchParams};
use ::kube::{Client, ResourceExt};
use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::dialects::kind::{registered, Dialect};
use super::dialects::volcano::{queue_status_patch, Queue};
use super::in_flight::{InFlight, BINDS_FIRST_LIMIT, BINDS_SEEN_LIMIT};
use super::index::Touched;
use super::index::{Index, IndexView};
use super::metrics::Metrics;
use super::retry::{cause_of, delay, warn_limited, Failure, Gate};
use crate::framework::JobCondition;
use crate::model::{JobInfo, PodGroupPhase, TaskStatus};
use crate::snapshot::Slots;

pub use crate::index::Target;

/// A change of counts or messages is written at most this often per object, so a burst of
/// cycles costs one write; a phase change is written at once (controllers wait for it:
/// training-operator creates no pods until its PodGroup leaves Pending) — after
/// `BINDS_FIRST`.
pub const PACE: Duration = Duration::from_secs(1);
pub use crate::in_flight::BINDS_FIRST;
/// A gang losing members (its pods being deleted) has its status written only this long
/// after: a PodGroup deleted with its pods usually goes first, and its delete event, on
/// another watch, arrives after some of its pods' — written at once, the status would be
/// answered 404. Written later, the status of a PodGroup that stays is not lost.
pub const TEARDOWN_GRACE: Duration = Duration::from_secs(2);
/// A pending pod's PodScheduled=False is written this long after it is first wanted: a
/// forming gang bound meanwhile (most are, within milliseconds of their last pod) needs
/// none, and the bind sets PodScheduled=True.
pub const POD_CONDITION_GRACE: Duration = Duration::from_secs(1);

/// One target waiting to be written.
#[derive(Clone, Copy, Debug)]
struct Waiting {
    due: Instant,
    /// Its key in the schedule.
    seq: u64,
    /// Nothing writes it before this (a back-off after a failure, a teardown grace).
    not_before: Option<Instant>,
    /// Tries that failed in a row.
    tries: u32,
}

/// Targets waiting to be written: each at most once (a later mark coalesces with it), in
/// the order they are due.
#[derive(Default)]
struct WriteQueue {
    waiting: HashMap<Target, Waiting>,
    schedule: BTreeMap<(Instant, u64), Target>,
    seq: u64,
    /// When each target was last sent, for pacing (pruned of what is older than `PACE`).
    sent: HashMap<Target, Instant>,
    prune_at: usize,
}

impl WriteQueue {
    /// Asks for `t` to be written at `due`, or earlier if it already waits for an earlier
    /// time, but never before its `not_before`, which `floor` raises.
    fn put(&mut self, t: Target, due: Instant, floor: Option<Instant>, tries: Option<u32>) {
        let old = self.waiting.get(&t).copied();
        let not_before = match (old.and_then(|w| w.not_before), floor) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        let mut due = old.map_or(due, |w| w.due.min(due));
        if let Some(floor) = not_before {
            due = due.max(floor);
        }
        let tries = tries.or(old.map(|w| w.tries)).unwrap_or(0);
        if let Some(w) = old {
            self.schedule.remove(&(w.due, w.seq));
        }
        self.seq += 1;
        self.schedule.insert((due, self.seq), t.clone());
        self.waiting.insert(
            t,
            Waiting {
                due,
                seq: self.seq,
                not_before,
                tries,
            },
        );
    }

    /// Asks for `t` to be written at `due` (coalescing with a mark already waiting).
    fn mark_at(&mut self, t: Target, due: Instant) {
        self.put(t, due, None, None);
    }

    /// Asks for `t` to be written, not before `at` whatever later marks ask.
    fn hold_until(&mut self, t: Target, at: Instant) {
        self.put(t, at, Some(at), None);
    }

    /// A write of `t` failed for the `tries`-th time in a row: again at `at`, not before.
    fn back_off(&mut self, t: Target, at: Instant, tries: u32) {
        self.put(t, at, Some(at), Some(tries));
    }

    /// When a change of counts or messages of `t` may be written: now, or `PACE` after its
    /// last write.
    fn paced(&self, t: &Target, now: Instant) -> Instant {
        self.sent.get(t).map_or(now, |at| (*at + PACE).max(now))
    }

    /// `t` was just sent.
    fn sent(&mut self, t: Target, now: Instant) {
        if self.sent.len() >= self.prune_at {
            self.sent.retain(|_, at| *at + PACE > now);
            self.prune_at = (self.sent.len() * 2).max(1024);
        }
        self.sent.insert(t, now);
    }

    fn waits(&self, t: &Target) -> bool {
        self.waiting.contains_key(t)
    }

    /// The next target due, or how long until one is.
    fn next(&mut self, now: Instant) -> Result<(Target, u32), Option<Duration>> {
        let Some((&(due, seq), _)) = self.schedule.iter().next() else {
            return Err(None);
        };
        if due > now {
            return Err(Some(due - now));
        }
        let t = self.schedule.remove(&(due, seq)).ok_or(None)?;
        let tries = self.waiting.remove(&t).map_or(0, |w| w.tries);
        Ok((t, tries))
    }

    fn len(&self) -> usize {
        self.waiting.len()
    }
}

/// The handle cycles and watches use.
#[derive(Clone)]
pub struct StatusWriter {
    queue: Arc<Mutex<WriteQueue>>,
    wake: Arc<Notify>,
    /// The engine's gangs as the writer last looked at them (None: never looked).
    /// Holding them makes the cache copy a gang it changes, so a change shows as a new
    /// pointer. Only the gangs: a whole snapshot held between cycles made every bind copy
    /// its node too (~3% of the scheduler's CPU in a bulk run).
    seen: Arc<Mutex<Option<Slots<JobInfo>>>>,
}

impl Default for StatusWriter {
    fn default() -> Self {
        StatusWriter {
            seen: Arc::default(),
            queue: Arc::new(Mutex::new(WriteQueue::default())),
            wake: Arc::new(Notify::new()),
        }
    }
}

/// How an attempt to write one target ended.
enum Written {
    /// Nothing (left) to write: no request sent.
    Nothing,
    /// Written, or the object is gone.
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

    /// How many objects wait to be written.
    pub fn backlog(&self) -> usize {
        self.queue().len()
    }

    /// Marks what changed since the last call and needs writing: the PodGroups and queues
    /// of gangs the engine changed (a cycle's decisions, pods and gangs from the watches,
    /// binds assumed or dropped — found by pointer, as the cache copies a gang it changes
    /// while this keeps the last look's gangs), and the objects a verdict or a watch event
    /// touched (`Index::status_touched`). A cycle costs patches for what it touched, not
    /// for every PodGroup and Queue.
    ///
    /// Returns the previous look, for the caller to drop once the index is unlocked: it may
    /// be the last holder of every object changed since, and freeing those under the lock
    /// held the binds just sent and the watches back.
    #[must_use = "drop the previous look after unlocking the index"]
    pub fn mark_touched(&self, ix: &mut Index, now_ms: i64) -> Option<Slots<JobInfo>> {
        let previous = self.mark_touched_at(ix, now_ms, Instant::now());
        self.wake.notify_one();
        previous
    }

    fn mark_touched_at(&self, ix: &mut Index, now_ms: i64, now: Instant) -> Option<Slots<JobInfo>> {
        let current = ix.cache.state().job_slots().clone();
        let previous = self
            .seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .replace(current.clone());
        let mut touched = std::mem::take(&mut ix.status_touched);
        let mut losing = HashSet::new();
        match &previous {
            // The first look: everything.
            None => {
                touched
                    .groups
                    .extend(ix.groups.all().flat_map(|s| s.keys()));
                touched.queues.extend(ix.queues.keys().cloned());
                touched.pods.extend(ix.pod_conditions.keys().cloned());
            }
            Some(previous) => changed_gangs(previous, &current, &mut touched, &mut losing),
        }
        let mut q = self.queue();
        for key in &touched.groups {
            let Some(dialect) = ix.group_dialect(key) else {
                continue;
            };
            let t = Target::Group(dialect, key.clone());
            let Some((patch, _)) = patch_for(ix, &t, now_ms) else {
                continue;
            };
            if losing.contains(key.as_str()) {
                q.hold_until(t, now + TEARDOWN_GRACE);
            } else if patch["status"]["phase"].as_str() != stored_phase(ix, &t) {
                q.mark_at(t, now + BINDS_FIRST);
            } else {
                let due = q.paced(&t, now);
                q.mark_at(t, due);
            }
        }
        for name in &touched.queues {
            let t = Target::Queue(name.clone());
            if patch_for(ix, &t, now_ms).is_some() {
                let due = q.paced(&t, now);
                q.mark_at(t, due);
            }
        }
        for uid in &touched.pods {
            let t = Target::Pod(uid.clone());
            // Already on its way: computed again when sent.
            if !q.waits(&t) && patch_for(ix, &t, now_ms).is_some() {
                q.mark_at(t, now + POD_CONDITION_GRACE);
            }
        }
        previous
    }

    /// Writes marked targets until the process ends.
    pub async fn run(
        self,
        client: Client,
        index: IndexView,
        gate: Arc<Gate>,
        metrics: Arc<Metrics>,
        in_flight: Arc<InFlight>,
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
            // The binds in flight are answered first, within reason (see `BINDS_FIRST`).
            let quiet = in_flight.answered(BINDS_FIRST_LIMIT).await;
            // On a quiet API server a gang's status also waits for the watch to show its
            // binds (see `BINDS_SEEN_LIMIT`). In a burst binds are always in flight and the
            // status writes already wait; they wait no more.
            if let (true, Target::Group(_, key)) = (quiet, &target) {
                in_flight
                    .seen(BINDS_SEEN_LIMIT, || index.read(|ix| binds_seen(ix, key)))
                    .await;
            }
            let mut conflicts = 0;
            loop {
                gate.pass().await;
                let written = write(&client, &index, &gate, &metrics, &target).await;
                if !matches!(written, Written::Nothing) {
                    self.queue().sent(target.clone(), Instant::now());
                }
                match written {
                    Written::Nothing | Written::Done => break,
                    Written::Conflict if conflicts < 3 => {
                        conflicts += 1;
                        reread(&client, &index, &gate, &metrics, &target).await;
                    }
                    Written::Conflict | Written::Failed => {
                        let at = Instant::now()
                            + delay(tries, Duration::from_secs(1), Duration::from_secs(300));
                        self.queue().back_off(target.clone(), at, tries + 1);
                        break;
                    }
                }
            }
            metrics.status_backlog.set(self.backlog() as i64);
        }
    }
}

/// Whether no member of gang `key` is still only assumed bound (its bind answered, the
/// watch not yet showing it).
fn binds_seen(ix: &Index, key: &str) -> bool {
    let state = ix.cache.state();
    let Some(id) = state.job_by_uid(key) else {
        return true;
    };
    !state.job(id).tasks().iter().any(|t| {
        matches!(
            ix.cache.assumption(&t.uid),
            Some(crate::cache::Assumption::Bind(_))
        )
    })
}

/// What the stored object of `t` says its phase is.
fn stored_phase<'a>(ix: &'a Index, t: &Target) -> Option<&'a str> {
    match t {
        Target::Group(dialect, key) => ix.groups.of(*dialect)?.stored_phase(key),
        Target::Queue(_) | Target::Pod(_) => None,
    }
}

/// What changed between two looks at the engine's gangs: every gang whose object is not
/// the same (the cache copies a gang it changes while a snapshot holds it) is touched, with
/// its queue when its phase or what it holds changed or it came or went; `losing` gets the
/// gangs that only lost members.
fn changed_gangs(
    previous: &Slots<JobInfo>,
    current: &Slots<JobInfo>,
    touched: &mut Touched,
    losing: &mut HashSet<String>,
) {
    for i in current.maybe_changed(previous) {
        let old = previous.get(i);
        let new = current.get(i);
        match (old, new) {
            (Some(a), Some(b)) if Arc::ptr_eq(a, b) => {}
            // A slot reused: one gang went, another came.
            (Some(a), Some(b)) if a.uid != b.uid => {
                touched.queues.insert(a.queue.to_string());
                touched.groups.insert(b.uid.to_string());
                touched.queues.insert(b.queue.to_string());
            }
            (Some(a), Some(b)) => {
                touched.groups.insert(b.uid.to_string());
                if a.phase != b.phase || a.allocated != b.allocated || a.queue != b.queue {
                    touched.queues.insert(a.queue.to_string());
                    touched.queues.insert(b.queue.to_string());
                }
                if losing_members(a, b) {
                    losing.insert(b.uid.to_string());
                }
            }
            (Some(a), None) => {
                touched.queues.insert(a.queue.to_string());
            }
            (None, Some(b)) => {
                touched.groups.insert(b.uid.to_string());
                touched.queues.insert(b.queue.to_string());
            }
            (None, None) => {}
        }
    }
}

/// Whether a gang only lost members between two looks: some of its pods went or began
/// terminating, and none came or changed otherwise.
fn losing_members(old: &JobInfo, new: &JobInfo) -> bool {
    let before: HashMap<&str, TaskStatus> =
        old.tasks().iter().map(|t| (&*t.uid, t.status)).collect();
    let mut lost = new.tasks().len() < before.len();
    for t in new.tasks() {
        match before.get(&*t.uid) {
            Some(s) if *s == t.status => {}
            Some(_) if t.status == TaskStatus::Releasing => lost = true,
            _ => return false,
        }
    }
    lost
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
            if ix.group_deleting(*dialect, key) {
                return None; // on its way out: nobody reads its status, the write would race
            }
            // A gang this process never judged (bound by an earlier instance that died
            // before writing so) but that runs says Scheduled, not whatever the object last
            // said.
            let condition = match ix.verdicts.get(key).and_then(|(c, _)| c.clone()) {
                Some(c) => Some(c),
                None if matches!(job.phase, PodGroupPhase::Running | PodGroupPhase::Completed) => {
                    Some(JobCondition::scheduled(job))
                }
                None => None,
            };
            let store = ix.groups.of(*dialect)?;
            let (mut patch, rv) = store.status_patch(key, job, condition.as_ref(), now_ms)?;
            if *dialect == Dialect::VOLCANO {
                predicted_start_annotation(ix, key, store.meta(key)?, &mut patch);
            }
            Some((patch, rv))
        }
        Target::Pod(uid) => pod_condition_patch(ix, uid),
        Target::Queue(name) => {
            let q = ix.queues.get(name)?;
            let none = crate::snapshot::QueueSums::default();
            let gangs = snapshot.tally().queue(name).unwrap_or(&none);
            Some((queue_status_patch(q, gangs)?, q.resource_version()))
        }
    }
}

/// With --predict-start, a Volcano PodGroup's status patch (it goes to the object) also sets
/// the annotation `rust-batch.io/predicted-start` to the gang's predicted start, or removes
/// it once there is none (the gang started).
fn predicted_start_annotation(
    ix: &Index,
    key: &str,
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    patch: &mut Value,
) {
    let want = ix
        .predictions
        .get(key)
        .map(|p| p.annotation_value(ix.predicted_at));
    let have = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(PREDICTED_START));
    if want.as_ref() != have {
        patch["metadata"]["annotations"] = serde_json::json!({ PREDICTED_START: want });
    }
}

/// The annotation a Volcano PodGroup's predicted start is written to.
pub const PREDICTED_START: &str = "rust-batch.io/predicted-start";

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
    index: &IndexView,
    gate: &Gate,
    metrics: &Metrics,
    t: &Target,
) -> Written {
    let Some((mut patch, rv)) = index.read(|ix| patch_for(ix, t, crate::clock::now_ms())) else {
        return Written::Nothing;
    };
    // Written only over the version it was computed from.
    if let Some(rv) = rv {
        patch["metadata"]["resourceVersion"] = rv.into();
    }
    let pp = PatchParams::default();
    let started = Instant::now();
    tracing::trace!(target = ?t, %patch, "writing status");
    if let Target::Pod(uid) = t {
        let Some(seen) = index.read(|ix| ix.pending_pods.get(uid).cloned()) else {
            return Written::Nothing;
        };
        let r = Api::<Pod>::namespaced(client.clone(), &seen.namespace)
            .patch_status(&seen.name, &pp, &Patch::Strategic(&patch))
            .await
            .map(|p| index.answer(|ix| ix.pod(&p)));
        return outcome_of(index, gate, metrics, t, "pod condition", started, r);
    }
    let value = patch;
    let patch = Patch::Merge(&value);
    let (what, outcome) = match t {
        // Each kind writes its own way (a status subresource or not) and keeps the answer.
        Target::Group(dialect, key) => {
            let Some(kind) = registered(*dialect) else {
                return Written::Nothing;
            };
            let r = (kind.call)(client, index, key, Some(&value)).await;
            ("podgroup status", r)
        }
        Target::Queue(name) => {
            let r = Api::<Queue>::all(client.clone())
                .patch_status(name, &pp, &patch)
                .await;
            let r = r.map(|q| index.answer(|ix| ix.queue(&q)));
            ("queue status", r)
        }
        Target::Pod(_) => return Written::Nothing,
    };
    outcome_of(index, gate, metrics, t, what, started, outcome)
}

/// What a write's answer means for the writer.
fn outcome_of(
    index: &IndexView,
    gate: &Gate,
    metrics: &Metrics,
    t: &Target,
    what: &str,
    started: Instant,
    outcome: Result<(), ::kube::Error>,
) -> Written {
    gate.record(&outcome);
    metrics.api_write_timed(what, started.elapsed(), outcome.as_ref().err());
    match outcome {
        Ok(()) => Written::Done,
        Err(e) => match Failure::of(&e) {
            // Deleted: forgotten now (its watch event is on its way), so nothing writes it
            // again meanwhile.
            Failure::NotFound => {
                index.answer(|ix| ix.gone(t));
                Written::Done
            }
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

/// Reads `t`'s object again after a conflict.
async fn reread(client: &Client, index: &IndexView, gate: &Gate, metrics: &Metrics, t: &Target) {
    gate.pass().await;
    let started = Instant::now();
    let (what, outcome) = match t {
        Target::Group(dialect, key) => {
            let Some(kind) = registered(*dialect) else {
                return;
            };
            ("podgroup", (kind.call)(client, index, key, None).await)
        }
        Target::Queue(name) => (
            "queue",
            Api::<Queue>::all(client.clone())
                .get(name)
                .await
                .map(|q| index.answer(|ix| ix.queue(&q))),
        ),
        Target::Pod(uid) => {
            let Some(seen) = index.read(|ix| ix.pending_pods.get(uid).cloned()) else {
                return;
            };
            (
                "pod",
                Api::<Pod>::namespaced(client.clone(), &seen.namespace)
                    .get(&seen.name)
                    .await
                    .map(|p| index.answer(|ix| ix.pod(&p))),
            )
        }
    };
    metrics.api_read_timed(what, started.elapsed(), outcome.as_ref().err());
    gate.record(&outcome);
}

#[cfg(test)]
mod tests;
