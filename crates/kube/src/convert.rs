//! Kubernetes objects → the engine's model. Bad input (an unparsable quantity, a negative
//! request) is returned as an error naming the object and field, never a panic; the driver
//! turns it into an event and keeps serving everyone else.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use thiserror::Error;

use crate::cache::PodUpdate;
use crate::model::placement::{
    NodeSelectorRequirement, NodeSelectorTerm, PreferredSchedulingTerm, SelectorOperator, Taint,
    TaintEffect, Toleration, TolerationOperator,
};
use crate::model::pod_rules::{HostPort, PodRules};
use crate::model::resource::{pod_requests, QuantityError};
use crate::model::{
    NodeSpec, Placement, Resource, TaskInfo, TaskStatus, Timestamp, TopologyRequest,
};

/// The role of a pod within its gang (Volcano's minTaskMember keys).
pub const TASK_SPEC_ANNOTATION: &str = "volcano.sh/task-spec";

/// How long a fake pod runs on kwok (a Go duration such as "30s"): the test harness's
/// stage completes it then. Not read by the scheduler.
pub const RUNTIME_ANNOTATION: &str = "rust-batch.io/runtime";
/// The user's estimate of a pod's runtime (a Go duration such as "30m" or "1h30m"). Backfill
/// uses it to know when running pods free their nodes and whether a small job ends before a
/// waiting gang's reservation. `spec.activeDeadlineSeconds` serves when it is absent.
pub const RUNTIME_ESTIMATE_ANNOTATION: &str = "rust-batch.io/runtime-estimate";

#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("{object}: {field}: {message}")]
pub struct ConvertError {
    pub object: String,
    pub field: String,
    pub message: String,
}

/// Reason of the event for an unparsable runtime estimate.
pub const BAD_RUNTIME_ESTIMATE: &str = "BadRuntimeEstimate";
/// Reason of the event for a malformed topology request (Kueue TAS annotations on a pod,
/// Volcano's `spec.networkTopology` on a PodGroup).
pub const INVALID_NETWORK_TOPOLOGY: &str = "InvalidNetworkTopology";

/// A problem with a pod that does not stop it from being scheduled; the driver reports it
/// as a Warning event with this reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodWarning {
    pub reason: &'static str,
    pub message: String,
}

pub fn resource_list(list: Option<&BTreeMap<String, Quantity>>) -> Result<Resource, QuantityError> {
    let Some(list) = list else {
        return Ok(Resource::new());
    };
    Resource::from_quantities(list.iter().map(|(k, v)| (k.as_str(), v.0.as_str())))
}

fn requests(r: Option<&ResourceRequirements>) -> Result<Resource, QuantityError> {
    // As Kubernetes does: limits stand in for missing requests.
    let Some(r) = r else {
        return Ok(Resource::new());
    };
    let mut out = resource_list(r.limits.as_ref())?;
    let req = resource_list(r.requests.as_ref())?;
    for (name, value) in req.dimensions() {
        out.set(name, value);
    }
    Ok(out)
}

fn millis(t: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>) -> Timestamp {
    t.map(|t| t.0.as_millisecond()).unwrap_or(0)
}

/// The task status Volcano derives from a pod.
pub fn pod_status(pod: &Pod) -> TaskStatus {
    let deleting = pod.metadata.deletion_timestamp.is_some();
    let bound = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_ref())
        .is_some_and(|n| !n.is_empty());
    match pod.status.as_ref().and_then(|s| s.phase.as_deref()) {
        Some("Succeeded") => TaskStatus::Succeeded,
        Some("Failed") => TaskStatus::Failed,
        Some("Unknown") => TaskStatus::Unknown,
        _ if deleting => TaskStatus::Releasing,
        Some("Running") => TaskStatus::Running,
        _ if bound => TaskStatus::Bound,
        _ => TaskStatus::Pending,
    }
}

