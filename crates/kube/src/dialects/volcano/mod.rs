//! Volcano (`scheduling.volcano.sh/v1beta1`): the pod keys that name a gang, the PodGroup
//! and Queue types (`api`), their conversion to the engine's gangs and queues, and the
//! PodGroup and Queue status the scheduler writes back (phase, counts, conditions), patched
//! only when it changed. `hypernode` holds Volcano's network topology objects
//! (`topology.volcano.sh/v1alpha1` HyperNode), which the scheduler only reads.

pub mod api;
pub mod fields;
pub mod hypernode;

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
/// The role of a pod within its gang (minTaskMember keys).
pub const TASK_SPEC_ANNOTATION: &str = "volcano.sh/task-spec";
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
        .and_then(|a| a.get(crate::usage::USAGE))
        .and_then(|text| match crate::usage::parse(text) {
            Ok(u) => Some(u),
            Err(why) => {
                tracing::warn!(queue = %name, annotation = crate::usage::USAGE, %why, "usage record ignored");
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
mod tests {
    use super::*;

    fn queue(name: &str, spec: serde_json::Value) -> Queue {
        serde_json::from_value(json!({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": name}, "spec": spec})).unwrap()
    }

    #[test]
    fn queue_problems_are_named() {
        let qs = [
            queue("root-child", json!({"parent": "root"})),
            queue("orphan", json!({"parent": "nowhere"})),
            queue("a", json!({"parent": "b"})),
            queue("b", json!({"parent": "a"})),
            queue(
                "greedy",
                json!({"capability": {"cpu": "4"}, "guarantee": {"resource": {"cpu": "8", "memory": "1Gi"}}}),
            ),
            queue(
                "fine",
                json!({"capability": {"cpu": "8"}, "guarantee": {"resource": {"cpu": "4"}}}),
            ),
        ];
        let p = queue_problems(qs.iter());
        assert_eq!(p["orphan"], "spec.parent: queue \"nowhere\" does not exist");
        assert_eq!(p["a"], "spec.parent: queues a -> b form a cycle");
        assert_eq!(p["b"], p["a"]);
        assert_eq!(
            p["greedy"],
            "spec.guarantee: cpu 8 is above the capability 4"
        );
        assert!(
            !p.contains_key("fine") && !p.contains_key("root-child"),
            "{p:?}"
        );
    }

    #[test]
    fn queue_status_counts_gangs_per_phase_and_is_not_written_again_once_stored() {
        let mut gangs = crate::snapshot::QueueSums {
            phases: [1, 0, 2, 0, 0],
            ..Default::default()
        };
        gangs.allocated.milli_cpu = 1500;
        let mut q = queue("q", json!({}));
        q.status = Some(serde_json::from_value(json!({"allocated": {"memory": "1Gi"}})).unwrap());
        let patch = queue_status_patch(&q, &gangs).expect("the counts are news");
        assert_eq!(
            patch["status"],
            json!({"state": "Open", "pending": 1, "inqueue": 0, "running": 2, "unknown": 0,
                   "completed": 0, "allocated": {"cpu": "1500m", "memory": null}})
        );
        // Stored as patched: nothing more to write.
        let mut stored = patch["status"].clone();
        stored["allocated"] = json!({"cpu": "1500m"});
        q.status = Some(serde_json::from_value(stored).unwrap());
        assert_eq!(queue_status_patch(&q, &gangs), None);
    }
}

#[cfg(test)]
mod pod_group_tests {
    use super::*;

    /// Each rule of Volcano's `NewResource` (pkg/scheduler/api/resource_info.go, v1.15.1)
    /// and kube-scheduler's `IsScalarResourceName` it calls, one name each.
    #[test]
    fn resource_names_are_read_as_volcanos_scheduler_reads_them() {
        for kept in [
            "cpu",                        // case v1.ResourceCPU
            "memory",                     // case v1.ResourceMemory
            "pods",                       // case v1.ResourcePods (a task count)
            "ephemeral-storage",          // case v1.ResourceEphemeralStorage
            "nvidia.com/gpu",             // IsExtendedResourceName
            "example.com/foo_bar.baz",    // a qualified name once prefixed with requests.
            "hugepages-2Mi",              // IsHugePageResourceName
            "kubernetes.io/batch-cpu",    // IsPrefixedNativeResource
            "attachable-volumes-aws-ebs", // IsAttachableVolumeResourceName
            // Not native and not starting with "requests.": Volcano counts it.
            "limits.nvidia.com/gpu",
        ] {
            assert!(is_volcano_resource_name(kept), "{kept} must be kept");
        }
        for skipped in [
            "count/pods",              // IsCountQuota
            "count/jobs.batch",        // IsCountQuota
            "requests.cpu",            // native (no '/'), not a scalar name
            "requests.memory",         // native
            "limits.cpu",              // native
            "limits.memory",           // native
            "requests.nvidia.com/gpu", // starts with requests.: not extended
            "storage",                 // native, not in the switch
            "Example.com/gpu",         // the prefix is not a DNS subdomain
            "example.com/a/b",         // two slashes: not a qualified name
            "example.com/-gpu",        // the name must start alphanumeric
        ] {
            assert!(
                !is_volcano_resource_name(skipped),
                "{skipped} must be skipped"
            );
        }
    }

    /// What Volcano's job controller writes into a GPU vcjob's PodGroup (`calcPGMinResources`
    /// sums the pods' quota usage, pkg/controllers/job/job_controller_actions.go) reads as
    /// the plain resources only: the gang is admitted by what it really needs.
    #[test]
    fn the_job_controllers_quota_keys_are_not_resources() {
        let pg: PodGroup = serde_json::from_value(json!({
            "metadata": {"name": "vcjob-gpu", "namespace": "n"},
            "spec": {"minMember": 3, "minResources": {
                "count/pods": "3", "pods": "3",
                "cpu": "3", "requests.cpu": "3", "limits.cpu": "3",
                "memory": "3Gi", "requests.memory": "3Gi", "limits.memory": "3Gi",
                "requests.nvidia.com/gpu": "4",
            }}
        }))
        .unwrap();
        let job = pod_group_to_job(&pg, &HashMap::new()).unwrap();
        let want =
            Resource::from_quantities([("cpu", "3"), ("memory", "3Gi"), ("pods", "3")]).unwrap();
        assert_eq!(job.min_resources, Some(want));
    }

    #[test]
    fn a_scheduled_gang_keeps_no_stale_unschedulable_message() {
        use crate::framework::GangReason;
        let pg: PodGroup = serde_json::from_value(json!({
            "metadata": {"name": "g", "namespace": "n"},
            "spec": {"minMember": 2},
            "status": {"phase": "Inqueue", "conditions": [{
                "type": "Unschedulable", "status": "True", "reason": "NotEnoughResources",
                "message": "2/2 tasks in gang unschedulable: not admitted: queue \"default\" …",
                "lastTransitionTime": "2026-11-28T00:00:00Z"}]}
        }))
        .unwrap();
        let desired = GroupStatus {
            phase: PodGroupPhase::Running,
            running: 2,
            succeeded: 0,
            failed: 0,
            condition: Some(JobCondition {
                kind: ConditionKind::Scheduled,
                reason: GangReason::Scheduled,
                message: "2/2 tasks in gang scheduled".into(),
            }),
        };
        let now = 1_795_000_000_000;
        let patch = status_patch(&pg, &desired, now).expect("a change");
        let conditions = patch["status"]["conditions"].as_array().unwrap();
        let of = |kind: &str| conditions.iter().find(|c| c["type"] == kind).unwrap();
        assert_eq!(of("Scheduled")["status"], "True");
        let unschedulable = of("Unschedulable");
        assert_eq!(unschedulable["status"], "False");
        assert_eq!(unschedulable["message"], "", "no message of when it held");
        assert_eq!(unschedulable["reason"], "Scheduled");
        // Written once: the same status again is no change.
        let mut written = pg.clone();
        written.status = Some(serde_json::from_value(patch["status"].clone()).unwrap());
        assert_eq!(status_patch(&written, &desired, now + 1000), None);
    }

    #[test]
    fn sub_group_policies_convert_with_volcanos_defaults_and_name_bad_fields() {
        let pg = |policy: serde_json::Value| -> PodGroup {
            serde_json::from_value(json!({
                "metadata": {"name": "lws", "namespace": "n"},
                "spec": {"minMember": 4, "subGroupPolicy": [policy]}
            }))
            .unwrap()
        };
        let job = pod_group_to_job(
            &pg(
                json!({"name": "replicas", "subGroupSize": 4, "minSubGroups": 2,
                       "labelSelector": {"matchLabels": {"role": "worker"}},
                       "matchLabelKeys": ["leaderworkerset.sigs.k8s.io/group-index"]}),
            ),
            &HashMap::new(),
        )
        .unwrap();
        let p = &job.subgroups[0];
        assert_eq!((&*p.name, p.size, p.min_groups), ("replicas", 4, 2));
        assert_eq!(
            p.match_label_keys,
            ["leaderworkerset.sigs.k8s.io/group-index"]
        );
        assert!(p.selector.is_some());
        // Defaults: size 1, minSubGroups 0, named by position.
        let job = pod_group_to_job(&pg(json!({})), &HashMap::new()).unwrap();
        let p = &job.subgroups[0];
        assert_eq!((&*p.name, p.size, p.min_groups), ("0", 1, 0));
        let bad = pod_group_to_job(&pg(json!({"subGroupSize": 0})), &HashMap::new()).unwrap_err();
        assert_eq!(bad.field, "spec.subGroupPolicy[0].subGroupSize");
        let bad = pod_group_to_job(
            &pg(json!({"labelSelector": {"matchExpressions": [{"key": "a", "operator": "Near"}]}})),
            &HashMap::new(),
        )
        .unwrap_err();
        assert_eq!(bad.field, "spec.subGroupPolicy[0].labelSelector");
        // A subgroup's topology is its own (each subgroup in a domain), not the gang's.
        let job = pod_group_to_job(
            &pg(json!({"networkTopology": {"mode": "hard", "highestTierAllowed": 1}})),
            &HashMap::new(),
        )
        .unwrap();
        assert!(job.topology.is_none());
        let t = job.subgroups[0].topology.as_ref().unwrap();
        assert_eq!(t.mode, crate::model::TopologyMode::Hard);
        assert_eq!(t.bound, crate::model::TopologyBound::Tier(1));
        assert_eq!(t.source, "spec.subGroupPolicy[0].networkTopology");
    }

    #[test]
    fn required_node_groups_close_the_queue_and_preferred_ones_are_said_ignored() {
        let q = |name: &str, affinity: serde_json::Value| -> Queue {
            serde_json::from_value(json!({
                "metadata": {"name": name},
                "spec": {"weight": 1, "priority": 3, "affinity": affinity}
            }))
            .unwrap()
        };
        let required = q(
            "pinned",
            json!({"nodeGroupAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": ["g1"]}}),
        );
        let preferred = q(
            "leaning",
            json!({"nodeGroupAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": ["g2"]}}),
        );
        let info = queue_to_info(&required).unwrap();
        assert_eq!(info.priority, 3);
        assert!(info.refused.as_deref().is_some_and(|r| r.starts_with(
            "spec.affinity.nodeGroupAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        )));
        assert_eq!(queue_to_info(&preferred).unwrap().refused, None);
        let problems = queue_problems([&required, &preferred]);
        assert_eq!(Some(&problems["pinned"]), info.refused.as_ref());
        assert!(problems["leaning"].contains("placed without that preference"));
        // The engine keeps new work out of it, naming why.
        let mut cache = crate::testkit::cache_with_default_queue();
        cache.apply_queue(info);
        crate::testkit::add_nodes(&mut cache, "n", 1, &[("cpu", "4")]);
        let job = crate::testkit::Gang::new("j", 1)
            .queue("pinned")
            .phase(PodGroupPhase::Inqueue)
            .tasks("", 1, &[("cpu", "1")])
            .apply(&mut cache);
        let result = crate::testkit::run_cycle(&cache, None);
        assert!(result.binds.is_empty());
        assert!(crate::testkit::condition_message(&result, &job)
            .is_some_and(|m| m.contains("queue \"pinned\" takes no work: spec.affinity")));
    }

    #[test]
    fn a_queues_default_runtime_estimate_is_read_and_a_bad_one_named() {
        let q = |v: &str| -> Queue {
            serde_json::from_value(json!({
                "metadata": {"name": "q", "annotations": {DEFAULT_RUNTIME_ESTIMATE: v}},
                "spec": {}
            }))
            .unwrap()
        };
        assert_eq!(
            queue_to_info(&q("2h")).unwrap().default_runtime_estimate,
            Some(7_200_000)
        );
        for bad in ["soon", "0s", "400days"] {
            let e = queue_to_info(&q(bad)).unwrap_err().to_string();
            assert!(
                e.contains("metadata.annotations[rust-batch.io/default-runtime-estimate]")
                    && e.contains(bad),
                "{e}"
            );
        }
    }

    #[test]
    fn a_queues_recorded_usage_is_read_back_and_a_bad_one_ignored() {
        let q = |v: &str| -> Queue {
            serde_json::from_value(json!({
                "metadata": {"name": "q", "annotations": {crate::usage::USAGE: v}},
                "spec": {}
            }))
            .unwrap()
        };
        let info = queue_to_info(&q(
            r#"{"at":"1970-01-01T00:00:01Z","amounts":{"nvidia.com/gpu":8.5}}"#,
        ))
        .unwrap();
        let usage = info.recorded_usage.unwrap();
        assert_eq!(usage.at, 1000);
        assert_eq!(usage.amounts["nvidia.com/gpu"], 8.5);
        // A record that cannot be read costs the history, not the queue.
        let info = queue_to_info(&q("garbage")).unwrap();
        assert_eq!(info.recorded_usage, None);
    }

    /// The same rules hold for a Queue's lists: a quota-style key never limits a queue.
    #[test]
    fn queue_lists_skip_quota_keys_too() {
        let q: Queue = serde_json::from_value(json!({
            "metadata": {"name": "q"},
            "spec": {"capability": {"cpu": "8", "requests.cpu": "1", "count/pods": "1"},
                     "deserved": {"nvidia.com/gpu": "2", "limits.memory": "1Gi"}}
        }))
        .unwrap();
        let info = queue_to_info(&q).unwrap();
        assert_eq!(
            info.capability,
            Some(Resource::from_quantities([("cpu", "8")]).unwrap())
        );
        assert_eq!(
            info.deserved,
            Some(Resource::from_quantities([("nvidia.com/gpu", "2")]).unwrap())
        );
    }

    #[test]
    fn the_queue_comes_from_spec_then_the_queue_name_annotation_then_default() {
        let pg = |value: serde_json::Value| -> PodGroup { serde_json::from_value(value).unwrap() };
        let job = |p: &PodGroup| pod_group_to_job(p, &HashMap::new()).unwrap().queue;
        let annotated = json!({"name": "g", "namespace": "n",
            "annotations": {"scheduling.volcano.sh/queue-name": "team-a"}});
        assert_eq!(
            job(&pg(
                json!({"metadata": annotated, "spec": {"queue": "team-b"}})
            )),
            "team-b"
        );
        assert_eq!(
            job(&pg(json!({"metadata": annotated, "spec": {}}))),
            "team-a"
        );
        assert_eq!(
            job(&pg(json!({"metadata": {"name": "g", "namespace": "n"}}))),
            "default"
        );
    }
}

#[cfg(test)]
mod network_topology_tests {
    use super::*;
    use crate::model::{TopologyBound, TopologyMode};

    fn topology(network_topology: serde_json::Value) -> Option<TopologyRequest> {
        let pg: PodGroup = serde_json::from_value(json!({
            "metadata": {"name": "g", "namespace": "n"},
            "spec": {"minMember": 2, "networkTopology": network_topology}
        }))
        .unwrap();
        pod_group_to_job(&pg, &HashMap::new()).unwrap().topology
    }

    #[test]
    fn network_topology_becomes_the_gangs_request() {
        let hard = topology(json!({"mode": "hard", "highestTierAllowed": 2})).unwrap();
        assert_eq!(
            (hard.mode, hard.bound, hard.problem),
            (TopologyMode::Hard, TopologyBound::Tier(2), None)
        );
        assert_eq!(hard.source, "spec.networkTopology");
        let soft = topology(json!({"mode": "soft"})).unwrap();
        assert_eq!(
            (soft.mode, soft.bound),
            (TopologyMode::Soft, TopologyBound::Unbounded)
        );
        // Upstream's default mode is hard, and a hard request without a tier means tier 1.
        let bare = topology(json!({})).unwrap();
        assert_eq!(
            (bare.mode, bare.bound),
            (TopologyMode::Hard, TopologyBound::Tier(1))
        );
        let pg: PodGroup = serde_json::from_value(json!({
            "metadata": {"name": "g", "namespace": "n"}, "spec": {"minMember": 2}
        }))
        .unwrap();
        assert_eq!(
            pod_group_to_job(&pg, &HashMap::new()).unwrap().topology,
            None
        );
    }

    #[test]
    fn a_malformed_network_topology_names_the_podgroup_and_field() {
        let low = topology(json!({"mode": "hard", "highestTierAllowed": 0})).unwrap();
        assert_eq!(
            low.problem.as_deref(),
            Some("PodGroup n/g: spec.networkTopology.highestTierAllowed must be at least 1, got 0")
        );
        let odd = topology(json!({"mode": "strict", "highestTierAllowed": 1})).unwrap();
        assert!(
            odd.problem.as_deref().is_some_and(
                |p| p.starts_with("PodGroup n/g: spec.networkTopology.mode \"strict\"")
            ),
            "{odd:?}"
        );
        // highestTierName names a tier (resolved against the HyperNodes' tierName by the
        // placement); highestTierAllowed wins when both are set, as in Volcano.
        let named = topology(json!({"mode": "hard", "highestTierName": "spine"})).unwrap();
        assert_eq!(named.problem, None);
        assert_eq!(named.bound, TopologyBound::TierName("spine".into()));
        let both = topology(json!({"highestTierName": "spine", "highestTierAllowed": 2})).unwrap();
        assert_eq!(both.bound, TopologyBound::Tier(2));
    }
}
