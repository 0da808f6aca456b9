//! drf: dominant resource fairness between jobs — the job whose largest share of any
//! cluster resource is smallest goes first.

use crate::conf::{ArgError, Arguments};
use crate::framework::{Plugin, Session};
use crate::model::{JobInfo, Resource};

pub struct Drf;

pub fn build(_: &Arguments) -> Result<Box<dyn Plugin>, ArgError> {
    Ok(Box::new(Drf))
}

/// max over resources of allocated / total.
pub fn dominant_share(allocated: &Resource, total: &Resource) -> f64 {
    allocated
        .without_pods()
        .dimensions()
        .map(|(name, v)| {
            let cap = total.get(name);
            if cap > 0 {
                v as f64 / cap as f64
            } else {
                0.0
            }
        })
        .fold(0.0, f64::max)
}

impl Plugin for Drf {
    fn name(&self) -> &'static str {
        "drf"
    }

    fn on_session_open(&mut self, ssn: &mut Session) {
        let total = ssn.state().total_allocatable();
        // A job's allocation is kept exact by the session, so the order reads it directly.
        ssn.add_job_order_fn(
            self.name(),
            Box::new(move |l: &JobInfo, r: &JobInfo| {
                dominant_share(&l.allocated, &total)
                    .total_cmp(&dominant_share(&r.allocated, &total))
            }),
        );
    }
}
