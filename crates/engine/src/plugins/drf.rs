//! drf: dominant resource fairness between jobs — the job whose largest share of any
//! cluster resource is smallest goes first.

use crate::conf::{ArgError, Arguments, NoArguments};
use crate::framework::{vote, Plugin, Session};
use crate::model::{JobInfo, Resource};

pub struct Drf;

/// Takes no arguments.
pub fn build(args: &Arguments) -> Result<Box<dyn Plugin>, ArgError> {
    args.parse::<NoArguments>()?;
    Ok(Box::new(Drf))
}

/// max over resources (pods aside) of allocated / total. Read from the fields, without
/// copying the vector or looking cpu and memory up by name: job order asks this twice per
/// comparison when a queue's gangs are sorted.
pub fn dominant_share(allocated: &Resource, total: &Resource) -> f64 {
    let share = |v: i64, cap: i64| if cap > 0 { v as f64 / cap as f64 } else { 0.0 };
    let fixed = [
        (allocated.milli_cpu, total.milli_cpu),
        (allocated.memory, total.memory),
    ];
    let scalars = allocated
        .scalars
        .iter()
        .map(|(name, v)| (*v, total.scalar(name)));
    fixed
        .into_iter()
        .chain(scalars)
        .filter(|(v, _)| *v != 0)
        .map(|(v, cap)| share(v, cap))
        .fold(0.0, f64::max)
}

impl Plugin for Drf {
    fn name(&self) -> &'static str {
        "drf"
    }

    fn on_session_open(&self, ssn: &mut Session) {
        let total = ssn.total_allocatable().clone();
        // A job's allocation is kept exact by the session, so the order reads it directly.
        ssn.add(
            vote::JobOrder,
            Box::new(move |l: &JobInfo, r: &JobInfo| {
                dominant_share(&l.allocated, &total)
                    .total_cmp(&dominant_share(&r.allocated, &total))
            }),
        );
    }
}

#[cfg(test)]
mod tests {
    use std::cmp::Ordering;

    use super::*;
    use crate::model::PodGroupPhase;
    use crate::testkit::*;

    #[test]
    fn dominant_share_is_the_largest_share_of_any_resource() {
        let total = res(&[("cpu", "10"), ("memory", "100Gi"), ("nvidia.com/gpu", "4")]);
        let a = res(&[("cpu", "1"), ("memory", "50Gi")]);
        assert_eq!(dominant_share(&a, &total), 0.5);
        let b = res(&[("cpu", "3"), ("nvidia.com/gpu", "1"), ("pods", "100")]);
        assert_eq!(dominant_share(&b, &total), 0.3, "pods are not a share");
        let c = res(&[("example.com/fpga", "1")]);
        assert_eq!(dominant_share(&c, &total), 0.0, "absent from the cluster");
    }

    #[test]
    fn the_gang_with_the_lower_dominant_share_goes_first() {
        let mut cache = cache_with_default_queue();
        add_nodes(&mut cache, "n", 1, &[("cpu", "4"), ("memory", "16Gi")]);
        // "big" already runs 2 cpu (50%), "small" 4Gi memory (25%); both want one more pod
        // and there is room for one.
        let big = Gang::new("big", 1)
            .created(1)
            .phase(PodGroupPhase::Running)
            .tasks("", 1, &[("cpu", "2")])
            .running_on(&["n-00000"])
            .tasks("", 1, &[("cpu", "1"), ("memory", "8Gi")])
            .apply(&mut cache);
        let small = Gang::new("small", 1)
            .created(2)
            .phase(PodGroupPhase::Running)
            .tasks("", 1, &[("memory", "4Gi")])
            .running_on(&["n-00000"])
            .tasks("", 1, &[("cpu", "1"), ("memory", "8Gi")])
            .apply(&mut cache);
        let conf = "actions: allocate\ntiers:\n- plugins:\n  - name: drf\n  - name: predicates\n";
        let ssn = open_session(&cache, Some(conf));
        let (b, s) = (
            ssn.state().job_by_uid(&big).unwrap(),
            ssn.state().job_by_uid(&small).unwrap(),
        );
        assert_eq!(ssn.job_order(s, b), Ordering::Less);
        drop(ssn);
        let result = run_cycle(&cache, Some(conf));
        assert_eq!(binds_by_job(&result).keys().collect::<Vec<_>>(), [&small]);
    }
}
