//! Volcano (`scheduling.volcano.sh/v1beta1`): the pod keys that name a gang, the PodGroup
//! and Queue types (`api`), their conversion to the engine's gangs and queues, and the
//! PodGroup and Queue status the scheduler writes back (phase, counts, conditions), patched
//! only when it changed. `hypernode` holds Volcano's network topology objects
//! (`topology.volcano.sh/v1alpha1` HyperNode), which the scheduler only reads.

pub mod api;
pub mod fields;
pub mod hypernode;
pub mod usage_record;

pub use api::{PodGroup, Queue};
pub use hypernode::{hypernode_to_spec, HyperNode};

use std::collections::{BTreeMap, HashMap};

use serde_json::{json, Value};

use super::kind::{Dialect, GangKind, KindContext};
use crate::convert::ConvertError;
use crate::framework::{ConditionKind, JobCondition};
use crate::model::pod_rules::LabelSelector;
use crate::model::resource::QuantityError;
use crate::model::Resource;
use crate::model::{
    GangOrigin, JobInfo, JobSpec, PodGroupPhase, QueueInfo, QueueState, SubGroupPolicy, TaskStatus,
    TopologyRequest,
};
use ::kube::ResourceExt;
use api::DEFAULT_QUEUE;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// Pod annotation naming a Volcano / kube-batch PodGroup.
pub const GROUP_NAME_ANNOTATION: &str = "scheduling.k8s.io/group-name";
/// Volcano's own key, as annotation or label.
pub const VOLCANO_GROUP_NAME: &str = "scheduling.volcano.sh/group-name";
/// The role of a pod within its gang (minTaskMember keys); the pod's conversion reads it.
pub use crate::convert::TASK_SPEC_ANNOTATION;
/// Queue of a pod that has no PodGroup.
pub const QUEUE_NAME_ANNOTATION: &str = "scheduling.volcano.sh/queue-name";
// The model's phases and condition kinds are Volcano's; their spellings live once, in the
// CRD's enums (api.rs), and these convert variant to variant.
impl From<PodGroupPhase> for api::PodGroupPhase {
    fn from(phase: PodGroupPhase) -> Self {
        match phase {
            PodGroupPhase::Pending => Self::Pending,
            PodGroupPhase::Inqueue => Self::Inqueue,
            PodGroupPhase::Running => Self::Running,
            PodGroupPhase::Unknown => Self::Unknown,
            PodGroupPhase::Completed => Self::Completed,
        }
    }
}

/// A phase this version does not know reads as Pending (not yet admitted).
impl From<&api::PodGroupPhase> for PodGroupPhase {
    fn from(phase: &api::PodGroupPhase) -> Self {
        match phase {
            api::PodGroupPhase::Inqueue => Self::Inqueue,
            api::PodGroupPhase::Running => Self::Running,
            api::PodGroupPhase::Unknown => Self::Unknown,
            api::PodGroupPhase::Completed => Self::Completed,
            api::PodGroupPhase::Pending | api::PodGroupPhase::Other(_) => Self::Pending,
        }
    }
}

impl From<ConditionKind> for api::PodGroupConditionType {
    fn from(kind: ConditionKind) -> Self {
        match kind {
            ConditionKind::Scheduled => Self::Scheduled,
            ConditionKind::Unschedulable => Self::Unschedulable,
        }
    }
}

impl GangKind for PodGroup {
    const DIALECT: Dialect = Dialect::VOLCANO;
    const WATCH_NAME: &'static str = "scheduling.volcano.sh PodGroup";
    const STATUS_SUBRESOURCE: bool = false;
    fn crd() -> Option<crate::dialects::crds::CrdFile> {
        use ::kube::core::crd::v1::CustomResourceExt;
        Some((
            "scheduling.volcano.sh_podgroups.yaml",
            <Self as CustomResourceExt>::crd(),
        ))
    }
    fn to_job(&self, ctx: &KindContext) -> Result<JobSpec, ConvertError> {
        pod_group_to_job(self, ctx.priority_classes)
    }
    fn status_patch(
        &self,
        job: &JobInfo,
        condition: Option<&JobCondition>,
        now_ms: i64,
    ) -> Option<Value> {
        status_patch(self, &GroupStatus::of(job, condition), now_ms)
    }
    fn stored_phase(&self) -> Option<&str> {
        self.status.as_ref()?.phase.as_ref().map(|p| p.as_str())
    }
    fn priority_class_name(&self) -> Option<&str> {
        self.spec.priority_class_name.as_deref()
    }
}

