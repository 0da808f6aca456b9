//! `scheduling.volcano.sh/v1beta1` PodGroup and Queue: the Rust types.
//!
//! The types follow upstream Volcano (volcano-sh/apis, `pkg/apis/scheduling/v1beta1`)
//! field for field, because we install our CRDs over clusters that already hold Volcano's
//! objects, and Volcano's controllers and the operators that create PodGroups
//! (training-operator, MPI operator, KubeRay, Spark operator) keep reading and writing them.
//! Three rules follow:
//!
//! - Nothing is pruned. Every object in the schema carries
//!   `x-kubernetes-preserve-unknown-fields: true`, so fields we do not model (or that a
//!   newer Volcano adds) survive in the API server; and every Rust struct keeps such fields
//!   in `extra`, so a read-modify-write through these types loses nothing either.
//! - Nothing is rejected that upstream accepts. Enumerations (`phase`, `state`, …) are plain
//!   strings in the schema and `Other(String)` in Rust; no field is required.
//! - PodGroup has **no status subresource** (upstream has none: operators and Volcano's
//!   controllers write `status` with ordinary updates), so write PodGroup status with a patch
//!   of the object itself, not `Api::patch_status`. Queue has one.
//!
//! The root types are written out rather than derived with `kube::CustomResource`: the
//! derive gives PodGroup a status subresource as soon as it has a status, and requires
//! `spec` on every object, so one Queue created without a spec would fail a whole watch
//! list. The CRD is generated from the types with schemars, as the derive would (see
//! `dialects::crds`).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use ::kube::core::object::{HasSpec, HasStatus};
use ::kube::core::{ClusterResourceScope, NamespaceResourceScope, Resource};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, Time};
use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::ser::SerializeStruct;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;

/// API group of PodGroup and Queue.
pub const GROUP: &str = "scheduling.volcano.sh";
/// API version of PodGroup and Queue.
pub const VERSION: &str = "v1beta1";
/// `GROUP/VERSION`.
pub const API_VERSION: &str = "scheduling.volcano.sh/v1beta1";
/// The queue a PodGroup without `spec.queue` belongs to.
pub const DEFAULT_QUEUE: &str = "default";

/// Resource name → quantity, as in `core/v1` (`cpu`, `memory`, `nvidia.com/gpu`, …).
pub type ResourceList = BTreeMap<String, Quantity>;

/// Fields a type does not model, kept verbatim.
pub type Extra = BTreeMap<String, Value>;

// ---------------------------------------------------------------------------------------
// PodGroup
// ---------------------------------------------------------------------------------------

/// PodGroup is a collection of Pod; used for batch workload.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodGroup {
    #[schemars(skip)]
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Specification of the desired behavior of the pod group.
    #[serde(default)]
    pub spec: PodGroupSpec,
    /// Status represents the current information about a pod group. This data may not be up to
    /// date. A plain field: PodGroup has no status subresource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<PodGroupStatus>,
}

/// PodGroupSpec represents the template of a pod group.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupSpec {
    /// MinMember defines the minimal number of members/tasks to run the pod group; if there
    /// are not enough resources to start all tasks, the scheduler starts none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_member: Option<i32>,
    /// MinTaskMember defines the minimal number of pods to run each task (role) of the pod
    /// group; if there are not enough resources to start each task, the scheduler starts none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_task_member: Option<BTreeMap<String, i32>>,
    /// Queue defines the queue to allocate resource for PodGroup; if the queue does not exist,
    /// the PodGroup will not be scheduled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = DEFAULT_QUEUE))]
    pub queue: Option<String>,
    /// If specified, indicates the PodGroup's priority: the name of a PriorityClass, or one of
    /// "system-node-critical" and "system-cluster-critical". If not specified, the PodGroup
    /// priority is the default one, or zero if there is no default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    /// MinResources defines the minimal resource of members/tasks to run the pod group; if
    /// there are not enough resources to start all tasks, the scheduler starts none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "resource_list_schema")]
    pub min_resources: Option<ResourceList>,
    /// NetworkTopology defines the NetworkTopology config; it works with the network topology
    /// feature and the HyperNode CRD.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_topology: Option<NetworkTopologySpec>,
    /// SubGroupPolicy groups the pods of a PodGroup into subgroups, for subgroup-level gang
    /// scheduling and network topology affinity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_group_policy: Option<Vec<SubGroupPolicySpec>>,
    /// Fields this version does not model.
    #[serde(flatten)]
    pub extra: Extra,
}

/// Network topology constraint of a PodGroup or a subgroup.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkTopologySpec {
    /// Mode specifies the mode of the network topology constraint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<NetworkTopologyMode>,
    /// HighestTierAllowed specifies the highest tier that a job is allowed to cross when
    /// scheduling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub highest_tier_allowed: Option<i64>,
    /// HighestTierName specifies the highest tier name that a job is allowed to cross when
    /// scheduling. Not to be set together with highestTierAllowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub highest_tier_name: Option<String>,
    /// Fields this version does not model.
    #[serde(flatten)]
    pub extra: Extra,
}

