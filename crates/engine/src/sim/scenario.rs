//! Scenario files: a cluster (node groups), tenant queues, jobs with submit times, roles,
//! requests and runtimes, and timed events. Errors name the field that is wrong.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use thiserror::Error;

use crate::conf::{ConfError, SchedulerConf};
use crate::framework::Scheduler;
use crate::model::placement::{NodeSelectorTerm, PreferredSchedulingTerm, Taint, Toleration};
use crate::model::pod_rules::{HostPort, PodAffinity, PodRules, TopologySpreadConstraint};
use crate::model::topology::label_key_problem;
use crate::model::Placement;
use crate::model::{
    HyperNodeMember, HyperNodeSpec, MemberKind, MemberSelector, QueueState, QueueUsage,
    ResourceList, TopologyRequest,
};

/// The bundled default scenario: S1 and S2 from docs/src/scenarios.md plus a mixed workload.
pub const DEFAULT_SCENARIO: &str = include_str!("../../../../examples/scenarios/default.yaml");

#[derive(Debug, Error)]
pub enum ScenarioError {
    #[error("{file}: cannot read: {source}")]
    Io {
        file: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{file}: {message}")]
    Parse { file: String, message: String },
    #[error("{file}: {field}: {message}")]
    Invalid {
        file: String,
        field: String,
        message: String,
    },
    #[error("{file}: config: {source}")]
    Config {
        file: String,
        #[source]
        source: ConfError,
    },
}

/// A duration written as "30s", "10m", "1h 30m" (humantime), in milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Millis(pub i64);

impl<'de> Deserialize<'de> for Millis {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = serde_json::Value::deserialize(d)?;
        let text = match &v {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Number(n) if n.as_u64() == Some(0) => "0s".into(),
            other => {
                return Err(serde::de::Error::custom(format!(
                    "expected a duration such as \"30s\" or \"10m\", got {other:?}"
                )))
            }
        };
        let d = humantime::parse_duration(&text).map_err(|e| {
            serde::de::Error::custom(format!(
                "{text:?} is not a duration ({e}); write e.g. \"30s\", \"10m\", \"1h 30m\""
            ))
        })?;
        match i64::try_from(d.as_millis()) {
            Ok(ms) if ms <= MAX_DURATION.0 => Ok(Millis(ms)),
            _ => Err(serde::de::Error::custom(format!(
                "{text:?} is longer than the simulator's limit of 100 years"
            ))),
        }
    }
}

impl Serialize for Millis {
    /// As humantime writes it ("1h 30m"), which the loader reads back to the millisecond.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let d = std::time::Duration::from_millis(self.0.max(0) as u64);
        s.serialize_str(&humantime::format_duration(d).to_string())
    }
}

fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}
fn is_one(value: &u32) -> bool {
    *value == 1
}
fn is_true(value: &bool) -> bool {
    *value
}
fn is_zero_f64(value: &f64) -> bool {
    *value == 0.0
}

/// The longest duration a scenario may name: virtual times stay far from overflowing
/// (times add up: a repeat's `every` times its count, a runtime after a submit time).
pub const MAX_DURATION: Millis = Millis(100 * 31_557_600 * 1000); // humantime's years: 365.25 days
/// The most nodes a scenario may create (its node groups plus every `addNodes`), and the
/// most pods (every job's replicas times its repeat count): a few lines of YAML must not
/// ask the simulator for a billion of either.
pub const MAX_NODES: u64 = 100_000;
pub const MAX_PODS: u64 = 1_000_000;
/// The most HyperNodes a scenario may declare: each HyperNode member is matched against
/// every HyperNode (validation) and every node (each time the topology is resolved).
pub const MAX_HYPERNODES: usize = 1_000;
/// The most topology levels the report measures; real clusters nest a handful.
pub const MAX_TOPOLOGY_LEVELS: usize = 16;

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeGroup {
    pub name: String,
    pub count: u32,
    /// The names of the group's first nodes, in order (a snapshot of a cluster keeps its
    /// nodes' names, which its running pods are pinned to); the others are named
    /// `<group>-<n>`, n counting every node the group made.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<String>,
    /// Allocatable resources; `pods` defaults to 110.
    pub allocatable: ResourceList,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub unschedulable: bool,
    /// DRA devices each node publishes (see `sim::devices`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<super::devices::DeviceSetDef>,
}