pub fn pod_group_to_job(
    pg: &PodGroup,
    priority_classes: &HashMap<String, i32>,
) -> Result<JobSpec, ConvertError> {
    let ns = pg.namespace().unwrap_or_default();
    let name = pg.name_any();
    let err = |field: &str, message: String| ConvertError {
        object: format!("podgroup {ns}/{name}"),
        field: field.into(),
        message,
    };
    let spec = &pg.spec;
    let min_member = spec.min_member.unwrap_or(1);
    if min_member < 0 {
        return Err(err(
            "spec.minMember",
            format!("must be >= 0, got {min_member}"),
        ));
    }
    let mut min_task_member = std::collections::BTreeMap::new();
    for (role, n) in spec.min_task_member.iter().flatten() {
        if *n < 0 {
            return Err(err(
                &format!("spec.minTaskMember.{role}"),
                format!("must be >= 0, got {n}"),
            ));
        }
        min_task_member.insert(role.clone(), *n as u32);
    }
    let min_resources = match &spec.min_resources {
        None => None,
        Some(r) => Some(volcano_resources(r).map_err(|e| err("spec.minResources", e.to_string()))?),
    };
    let priority = spec
        .priority_class_name
        .as_ref()
        .and_then(|c| priority_classes.get(c))
        .copied()
        .unwrap_or(0);
    Ok(JobSpec {
        uid: format!("{ns}/{name}"),
        namespace: ns.clone(),
        name: name.clone(),
        // spec.queue, else the queue-name annotation (older Volcano clients set only that).
        queue: spec
            .queue
            .clone()
            .filter(|q| !q.is_empty())
            .or_else(|| {
                pg.annotations()
                    .get(QUEUE_NAME_ANNOTATION)
                    .filter(|q| !q.is_empty())
                    .cloned()
            })
            .unwrap_or_else(|| DEFAULT_QUEUE.into()),
        min_member: min_member as u32,
        min_task_member,
        min_resources,
        priority,
        created: pg
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.as_millisecond())
            .unwrap_or(0),
        phase: pg
            .status
            .as_ref()
            .and_then(|s| s.phase.as_ref())
            .map(PodGroupPhase::from)
            .unwrap_or_default(),
        policy: Default::default(),
        origin: GangOrigin::Declared,
        topology: spec
            .network_topology
            .as_ref()
            .map(|t| network_topology(t, &format!("{ns}/{name}"), "spec.networkTopology")),
        subgroups: sub_group_policies(spec, &format!("{ns}/{name}"))
            .map_err(|(field, message)| err(&field, message))?,
    })
}

/// `spec.subGroupPolicy` as the engine's subgroup rules (model/subgroup.rs).
fn sub_group_policies(
    spec: &api::PodGroupSpec,
    object: &str,
) -> Result<Vec<SubGroupPolicy>, (String, String)> {
    let mut out = Vec::new();
    for (i, p) in spec.sub_group_policy.iter().flatten().enumerate() {
        let field = |f: &str| format!("spec.subGroupPolicy[{i}].{f}");
        // CRD defaults: subGroupSize 1, minSubGroups 0 (Volcano's types.go).
        let size = p.sub_group_size.unwrap_or(1);
        if size < 1 {
            return Err((
                field("subGroupSize"),
                format!("must be at least 1, got {size}"),
            ));
        }
        let min_groups = p.min_sub_groups.unwrap_or(0);
        if min_groups < 0 {
            return Err((
                field("minSubGroups"),
                format!("must be >= 0, got {min_groups}"),
            ));
        }
        let selector = p
            .label_selector
            .as_ref()
            .map(|s| {
                serde_json::to_value(s)
                    .and_then(serde_json::from_value::<LabelSelector>)
                    .map_err(|e| (field("labelSelector"), e.to_string()))
            })
            .transpose()?;
        out.push(SubGroupPolicy {
            name: p.name.clone().unwrap_or_else(|| format!("{i}")).into(),
            size: size as u32,
            min_groups: min_groups as u32,
            selector,
            match_label_keys: p.match_label_keys.clone().unwrap_or_default(),
            topology: p
                .network_topology
                .as_ref()
                .map(|t| network_topology(t, object, &field("networkTopology"))),
        });
    }
    Ok(out)
}

