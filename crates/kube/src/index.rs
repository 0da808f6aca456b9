//! The index: what the watches know, behind one short-held lock. One watch task per kind
//! (see `watch`) applies, deletes and, on a relist, forgets objects here; the index turns
//! them into the engine cache (nodes, pods, gangs, queues, budgets, HyperNodes), keeps the API objects
//! the status writer patches, and says per kind whether its list is complete — no cycle
//! runs before every kind is (`readiness`).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use ::kube::{Resource, ResourceExt};
use k8s_openapi::api::core::v1::{
    Namespace, Node, ObjectReference, PersistentVolume, PersistentVolumeClaim, Pod,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::storage::v1::StorageClass;

use super::budgets;
use super::convert::{
    node_to_spec, pod_to_update_with_warnings, unsupported_fields, INVALID_NETWORK_TOPOLOGY,
};
use super::dialects::coscheduling::key_of_group;
use super::dialects::kind::{Dialect, GangKind, Groups, KindContext};
use super::dialects::volcano::{
    hypernode_to_spec, queue_problems, queue_to_info, HyperNode, Queue,
};
use super::dialects::workload::{
    workload_link, Workload, WorkloadLink, Workloads, WORKLOAD_REFERENCE,
};
use super::dialects::{pod_gang, pod_group_name, GangDecl, QUEUE_NAME_ANNOTATION};
use super::events::{pod_ref, EventType, Events};
use super::readiness::Readiness;
use super::recovery::Recovery;
use super::volumes::{VolumeDep, VolumeObjects, VolumePods};
use crate::cache::Cache;
use crate::framework::JobCondition;
use crate::model::pod_rules::Labels;
use crate::model::{GangOrigin, HeldBack, JobInfo, JobSpec, TaskStatus, Topology};
use crate::snapshot::{Slots, Snapshot};

/// How long a pending pod's group must be missing before the pod is told (see
/// `Index::report_missing_groups`).
pub const MISSING_GROUP_GRACE_MS: i64 = 2_000;
/// The event a pod gets when it declares two gangs (see `dialects::pod_gang`).
pub const CONFLICTING_DECLARATIONS: &str = "ConflictingGangDeclarations";

/// How soon a cycle should see a change a watch applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wake {
    /// Nothing a cycle reads changed, or nothing can come of it before more changes do:
    /// the periodic cycle sees it.
    No,
    /// The engine's view changed, but nothing waits on it to be placed: cycles gather such
    /// changes (at most one per BURST_CYCLE_SPACING while they keep coming).
    Soon,
    /// Something may be placed now (a gang's last member, a node): a cycle at once, or as
    /// soon as the spacing of a burst allows (`pacing`).
    Now,
}

/// Reason of the events on HyperNodes that cannot be used as they are.
pub const INVALID_HYPERNODE: &str = "InvalidHyperNode";

/// A gang's last verdict: its condition and why each pending pod waits (task uid, reason).
pub type Verdict = (Option<JobCondition>, Vec<(Arc<str>, String)>);

/// Why a pod of ours is kept out of the engine.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Hold {
    /// Its scheduling gates: the API server refuses its bind until they are removed.
    Gated(Vec<String>),
    /// What it asks for that the engine does not model (a placement would ignore it).
    Refused(String),
}

/// A pod of ours kept out of the engine: its gang (key), `namespace/name` and why.
#[derive(Clone, Debug)]
struct HeldPod {
    gang: String,
    pod: String,
    hold: Hold,
}

impl Hold {
    /// Why the pod waits, for the debug API.
    fn describe(&self) -> String {
        match self {
            Hold::Gated(gates) => format!(
                "gated by {}: not a candidate until the gates are removed",
                gates.join(", ")
            ),
            Hold::Refused(why) => why.clone(),
        }
    }
}

/// The PodScheduled=False reason of a refused pod: not `Unschedulable`, which autoscalers
/// would buy nodes for.
pub const UNSUPPORTED: &str = "Unsupported";

/// A pending pod of ours as last seen: where it is, its version, and its PodScheduled
/// condition (status, reason, message).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PendingPod {
    pub namespace: String,
    pub name: String,
    pub resource_version: Option<String>,
    pub scheduled: Option<(String, String, String)>,
}

/// Objects whose status may need writing since the status writer last looked, besides the
/// gangs the engine changed (see `status::StatusWriter::mark_touched`): group keys, queue
/// names, pod uids.
#[derive(Default)]
pub struct Touched {
    pub groups: HashSet<String>,
    pub queues: HashSet<String>,
    pub pods: HashSet<String>,
}

/// Everything the watches know.
#[derive(Default)]
pub struct Index {
    pub cache: Cache,
    names: Vec<String>,
    priority_classes: HashMap<String, i32>,
    /// Per PriorityClass, the minimum runtime and preemption delay (ms) its annotations
    /// `rust-batch.io/min-runtime` and `rust-batch.io/preemption-delay` give its gangs.
    class_protection: HashMap<String, (Option<i64>, Option<i64>)>,
    /// Real PodGroups by `namespace/name`, the newest seen (from the watch or from the
    /// status writer's own write), per kind (see `dialects::KINDS` for which defines a gang
    /// named by several).
    pub(super) groups: Groups,
    /// The last cycle's verdict per gang: its condition and why each pending pod waits.
    pub(super) verdicts: HashMap<String, Verdict>,
    /// The last cycle's predicted start per waiting gang (with --predict-start).
    pub(super) predictions: HashMap<String, crate::framework::PredictedStart>,
    /// When `predictions` were made (the cycle's time): a start due by then reads "now".
    pub(super) predicted_at: i64,
    /// Gangs made up for pods of ours that name no group (Volcano's shadow PodGroups).
    implicit: HashMap<String, HashSet<String>>,
    /// Queues by name, the newest seen.
    pub(super) queues: HashMap<String, Queue>,
    /// Pods of other schedulers that name a group, by group key: a PodGroup whose pods all
    /// belong to another scheduler is not ours to write.
    foreign_members: HashMap<String, HashSet<String>>,
    /// Group keys deleted while pods of theirs remained (their pods were told so).
    deleted_groups: HashSet<String>,
    /// Pending pods of ours whose group is not known, and since when (ms): told only after
    /// MISSING_GROUP_GRACE_MS.
    orphaned_since: HashMap<Arc<str>, i64>,
    /// PodDisruptionBudgets by `namespace/name`, as last seen.
    budgets: HashMap<String, PodDisruptionBudget>,
    /// uid -> (namespace, labels) of our pods: what budgets select them by.
    /// The labels are the engine's task's own (one map per pod event, shared).
    labels: HashMap<String, (String, Arc<Labels>)>,
    /// Pods of ours kept out of the engine (uid -> their gang and why): gated pods until
    /// their gates are lifted, pods asking for what the engine does not model.
    held: HashMap<String, HeldPod>,
    /// The uids of `held` by gang key: what each gang's `HeldBack` counts.
    held_by_gang: HashMap<String, BTreeSet<String>>,
    /// Volcano HyperNodes by name, the newest seen.
    hypernodes: HashMap<String, HyperNode>,
    /// HyperNodes the engine's topology had problems with (name -> what they were told),
    /// and the topology that was checked last: problems are reported when it changes.
    hypernode_problems: BTreeMap<String, String>,
    topology_checked: Option<Arc<Topology>>,
    /// Pending pods of ours as last seen (for the PodScheduled condition), by uid.
    pub(super) pending_pods: HashMap<String, PendingPod>,
    /// The PodScheduled=False (reason, message) each pending pod of ours should carry,
    /// from the last verdict on its gang, by uid.
    pub(super) pod_conditions: HashMap<String, (String, String)>,
    /// Objects a watch event or a verdict touched since the status writer last looked.
    pub(super) status_touched: Touched,
    /// The engine's gangs as the status writer last looked at them (None: never looked).
    /// Holding them makes the cache copy a gang it changes, so a change shows as a new
    /// pointer. Only the gangs: a whole snapshot held between cycles made every bind copy
    /// its node too (~3% of the scheduler's CPU in a bulk run).
    pub(super) status_seen: Option<Slots<JobInfo>>,
    pub readiness: Readiness,
    /// New pods' creation → watch event (None in tests).
    pub watch_lag: Option<prometheus::Histogram>,
    /// The same in milliseconds, Volcano's `task_scheduling_latency_milliseconds{stage="Watched"}`
    /// (None in tests).
    pub watched: Option<prometheus::Histogram>,
    pub events: Events,
    /// Gangs a refused bind left short of their minimum.
    pub recovery: Recovery,
    /// PersistentVolumeClaims, PersistentVolumes and StorageClasses as last seen.
    pub volume_objects: VolumeObjects,
    /// Pending pods of ours that use claims (by uid), with the objects their volume rules
    /// were resolved from: resolved again when one of those changes.
    volume_pods: VolumePods,
    /// Gangs whose binds wait for their WaitForFirstConsumer claims to be provisioned.
    pub provisioning: super::provision::Provisioning,
    /// DRA's objects (device classes, slices, claims, templates) and the allocations
    /// being written (see `dra_watch`, `dra_commit`).
    pub(crate) dra: super::dra_watch::DraObjects,
    /// Kubernetes' Workloads (what native PodGroups' `workloadRef` names).
    pub workloads: Workloads,
}

