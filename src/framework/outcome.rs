//! What a session hands back: binds, evictions and what it decided about each gang, for a
//! driver to apply.

use std::sync::Arc;

use crate::cache::Cache;
use crate::model::{GangRuntime, Hold, PodGroupPhase};

/// A pod to bind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bind {
    pub job: Arc<str>,
    pub task: Arc<str>,
    pub namespace: Arc<str>,
    pub name: Arc<str>,
    pub node: Arc<str>,
}

/// A pod to evict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Eviction {
    pub job: Arc<str>,
    pub task: Arc<str>,
    pub namespace: Arc<str>,
    pub name: Arc<str>,
    pub node: Option<Arc<str>>,
    /// The gang (uid) the eviction makes room for, if any.
    pub preemptor: Option<Arc<str>>,
    pub reason: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConditionKind {
    Scheduled,
    Unschedulable,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobCondition {
    pub kind: ConditionKind,
    /// NotEnoughResources, NotEnoughTasks, or a plugin's reason.
    pub reason: String,
    pub message: String,
}

/// What a session decided about one gang.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobUpdate {
    pub job: Arc<str>,
    /// Set when the phase changed.
    pub phase: Option<PodGroupPhase>,
    pub condition: Option<JobCondition>,
    /// Why each pending task of an unschedulable gang did not fit (task uid, reason).
    pub task_reasons: Vec<(Arc<str>, String)>,
    /// What the engine must remember about the gang next session, when it changed.
    pub runtime: Option<GangRuntime>,
    /// The gang's tentative placements to keep until the next session (NonStrict gangs),
    /// replacing any it held; `Some(empty)` releases them.
    pub holds: Option<Vec<Hold>>,
}

/// Everything a driver applies after a session.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SessionResult {
    pub binds: Vec<Bind>,
    pub evictions: Vec<Eviction>,
    pub job_updates: Vec<JobUpdate>,
}

// The cache knows nothing of sessions (it depends on the snapshot type only); applying a
// session's gang updates to it is the framework's business, so the method lives here.
impl Cache {
    /// What a session decided that the engine must remember: gang runtimes and holds.
    /// (Binds, evictions and phases are the driver's to apply: they depend on the API.)
    pub fn apply_gang_updates(&mut self, updates: &[JobUpdate]) {
        for u in updates {
            if let Some(rt) = &u.runtime {
                self.set_gang_runtime(&u.job, rt);
            }
            if let Some(holds) = &u.holds {
                self.set_holds(&u.job, holds);
            }
        }
    }
}