/// A resource list of a Volcano object (a PodGroup's minResources, a Queue's capability,
/// deserved or guarantee) read as Volcano's scheduler reads it: `NewResource` in
/// pkg/scheduler/api/resource_info.go (v1.15.1) keeps only names that are resources, so the
/// quota-style keys Volcano's job controller writes beside them (`count/pods`,
/// `requests.cpu`, `limits.memory`, `requests.nvidia.com/gpu`: the pod's quota usage) are
/// left out instead of becoming resources no node has.
fn volcano_resources(list: &BTreeMap<String, Quantity>) -> Result<Resource, QuantityError> {
    Resource::from_quantities(
        list.iter()
            .filter(|(name, _)| is_volcano_resource_name(name))
            .map(|(k, v)| (k.as_str(), v.0.as_str())),
    )
}

/// Whether Volcano's scheduler counts `name` as a resource (`NewResource`, v1.15.1): cpu,
/// memory, pods and ephemeral-storage by name; `count/*` never (`IsCountQuota`); anything
/// else only if kube-scheduler's `IsScalarResourceName` (pkg/scheduler/util) says so.
pub fn is_volcano_resource_name(name: &str) -> bool {
    match name {
        "cpu" | "memory" | "pods" | "ephemeral-storage" => true,
        _ if name.starts_with("count/") => false,
        _ => is_scalar_resource_name(name),
    }
}

/// kube-scheduler's `IsScalarResourceName`: an extended resource, `hugepages-*`, a
/// `kubernetes.io/`-prefixed native resource or `attachable-volumes-*`.
fn is_scalar_resource_name(name: &str) -> bool {
    const NATIVE_PREFIX: &str = "kubernetes.io/";
    let prefixed_native = name.contains(NATIVE_PREFIX);
    // `IsExtendedResourceName`: not native (a name without a domain, or a kubernetes.io one),
    // not a `requests.` quota name, and still a qualified name once prefixed with
    // `requests.` (which is how quota would name it).
    let native = !name.contains('/') || prefixed_native;
    let extended =
        !native && !name.starts_with("requests.") && is_qualified_name(&format!("requests.{name}"));
    extended
        || name.starts_with("hugepages-")
        || prefixed_native
        || name.starts_with("attachable-volumes-")
}

/// apimachinery's `IsQualifiedName`: an optional DNS-subdomain prefix and `/`, then a name of
/// at most 63 characters, alphanumeric at both ends, `-`, `_` and `.` inside.
fn is_qualified_name(value: &str) -> bool {
    let (prefix, name) = match value.split('/').collect::<Vec<_>>()[..] {
        [name] => (None, name),
        [prefix, name] => (Some(prefix), name),
        _ => return false,
    };
    let alnum_ends = |s: &str| {
        s.starts_with(|c: char| c.is_ascii_alphanumeric())
            && s.ends_with(|c: char| c.is_ascii_alphanumeric())
    };
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && alnum_ends(name)
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|label| {
                !label.is_empty()
                    && label.len() <= 63
                    && label
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                    && alnum_ends(label)
            })
    });
    name_ok && prefix_ok
}

/// `spec.networkTopology` as the engine's request. What is wrong with it (a mode that is
/// neither hard nor soft, a tier below 1) is the request's `problem`: the driver reports it
/// on the PodGroup, and the engine makes a hard gang wait with it. `highestTierName` names
/// a tier by the `tierName` of its HyperNodes and is used when `highestTierAllowed` is not
/// set (Volcano's `translateHighestTierNameToAllowed`, framework/session.go, v1.15.1).
fn network_topology(t: &api::NetworkTopologySpec, object: &str, field: &str) -> TopologyRequest {
    let mut request = TopologyRequest::from_volcano_field(
        t.mode.as_ref().map(|m| m.as_str()),
        t.highest_tier_allowed,
        object,
        field,
    );
    if let (None, Some(name)) = (t.highest_tier_allowed, &t.highest_tier_name) {
        if !name.is_empty() {
            request.bound = crate::model::TopologyBound::TierName(name.clone());
        }
    }
    request
}

