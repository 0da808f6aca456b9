//! priority: higher PriorityClass value first, for jobs and for tasks; only tasks of strictly
//! lower priority may be preempted.

use crate::conf::{ArgError, Arguments, NoArguments};
use crate::framework::{vote, Plugin, Session};

pub struct Priority;

/// Takes no arguments.
pub fn build(args: &Arguments) -> Result<Box<dyn Plugin>, ArgError> {
    args.parse::<NoArguments>()?;
    Ok(Box::new(Priority))
}

impl Plugin for Priority {
    fn name(&self) -> &'static str {
        "priority"
    }

    fn on_session_open(&self, ssn: &mut Session) {
        ssn.add(vote::JobOrder, Box::new(|l, r| r.priority.cmp(&l.priority)));
        ssn.add(
            vote::TaskOrder,
            Box::new(|l, r| r.priority.cmp(&l.priority)),
        );
        let strictly_lower = |s: &crate::framework::ClusterState,
                              preemptor: crate::model::TaskRef,
                              candidates: &[crate::model::TaskRef]| {
            let p = s
                .job(preemptor.job)
                .priority
                .max(s.task(preemptor).priority);
            // Sized once (see conformance's evictable).
            let mut out = Vec::with_capacity(candidates.len());
            out.extend(
                candidates
                    .iter()
                    .copied()
                    .filter(|c| s.task(*c).priority < p && s.job(c.job).priority < p),
            );
            Some(out)
        };
        ssn.add(vote::Preemptable, Box::new(strictly_lower));
    }
}

#[cfg(test)]
mod tests {
    use std::cmp::Ordering;

    use crate::model::{PodGroupPhase, TaskRef};
    use crate::testkit::*;

    const PRIORITY: &str =
        crate::conf_yaml!("enqueue, allocate"; ["priority", "gang", "predicates"]);

    #[test]
    fn higher_priority_gangs_go_first() {
        let mut cache = cache_with_default_queue();
        add_nodes(&mut cache, "n", 1, &[("cpu", "4")]);
        let low = Gang::new("low", 4)
            .created(1)
            .tasks("", 4, &[("cpu", "1")])
            .apply(&mut cache);
        let high = Gang::new("high", 4)
            .created(2)
            .priority(100)
            .tasks("", 4, &[("cpu", "1")])
            .apply(&mut cache);
        let ssn = open_session(&cache, Some(PRIORITY));
        let (l, h) = (
            ssn.state().job_by_uid(&low).unwrap(),
            ssn.state().job_by_uid(&high).unwrap(),
        );
        assert_eq!(ssn.job_order(h, l), Ordering::Less);
        drop(ssn);
        let result = run_cycle(&cache, Some(PRIORITY));
        let binds = binds_by_job(&result);
        assert_eq!(binds.get(&high).map(Vec::len), Some(4));
        assert!(!binds.contains_key(&low));
    }

    #[test]
    fn higher_priority_tasks_go_first_within_a_gang() {
        let mut cache = cache_with_default_queue();
        add_nodes(&mut cache, "n", 1, &[("cpu", "1")]);
        let mut gang =
            Gang::new("j", 1)
                .tasks("a", 1, &[("cpu", "1")])
                .tasks("b", 1, &[("cpu", "1")]);
        gang.tasks[1].priority = 50;
        let job = gang.apply(&mut cache);
        let result = run_cycle(&cache, Some(PRIORITY));
        assert_eq!(result.binds.len(), 1);
        assert_eq!(&*result.binds[0].task, "default/j-b-0", "{job}");
    }

    #[test]
    fn only_strictly_lower_priority_tasks_are_victims() {
        let mut cache = cache_with_default_queue();
        add_nodes(&mut cache, "n", 1, &[("cpu", "8")]);
        for (name, p) in [("lower", 1), ("equal", 10), ("higher", 20)] {
            Gang::new(name, 1)
                .priority(p)
                .phase(PodGroupPhase::Running)
                .tasks("", 1, &[("cpu", "1")])
                .running_on(&["n-00000"])
                .apply(&mut cache);
        }
        // A low-priority task in a high-priority job is protected by its job's priority.
        let mut mixed = Gang::new("mixed", 1)
            .priority(20)
            .phase(PodGroupPhase::Running)
            .tasks("", 1, &[("cpu", "1")])
            .running_on(&["n-00000"]);
        mixed.tasks[0].priority = 1;
        mixed.apply(&mut cache);
        Gang::new("p", 1)
            .priority(10)
            .tasks("", 1, &[("cpu", "1")])
            .apply(&mut cache);
        let conf = "actions: allocate\ntiers:\n- plugins:\n  - name: priority\n";
        let ssn = open_session(&cache, Some(conf));
        let s = ssn.state();
        let t = |uid: &str| task_ref(s, uid).unwrap();
        let candidates: Vec<TaskRef> = ["lower", "equal", "higher", "mixed"]
            .iter()
            .map(|g| t(&format!("default/{g}-0")))
            .collect();
        let victims = ssn.victims(
            crate::framework::VictimKind::Preempt,
            t("default/p-0"),
            &candidates,
        );
        assert_eq!(victims, vec![t("default/lower-0")]);
    }
}