impl NodeGroup {
    /// The name of the group's `n`-th node made (from 1).
    pub fn node_name(&self, n: u32) -> String {
        match n.checked_sub(1).and_then(|i| self.names.get(i as usize)) {
            Some(name) => name.clone(),
            None => format!("{}-{n}", self.name),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct QueueDef {
    pub name: String,
    #[serde(default = "one")]
    pub weight: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capability: Option<ResourceList>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guarantee: Option<ResourceList>,
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub reclaimable: bool,
    #[serde(default, skip_serializing_if = "is_default")]
    pub state: QueueState,
    /// Explicit deserved share (the capacity plugin).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deserved: Option<ResourceList>,
    /// Parent queue (hierarchical queues).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// The queue's priority (Volcano's `spec.priority`).
    #[serde(default, skip_serializing_if = "is_default")]
    pub priority: i32,
    /// How long before t=0 the queue was created: queues equal by the plugins' order go
    /// oldest first, as on the cluster a snapshot was taken of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_before: Option<Millis>,
    /// The runtime estimate of its pods that give none (the queue annotation
    /// `rust-batch.io/default-runtime-estimate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_runtime_estimate: Option<Millis>,
    /// How long its pods run before preempt or reclaim may take them
    /// (`rust-batch.io/min-runtime`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_runtime: Option<Millis>,
    /// How long its gangs wait before they may evict others (`rust-batch.io/preemption-delay`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption_delay: Option<Millis>,
    /// Its decayed past usage at t=0, for fair share over time (`usageHalfLife`): resource
    /// name → average amount held, in cores, bytes and devices (what the scheduler records
    /// in the queue annotation `rust-batch.io/usage`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub past_usage: Option<BTreeMap<String, f64>>,
}

impl QueueDef {
    /// The engine's queue.
    pub fn to_info(&self) -> crate::model::QueueInfo {
        let mut info = crate::model::QueueInfo::new(&self.name, self.weight);
        info.capability = self.capability.as_ref().map(|c| c.0.clone());
        info.guarantee = self.guarantee.as_ref().map(|c| c.0.clone());
        info.deserved = self.deserved.as_ref().map(|c| c.0.clone());
        info.parent = self.parent.as_deref().map(Into::into);
        info.reclaimable = self.reclaimable;
        info.state = self.state;
        info.priority = self.priority;
        info.created = -self.created_before.map_or(0, |m| m.0);
        info.default_runtime_estimate = self.default_runtime_estimate.map(|m| m.0);
        info.min_runtime = self.min_runtime.map(|m| m.0);
        info.preemption_delay = self.preemption_delay.map(|m| m.0);
        info.recorded_usage = self.past_usage.as_ref().map(|amounts| QueueUsage {
            at: 0,
            amounts: amounts.clone(),
        });
        info
    }
}

fn one() -> u32 {
    1
}
fn yes() -> bool {
    true
}
fn default_namespace() -> String {
    "default".into()
}
fn default_queue() -> String {
    "default".into()
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TaskDef {
    /// Role name (the `volcano.sh/task-spec` of its pods).
    pub role: String,
    #[serde(default = "one")]
    pub replicas: u32,
    #[serde(default)]
    pub requests: ResourceList,
    /// How long a pod runs once started; absent means it runs until the end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<Millis>,
    /// What the user tells the scheduler the runtime will be (the pods'
    /// `rust-batch.io/runtime-estimate`); overrides the job's `estimate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimate: Option<Millis>,
    /// Replicas already running at t=0, first replicas first: each on its node, started
    /// `elapsed` before t=0 (it ends `runtime - elapsed` after t=0, at t=0 if overdue). Only
    /// a job submitted at t=0, not repeated, has them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub running: Vec<RunningPodDef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    /// `preemptionPolicy: Never`: the pods wait for room, they never evict others for it.
    #[serde(default, skip_serializing_if = "is_default")]
    pub never_preempts: bool,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_affinity: Vec<NodeSelectorTerm>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// The pods' labels, beside the `volcano.sh/job-name` and `volcano.sh/task-spec` every
    /// pod gets (as Volcano's job controller sets them), for pod affinity and spread rules.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Kubernetes' `affinity`: required and preferred node affinity, podAffinity,
    /// podAntiAffinity.
    #[serde(default, skip_serializing_if = "is_default")]
    pub affinity: AffinityDef,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub topology_spread_constraints: Vec<TopologySpreadConstraint>,
    /// Ports the pods take on their node (`containers[].ports[].hostPort`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub host_ports: Vec<HostPort>,
    /// The pods' annotations. The simulator reads Kueue's topology-aware scheduling keys
    /// (`kueue.x-k8s.io/podset-required-topology`, `…/podset-preferred-topology`) as the
    /// Kubernetes driver does; other keys are carried and ignored.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Replicas form groups of this many (as a LeaderWorkerSet's): replica `r` carries the
    /// label `group-index: r / groupSize`, for a job's `subGroupPolicy` to match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_size: Option<u32>,
    /// ResourceClaims (DRA) each pod carries (see `sim::devices`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub claims: Vec<super::devices::ClaimDef>,
}

/// A replica running at t=0 (a snapshot of a cluster's running pod).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunningPodDef {
    /// The node it runs on (a node the scenario has at t=0).
    pub node: String,
    /// How long it has run at t=0.
    #[serde(default, skip_serializing_if = "is_default")]
    pub elapsed: Millis,
}

/// A pod rust-batch does not schedule (another scheduler's, or one a snapshot could not
/// give a gang) running on a node from t=0 to the end: what it requests is its node's.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OtherPodDef {
    /// `namespace/name`.
    pub name: String,
    pub node: String,
    #[serde(default)]
    pub requests: ResourceList,
    /// Its labels, for other pods' affinity and spread rules.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

/// A pod's `affinity`, with Kubernetes' field names.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AffinityDef {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_affinity: Option<NodeAffinityDef>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub pod_affinity: PodAffinity,
    #[serde(default, skip_serializing_if = "is_default")]
    pub pod_anti_affinity: PodAffinity,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeAffinityDef {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required_during_scheduling_ignored_during_execution: Option<NodeSelectorDef>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub preferred_during_scheduling_ignored_during_execution: Vec<PreferredSchedulingTerm>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeSelectorDef {
    pub node_selector_terms: Vec<NodeSelectorTerm>,
}

impl TaskDef {
    /// The labels of the task's pods in job `job`.
    pub fn pod_labels(&self, job: &str) -> BTreeMap<String, String> {
        let mut labels = self.labels.clone();
        labels.insert("volcano.sh/job-name".into(), job.into());
        labels.insert(TASK_SPEC_LABEL.into(), self.role.clone());
        labels
    }

    /// What places the task's pods (with `labels`, which `matchLabelKeys` read).
    pub fn placement(&self, labels: &BTreeMap<String, String>) -> Placement {
        let node = self.affinity.node_affinity.clone().unwrap_or_default();
        let mut node_affinity = self.node_affinity.clone();
        node_affinity.extend(
            node.required_during_scheduling_ignored_during_execution
                .into_iter()
                .flat_map(|s| s.node_selector_terms),
        );
        let rules = self.pod_rules().resolved(labels);
        Placement {
            node_selector: self.node_selector.clone(),
            node_affinity,
            tolerations: self.tolerations.clone(),
            preferred_node_affinity: node.preferred_during_scheduling_ignored_during_execution,
            pod_rules: (!rules.is_empty()).then(|| Box::new(rules)),
            host_ports: self.host_ports.clone(),
            volumes: None,
        }
    }

    fn pod_rules(&self) -> PodRules {
        PodRules {
            pod_affinity: self.affinity.pod_affinity.clone(),
            pod_anti_affinity: self.affinity.pod_anti_affinity.clone(),
            topology_spread_constraints: self.topology_spread_constraints.clone(),
        }
    }
}

const TASK_SPEC_LABEL: &str = "volcano.sh/task-spec";

/// Volcano's PodGroup `spec.networkTopology`, with its field names. Values are passed to
/// the engine as a PodGroup's would be: a mode that is not hard or soft, or a tier below
/// 1, is the engine's to report (the gang says why it waits), not a scenario error.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NetworkTopologyDef {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub highest_tier_allowed: Option<i64>,
}

impl NetworkTopologyDef {
    /// The engine's request; `object` names the gang (`namespace/name`) in messages.
    pub fn to_request(&self, object: &str) -> TopologyRequest {
        TopologyRequest::from_volcano(self.mode.as_deref(), self.highest_tier_allowed, object)
    }
}

/// Volcano's HyperNode (topology.volcano.sh/v1alpha1), flattened: its `metadata.name` and
/// its `spec` (`tier`, `members`) with Volcano's field names.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HyperNodeDef {
    pub name: String,
    pub tier: u32,
    #[serde(default)]
    pub members: Vec<HyperNodeMemberDef>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
pub enum HyperNodeMemberType {
    Node,
    HyperNode,
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HyperNodeMemberDef {
    #[serde(rename = "type")]
    pub kind: HyperNodeMemberType,
    pub selector: MemberSelectorDef,
}

/// Exactly one of the three, as Volcano's CRD validation demands.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MemberSelectorDef {
    #[serde(default)]
    pub exact_match: Option<ExactMatchDef>,
    #[serde(default)]
    pub regex_match: Option<RegexMatchDef>,
    #[serde(default)]
    pub label_match: Option<LabelMatchDef>,
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExactMatchDef {
    pub name: String,
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RegexMatchDef {
    pub pattern: String,
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LabelMatchDef {
    pub match_labels: BTreeMap<String, String>,
}

impl HyperNodeDef {
    /// The engine's HyperNode.
    pub fn to_spec(&self) -> HyperNodeSpec {
        HyperNodeSpec {
            name: self.name.clone(),
            tier: self.tier,
            tier_name: None,
            members: self
                .members
                .iter()
                .map(|m| HyperNodeMember {
                    kind: match m.kind {
                        HyperNodeMemberType::Node => MemberKind::Node,
                        HyperNodeMemberType::HyperNode => MemberKind::HyperNode,
                    },
                    selector: m.selector.to_selector(),
                })
                .collect(),
        }
    }
}

impl MemberSelectorDef {
    fn to_selector(&self) -> MemberSelector {
        match (&self.exact_match, &self.regex_match, &self.label_match) {
            (Some(e), None, None) => MemberSelector::Exact(e.name.clone()),
            (None, Some(r), None) => MemberSelector::Regex(r.pattern.clone()),
            (None, None, Some(l)) => MemberSelector::Labels(l.match_labels.clone()),
            (None, None, None) => MemberSelector::Invalid("no selector given".into()),
            _ => MemberSelector::Invalid(
                "exactMatch, regexMatch and labelMatch are exclusive".into(),
            ),
        }
    }
}

/// Submit `count` copies of a job, one every `every`.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Repeat {
    pub count: u32,
    pub every: Millis,
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JobDef {
    pub name: String,
    #[serde(default = "default_namespace")]
    pub namespace: String,
    #[serde(default = "default_queue")]
    pub queue: String,
    #[serde(default, skip_serializing_if = "is_default")]
    pub submit_at: Millis,
    /// How long before its submission the gang was created (a snapshot's gangs were
    /// created before t=0): the gangs equal by the plugins' order go oldest first, and a
    /// preemption delay counts from it, as on the cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_before: Option<Millis>,
    /// Defaults to every task of the job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_member: Option<u32>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub min_task_member: BTreeMap<String, u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_resources: Option<ResourceList>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub priority: i32,
    /// Its PriorityClass's `rust-batch.io/min-runtime` annotation: how long its pods run
    /// before preempt or reclaim may take them (wins over its queue's `minRuntime`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_runtime: Option<Millis>,
    /// Its PriorityClass's `rust-batch.io/preemption-delay` annotation: how long it waits
    /// before it may evict others (wins over its queue's `preemptionDelay`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption_delay: Option<Millis>,
    /// Runtime jitter as a fraction (0.2 = ±20%), drawn once per job (its pods finish
    /// together, as a gang's do) from the scenario's seed.
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub runtime_jitter: f64,
    /// The runtime estimate every pod of the job carries (`rust-batch.io/runtime-estimate`);
    /// none by default. `runtime` is the true runtime, which the scheduler never sees.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimate: Option<Millis>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeat: Option<Repeat>,
    /// Koordinator-style gang options (mode, match policy, total number, group, waiting
    /// time).
    #[serde(default, skip_serializing_if = "is_default")]
    pub gang: GangDef,
    /// Volcano's PodGroup `spec.networkTopology`: keep the gang inside one network domain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_topology: Option<NetworkTopologyDef>,
    /// Volcano's PodGroup `spec.subGroupPolicy`: subgroups that bind only whole.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sub_group_policy: Vec<SubGroupPolicyDef>,
    pub tasks: Vec<TaskDef>,
}

/// One entry of Volcano's `subGroupPolicy`, with its field names and defaults.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SubGroupPolicyDef {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub sub_group_size: u32,
    #[serde(default, skip_serializing_if = "is_default")]
    pub min_sub_groups: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<crate::model::pod_rules::LabelSelector>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_label_keys: Vec<String>,
    /// Each subgroup inside one network domain of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_topology: Option<NetworkTopologyDef>,
}

impl SubGroupPolicyDef {
    /// The engine's rule; `index` names an unnamed policy by its position, as the
    /// Kubernetes driver does; `object` names the gang in messages.
    pub fn to_policy(&self, index: usize, object: &str) -> crate::model::SubGroupPolicy {
        crate::model::SubGroupPolicy {
            name: self
                .name
                .clone()
                .unwrap_or_else(|| index.to_string())
                .into(),
            size: self.sub_group_size,
            min_groups: self.min_sub_groups,
            selector: self.label_selector.clone(),
            match_label_keys: self.match_label_keys.clone(),
            topology: self.network_topology.as_ref().map(|t| {
                TopologyRequest::from_volcano_field(
                    t.mode.as_deref(),
                    t.highest_tier_allowed,
                    object,
                    &format!("spec.subGroupPolicy[{index}].networkTopology"),
                )
            }),
        }
    }
}

/// The label the simulator gives each replica of a task with `groupSize`: its group's
/// index (LeaderWorkerSet's `leaderworkerset.sigs.k8s.io/group-index` plays this part).
pub const GROUP_INDEX_LABEL: &str = "group-index";

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GangDef {
    #[serde(default, skip_serializing_if = "is_default")]
    pub mode: crate::model::GangMode,
    #[serde(default, skip_serializing_if = "is_default")]
    pub match_policy: crate::model::MatchPolicy,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_number: Option<u32>,
    /// Names of the jobs (in this job's namespace) forming a GangGroup with this one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub group: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_time: Option<Millis>,
    /// The gang's own `preemptionPolicy: Never` (Kubernetes' PodGroup).
    #[serde(default, skip_serializing_if = "is_default")]
    pub never_preempts: bool,
    /// `disruptionMode: All` (Kubernetes' PodGroup): a member is evicted only with the
    /// whole gang.
    #[serde(default, skip_serializing_if = "is_default")]
    pub disrupt_whole: bool,
}

impl JobDef {
    pub fn task_count(&self) -> u32 {
        self.tasks.iter().map(|t| t.replicas).sum()
    }
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeChange {
    pub group: String,
    pub count: u32,
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EventDef {
    pub at: Millis,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub add_nodes: Option<NodeChange>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remove_nodes: Option<NodeChange>,
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    #[serde(default)]
    pub seed: u64,
    #[serde(default = "default_period")]
    pub schedule_period: Millis,
    /// Stop here even if jobs are still waiting (a gang that can never fit would wait forever).
    #[serde(default = "default_max_time")]
    pub max_time: Millis,
    /// Scheduler configuration (Volcano format) inline; Volcano's default if absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<String>,
    /// How long an evicted pod takes to terminate.
    #[serde(default = "default_grace")]
    pub eviction_grace: Millis,
    pub node_groups: Vec<NodeGroup>,
    /// DRA DeviceClasses (see `sim::devices`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub device_classes: Vec<super::devices::DeviceClassDef>,
    /// DRA network-attached pools: devices reachable from every node whose labels match,
    /// allocatable once cluster-wide (see `sim::devices`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub device_pools: Vec<super::devices::DevicePoolDef>,
    /// Volcano HyperNodes describing the network topology, given to the scheduler at start.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hypernodes: Vec<HyperNodeDef>,
    /// Node label keys, narrowest first (e.g. a rack key, then a zone key), by which the
    /// report measures how many domains each gang spans. Only the report reads them (the
    /// scheduler's own levels are its plugins' arguments), so one scenario can compare
    /// configurations with and without topology-aware placement.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub topology_levels: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub queues: Vec<QueueDef>,
    /// Pods rust-batch does not schedule, running on their nodes from t=0 on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub other_pods: Vec<OtherPodDef>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jobs: Vec<JobDef>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<EventDef>,
    /// Predict each waiting gang's start time (as `rust-batch run` does) and report the
    /// prediction made at submission and at the head of its queue against the actual start.
    #[serde(default, skip_serializing_if = "is_default")]
    pub predict_start: bool,
}

fn default_period() -> Millis {
    Millis(1000)
}
fn default_max_time() -> Millis {
    Millis(24 * 3600 * 1000)
}
fn default_grace() -> Millis {
    Millis(30_000)
}

impl Scenario {
    pub fn load(path: &Path) -> Result<Self, ScenarioError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Io {
            file: file.clone(),
            source,
        })?;
        Self::parse(&text, &file)
    }

    pub fn parse(text: &str, file: &str) -> Result<Self, ScenarioError> {
        // The error names the exact field ("jobs[0].submitAt: …"), with line and column.
        let scenario: Scenario =
            crate::yaml::from_str_with_path(text).map_err(|message| ScenarioError::Parse {
                file: file.to_string(),
                message,
            })?;
        scenario.validate(file)?;
        Ok(scenario)
    }

    /// The scenario as a YAML file that `parse` reads back to an equal scenario.
    pub fn to_yaml(&self) -> Result<String, String> {
        serde_saphyr::to_string(self).map_err(|e| e.to_string())
    }

    /// The nodes the scenario has at t=0, by name, with their group.
    pub fn initial_nodes(&self) -> BTreeMap<String, usize> {
        let mut nodes = BTreeMap::new();
        for (i, g) in self.node_groups.iter().enumerate() {
            for n in 1..=g.count {
                nodes.insert(g.node_name(n), i);
            }
        }
        nodes
    }

    /// The scheduler this scenario runs: its configuration with every action and plugin
    /// built (so a bad name or argument is an error of the scenario file).
    pub fn scheduler(&self, file: &str) -> Result<Scheduler, ScenarioError> {
        Scheduler::new(self.scheduler_conf(file)?, &crate::REGISTRY).map_err(|source| {
            ScenarioError::Config {
                file: file.to_string(),
                source,
            }
        })
    }

    /// The scheduler configuration this scenario runs with.
    pub fn scheduler_conf(&self, file: &str) -> Result<SchedulerConf, ScenarioError> {
        match &self.config {
            None => Ok(SchedulerConf::default_conf()),
            Some(text) => {
                SchedulerConf::parse(text, &format!("{file} (config)")).map_err(|source| {
                    ScenarioError::Config {
                        file: file.to_string(),
                        source,
                    }
                })
            }
        }
    }
}

mod validate;

#[cfg(test)]
mod tests;
