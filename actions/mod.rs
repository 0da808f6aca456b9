//! Actions: each file is one step of a scheduling cycle. They read the cluster through the
//! session and change it only through statements.

pub mod allocate;
pub mod backfill;
pub mod enqueue;
pub mod preempt;
pub mod reclaim;

use crate::framework::ActionBuilder;

/// Every action name the configuration accepts.
pub const NAMES: &[&str] = &["enqueue", "allocate", "preempt", "reclaim", "backfill"];

pub fn builder(name: &str) -> Option<ActionBuilder> {
    Some(match name {
        "enqueue" => enqueue::build,
        "allocate" => allocate::build,
        "backfill" => backfill::build,
        "preempt" => preempt::build,
        "reclaim" => reclaim::build,
        _ => return None,
    })
}
