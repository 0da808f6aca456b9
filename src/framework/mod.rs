//! Sessions, statements, plugin votes and the scheduling cycle that ties them together.

pub mod fit;
mod node_search;
mod outcome;
mod plugin;
mod reservation;
mod scheduler;
mod session;
mod statement;
mod verdicts;
mod votes;

pub use crate::conf::VoteKind;
pub use crate::model::Hold;
pub use crate::snapshot::{ClusterState, Slots, Snapshot};
pub use node_search::{RunningIndex, StaticNodes};
pub use outcome::{
    Bind, ConditionKind, Eviction, GangReason, JobCondition, JobUpdate, ReservedNodes,
    SessionResult,
};
pub use plugin::{Action, ActionBuilder, ConfiguredPlugin, Plugin, PluginBuilder, Registry};
pub use reservation::Reservation;
pub use scheduler::Scheduler;
pub use session::Session;
pub use statement::Statement;
pub use votes::*;