pub(crate) fn selector_term(
    t: &k8s_openapi::api::core::v1::NodeSelectorTerm,
) -> Result<NodeSelectorTerm, String> {
    let conv = |rs: &Option<Vec<k8s_openapi::api::core::v1::NodeSelectorRequirement>>| -> Result<Vec<NodeSelectorRequirement>, String> {
        rs.iter()
            .flatten()
            .map(|r| {
                let operator = match r.operator.as_str() {
                    "In" => SelectorOperator::In,
                    "NotIn" => SelectorOperator::NotIn,
                    "Exists" => SelectorOperator::Exists,
                    "DoesNotExist" => SelectorOperator::DoesNotExist,
                    "Gt" => SelectorOperator::Gt,
                    "Lt" => SelectorOperator::Lt,
                    other => return Err(format!("unknown operator {other:?}")),
                };
                Ok(NodeSelectorRequirement {
                    key: r.key.clone(),
                    operator,
                    values: r.values.clone().unwrap_or_default(),
                })
            })
            .collect()
    };
    Ok(NodeSelectorTerm {
        match_expressions: conv(&t.match_expressions)?,
        match_fields: conv(&t.match_fields)?,
    })
}

/// A Kubernetes value as the engine's type of the same shape (the model keeps the API's
/// field names), or the path of the first field it cannot take.
fn same_shape<K: serde::Serialize, M: serde::de::DeserializeOwned>(
    value: &K,
) -> Result<M, (String, String)> {
    let json = serde_json::to_value(value).map_err(|e| (String::new(), e.to_string()))?;
    serde_path_to_error::deserialize(json).map_err(|e| {
        let path = e.path().to_string();
        (
            if path == "." { String::new() } else { path },
            e.into_inner().to_string(),
        )
    })
}

type FieldError = (String, String);

/// Preferred node affinity and the rules relative to other pods (inter-pod affinity,
/// anti-affinity, topology spread), with `matchLabelKeys` folded in with the pod's labels;
/// a malformed one names its field.
fn affinity_rules(
    spec: &k8s_openapi::api::core::v1::PodSpec,
    labels: &BTreeMap<String, String>,
) -> Result<(Vec<PreferredSchedulingTerm>, Option<Box<PodRules>>), FieldError> {
    fn at(prefix: &'static str) -> impl Fn(FieldError) -> FieldError {
        move |(path, m): FieldError| {
            let field = if path.is_empty() {
                prefix.to_string()
            } else if path.starts_with('[') {
                format!("{prefix}{path}")
            } else {
                format!("{prefix}.{path}")
            };
            (field, m)
        }
    }
    let affinity = spec.affinity.as_ref();
    let preferred: Vec<PreferredSchedulingTerm> = match affinity
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.preferred_during_scheduling_ignored_during_execution
                .as_ref()
        }) {
        Some(p) => same_shape(p).map_err(at(
            "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution",
        ))?,
        None => Vec::new(),
    };
    let mut rules = PodRules::default();
    if let Some(a) = affinity.and_then(|a| a.pod_affinity.as_ref()) {
        rules.pod_affinity = same_shape(a).map_err(at("spec.affinity.podAffinity"))?;
    }
    if let Some(a) = affinity.and_then(|a| a.pod_anti_affinity.as_ref()) {
        rules.pod_anti_affinity = same_shape(a).map_err(at("spec.affinity.podAntiAffinity"))?;
    }
    if let Some(c) = &spec.topology_spread_constraints {
        rules.topology_spread_constraints =
            same_shape(c).map_err(at("spec.topologySpreadConstraints"))?;
    }
    if let Some(p) = rules.problem() {
        let (field, message) = p.split_once(": ").unwrap_or(("", &p));
        let field = if field.starts_with("topologySpreadConstraints") {
            format!("spec.{field}")
        } else {
            format!("spec.affinity.{field}")
        };
        return Err((field, message.to_string()));
    }
    for (i, t) in preferred.iter().enumerate() {
        if !(1..=100).contains(&t.weight) {
            return Err((
                format!("spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[{i}].weight"),
                format!("must be 1..100, not {}", t.weight),
            ));
        }
    }
    let rules = rules.resolved(labels);
    Ok((preferred, (!rules.is_empty()).then(|| Box::new(rules))))
}

