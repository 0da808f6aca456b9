use std::collections::BTreeMap;

use crate::model::PodGroupPhase;
use crate::testkit::*;

const PREEMPT: &str = crate::conf_yaml!("allocate, preempt"; ["priority", "gang", "conformance"], ["predicates", "nodeorder"]);

/// Two nodes of 2 CPUs, full with `running` gangs of 1-CPU pods: (name, min, pods,
/// priority), pods spread over both nodes.
fn full_cluster(running: &[(&str, u32, usize, i32)]) -> crate::cache::Cache {
    let mut cache = cache_with_default_queue();
    add_nodes(&mut cache, "n", 2, &[("cpu", "2")]);
    let mut slot = 0;
    for &(name, min, pods, priority) in running {
        let nodes: Vec<String> = (slot..slot + pods)
            .map(|i| format!("n-{:05}", i % 2))
            .collect();
        slot += pods;
        let nodes: Vec<&str> = nodes.iter().map(String::as_str).collect();
        Gang::new(name, min)
            .priority(priority)
            .created(1)
            .phase(PodGroupPhase::Running)
            .tasks("", pods, &[("cpu", "1")])
            .running_on(&nodes)
            .apply(&mut cache);
    }
    cache
}

fn preemptor(cache: &mut crate::cache::Cache, min: u32, pods: usize) -> String {
    Gang::new("high", min)
        .priority(100)
        .created(2)
        .phase(PodGroupPhase::Inqueue)
        .tasks("", pods, &[("cpu", "1")])
        .apply(cache)
}

#[test]
fn a_gang_at_its_minimum_goes_whole_when_that_is_the_only_way() {
    let mut cache = full_cluster(&[("low", 4, 4, 1)]);
    let high = preemptor(&mut cache, 4, 4);
    let result = run_cycle(&cache, Some(PREEMPT));
    assert_eq!(
        evicted(&result),
        BTreeMap::from([("default/low".into(), 4)])
    );
    for e in &result.evictions {
        assert_eq!(e.preemptor.as_deref(), Some(high.as_str()));
        assert_eq!(e.reason, "preempted by default/high (priority 100 > 1)");
    }
    assert!(
        result.binds.is_empty(),
        "the preemptor waits for the release"
    );
}

#[test]
fn the_most_constrained_task_of_the_preemptor_chooses_first() {
    // The TFJob as a preemptor: a 2-cpu PS and a 4-cpu/2-GPU worker, on a 4-cpu
    // node and a 5-cpu/2-GPU node each filled by a low-priority pod. In task order the
    // PS may take the GPU node's room and strand the worker; the worker, which can only
    // go there, chooses first.
    let mut cache = cache_with_default_queue();
    cache.apply_node(node("cpu-node", &[("cpu", "4")]));
    cache.apply_node(node("gpu-node", &[("cpu", "5"), ("nvidia.com/gpu", "2")]));
    for (name, node, cpu) in [("low-a", "cpu-node", "4"), ("low-b", "gpu-node", "5")] {
        Gang::new(name, 1)
            .priority(1)
            .created(1)
            .phase(PodGroupPhase::Running)
            .tasks("", 1, &[("cpu", cpu)])
            .running_on(&[node])
            .apply(&mut cache);
    }
    // A gang with no pods yet, so that the preemptor's scan of nodes starts at the GPU
    // node (preempt starts each gang's scan at an offset of its slot).
    Gang::new("no-pods-yet", 1).created(3).apply(&mut cache);
    let high = Gang::new("high", 2)
        .priority(100)
        .created(2)
        .phase(PodGroupPhase::Inqueue)
        .tasks("ps", 1, &[("cpu", "2")])
        .tasks("worker", 1, &[("cpu", "4"), ("nvidia.com/gpu", "2")])
        .apply(&mut cache);
    let result = run_cycle(&cache, Some(PREEMPT));
    assert_eq!(
        evicted(&result),
        BTreeMap::from([("default/low-a".into(), 1), ("default/low-b".into(), 1)]),
        "room for both members of {high}"
    );
}

#[test]
fn a_gang_whose_pods_never_preempt_waits_for_room() {
    let mut cache = full_cluster(&[("low", 4, 4, 1)]);
    let high = preemptor(&mut cache, 4, 4);
    let uids: Vec<String> = {
        let s = cache.state();
        let job = s.job(s.job_by_uid(&high).unwrap());
        job.tasks().iter().map(|t| t.uid.to_string()).collect()
    };
    for uid in uids {
        let mut pod = cache.pod(&uid).unwrap().clone();
        pod.task.never_preempts = true; // preemptionPolicy: Never
        cache.apply_pod(pod);
    }
    let result = run_cycle(&cache, Some(PREEMPT));
    assert!(result.evictions.is_empty(), "{:?}", result.evictions);
}

#[test]
fn the_lowest_priority_gang_goes_whole_first() {
    let mut cache = full_cluster(&[("mid", 2, 2, 5), ("low", 2, 2, 1)]);
    preemptor(&mut cache, 2, 2);
    let result = run_cycle(&cache, Some(PREEMPT));
    assert_eq!(
        evicted(&result),
        BTreeMap::from([("default/low".into(), 2)])
    );
}

