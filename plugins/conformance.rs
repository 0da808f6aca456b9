//! conformance: never evict system-critical pods or anything in kube-system.

use crate::conf::{ArgError, Arguments};
use crate::framework::{ClusterState, Plugin, Session};
use crate::model::TaskRef;

pub struct Conformance;

pub fn build(_: &Arguments) -> Result<Box<dyn Plugin>, ArgError> {
    Ok(Box::new(Conformance))
}

fn evictable(s: &ClusterState, candidates: &[TaskRef]) -> Vec<TaskRef> {
    candidates
        .iter()
        .copied()
        .filter(|c| {
            let t = s.task(*c);
            !t.critical && &*t.namespace != "kube-system"
        })
        .collect()
}

impl Plugin for Conformance {
    fn name(&self) -> &'static str {
        "conformance"
    }

    fn on_session_open(&mut self, ssn: &mut Session) {
        ssn.add_preemptable_fn(self.name(), Box::new(|s, _, c| Some(evictable(s, c))));
        ssn.add_reclaimable_fn(self.name(), Box::new(|s, _, c| Some(evictable(s, c))));
    }
}