/// The ports a pod takes on its node: every `hostPort`, and with `hostNetwork` every
/// container port (the API server defaults hostPort to it there).
fn host_ports(spec: &k8s_openapi::api::core::v1::PodSpec) -> Vec<HostPort> {
    let host_network = spec.host_network == Some(true);
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .flat_map(|c| c.ports.iter().flatten())
        .filter_map(|p| {
            let port = p
                .host_port
                .filter(|h| *h > 0)
                .or(host_network.then_some(p.container_port))?;
            Some(HostPort {
                port,
                protocol: p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                host_ip: p.host_ip.clone().unwrap_or_default(),
            })
        })
        .collect()
}

fn effect(e: &str) -> Option<TaintEffect> {
    match e {
        "NoSchedule" => Some(TaintEffect::NoSchedule),
        "PreferNoSchedule" => Some(TaintEffect::PreferNoSchedule),
        "NoExecute" => Some(TaintEffect::NoExecute),
        _ => None,
    }
}

/// A pod's runtime estimate in milliseconds: annotation `rust-batch.io/runtime-estimate`,
/// else `spec.activeDeadlineSeconds` (the pod cannot run longer). A bad annotation is an
/// error naming it; the caller may still use the deadline.
pub fn runtime_estimate(pod: &Pod) -> Result<Option<i64>, ConvertError> {
    let deadline = pod
        .spec
        .as_ref()
        .and_then(|s| s.active_deadline_seconds)
        .filter(|s| *s > 0)
        .map(|s| s.saturating_mul(1000));
    let Some(text) = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(RUNTIME_ESTIMATE_ANNOTATION))
    else {
        return Ok(deadline);
    };
    humantime::parse_duration(text.trim())
        .map(|d| Some(d.as_millis().min(i64::MAX as u128) as i64))
        .map_err(|e| ConvertError {
            object: format!(
                "pod {}/{}",
                pod.metadata.namespace.clone().unwrap_or_default(),
                pod.metadata.name.clone().unwrap_or_default()
            ),
            field: format!("metadata.annotations[{RUNTIME_ESTIMATE_ANNOTATION}]"),
            message: format!(
                "{text:?} is not a duration ({e}); write e.g. \"30m\" or \"1h30m\"; the \
                 estimate is ignored"
            ),
        })
}

/// Whether requests add up without overflowing: each quantity fits an i64, a few huge ones
/// together need not. Requests are never negative, so this sum bounds every sum and maximum
/// `pod_requests` takes on the way.
fn countable<'a>(parts: impl Iterator<Item = &'a Resource>) -> Result<(), String> {
    let mut sums: BTreeMap<&str, i64> = BTreeMap::new();
    for part in parts {
        for (name, value) in part.dimensions() {
            let sum = sums.entry(name).or_default();
            *sum = sum.checked_add(value).ok_or_else(|| {
                format!("the requests of {name} add up to more than the scheduler can count")
            })?;
        }
    }
    Ok(())
}

/// A pod as a task. `job` is the gang key (`namespace/name`) when the pod is ours.
pub fn pod_to_update(pod: &Pod, job: Option<String>) -> Result<PodUpdate, ConvertError> {
    pod_to_update_with_warnings(pod, job).map(|(update, _)| update)
}