/// What a pending pod is told when its PodGroup is deleted (or it names one deleted).
fn deleted_group_message(key: &str) -> String {
    format!("PodGroup {key} was deleted; the pod stays Pending until its group exists again")
}

/// Locks the index. A poisoned lock means a watch handler panicked mid-update; the index is
/// still a valid cache (every update is a sequence of complete steps), so carry on.
pub fn lock(index: &Mutex<Index>) -> MutexGuard<'_, Index> {
    index.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether resourceVersion `a` is older than `b`. Kubernetes asks clients not to order
/// them, but the API server's are etcd revisions; where either does not parse as one, `a`
/// is not taken to be older.
pub fn older(a: Option<&str>, b: Option<&str>) -> bool {
    match (
        a.and_then(|a| a.parse::<u64>().ok()),
        b.and_then(|b| b.parse::<u64>().ok()),
    ) {
        (Some(a), Some(b)) => a < b,
        _ => false,
    }
}

/// Stores `obj` at `key` unless what is stored there is newer (the status writer's own
/// write came back before the watch delivered an older version) or this very version (the
/// watch's echo of that write). Returns whether it stored.
pub(crate) fn store_newest<K: Resource + Clone>(
    map: &mut HashMap<String, K>,
    key: String,
    obj: &K,
) -> bool {
    let (version, uid) = (
        obj.meta().resource_version.as_deref(),
        obj.meta().uid.as_deref(),
    );
    let stale = map.get(&key).is_some_and(|have| {
        let have_version = have.meta().resource_version.as_deref();
        older(version, have_version)
            || (version.is_some() && version == have_version && uid == have.meta().uid.as_deref())
    });
    if !stale {
        map.insert(key, obj.clone());
    }
    !stale
}

/// Why a pod of ours is kept out of the engine, if it is: what it asks for that the engine
/// does not model, else its scheduling gates. A bound pod is none of the scheduler's
/// business any more.
fn hold_of(pod: &Pod) -> Option<Hold> {
    let spec = pod.spec.as_ref()?;
    if spec.node_name.as_deref().is_some_and(|n| !n.is_empty()) {
        return None;
    }
    if let Some(why) = unsupported_fields(spec) {
        return Some(Hold::Refused(why));
    }
    let gates: Vec<String> = spec
        .scheduling_gates
        .iter()
        .flatten()
        .map(|g| g.name.clone())
        .collect();
    (!gates.is_empty()).then_some(Hold::Gated(gates))
}

impl Index {
    pub fn new(names: Vec<String>) -> Self {
        Index {
            names,
            ..Default::default()
        }
    }

    /// The scheduler's first name (what its writes say they come from).
    pub fn scheduler_name(&self) -> &str {
        self.names.first().map_or("rust-batch", |n| n.as_str())
    }

    fn ours(&self, pod: &Pod) -> bool {
        let name = pod
            .spec
            .as_ref()
            .and_then(|s| s.scheduler_name.as_deref())
            .unwrap_or("default-scheduler");
        self.names.iter().any(|n| n == name)
    }

    fn report(&mut self, r: ObjectReference, kind: EventType, reason: &str, message: String) {
        self.events.report(r, kind, reason, message);
    }

    // ----- pods ----------------------------------------------------------------------

