//! Sessions, statements, plugin votes and the scheduling cycle that ties them together.
//!
//! Where to look: `scheduler.rs` builds a configuration's actions and plugins once and runs
//! cycles; `session.rs` is the session itself (open, close, reading, primitive moves), and
//! the rest of `impl Session` is split by concern (`votes.rs`, `node_search.rs`,
//! `verdicts.rs`, `reservation.rs`); `statement.rs` is how actions change a session;
//! `outcome.rs` is what a session hands a driver. The framework names no action or plugin:
//! they come from the `Registry` passed to `Scheduler::new`.

pub mod device_fit;
pub mod fit;
mod gang_search;
mod node_search;
mod outcome;
mod plugin;
mod pod_fit;
mod pod_index;
mod prediction;
mod reservation;
mod scheduler;
mod session;
mod statement;
pub mod usage;
mod verdicts;
mod votes;

pub use crate::conf::VoteKind;
pub use crate::model::Hold;
pub use crate::snapshot::{ClusterState, Slots, Snapshot};
pub use gang_search::{GangDomains, NodeRule, NodeSet, SearchBudget, SearchOutcome};
pub use node_search::{RunningIndex, StaticNodes};
pub use outcome::{
    Bind, Blocker, ConditionKind, Eviction, GangReason, JobCondition, JobUpdate, ReservedNodes,
    SearchStats, SessionResult,
};
pub use plugin::{Action, ActionBuilder, Plugin, PluginBuilder, Registry};
pub use pod_fit::PodFit;
pub use pod_index::{Domains, IndexedPod, PodView};
pub use prediction::{PredictOptions, PredictedStart};
pub use reservation::Reservation;
pub use scheduler::{CycleObserver, Scheduler, SessionHook};
pub use session::Session;
pub use statement::Statement;
pub use usage::UsageLedger;
pub use votes::*;
