//! Koordinator gang semantics in the session-based engine, across cycles: total-number,
//! Strict and NonStrict modes, waiting-time expiry with backoff, GangGroups, and the three
//! match policies; Volcano's subgroup gangs. Pure engine: a cache, the default
//! configuration, virtual time.

use rust_batch_engine::cache::{Cache, PodUpdate};
use rust_batch_engine::framework::{GangReason, SessionResult};
use rust_batch_engine::model::{GangMode, MatchPolicy, PodGroupPhase};
use rust_batch_engine::testkit::*;

const CPU2: &[(&str, &str)] = &[("cpu", "2"), ("memory", "8Gi")];
const ONE_CPU: &[(&str, &str)] = &[("cpu", "1")];

fn bound(result: &SessionResult, job: &str) -> usize {
    binds_by_job(result).get(job).map_or(0, Vec::len)
}

fn holds(result: &SessionResult, job: &str) -> Option<usize> {
    result
        .job_updates
        .iter()
        .find(|u| &*u.job == job)
        .and_then(|u| u.holds.as_ref())
        .map(Vec::len)
}

/// Every gang in the result is bound whole or not at all.
fn assert_whole_gangs(result: &SessionResult, min: &[(&str, usize)]) {
    for (job, m) in min {
        let n = bound(result, &format!("default/{job}"));
        assert!(n == 0 || n >= *m, "{job}: {n} bound, minMember {m}");
    }
}

/// A 4-member gang of 1-cpu pods.
fn four(name: &str, mode: GangMode) -> Gang {
    Gang::new(name, 4).mode(mode).tasks("", 4, ONE_CPU)
}

#[test]
fn total_number_keeps_a_gang_invalid_until_every_pod_exists() {
    let mut cache = cache_with_default_queue();
    add_nodes(&mut cache, "n", 2, CPU2);
    let job = Gang::new("tn", 2)
        .total_number(3)
        .tasks("", 2, ONE_CPU)
        .apply(&mut cache);
    let r = cycle_at(&mut cache, None, 0);
    assert_eq!(
        bound(&r, &job),
        0,
        "min-available is met but total-number is not"
    );
    assert_eq!(condition_reason(&r, &job), Some(GangReason::NotEnoughTasks));
    assert!(condition_message(&r, &job)
        .unwrap()
        .contains("only 2 pods exist, total-number is 3"));

    Gang::new("tn", 2)
        .total_number(3)
        .phase(PodGroupPhase::Inqueue)
        .tasks("", 3, ONE_CPU)
        .apply(&mut cache);
    let r = cycle_at(&mut cache, None, 1_000);
    assert_eq!(bound(&r, &job), 3);
}

#[test]
fn only_waiting_does_not_count_running_members_toward_the_minimum() {
    // One member already runs; room for exactly one more pod.
    let run = |policy: MatchPolicy| {
        let mut cache = cache_with_default_queue();
        add_nodes(&mut cache, "n", 1, CPU2);
        let job = Gang::new("mp", 2)
            .match_policy(policy)
            .phase(PodGroupPhase::Running)
            .tasks("", 3, ONE_CPU)
            .running_on(&["n-00000"])
            .apply(&mut cache);
        bound(&cycle_at(&mut cache, None, 0), &job)
    };
    assert_eq!(
        run(MatchPolicy::WaitingAndRunning),
        1,
        "running + one new = 2"
    );
    assert_eq!(
        run(MatchPolicy::OnlyWaiting),
        0,
        "one waiting pod is below 2"
    );
}

