//! reclaim: a queue below its deserved share takes resources back from other queues that
//! are reclaimable and above theirs (the plugins' reclaimable vote: proportion allows only
//! what keeps the victim's queue at or above its deserved share; gang and conformance as
//! in preempt). The reclaiming gang's statement commits only if it becomes pipelined.

use crate::conf::{ArgError, Arguments, NoArguments};
use crate::framework::{Action, Session, VictimKind};
use crate::model::{JobId, TaskRef};

use super::preempt::{evict_or_nothing, starving_gangs, Rules};

pub struct Reclaim;

/// Takes no arguments.
pub fn build(args: &Arguments) -> Result<Box<dyn Action>, ArgError> {
    args.parse::<NoArguments>()?;
    Ok(Box::new(Reclaim))
}

/// "reclaimed for ns/job of queue q-b (queue q-a is above its deserved share)".
pub fn reclaim_reason(ssn: &Session, reclaimer: JobId, victim: TaskRef) -> String {
    let (r, v) = (ssn.job(reclaimer), ssn.job(victim.job));
    format!(
        "reclaimed for {}/{} of queue {} (queue {} is above its deserved share)",
        r.namespace, r.name, r.queue, v.queue
    )
}

fn reclaim_no_room(_: &Session, _: JobId) -> String {
    "reclaim cannot make room: nothing to take back from reclaimable queues above their \
     deserved share (victim gangs keep their minMember; disruption budgets and system-critical \
     pods are respected)"
        .into()
}

pub const RECLAIM: Rules = Rules {
    kind: VictimKind::Reclaim,
    reason: reclaim_reason,
    no_room: reclaim_no_room,
};

