//! Actions: each file is one step of a scheduling cycle. They read the cluster through the
//! session and change it only through statements.

pub mod allocate;
pub mod backfill;
pub mod enqueue;
pub mod preempt;
pub mod reclaim;

use crate::framework::ActionBuilder;

/// Every action the configuration accepts, with its builder, in the order messages list them.
pub const BUILDERS: &[(&str, ActionBuilder)] = &[
    ("enqueue", enqueue::build),
    ("allocate", allocate::build),
    ("preempt", preempt::build),
    ("reclaim", reclaim::build),
    ("backfill", backfill::build),
];
