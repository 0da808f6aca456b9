//! Preemption that protects (issue 40): a queue's minimum runtime keeps its fresh pods from
//! preempt and reclaim, and its preemption delay keeps its gangs from evicting until they
//! waited that long; both say so and ask the driver for a cycle when they end. A property
//! over small random worlds: no victim is ever younger than its minimum runtime.

use proptest::prelude::*;
use rust_batch_engine::cache::Cache;
use rust_batch_engine::model::{PodGroupPhase, QueueInfo, Timestamp};
use rust_batch_engine::testkit::*;

const PREEMPT: &str = rust_batch_engine::conf_yaml!("allocate, preempt"; ["priority", "gang", "conformance"], ["predicates", "nodeorder"]);
const MIN: i64 = 60_000;

/// Two nodes of 2 CPUs full with four low-priority one-pod gangs started at `starts`, and a
/// high-priority gang of one 2-CPU pod created at `created`, in queue `default` (`queue`'s
/// settings).
fn world(queue: QueueInfo, starts: &[Timestamp], created: Timestamp) -> Cache {
    let mut cache = cache_with_default_queue();
    cache.apply_queue(queue);
    add_nodes(&mut cache, "n", 2, &[("cpu", "2")]);
    for (i, start) in starts.iter().enumerate() {
        Gang::new(&format!("low-{i}"), 1)
            .priority(1)
            .phase(PodGroupPhase::Running)
            .tasks("", 1, &[("cpu", "1")])
            .running_on(&[&format!("n-{:05}", i % 2)])
            .started(*start)
            .apply(&mut cache);
    }
    Gang::new("high", 1)
        .priority(100)
        .created(created)
        .phase(PodGroupPhase::Inqueue)
        .tasks("", 1, &[("cpu", "2")])
        .apply(&mut cache);
    cache
}

fn default_queue() -> QueueInfo {
    queue("default", 1)
}

#[test]
fn victims_younger_than_their_queues_minimum_runtime_are_not_taken_until_they_are_old_enough() {
    let mut q = default_queue();
    q.min_runtime = Some(10 * MIN);
    // Node n-00000 holds low-0 (started 0) and low-2 (started 4m): it frees at 14m, when
    // both are 10m old; n-00001 holds low-1 and low-3, both started at 6m: free at 16m.
    let cache = world(q, &[0, 6 * MIN, 4 * MIN, 6 * MIN], 0);
    let early = scheduler(Some(PREEMPT)).run_cycle(cache.snapshot(), 12 * MIN);
    assert!(early.evictions.is_empty(), "{:?}", early.evictions);
    let message = condition_message(&early, "default/high").unwrap();
    assert!(
        message.contains("3 pod(s) that could make room are within their queue's minimum runtime"),
        "{message}"
    );
    assert_eq!(
        early.wake_at,
        Some(14 * MIN),
        "the first protection ends at 14m"
    );
    let later = scheduler(Some(PREEMPT)).run_cycle(cache.snapshot(), 14 * MIN);
    let evicted: Vec<&str> = later.evictions.iter().map(|e| &*e.task).collect();
    assert_eq!(evicted.len(), 2, "{evicted:?}");
    assert!(
        evicted
            .iter()
            .all(|t| t.starts_with("default/low-0") || t.starts_with("default/low-2")),
        "{evicted:?}"
    );
}

#[test]
fn a_gang_within_its_queues_preemption_delay_evicts_nothing_until_it_ends() {
    let mut q = default_queue();
    q.preemption_delay = Some(2 * MIN);
    let cache = world(q, &[0, 0, 0, 0], 30_000);
    let early = scheduler(Some(PREEMPT)).run_cycle(cache.snapshot(), MIN);
    assert!(early.evictions.is_empty(), "{:?}", early.evictions);
    let message = condition_message(&early, "default/high").unwrap();
    assert!(
        message.contains(
            "evicts nothing before 1970-01-01T00:02:30Z (queue default's preemption delay)"
        ),
        "{message}"
    );
    assert_eq!(early.wake_at, Some(2 * MIN + 30_000));
    let later = scheduler(Some(PREEMPT)).run_cycle(cache.snapshot(), 2 * MIN + 30_000);
    assert_eq!(later.evictions.len(), 2, "{:?}", later.evictions);
}

