//! What keeps an unschedulable gang waiting, as its pods' PodScheduled condition will say:
//! only a gang the nodes cannot hold is `Capacity` (reason `Unschedulable`, what cluster
//! autoscalers act on); a gang its queue holds back, one not admitted yet and one still
//! forming say so with reasons of their own. Pure engine.

use rust_batch_engine::framework::{Blocker, SessionResult};
use rust_batch_engine::model::QueueInfo;
use rust_batch_engine::testkit::*;

const CONF: &str =
    rust_batch_engine::conf_yaml!("enqueue, allocate"; ["gang", "proportion", "predicates"]);

fn blocker(result: &SessionResult, job: &str) -> Option<Blocker> {
    result
        .job_updates
        .iter()
        .find(|u| &*u.job == job)
        .and_then(|u| u.blocked_by)
}

#[test]
fn only_a_gang_the_nodes_cannot_hold_is_blocked_by_capacity() {
    let mut cache = cache_with_default_queue();
    let mut capped = QueueInfo::new("capped", 1);
    capped.capability = Some(res(&[("cpu", "2")]));
    cache.apply_queue(capped);
    add_nodes(&mut cache, "n", 2, &[("cpu", "4"), ("memory", "16Gi")]);
    // 3 × 3 cpu on two 4-cpu nodes: one task has no node.
    let too_big = Gang::new("too-big", 3)
        .tasks("", 3, &[("cpu", "3")])
        .apply(&mut cache);
    // Fits the nodes, not the queue's capability (admitted: no minResources).
    let over_quota = Gang::new("over-quota", 3)
        .queue("capped")
        .tasks("", 3, &[("cpu", "1")])
        .apply(&mut cache);
    // Its minResources exceed the capability: never admitted.
    let not_admitted = Gang::new("not-admitted", 2)
        .queue("capped")
        .min_resources(&[("cpu", "4")])
        .tasks("", 2, &[("cpu", "2")])
        .apply(&mut cache);
    let forming = Gang::new("forming", 3)
        .tasks("", 2, &[("cpu", "1")])
        .apply(&mut cache);
    let result = run_cycle(&cache, Some(CONF));
    assert_eq!(blocker(&result, &too_big), Some(Blocker::Capacity));
    assert_eq!(blocker(&result, &over_quota), Some(Blocker::Queue));
    assert_eq!(blocker(&result, &not_admitted), Some(Blocker::Admission));
    assert_eq!(blocker(&result, &forming), Some(Blocker::Forming));
    assert_eq!(Blocker::Capacity.pod_reason(), "Unschedulable");
    for b in [Blocker::Queue, Blocker::Admission, Blocker::Forming] {
        assert_ne!(b.pod_reason(), "Unschedulable", "{b:?}");
    }
}
