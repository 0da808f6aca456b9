//! The cycle's decision, driven directly: an index filled through its apply functions or
//! with the engine's testkit, fake writers that record what they are handed, no runtime
//! and no cluster.

use std::cell::RefCell;

use serde_json::json;

use super::*;
use crate::model::PodGroupPhase as Phase;
use crate::testkit::{add_nodes, queue, scheduler, Gang};

/// Writers that keep what a cycle hands them.
#[derive(Default)]
struct Recorded {
    sent: RefCell<Vec<(Vec<Bind>, Vec<Eviction>)>>,
    patches: RefCell<Vec<ClaimPatch>>,
    commits: RefCell<usize>,
}

impl Writers for Recorded {
    fn send_now(&self, binds: Vec<Bind>, evictions: Vec<Eviction>) {
        self.sent.borrow_mut().push((binds, evictions));
    }
    fn patch_claims(&self, patches: Vec<ClaimPatch>) {
        self.patches.borrow_mut().extend(patches);
    }
    fn commit_devices(&self, commits: Vec<GangCommit>) {
        *self.commits.borrow_mut() += commits.len();
    }
}

/// Preempt within a queue: priority orders gangs, gang keeps them whole.
const PREEMPT: &str = rust_batch_engine::conf_yaml!("allocate, preempt"; ["priority", "gang", "conformance"], ["predicates", "nodeorder"]);

/// An index whose lists are in, with queue `default` and `nodes` nodes of 4 CPUs.
fn index(nodes: usize) -> Mutex<Index> {
    let mut ix = Index::new(vec!["rust-batch".into()]);
    ix.readiness.expect("Pod");
    ix.readiness.listed("Pod");
    ix.cache.apply_queue(queue("default", 1));
    add_nodes(&mut ix.cache, "n", nodes, &[("cpu", "4")]);
    Mutex::new(ix)
}

/// A decider on configuration `conf` (None: the default) whose clock stands still.
fn decider(conf: Option<&str>) -> Decider {
    let mut d = Decider::new(scheduler(conf), Instant::now());
    d.clock = || 1_000_000;
    d
}

/// One cycle as the leader.
fn decide(d: &mut Decider, ix: &Mutex<Index>, writers: &Recorded) -> Option<CyclePlan> {
    let metrics = Metrics::new().unwrap();
    d.decide(
        ix,
        &Leadership::always(),
        &metrics,
        &InFlight::default(),
        writers,
        Instant::now(),
    )
}

fn bound_gangs(plan: &CyclePlan) -> Vec<String> {
    let mut gangs: Vec<String> = plan.binds.iter().map(|b| b.job.to_string()).collect();
    gangs.dedup();
    gangs
}

#[test]
fn a_gang_that_fits_is_planned_whole_and_assumed_in_the_cache() {
    let ix = index(1);
    Gang::new("fits", 3)
        .tasks("", 3, &[("cpu", "1")])
        .apply(&mut lock(&ix).cache);
    let writers = Recorded::default();
    let plan = decide(&mut decider(None), &ix, &writers).expect("a cycle");
    assert_eq!(plan.binds.len(), 3, "every pod of the gang");
    assert_eq!(bound_gangs(&plan), ["default/fits"]);
    assert!(plan.evictions.is_empty());
    let ix = lock(&ix);
    assert_eq!(
        ix.cache.binds_assumed(),
        3,
        "assumed before anything is sent"
    );
    let (condition, _) = &ix.verdicts["default/fits"];
    assert_eq!(
        condition.as_ref().map(|c| c.kind),
        Some(ConditionKind::Scheduled)
    );
    assert!(
        ix.status_touched.groups.contains("default/fits"),
        "the status writer is told"
    );
    assert!(
        writers.sent.borrow().is_empty(),
        "nothing sent before the plan"
    );
}

