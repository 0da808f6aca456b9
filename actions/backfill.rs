//! backfill: places BestEffort pods (no requests) of admitted gangs on any node that passes
//! the predicates, as Volcano does. They take no resources, so they delay no one; a gang
//! is still committed only when it is ready.

use crate::conf::{ArgError, Arguments};
use crate::framework::{Action, Session, Statement};
use crate::model::{PodGroupPhase, TaskStatus};

use super::allocate::best_node;

pub struct Backfill;

pub fn build(_: &Arguments) -> Result<Box<dyn Action>, ArgError> {
    Ok(Box::new(Backfill))
}

impl Action for Backfill {
    fn name(&self) -> &'static str {
        "backfill"
    }

    fn execute(&self, ssn: &mut Session) {
        for id in ssn.job_ids() {
            let job = ssn.job(id);
            // A gang that allocate held (pipelined, not ready) still has Allocated tasks that
            // no commit will bind; JobReady would count them, so committing BestEffort pods
            // here could bind a fraction of the gang. It gets its turn next cycle.
            if job.phase == PodGroupPhase::Pending
                || job.pending_count() == 0
                || job.count(TaskStatus::Allocated) > 0
                || ssn.job_valid(id).is_some()
            {
                continue;
            }
            let tasks: Vec<_> = ssn
                .tasks_in(id, TaskStatus::Pending)
                .into_iter()
                .filter(|t| ssn.task(*t).is_best_effort())
                .collect();
            if tasks.is_empty() {
                continue;
            }
            let mut stmt = Statement::new(ssn);
            for &task in &tasks {
                match stmt.feasible_nodes(task, 16) {
                    Ok(nodes) => {
                        // Feasible means room now or once releasing pods are gone (pod
                        // slots included); only room now may be bound.
                        let req = &stmt.task(task).resreq;
                        let idle: Vec<_> = nodes
                            .iter()
                            .copied()
                            .filter(|n| stmt.node(*n).fits_idle(req))
                            .collect();
                        if idle.is_empty() {
                            let node = best_node(&stmt, task, &nodes);
                            stmt.pipeline(task, node);
                        } else {
                            let node = best_node(&stmt, task, &idle);
                            stmt.allocate(task, node);
                        }
                    }
                    Err(unfit) => stmt.record_task_unfit(task, unfit),
                }
            }
            if stmt.job_ready(id) {
                stmt.commit();
            } else {
                stmt.discard();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::framework::Statement;
    use crate::model::{PodGroupPhase, TaskStatus};
    use crate::testkit::*;

    const BACKFILL_ONLY: &str =
        "actions: backfill\ntiers:\n- plugins:\n  - name: gang\n  - name: predicates\n";

    #[test]
    fn best_effort_pods_are_placed_on_any_fitting_node() {
        let mut cache = cache_with_default_queue();
        add_nodes(&mut cache, "n", 2, &[("cpu", "1"), ("pods", "1")]);
        let job = Gang::new("be", 2)
            .phase(PodGroupPhase::Inqueue)
            .tasks("", 2, &[])
            .apply(&mut cache);
        let result = run_cycle(&cache, Some(BACKFILL_ONLY));
        let binds = binds_by_job(&result);
        let mut nodes = binds[&job].clone();
        nodes.sort();
        assert_eq!(nodes, ["n-00000", "n-00001"], "one pod slot per node");
    }

    #[test]
    fn pending_gangs_and_gangs_with_requests_are_left_to_others() {
        let mut cache = cache_with_default_queue();
        add_nodes(&mut cache, "n", 1, &[("cpu", "4")]);
        Gang::new("not-admitted", 1)
            .tasks("", 1, &[])
            .apply(&mut cache);
        Gang::new("requests", 1)
            .phase(PodGroupPhase::Inqueue)
            .tasks("", 1, &[("cpu", "1")])
            .apply(&mut cache);
        let result = run_cycle(&cache, Some(BACKFILL_ONLY));
        assert!(result.binds.is_empty(), "{:?}", result.binds);
    }

    #[test]
    fn the_gang_rule_holds_for_best_effort_pods() {
        // minMember 3: two BestEffort pods fit, the third member does not; nothing binds.
        let mut cache = cache_with_default_queue();
        add_nodes(&mut cache, "n", 1, &[("cpu", "1")]);
        let job = Gang::new("mixed", 3)
            .tasks("", 2, &[])
            .tasks("big", 1, &[("cpu", "2")])
            .apply(&mut cache);
        let result = run_cycle(&cache, None);
        assert!(result.binds.is_empty(), "{:?}", result.binds);
        let msg = condition_message(&result, &job).unwrap();
        assert!(msg.contains("Insufficient cpu"), "{msg}");
        // Too few pods: not valid, nothing binds either.
        let mut cache = cache_with_default_queue();
        add_nodes(&mut cache, "n", 1, &[("cpu", "1")]);
        let job = Gang::new("few", 3)
            .phase(PodGroupPhase::Inqueue)
            .tasks("", 2, &[])
            .apply(&mut cache);
        let result = run_cycle(&cache, Some(BACKFILL_ONLY));
        assert!(result.binds.is_empty(), "{job}: {:?}", result.binds);
    }

    #[test]
    fn backfill_never_completes_a_gang_held_by_allocate_with_partial_binds() {
        // allocate holds a gang that is pipelined but not ready (`Statement::keep`): two of
        // its pods Allocated, one Pipelined, none bound. Backfill then places its BestEffort
        // pod: the gang counts 3 ready pods (minMember 3), but a commit would bind only the
        // BestEffort one — one pod of a gang of three.
        let mut cache = cache_with_default_queue();
        add_nodes(&mut cache, "n", 1, &[("cpu", "4")]);
        add_nodes(&mut cache, "r", 1, &[("cpu", "2")]);
        Gang::new("old", 1)
            .phase(PodGroupPhase::Running)
            .tasks("", 1, &[("cpu", "2")])
            .last_on("r-00000", TaskStatus::Releasing)
            .apply(&mut cache);
        let job = Gang::new("held", 3)
            .phase(PodGroupPhase::Inqueue)
            .tasks("a", 3, &[("cpu", "2")])
            .tasks("z", 1, &[])
            .apply(&mut cache);
        let conf = "actions: backfill\ntiers:\n- plugins:\n  - name: gang\n  - name: predicates\n";
        let mut ssn = open_session(&cache, Some(conf));
        let s = ssn.state();
        let t = |uid: &str| task_ref(s, uid).unwrap();
        let (a0, a1, a2) = (
            t("default/held-a-0"),
            t("default/held-a-1"),
            t("default/held-a-2"),
        );
        let (n, r) = (
            s.node_by_name("n-00000").unwrap(),
            s.node_by_name("r-00000").unwrap(),
        );
        let id = s.job_by_uid(&job).unwrap();
        {
            let mut stmt = Statement::new(&mut ssn);
            stmt.allocate(a0, n);
            stmt.allocate(a1, n);
            stmt.pipeline(a2, r);
            assert!(!stmt.job_ready(id) && stmt.job_pipelined(id));
            stmt.keep();
        }
        let args = ssn.conf().action_arguments("backfill");
        super::build(&args).unwrap().execute(&mut ssn);
        let result = ssn.close();
        assert!(
            result.binds.is_empty(),
            "partial gang bound: {:?}",
            result.binds
        );
    }

    #[test]
    fn best_effort_pods_never_take_pod_slots_still_held_by_terminating_pods() {
        // The node's only pod slot belongs to a pod being evicted: it is free in the future,
        // not now. Binding there would put 2 pods on a node that allows 1.
        let mut cache = cache_with_default_queue();
        add_nodes(&mut cache, "n", 1, &[("cpu", "4"), ("pods", "1")]);
        Gang::new("old", 1)
            .phase(PodGroupPhase::Running)
            .tasks("", 1, &[("cpu", "1")])
            .last_on("n-00000", TaskStatus::Releasing)
            .apply(&mut cache);
        let job = Gang::new("be", 1)
            .phase(PodGroupPhase::Inqueue)
            .tasks("", 1, &[])
            .apply(&mut cache);
        let result = run_cycle(&cache, Some(BACKFILL_ONLY));
        assert!(result.binds.is_empty(), "{job}: {:?}", result.binds);
    }
}