#[test]
fn once_satisfied_replacement_pods_schedule_one_by_one() {
    let run = |policy: MatchPolicy| {
        let mut cache = cache_with_default_queue();
        add_nodes(&mut cache, "n", 3, ONE_CPU);
        let job = Gang::new("os", 3)
            .match_policy(policy)
            .tasks("", 3, ONE_CPU)
            .apply(&mut cache);
        let r = cycle_at(&mut cache, None, 0);
        assert_eq!(bound(&r, &job), 3, "{policy:?}: the gang starts whole");
        // Two members fail; another workload takes the node one of them ran on.
        let node_of = |task: &str| {
            r.binds
                .iter()
                .find(|b| &*b.task == task)
                .unwrap()
                .node
                .clone()
        };
        cache.delete_pod("default/os-1");
        cache.delete_pod("default/os-2");
        foreign_pod(
            &mut cache,
            "default/other",
            &node_of("default/os-2"),
            ONE_CPU,
        );
        // Their replacements: room for one of them only.
        let replacements = Gang::new("os", 3).tasks("", 5, ONE_CPU).tasks;
        for task in replacements.into_iter().skip(3) {
            cache.apply_pod(PodUpdate {
                task,
                job: Some(job.clone()),
            });
        }
        bound(&cycle_at(&mut cache, None, 1_000), &job)
    };
    assert_eq!(
        run(MatchPolicy::OnceSatisfied),
        1,
        "after the first start, a replacement binds alone where one fits"
    );
    assert_eq!(
        run(MatchPolicy::WaitingAndRunning),
        0,
        "1 running + 1 placeable is below minMember 3"
    );
}

#[test]
fn a_non_strict_gang_keeps_its_placements_across_cycles_and_binds_when_the_rest_fits() {
    let mut cache = cache_with_default_queue();
    add_nodes(&mut cache, "a", 1, CPU2);
    let job = four("ns", GangMode::NonStrict).apply(&mut cache);
    let r = cycle_at(&mut cache, None, 0);
    assert_eq!(bound(&r, &job), 0);
    assert_eq!(holds(&r, &job), Some(2), "two members hold the node");

    // A later small gang cannot take what the NonStrict gang holds.
    let small = Gang::new("small", 1)
        .tasks("", 1, ONE_CPU)
        .apply(&mut cache);
    let r = cycle_at(&mut cache, None, 1_000);
    assert_eq!(bound(&r, &small), 0, "the held cpus are not free");
    assert!(r.binds.is_empty());

    add_nodes(&mut cache, "b", 1, &[("cpu", "3"), ("memory", "8Gi")]);
    let r = cycle_at(&mut cache, None, 2_000);
    assert_eq!(bound(&r, &small), 1);
    assert_eq!(
        bound(&r, &job),
        4,
        "the held two and the new two bind together"
    );
    assert_eq!(holds(&r, &job), Some(0), "holds are released once bound");
    assert_whole_gangs(&r, &[("ns", 4)]);
}

#[test]
fn a_strict_gang_releases_its_tentative_placements_every_cycle() {
    let mut cache = cache_with_default_queue();
    add_nodes(&mut cache, "a", 1, CPU2);
    let job = four("st", GangMode::Strict).apply(&mut cache);
    let r = cycle_at(&mut cache, None, 0);
    assert_eq!(bound(&r, &job), 0);
    assert_eq!(holds(&r, &job), None, "nothing is kept");

    let small = Gang::new("small", 1)
        .tasks("", 1, ONE_CPU)
        .apply(&mut cache);
    let r = cycle_at(&mut cache, None, 1_000);
    assert_eq!(
        bound(&r, &small),
        1,
        "the space the Strict gang tried is free"
    );
    assert_eq!(bound(&r, &job), 0);
}