    /// Notes a pod's PodScheduled condition while it is a pending pod of ours (from the
    /// watch, or the answer to the status writer's own write); forgets it once bound.
    pub fn note_pod_status(&mut self, pod: &Pod) {
        let uid = pod.uid().unwrap_or_default();
        let bound = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_ref())
            .is_some();
        if bound || pod.metadata.deletion_timestamp.is_some() || !self.ours(pod) {
            self.pending_pods.remove(&uid);
            self.pod_conditions.remove(&uid);
            return;
        }
        let rv = pod.resource_version();
        if let Some(seen) = self.pending_pods.get(&uid) {
            if older(rv.as_deref(), seen.resource_version.as_deref()) {
                return;
            }
        }
        let scheduled = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled"))
            .map(|c| {
                (
                    c.status.clone(),
                    c.reason.clone().unwrap_or_default(),
                    c.message.clone().unwrap_or_default(),
                )
            });
        self.status_touched.pods.insert(uid.clone());
        self.pending_pods.insert(
            uid,
            PendingPod {
                namespace: pod.namespace().unwrap_or_default(),
                name: pod.name_any(),
                resource_version: rv,
                scheduled,
            },
        );
    }

    /// The API server's answer to the status writer: noted only while the pod is a pending
    /// pod the index knows (a delete event may have come first).
    pub fn note_pod_answer(&mut self, pod: &Pod) {
        if self
            .pending_pods
            .contains_key(&pod.uid().unwrap_or_default())
        {
            self.note_pod_status(pod);
        }
    }

    /// A pod seen for the first time, unbound, once the pods are listed: a new pod; how
    /// long it took the watch to bring it.
    fn observe_watch_lag(&self, pod: &Pod, uid: &str) {
        let Some(h) = &self.watch_lag else {
            return;
        };
        let unbound = pod.spec.as_ref().is_some_and(|s| s.node_name.is_none());
        if !unbound || self.cache.pod(uid).is_some() || !self.readiness.complete() {
            return;
        }
        if let Some(created) = &pod.metadata.creation_timestamp {
            let created: std::time::SystemTime = created.0.into();
            if let Ok(lag) = std::time::SystemTime::now().duration_since(created) {
                h.observe(lag.as_secs_f64());
                if let Some(ms) = &self.watched {
                    ms.observe(lag.as_secs_f64() * 1000.0);
                }
            }
        }
    }

    /// Applies a pod's report; returns how soon a cycle should see it: at once for a pod of
    /// ours that may be placed now; soon (cycles spaced, see the driver) for other changes
    /// the engine reads (a bound pod running or finishing, other schedulers' pods); not at
    /// all (the periodic cycle sees it) when it changed nothing the engine reads (our own
    /// condition writes, status conditions) or is a pending member of a gang still short of
    /// its minimum.
    pub fn apply_pod(&mut self, pod: &Pod) -> Wake {
        let uid = pod.uid().unwrap_or_default();
        let ns = pod.namespace().unwrap_or_default();
        let name = pod.name_any();
        self.note_pod_status(pod);
        self.observe_watch_lag(pod, &uid);
        let ours = self.ours(pod);
        let job = if ours {
            match pod_gang(pod) {
                Ok(decl) => {
                    if let Some(d) = &decl {
                        self.report_overridden(&uid, &ns, &name, d);
                    }
                    let key = self.gang_for(pod, decl);
                    if let Some(hold) = hold_of(pod) {
                        self.hold(&uid, &ns, &name, key, hold);
                        return Wake::Now;
                    }
                    self.release(&uid);
                    Some(key)
                }
                Err(e) => {
                    self.forget_pod_of_gang(&uid);
                    self.report(
                        pod_ref(&ns, &name, &uid),
                        EventType::Warning,
                        "FailedScheduling",
                        format!("cannot schedule: {e}"),
                    );
                    return Wake::Now;
                }
            }
        } else {
            if let Some(group) = pod_group_name(pod) {
                self.foreign_members
                    .entry(format!("{ns}/{group}"))
                    .or_default()
                    .insert(uid.clone());
            }
            None
        };
        match pod_to_update_with_warnings(pod, job) {
            Ok((mut update, warnings)) => {
                if ours {
                    self.resolve_volumes(pod, &uid, &mut update);
                    self.resolve_claims(pod, &uid, &mut update);
                    for w in warnings {
                        self.report(
                            pod_ref(&ns, &name, &uid),
                            EventType::Warning,
                            w.reason,
                            w.message,
                        );
                    }
                    let labels = Arc::clone(&update.task.labels);
                    update.task.budgets = self.budgets_covering(&ns, &labels);
                    self.labels.insert(uid.clone(), (ns.clone(), labels));
                }
                if self.cache.apply_pod(update) {
                    self.wake_for_pod(&uid, ours)
                } else {
                    Wake::No
                }
            }
            Err(e) => {
                self.forget_pod_of_gang(&uid);
                if ours {
                    self.report(
                        pod_ref(&ns, &name, &uid),
                        EventType::Warning,
                        "FailedScheduling",
                        format!("cannot schedule: {e}"),
                    );
                }
                Wake::Now
            }
        }
    }

    /// How soon a cycle needs a pod the engine's view just changed for. A pending pod of
    /// ours whose gang still has fewer members than its minimum: not at all — the gang's
    /// last member wakes the cycle (an idle cluster binds it at once), not each one before
    /// it, and the periodic cycle still reports on short gangs. Another pending pod of
    /// ours may be placed now; anything else (a pod running or finishing, another
    /// scheduler's pod) is news nothing waits on.
    fn wake_for_pod(&self, uid: &str, ours: bool) -> Wake {
        let Some(update) = self.cache.pod(uid) else {
            return Wake::Soon;
        };
        let pending = update.task.status == TaskStatus::Pending && update.task.node.is_none();
        if !pending {
            return Wake::Soon;
        }
        match update.job.as_deref() {
            Some(job) if self.cache.gang_short_of_members(job) => Wake::No,
            _ if ours => Wake::Now,
            _ => Wake::Soon,
        }
    }

    /// Keeps a pod of ours out of the engine, counted in its gang's `HeldBack`, and tells
    /// it why once per change. A gated pod is no candidate: the API server would refuse its
    /// bind and leave its gang short (the API server itself gives it PodScheduled=False,
    /// reason SchedulingGated). A refused pod would be placed ignoring what it asks for.
    fn hold(&mut self, uid: &str, ns: &str, name: &str, gang: String, hold: Hold) {
        if self.cache.pod(uid).is_some() {
            self.cache.delete_pod(uid);
            self.labels.remove(uid);
        }
        let r = pod_ref(ns, name, uid);
        match &hold {
            Hold::Gated(gates) => self.report(
                r,
                EventType::Normal,
                "SchedulingGated",
                format!(
                    "the pod is gated by {}; it is not scheduled (nor counted for its gang) until the gates are removed",
                    gates.join(", ")
                ),
            ),
            Hold::Refused(why) => {
                self.report(
                    r,
                    EventType::Warning,
                    "FailedScheduling",
                    format!("{why}; the pod is not scheduled (nor counted for its gang)"),
                );
                self.want_pod_condition(uid, UNSUPPORTED, why);
            }
        }
        let before = self.held.insert(
            uid.to_string(),
            HeldPod {
                gang: gang.clone(),
                pod: format!("{ns}/{name}"),
                hold,
            },
        );
        if let Some(before) = before.filter(|b| b.gang != gang) {
            if let Some(uids) = self.held_by_gang.get_mut(&before.gang) {
                uids.remove(uid);
            }
            self.count_held(&before.gang);
        }
        self.held_by_gang
            .entry(gang.clone())
            .or_default()
            .insert(uid.to_string());
        self.count_held(&gang);
    }

    /// A held pod is held no more (a candidate now, or gone). Returns its gang.
    fn release(&mut self, uid: &str) -> Option<String> {
        let HeldPod { gang, hold, .. } = self.held.remove(uid)?;
        if matches!(hold, Hold::Refused(_)) {
            // Its gang's next verdict says what it waits for now.
            self.pod_conditions.remove(uid);
        }
        if let Some(uids) = self.held_by_gang.get_mut(&gang) {
            uids.remove(uid);
        }
        self.count_held(&gang);
        Some(gang)
    }

    /// Tells the engine how many of a gang's members are held back, and why.
    fn count_held(&mut self, gang: &str) {
        let mut held = HeldBack::default();
        for uid in self.held_by_gang.get(gang).into_iter().flatten() {
            match &self.held[uid].hold {
                Hold::Gated(gates) => {
                    held.gated_pods += 1;
                    for gate in gates {
                        *held.gated.entry(gate.clone()).or_default() += 1;
                    }
                }
                Hold::Refused(why) => *held.refused.entry(why.clone()).or_default() += 1,
            }
        }
        if held.is_empty() {
            self.held_by_gang.remove(gang);
        }
        self.cache.set_held_back(gang, held);
    }

    /// A pod declaring two gangs is told which one it joins and which it does not.
    fn report_overridden(&mut self, uid: &str, ns: &str, name: &str, decl: &GangDecl) {
        if let Some(note) = &decl.overrides {
            let r = pod_ref(ns, name, uid);
            self.report(
                r,
                EventType::Warning,
                CONFLICTING_DECLARATIONS,
                note.clone(),
            );
        }
    }

    /// The gang key of a pod of ours. Gangs declared on the pods alone (kube-batch's
    /// group-min-member, ACK labels) and pods with no gang (a gang of one, as Volcano's shadow
    /// PodGroups) are made up here; a PodGroup object of the same name takes precedence.
    fn gang_for(&mut self, pod: &Pod, decl: Option<GangDecl>) -> String {
        let uid = pod.uid().unwrap_or_default();
        let ns = pod.namespace().unwrap_or_default();
        let (name, min, policy, origin) = match decl {
            Some(d) => match d.implicit_min {
                Some(min) => (d.name, min, d.policy, GangOrigin::Declared),
                None => return format!("{ns}/{}", d.name),
            },
            None => (
                format!("podgroup-{uid}"),
                1,
                Default::default(),
                GangOrigin::SinglePod,
            ),
        };
        let key = format!("{ns}/{name}");
        if !self.has_group_object(&key) {
            let queue = pod
                .annotations()
                .get(QUEUE_NAME_ANNOTATION)
                .cloned()
                .unwrap_or_else(|| "default".into());
            let created = pod
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.as_millisecond())
                .unwrap_or(0);
            // The gang keeps its phase and its earliest creation time as members come and go.
            let existing = self
                .cache
                .state()
                .job_by_uid(&key)
                .map(|id| self.cache.state().job(id));
            let spec = JobSpec {
                uid: key.clone(),
                namespace: ns.clone(),
                name,
                queue,
                min_member: min,
                priority: pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0),
                created: existing.map_or(created, |j| j.created.min(created)),
                phase: existing.map(|j| j.phase).unwrap_or_default(),
                policy,
                origin,
                ..Default::default()
            };
            self.cache.apply_job(spec);
        }
        self.implicit.entry(key.clone()).or_default().insert(uid);
        key
    }

    pub fn delete_pod(&mut self, uid: &str) {
        self.pending_pods.remove(uid);
        self.pod_conditions.remove(uid);
        for members in self.foreign_members.values_mut() {
            members.remove(uid);
        }
        self.foreign_members.retain(|_, m| !m.is_empty());
        self.volume_pods.remove(uid);
        self.forget_claims_pod(uid);
        self.events.forget(uid);
        self.forget_pod_of_gang(uid);
    }

    /// Takes a pod out of the engine, and its made-up gang with its last member.
    fn forget_pod_of_gang(&mut self, uid: &str) {
        let job = self.cache.pod(uid).and_then(|p| p.job.clone());
        let held = self.release(uid);
        let job = job.or(held);
        self.cache.delete_pod(uid);
        self.labels.remove(uid);
        let Some(job) = job else {
            return;
        };
        if let Some(members) = self.implicit.get_mut(&job) {
            members.remove(uid);
            if members.is_empty() {
                self.implicit.remove(&job);
                if !self.has_group_object(&job) {
                    self.cache.delete_job(&job);
                    self.verdicts.remove(&job);
                    self.recovery.forget(&job);
                    self.provisioning.forget(&job);
                    self.forget_device_gang(&job);
                }
            }
        }
    }

    /// Every pod the index knows (by uid), for a relist to find the ones that went.
    pub fn pod_keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self.cache.pod_uids().map(|u| u.to_string()).collect();
        keys.extend(self.held.keys().cloned());
        keys
    }

    /// Pods of ours waiting for a PodGroup that does not exist, told so once the PodGroups
    /// of every installed dialect are listed (a restarted scheduler must not tell pods
    /// that their group is missing before it has read the groups) and the pod has waited
    /// MISSING_GROUP_GRACE_MS: each kind is listed at its own resourceVersion, so a group
    /// created just before its pods can be missing from the groups' list while its pods are
    /// in theirs — its watch event follows within milliseconds.
    pub fn report_missing_groups(&mut self, now_ms: i64) {
        // A deleted group's pods were told once; forget it when they are gone too.
        let orphans = self.cache.orphans();
        self.deleted_groups
            .retain(|key| orphans.get(key.as_str()).is_some_and(|o| !o.is_empty()));
        let mut missing = Vec::new();
        let mut waiting = HashMap::new();
        for (key, uids) in self.cache.orphans() {
            for uid in uids {
                if let Some(p) = self.cache.pod(uid) {
                    if p.task.status == TaskStatus::Pending {
                        let since = self.orphaned_since.get(uid).copied().unwrap_or(now_ms);
                        waiting.insert(uid.clone(), since);
                        if now_ms - since >= MISSING_GROUP_GRACE_MS {
                            missing.push((key.to_string(), p.task.clone()));
                        }
                    }
                }
            }
        }
        self.orphaned_since = waiting;
        for (key, task) in missing {
            let group = key.split_once('/').map_or(key.as_str(), |x| x.1);
            // An object that exists but cannot be used got an event saying why.
            let message = match self.group_dialect(&key) {
                // The pods waiting when it went were told so then (the same words, so
                // told once); a pod naming it since is told now.
                None if self.deleted_groups.contains(&key) => deleted_group_message(&key),
                Some(d) => format!(
                    "PodGroup {group} ({}) cannot be used (see its events); the pod waits \
                     until it is fixed",
                    d.api_group()
                ),
                None => format!(
                    "PodGroup {group} does not exist in namespace {}; the pod waits for it",
                    task.namespace
                ),
            };
            self.report(
                pod_ref(&task.namespace, &task.name, &task.uid),
                EventType::Warning,
                "FailedScheduling",
                message,
            );
        }
    }

    // ----- volumes ---------------------------------------------------------------------

    /// Lays the pod's volume rules over its placement while it waits to be placed (a bound
    /// pod's volumes are where it runs), and remembers what they were resolved from.
    fn resolve_volumes(&mut self, pod: &Pod, uid: &str, update: &mut crate::cache::PodUpdate) {
        if update.task.node.is_some() {
            self.volume_pods.remove(uid);
            return;
        }
        let (rules, deps) = self.volume_objects.resolve(pod);
        let Some(mut rules) = rules else {
            self.volume_pods.remove(uid);
            return;
        };
        if let Some(why) = self.provisioning.backing_off(uid) {
            rules.blocked.get_or_insert_with(|| why.to_string());
        }
        let mut placement = (*update.task.placement).clone();
        placement.volumes = Some(Box::new(rules));
        update.task.set_placement(placement);
        self.volume_pods.insert(uid, pod.clone(), deps);
    }

    /// A claim, volume or class changed: the pods whose volume rules depend on it are
    /// resolved again.
    fn refresh_volume_pods(&mut self, dep: &VolumeDep) {
        for pod in self.volume_pods.depending_on(dep) {
            self.apply_pod(&pod);
        }
    }

    /// Resolves a pending pod's volume rules again (its back-off began or ended).
    pub fn refresh_volume_pod(&mut self, uid: &str) {
        if let Some(pod) = self.volume_pods.get(uid).cloned() {
            self.apply_pod(&pod);
        }
    }

    pub fn apply_claim(&mut self, pvc: &PersistentVolumeClaim) {
        let key = format!("{}/{}", pvc.namespace().unwrap_or_default(), pvc.name_any());
        if store_newest(&mut self.volume_objects.claims, key.clone(), pvc) {
            self.refresh_volume_pods(&VolumeDep::Claim(key));
        }
    }

    pub fn delete_claim(&mut self, key: &str) {
        self.volume_objects.claims.remove(key);
        self.refresh_volume_pods(&VolumeDep::Claim(key.to_string()));
    }

    pub fn claim_keys(&self) -> Vec<String> {
        self.volume_objects.claims.keys().cloned().collect()
    }

    pub fn apply_volume(&mut self, pv: &PersistentVolume) {
        let name = pv.name_any();
        if store_newest(&mut self.volume_objects.volumes, name.clone(), pv) {
            self.refresh_volume_pods(&VolumeDep::Volume(name));
        }
    }

    pub fn delete_volume(&mut self, name: &str) {
        self.volume_objects.volumes.remove(name);
        self.refresh_volume_pods(&VolumeDep::Volume(name.to_string()));
    }

    pub fn volume_keys(&self) -> Vec<String> {
        self.volume_objects.volumes.keys().cloned().collect()
    }

    pub fn apply_class(&mut self, sc: &StorageClass) {
        let name = sc.name_any();
        if store_newest(&mut self.volume_objects.classes, name.clone(), sc) {
            self.refresh_volume_pods(&VolumeDep::Class(name));
        }
    }

    pub fn delete_class(&mut self, name: &str) {
        self.volume_objects.classes.remove(name);
        self.refresh_volume_pods(&VolumeDep::Class(name.to_string()));
    }

    pub fn class_keys(&self) -> Vec<String> {
        self.volume_objects.classes.keys().cloned().collect()
    }

    // ----- nodes ---------------------------------------------------------------------

    /// Applies a node's report; a cycle sees it at once if the engine's view changed (a
    /// heartbeat of its status conditions does not change it).
    pub fn apply_node(&mut self, node: &Node) -> Wake {
        match node_to_spec(node) {
            Ok(spec) => {
                let name = spec.name.clone();
                if self.cache.apply_node(spec) {
                    self.node_reach_changed(&name);
                    Wake::Now
                } else {
                    Wake::No
                }
            }
            Err(e) => {
                super::retry::warn_limited("node ignored", &e.to_string());
                Wake::No
            }
        }
    }

    pub fn delete_node(&mut self, name: &str) {
        self.cache.delete_node(name);
        self.node_reach_changed(name);
    }

    pub fn node_keys(&self) -> Vec<String> {
        self.cache
            .state()
            .nodes()
            .map(|(_, n)| n.name.to_string())
            .collect()
    }

    // ----- disruption budgets --------------------------------------------------------

    /// The budgets (`namespace/name`, sorted) that cover a pod of `ns` with `labels`.
    fn budgets_covering(&self, ns: &str, labels: &BTreeMap<String, String>) -> Vec<Arc<str>> {
        let mut covering: Vec<Arc<str>> = self
            .budgets
            .iter()
            .filter(|(_, b)| b.namespace().as_deref() == Some(ns) && budgets::covers(b, labels))
            .map(|(key, _)| Arc::from(key.as_str()))
            .collect();
        covering.sort_unstable();
        covering
    }

    /// A budget appeared, changed or went: the engine learns what it allows, and our pods
    /// of its namespace which budgets cover them now.
    fn refresh_budgets(&mut self, ns: &str) {
        let pods: Vec<(String, Vec<Arc<str>>)> = self
            .labels
            .iter()
            .filter(|(_, (pod_ns, _))| pod_ns == ns)
            .map(|(uid, (_, labels))| (uid.clone(), self.budgets_covering(ns, labels)))
            .collect();
        for (uid, covering) in pods {
            self.cache.set_pod_budgets(&uid, covering);
        }
    }

    pub fn apply_budget(&mut self, pdb: &PodDisruptionBudget) {
        let ns = pdb.namespace().unwrap_or_default();
        let key = format!("{ns}/{}", pdb.name_any());
        self.cache
            .apply_budget(&key, budgets::disruptions_allowed(pdb));
        self.budgets.insert(key, pdb.clone());
        self.refresh_budgets(&ns);
    }

    pub fn delete_budget(&mut self, key: &str) {
        self.cache.delete_budget(key);
        if self.budgets.remove(key).is_some() {
            let ns = key.split_once('/').map(|(ns, _)| ns).unwrap_or_default();
            self.refresh_budgets(ns);
        }
    }

    pub fn budget_keys(&self) -> Vec<String> {
        self.budgets.keys().cloned().collect()
    }

    // ----- namespaces -------------------------------------------------------------------

    pub fn apply_namespace(&mut self, ns: &Namespace) {
        self.cache
            .apply_namespace(&ns.name_any(), ns.labels().clone());
    }

    pub fn delete_namespace(&mut self, key: &str) {
        self.cache.delete_namespace(key);
    }

    pub fn namespace_keys(&self) -> Vec<String> {
        self.cache.namespace_names()
    }

    // ----- queues and priority classes -----------------------------------------------

    /// A Queue from a watch: a cycle needs it at once unless the index already has this
    /// version (the echo of the status writer's own write) or a newer one.
    pub fn apply_queue(&mut self, q: &Queue) -> Wake {
        let name = q.name_any();
        if !store_newest(&mut self.queues, name.clone(), q) {
            return Wake::No;
        }
        self.status_touched.queues.insert(name.clone());
        match queue_to_info(q) {
            Ok(info) => {
                self.cache.apply_queue(info);
                self.report_queue_problems();
            }
            Err(e) => {
                let r = q.object_ref(&());
                self.report(r, EventType::Warning, "InvalidQueue", e.to_string());
            }
        }
        Wake::Now
    }

    /// The API server's answer to the status writer: kept only while the index still has
    /// that queue (see `apply_group_answer`).
    pub fn apply_queue_answer(&mut self, q: &Queue) {
        let same = self
            .queues
            .get(&q.name_any())
            .is_some_and(|have| have.uid() == q.uid());
        if same {
            let _ = self.apply_queue(q);
        }
    }

    pub fn delete_queue(&mut self, name: &str) {
        if let Some(q) = self.queues.remove(name) {
            if let Some(uid) = q.uid() {
                self.events.forget(&uid);
            }
        }
        self.cache.delete_queue(name);
    }

    pub fn queue_keys(&self) -> Vec<String> {
        self.queues.keys().cloned().collect()
    }

    /// Events on queues whose parent is missing or loops, or whose guarantee exceeds
    /// their capability (reported once per distinct problem).
    fn report_queue_problems(&mut self) {
        for (name, problem) in queue_problems(self.queues.values()) {
            if let Some(q) = self.queues.get(&name) {
                let r = q.object_ref(&());
                self.report(r, EventType::Warning, "InvalidQueue", problem);
            }
        }
    }

    pub fn apply_priority_class(&mut self, pc: &PriorityClass) {
        let name = pc.name_any();
        // Optional in the 1.37 schema (a zero value is left out): absent is 0.
        self.priority_classes
            .insert(name.clone(), pc.value.unwrap_or(0));
        let protection = self.class_protection_of(pc);
        if protection == (None, None) {
            self.class_protection.remove(&name);
        } else {
            self.class_protection.insert(name.clone(), protection);
        }
        // PodGroups that named this class before it was seen get its value now.
        let waiting: Vec<String> = self
            .groups
            .all()
            .flat_map(|s| s.naming_class(&name))
            .collect();
        for key in &waiting {
            self.refresh_group(key);
        }
    }

    pub fn delete_priority_class(&mut self, name: &str) {
        self.priority_classes.remove(name);
        self.class_protection.remove(name);
    }

    /// A PriorityClass's minimum runtime and preemption delay (its `rust-batch.io/*`
    /// annotations, read as a queue's are). A value that does not parse, is zero or is over
    /// a year is an `InvalidPriorityClass` event naming the annotation, and is left out.
    fn class_protection_of(&mut self, pc: &PriorityClass) -> (Option<i64>, Option<i64>) {
        use crate::dialects::volcano::{duration_value, MIN_RUNTIME, PREEMPTION_DELAY};
        let mut read = |key: &str| {
            let text = pc.metadata.annotations.as_ref()?.get(key)?;
            match duration_value(text) {
                Ok(ms) => Some(ms),
                Err(why) => {
                    let r = pc.object_ref(&());
                    let message = format!("metadata.annotations[{key}]: {why}");
                    self.report(r, EventType::Warning, "InvalidPriorityClass", message);
                    None
                }
            }
        };
        (read(MIN_RUNTIME), read(PREEMPTION_DELAY))
    }

    pub fn priority_class_keys(&self) -> Vec<String> {
        self.priority_classes.keys().cloned().collect()
    }

    // ----- network topology (Volcano HyperNodes) ---------------------------------------

    pub fn apply_hypernode(&mut self, hn: &HyperNode) {
        let name = hn.name_any();
        if !store_newest(&mut self.hypernodes, name.clone(), hn) {
            return;
        }
        match hypernode_to_spec(hn) {
            Ok(spec) => {
                // An error it was told before is gone (what the topology finds wrong with
                // it now is `report_topology_problems`'s to say).
                if !self.hypernode_problems.contains_key(&name) {
                    if let Some(uid) = hn.uid() {
                        self.events.forget_reason(&uid, INVALID_HYPERNODE);
                    }
                }
                self.cache.apply_hypernode(spec)
            }
            Err(e) => {
                // Unusable as a whole: left out of the topology, and said.
                self.cache.delete_hypernode(&name);
                self.hypernode_problems.remove(&name);
                let r = hn.object_ref(&());
                self.report(r, EventType::Warning, INVALID_HYPERNODE, e.to_string());
            }
        }
    }

    pub fn delete_hypernode(&mut self, name: &str) {
        if let Some(uid) = self.hypernodes.remove(name).and_then(|h| h.uid()) {
            self.events.forget(&uid);
        }
        self.hypernode_problems.remove(name);
        self.cache.delete_hypernode(name);
    }

    pub fn hypernode_keys(&self) -> Vec<String> {
        self.hypernodes.keys().cloned().collect()
    }

    /// What the engine found wrong with the HyperNodes in `snapshot`'s topology, as one
    /// Warning event per HyperNode (its problems, one per line), sent when they change: a
    /// topology is resolved once per change of HyperNodes or nodes, so checking it costs
    /// nothing in the cycles between. A HyperNode whose problems went is forgotten, so
    /// the same problem coming back is reported again.
    pub fn report_topology_problems(&mut self, snapshot: &Snapshot) {
        let topology = snapshot.hypernodes_shared();
        if self
            .topology_checked
            .as_ref()
            .is_some_and(|t| Arc::ptr_eq(t, topology))
        {
            return;
        }
        self.topology_checked = Some(topology.clone());
        let mut now: BTreeMap<String, Vec<&str>> = BTreeMap::new();
        for line in &topology.problems {
            // Every line names its HyperNode first: "HyperNode NAME: ...".
            match line
                .strip_prefix("HyperNode ")
                .and_then(|rest| rest.split_once(':'))
            {
                Some((name, _)) => now.entry(name.to_string()).or_default().push(line),
                None => super::retry::warn_limited("HyperNode topology problem", line),
            }
        }
        let gone: Vec<String> = self
            .hypernode_problems
            .keys()
            .filter(|name| !now.contains_key(*name))
            .cloned()
            .collect();
        for name in gone {
            self.hypernode_problems.remove(&name);
            if let Some(uid) = self.hypernodes.get(&name).and_then(|h| h.uid()) {
                self.events.forget_reason(&uid, INVALID_HYPERNODE);
            }
        }
        for (name, lines) in now {
            let message = lines.join("\n");
            let Some(hn) = self.hypernodes.get(&name) else {
                continue;
            };
            let r = hn.object_ref(&());
            self.report(r, EventType::Warning, INVALID_HYPERNODE, message.clone());
            self.hypernode_problems.insert(name, message);
        }
    }

    // ----- PodGroups of every dialect --------------------------------------------------

    /// Which kind of object defines the gang `key`, if any (the first of
    /// `dialects::KINDS` that has it).
    pub fn group_dialect(&self, key: &str) -> Option<Dialect> {
        self.groups.defining(key).map(|s| s.dialect())
    }

    fn has_group_object(&self, key: &str) -> bool {
        self.group_dialect(key).is_some()
    }

    /// The object that defines the gang `key`, for events.
    pub fn group_ref(&self, key: &str) -> Option<ObjectReference> {
        self.groups.defining(key)?.object_ref(key)
    }

    /// Makes the engine's gang `key` what its defining object says (or an event on that
    /// object says why it cannot). Returns whether the engine's view changed.
    fn refresh_group(&mut self, key: &str) -> bool {
        let ctx = KindContext {
            priority_classes: &self.priority_classes,
        };
        let Some(converted) = self.groups.defining(key).and_then(|s| s.to_job(key, &ctx)) else {
            return false;
        };
        match converted {
            Ok(mut spec) => {
                // Its PriorityClass's minimum runtime and preemption delay (they win over
                // its queue's).
                let class = self.groups.defining(key).and_then(|s| s.class_of(key));
                if let Some(&(min, delay)) = class.and_then(|c| self.class_protection.get(&c)) {
                    spec.policy.min_runtime = min;
                    spec.policy.preemption_delay = delay;
                }
                self.deleted_groups.remove(key);
                let problem = spec.topology.as_ref().and_then(|t| t.problem.clone());
                if let Some(r) = self.group_ref(key) {
                    match problem {
                        Some(p) => self.report(r, EventType::Warning, INVALID_NETWORK_TOPOLOGY, p),
                        None => {
                            let uid = r.uid.unwrap_or_default();
                            self.events.forget_reason(&uid, INVALID_NETWORK_TOPOLOGY);
                        }
                    }
                }
                self.cache.apply_job(spec)
            }
            Err(e) => {
                self.cache.delete_job(key);
                if let Some(r) = self.group_ref(key) {
                    self.report(r, EventType::Warning, "Invalid", e.to_string());
                }
                true
            }
        }
    }

    /// A PodGroup from a watch; how soon a cycle needs it: never when the index already
    /// has this version (the echo of the status writer's own write, whose answer it
    /// stored) or a newer one; at once when the gang changed for the engine; soon when only
    /// its status did (someone else's write, which the status writer may have to mend).
    pub fn apply_group<G: GangKind>(&mut self, pg: &G) -> Wake {
        let key = key_of_group(pg);
        if !store_newest(self.groups.typed_mut::<G>(), key.clone(), pg) {
            return Wake::No;
        }
        if pg.workload_ref().is_some() {
            self.workloads.dirty.insert(key.clone());
        }
        self.status_touched.groups.insert(key.clone());
        if self.refresh_group(&key) {
            Wake::Now
        } else {
            Wake::Soon
        }
    }

    /// The API server's answer to the status writer (a write or a reread): kept only while
    /// the index still has that object. A delete event that came first means the object is
    /// gone; stored again, it would stay in the index for good (no event ever removes it)
    /// and every change of its gang would write it again, answered 404.
    pub fn apply_group_answer<G: GangKind>(&mut self, pg: &G) {
        let key = key_of_group(pg);
        let same = self
            .groups
            .typed::<G>()
            .get(&key)
            .is_some_and(|have| have.uid() == pg.uid());
        if same {
            let _ = self.apply_group(pg);
        }
    }

    /// Whether the PodGroup of `dialect` at `key` is being deleted (it has a
    /// deletionTimestamp: finalizers hold it).
    pub fn group_deleting(&self, dialect: Dialect, key: &str) -> bool {
        let meta = self.groups.of(dialect).and_then(|s| s.meta(key));
        meta.is_some_and(|m| m.deletion_timestamp.is_some())
    }

    /// A status write was answered 404: the object is gone, forgotten as its delete event
    /// would (which is on its way, and then finds nothing).
    pub fn forget_gone(&mut self, t: &super::status::Target) {
        match t {
            super::status::Target::Group(dialect, key) => self.delete_group(*dialect, key),
            super::status::Target::Queue(name) => self.delete_queue(name),
            super::status::Target::Pod(uid) => {
                self.pending_pods.remove(uid);
                self.pod_conditions.remove(uid);
            }
        }
    }

    /// The PodScheduled=False (reason, message) a pending pod of ours should carry;
    /// touched for the status writer when it changes.
    pub fn want_pod_condition(&mut self, uid: &str, reason: &str, message: &str) {
        let same = self
            .pod_conditions
            .get(uid)
            .is_some_and(|(r, m)| r == reason && m == message);
        if !same {
            self.pod_conditions
                .insert(uid.to_string(), (reason.to_string(), message.to_string()));
            self.status_touched.pods.insert(uid.to_string());
        }
    }

    /// A gang's verdict from a cycle; touched for the status writer when its condition
    /// changes.
    pub fn record_verdict(&mut self, key: &str, verdict: Verdict) {
        let changed = self.verdicts.get(key).map(|(c, _)| c) != Some(&verdict.0);
        if changed {
            self.status_touched.groups.insert(key.to_string());
        }
        self.verdicts.insert(key.to_string(), verdict);
    }

    pub fn group_keys<G: GangKind>(&self) -> Vec<String> {
        self.groups.typed::<G>().keys().cloned().collect()
    }

    /// A PodGroup object of one kind is gone: another kind of the same name takes over, or
    /// the gang goes and its pods say so. The status writer drops it when it comes up: it
    /// writes only objects the index has.
    pub fn delete_group(&mut self, dialect: Dialect, key: &str) {
        let uid = self.groups.of_mut(dialect).and_then(|s| s.remove(key));
        if let Some(uid) = uid {
            self.events.forget(&uid);
        }
        if self.has_group_object(key) {
            self.refresh_group(key);
        } else {
            self.forget_group(key);
        }
    }

    fn forget_group(&mut self, key: &str) {
        self.cache.delete_job(key);
        self.verdicts.remove(key);
        self.recovery.forget(key);
        self.provisioning.forget(key);
        self.forget_device_gang(key);
        let members = self.cache.orphans().get(key).map_or(0, |m| m.len());
        if members > 0 {
            self.deleted_groups.insert(key.to_string());
        }
        // Only pods still waiting are told: a controller deletes the PodGroup of a job that
        // finished (Volcano's does), and its Succeeded or Running pods lose nothing.
        let waiting: Vec<(String, String, String)> = self
            .cache
            .orphans()
            .get(key)
            .into_iter()
            .flatten()
            .filter_map(|uid| self.cache.pod(uid))
            .filter(|p| p.task.status == TaskStatus::Pending)
            .map(|p| {
                (
                    p.task.uid.to_string(),
                    p.task.namespace.to_string(),
                    p.task.name.to_string(),
                )
            })
            .collect();
        for (uid, ns, name) in waiting {
            self.report(
                pod_ref(&ns, &name, &uid),
                EventType::Warning,
                "FailedScheduling",
                deleted_group_message(key),
            );
        }
    }

    /// Whether the gang `key` is another scheduler's (its object exists, none of its pods
    /// are ours, some are theirs): its status is not ours to write.
    pub fn foreign(&self, key: &str, job: &JobInfo) -> bool {
        job.tasks().is_empty() && self.foreign_members.contains_key(key)
    }

    // ----- Workloads (scheduling.k8s.io) -------------------------------------------------

    /// A Workload from the watch: nothing a cycle reads, only what explain and the
    /// PodGroups' events say of the groups that name it.
    pub fn apply_workload(&mut self, w: &Workload) -> Wake {
        let key = key_of_group(w);
        if store_newest(&mut self.workloads.objects, key, w) {
            self.touch_workload_refs(&w.namespace().unwrap_or_default());
        }
        Wake::No
    }

    pub fn delete_workload(&mut self, key: &str) {
        if self.workloads.objects.remove(key).is_some() {
            let ns = key.split_once('/').map_or("", |(ns, _)| ns);
            self.touch_workload_refs(ns);
        }
    }

    pub fn workload_keys(&self) -> Vec<String> {
        self.workloads.objects.keys().cloned().collect()
    }

    fn touch_workload_refs(&mut self, ns: &str) {
        let mut refs = Vec::new();
        for store in self.groups.all() {
            for key in store.keys() {
                let has_ref = store.workload_ref(&key).is_some();
                refs.push((key, has_ref));
            }
        }
        self.workloads.touch_namespace(ns, refs);
    }

    /// What the `workloadRef` of gang `key`'s PodGroup points at, if it has one.
    pub fn workload_link(&self, key: &str) -> Option<WorkloadLink> {
        let r = self.groups.defining(key)?.workload_ref(key)?;
        let ns = key.split_once('/').map_or("", |(ns, _)| ns);
        Some(workload_link(ns, r, &self.workloads.objects))
    }

    /// Tells each PodGroup whose `workloadRef` changed, or whose Workload did, when the
    /// reference does not resolve (one event until that changes). Called once the lists
    /// are in: a Workload not listed yet is not missing.
    pub fn report_workload_refs(&mut self) {
        let dirty: Vec<String> = self.workloads.dirty.drain().collect();
        for key in dirty {
            let Some(r) = self.group_ref(&key) else {
                continue;
            };
            match self.workload_link(&key) {
                Some(link) if link.found.is_err() => {
                    self.report(r, EventType::Warning, WORKLOAD_REFERENCE, link.describe())
                }
                _ => {
                    let uid = r.uid.unwrap_or_default();
                    self.events.forget_reason(&uid, WORKLOAD_REFERENCE);
                }
            }
        }
    }

    // ----- the debug API's view ------------------------------------------------------

    /// Every gang's key.
    pub fn gang_keys(&self) -> Vec<String> {
        self.cache
            .state()
            .jobs()
            .map(|(_, j)| j.uid.to_string())
            .collect()
    }

    /// What the debug API shows of one gang.
    pub fn gang_view(&self, key: &str) -> Option<GangView> {
        let state = self.cache.state();
        let job = state.job(state.job_by_uid(key)?).clone();
        let mut held: Vec<(String, String)> = self
            .held_by_gang
            .get(key)
            .into_iter()
            .flatten()
            .map(|uid| (self.held[uid].pod.clone(), self.held[uid].hold.describe()))
            .collect();
        held.sort();
        Some(GangView {
            workload: self.workload_link(key).map(|l| l.describe()),
            dialect: self.group_dialect(key),
            verdict: self.verdicts.get(key).cloned(),
            job,
            held,
        })
    }
}

