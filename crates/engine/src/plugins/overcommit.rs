//! overcommit: admit a gang (enqueue) only while the minResources of admitted-but-not-
//! running gangs fit in the cluster's idle resources times `overcommit-factor` (default
//! 1.2), so admitted gangs do not block each other; counted only in the resources the gang
//! asks for.

use std::cell::RefCell;
use std::rc::Rc;

use serde::Deserialize;

use crate::conf::{ArgError, Arguments, Number};
use crate::framework::{vote, Plugin, Session, Vote};
use crate::model::Resource;

pub struct Overcommit {
    pub factor: f64,
}

pub const DEFAULT_FACTOR: f64 = 1.2;

/// overcommit's argument, as Volcano spells it.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct OvercommitArguments {
    #[serde(rename = "overcommit-factor")]
    pub factor: Option<Number>,
}

pub fn build(args: &Arguments) -> Result<Box<dyn Plugin>, ArgError> {
    let a: OvercommitArguments = args.parse()?;
    let factor = a.factor.map_or(DEFAULT_FACTOR, |n| n.0);
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

    fn on_session_open(&self, ssn: &mut Session) {
        // Summed as gangs and nodes change (`Tally`), not here over all of them.
        let tally = ssn.state().tally();
        let idle = ssn
            .total_allocatable()
            .scaled(self.factor)
            .minus(tally.schedulable_used())
            .without_pods();
        let mut inqueue = Resource::new();
        for (_, sums) in tally.queues() {
            inqueue.add(&sums.waiting);
        }
        let inqueue = Rc::new(RefCell::new(inqueue));
        let q = inqueue.clone();
        ssn.add(
            vote::JobEnqueueable,
            Box::new(move |job| {
                if job.min_resources.is_none() {
                    return Vote::Permit;
                }
                // Only in the resources the gang asks for (as Volcano's
                // LessEqualWithDimensionAndResourcesName): a gang admitted and waiting for
                // GPUs does not hold back one that needs none.
                let need = job.min_request().without_pods();
                let waiting = q.borrow();
                let fits = need
                    .dimensions()
                    .all(|(name, v)| v + waiting.get(name) <= idle.get(name));
                if fits {
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
}

#[cfg(test)]
mod tests {
    use crate::conf::Arguments;
    use crate::model::PodGroupPhase;
    use crate::testkit::*;

    fn conf(factor: &str) -> String {
        format!(
            "actions: enqueue\ntiers:\n- plugins:\n  - name: overcommit\n    arguments: {{overcommit-factor: {factor}}}\n"
        )
    }

    fn admitted(cache: &crate::cache::Cache, factor: &str) -> Vec<String> {
        let result = run_cycle(cache, Some(&conf(factor)));
        result
            .job_updates
            .iter()
            .filter(|u| u.phase == Some(PodGroupPhase::Inqueue))
            .map(|u| u.job.to_string())
            .collect()
    }

    #[test]
    fn gangs_are_admitted_up_to_the_factor_times_idle() {
        let mut cache = cache_with_default_queue();
        add_nodes(&mut cache, "n", 1, &[("cpu", "10")]);
        // Running pods count as used; an admitted gang not yet running counts as waiting.
        cache.apply_queue(queue("q", 1));
        Gang::new("running", 1)
            .phase(PodGroupPhase::Running)
            .tasks("", 1, &[("cpu", "2")])
            .running_on(&["n-00000"])
            .apply(&mut cache);
        Gang::new("waiting", 1)
            .phase(PodGroupPhase::Inqueue)
            .min_resources(&[("cpu", "2")])
            .apply(&mut cache);
        let a = Gang::new("a", 1)
            .created(1)
            .min_resources(&[("cpu", "5")])
            .apply(&mut cache);
        let b = Gang::new("b", 1)
            .created(2)
            .min_resources(&[("cpu", "3")])
            .apply(&mut cache);
        let free = Gang::new("no-min-resources", 1)
            .created(3)
            .tasks("", 1, &[("cpu", "100")])
            .apply(&mut cache);
        // 10 cpu, 2 used, 2 waiting: 6 left at factor 1.0 → a (5) only.
        assert_eq!(admitted(&cache, "1.0"), [a.clone(), free.clone()]);
        // factor 1.5: 15 - 2 - 2 = 11 ≥ 5 + 3.
        assert_eq!(admitted(&cache, "1.5"), [a, b, free]);
    }

    #[test]
    fn a_gang_admitted_and_waiting_for_gpus_holds_back_only_gangs_that_need_gpus() {
        let mut cache = cache_with_default_queue();
        add_nodes(
            &mut cache,
            "n",
            1,
            &[("cpu", "10"), ("nvidia.com/gpu", "2")],
        );
        Gang::new("gpu-waiting", 1)
            .phase(PodGroupPhase::Inqueue)
            .min_resources(&[("cpu", "1"), ("nvidia.com/gpu", "8")])
            .apply(&mut cache);
        let cpu_only = Gang::new("cpu-only", 1)
            .created(1)
            .min_resources(&[("cpu", "4")])
            .apply(&mut cache);
        Gang::new("gpu-too", 1)
            .created(2)
            .min_resources(&[("cpu", "1"), ("nvidia.com/gpu", "1")])
            .apply(&mut cache);
        assert_eq!(admitted(&cache, "1.0"), [cpu_only]);
    }

    #[test]
    fn the_factor_is_validated() {
        let args =
            |v: f64| Arguments::new("tiers[0].plugins[0].arguments").with("overcommit-factor", v);
        assert!(super::build(&args(0.5)).is_err());
        assert!(super::build(&args(1.0)).is_ok());
        let err = crate::testkit::checked_conf(&conf("\"lots\""), "s.conf").unwrap_err();
        assert!(err.to_string().contains("overcommit-factor"), "{err}");
    }
}