#[test]
fn without_the_settings_preemption_is_unchanged() {
    let cache = world(default_queue(), &[0, 0, 0, 0], 0);
    let result = scheduler(Some(PREEMPT)).run_cycle(cache.snapshot(), MIN);
    assert_eq!(result.evictions.len(), 2, "{:?}", result.evictions);
    assert_eq!(result.wake_at, None);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Small worlds: running gangs with random starts, a random minimum runtime and a
    /// random "now": every victim has run at least its minimum, and when nothing could be
    /// evicted only because of it, the session asks for a cycle when the first protection
    /// ends.
    #[test]
    fn no_victim_is_younger_than_its_minimum_runtime(
        starts in proptest::collection::vec(0i64..20, 4),
        min in proptest::option::of(1i64..15),
        now in 0i64..30,
    ) {
        let starts: Vec<Timestamp> = starts.iter().map(|s| s * MIN).collect();
        let now = now * MIN + 20 * MIN;
        let mut q = default_queue();
        q.min_runtime = min.map(|m| m * MIN);
        let cache = world(q, &starts, 0);
        let result = scheduler(Some(PREEMPT)).run_cycle(cache.snapshot(), now);
        for e in &result.evictions {
            let i: usize = e.task.trim_start_matches("default/low-").split('-').next().unwrap().parse().unwrap();
            let age = now - starts[i];
            prop_assert!(min.is_none_or(|m| age >= m * MIN), "{} evicted at age {age}", e.task);
        }
        let old_enough = |i: usize| min.is_none_or(|m| now - starts[i] >= m * MIN);
        // A node frees when both of its pods may go; the preemptor needs a whole node.
        let a_node_free = (old_enough(0) && old_enough(2)) || (old_enough(1) && old_enough(3));
        prop_assert_eq!(!result.evictions.is_empty(), a_node_free);
        if !a_node_free {
            let first = (0..4).filter(|i| !old_enough(*i)).map(|i| starts[i] + min.unwrap() * MIN).min();
            prop_assert_eq!(result.wake_at, first);
        }
    }
}

/// S13 in the simulator: the urgent gang waits out its queue's preemption delay, then the
/// victims' minimum runtime, and preempts in the cycle the engine asked for; S6 (the same
/// cluster without the settings) preempts at once.
#[test]
fn s13_the_urgent_gang_preempts_only_once_the_victims_ran_their_minimum() {
    use rust_batch_engine::sim::{Scenario, Simulation};
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/scenarios");
    let run = |file: &str| {
        let scenario = Scenario::load(&dir.join(file)).unwrap();
        let mut sim = Simulation::new(scenario, file).unwrap();
        sim.run_until(5 * MIN, &mut |_| {});
        let message_at_5m = sim.job("urgent").unwrap().message.clone();
        (sim.run(&mut |_| {}), message_at_5m)
    };
    let (s13, waiting) = run("s13-protected-preemption.yaml");
    assert!(s13.invariants_hold(), "{:?}", s13.invariants);
    let urgent = s13
        .jobs
        .iter()
        .find(|j| j.name == "default/urgent")
        .unwrap();
    // Evicted at 10m (the low gangs started at 0s-2s), bound once the victims terminated.
    let started = urgent.started.unwrap();
    assert!(
        (10 * MIN + 30_000..11 * MIN).contains(&started),
        "{started}"
    );
    let waiting = waiting.unwrap();
    assert!(
        waiting.contains("within their queue's minimum runtime"),
        "{waiting}"
    );
    let (s6, _) = run("s6-priority-preemption.yaml");
    let urgent6 = s6.jobs.iter().find(|j| j.name == "default/urgent").unwrap();
    assert!(urgent6.started.unwrap() < 2 * MIN, "{urgent6:?}");
}