#[test]
fn a_gang_that_does_not_fit_gets_no_bind_and_an_unschedulable_verdict() {
    let ix = index(1);
    // 3 pods of 2 CPUs on one node of 4: two would fit, the gang needs all three.
    Gang::new("big", 3)
        .phase(Phase::Inqueue)
        .tasks("", 3, &[("cpu", "2")])
        .apply(&mut lock(&ix).cache);
    Gang::new("small", 1)
        .tasks("", 1, &[("cpu", "1")])
        .apply(&mut lock(&ix).cache);
    let plan = decide(&mut decider(None), &ix, &Recorded::default()).expect("a cycle");
    assert_eq!(
        bound_gangs(&plan),
        ["default/small"],
        "no member of the gang that does not fit, the other gang goes"
    );
    let ix = lock(&ix);
    let (condition, pods) = &ix.verdicts["default/big"];
    assert_eq!(
        condition.as_ref().map(|c| c.kind),
        Some(ConditionKind::Unschedulable)
    );
    assert_eq!(pods.len(), 3, "each pending pod says why it waits");
    for (uid, _) in pods {
        assert!(
            ix.pod_conditions.contains_key(&**uid),
            "{uid}: its PodScheduled condition is wanted"
        );
        assert!(
            ix.events.last(uid, "FailedScheduling").is_some(),
            "{uid}: told by an event"
        );
    }
}

#[test]
fn a_gang_in_flight_is_not_planned_twice() {
    let ix = index(2);
    Gang::new("once", 2)
        .tasks("", 2, &[("cpu", "3")])
        .apply(&mut lock(&ix).cache);
    let mut d = decider(None);
    let writers = Recorded::default();
    let first = decide(&mut d, &ix, &writers).expect("a cycle");
    assert_eq!(first.binds.len(), 2);
    // The watch has not shown the binds yet: the next cycle sees them assumed.
    let second = decide(&mut d, &ix, &writers).expect("a cycle");
    assert!(second.binds.is_empty(), "{:?}", second.binds);
    assert_eq!(lock(&ix).cache.binds_assumed(), 2);
}

#[test]
fn a_preemption_yields_evictions_of_the_lower_priority_gang_only() {
    let ix = index(1);
    {
        let mut ix = lock(&ix);
        Gang::new("low", 1)
            .priority(1)
            .phase(Phase::Running)
            .tasks("", 1, &[("cpu", "4")])
            .running_on(&["n-00000"])
            .started(0)
            .apply(&mut ix.cache);
        Gang::new("high", 1)
            .priority(100)
            .phase(Phase::Inqueue)
            .tasks("", 1, &[("cpu", "4")])
            .apply(&mut ix.cache);
    }
    let plan = decide(&mut decider(Some(PREEMPT)), &ix, &Recorded::default()).expect("a cycle");
    assert!(plan.binds.is_empty(), "the victim's room is not free yet");
    assert_eq!(plan.evictions.len(), 1, "{:?}", plan.evictions);
    let e = &plan.evictions[0];
    assert_eq!(&*e.job, "default/low");
    assert_eq!(e.preemptor.as_deref(), Some("default/high"));
    assert!(
        matches!(
            lock(&ix).cache.assumption(&e.task),
            Some(crate::cache::Assumption::Evict)
        ),
        "the eviction is assumed: the next cycle does not take it again"
    );
}

#[test]
fn no_cycle_on_a_partial_list_or_on_a_standby() {
    let ix = index(1);
    Gang::new("waits", 1)
        .tasks("", 1, &[("cpu", "1")])
        .apply(&mut lock(&ix).cache);
    lock(&ix).readiness.expect("Node");
    let mut d = decider(None);
    assert!(decide(&mut d, &ix, &Recorded::default()).is_none());
    lock(&ix).readiness.listed("Node");
    let standby = Leadership::elected(None);
    let metrics = Metrics::new().unwrap();
    let writers = Recorded::default();
    let plan = d.decide(
        &ix,
        &standby,
        &metrics,
        &InFlight::default(),
        &writers,
        Instant::now(),
    );
    assert!(plan.is_none(), "a standby decides nothing");
    assert_eq!(lock(&ix).cache.binds_assumed(), 0);
    assert!(decide(&mut d, &ix, &writers).is_some_and(|p| p.binds.len() == 1));
}