#[test]
fn waiting_time_expiry_releases_holds_says_so_and_retries_after_a_backoff() {
    let mut cache = cache_with_default_queue();
    add_nodes(&mut cache, "a", 1, CPU2);
    let job = four("wt", GangMode::NonStrict)
        .waiting_time(10_000)
        .apply(&mut cache);
    let r = cycle_at(&mut cache, None, 0);
    assert_eq!(holds(&r, &job), Some(2));
    let r = cycle_at(&mut cache, None, 5_000);
    assert_eq!(holds(&r, &job), None, "still holding, nothing changed");
    assert_ne!(
        condition_reason(&r, &job),
        Some(GangReason::WaitingTimeExpired)
    );

    let small = Gang::new("small", 1)
        .tasks("", 1, ONE_CPU)
        .apply(&mut cache);
    let r = cycle_at(&mut cache, None, 10_000);
    assert_eq!(
        condition_reason(&r, &job),
        Some(GangReason::WaitingTimeExpired)
    );
    let message = condition_message(&r, &job).unwrap();
    assert!(
        message.contains("2 held placement(s) released") && message.contains("backoff of 5s"),
        "{message}"
    );
    assert_eq!(holds(&r, &job), Some(0), "holds released");
    assert_eq!(bound(&r, &job), 0);
    assert_eq!(bound(&r, &small), 1, "what it held serves others at once");

    // Backing off: not tried, the condition stays, no holds come back.
    let r = cycle_at(&mut cache, None, 12_000);
    assert_eq!(
        condition_reason(&r, &job),
        Some(GangReason::WaitingTimeExpired)
    );
    assert_eq!(holds(&r, &job), None);

    // After the backoff it is tried again and holds what is free (one cpu).
    let r = cycle_at(&mut cache, None, 15_000);
    assert_eq!(holds(&r, &job), Some(1));
    // The second expiry doubles the backoff.
    let r = cycle_at(&mut cache, None, 25_000);
    assert!(condition_message(&r, &job)
        .unwrap()
        .contains("2 time(s) in a row"));
    assert!(condition_message(&r, &job)
        .unwrap()
        .contains("backoff of 10s"));
}

#[test]
fn a_strict_and_a_non_strict_gang_competing_for_the_same_capacity_do_not_deadlock() {
    let mut cache = cache_with_default_queue();
    add_nodes(&mut cache, "a", 2, CPU2);
    let strict = four("strict", GangMode::Strict).apply(&mut cache);
    let loose = four("loose", GangMode::NonStrict)
        .waiting_time(30_000)
        .apply(&mut cache);
    let mut done = std::collections::BTreeSet::new();
    for t in 0..20 {
        let r = cycle_at(&mut cache, None, t * 5_000);
        assert_whole_gangs(&r, &[("strict", 4), ("loose", 4)]);
        for job in [&strict, &loose] {
            if bound(&r, job) > 0 {
                done.insert(job.clone());
                // A finished gang frees its nodes for the other.
                for i in 0..4 {
                    let name = job.trim_start_matches("default/");
                    cache.delete_pod(&format!("default/{name}-{i}"));
                }
            }
        }
    }
    assert_eq!(
        done.len(),
        2,
        "both gangs ran, one after the other: {done:?}"
    );
}

#[test]
fn a_gang_group_binds_nothing_until_every_gang_fits_then_all_together() {
    let mut cache = cache_with_default_queue();
    // Room for three 1-cpu pods.
    add_nodes(&mut cache, "a", 1, CPU2);
    add_nodes(&mut cache, "b", 1, &[("cpu", "1"), ("memory", "8Gi")]);
    let a = Gang::new("gang-a", 2)
        .group(&["gang-b"])
        .tasks("", 2, ONE_CPU)
        .apply(&mut cache);
    let b = Gang::new("gang-b", 2)
        .group(&["gang-a"])
        .tasks("", 2, ONE_CPU)
        .apply(&mut cache);
    for t in 0..3 {
        let r = cycle_at(&mut cache, None, t * 1_000);
        assert!(r.binds.is_empty(), "gang-a alone fits, but not the group");
        let why = condition_message(&r, &a).or_else(|| condition_message(&r, &b));
        assert!(
            why.as_deref()
                .is_some_and(|m| m.contains("gang group not ready")),
            "{why:?}"
        );
    }
    add_nodes(&mut cache, "c", 1, &[("cpu", "1"), ("memory", "8Gi")]);
    let r = cycle_at(&mut cache, None, 10_000);
    assert_eq!(
        (bound(&r, &a), bound(&r, &b)),
        (2, 2),
        "all four in one cycle"
    );
}