/// Like `pod_to_update`, with the problems that do not stop the pod from being scheduled
/// (an unparsable runtime estimate is ignored; a malformed Kueue topology annotation is
/// passed on with its problem, for the engine to decide): the driver reports them as
/// Warning events.
pub fn pod_to_update_with_warnings(
    pod: &Pod,
    job: Option<String>,
) -> Result<(PodUpdate, Vec<PodWarning>), ConvertError> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let object = format!("pod {ns}/{name}");
    let err = |field: &str, message: String| ConvertError {
        object: object.clone(),
        field: field.to_string(),
        message,
    };
    // Borrowed, not cloned: this runs for every event of every pod.
    let no_spec;
    let spec = match &pod.spec {
        Some(spec) => spec,
        None => {
            no_spec = PodSpec::default();
            &no_spec
        }
    };
    let mut containers = Vec::new();
    for (i, c) in spec.containers.iter().enumerate() {
        containers.push(
            requests(c.resources.as_ref())
                .map_err(|e| err(&format!("spec.containers[{i}].resources"), e.to_string()))?,
        );
    }
    let mut init = Vec::new();
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        let r = requests(c.resources.as_ref()).map_err(|e| {
            err(
                &format!("spec.initContainers[{i}].resources"),
                e.to_string(),
            )
        })?;
        init.push((r, c.restart_policy.as_deref() == Some("Always")));
    }
    let overhead =
        resource_list(spec.overhead.as_ref()).map_err(|e| err("spec.overhead", e.to_string()))?;
    let pod_level =
        requests(spec.resources.as_ref()).map_err(|e| err("spec.resources", e.to_string()))?;
    countable(
        containers
            .iter()
            .chain(init.iter().map(|(r, _)| r))
            .chain([&overhead, &pod_level]),
    )
    .map_err(|m| err("spec.containers[*].resources", m))?;
    let mut resreq = pod_requests(&containers, &init, None);
    // Pod-level resources (PodLevelResources): what the pod asks for a resource (or its
    // limit, standing in) is the pod's request for it, whatever its containers ask; the
    // overhead comes on top, as in Kubernetes.
    for (name, value) in pod_level.dimensions() {
        resreq.set(name, value);
    }
    resreq.add(&overhead);

    let mut affinity = Vec::new();
    if let Some(required) = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
    {
        for (i, t) in required.node_selector_terms.iter().enumerate() {
            affinity.push(selector_term(t).map_err(|m| {
                err(&format!("spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[{i}]"), m)
            })?);
        }
    }
    let tolerations = spec
        .tolerations
        .iter()
        .flatten()
        .map(|t| Toleration {
            key: t.key.clone().unwrap_or_default(),
            operator: if t.operator.as_deref() == Some("Exists") {
                TolerationOperator::Exists
            } else {
                TolerationOperator::Equal
            },
            value: t.value.clone().unwrap_or_default(),
            effect: t.effect.as_deref().and_then(effect),
        })
        .collect();
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    let (preferred_node_affinity, pod_rules) =
        affinity_rules(spec, &labels).map_err(|(field, m)| err(&field, m))?;
    let placement = Placement {
        node_selector: spec.node_selector.clone().unwrap_or_default(),
        node_affinity: affinity,
        tolerations,
        preferred_node_affinity,
        pod_rules,
        host_ports: host_ports(spec),
        // Resolved by the index, which knows the claims, volumes and classes.
        volumes: None,
    };
    let annotations = pod.metadata.annotations.clone().unwrap_or_default();
    let role = annotations
        .get(TASK_SPEC_ANNOTATION)
        .cloned()
        .unwrap_or_default();
    let uid = pod
        .metadata
        .uid
        .clone()
        .unwrap_or_else(|| format!("{ns}/{name}"));
    let mut task = TaskInfo::new(
        uid,
        ns.as_str(),
        name.as_str(),
        role.as_str(),
        resreq,
        spec.priority.unwrap_or(0),
        Arc::new(placement),
        millis(pod.metadata.creation_timestamp.as_ref()),
    );
    task.labels = Arc::new(labels);
    task.status = pod_status(pod);
    task.node = spec
        .node_name
        .clone()
        .filter(|n| !n.is_empty())
        .map(|n| Arc::from(n.as_str()));
    task.critical = ns == "kube-system"
        || matches!(
            spec.priority_class_name.as_deref(),
            Some("system-cluster-critical" | "system-node-critical")
        );
    task.never_preempts = spec.preemption_policy.as_deref() == Some("Never");
    let mut warnings = Vec::new();
    // Kueue's TAS annotations: the pod set's topology domain.
    task.topology =
        TopologyRequest::from_kueue(&annotations, &format!("{ns}/{name}")).map(|request| {
            if let Some(problem) = &request.problem {
                warnings.push(PodWarning {
                    reason: INVALID_NETWORK_TOPOLOGY,
                    message: problem.clone(),
                });
            }
            Arc::new(request)
        });
    task.estimate = match runtime_estimate(pod) {
        Ok(estimate) => estimate,
        Err(e) => {
            warnings.push(PodWarning {
                reason: BAD_RUNTIME_ESTIMATE,
                message: e.to_string(),
            });
            spec.active_deadline_seconds
                .filter(|s| *s > 0)
                .map(|s| s.saturating_mul(1000))
        }
    };
    task.started = pod
        .status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .map(|t| t.0.as_millisecond());
    Ok((PodUpdate { task, job }, warnings))
}