impl Action for Reclaim {
    fn name(&self) -> &'static str {
        "reclaim"
    }

    fn execute(&self, ssn: &mut Session) {
        for (queue, jobs) in starving_gangs(ssn) {
            // A queue at or over its share has nothing to reclaim.
            if ssn.queue(&queue).is_none_or(|q| ssn.overused(q)) {
                continue;
            }
            for job in jobs {
                // Once the queue has its share back, the rest of it waits.
                if ssn.queue(&queue).is_none_or(|q| ssn.overused(q)) {
                    break;
                }
                evict_or_nothing(ssn, job, &RECLAIM);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use crate::model::PodGroupPhase;
    use crate::testkit::*;

    const RECLAIM: &str = crate::conf_yaml!("allocate, reclaim"; ["priority", "gang", "conformance"], ["drf", "predicates", "proportion", "nodeorder"]);

    /// Queues q-a and q-b of equal weight; two nodes of 2 CPUs full with q-a's `running`
    /// gangs of 1-CPU pods (name, min, pods), spread over both nodes; q-b's gang `b` wants
    /// `want` CPUs with minMember `want`.
    fn cluster(running: &[(&str, u32, usize)], want: usize) -> crate::cache::Cache {
        let mut cache = cache_with_default_queue();
        cache.apply_queue(queue("q-a", 1));
        cache.apply_queue(queue("q-b", 1));
        add_nodes(&mut cache, "n", 2, &[("cpu", "2")]);
        let mut slot = 0;
        for &(name, min, pods) in running {
            let nodes: Vec<String> = (slot..slot + pods)
                .map(|i| format!("n-{:05}", i % 2))
                .collect();
            slot += pods;
            let nodes: Vec<&str> = nodes.iter().map(String::as_str).collect();
            Gang::new(name, min)
                .queue("q-a")
                .created(1)
                .phase(PodGroupPhase::Running)
                .tasks("", pods, &[("cpu", "1")])
                .running_on(&nodes)
                .apply(&mut cache);
        }
        Gang::new("b", want as u32)
            .queue("q-b")
            .created(2)
            .phase(PodGroupPhase::Inqueue)
            .tasks("", want, &[("cpu", "1")])
            .apply(&mut cache);
        cache
    }

    #[test]
    fn a_gang_at_its_minimum_goes_whole_from_a_queue_above_its_share() {
        // q-a holds 4 CPUs and deserves 2: one of its gangs goes, whole.
        let cache = cluster(&[("a1", 2, 2), ("a2", 2, 2)], 2);
        let result = run_cycle(&cache, Some(RECLAIM));
        let by_job = evicted(&result);
        assert_eq!(by_job.values().copied().collect::<Vec<_>>(), vec![2]);
        for e in &result.evictions {
            assert_eq!(e.preemptor.as_deref(), Some("default/b"));
            assert_eq!(
                e.reason,
                "reclaimed for default/b of queue q-b (queue q-a is above its deserved share)"
            );
        }
    }

    #[test]
    fn only_the_surplus_goes_when_it_is_enough() {
        let cache = cluster(&[("a", 2, 4)], 2);
        let result = run_cycle(&cache, Some(RECLAIM));
        assert_eq!(evicted(&result), BTreeMap::from([("default/a".into(), 2)]));
    }

    /// q-a runs three 1-CPU pods on two nodes of 2 CPUs; q-b (same weight) wants one pod
    /// of `want` CPUs, between 1 and 2, so q-a deserves `4 - want` and is `want - 1` above
    /// its share, and q-b's pod does not fit in the one free CPU.
    fn one_cpu_free(want: &str) -> crate::cache::Cache {
        let mut cache = cache_with_default_queue();
        cache.apply_queue(queue("q-a", 1));
        cache.apply_queue(queue("q-b", 1));
        add_nodes(&mut cache, "n", 2, &[("cpu", "2")]);
        Gang::new("a", 1)
            .queue("q-a")
            .created(1)
            .phase(PodGroupPhase::Running)
            .tasks("", 3, &[("cpu", "1")])
            .running_on(&["n-00000", "n-00001", "n-00000"])
            .apply(&mut cache);
        Gang::new("b", 1)
            .queue("q-b")
            .created(2)
            .phase(PodGroupPhase::Inqueue)
            .tasks("", 1, &[("cpu", want)])
            .apply(&mut cache);
        cache
    }

    #[test]
    fn a_victim_that_would_take_its_queue_below_its_share_stays() {
        // 0.5 CPU above its share, less than any of its pods: none goes.
        let result = run_cycle(&one_cpu_free("1500m"), Some(RECLAIM));
        assert!(result.evictions.is_empty(), "{:?}", result.evictions);
        let message = condition_message(&result, "default/b").unwrap_or_default();
        assert!(
            message.contains("; reclaim cannot make room: nothing to take back"),
            "{message}"
        );
        // 1 CPU above: one pod goes, leaving q-a exactly at its share.
        let result = run_cycle(&one_cpu_free("2"), Some(RECLAIM));
        assert_eq!(evicted(&result), BTreeMap::from([("default/a".into(), 1)]));
    }

    /// `disruptionMode: All` (Kubernetes' PodGroup) holds for reclaim as for preempt: q-a
    /// runs `whole` (minimum 1 of 2 pods, disrupted only whole) and `a` (1 of 2); q-b's
    /// gang wants 2 CPUs. `whole` never loses one pod alone, though one of its pods above
    /// its minimum would be a candidate if it were `single`.
    #[test]
    fn a_gang_disrupted_only_whole_is_reclaimed_whole_or_not_at_all() {
        let mut cache = cache_with_default_queue();
        cache.apply_queue(queue("q-a", 1));
        cache.apply_queue(queue("q-b", 1));
        add_nodes(&mut cache, "n", 2, &[("cpu", "2")]);
        for (name, whole) in [("whole", true), ("a", false)] {
            let mut gang = Gang::new(name, 1)
                .queue("q-a")
                .created(1)
                .phase(PodGroupPhase::Running)
                .tasks("", 2, &[("cpu", "1")])
                .running_on(&["n-00000", "n-00001"]);
            if whole {
                gang = gang.disrupt_whole();
            }
            gang.apply(&mut cache);
        }
        Gang::new("b", 2)
            .queue("q-b")
            .created(2)
            .phase(PodGroupPhase::Inqueue)
            .tasks("", 2, &[("cpu", "1")])
            .apply(&mut cache);
        let result = run_cycle(&cache, Some(RECLAIM));
        let by_job = evicted(&result);
        assert!(
            matches!(by_job.get("default/whole"), None | Some(2)),
            "all of it or none: {by_job:?}"
        );
    }

    #[test]
    fn nothing_is_taken_below_the_victim_queue_share_or_when_not_enough() {
        // The only victim gang would have to go whole, taking q-a below its share.
        let cache = cluster(&[("a", 4, 4)], 2);
        let result = run_cycle(&cache, Some(RECLAIM));
        assert!(result.evictions.is_empty(), "{:?}", result.evictions);
        // Three CPUs wanted: only two can be taken.
        let cache = cluster(&[("a1", 2, 2), ("a2", 2, 2)], 3);
        let result = run_cycle(&cache, Some(RECLAIM));
        assert!(result.evictions.is_empty(), "{:?}", result.evictions);
    }
}