/// The queue annotation giving the runtime estimate of its pods that give none.
pub const DEFAULT_RUNTIME_ESTIMATE: &str = "rust-batch.io/default-runtime-estimate";

/// The queue annotation giving how long its pods run before preempt or reclaim may take
/// them.
pub const MIN_RUNTIME: &str = "rust-batch.io/min-runtime";
/// The queue annotation giving how long its gangs wait before they may evict others.
pub const PREEMPTION_DELAY: &str = "rust-batch.io/preemption-delay";

/// A queue's duration annotation (ms), if set: a positive duration of at most a year (as a
/// pod's own runtime estimate must be).
fn duration_annotation(q: &Queue, key: &str) -> Result<Option<i64>, String> {
    let Some(text) = q.metadata.annotations.as_ref().and_then(|a| a.get(key)) else {
        return Ok(None);
    };
    duration_value(text).map(Some)
}

/// A duration annotation's value (ms): a positive duration of at most a year (as a pod's
/// own runtime estimate must be). Queues and PriorityClasses read theirs with it.
pub fn duration_value(text: &str) -> Result<i64, String> {
    let ms = humantime::parse_duration(text.trim())
        .map_err(|e| format!("{text:?} is not a duration ({e}); write e.g. \"2h\""))?
        .as_millis();
    if ms == 0 || ms > crate::model::MAX_ESTIMATE_MS as u128 {
        return Err(format!(
            "{text:?} must be more than zero and at most a year"
        ));
    }
    Ok(ms as i64)
}

pub fn queue_to_info(q: &Queue) -> Result<QueueInfo, ConvertError> {
    let name = q.name_any();
    let err = |field: &str, message: String| ConvertError {
        object: format!("queue {name}"),
        field: field.into(),
        message,
    };
    let weight = q.spec.weight.unwrap_or(1);
    if weight <= 0 {
        return Err(err(
            "spec.weight",
            format!("must be at least 1, got {weight}"),
        ));
    }
    let mut info = QueueInfo::new(&name, weight as u32);
    if let Some(c) = &q.spec.capability {
        info.capability =
            Some(volcano_resources(c).map_err(|e| err("spec.capability", e.to_string()))?);
    }
    if let Some(g) = q.spec.guarantee.as_ref().and_then(|g| g.resource.as_ref()) {
        info.guarantee =
            Some(volcano_resources(g).map_err(|e| err("spec.guarantee.resource", e.to_string()))?);
    }
    if let Some(d) = &q.spec.deserved {
        info.deserved =
            Some(volcano_resources(d).map_err(|e| err("spec.deserved", e.to_string()))?);
    }
    info.reclaimable = q.spec.reclaimable.unwrap_or(true);
    info.parent = q.spec.parent.as_deref().map(Into::into);
    info.priority = q.spec.priority.unwrap_or(0);
    let duration = |key: &str| {
        duration_annotation(q, key).map_err(|m| err(&format!("metadata.annotations[{key}]"), m))
    };
    info.default_runtime_estimate = duration(DEFAULT_RUNTIME_ESTIMATE)?;
    info.min_runtime = duration(MIN_RUNTIME)?;
    info.preemption_delay = duration(PREEMPTION_DELAY)?;
    // A record that cannot be read costs fairness over time, never the queue.
    info.recorded_usage = q
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(usage_record::USAGE))
        .and_then(|text| match usage_record::parse(text) {
            Ok(u) => Some(u),
            Err(why) => {
                tracing::warn!(queue = %name, annotation = usage_record::USAGE, %why, "usage record ignored");
                None
            }
        });
    info.refused = required_node_groups(q);
    info.state = match q
        .status
        .as_ref()
        .and_then(|s| s.state.as_ref())
        .map(|s| s.as_str().to_string())
        .as_deref()
    {
        Some("Closed") => QueueState::Closed,
        Some("Closing") => QueueState::Closing,
        _ => QueueState::Open,
    };
    info.created = q
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0.as_millisecond())
        .unwrap_or(0);
    Ok(info)
}