/// What a pod asks for that the engine does not model, in words for its event and its
/// gang's condition: such a pod waits (the driver keeps it out of the engine) instead of
/// being placed as if it did not ask. `every_pod_spec_field_is_modelled_refused_or_irrelevant`
/// below lists every PodSpec field and how it is treated; a field a new Kubernetes version
/// adds that placement cannot honour goes into `REFUSED`.
pub fn unsupported_fields(spec: &PodSpec) -> Option<String> {
    let found: Vec<&str> = REFUSED
        .iter()
        .filter(|(_, used)| used(spec))
        .map(|(name, _)| *name)
        .collect();
    match found.as_slice() {
        [] => None,
        [one] => Some(format!("{one} is not supported by rust-batch")),
        many => Some(format!(
            "{} are not supported by rust-batch",
            many.join(", ")
        )),
    }
}

/// PodSpec fields a pod is refused for: (the field, whether the pod uses it). Empty: every
/// field is modelled or irrelevant to placement. DRA claims (`spec.resourceClaims`) are
/// modelled (`dra_watch`); what a claim asks that the engine does not model (admin
/// access, consumable capacity, distinctAttribute, a network-attached allocation) blocks
/// that claim with a reason naming it, and its pod waits.
type UsesField = fn(&PodSpec) -> bool;
const REFUSED: &[(&str, UsesField)] = &[];

pub fn node_to_spec(node: &Node) -> Result<NodeSpec, ConvertError> {
    let name = node.metadata.name.clone().unwrap_or_default();
    let status = node.status.clone().unwrap_or_default();
    let mut allocatable = resource_list(status.allocatable.as_ref().or(status.capacity.as_ref()))
        .map_err(|e| ConvertError {
        object: format!("node {name}"),
        field: "status.allocatable".into(),
        message: e.to_string(),
    })?;
    if allocatable.pods == 0 {
        allocatable.pods = 110;
    }
    let ready = status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    let spec = node.spec.clone().unwrap_or_default();
    let taints = spec
        .taints
        .iter()
        .flatten()
        .filter_map(|t| {
            Some(Taint {
                key: t.key.clone(),
                value: t.value.clone().unwrap_or_default(),
                effect: effect(&t.effect)?,
            })
        })
        .collect();
    Ok(NodeSpec {
        name,
        allocatable,
        labels: node.metadata.labels.clone().unwrap_or_default(),
        taints,
        unschedulable: spec.unschedulable.unwrap_or(false),
        ready,
    })
}

#[cfg(test)]
mod tests;