/// One gang as the debug API reads it.
pub struct GangView {
    pub job: JobInfo,
    /// Which object defines it, if one does.
    pub dialect: Option<Dialect>,
    pub verdict: Option<Verdict>,
    /// Members kept out of the engine (`namespace/name`, why), by name.
    pub held: Vec<(String, String)>,
    /// The Workload and template its PodGroup names, in words.
    pub workload: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dialects::coscheduling::{SigsPodGroup, XK8sPodGroup};
    use crate::dialects::volcano::PodGroup;
    use serde::de::DeserializeOwned;

    fn object<K: DeserializeOwned>(api_version: &str, min: i32) -> K {
        serde_json::from_value(serde_json::json!({
            "apiVersion": api_version, "kind": "PodGroup",
            "metadata": {"name": "g", "namespace": "ns"},
            "spec": {"minMember": min}
        }))
        .unwrap()
    }

    fn min_member(st: &Index) -> Option<u32> {
        let s = st.cache.state();
        s.job_by_uid("ns/g").map(|id| s.job(id).min_member)
    }

    #[test]
    fn a_priority_classs_protection_reaches_the_gangs_that_name_it() {
        let mut st = Index::default();
        let pg: PodGroup = serde_json::from_value(serde_json::json!({
            "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
            "metadata": {"name": "g", "namespace": "ns"},
            "spec": {"minMember": 1, "priorityClassName": "batch"}
        }))
        .unwrap();
        st.apply_group::<PodGroup>(&pg);
        let class = |annotations: serde_json::Value| -> PriorityClass {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                "metadata": {"name": "batch", "annotations": annotations},
                "value": 10
            }))
            .unwrap()
        };
        let policy = |st: &Index| {
            let s = st.cache.state();
            let j = s.job(s.job_by_uid("ns/g").unwrap());
            (j.priority, j.policy.min_runtime, j.policy.preemption_delay)
        };
        st.apply_priority_class(&class(serde_json::json!({
            "rust-batch.io/min-runtime": "10m", "rust-batch.io/preemption-delay": "1m"
        })));
        assert_eq!(policy(&st), (10, Some(600_000), Some(60_000)));
        // A bad value is left out (and reported); the other one stays.
        st.apply_priority_class(&class(serde_json::json!({
            "rust-batch.io/min-runtime": "0s", "rust-batch.io/preemption-delay": "1m"
        })));
        assert_eq!(policy(&st), (10, None, Some(60_000)));
        st.apply_priority_class(&class(serde_json::json!({})));
        assert_eq!(policy(&st), (10, None, None));
    }

    #[test]
    fn podgroup_kinds_sharing_a_name_take_precedence_volcano_x_k8s_legacy() {
        let mut st = Index::default();
        st.apply_group::<SigsPodGroup>(&object("scheduling.sigs.k8s.io/v1alpha1", 3));
        assert_eq!(min_member(&st), Some(3));
        st.apply_group::<XK8sPodGroup>(&object("scheduling.x-k8s.io/v1alpha1", 2));
        assert_eq!(min_member(&st), Some(2), "scheduler-plugins over legacy");
        st.apply_group::<PodGroup>(&object("scheduling.volcano.sh/v1beta1", 1));
        assert_eq!(min_member(&st), Some(1), "Volcano over both");
        // A later update of a lower kind does not take over.
        st.apply_group::<SigsPodGroup>(&object("scheduling.sigs.k8s.io/v1alpha1", 5));
        assert_eq!(min_member(&st), Some(1));
        assert_eq!(st.group_dialect("ns/g"), Some(Dialect::VOLCANO));
        st.delete_group(Dialect::VOLCANO, "ns/g");
        assert_eq!(min_member(&st), Some(2), "the next kind takes over");
        st.delete_group(Dialect::X_K8S, "ns/g");
        assert_eq!(min_member(&st), Some(5));
        st.delete_group(Dialect::SIGS, "ns/g");
        assert_eq!(min_member(&st), None, "no object left: the gang is gone");
    }

    fn pod_group(rv: &str, phase: &str) -> PodGroup {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
            "metadata": {"name": "g", "namespace": "ns", "resourceVersion": rv},
            "spec": {"minMember": 1},
            "status": {"phase": phase}
        }))
        .unwrap()
    }

    #[test]
    fn a_watch_event_older_than_the_stored_object_does_not_replace_it() {
        let mut st = Index::default();
        st.apply_group(&pod_group("20", "Running"));
        st.apply_group(&pod_group("12", "Pending"));
        let phase = |st: &Index| {
            st.groups.typed::<PodGroup>()["ns/g"]
                .status
                .as_ref()
                .and_then(|s| s.phase.as_ref())
                .map(|p| p.as_str().to_string())
        };
        assert_eq!(
            phase(&st).as_deref(),
            Some("Running"),
            "older event ignored"
        );
        st.apply_group(&pod_group("21", "Inqueue"));
        assert_eq!(phase(&st).as_deref(), Some("Inqueue"), "newer event taken");
        assert!(older(Some("9"), Some("10")) && !older(Some("x"), Some("10")));
    }

    #[test]
    fn a_pod_group_wakes_a_cycle_only_when_the_engine_can_act_on_it() {
        let mut counts = pod_group("6", "Inqueue");
        counts.status.as_mut().unwrap().running = Some(1);
        let mut bigger = pod_group("8", "Running");
        bigger.spec.min_member = Some(2);
        let steps = [
            (pod_group("5", "Inqueue"), Wake::Now, "a new gang"),
            (
                pod_group("5", "Inqueue"),
                Wake::No,
                "this version again: the watch's echo of the status writer's write, whose answer the index stored",
            ),
            (pod_group("4", "Pending"), Wake::No, "an older one"),
            (
                counts,
                Wake::Soon,
                "only its status counts changed (another writer): the status writer may mend it, no gang waits on it",
            ),
            (pod_group("7", "Running"), Wake::Now, "its phase changed"),
            (bigger, Wake::Now, "its minimum changed"),
        ];
        let mut st = Index::default();
        for (group, wake, why) in steps {
            assert_eq!(st.apply_group(&group), wake, "{why}");
        }
    }

    #[test]
    fn an_answer_after_the_delete_event_does_not_bring_the_object_back() {
        let mut st = Index::default();
        let with_uid = |rv: &str| {
            let mut g = pod_group(rv, "Running");
            g.metadata.uid = Some("pg-uid".into());
            g
        };
        st.apply_group(&with_uid("5"));
        st.apply_group_answer(&with_uid("6"));
        assert_eq!(
            st.groups.typed::<PodGroup>()["ns/g"]
                .metadata
                .resource_version
                .as_deref(),
            Some("6"),
            "an answer updates the object the index has"
        );
        // The status writer's PATCH was answered, but the delete event came first.
        st.delete_group(Dialect::VOLCANO, "ns/g");
        st.apply_group_answer(&with_uid("7"));
        assert_eq!(st.group_dialect("ns/g"), None, "gone stays gone");
        assert!(st.cache.state().job_by_uid("ns/g").is_none());
        // A new object of the same name is another uid: the watch brings it, not an answer.
        let mut new = with_uid("9");
        new.metadata.uid = Some("other".into());
        st.apply_group(&new);
        st.apply_group_answer(&with_uid("10"));
        assert_eq!(
            st.groups.typed::<PodGroup>()["ns/g"]
                .metadata
                .uid
                .as_deref(),
            Some("other"),
            "an answer about the old object does not replace the new one"
        );

        let queue = |rv: &str| -> Queue {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
                "metadata": {"name": "q", "uid": "q-uid", "resourceVersion": rv},
                "spec": {"weight": 1}
            }))
            .unwrap()
        };
        st.apply_queue(&queue("1"));
        st.delete_queue("q");
        st.apply_queue_answer(&queue("2"));
        assert!(!st.queues.contains_key("q"));

        let mut st = Index::new(vec!["rust-batch".into()]);
        let mut p = pod("a", false, "rust-batch");
        p.metadata.resource_version = Some("3".into());
        st.apply_pod(&p);
        assert!(st.pending_pods.contains_key("a"));
        st.delete_pod("a");
        st.note_pod_answer(&p);
        assert!(
            !st.pending_pods.contains_key("a"),
            "a deleted pod is not noted"
        );
    }

    fn pod(name: &str, gated: bool, scheduler: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "ns", "uid": name,
                         "annotations": {"scheduling.k8s.io/group-name": "g"}},
            "spec": {"schedulerName": scheduler,
                     "schedulingGates": if gated { serde_json::json!([{"name": "example.com/wait"}]) } else { serde_json::json!([]) },
                     "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}
        }))
        .unwrap()
    }

    #[test]
    fn changes_wake_a_cycle_as_soon_as_it_can_act_on_them() {
        let mut st = Index::new(vec!["rust-batch".into()]);
        st.apply_group::<PodGroup>(&object("scheduling.volcano.sh/v1beta1", 3));
        let (a, b, c) = (
            pod("a", false, "rust-batch"),
            pod("b", false, "rust-batch"),
            pod("c", false, "rust-batch"),
        );
        assert_eq!(st.apply_pod(&a), Wake::No, "1 of 3: nothing to decide");
        assert_eq!(st.apply_pod(&b), Wake::No, "2 of 3");
        assert_eq!(st.apply_pod(&c), Wake::Now, "3 of 3: the gang may bind");
        // A condition written on a pod (ours: PodScheduled) changes nothing the engine reads.
        let mut told = c.clone();
        told.status = Some(serde_json::from_value(serde_json::json!({
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
        })).unwrap());
        assert_eq!(st.apply_pod(&told), Wake::No, "a status condition alone");
        let mut bigger = c.clone();
        bigger.spec.as_mut().unwrap().containers[0].resources =
            Some(serde_json::from_value(serde_json::json!({"requests": {"cpu": "2"}})).unwrap());
        assert_eq!(
            st.apply_pod(&bigger),
            Wake::Now,
            "a change the engine reads"
        );
        // The gang bound: its pods running is news, not urgent.
        let mut running = bigger.clone();
        running.spec.as_mut().unwrap().node_name = Some("n1".into());
        running.status =
            Some(serde_json::from_value(serde_json::json!({"phase": "Running"})).unwrap());
        assert_eq!(st.apply_pod(&running), Wake::Soon);
        // Not ours, or of a gang not known yet: a cycle decides (or reports) at once.
        assert_eq!(
            st.apply_pod(&pod("x", false, "default-scheduler")),
            Wake::Soon,
            "another scheduler's pod"
        );
        let mut orphan = pod("o", false, "rust-batch");
        orphan.metadata.annotations = Some(
            [(
                "scheduling.k8s.io/group-name".to_string(),
                "nowhere".to_string(),
            )]
            .into(),
        );
        assert_eq!(st.apply_pod(&orphan), Wake::Now);
        // A node's heartbeat (its conditions' times) is no change; its capacity is.
        let node = |cpu: &str, heartbeat: &str| -> Node {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "n1"},
                "status": {"allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"},
                           "conditions": [{"type": "Ready", "status": "True",
                                           "lastHeartbeatTime": heartbeat}]}
            }))
            .unwrap()
        };
        assert_eq!(st.apply_node(&node("4", "2026-01-01T00:00:00Z")), Wake::Now);
        assert_eq!(st.apply_node(&node("4", "2026-01-01T00:00:40Z")), Wake::No);
        assert_eq!(st.apply_node(&node("8", "2026-01-01T00:00:40Z")), Wake::Now);
    }

    #[test]
    fn a_deleted_group_warns_only_the_pods_still_waiting() {
        let mut st = Index::new(vec!["rust-batch".into()]);
        st.apply_group(&pod_group("1", "Running"));
        let mut done = pod("done", false, "rust-batch");
        done.spec.as_mut().unwrap().node_name = Some("n1".into());
        done.status =
            Some(serde_json::from_value(serde_json::json!({"phase": "Succeeded"})).unwrap());
        st.apply_pod(&done);
        st.apply_pod(&pod("waiting", false, "rust-batch"));
        // Volcano's job controller deletes the PodGroup of a finished job.
        st.delete_group(Dialect::VOLCANO, "ns/g");
        assert_eq!(
            st.events.last("done", "FailedScheduling"),
            None,
            "a finished pod loses nothing"
        );
        assert!(st
            .events
            .last("waiting", "FailedScheduling")
            .is_some_and(|m| m.contains("PodGroup ns/g was deleted")));
        // Told once: the missing group's report says the same words; a pod naming the
        // deleted group since is told them too.
        st.report_missing_groups(0);
        let before = st.events.kept.len();
        st.report_missing_groups(MISSING_GROUP_GRACE_MS);
        assert_eq!(st.events.kept.len(), before, "said once");
        st.apply_pod(&pod("late", false, "rust-batch"));
        st.report_missing_groups(MISSING_GROUP_GRACE_MS);
        st.report_missing_groups(2 * MISSING_GROUP_GRACE_MS);
        assert!(st
            .events
            .last("late", "FailedScheduling")
            .is_some_and(|m| m.contains("PodGroup ns/g was deleted")));
    }

    #[test]
    fn a_gated_pod_is_no_candidate_until_its_gates_are_lifted() {
        let mut st = Index::new(vec!["rust-batch".into()]);
        st.apply_group(&pod_group("1", "Inqueue"));
        st.apply_pod(&pod("a", false, "rust-batch"));
        st.apply_pod(&pod("b", true, "rust-batch"));
        let members = |st: &Index| {
            let s = st.cache.state();
            s.job(s.job_by_uid("ns/g").unwrap()).tasks().len()
        };
        assert_eq!(members(&st), 1, "the gated pod is not a member yet");
        assert!(st.pod_keys().contains(&"b".to_string()), "but it is known");
        assert!(st
            .events
            .last("b", "SchedulingGated")
            .is_some_and(|m| m.contains("example.com/wait")));
        let held = |st: &Index| {
            let s = st.cache.state();
            s.job(s.job_by_uid("ns/g").unwrap()).held_back.clone()
        };
        assert_eq!(held(&st).gated_pods, 1, "its gang counts it");
        assert_eq!(held(&st).describe(), "1 pod gated by example.com/wait");
        let said = st.events.kept.len();
        st.apply_pod(&pod("b", true, "rust-batch"));
        assert_eq!(
            st.events.kept.len(),
            said,
            "one event per change of the gates"
        );
        assert!(
            !st.pod_conditions.contains_key("b"),
            "the API server's SchedulingGated condition is left alone"
        );
        st.apply_pod(&pod("b", false, "rust-batch"));
        assert_eq!(members(&st), 2, "gate lifted: a candidate");
        assert!(held(&st).is_empty());
    }

    #[test]
    fn a_pod_with_dra_claims_is_a_member_whose_missing_claim_is_named() {
        let mut st = Index::new(vec!["rust-batch".into()]);
        st.apply_group(&pod_group("1", "Inqueue"));
        st.apply_pod(&pod("a", false, "rust-batch"));
        let mut dra = pod("b", false, "rust-batch");
        dra.spec.as_mut().unwrap().resource_claims = Some(vec![serde_json::from_value(
            serde_json::json!({"name": "gpu", "resourceClaimName": "gpu-claim"}),
        )
        .unwrap()]);
        st.apply_pod(&dra);
        let s = st.cache.state();
        let job = s.job(s.job_by_uid("ns/g").unwrap());
        assert_eq!(job.tasks().len(), 2, "a candidate, no longer refused");
        assert!(job.held_back.is_empty());
        let claims = st.cache.pod("b").unwrap().task.claims.clone();
        assert_eq!(
            claims[0].blocked.as_deref(),
            Some("pod claim gpu: resourceclaim ns/gpu-claim not found"),
            "it waits, naming the claim"
        );
        st.delete_pod("b");
        assert!(!st.pod_keys().contains(&"b".to_string()));
    }

    #[test]
    fn a_claim_or_class_change_resolves_its_pods_volume_rules_again() {
        let mut st = Index::new(vec!["rust-batch".into()]);
        st.apply_group(&pod_group("1", "Inqueue"));
        let p: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "v", "namespace": "ns", "uid": "v",
                         "annotations": {"scheduling.k8s.io/group-name": "g"}},
            "spec": {"schedulerName": "rust-batch", "containers": [{"name": "c"}],
                     "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]}
        }))
        .unwrap();
        st.apply_pod(&p);
        let rules = |st: &Index| {
            st.cache
                .pod("v")
                .and_then(|p| p.task.placement.volumes.clone())
                .unwrap()
        };
        assert_eq!(
            rules(&st).blocked.as_deref(),
            Some("persistentvolumeclaim \"data\" not found")
        );
        st.apply_claim(
            &serde_json::from_value(serde_json::json!({
                "metadata": {"name": "data", "namespace": "ns"},
                "spec": {"storageClassName": "late"}
            }))
            .unwrap(),
        );
        assert!(rules(&st).blocked.unwrap().contains("\"late\" not found"));
        st.apply_class(
            &serde_json::from_value(serde_json::json!({
                "metadata": {"name": "late"}, "provisioner": "example.com/disk",
                "volumeBindingMode": "WaitForFirstConsumer"
            }))
            .unwrap(),
        );
        let r = rules(&st);
        assert_eq!(r.blocked, None);
        assert_eq!(r.to_provision().collect::<Vec<_>>(), ["ns/data"]);
        st.delete_claim("ns/data");
        assert!(
            rules(&st).blocked.is_some(),
            "claim gone: the pod waits again"
        );
    }

    #[test]
    fn missing_groups_are_reported_only_when_asked_after_the_lists() {
        let mut st = Index::new(vec!["rust-batch".into()]);
        st.apply_pod(&pod("a", false, "rust-batch"));
        assert!(st.events.kept.is_empty(), "nothing said while listing");
        st.report_missing_groups(1_000);
        assert!(
            st.events.kept.is_empty(),
            "the group's own watch event may be just behind"
        );
        st.report_missing_groups(1_000 + MISSING_GROUP_GRACE_MS);
        assert!(st
            .events
            .last("a", "FailedScheduling")
            .is_some_and(|m| m.contains("PodGroup g does not exist")));
        let before = st.events.kept.len();
        st.report_missing_groups(5_000);
        assert_eq!(st.events.kept.len(), before, "said once");
    }

    fn hypernode(name: &str, spec: serde_json::Value) -> HyperNode {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "topology.volcano.sh/v1alpha1", "kind": "HyperNode",
            "metadata": {"name": name, "uid": format!("uid-{name}")},
            "spec": spec
        }))
        .unwrap()
    }

    fn said(st: &Index, reason: &str) -> Vec<(String, String)> {
        st.events
            .kept
            .iter()
            .filter(|e| e.reason == reason)
            .map(|e| (e.regarding.name.clone().unwrap_or_default(), e.note.clone()))
            .collect()
    }

    #[test]
    fn hypernode_problems_are_one_event_per_hypernode_and_change() {
        let mut st = Index::default();
        let good = serde_json::json!({"tier": 1, "members": [
            {"type": "Node", "selector": {"exactMatch": {"name": "n0"}}}]});
        let bad = serde_json::json!({"tier": 1, "members": [
            {"type": "Node", "selector": {"regexMatch": {"pattern": "n["}}},
            {"type": "Switch", "selector": {"exactMatch": {"name": "n1"}}}]});
        st.apply_hypernode(&hypernode("rack-a", good.clone()));
        st.apply_hypernode(&hypernode("rack-b", bad.clone()));
        st.apply_hypernode(&hypernode("odd", serde_json::json!({"tier": -1})));
        assert_eq!(
            said(&st, INVALID_HYPERNODE),
            [(
                "odd".to_string(),
                "HyperNode odd: spec.tier: must be at least 1, got -1".to_string()
            )]
        );
        let names: Vec<&String> = st.cache.hypernode_names().collect();
        assert_eq!(
            names,
            ["rack-a", "rack-b"],
            "an unusable HyperNode is left out"
        );

        st.report_topology_problems(&st.cache.snapshot());
        let events = said(&st, INVALID_HYPERNODE);
        assert_eq!(events.len(), 2, "{events:?}");
        let (name, note) = &events[1];
        assert_eq!(name, "rack-b");
        let lines: Vec<&str> = note.lines().collect();
        assert_eq!(lines.len(), 2, "both problems in one event: {note}");
        assert!(lines[0].starts_with("HyperNode rack-b: spec.members[0].selector.regexMatch"));
        assert!(lines[1].starts_with("HyperNode rack-b: spec.members[1].type \"Switch\""));
        // Later cycles on the same topology, or a new one with the same problems: no news.
        st.report_topology_problems(&st.cache.snapshot());
        st.apply_hypernode(&hypernode("rack-c", good.clone()));
        st.report_topology_problems(&st.cache.snapshot());
        assert_eq!(said(&st, INVALID_HYPERNODE).len(), 2);
        // Fixed, then broken again the same way: news again.
        st.apply_hypernode(&hypernode("rack-b", good));
        st.report_topology_problems(&st.cache.snapshot());
        assert_eq!(said(&st, INVALID_HYPERNODE).len(), 2);
        st.apply_hypernode(&hypernode("rack-b", bad));
        st.report_topology_problems(&st.cache.snapshot());
        assert_eq!(said(&st, INVALID_HYPERNODE).len(), 3);
        // A deleted HyperNode leaves the topology.
        st.delete_hypernode("rack-b");
        assert!(!st.hypernode_keys().contains(&"rack-b".to_string()));
        assert!(!st.cache.hypernode_names().any(|n| n == "rack-b"));
    }

    #[test]
    fn a_bad_network_topology_is_said_once_on_the_podgroup() {
        let mut st = Index::default();
        let group = |tier: i64, rv: &str| -> PodGroup {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
                "metadata": {"name": "g", "namespace": "ns", "uid": "pg", "resourceVersion": rv},
                "spec": {"minMember": 1, "networkTopology": {"mode": "hard", "highestTierAllowed": tier}}
            }))
            .unwrap()
        };
        st.apply_group(&group(0, "1"));
        st.apply_group(&group(0, "2"));
        let events = said(&st, INVALID_NETWORK_TOPOLOGY);
        assert_eq!(events.len(), 1, "{events:?}");
        assert!(events[0]
            .1
            .contains("highestTierAllowed must be at least 1, got 0"));
        let s = st.cache.state();
        let job = s.job(s.job_by_uid("ns/g").unwrap());
        assert!(job.topology_request().is_some_and(|t| t.problem.is_some()));
        st.apply_group(&group(2, "3"));
        st.apply_group(&group(0, "4"));
        assert_eq!(
            said(&st, INVALID_NETWORK_TOPOLOGY).len(),
            2,
            "fixed, then broken: said again"
        );
    }
}
