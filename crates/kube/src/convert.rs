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

use super::dialects::TASK_SPEC_ANNOTATION;

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
mod tests {
    use super::*;
    use crate::dialects::{pod_gang, pod_group_name, GangDecl};
    use crate::model::GangPolicy;
    use crate::testkit::labels;

    fn pod(yaml: &str) -> Pod {
        crate::yaml::from_str(yaml).unwrap()
    }

    #[test]
    fn requests_that_overflow_when_added_are_an_error_not_a_panic() {
        // Found by fuzzing (fuzz/corpus/pod_dialects): each request fits an i64, their sum
        // did not, and adding them panicked.
        let p = pod(r#"
metadata: {name: w-0, namespace: ml}
spec:
  containers:
  - name: a
    resources: {requests: {cpu: "9223372036854775807m"}}
  - name: b
    resources: {requests: {cpu: "1"}}
  overhead: {memory: 1Gi}
"#);
        let e = pod_to_update(&p, None).unwrap_err();
        assert_eq!(e.field, "spec.containers[*].resources");
        assert_eq!(
            e.to_string(),
            "pod ml/w-0: spec.containers[*].resources: the requests of cpu add up to more than \
             the scheduler can count"
        );
        let sidecars = pod(r#"
metadata: {name: w-0, namespace: ml}
spec:
  containers: [{name: a, resources: {requests: {nvidia.com/gpu: "9e15"}}}]
  initContainers:
  - {name: s, restartPolicy: Always, resources: {requests: {nvidia.com/gpu: "9e15"}}}
"#);
        assert!(pod_to_update(&sidecars, None).is_err());
        // The largest single request is fine.
        let big = pod(r#"
metadata: {name: w-0, namespace: ml}
spec:
  containers: [{name: a, resources: {requests: {cpu: "9223372036854775807m"}}}]
"#);
        assert_eq!(
            pod_to_update(&big, None).unwrap().task.resreq.milli_cpu,
            i64::MAX
        );
    }

    #[test]
    fn pod_requests_group_and_role() {
        let p = pod(r#"
metadata:
  name: w-0
  namespace: ml
  uid: u1
  annotations: {scheduling.k8s.io/group-name: tf, volcano.sh/task-spec: worker}
spec:
  schedulerName: rust-batch
  priority: 100
  nodeSelector: {pool: gpu}
  tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
  containers:
  - name: c
    resources:
      requests: {cpu: 500m, memory: 1Gi}
      limits: {nvidia.com/gpu: "2"}
  initContainers:
  - name: i
    resources: {requests: {cpu: "2"}}
"#);
        assert_eq!(pod_group_name(&p).as_deref(), Some("tf"));
        let u = pod_to_update(&p, Some("ml/tf".into())).unwrap();
        assert_eq!(u.task.resreq.milli_cpu, 2000, "init container peak wins");
        assert_eq!(u.task.resreq.memory, 1 << 30);
        assert_eq!(
            u.task.resreq.scalar("nvidia.com/gpu"),
            2000,
            "limits stand in for requests"
        );
        assert_eq!(&*u.task.role, "worker");
        assert_eq!(u.task.priority, 100);
        assert_eq!(u.task.status, TaskStatus::Pending);
        assert_eq!(
            u.task
                .placement
                .node_selector
                .get("pool")
                .map(String::as_str),
            Some("gpu")
        );
    }

    #[test]
    fn gang_dialects_and_their_precedence() {
        let ack = pod(r#"
metadata:
  name: w
  namespace: ns
  labels: {pod-group.scheduling.sigs.k8s.io/name: tf-smoke-gpu, pod-group.scheduling.sigs.k8s.io/min-available: "5"}
spec: {containers: []}
"#);
        assert_eq!(
            pod_gang(&ack).unwrap(),
            Some(GangDecl {
                name: "tf-smoke-gpu".into(),
                implicit_min: Some(5),
                policy: GangPolicy::default(),
                overrides: None,
            })
        );
        let kube_batch = pod(r#"
metadata:
  name: w
  annotations: {scheduling.k8s.io/group-name: g1, scheduling.k8s.io/group-min-member: "3"}
  labels: {pod-group.scheduling.sigs.k8s.io/name: other}
spec: {containers: []}
"#);
        assert_eq!(
            pod_gang(&kube_batch).unwrap(),
            Some(GangDecl {
                name: "g1".into(),
                implicit_min: Some(3),
                policy: GangPolicy::default(),
                overrides: None,
            }),
            "the Volcano/kube-batch annotation wins over ACK labels"
        );
        let volcano_label = pod("metadata: {name: w, labels: {scheduling.volcano.sh/group-name: pg}}\nspec: {containers: []}\n");
        assert_eq!(
            pod_gang(&volcano_label).unwrap(),
            Some(GangDecl {
                name: "pg".into(),
                implicit_min: None,
                policy: GangPolicy::default(),
                overrides: None,
            })
        );
        let bad_min = pod("metadata: {name: w, labels: {pod-group.scheduling.sigs.k8s.io/name: g, pod-group.scheduling.sigs.k8s.io/min-available: five}}\nspec: {containers: []}\n");
        let e = pod_gang(&bad_min).unwrap_err();
        assert!(
            e.to_string().contains("min-available") && e.to_string().contains("\"five\""),
            "{e}"
        );
        let bad_name = pod("metadata: {name: w, labels: {pod-group.scheduling.sigs.k8s.io/name: Bad_Name}}\nspec: {containers: []}\n");
        assert!(pod_gang(&bad_name)
            .unwrap_err()
            .to_string()
            .contains("not a DNS subdomain"));
        let none = pod("metadata: {name: w}\nspec: {containers: []}\n");
        assert_eq!(pod_gang(&none).unwrap(), None);

        let x_k8s = pod(r#"
metadata:
  name: w
  labels: {scheduling.x-k8s.io/pod-group: pg1, pod-group.scheduling.sigs.k8s.io/name: other}
  annotations: {gang.scheduling.koordinator.sh/name: koord}
spec: {containers: []}
"#);
        assert_eq!(
            pod_gang(&x_k8s).unwrap().map(|d| (d.name, d.implicit_min)),
            Some(("pg1".into(), None)),
            "the scheduler-plugins label wins over Koordinator and ACK keys; its PodGroup defines it"
        );
        let koord = pod(r#"
metadata:
  name: w
  namespace: default
  labels: {pod-group.scheduling.sigs.k8s.io/name: other}
  annotations:
    gang.scheduling.koordinator.sh/name: gang-example
    gang.scheduling.koordinator.sh/min-available: "2"
    gang.scheduling.koordinator.sh/mode: NonStrict
spec: {containers: []}
"#);
        let d = pod_gang(&koord).unwrap().unwrap();
        assert_eq!(
            (d.name.as_str(), d.implicit_min),
            ("gang-example", Some(2)),
            "Koordinator's annotation wins over ACK labels"
        );
        assert_eq!(d.policy.mode, crate::model::GangMode::NonStrict);
        let koord_bad = pod(r#"
metadata:
  name: w
  annotations: {gang.scheduling.koordinator.sh/name: g, gang.scheduling.koordinator.sh/groups: "[oops"}
spec: {containers: []}
"#);
        assert!(pod_gang(&koord_bad)
            .unwrap_err()
            .to_string()
            .contains("is not a JSON list"));
    }

    #[test]
    fn bad_quantities_name_the_field() {
        let p = pod(r#"
metadata: {name: bad, namespace: ns}
spec:
  containers:
  - name: c
    resources: {requests: {cpu: "-1"}}
"#);
        let e = pod_to_update(&p, None).unwrap_err();
        assert_eq!(e.field, "spec.containers[0].resources");
        assert!(e.to_string().contains("pod ns/bad"), "{e}");
        assert!(e.to_string().contains("negative"), "{e}");
    }

    #[test]
    fn pod_rules_convert_with_their_label_keys_and_host_ports() {
        let p = pod(r#"
metadata: {name: w, namespace: ns, labels: {job: j1, rev: r2}}
spec:
  hostNetwork: true
  containers:
  - name: c
    ports: [{containerPort: 2222}, {containerPort: 80, hostPort: 8080, protocol: UDP}]
  affinity:
    nodeAffinity:
      preferredDuringSchedulingIgnoredDuringExecution:
      - {weight: 10, preference: {matchExpressions: [{key: zone, operator: In, values: [a]}]}}
    podAntiAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
      - {topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {job: j1}}}
  topologySpreadConstraints:
  - {maxSkew: 1, topologyKey: zone, whenUnsatisfiable: ScheduleAnyway,
     labelSelector: {matchLabels: {job: j1}}, matchLabelKeys: [rev]}
"#);
        let t = pod_to_update(&p, None).unwrap().task;
        let pl = &t.placement;
        assert_eq!(pl.preferred_node_affinity[0].weight, 10);
        let ports: Vec<(i32, &str)> = pl
            .host_ports
            .iter()
            .map(|h| (h.port, h.protocol.as_str()))
            .collect();
        assert_eq!(ports, [(2222, "TCP"), (8080, "UDP")]);
        let rules = pl.rules().unwrap();
        assert_eq!(rules.pod_anti_affinity.required().len(), 1);
        let spread = &rules.topology_spread_constraints[0];
        assert!(
            spread.match_label_keys.is_empty(),
            "folded into the selector"
        );
        let selector = spread.label_selector.as_ref().unwrap();
        assert!(selector.matches(&labels(&[("job", "j1"), ("rev", "r2")])));
        assert!(!selector.matches(&labels(&[("job", "j1"), ("rev", "r1")])));
        assert_eq!(t.labels.get("job").map(String::as_str), Some("j1"));
    }

    #[test]
    fn malformed_pod_rules_name_the_field() {
        let cases = [
            (
                "affinity: {podAffinity: {requiredDuringSchedulingIgnoredDuringExecution: [{topologyKey: zone, labelSelector: {matchExpressions: [{key: a, operator: Near, values: [x]}]}}]}}",
                "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].labelSelector.matchExpressions[0].operator",
            ),
            (
                "topologySpreadConstraints: [{maxSkew: 0, topologyKey: zone, whenUnsatisfiable: DoNotSchedule}]",
                "spec.topologySpreadConstraints[0]",
            ),
            (
                "affinity: {podAntiAffinity: {requiredDuringSchedulingIgnoredDuringExecution: [{topologyKey: '', labelSelector: {}}]}}",
                "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]",
            ),
            (
                "topologySpreadConstraints: [{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: Sometimes}]",
                "spec.topologySpreadConstraints[0].whenUnsatisfiable",
            ),
        ];
        for (spec, field) in cases {
            let p = pod(&format!(
                "metadata: {{name: bad, namespace: ns}}\nspec:\n  containers: [{{name: c}}]\n  {spec}\n"
            ));
            let e = pod_to_update(&p, None).unwrap_err();
            assert_eq!(e.field, field, "{e}");
        }
    }

    #[test]
    fn runtime_estimates_come_from_the_annotation_or_the_deadline() {
        let annotated = pod(r#"
metadata:
  name: a
  namespace: ns
  annotations: {rust-batch.io/runtime-estimate: 1h30m}
spec: {activeDeadlineSeconds: 60, containers: []}
status: {phase: Running, startTime: '2026-01-01T00:00:00Z'}
"#);
        let (u, warnings) = pod_to_update_with_warnings(&annotated, None).unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(u.task.estimate, Some(90 * 60 * 1000), "the annotation wins");
        assert_eq!(u.task.started, Some(1_767_225_600_000));
        let deadline =
            pod("metadata: {name: d}\nspec: {activeDeadlineSeconds: 600, containers: []}\n");
        let u = pod_to_update(&deadline, None).unwrap();
        assert_eq!(u.task.estimate, Some(600_000));
        assert_eq!(u.task.started, None);
        let none = pod("metadata: {name: n}\nspec: {containers: []}\n");
        assert_eq!(pod_to_update(&none, None).unwrap().task.estimate, None);
    }

    #[test]
    fn a_bad_runtime_estimate_is_ignored_with_a_warning() {
        let bad = pod(r#"
metadata:
  name: b
  namespace: ns
  annotations: {rust-batch.io/runtime-estimate: soon}
spec: {activeDeadlineSeconds: 120, containers: []}
"#);
        let (u, warnings) = pod_to_update_with_warnings(&bad, Some("ns/g".into())).unwrap();
        assert_eq!(u.task.estimate, Some(120_000), "the deadline still serves");
        assert_eq!(warnings.len(), 1);
        assert_eq!(warnings[0].reason, "BadRuntimeEstimate");
        let w = &warnings[0].message;
        assert!(
            w.contains("pod ns/b")
                && w.contains("rust-batch.io/runtime-estimate")
                && w.contains("\"soon\""),
            "{w}"
        );
        let bad_only = pod("metadata: {name: c, annotations: {rust-batch.io/runtime-estimate: '-'}}\nspec: {containers: []}\n");
        let (u, warnings) = pod_to_update_with_warnings(&bad_only, None).unwrap();
        assert_eq!((u.task.estimate, warnings.len()), (None, 1));
    }

    #[test]
    fn kueue_topology_annotations_become_the_pods_request() {
        use crate::model::{TopologyBound, TopologyMode};
        let required = pod(r#"
metadata:
  name: w-0
  namespace: ml
  annotations: {kueue.x-k8s.io/podset-required-topology: example.com/rack}
spec: {containers: []}
"#);
        let (u, warnings) = pod_to_update_with_warnings(&required, None).unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        let t = u.task.topology.expect("a request");
        assert_eq!(
            (t.mode, &t.bound, &t.problem),
            (
                TopologyMode::Hard,
                &TopologyBound::LabelKey("example.com/rack".into()),
                &None
            )
        );
        let preferred = pod(r#"
metadata:
  name: w-1
  namespace: ml
  annotations: {kueue.x-k8s.io/podset-preferred-topology: topology.kubernetes.io/zone}
spec: {containers: []}
"#);
        let t = pod_to_update(&preferred, None)
            .unwrap()
            .task
            .topology
            .unwrap();
        assert_eq!(t.mode, TopologyMode::Soft);
        let plain = pod("metadata: {name: p}\nspec: {containers: []}\n");
        assert!(pod_to_update(&plain, None).unwrap().task.topology.is_none());
    }

    #[test]
    fn a_malformed_kueue_annotation_is_passed_on_with_a_warning() {
        let bad = pod(r#"
metadata:
  name: w-0
  namespace: ml
  annotations: {kueue.x-k8s.io/podset-required-topology: "not a key/"}
spec: {containers: []}
"#);
        let (u, warnings) = pod_to_update_with_warnings(&bad, Some("ml/g".into())).unwrap();
        let t = u
            .task
            .topology
            .expect("the request is kept: a hard one makes the gang wait");
        let problem = t.problem.clone().expect("with its problem");
        assert!(
            problem.starts_with(
                "pod ml/w-0: annotation kueue.x-k8s.io/podset-required-topology \"not a key/\""
            ),
            "{problem}"
        );
        assert_eq!(
            warnings,
            vec![PodWarning {
                reason: "InvalidNetworkTopology",
                message: problem
            }]
        );
    }

    #[test]
    fn pod_level_resources_replace_the_containers_requests_per_resource() {
        // PodLevelResources: cpu from the pod (its limit standing in for a request),
        // memory from the containers, overhead on top.
        let p = pod(r#"
metadata: {name: w-0, namespace: ml}
spec:
  resources: {limits: {cpu: "4"}}
  containers:
  - {name: a, resources: {requests: {cpu: "1", memory: 1Gi}}}
  - {name: b, resources: {requests: {cpu: "1", memory: 1Gi}}}
  overhead: {cpu: 250m}
"#);
        let r = pod_to_update(&p, None).unwrap().task.resreq;
        assert_eq!(r.milli_cpu, 4250);
        assert_eq!(r.memory, 2 * (1 << 30));
        let bad = pod("metadata: {name: w-0, namespace: ml}\nspec: {resources: {requests: {cpu: lots}}, containers: []}\n");
        assert_eq!(
            pod_to_update(&bad, None).unwrap_err().field,
            "spec.resources"
        );
    }

    #[test]
    fn statuses_follow_volcano() {
        let bound = pod(
            "metadata: {name: a}\nspec: {nodeName: n1, containers: []}\nstatus: {phase: Pending}\n",
        );
        assert_eq!(pod_status(&bound), TaskStatus::Bound);
        let deleting = pod("metadata: {name: a, deletionTimestamp: '2024-01-01T00:00:00Z'}\nspec: {nodeName: n1, containers: []}\nstatus: {phase: Running}\n");
        assert_eq!(pod_status(&deleting), TaskStatus::Releasing);
        let done = pod("metadata: {name: a}\nspec: {containers: []}\nstatus: {phase: Succeeded}\n");
        assert_eq!(pod_status(&done), TaskStatus::Succeeded);
    }

    #[test]
    fn nodes_convert_with_taints_and_readiness() {
        let n: Node = crate::yaml::from_str(
            r#"
metadata: {name: n1, labels: {pool: gpu}}
spec:
  taints: [{key: gpu, value: "yes", effect: NoSchedule}]
status:
  allocatable: {cpu: "8", memory: 32Gi, nvidia.com/gpu: "2", pods: "110"}
  conditions: [{type: Ready, status: "True"}]
"#,
        )
        .unwrap();
        let s = node_to_spec(&n).unwrap();
        assert!(s.ready);
        assert_eq!(s.allocatable.scalar("nvidia.com/gpu"), 2000);
        assert_eq!(s.taints.len(), 1);
    }

    #[test]
    fn what_the_engine_does_not_model_is_named_and_the_rest_passes() {
        let spec = |yaml: &str| -> PodSpec { crate::yaml::from_str(yaml).unwrap() };
        assert_eq!(
            unsupported_fields(&spec(
                "containers: [{name: c, resources: {requests: {cpu: '1'}}}]\n\
                 preemptionPolicy: Never\nschedulingGates: [{name: a.io/x}]\n"
            )),
            None,
            "modelled fields and gates (held by the driver) are no refusal"
        );
        assert_eq!(
            unsupported_fields(&spec(
                "containers: [{name: c}, {name: d, resources: {claims: [{name: gpu}]}}]\n\
                 resourceClaims: [{name: gpu, resourceClaimTemplateName: t}]\n\
                 resources: {requests: {cpu: '2'}, claims: [{name: gpu}]}\n"
            )),
            None,
            "DRA claims are modelled (dra_watch): a claim the engine cannot allocate blocks \
             with its own reason"
        );
        assert_eq!(
            unsupported_fields(&spec(
                "containers: [{name: c}]\nresources: {requests: {cpu: '2'}}\n"
            )),
            None,
            "pod-level requests are modelled"
        );
        assert_eq!(
            unsupported_fields(&spec(
                "containers: [{name: c}]\nschedulingGroup: {podGroupName: trainers}\n"
            )),
            None,
            "a member of a native gang joins its PodGroup's gang (dialects::native)"
        );
        assert_eq!(
            unsupported_fields(&spec(
                "containers: [{name: c}]\nhostnameOverride: h\n\
                 evictionResponders: [{name: example.com/drain, priority: 10000}]\n"
            )),
            None,
            "the other fields 1.34-1.37 added are the kubelet's and the eviction API's"
        );
        let never = pod("metadata: {name: a}\nspec: {preemptionPolicy: Never, containers: []}\n");
        assert!(pod_to_update(&never, None).unwrap().task.never_preempts);
        let plain = pod("metadata: {name: a}\nspec: {containers: []}\n");
        assert!(!pod_to_update(&plain, None).unwrap().task.never_preempts);
    }

    /// The property names of a Kubernetes type, from its OpenAPI schema.
    fn fields<T: schemars::JsonSchema>() -> std::collections::BTreeSet<String> {
        let schema = schemars::SchemaGenerator::default().into_root_schema_for::<T>();
        schema
            .get("properties")
            .and_then(|p| p.as_object())
            .expect("an object schema")
            .keys()
            .cloned()
            .collect()
    }

    /// Every field of `T` is in exactly one of the lists, and every listed field exists:
    /// a field a new Kubernetes version adds fails here until someone decides whether
    /// rust-batch honours it, refuses pods that use it, or may ignore it.
    fn audit<T: schemars::JsonSchema>(
        kind: &str,
        modelled: &[(&str, &str)],
        refused: &[(&str, &str)],
        irrelevant: &[(&str, &str)],
    ) {
        let have = fields::<T>();
        let mut listed = std::collections::BTreeMap::new();
        for (list, entries) in [
            ("modelled", modelled),
            ("refused", refused),
            ("irrelevant", irrelevant),
        ] {
            for (field, why) in entries {
                assert!(!why.is_empty(), "{kind}.{field}: say why");
                if let Some(other) = listed.insert(*field, list) {
                    panic!("{kind}.{field} is both {other} and {list}");
                }
            }
        }
        let unlisted: Vec<&String> = have
            .iter()
            .filter(|f| !listed.contains_key(f.as_str()))
            .collect();
        assert!(
            unlisted.is_empty(),
            "{kind} fields neither modelled, refused nor irrelevant to placement: {unlisted:?} \
             (a silent ignore: honour them, refuse them in unsupported_fields, or say why \
             placement may ignore them)"
        );
        let stale: Vec<&&str> = listed.keys().filter(|f| !have.contains(**f)).collect();
        assert!(stale.is_empty(), "{kind} has no fields {stale:?}");
    }

    #[test]
    fn every_pod_spec_field_is_modelled_refused_or_irrelevant() {
        use k8s_openapi::api::core::v1::{Container, ContainerPort};
        audit::<PodSpec>(
            "PodSpec",
            &[
                ("affinity", "node affinity (required: predicates; preferred: nodeorder) and pod affinity/anti-affinity: predicates and nodeorder"),
                ("containers", "requests and host ports (see the Container audit)"),
                ("initContainers", "requests (max with the sum of sidecars), sidecars, host ports"),
                ("hostNetwork", "every container port is a host port"),
                ("nodeName", "a pod with a node is bound: it counts on that node, whoever set it"),
                ("nodeSelector", "predicates"),
                ("overhead", "added to the requests (RuntimeClass admission sets it)"),
                ("preemptionPolicy", "Never: preempt and reclaim do not evict for the pod's gang"),
                ("priority", "job and task order, preemption (admission sets it from the class)"),
                ("priorityClassName", "through priority; system-*-critical pods are never victims"),
                ("runtimeClassName", "through what RuntimeClass admission writes into the pod: overhead, and its scheduling nodeSelector and tolerations"),
                ("schedulerName", "which pods are ours"),
                ("schedulingGroup", "the pod's gang: its scheduling.k8s.io PodGroup (dialects::native)"),
                ("schedulingGates", "a gated pod is held back; its gang waits and says which gates"),
                ("tolerations", "predicates, against node taints"),
                ("topologySpreadConstraints", "predicates (DoNotSchedule) and nodeorder (ScheduleAnyway)"),
                ("volumes", "PersistentVolumeClaims: their volumes' node affinity and binding (issue 14 item 4)"),
                ("activeDeadlineSeconds", "a runtime estimate for backfill (the pod cannot run longer)"),
                ("resources", "pod-level requests (limits standing in) replace the containers' per resource; its claims name the pod's resourceClaims"),
                ("resourceClaims", "DRA: the pod's claims, allocated from ResourceSlices in the search that places its gang, written before its bind (dra_watch, dra_commit)"),
            ],
            &[],
            &[
                ("automountServiceAccountToken", "kubelet: token mount"),
                ("dnsConfig", "kubelet: resolv.conf"),
                ("dnsPolicy", "kubelet: resolv.conf"),
                ("enableServiceLinks", "kubelet: environment"),
                ("ephemeralContainers", "added to running pods only, with no resources"),
                ("evictionResponders", "who answers an EvictionRequest (1.37, alpha gate EvictionRequestAPI); the pods/eviction subresource preemption goes through does not read it, and placement does not either"),
                ("hostAliases", "kubelet: /etc/hosts"),
                ("hostIPC", "kubelet: namespaces; no node resource is taken"),
                ("hostPID", "kubelet: namespaces; no node resource is taken"),
                ("hostUsers", "kubelet: user namespaces; kube-scheduler does not filter on it either"),
                ("hostname", "kubelet: the pod's hostname"),
                ("hostnameOverride", "kubelet: the pod's hostname (1.34)"),
                ("imagePullSecrets", "kubelet: image pulls"),
                ("os", "validation and kubelet admission; kube-scheduler does not filter on it either (nodeSelector kubernetes.io/os places pods by OS)"),
                ("readinessGates", "readiness after the pod runs"),
                ("restartPolicy", "kubelet: restarts on the node the pod is bound to"),
                ("securityContext", "kubelet: process security"),
                ("serviceAccount", "identity, not placement"),
                ("serviceAccountName", "identity, not placement"),
                ("setHostnameAsFQDN", "kubelet: the pod's hostname"),
                ("shareProcessNamespace", "kubelet: namespaces"),
                ("subdomain", "DNS name, not placement"),
                ("terminationGracePeriodSeconds", "how long a victim takes to go; its room counts until it is gone"),
            ],
        );
        audit::<Container>(
            "Container",
            &[
                (
                    "ports",
                    "hostPort (and every port with hostNetwork): predicates",
                ),
                (
                    "resources",
                    "requests, limits where requests are missing (claims: see below)",
                ),
                (
                    "restartPolicy",
                    "Always on an init container: a sidecar, counted as running alongside",
                ),
            ],
            &[],
            &[
                ("args", "process"),
                ("command", "process"),
                ("env", "process"),
                ("envFrom", "process"),
                (
                    "image",
                    "kube-scheduler's ImageLocality only scores; nothing is misplaced without it",
                ),
                ("imagePullPolicy", "kubelet"),
                ("lifecycle", "kubelet"),
                ("livenessProbe", "kubelet"),
                ("name", "identity"),
                ("readinessProbe", "kubelet"),
                ("resizePolicy", "kubelet: in-place resize"),
                (
                    "restartPolicyRules",
                    "kubelet: restarts a container by its exit code (1.34); a sidecar is told by restartPolicy alone",
                ),
                ("securityContext", "kubelet"),
                ("startupProbe", "kubelet"),
                ("stdin", "kubelet"),
                ("stdinOnce", "kubelet"),
                ("terminationMessagePath", "kubelet"),
                ("terminationMessagePolicy", "kubelet"),
                ("tty", "kubelet"),
                (
                    "volumeDevices",
                    "refers to the pod's volumes, audited there",
                ),
                ("volumeMounts", "refers to the pod's volumes, audited there"),
                ("workingDir", "process"),
            ],
        );
        audit::<ResourceRequirements>(
            "ResourceRequirements",
            &[
                ("requests", "the pod's requests"),
                ("limits", "stand in for missing requests, as in Kubernetes"),
            ],
            &[],
            &[("claims", "which of the pod's resourceClaims a container sees (the kubelet's); placement allocates them through spec.resourceClaims")],
        );
        audit::<ContainerPort>(
            "ContainerPort",
            &[
                ("containerPort", "a host port with hostNetwork"),
                ("hostIP", "host ports clash per IP, 0.0.0.0 with every IP"),
                ("hostPort", "predicates"),
                ("protocol", "host ports clash per protocol"),
            ],
            &[],
            &[("name", "a name for Services")],
        );
    }
}