#[test]
fn a_group_naming_a_gang_that_does_not_exist_waits_and_says_which() {
    let mut cache: Cache = cache_with_default_queue();
    add_nodes(&mut cache, "a", 2, CPU2);
    let a = Gang::new("gang-a", 2)
        .group(&["ghost"])
        .tasks("", 2, ONE_CPU)
        .apply(&mut cache);
    let other = Gang::new("other", 2)
        .tasks("", 2, ONE_CPU)
        .apply(&mut cache);
    let r = cycle_at(&mut cache, None, 0);
    assert_eq!(bound(&r, &a), 0);
    assert_eq!(bound(&r, &other), 2, "everything else keeps scheduling");
    let why = condition_message(&r, &a).unwrap();
    assert!(why.contains("default/ghost"), "{why}");
}

/// A gang of `replicas` subgroups of 4 one-cpu workers (`role=worker`, `replica=<i>`).
fn replicas(name: &str, min_member: u32, replicas: usize, min_groups: u32) -> Gang {
    let mut g = Gang::new(name, min_member).subgroups("worker", 4, min_groups);
    for r in 0..replicas {
        g = g
            .tasks("", 4, ONE_CPU)
            .last_labelled(4, &[("role", "worker"), ("replica", &r.to_string())]);
    }
    g
}

/// Which replica each bound pod of `job` belongs to, counted.
fn bound_per_replica(cache: &Cache, result: &SessionResult, job: &str) -> Vec<usize> {
    let state = cache.snapshot();
    let mut per = std::collections::BTreeMap::new();
    for b in &result.binds {
        if &*b.job != job {
            continue;
        }
        let t = task_ref(&state, &b.task).unwrap();
        let replica = state.task(t).labels.get("replica").cloned().unwrap();
        *per.entry(replica).or_insert(0) += 1;
    }
    per.into_values().collect()
}

#[test]
fn only_whole_subgroups_bind_and_an_elastic_gang_starts_with_those_that_fit() {
    let mut cache = cache_with_default_queue();
    add_nodes(&mut cache, "n", 6, &[("cpu", "1")]);
    // Room for 6 pods, subgroups of 4: one replica binds whole, no half of the other.
    let job = replicas("lws", 4, 2, 1).apply(&mut cache);
    let result = run_cycle(&cache, None);
    assert_eq!(bound_per_replica(&cache, &result, &job), vec![4]);
}

#[test]
fn a_gang_waits_whole_until_min_sub_groups_fit() {
    let mut cache = cache_with_default_queue();
    add_nodes(&mut cache, "n", 6, &[("cpu", "1")]);
    let job = replicas("two", 4, 2, 2).apply(&mut cache);
    let result = run_cycle(&cache, None);
    assert_eq!(
        bound(&result, &job),
        0,
        "2 subgroups of 4 need 8 cpus, 6 exist"
    );
    // Two more nodes: both subgroups bind together.
    add_nodes(&mut cache, "m", 2, &[("cpu", "1")]);
    let result = run_cycle(&cache, None);
    assert_eq!(bound_per_replica(&cache, &result, &job), vec![4, 4]);
}

#[test]
fn a_policy_whose_pods_cannot_form_its_minimum_waits_and_is_named() {
    let mut cache = cache_with_default_queue();
    add_nodes(&mut cache, "n", 16, &[("cpu", "1")]);
    let job = replicas("short", 4, 2, 3).apply(&mut cache);
    let result = run_cycle(&cache, None);
    assert_eq!(bound(&result, &job), 0);
    assert_eq!(
        condition_reason(&result, &job),
        Some(GangReason::NotEnoughTasks)
    );
    let message = condition_message(&result, &job).unwrap();
    assert!(
        message.contains("subGroupPolicy \"worker\": 2 subgroups of 4 pods can form from the 8 pods it selects, minSubGroups is 3"),
        "{message}"
    );
}