/// Through the index's apply path: a Volcano PodGroup that needs three pods and has one
/// gets one event that stays put, and its pod a condition that does not count.
#[test]
fn a_forming_gang_is_said_once_on_its_podgroup_and_its_pods_wait_quietly() {
    let ix = index(1);
    {
        let mut ix = lock(&ix);
        let group: crate::dialects::volcano::PodGroup = serde_json::from_value(json!({
            "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
            "metadata": {"name": "g", "namespace": "ns", "uid": "pg-g"},
            "spec": {"minMember": 3}
        }))
        .unwrap();
        ix.apply_group(&group);
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
            "metadata": {"name": "a", "namespace": "ns", "uid": "a",
                         "annotations": {"scheduling.k8s.io/group-name": "g"}},
            "spec": {"schedulerName": "rust-batch",
                     "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}
        }))
        .unwrap();
        ix.apply_pod(&pod);
    }
    let mut d = decider(None);
    let plan = decide(&mut d, &ix, &Recorded::default()).expect("a cycle");
    assert!(plan.binds.is_empty());
    let first = {
        let ix = lock(&ix);
        assert_eq!(
            ix.pod_conditions.get("a").map(|(_, m)| m.as_str()),
            Some(FORMING_MESSAGE)
        );
        assert!(
            ix.events.last("a", "FailedScheduling").is_none(),
            "no event per pod"
        );
        ix.events.last("pg-g", FORMING_EVENT).map(String::from)
    };
    assert!(
        first.as_deref().is_some_and(|m| m.contains("minimum of 3")),
        "{first:?}"
    );
    decide(&mut d, &ix, &Recorded::default()).expect("a cycle");
    assert_eq!(
        lock(&ix).events.last("pg-g", FORMING_EVENT),
        first.as_deref(),
        "the same words: deduplicated, not said again"
    );
}

/// A gang a refused bind left short past its time: its bound member is released before
/// the engine runs (handed to the writers first, assumed in the cache), and its next
/// verdict says why.
#[test]
fn a_gang_left_short_past_its_time_is_released_before_the_cycle_decides() {
    let ix = index(1);
    {
        let mut ix = lock(&ix);
        // Two members of 3 CPUs each on one node of 4: one runs, the other's bind was
        // refused and cannot be placed again.
        Gang::new("short", 2)
            .phase(Phase::Running)
            .tasks("", 2, &[("cpu", "3")])
            .running_on(&["n-00000"])
            .apply(&mut ix.cache);
        ix.recovery.timeout = std::time::Duration::from_secs(30);
        ix.recovery
            .bind_refused("default/short", "default/short-1", "denied by a webhook", 0);
    }
    let writers = Recorded::default();
    let plan = decide(&mut decider(None), &ix, &writers).expect("a cycle");
    let sent = writers.sent.borrow();
    assert_eq!(sent.len(), 1, "one early send: the release");
    let (binds, evictions) = &sent[0];
    assert!(binds.is_empty());
    assert_eq!(evictions.len(), 1, "{evictions:?}");
    let e = &evictions[0];
    assert_eq!((&*e.job, e.preemptor.as_ref()), ("default/short", None));
    assert!(e.reason.contains("denied by a webhook"), "{}", e.reason);
    assert!(
        plan.evictions.is_empty() && plan.binds.is_empty(),
        "released once, not again in the plan"
    );
    let ix = lock(&ix);
    assert!(matches!(
        ix.cache.assumption(&e.task),
        Some(crate::cache::Assumption::Evict)
    ));
}
