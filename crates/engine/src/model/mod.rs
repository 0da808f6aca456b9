//! The scheduler's view of the cluster: resources, nodes, tasks (pods), jobs (gangs) and
//! queues. Plain data with the bookkeeping that keeps derived totals exact.

pub mod devices;
mod job;
mod node;
pub mod placement;
pub mod pod_rules;
mod queue;
pub mod resource;
pub mod subgroup;
mod task;
pub mod topology;
pub mod volumes;

pub use job::{
    GangMode, GangOrigin, GangPolicy, GangRuntime, HeldBack, Hold, JobInfo, JobSpec, MatchPolicy,
    PodGroupPhase,
};
pub use node::{NodeInfo, NodeSpec, NodeTask};
pub use placement::{Placement, Taint, TaintEffect, Toleration};
pub use queue::{QueueInfo, QueueState, QueueTree, QueueUsage, ROOT_QUEUE};
pub use resource::{Resource, ResourceList};
pub use subgroup::{SubGroupKey, SubGroupPolicy};
pub use task::{EstimateProblem, TaskInfo, TaskStatus, MAX_ESTIMATE_MS};
pub use topology::{
    HyperNodeMember, HyperNodeSpec, MemberKind, MemberSelector, Topology, TopologyBound,
    TopologyDomain, TopologyLevel, TopologyMode, TopologyRequest,
};

/// Milliseconds on the driver's clock (virtual in the simulator, wall time in the live
/// scheduler). The engine never reads a clock; it is handed `now`.
pub type Timestamp = i64;

/// Dense index of a node slot in a snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub u32);

/// Dense index of a job slot in a snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JobId(pub u32);

/// A task inside a session: its job's slot and its index in that job's task list. Stable for
/// the whole session (the snapshot does not change under it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskRef {
    pub job: JobId,
    pub index: u32,
}
