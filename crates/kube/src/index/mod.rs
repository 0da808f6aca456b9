//! The index: what the watches know, behind one short-held lock. One watch task per kind
//! (see `watch`) applies, deletes and, on a relist, forgets objects here; the index turns
//! them into the engine cache (nodes, pods, gangs, queues, budgets, HyperNodes), keeps the API objects
//! the status writer patches, and says per kind whether its list is complete — no cycle
//! runs before every kind is (`readiness`).

use std::any::Any;
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
use super::dialects::kind::{Dialect, GangKind, GroupTarget, Groups, KindContext};
use super::dialects::volcano::{
    hypernode_to_spec, queue_problems, queue_to_info, HyperNode, Queue,
};
use super::dialects::workload::{
    workload_link, Workload, WorkloadLink, Workloads, WORKLOAD_REFERENCE,
};
use super::dialects::{pod_gang, pod_group_name, GangDecl, QUEUE_NAME_ANNOTATION};
use super::event_feed::{pod_ref, EventType, Events};
use super::readiness::Readiness;
use super::recovery::Recovery;
use super::volumes::{VolumeDep, VolumeObjects, VolumePods};
use crate::cache::Cache;
use crate::framework::JobCondition;
use crate::model::pod_rules::Labels;
use crate::model::{GangOrigin, HeldBack, JobInfo, JobSpec, TaskStatus, Topology};
use crate::snapshot::Snapshot;

pub mod dra_commits;
pub mod dra_watch;
mod groups;
mod objects;
mod pods;
mod view;

pub use groups::GangView;
pub use view::{Answers, IndexView};

pub use crate::newest::{older, store_newest};
pub use crate::watch::Wake;

/// How long a pending pod's group must be missing before the pod is told (see
/// `Index::report_missing_groups`).
pub const MISSING_GROUP_GRACE_MS: i64 = 2_000;
/// The event a pod gets when it declares two gangs (see `dialects::pod_gang`).
pub const CONFLICTING_DECLARATIONS: &str = "ConflictingGangDeclarations";

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
    pub(crate) dra: dra_watch::DraObjects,
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
    crate::watch::lock(index)
}

impl GroupTarget for Index {
    fn apply_object(&mut self, dialect: Dialect, key: &str, object: &dyn Any) -> Wake {
        self.apply_group_object(dialect, key, object)
    }
    fn apply_answer(&mut self, dialect: Dialect, key: &str, object: &dyn Any) {
        self.apply_group_answer_object(dialect, key, object)
    }
    fn delete_object(&mut self, dialect: Dialect, key: &str) {
        self.delete_group(dialect, key)
    }
    fn object_keys(&self, dialect: Dialect) -> Vec<String> {
        self.groups
            .of(dialect)
            .map(|s| s.keys())
            .unwrap_or_default()
    }
}

impl crate::watch::Store for Index {
    fn readiness(&mut self) -> &mut Readiness {
        &mut self.readiness
    }
    fn binds_unseen(&self) -> usize {
        self.cache.binds_assumed()
    }
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
}

#[cfg(test)]
mod tests;
