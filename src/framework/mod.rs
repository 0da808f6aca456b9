//! Sessions, statements, plugin votes and the scheduling cycle that ties them together.

pub mod fit;
mod node_search;
mod outcome;
mod plugin;
mod reservation;
mod session;
mod statement;
mod verdicts;
mod votes;

use std::sync::Arc;

pub use crate::model::Hold;
pub use crate::snapshot::{ClusterState, Slots, Snapshot};
pub use node_search::{RunningIndex, StaticNodes};
pub use outcome::{Bind, ConditionKind, Eviction, JobCondition, JobUpdate, SessionResult};
pub use plugin::{Action, ActionBuilder, Plugin, PluginBuilder};
pub use reservation::Reservation;
pub use session::Session;
pub use statement::Statement;
pub use votes::*;

use crate::conf::{ConfError, SchedulerConf};
use crate::model::Timestamp;

/// The configured actions and plugins, ready to run cycles.
pub struct Scheduler {
    conf: Arc<SchedulerConf>,
    actions: Vec<Box<dyn Action>>,
}

impl Scheduler {
    pub fn new(conf: SchedulerConf) -> Result<Self, ConfError> {
        let mut actions = Vec::new();
        for name in &conf.actions {
            let build = crate::actions::builder(name).ok_or_else(|| ConfError::Invalid {
                file: conf.source.clone(),
                key: "actions".into(),
                message: format!("unknown action {name:?}"),
            })?;
            let args = conf.action_arguments(name);
            actions.push(build(&args).map_err(|e| ConfError::Invalid {
                file: conf.source.clone(),
                key: e.key,
                message: e.message,
            })?);
        }
        Ok(Scheduler {
            conf: Arc::new(conf),
            actions,
        })
    }

    pub fn conf(&self) -> &SchedulerConf {
        &self.conf
    }

    /// Opens a session on `snapshot`, runs every action in order and closes it.
    pub fn run_cycle(
        &self,
        snapshot: Snapshot,
        now: Timestamp,
    ) -> Result<SessionResult, ConfError> {
        self.run_cycle_observed(snapshot, now, &mut |_, _, _| {})
    }

    /// Like `run_cycle`, telling `observe` when each action starts (`true`) and ends
    /// (`false`), so a driver can time actions without the engine reading a clock, and a
    /// test can look at the session between actions (what one action did is visible there
    /// before the session's result folds it together with the others).
    pub fn run_cycle_observed(
        &self,
        snapshot: Snapshot,
        now: Timestamp,
        observe: &mut dyn FnMut(&'static str, bool, &Session),
    ) -> Result<SessionResult, ConfError> {
        let mut ssn = Session::open(snapshot, self.conf.clone(), now)?;
        for action in &self.actions {
            observe(action.name(), true, &ssn);
            action.execute(&mut ssn);
            observe(action.name(), false, &ssn);
        }
        Ok(ssn.close())
    }

    /// Opens and closes a session without running actions (what "nothing to do" costs).
    pub fn open_close(
        &self,
        snapshot: Snapshot,
        now: Timestamp,
    ) -> Result<SessionResult, ConfError> {
        Ok(Session::open(snapshot, self.conf.clone(), now)?.close())
    }
}