/// The status the scheduler wants a PodGroup to have.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupStatus {
    pub phase: PodGroupPhase,
    pub running: i32,
    pub succeeded: i32,
    pub failed: i32,
    pub condition: Option<JobCondition>,
}

impl GroupStatus {
    pub fn of(job: &JobInfo, condition: Option<&JobCondition>) -> Self {
        let n = |s: TaskStatus| job.count(s) as i32;
        GroupStatus {
            phase: job.phase,
            running: n(TaskStatus::Running) + n(TaskStatus::Bound) + n(TaskStatus::Binding),
            succeeded: n(TaskStatus::Succeeded),
            failed: n(TaskStatus::Failed),
            condition: condition.cloned(),
        }
    }
}

/// A merge patch for the PodGroup's status, or None when it already says all this. The
/// PodGroup has no status subresource, so the patch goes to the object itself.
pub fn status_patch(pg: &PodGroup, desired: &GroupStatus, now_ms: i64) -> Option<Value> {
    let current = pg.status.clone().unwrap_or_default();
    let phase = api::PodGroupPhase::from(desired.phase);
    let mut changed = current.phase.as_ref() != Some(&phase)
        || current.running.unwrap_or(0) != desired.running
        || current.succeeded.unwrap_or(0) != desired.succeeded
        || current.failed.unwrap_or(0) != desired.failed;
    let mut conditions: Vec<Value> = current
        .conditions
        .iter()
        .flatten()
        .filter_map(|c| serde_json::to_value(c).ok())
        .collect();
    if let Some(c) = &desired.condition {
        let kind = api::PodGroupConditionType::from(c.kind);
        let kind = kind.as_str();
        let existing = conditions.iter().position(|v| v["type"] == kind);
        let same = existing.is_some_and(|i| {
            conditions[i]["message"] == c.message.as_str()
                && conditions[i]["reason"] == c.reason.as_str()
                && conditions[i]["status"] == "True"
        });
        let time = k8s_openapi::jiff::Timestamp::from_millisecond(now_ms)
            .map(|t| t.to_string())
            .unwrap_or_default();
        if !same {
            changed = true;
            let value = json!({
                "type": kind,
                "status": "True",
                "reason": c.reason,
                "message": c.message,
                "lastTransitionTime": time,
                "transitionID": format!("{now_ms}"),
            });
            match existing {
                Some(i) => conditions[i] = value,
                None => conditions.push(value),
            }
        }
        // Scheduled and Unschedulable exclude each other, and the one that no longer holds
        // keeps no message of when it did (a Running gang saying "not admitted" misleads).
        let other = api::PodGroupConditionType::from(match c.kind {
            ConditionKind::Scheduled => ConditionKind::Unschedulable,
            ConditionKind::Unschedulable => ConditionKind::Scheduled,
        });
        let other = other.as_str();
        for v in conditions.iter_mut() {
            let stale =
                v["status"] == "True" || v["message"].as_str().is_some_and(|m| !m.is_empty());
            if v["type"] == other && stale {
                changed = true;
                v["status"] = "False".into();
                v["reason"] = c.reason.as_str().into();
                v["message"] = "".into();
                v["lastTransitionTime"] = time.as_str().into();
            }
        }
    }
    changed.then(|| {
        json!({"status": {
            "phase": phase,
            "running": desired.running,
            "succeeded": desired.succeeded,
            "failed": desired.failed,
            "conditions": conditions,
        }})
    })
}