#[test]
fn only_the_surplus_goes_when_it_is_enough() {
    let mut cache = full_cluster(&[("low", 2, 4, 1)]);
    preemptor(&mut cache, 2, 2);
    let result = run_cycle(&cache, Some(PREEMPT));
    assert_eq!(
        evicted(&result),
        BTreeMap::from([("default/low".into(), 2)])
    );
}

#[test]
fn a_gang_disrupted_only_whole_loses_all_its_members_or_none() {
    let mut cache = cache_with_default_queue();
    add_nodes(&mut cache, "n", 2, &[("cpu", "2")]);
    Gang::new("low", 2)
        .priority(1)
        .created(1)
        .phase(PodGroupPhase::Running)
        .tasks("", 4, &[("cpu", "1")])
        .running_on(&["n-00000", "n-00001", "n-00000", "n-00001"])
        .disrupt_whole()
        .apply(&mut cache);
    preemptor(&mut cache, 2, 2);
    let result = run_cycle(&cache, Some(PREEMPT));
    assert_eq!(
        evicted(&result),
        BTreeMap::from([("default/low".into(), 4)]),
        "not only the surplus: the whole gang"
    );
}

#[test]
fn a_gang_that_never_preempts_waits_for_room() {
    let mut cache = full_cluster(&[("low", 4, 4, 1)]);
    Gang::new("high", 4)
        .priority(100)
        .created(2)
        .phase(PodGroupPhase::Inqueue)
        .tasks("", 4, &[("cpu", "1")])
        .never_preempts()
        .apply(&mut cache);
    let result = run_cycle(&cache, Some(PREEMPT));
    assert!(result.evictions.is_empty(), "{:?}", result.evictions);
}

#[test]
fn nothing_is_evicted_when_even_whole_gangs_are_not_enough() {
    let mut cache = full_cluster(&[("low", 4, 4, 1)]);
    // Six CPUs wanted, four could be freed.
    preemptor(&mut cache, 6, 6);
    let result = run_cycle(&cache, Some(PREEMPT));
    assert!(result.evictions.is_empty(), "{:?}", result.evictions);
    // Nor if one of the victims is protected: the rest alone is not enough.
    let mut cache = full_cluster(&[("low", 2, 2, 1), ("equal", 2, 2, 100)]);
    preemptor(&mut cache, 4, 4);
    let result = run_cycle(&cache, Some(PREEMPT));
    assert!(result.evictions.is_empty(), "{:?}", result.evictions);
}

/// `mid` (priority 5) and `low` (priority 1), two 1-CPU pods each, fill the cluster;
/// `low`'s pods are under a PodDisruptionBudget that lets `allowed` go.
fn budgeted(allowed: Option<u32>) -> BTreeMap<String, usize> {
    let mut cache = cache_with_default_queue();
    add_nodes(&mut cache, "n", 2, &[("cpu", "2")]);
    for (name, priority) in [("mid", 5), ("low", 1)] {
        let gang = Gang::new(name, 2)
            .priority(priority)
            .created(1)
            .phase(PodGroupPhase::Running)
            .tasks("", 2, &[("cpu", "1")])
            .running_on(&["n-00000", "n-00001"]);
        let gang = if name == "low" {
            gang.budget("default/low-pdb")
        } else {
            gang
        };
        gang.apply(&mut cache);
    }
    if let Some(allowed) = allowed {
        cache.apply_budget("default/low-pdb", allowed);
    }
    preemptor(&mut cache, 2, 2);
    evicted(&run_cycle(&cache, Some(PREEMPT)))
}

#[test]
fn a_disruption_budget_keeps_victims_the_eviction_api_would_refuse() {
    let low = BTreeMap::from([("default/low".into(), 2)]);
    let mid = BTreeMap::from([("default/mid".into(), 2)]);
    assert_eq!(budgeted(Some(2)), low, "the budget allows the whole gang");
    // Allowing one pod would leave `low` below its minimum: `mid` goes instead.
    assert_eq!(budgeted(Some(1)), mid);
    assert_eq!(budgeted(Some(0)), mid);
    // A budget the scheduler has not seen yet allows nothing.
    assert_eq!(budgeted(None), mid);
}

#[test]
fn an_equal_priority_gang_is_never_a_victim() {
    let mut cache = full_cluster(&[("equal", 4, 4, 100)]);
    preemptor(&mut cache, 4, 4);
    let result = run_cycle(&cache, Some(PREEMPT));
    assert!(result.evictions.is_empty(), "{:?}", result.evictions);
    // The preemptor's message says why preemption did not help, after allocate's.
    let message = condition_message(&result, "default/high").unwrap_or_default();
    assert!(
            message.contains(
                "gang is short of 4 cpu; preemption cannot make room: no pods of queue default below priority 100 that may go"
            ),
            "{message}"
        );
    let mut cache = full_cluster(&[("equal", 2, 4, 100)]);
    preemptor(&mut cache, 2, 2);
    let result = run_cycle(&cache, Some(PREEMPT));
    assert!(result.evictions.is_empty(), "{:?}", result.evictions);
}
