//! predicates: a node must be ready and schedulable, match the pod's node selector and
//! required node affinity, and carry no taint the pod does not tolerate. These are static
//! (cached per placement for the session). Room for the pod's requests, extended resources
//! and one more pod is checked by the framework on every placement, with or without this
//! plugin (`framework::fit::resource_fit`): an over-committed node is never a matter of
//! configuration.

use crate::conf::{ArgError, Arguments};
use crate::framework::fit::Unfit;
use crate::framework::{Plugin, Session};
use crate::model::{NodeInfo, TaskInfo};

pub struct Predicates;

pub fn build(_: &Arguments) -> Result<Box<dyn Plugin>, ArgError> {
    Ok(Box::new(Predicates))
}

pub fn static_fit(task: &TaskInfo, node: &NodeInfo) -> Result<(), Unfit> {
    if !node.ready {
        return Err(Unfit::NodeNotReady);
    }
    if node.unschedulable {
        return Err(Unfit::NodeUnschedulable);
    }
    task.placement
        .check(&node.name, &node.labels, &node.taints)
        .map_err(Unfit::Placement)
}

impl Plugin for Predicates {
    fn name(&self) -> &'static str {
        "predicates"
    }

    fn on_session_open(&mut self, ssn: &mut Session) {
        ssn.add_static_predicate_fn(self.name(), Box::new(static_fit));
    }

    fn argument_warnings(&self, args: &Arguments) -> Vec<String> {
        // Volcano's predicate.* switches (GPU sharing, proportional, …) are not needed here.
        args.unknown_keys(&[], &["predicate."])
    }
}