/// A subgroup of the pods of a PodGroup.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SubGroupPolicySpec {
    /// Name of the subgroup policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Network topology constraint of each subgroup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_topology: Option<NetworkTopologySpec>,
    /// Number of pods in each subgroup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_group_size: Option<i32>,
    /// Minimum number of subgroups that must fit before any is scheduled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_sub_groups: Option<i32>,
    /// Selects the pods this policy applies to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
    /// Label keys whose values split the selected pods into subgroups.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_label_keys: Option<Vec<String>>,
    /// Fields this version does not model.
    #[serde(flatten)]
    pub extra: Extra,
}

/// PodGroupStatus represents the current state of a pod group.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupStatus {
    /// Current phase of PodGroup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<PodGroupPhase>,
    /// The conditions of PodGroup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<PodGroupCondition>>,
    /// The number of actively running pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<i32>,
    /// The number of pods which reached phase Succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub succeeded: Option<i32>,
    /// The number of pods which reached phase Failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<i32>,
    /// Fields this version does not model.
    #[serde(flatten)]
    pub extra: Extra,
}

/// PodGroupCondition contains details for the current state of this pod group.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupCondition {
    /// Type is the type of the condition.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<PodGroupConditionType>,
    /// Status is the status of the condition: True, False or Unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// The ID of condition transition.
    #[serde(
        default,
        rename = "transitionID",
        skip_serializing_if = "Option::is_none"
    )]
    pub transition_id: Option<String>,
    /// Last time the phase transitioned from another to current phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
    /// Unique, one-word, CamelCase reason for the phase's last transition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Human-readable message indicating details about last transition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Fields this version does not model.
    #[serde(flatten)]
    pub extra: Extra,
}

// ---------------------------------------------------------------------------------------
// Queue
// ---------------------------------------------------------------------------------------

/// Queue is a queue of PodGroup.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Queue {
    #[schemars(skip)]
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Specification of the desired behavior of the queue.
    #[serde(default)]
    pub spec: QueueSpec,
    /// The status of queue (a status subresource).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<QueueStatus>,
}

/// QueueSpec represents the template of Queue.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueSpec {
    /// Weight of the queue in proportional sharing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i32>,
    /// Upper limit of the resources the queue may use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "resource_list_schema")]
    pub capability: Option<ResourceList>,
    /// Reclaimable indicates whether the queue can be reclaimed by other queues.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reclaimable: Option<bool>,
    /// ExtendClusters indicates the jobs in this Queue will be dispatched to these clusters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extend_clusters: Option<Vec<Cluster>>,
    /// Guarantee indicates configuration about resource reservation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guarantee: Option<Guarantee>,
    /// If specified, the pods owned by the queue are scheduled with these constraints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    /// Type defines the type of queue.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// Parent defines the parent of queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// The amount of resources configured by the user. This part of resource can be shared
    /// with other queues and reclaimed back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "resource_list_schema")]
    pub deserved: Option<ResourceList>,
    /// Priority defines the priority of queue. Higher values are prioritized for scheduling
    /// and considered later during reclamation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    /// DequeueStrategy defines the dequeue strategy of queue: fifo or traverse.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dequeue_strategy: Option<DequeueStrategy>,
    /// Fields this version does not model.
    #[serde(flatten)]
    pub extra: Extra,
}

/// A cluster the jobs of a queue may be dispatched to.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Cluster {
    /// Name of the cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Weight of the cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i32>,
    /// Capacity of the cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "resource_list_schema")]
    pub capacity: Option<ResourceList>,
    /// Fields this version does not model.
    #[serde(flatten)]
    pub extra: Extra,
}

/// Guarantee represents configuration of queue resource reservation.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Guarantee {
    /// The amount of cluster resource reserved for queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "resource_list_schema")]
    pub resource: Option<ResourceList>,
    /// Fields this version does not model.
    #[serde(flatten)]
    pub extra: Extra,
}

/// Affinity is a group of affinity scheduling rules.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Affinity {
    /// Node groups the pods of the queue should be put on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_group_affinity: Option<NodeGroupAffinity>,
    /// Node groups the pods of the queue should be kept off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_group_anti_affinity: Option<NodeGroupAffinity>,
    /// Fields this version does not model.
    #[serde(flatten)]
    pub extra: Extra,
}

/// Node group (anti-)affinity terms: names of node groups.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeGroupAffinity {
    /// Node groups that must match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required_during_scheduling_ignored_during_execution: Option<Vec<String>>,
    /// Node groups that should match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preferred_during_scheduling_ignored_during_execution: Option<Vec<String>>,
    /// Fields this version does not model.
    #[serde(flatten)]
    pub extra: Extra,
}

