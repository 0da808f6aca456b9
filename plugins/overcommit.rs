//! overcommit: admit a gang (enqueue) only while the minResources of admitted-but-not-
//! running gangs fit in the cluster's idle resources times `overcommit-factor` (default
//! 1.2), so admitted gangs do not block each other.

use std::cell::RefCell;
use std::rc::Rc;

use crate::conf::{ArgError, Arguments};
use crate::framework::{Plugin, Session, Vote};
use crate::model::{PodGroupPhase, Resource, TaskStatus};

pub struct Overcommit {
    pub factor: f64,
}

pub const DEFAULT_FACTOR: f64 = 1.2;

pub fn build(args: &Arguments) -> Result<Box<dyn Plugin>, ArgError> {
    let factor = args.get_f64("overcommit-factor")?.unwrap_or(DEFAULT_FACTOR);
    if !(1.0..=100.0).contains(&factor) {
        return Err(ArgError {
            key: format!("{}.overcommit-factor", args.path),
            message: format!("must be between 1.0 and 100, got {factor}"),
        });
    }
    Ok(Box::new(Overcommit { factor }))
}

impl Plugin for Overcommit {
    fn name(&self) -> &'static str {
        "overcommit"
    }

    fn on_session_open(&mut self, ssn: &mut Session) {
        let mut used = Resource::new();
        for (_, n) in ssn.state().nodes() {
            if n.schedulable() {
                used.add(&n.used);
            }
        }
        let idle = ssn
            .state()
            .total_allocatable()
            .scaled(self.factor)
            .minus(&used)
            .without_pods();
        let mut inqueue = Resource::new();
        for (_, job) in ssn.state().jobs() {
            if job.phase == PodGroupPhase::Inqueue && job.count(TaskStatus::Running) == 0 {
                let mut waiting = job.min_request().without_pods();
                waiting.sub(&job.allocated.without_pods());
                waiting.max_with(&Resource::new());
                inqueue.add(&waiting);
            }
        }
        let inqueue = Rc::new(RefCell::new(inqueue));
        let q = inqueue.clone();
        ssn.add_job_enqueueable_fn(
            self.name(),
            Box::new(move |job| {
                if job.min_resources.is_none() {
                    return Vote::Permit;
                }
                let mut want = job.min_request().without_pods();
                want.add(&q.borrow());
                if want.fits(&idle) {
                    Vote::Permit
                } else {
                    Vote::Reject
                }
            }),
        );
        ssn.add_job_enqueued_fn(Box::new(move |job| {
            inqueue.borrow_mut().add(&job.min_request().without_pods());
        }));
    }

    fn argument_warnings(&self, args: &Arguments) -> Vec<String> {
        args.unknown_keys(&["overcommit-factor"], &[])
    }
}
