//! reclaim: a queue below its deserved share takes resources back from other queues that
//! are reclaimable and above theirs (the plugins' reclaimable vote: proportion allows only
//! what keeps the victim's queue at or above its deserved share; gang and conformance as
//! in preempt). The reclaiming gang's statement commits only if it becomes pipelined.

use crate::conf::{ArgError, Arguments};
use crate::framework::{Action, Session};
use crate::model::TaskRef;

use super::preempt::{evict_or_nothing, starving_gangs, FailedShapes, Scope};

pub struct Reclaim;

pub fn build(_: &Arguments) -> Result<Box<dyn Action>, ArgError> {
    Ok(Box::new(Reclaim))
}

fn reclaimable(ssn: &Session, task: TaskRef, candidates: &[TaskRef]) -> Vec<TaskRef> {
    ssn.reclaimable(task, candidates)
}

impl Action for Reclaim {
    fn name(&self) -> &'static str {
        "reclaim"
    }

    fn execute(&self, ssn: &mut Session) {
        let mut failed = FailedShapes::default();
        for (queue, jobs) in starving_gangs(ssn) {
            // A queue at or over its share has nothing to reclaim.
            if ssn.queue(&queue).is_none_or(|q| ssn.overused(q)) {
                continue;
            }
            let reason = format!("reclaimed by queue {queue} (below its deserved share)");
            for job in jobs {
                let scope = &Scope::OtherQueues;
                evict_or_nothing(ssn, job, scope, &reason, reclaimable, &mut failed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::model::PodGroupPhase;
    use crate::testkit::*;

    const CONF: &str = "actions: \"enqueue, allocate, reclaim\"
tiers:
- plugins:
  - name: priority
  - name: gang
  - name: conformance
- plugins:
  - name: predicates
  - name: proportion
  - name: nodeorder
";

    fn setup() -> (crate::cache::Cache, String) {
        let mut cache = cache_with_default_queue();
        cache.apply_queue(queue("a", 1));
        cache.apply_queue(queue("b", 1));
        add_nodes(&mut cache, "n", 1, &[("cpu", "4"), ("memory", "16Gi")]);
        // Queue a borrowed the whole node while b was idle: two gangs of two, no surplus.
        for g in ["a1", "a2"] {
            Gang::new(g, 2)
                .queue("a")
                .phase(PodGroupPhase::Running)
                .tasks("", 2, &[("cpu", "1")])
                .running_on(&["n-00000", "n-00000"])
                .apply(&mut cache);
        }
        let b = Gang::new("b1", 2)
            .queue("b")
            .tasks("", 2, &[("cpu", "1")])
            .apply(&mut cache);
        (cache, b)
    }

    #[test]
    fn a_queue_below_its_share_reclaims_a_whole_gang_from_one_above() {
        let (mut cache, b) = setup();
        let r = cycle_at(&mut cache, Some(CONF), 0);
        // Deserved 2 cpu each: one of a's gangs goes, whole, and a keeps its share.
        assert_eq!(r.evictions.len(), 2, "{:?}", r.evictions);
        let victim = &r.evictions[0].job;
        assert!(r
            .evictions
            .iter()
            .all(|e| e.job == *victim && e.preemptor.as_deref() == Some(b.as_str())));
        assert!(
            r.evictions[0].reason.starts_with("reclaimed"),
            "{}",
            r.evictions[0].reason
        );
    }

    #[test]
    fn a_lender_is_never_taken_below_its_share_even_for_a_whole_gang() {
        let mut cache = cache_with_default_queue();
        cache.apply_queue(queue("a", 1));
        cache.apply_queue(queue("b", 1));
        add_nodes(&mut cache, "n", 1, &[("cpu", "4"), ("memory", "16Gi")]);
        // One gang of four holds the node: evicting it whole would leave a with nothing.
        Gang::new("a1", 4)
            .queue("a")
            .phase(PodGroupPhase::Running)
            .tasks("", 4, &[("cpu", "1")])
            .running_on(&["n-00000"; 4])
            .apply(&mut cache);
        Gang::new("b1", 2)
            .queue("b")
            .tasks("", 2, &[("cpu", "1")])
            .apply(&mut cache);
        let r = cycle_at(&mut cache, Some(CONF), 0);
        assert!(r.evictions.is_empty(), "{:?}", r.evictions);
    }
}