/// QueueStatus represents the status of Queue.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueStatus {
    /// State is the state of queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<QueueState>,
    /// The number of 'Unknown' PodGroups in this queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unknown: Option<i32>,
    /// The number of 'Pending' PodGroups in this queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<i32>,
    /// The number of 'Running' PodGroups in this queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<i32>,
    /// The number of 'Inqueue' PodGroups in this queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inqueue: Option<i32>,
    /// The number of 'Completed' PodGroups in this queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed: Option<i32>,
    /// Reservation is the profile of resource reservation for queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservation: Option<Reservation>,
    /// Allocated is allocated resources in queue. Always written (upstream's CRD requires it),
    /// never required here.
    #[serde(default)]
    #[schemars(schema_with = "resource_list_schema")]
    pub allocated: ResourceList,
    /// Fields this version does not model.
    #[serde(flatten)]
    pub extra: Extra,
}

/// Reservation represents current condition about resource reservation.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Reservation {
    /// Nodes are locked nodes for queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<Vec<String>>,
    /// Resource is a list of total idle resource in locked nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "resource_list_schema")]
    pub resource: Option<ResourceList>,
    /// Fields this version does not model.
    #[serde(flatten)]
    pub extra: Extra,
}

// ---------------------------------------------------------------------------------------
// String enumerations
// ---------------------------------------------------------------------------------------

/// A string enumeration that round-trips values it does not know as `Other`, so a newer
/// Volcano's value neither fails deserialization nor is rewritten.
macro_rules! string_enum {
    (
        $(#[$meta:meta])*
        $name:ident { $($(#[$vmeta:meta])* $variant:ident = $value:literal,)+ }
        schema = $schema:tt
    ) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[serde(from = "String", into = "String")]
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
            /// A value this version does not know, kept verbatim.
            Other(String),
        }

        impl $name {
            /// The value as written in the object.
            pub fn as_str(&self) -> &str {
                match self {
                    $(Self::$variant => $value,)+
                    Self::Other(value) => value,
                }
            }
        }

        impl From<String> for $name {
            fn from(value: String) -> Self {
                match value.as_str() {
                    $($value => Self::$variant,)+
                    _ => Self::Other(value),
                }
            }
        }

        impl From<&str> for $name {
            fn from(value: &str) -> Self {
                Self::from(value.to_owned())
            }
        }

        impl From<$name> for String {
            fn from(value: $name) -> String {
                match value {
                    $name::Other(value) => value,
                    known => known.as_str().to_owned(),
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl JsonSchema for $name {
            fn schema_name() -> Cow<'static, str> {
                stringify!($name).into()
            }

            fn json_schema(_: &mut SchemaGenerator) -> Schema {
                json_schema!($schema)
            }
        }
    };
}

string_enum! {
    /// The phase of a pod group.
    PodGroupPhase {
        /// Accepted, but the scheduler cannot allocate enough resources to it yet.
        Pending = "Pending",
        /// `spec.minMember` pods are running.
        Running = "Running",
        /// Some of `spec.minMember` pods run, the others cannot be scheduled.
        Unknown = "Unknown",
        /// Admitted by its queue: controllers may create its pods.
        Inqueue = "Inqueue",
        /// All pods of the group completed.
        Completed = "Completed",
    }
    schema = { "type": "string" }
}

string_enum! {
    /// The type of a PodGroup condition.
    PodGroupConditionType {
        /// The gang cannot be scheduled (see reason and message).
        Unschedulable = "Unschedulable",
        /// The gang was scheduled.
        Scheduled = "Scheduled",
    }
    schema = { "type": "string" }
}

string_enum! {
    /// The state of a queue.
    QueueState {
        /// Accepts new PodGroups.
        Open = "Open",
        /// Accepts no new PodGroups.
        Closed = "Closed",
        /// Closing: waits for its PodGroups to finish.
        Closing = "Closing",
        /// Unknown.
        Unknown = "Unknown",
    }
    schema = { "type": "string" }
}

string_enum! {
    /// How strictly a network topology constraint holds.
    NetworkTopologyMode {
        /// The job must stay within the allowed tier.
        Hard = "hard",
        /// The job prefers to stay within the allowed tier.
        Soft = "soft",
    }
    schema = { "type": "string", "enum": ["hard", "soft"], "default": "hard" }
}

string_enum! {
    /// What a queue does when the job at its head cannot be scheduled.
    DequeueStrategy {
        /// Wait: schedule nothing else from the queue.
        Fifo = "fifo",
        /// Skip it and try the next job.
        Traverse = "traverse",
    }
    schema = { "type": "string" }
}

// ---------------------------------------------------------------------------------------
// Kubernetes resource plumbing
// ---------------------------------------------------------------------------------------

/// The pattern upstream's CRDs put on every quantity.
const QUANTITY_PATTERN: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";

/// Schema of a `ResourceList`: a map of int-or-string quantities (k8s-openapi's own Quantity
/// schema carries a page of prose in every map).
fn resource_list_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "additionalProperties": {
            "x-kubernetes-int-or-string": true,
            "pattern": QUANTITY_PATTERN,
        },
    })
}

/// Serializes a root object with its `apiVersion` and `kind`, like the derive does.
fn serialize_root<S: Serializer, Spec: Serialize, Status: Serialize>(
    ser: S,
    kind: &'static str,
    metadata: &ObjectMeta,
    spec: &Spec,
    status: Option<&Status>,
) -> Result<S::Ok, S::Error> {
    let mut obj = ser.serialize_struct(kind, 4 + usize::from(status.is_some()))?;
    obj.serialize_field("apiVersion", API_VERSION)?;
    obj.serialize_field("kind", kind)?;
    obj.serialize_field("metadata", metadata)?;
    obj.serialize_field("spec", spec)?;
    match status {
        Some(status) => obj.serialize_field("status", status)?,
        None => obj.skip_field("status")?,
    }
    obj.end()
}

/// `Resource`, `HasSpec`, `HasStatus`, `Serialize` and a constructor for a root type.
macro_rules! root_resource {
    ($root:ident, $spec:ident, $status:ident, $scope:ty, kind = $kind:literal, plural = $plural:literal) => {
        impl $root {
            /// A new object with this name and spec, no status.
            pub fn new(name: &str, spec: $spec) -> Self {
                Self {
                    metadata: ObjectMeta {
                        name: Some(name.to_owned()),
                        ..Default::default()
                    },
                    spec,
                    status: None,
                }
            }
        }

        impl Resource for $root {
            type DynamicType = ();
            type Scope = $scope;

            fn kind(_: &()) -> Cow<'_, str> {
                $kind.into()
            }

            fn group(_: &()) -> Cow<'_, str> {
                GROUP.into()
            }

            fn version(_: &()) -> Cow<'_, str> {
                VERSION.into()
            }

            fn api_version(_: &()) -> Cow<'_, str> {
                API_VERSION.into()
            }

            fn plural(_: &()) -> Cow<'_, str> {
                $plural.into()
            }

            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }

            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }

        impl HasSpec for $root {
            type Spec = $spec;

            fn spec(&self) -> &$spec {
                &self.spec
            }

            fn spec_mut(&mut self) -> &mut $spec {
                &mut self.spec
            }
        }

        impl HasStatus for $root {
            type Status = $status;

            fn status(&self) -> Option<&$status> {
                self.status.as_ref()
            }

            fn status_mut(&mut self) -> &mut Option<$status> {
                &mut self.status
            }
        }

        impl Serialize for $root {
            fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
                serialize_root(ser, $kind, &self.metadata, &self.spec, self.status.as_ref())
            }
        }
    };
}

