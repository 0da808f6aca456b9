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
    HyperNodeMember, HyperNodeSpec, MemberKind, MemberSelector, QueueState, ResourceList,
    TopologyRequest,
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

    fn validate(&self, file: &str) -> Result<(), ScenarioError> {
        let invalid = |field: String, message: String| ScenarioError::Invalid {
            file: file.to_string(),
            field,
            message,
        };
        if self.schedule_period.0 <= 0 {
            return Err(invalid(
                "schedulePeriod".into(),
                "must be longer than 0s".into(),
            ));
        }
        for (j, job) in self.jobs.iter().enumerate() {
            for (i, p) in job.sub_group_policy.iter().enumerate() {
                if p.sub_group_size == 0 {
                    return Err(invalid(
                        format!("jobs[{j}].subGroupPolicy[{i}].subGroupSize"),
                        "must be at least 1".into(),
                    ));
                }
            }
            for (i, t) in job.tasks.iter().enumerate() {
                for (c, claim) in t.claims.iter().enumerate() {
                    if let Err(message) = claim.to_spec() {
                        return Err(invalid(
                            format!("jobs[{j}].tasks[{i}].claims[{c}]"),
                            message,
                        ));
                    }
                }
                if t.group_size == Some(0) {
                    return Err(invalid(
                        format!("jobs[{j}].tasks[{i}].groupSize"),
                        "must be at least 1".into(),
                    ));
                }
            }
        }
        for (i, pool) in self.device_pools.iter().enumerate() {
            if let Err(message) = pool.devices.validate() {
                return Err(invalid(format!("devicePools[{i}]"), message));
            }
        }
        let mut groups = Vec::new();
        for (i, g) in self.node_groups.iter().enumerate() {
            for (d, set) in g.devices.iter().enumerate() {
                if let Err(message) = set.validate() {
                    return Err(invalid(format!("nodeGroups[{i}].devices[{d}]"), message));
                }
            }
            if groups.contains(&g.name.as_str()) {
                return Err(invalid(
                    format!("nodeGroups[{i}].name"),
                    format!("{:?} is used twice", g.name),
                ));
            }
            groups.push(g.name.as_str());
            if g.allocatable.0.is_empty() {
                return Err(invalid(
                    format!("nodeGroups[{i}].allocatable"),
                    "a node needs some resources, e.g. {cpu: \"8\", memory: 32Gi}".into(),
                ));
            }
        }
        self.validate_pinned(file)?;
        let mut nodes: u64 = 0;
        let node_counts = self
            .node_groups
            .iter()
            .enumerate()
            .map(|(i, g)| (format!("nodeGroups[{i}].count"), g.count))
            .chain(self.events.iter().enumerate().filter_map(|(i, e)| {
                let c = e.add_nodes.as_ref()?;
                Some((format!("events[{i}].addNodes.count"), c.count))
            }));
        for (field, count) in node_counts {
            nodes += u64::from(count);
            if nodes > MAX_NODES {
                return Err(invalid(
                    field,
                    format!(
                        "{nodes} nodes in all (node groups and addNodes events) is more than \
                         the simulator's limit of {MAX_NODES}"
                    ),
                ));
            }
        }
        let mut queues: Vec<&str> = vec!["default"];
        for (i, q) in self.queues.iter().enumerate() {
            if q.weight == 0 {
                return Err(invalid(
                    format!("queues[{i}].weight"),
                    "must be at least 1".into(),
                ));
            }
            queues.push(&q.name);
        }
        let infos: Vec<crate::model::QueueInfo> =
            self.queues.iter().map(QueueDef::to_info).collect();
        let tree = crate::model::QueueTree::new(infos.iter());
        for (i, q) in infos.iter().enumerate() {
            if let Some(problem) = tree.problem(&q.name) {
                let problem = problem.trim_start_matches("spec.parent: ");
                return Err(invalid(format!("queues[{i}].parent"), problem.into()));
            }
            if let Some(problem) = q.guarantee_problem() {
                let problem = problem.trim_start_matches("spec.guarantee: ");
                return Err(invalid(format!("queues[{i}].guarantee"), problem.into()));
            }
        }
        let mut names = Vec::new();
        let mut pods: u64 = 0;
        for (i, j) in self.jobs.iter().enumerate() {
            let at = format!("jobs[{i}]");
            if names.contains(&(&j.namespace, &j.name)) {
                return Err(invalid(
                    format!("{at}.name"),
                    format!("{}/{} is used twice", j.namespace, j.name),
                ));
            }
            names.push((&j.namespace, &j.name));
            if !queues.contains(&j.queue.as_str()) {
                return Err(invalid(
                    format!("{at}.queue"),
                    format!(
                        "queue {:?} is not defined; defined queues: {}",
                        j.queue,
                        queues.join(", ")
                    ),
                ));
            }
            if j.tasks.is_empty() {
                return Err(invalid(
                    format!("{at}.tasks"),
                    "a job needs at least one task".into(),
                ));
            }
            for (k, t) in j.tasks.iter().enumerate() {
                if t.replicas == 0 {
                    return Err(invalid(
                        format!("{at}.tasks[{k}].replicas"),
                        "must be at least 1".into(),
                    ));
                }
                if let Some(p) = t.pod_rules().problem() {
                    let (field, message) = p.split_once(": ").unwrap_or(("", &p));
                    let field = if field.starts_with("topologySpreadConstraints") {
                        field.to_string()
                    } else {
                        format!("affinity.{field}")
                    };
                    return Err(invalid(format!("{at}.tasks[{k}].{field}"), message.into()));
                }
            }
            let copies = j.repeat.as_ref().map_or(1, |r| u64::from(r.count));
            pods += copies * j.tasks.iter().map(|t| u64::from(t.replicas)).sum::<u64>();
            if pods > MAX_PODS {
                let field = if copies > 1 { "repeat.count" } else { "tasks" };
                return Err(invalid(
                    format!("{at}.{field}"),
                    format!(
                        "{pods} pods in all (every job's replicas times its repeat count) is \
                         more than the simulator's limit of {MAX_PODS}"
                    ),
                ));
            }
            let total = j.task_count();
            for (k, member) in j.gang.group.iter().enumerate() {
                if !self
                    .jobs
                    .iter()
                    .any(|o| o.name == *member && o.namespace == j.namespace)
                {
                    return Err(invalid(
                        format!("{at}.gang.group[{k}]"),
                        format!("no job {member:?} in namespace {}", j.namespace),
                    ));
                }
            }
            if let Some(min) = j.min_member {
                if min > total {
                    return Err(invalid(
                        format!("{at}.minMember"),
                        format!("{min} is more than the job's {total} tasks; the gang could never start"),
                    ));
                }
            }
            for (role, min) in &j.min_task_member {
                let have: u32 = j
                    .tasks
                    .iter()
                    .filter(|t| &t.role == role)
                    .map(|t| t.replicas)
                    .sum();
                if have < *min {
                    return Err(invalid(
                        format!("{at}.minTaskMember.{role}"),
                        format!("{min} is more than the {have} tasks of role {role:?}"),
                    ));
                }
            }
            if !(0.0..1.0).contains(&j.runtime_jitter) {
                return Err(invalid(
                    format!("{at}.runtimeJitter"),
                    "must be in [0, 1)".into(),
                ));
            }
            if let Some(r) = &j.repeat {
                if r.count == 0 {
                    return Err(invalid(
                        format!("{at}.repeat.count"),
                        "must be at least 1".into(),
                    ));
                }
            }
        }
        for (i, e) in self.events.iter().enumerate() {
            let at = format!("events[{i}]");
            if e.add_nodes.is_none() && e.remove_nodes.is_none() {
                return Err(invalid(at, "an event needs addNodes or removeNodes".into()));
            }
            for (key, change) in [("addNodes", &e.add_nodes), ("removeNodes", &e.remove_nodes)] {
                if let Some(c) = change {
                    if !groups.contains(&c.group.as_str()) {
                        return Err(invalid(
                            format!("{at}.{key}.group"),
                            format!(
                                "node group {:?} is not defined; defined groups: {}",
                                c.group,
                                groups.join(", ")
                            ),
                        ));
                    }
                }
            }
        }
        self.validate_topology(file)?;
        self.scheduler(file)?;
        Ok(())
    }

    /// Node names, pods running at t=0 and other pods: each on a node the scenario has at
    /// t=0.
    fn validate_pinned(&self, file: &str) -> Result<(), ScenarioError> {
        let invalid = |field: String, message: String| ScenarioError::Invalid {
            file: file.to_string(),
            field,
            message,
        };
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        for (i, g) in self.node_groups.iter().enumerate() {
            if g.names.len() > g.count as usize {
                return Err(invalid(
                    format!("nodeGroups[{i}].names"),
                    format!("{} names for a count of {}", g.names.len(), g.count),
                ));
            }
            if g.names.iter().any(String::is_empty) {
                return Err(invalid(
                    format!("nodeGroups[{i}].names"),
                    "a node name must not be empty".into(),
                ));
            }
            if g.names.is_empty() {
                continue;
            }
            for n in 1..=g.count {
                let name = g.node_name(n);
                if let Some(other) = seen.insert(name.clone(), i) {
                    return Err(invalid(
                        format!("nodeGroups[{i}].names"),
                        format!("node {name:?} is also a node of nodeGroups[{other}]"),
                    ));
                }
            }
        }
        let nodes = if self
            .jobs
            .iter()
            .any(|j| j.tasks.iter().any(|t| !t.running.is_empty()))
            || !self.other_pods.is_empty()
        {
            self.initial_nodes()
        } else {
            BTreeMap::new()
        };
        for (j, job) in self.jobs.iter().enumerate() {
            for (k, t) in job.tasks.iter().enumerate() {
                if t.running.is_empty() {
                    continue;
                }
                let at = format!("jobs[{j}].tasks[{k}].running");
                if t.running.len() > t.replicas as usize {
                    return Err(invalid(
                        at,
                        format!(
                            "{} pods running for {} replicas",
                            t.running.len(),
                            t.replicas
                        ),
                    ));
                }
                if job.submit_at.0 != 0 || job.repeat.is_some() {
                    return Err(invalid(
                        at,
                        "only a job submitted at t=0, not repeated, has pods running at t=0".into(),
                    ));
                }
                for (r, pod) in t.running.iter().enumerate() {
                    if !nodes.contains_key(&pod.node) {
                        return Err(invalid(
                            format!("{at}[{r}].node"),
                            format!("no node {:?} at t=0", pod.node),
                        ));
                    }
                }
            }
        }
        for (i, pod) in self.other_pods.iter().enumerate() {
            if !nodes.contains_key(&pod.node) {
                return Err(invalid(
                    format!("otherPods[{i}].node"),
                    format!("no node {:?} at t=0", pod.node),
                ));
            }
        }
        Ok(())
    }

    /// `topologyLevels` and `hypernodes`. What depends on the nodes (a node selected by two
    /// HyperNodes of one tier) can change as nodes come and go; the engine reports it and
    /// the report lists it, as for a live cluster.
    fn validate_topology(&self, file: &str) -> Result<(), ScenarioError> {
        let invalid = |field: String, message: String| ScenarioError::Invalid {
            file: file.to_string(),
            field,
            message,
        };
        if self.topology_levels.len() > MAX_TOPOLOGY_LEVELS {
            return Err(invalid(
                "topologyLevels".into(),
                format!(
                    "{} levels is more than the simulator's limit of {MAX_TOPOLOGY_LEVELS}",
                    self.topology_levels.len()
                ),
            ));
        }
        for (i, key) in self.topology_levels.iter().enumerate() {
            if let Some(why) = label_key_problem(key) {
                return Err(invalid(
                    format!("topologyLevels[{i}]"),
                    format!("{key:?} is not a node label key ({why})"),
                ));
            }
            if self.topology_levels[..i].contains(key) {
                return Err(invalid(
                    format!("topologyLevels[{i}]"),
                    format!("{key:?} is listed twice"),
                ));
            }
        }
        if self.hypernodes.len() > MAX_HYPERNODES {
            return Err(invalid(
                "hypernodes".into(),
                format!(
                    "{} HyperNodes is more than the simulator's limit of {MAX_HYPERNODES}",
                    self.hypernodes.len()
                ),
            ));
        }
        for (i, h) in self.hypernodes.iter().enumerate() {
            let at = format!("hypernodes[{i}]");
            if h.name.is_empty() {
                return Err(invalid(format!("{at}.name"), "must not be empty".into()));
            }
            if self.hypernodes[..i].iter().any(|o| o.name == h.name) {
                return Err(invalid(
                    format!("{at}.name"),
                    format!("{:?} is used twice", h.name),
                ));
            }
            if h.tier == 0 {
                return Err(invalid(
                    format!("{at}.tier"),
                    "must be at least 1 (1 is the narrowest tier)".into(),
                ));
            }
            if h.members.is_empty() {
                return Err(invalid(
                    format!("{at}.members"),
                    "a HyperNode needs at least one member (Volcano's admission refuses one \
                     without)"
                        .into(),
                ));
            }
            for (k, m) in h.members.iter().enumerate() {
                let at = format!("{at}.members[{k}].selector");
                if let MemberSelector::Invalid(why) = m.selector.to_selector() {
                    return Err(invalid(
                        at,
                        format!("{why}; give one of exactMatch, regexMatch, labelMatch"),
                    ));
                }
                let is_hypernode = m.kind == HyperNodeMemberType::HyperNode;
                // The engine's matching: a pattern must match the whole name.
                let matches: Box<dyn Fn(&str) -> bool> = match &m.selector {
                    MemberSelectorDef {
                        exact_match: Some(e),
                        ..
                    } => {
                        if e.name.is_empty() {
                            return Err(invalid(
                                format!("{at}.exactMatch.name"),
                                "must not be empty".into(),
                            ));
                        }
                        let name = e.name.clone();
                        Box::new(move |n: &str| n == name)
                    }
                    MemberSelectorDef {
                        regex_match: Some(r),
                        ..
                    } if r.pattern.is_empty() => {
                        return Err(invalid(
                            format!("{at}.regexMatch.pattern"),
                            "must not be empty".into(),
                        ))
                    }
                    MemberSelectorDef {
                        regex_match: Some(r),
                        ..
                    } => match regex::Regex::new(&format!("^(?:{})$", r.pattern)) {
                        Ok(re) => Box::new(move |n: &str| re.is_match(n)),
                        Err(e) => {
                            let why = e.to_string();
                            let why = why.lines().last().unwrap_or_default().trim().to_string();
                            return Err(invalid(
                                format!("{at}.regexMatch.pattern"),
                                format!("{:?} is not a regular expression ({why})", r.pattern),
                            ));
                        }
                    },
                    _ if is_hypernode => {
                        return Err(invalid(
                            format!("{at}.labelMatch"),
                            "selects nodes by their labels; name HyperNode members with \
                             exactMatch or regexMatch"
                                .into(),
                        ))
                    }
                    _ => continue,
                };
                if !is_hypernode {
                    continue;
                }
                let children: Vec<&HyperNodeDef> = self
                    .hypernodes
                    .iter()
                    .filter(|c| matches(&c.name))
                    .collect();
                if let (Some(e), true) = (&m.selector.exact_match, children.is_empty()) {
                    return Err(invalid(
                        format!("{at}.exactMatch.name"),
                        format!("no HyperNode {:?} is declared", e.name),
                    ));
                }
                if let Some(c) = children.iter().find(|c| c.tier >= h.tier) {
                    return Err(invalid(
                        at,
                        format!(
                            "selects HyperNode {} of tier {}; members must be of a lower tier \
                             than {}'s {}",
                            c.name, c.tier, h.name, h.tier
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = "name: t\nnodeGroups:\n- name: g\n  count: 1\n  allocatable: {cpu: 4}\n";

    #[test]
    fn bundled_default_parses() {
        let s = Scenario::parse(DEFAULT_SCENARIO, "default.yaml").unwrap();
        assert!(!s.jobs.is_empty());
    }

    #[test]
    fn huge_counts_and_durations_are_refused_not_simulated() {
        // Found writing the scenario fuzz target (the inputs are in fuzz/corpus/scenario):
        // replicas summed past u32::MAX panicked, a repeat's `every` times its count
        // overflowed the virtual clock, and a few bytes could ask for billions of nodes or
        // pods.
        let msg = |text: String| Scenario::parse(&text, "s.yaml").unwrap_err().to_string();
        let overflow = format!(
            "{MINIMAL}jobs:\n- name: j\n  tasks:\n  - role: a\n    replicas: 4294967295\n  - role: b\n    replicas: 4294967295\n"
        );
        assert!(
            msg(overflow).contains("s.yaml: jobs[0].tasks: 8589934590 pods in all"),
            "replicas"
        );
        let repeated = format!(
            "{MINIMAL}jobs:\n- name: j\n  repeat: {{count: 4000000, every: 10000years}}\n  tasks:\n  - role: a\n"
        );
        let m = msg(repeated);
        assert!(m.contains("jobs[0].repeat.every"), "{m}");
        assert!(
            m.contains("longer than the simulator's limit of 100 years"),
            "{m}"
        );
        let repeated = format!(
            "{MINIMAL}jobs:\n- name: j\n  repeat: {{count: 4000000, every: 1s}}\n  tasks:\n  - role: a\n"
        );
        let m = msg(repeated);
        assert!(
            m.contains("jobs[0].repeat.count: 4000000 pods in all") && m.contains("1000000"),
            "{m}"
        );
        let nodes =
            "name: t\nnodeGroups:\n- name: g\n  count: 1000000000\n  allocatable: {cpu: 4}\n";
        let m = msg(nodes.into());
        assert!(
            m.contains("nodeGroups[0].count: 1000000000 nodes in all")
                && m.contains("limit of 100000"),
            "{m}"
        );
        let added =
            format!("{MINIMAL}events:\n- at: 1m\n  addNodes: {{group: g, count: 4294967295}}\n");
        assert!(msg(added).contains("events[0].addNodes.count: 4294967296 nodes in all"));
        let long = format!("{MINIMAL}maxTime: 18446744073709551615s\n");
        assert!(msg(long).contains("maxTime"));
        // At the limits, it loads.
        let at_limits = format!(
            "{MINIMAL}maxTime: 100years\njobs:\n- name: j\n  repeat: {{count: 1000, every: 36500days}}\n  tasks:\n  - role: a\n    replicas: 1000\n"
        );
        Scenario::parse(&at_limits, "s.yaml").unwrap();
    }

    #[test]
    fn errors_point_to_the_field() {
        let bad_quantity = format!(
            "{MINIMAL}jobs:\n- name: j\n  tasks:\n  - role: w\n    requests: {{memory: lots}}\n"
        );
        let msg = Scenario::parse(&bad_quantity, "s.yaml")
            .unwrap_err()
            .to_string();
        assert!(msg.contains("jobs[0].tasks[0].requests"), "{msg}");
        assert!(msg.contains("resource memory"), "{msg}");

        let looped = format!("{MINIMAL}queues:\n- name: a\n  parent: b\n- name: b\n  parent: a\n");
        let msg = Scenario::parse(&looped, "s.yaml").unwrap_err().to_string();
        assert!(
            msg.contains("s.yaml: queues[0].parent: queues a -> b form a cycle"),
            "{msg}"
        );
        let greedy = format!(
            "{MINIMAL}queues:\n- name: a\n  capability: {{cpu: \"2\"}}\n  guarantee: {{cpu: \"4\"}}\n"
        );
        let msg = Scenario::parse(&greedy, "s.yaml").unwrap_err().to_string();
        assert!(
            msg.contains("s.yaml: queues[0].guarantee: cpu 4 is above the capability 2"),
            "{msg}"
        );
        let bad_queue =
            format!("{MINIMAL}jobs:\n- name: j\n  queue: nope\n  tasks:\n  - role: w\n");
        let msg = Scenario::parse(&bad_queue, "s.yaml")
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("s.yaml: jobs[0].queue: queue \"nope\" is not defined"),
            "{msg}"
        );

        let bad_min = format!(
            "{MINIMAL}jobs:\n- name: j\n  minMember: 3\n  tasks:\n  - role: w\n    replicas: 2\n"
        );
        let msg = Scenario::parse(&bad_min, "s.yaml").unwrap_err().to_string();
        assert!(
            msg.contains("jobs[0].minMember: 3 is more than the job's 2 tasks"),
            "{msg}"
        );

        let bad_duration =
            format!("{MINIMAL}jobs:\n- name: j\n  submitAt: soon\n  tasks:\n  - role: w\n");
        let msg = Scenario::parse(&bad_duration, "s.yaml")
            .unwrap_err()
            .to_string();
        assert!(msg.contains("jobs[0].submitAt"), "{msg}");

        let bad_event =
            format!("{MINIMAL}events:\n- at: 1m\n  addNodes: {{group: gpu, count: 1}}\n");
        let msg = Scenario::parse(&bad_event, "s.yaml")
            .unwrap_err()
            .to_string();
        assert!(msg.contains("events[0].addNodes.group"), "{msg}");

        let unknown_field =
            format!("{MINIMAL}jobs:\n- name: j\n  minMembers: 1\n  tasks:\n  - role: w\n");
        let msg = Scenario::parse(&unknown_field, "s.yaml")
            .unwrap_err()
            .to_string();
        assert!(msg.contains("minMembers"), "{msg}");

        let bad_conf =
            format!("{MINIMAL}config: |\n  actions: \"allocate, teleport\"\n  tiers: []\n");
        let msg = Scenario::parse(&bad_conf, "s.yaml")
            .unwrap_err()
            .to_string();
        assert!(msg.contains("unknown action \"teleport\""), "{msg}");
    }

    const TOPOLOGY: &str = r#"
name: t
topologyLevels: [example.com/rack, topology.kubernetes.io/zone]
nodeGroups:
- name: g
  count: 2
  allocatable: {cpu: 4}
  labels: {example.com/rack: r0}
hypernodes:
- name: leaf
  tier: 1
  members:
  - type: Node
    selector: {regexMatch: {pattern: "g-[12]"}}
- name: by-label
  tier: 1
  members:
  - type: Node
    selector: {labelMatch: {matchLabels: {example.com/rack: r9}}}
- name: spine
  tier: 2
  members:
  - type: HyperNode
    selector: {exactMatch: {name: leaf}}
jobs:
- name: j
  networkTopology: {mode: hard, highestTierAllowed: 2}
  tasks:
  - role: w
    annotations: {kueue.x-k8s.io/podset-required-topology: example.com/rack}
"#;

    #[test]
    fn topology_fields_parse_into_the_engine_model() {
        use crate::model::{TopologyBound, TopologyMode};
        let s = Scenario::parse(TOPOLOGY, "s.yaml").unwrap();
        assert_eq!(s.topology_levels.len(), 2);
        let specs: Vec<HyperNodeSpec> = s.hypernodes.iter().map(HyperNodeDef::to_spec).collect();
        assert_eq!(
            specs[0].members[0],
            HyperNodeMember {
                kind: MemberKind::Node,
                selector: MemberSelector::Regex("g-[12]".into())
            }
        );
        assert_eq!(
            specs[1].members[0].selector,
            MemberSelector::Labels([("example.com/rack".into(), "r9".into())].into())
        );
        assert_eq!(specs[2].members[0].kind, MemberKind::HyperNode);
        let req = s.jobs[0]
            .network_topology
            .as_ref()
            .unwrap()
            .to_request("default/j");
        assert_eq!(
            (req.mode, req.bound, req.problem),
            (TopologyMode::Hard, TopologyBound::Tier(2), None)
        );
        assert_eq!(
            s.jobs[0].tasks[0].annotations["kueue.x-k8s.io/podset-required-topology"],
            "example.com/rack"
        );
    }

    #[test]
    fn a_malformed_topology_request_is_the_engines_to_report_not_a_scenario_error() {
        // As with a PodGroup on a live cluster: the gang is told, nothing is refused.
        let odd = TOPOLOGY
            .replace(
                "mode: hard, highestTierAllowed: 2",
                "mode: strict, highestTierAllowed: 0",
            )
            .replace(": example.com/rack}", ": \"not a key\"}");
        let s = Scenario::parse(&odd, "s.yaml").unwrap();
        let req = s.jobs[0]
            .network_topology
            .as_ref()
            .unwrap()
            .to_request("default/j");
        assert!(req
            .problem
            .unwrap()
            .starts_with("PodGroup default/j: spec.networkTopology"));
        // Types are still the scenario's to get right.
        let msg = Scenario::parse(
            &TOPOLOGY.replace("highestTierAllowed: 2", "highestTierAllowed: two"),
            "s.yaml",
        )
        .unwrap_err()
        .to_string();
        assert!(
            msg.contains("jobs[0].networkTopology.highestTierAllowed"),
            "{msg}"
        );
        let msg = Scenario::parse(&TOPOLOGY.replace("mode: hard", "tier: 1"), "s.yaml")
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("jobs[0].networkTopology") && msg.contains("tier"),
            "{msg}"
        );
    }

    #[test]
    fn topology_errors_point_to_the_field() {
        let msg = |from: &str, to: &str| {
            assert!(TOPOLOGY.contains(from), "{from}");
            Scenario::parse(&TOPOLOGY.replace(from, to), "s.yaml")
                .unwrap_err()
                .to_string()
        };
        let cases = [
            (
                "example.com/rack, topology",
                "Example.com/rack, topology",
                "s.yaml: topologyLevels[0]: \"Example.com/rack\" is not a node label key",
            ),
            (
                "topologyLevels: [example.com/rack, topology.kubernetes.io/zone]",
                "topologyLevels: [example.com/rack, example.com/rack]",
                "s.yaml: topologyLevels[1]: \"example.com/rack\" is listed twice",
            ),
            (
                "- type: Node\n    selector: {regexMatch",
                "- type: Switch\n    selector: {regexMatch",
                "hypernodes[0].members[0].type: unknown variant `Switch`",
            ),
            (
                "{regexMatch: {pattern: \"g-[12]\"}}",
                "{regexMatch: {pattern: \"g-[12\"}}",
                "s.yaml: hypernodes[0].members[0].selector.regexMatch.pattern: \"g-[12\" is not a regular expression",
            ),
            (
                "{regexMatch: {pattern: \"g-[12]\"}}",
                "{regexMatch: {pattern: g}, exactMatch: {name: g-1}}",
                "s.yaml: hypernodes[0].members[0].selector: exactMatch, regexMatch and labelMatch are exclusive",
            ),
            (
                "{regexMatch: {pattern: \"g-[12]\"}}",
                "{}",
                "s.yaml: hypernodes[0].members[0].selector: no selector given; give one of",
            ),
            (
                "name: leaf\n  tier: 1",
                "name: leaf\n  tier: 0",
                "s.yaml: hypernodes[0].tier: must be at least 1",
            ),
            (
                "name: by-label",
                "name: leaf",
                "s.yaml: hypernodes[1].name: \"leaf\" is used twice",
            ),
            (
                "{exactMatch: {name: leaf}}",
                "{exactMatch: {name: leaves}}",
                "s.yaml: hypernodes[2].members[0].selector.exactMatch.name: no HyperNode \"leaves\" is declared",
            ),
            (
                "{exactMatch: {name: leaf}}",
                "{regexMatch: {pattern: \".*\"}}",
                "s.yaml: hypernodes[2].members[0].selector: selects HyperNode spine of tier 2; members must be of a lower tier than spine's 2",
            ),
            (
                "type: HyperNode\n    selector: {exactMatch: {name: leaf}}",
                "type: HyperNode\n    selector: {labelMatch: {matchLabels: {a: b}}}",
                "s.yaml: hypernodes[2].members[0].selector.labelMatch: selects nodes by their labels",
            ),
            (
                "{regexMatch: {pattern: \"g-[12]\"}}",
                "{regexMatch: {pattern: \"\"}}",
                "s.yaml: hypernodes[0].members[0].selector.regexMatch.pattern: must not be empty",
            ),
            (
                "- name: spine\n  tier: 2\n  members:\n  - type: HyperNode\n    selector: {exactMatch: {name: leaf}}",
                "- name: spine\n  tier: 2\n  members: []",
                "s.yaml: hypernodes[2].members: a HyperNode needs at least one member",
            ),
            (
                "{matchLabels: {example.com/rack: r9}}",
                "{matchExpressions: []}",
                "hypernodes[1].members[0].selector.labelMatch.matchExpressions: unknown field `matchExpressions`, expected `matchLabels`",
            ),
        ];
        for (from, to, want) in cases {
            let m = msg(from, to);
            assert!(m.contains(want), "{to}: {m}");
        }
        let many = format!(
            "{MINIMAL}hypernodes:\n{}",
            "- {name: h, tier: 1, members: []}\n".repeat(MAX_HYPERNODES + 1)
        );
        let m = Scenario::parse(&many, "s.yaml").unwrap_err().to_string();
        assert!(
            m.contains("s.yaml: hypernodes: 1001 HyperNodes is more than"),
            "{m}"
        );
    }
}