/// A merge patch for a Queue's status (counts of its PodGroups per phase, the resources its
/// running pods hold, state Open), or None when it already says so.
pub fn queue_status_patch(q: &Queue, gangs: &crate::snapshot::QueueSums) -> Option<Value> {
    let counts = gangs.phases.map(|n| i32::try_from(n).unwrap_or(i32::MAX));
    let allocated: std::collections::BTreeMap<String, String> = gangs
        .allocated
        .dimensions()
        .map(|(n, v)| (n.to_string(), crate::model::resource::format_amount(n, v)))
        .collect();
    let current = q.status.clone().unwrap_or_default();
    let current_allocated: std::collections::BTreeMap<String, String> = current
        .allocated
        .iter()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect();
    let state = current
        .state
        .as_ref()
        .map(|s| s.as_str().to_string())
        .unwrap_or_else(|| "Open".into());
    let same = current.pending.unwrap_or(0) == counts[0]
        && current.inqueue.unwrap_or(0) == counts[1]
        && current.running.unwrap_or(0) == counts[2]
        && current.unknown.unwrap_or(0) == counts[3]
        && current.completed.unwrap_or(0) == counts[4]
        && current_allocated == allocated
        && current.state.is_some();
    if same {
        return None;
    }
    // Resources no longer held are removed with null (a merge patch keeps absent keys).
    let mut alloc = serde_json::Map::new();
    for k in current_allocated.keys() {
        alloc.insert(k.clone(), Value::Null);
    }
    for (k, v) in &allocated {
        alloc.insert(k.clone(), Value::String(v.clone()));
    }
    Some(json!({"status": {
        "state": state,
        "pending": counts[0],
        "inqueue": counts[1],
        "running": counts[2],
        "unknown": counts[3],
        "completed": counts[4],
        "allocated": alloc,
    }}))
}

/// Required node groups (`spec.affinity`, honoured in Volcano by its nodegroup plugin,
/// which rust-batch does not have): the queue's gangs wait rather than run outside them.
fn required_node_groups(q: &Queue) -> Option<String> {
    let affinity = q.spec.affinity.as_ref()?;
    let required = |a: &Option<api::NodeGroupAffinity>| {
        a.as_ref()
            .and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .is_some_and(|groups| !groups.is_empty())
    };
    let field = if required(&affinity.node_group_affinity) {
        "nodeGroupAffinity"
    } else if required(&affinity.node_group_anti_affinity) {
        "nodeGroupAntiAffinity"
    } else {
        return None;
    };
    Some(format!(
        "spec.affinity.{field}.requiredDuringSchedulingIgnoredDuringExecution (Volcano's \
         nodegroup plugin) is not supported by rust-batch; its gangs wait rather than run \
         outside their node groups"
    ))
}

/// Node groups a queue only prefers (`spec.affinity` preferred terms): placement ignores
/// them, and the queue is told so.
fn preferred_node_groups_ignored(q: &Queue) -> Option<String> {
    let affinity = q.spec.affinity.as_ref()?;
    let preferred = [
        &affinity.node_group_affinity,
        &affinity.node_group_anti_affinity,
    ]
    .into_iter()
    .flatten()
    .any(|a| {
        a.preferred_during_scheduling_ignored_during_execution
            .as_ref()
            .is_some_and(|g| !g.is_empty())
    });
    preferred.then(|| {
        "spec.affinity preferred node groups (Volcano's nodegroup plugin) are not supported \
         by rust-batch: its pods are placed without that preference"
            .to_string()
    })
}

/// What is wrong with each queue, if anything: a parent that does not exist, a parent chain
/// that loops, a guarantee above the capability. Such queues get an event; everything else
/// keeps being scheduled.
pub fn queue_problems<'a>(
    queues: impl IntoIterator<Item = &'a Queue>,
) -> std::collections::BTreeMap<String, String> {
    // The engine's own view (the queues it could read), so events say what scheduling does.
    let queues: Vec<&Queue> = queues.into_iter().collect();
    let infos: Vec<QueueInfo> = queues
        .iter()
        .filter_map(|q| queue_to_info(q).ok())
        .collect();
    let mut problems: std::collections::BTreeMap<String, String> = queues
        .iter()
        .filter_map(|q| Some((q.name_any(), preferred_node_groups_ignored(q)?)))
        .collect();
    for q in &infos {
        if let Some(p) = q.refused.clone().or_else(|| q.guarantee_problem()) {
            problems.insert(q.name.to_string(), p);
        }
    }
    for (name, problem) in crate::model::QueueTree::new(infos.iter()).problems() {
        problems.insert(name.to_string(), problem.clone());
    }
    problems
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod pod_group_tests;

#[cfg(test)]
mod network_topology_tests;