root_resource!(
    PodGroup,
    PodGroupSpec,
    PodGroupStatus,
    NamespaceResourceScope,
    kind = "PodGroup",
    plural = "podgroups"
);

root_resource!(
    Queue,
    QueueSpec,
    QueueStatus,
    ClusterResourceScope,
    kind = "Queue",
    plural = "queues"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_enum_values_round_trip() {
        let phase: PodGroupPhase = serde_json::from_value(serde_json::json!("Draining")).unwrap();
        assert_eq!(phase, PodGroupPhase::Other("Draining".into()));
        assert_eq!(serde_json::to_value(&phase).unwrap(), "Draining");
        let phase: PodGroupPhase = serde_json::from_value(serde_json::json!("Inqueue")).unwrap();
        assert_eq!(phase, PodGroupPhase::Inqueue);
        assert_eq!(NetworkTopologyMode::from("soft"), NetworkTopologyMode::Soft);
    }

    #[test]
    fn objects_serialize_with_api_version_and_kind() {
        let pg = PodGroup::new(
            "pg",
            PodGroupSpec {
                min_member: Some(2),
                ..Default::default()
            },
        );
        let value = serde_json::to_value(&pg).unwrap();
        assert_eq!(value["apiVersion"], API_VERSION);
        assert_eq!(value["kind"], "PodGroup");
        assert_eq!(value["spec"], serde_json::json!({"minMember": 2}));
        assert!(value.get("status").is_none());
    }

    #[test]
    fn objects_without_spec_deserialize() {
        let q: Queue = serde_json::from_value(serde_json::json!({
            "apiVersion": API_VERSION, "kind": "Queue", "metadata": {"name": "bare"}
        }))
        .unwrap();
        assert_eq!(q.spec, QueueSpec::default());
    }
}
