//! Preemption that costs least (issue 40): among the victim sets that make room, the one
//! that loses the fewest GPU-hours of work done (then cpu, then memory); a gang with a hard
//! topology rule takes victims only inside the one domain it lands in; a PriorityClass's
//! minimum runtime and preemption delay win over its queue's. Properties over small
//! exhaustive worlds: never more GPU-hours lost than any other valid victim set, and no
//! victim younger than its minimum runtime (queue's or class's). S15 in the simulator.

use std::collections::BTreeMap;

use proptest::prelude::*;
use rust_batch_engine::cache::Cache;
use rust_batch_engine::model::{NodeSpec, PodGroupPhase, QueueInfo, Timestamp};
use rust_batch_engine::testkit::*;

const PREEMPT: &str = rust_batch_engine::conf_yaml!("allocate, preempt"; ["priority", "gang", "conformance"], ["predicates", "nodeorder"]);
const PREEMPT_TOPOLOGY: &str = rust_batch_engine::conf_yaml!("allocate, preempt"; ["priority", "gang", "conformance"], ["predicates", "nodeorder", "gpu-affinity"]);
const MIN: i64 = 60_000;
const HOUR: i64 = 3_600_000;
const RACK: &str = "example.com/rack";

/// A one-pod victim gang of priority 1 running on `node` since `started`.
fn victim(cache: &mut Cache, name: &str, node: &str, request: &[(&str, &str)], started: Timestamp) {
    Gang::new(name, 1)
        .priority(1)
        .created(started)
        .phase(PodGroupPhase::Running)
        .tasks("", 1, request)
        .running_on(&[node])
        .started(started)
        .apply(cache);
}

/// The urgent gang: `pods` pods of `request`, all needed, priority 100.
fn urgent(pods: usize, request: &[(&str, &str)]) -> Gang {
    Gang::new("urgent", pods as u32)
        .priority(100)
        .created(0)
        .phase(PodGroupPhase::Inqueue)
        .tasks("", pods, request)
}

fn evicted_gangs(result: &rust_batch_engine::framework::SessionResult) -> Vec<String> {
    evicted(result).into_keys().collect()
}

#[test]
fn the_victim_that_ran_least_goes() {
    let mut cache = cache_with_default_queue();
    add_nodes(&mut cache, "n", 3, &[("cpu", "8"), ("nvidia.com/gpu", "4")]);
    victim(&mut cache, "old", "n-00000", &[("nvidia.com/gpu", "4")], 0);
    victim(
        &mut cache,
        "young",
        "n-00001",
        &[("nvidia.com/gpu", "4")],
        9 * HOUR,
    );
    victim(
        &mut cache,
        "mid",
        "n-00002",
        &[("nvidia.com/gpu", "4")],
        5 * HOUR,
    );
    urgent(1, &[("nvidia.com/gpu", "4")]).apply(&mut cache);
    let result = scheduler(Some(PREEMPT)).run_cycle(cache.snapshot(), 10 * HOUR);
    assert_eq!(evicted_gangs(&result), ["default/young"]);
}

#[test]
fn gpu_hours_come_first_then_the_other_resources() {
    // A GPU pod that ran an hour against a CPU-only pod that ran ten: the urgent pod needs
    // CPUs only, either makes room; losing no GPU-hours wins over losing fewer CPU-hours.
    let mut cache = cache_with_default_queue();
    add_nodes(&mut cache, "n", 2, &[("cpu", "4"), ("nvidia.com/gpu", "4")]);
    victim(
        &mut cache,
        "gpu-job",
        "n-00000",
        &[("cpu", "4"), ("nvidia.com/gpu", "4")],
        9 * HOUR,
    );
    victim(&mut cache, "cpu-job", "n-00001", &[("cpu", "4")], 0);
    urgent(1, &[("cpu", "4")]).apply(&mut cache);
    let result = scheduler(Some(PREEMPT)).run_cycle(cache.snapshot(), 10 * HOUR);
    assert_eq!(evicted_gangs(&result), ["default/cpu-job"]);
    // Between two CPU-only pods, the fewer CPU-hours.
    let mut cache = cache_with_default_queue();
    add_nodes(&mut cache, "n", 2, &[("cpu", "4")]);
    victim(&mut cache, "long", "n-00000", &[("cpu", "4")], 0);
    victim(&mut cache, "short", "n-00001", &[("cpu", "4")], 8 * HOUR);
    urgent(1, &[("cpu", "4")]).apply(&mut cache);
    let result = scheduler(Some(PREEMPT)).run_cycle(cache.snapshot(), 10 * HOUR);
    assert_eq!(evicted_gangs(&result), ["default/short"]);
}

#[test]
fn two_young_pods_go_rather_than_one_old_one() {
    // Node n-00000: one 4-GPU pod that ran 10 h; n-00001: two 2-GPU pods that ran 1 h.
    // Evicting two pods loses 4 GPU-hours, one 40: the two go.
    let mut cache = cache_with_default_queue();
    add_nodes(&mut cache, "n", 2, &[("cpu", "8"), ("nvidia.com/gpu", "4")]);
    victim(&mut cache, "old", "n-00000", &[("nvidia.com/gpu", "4")], 0);
    victim(
        &mut cache,
        "young-a",
        "n-00001",
        &[("nvidia.com/gpu", "2")],
        9 * HOUR,
    );
    victim(
        &mut cache,
        "young-b",
        "n-00001",
        &[("nvidia.com/gpu", "2")],
        9 * HOUR,
    );
    urgent(1, &[("nvidia.com/gpu", "4")]).apply(&mut cache);
    let result = scheduler(Some(PREEMPT)).run_cycle(cache.snapshot(), 10 * HOUR);
    assert_eq!(
        evicted_gangs(&result),
        ["default/young-a", "default/young-b"]
    );
}

/// Racks r0 (n0, n1) and r1 (n2, n3) of 4-GPU nodes, each node held by a one-pod victim
/// started at `starts[i]`, with its class's minimum runtime `mins[i]`.
fn racks(starts: [Timestamp; 4], mins: [Option<i64>; 4]) -> Cache {
    let mut cache = cache_with_default_queue();
    for (i, start) in starts.iter().enumerate() {
        let name = format!("n{i}");
        cache.apply_node(NodeSpec {
            labels: labels(&[(RACK, if i < 2 { "r0" } else { "r1" })]),
            ..node(&name, &[("cpu", "8"), ("nvidia.com/gpu", "4")])
        });
        Gang::new(&format!("v{i}"), 1)
            .priority(1)
            .created(*start)
            .phase(PodGroupPhase::Running)
            .tasks("", 1, &[("nvidia.com/gpu", "4")])
            .running_on(&[name.as_str()])
            .started(*start)
            .min_runtime_opt(mins[i])
            .apply(&mut cache);
    }
    cache
}

#[test]
fn a_gang_with_a_hard_topology_rule_evicts_only_inside_the_one_rack_it_lands_in() {
    // The two youngest victims are in different racks (v0 in r0, v2 in r1): a gang free to
    // span racks takes them; one that must stay inside a rack takes the cheaper rack whole
    // (r0: 1 h + 10 h, r1: 2 h + 10 h) and nothing in the other.
    let starts = [9 * HOUR, 0, 8 * HOUR, 0];
    let mut free = racks(starts, [None; 4]);
    urgent(2, &[("nvidia.com/gpu", "4")]).apply(&mut free);
    let result = scheduler(Some(PREEMPT_TOPOLOGY)).run_cycle(free.snapshot(), 10 * HOUR);
    assert_eq!(evicted_gangs(&result), ["default/v0", "default/v2"]);

    let mut hard = racks(starts, [None; 4]);
    urgent(2, &[("nvidia.com/gpu", "4")])
        .annotate("kueue.x-k8s.io/podset-required-topology", RACK)
        .apply(&mut hard);
    let result = scheduler(Some(PREEMPT_TOPOLOGY)).run_cycle(hard.snapshot(), 10 * HOUR);
    assert_eq!(evicted_gangs(&result), ["default/v0", "default/v1"]);

    // When no rack can be freed whole, nothing is evicted anywhere, and the gang says so.
    let protect = Some(11 * HOUR);
    let mut protected = racks(starts, [None, protect, None, protect]);
    urgent(2, &[("nvidia.com/gpu", "4")])
        .annotate("kueue.x-k8s.io/podset-required-topology", RACK)
        .apply(&mut protected);
    let result = scheduler(Some(PREEMPT_TOPOLOGY)).run_cycle(protected.snapshot(), 10 * HOUR);
    assert!(result.evictions.is_empty(), "{:?}", result.evictions);
    let message = condition_message(&result, "default/urgent").unwrap();
    assert!(
        message.contains("inside any one domain of its"),
        "{message}"
    );
}

fn with_queue_protection(min: Option<i64>, delay: Option<i64>) -> Cache {
    let mut cache = cache_with_default_queue();
    let mut q = QueueInfo::new("default", 1);
    q.min_runtime = min;
    q.preemption_delay = delay;
    cache.apply_queue(q);
    add_nodes(&mut cache, "n", 1, &[("cpu", "2")]);
    cache
}

#[test]
fn a_priority_classs_minimum_runtime_wins_over_its_queues() {
    // The queue protects for 10 m; the victim's class for 1 m: at 2 m it may go.
    let mut cache = with_queue_protection(Some(10 * MIN), None);
    Gang::new("low", 1)
        .priority(1)
        .phase(PodGroupPhase::Running)
        .tasks("", 1, &[("cpu", "2")])
        .running_on(&["n-00000"])
        .started(0)
        .min_runtime_opt(Some(MIN))
        .apply(&mut cache);
    urgent(1, &[("cpu", "2")]).apply(&mut cache);
    let result = scheduler(Some(PREEMPT)).run_cycle(cache.snapshot(), 2 * MIN);
    assert_eq!(evicted_gangs(&result), ["default/low"]);
    // The other way round: no queue setting, the class protects for 1 h.
    let mut cache = with_queue_protection(None, None);
    Gang::new("low", 1)
        .priority(1)
        .phase(PodGroupPhase::Running)
        .tasks("", 1, &[("cpu", "2")])
        .running_on(&["n-00000"])
        .started(0)
        .min_runtime_opt(Some(HOUR))
        .apply(&mut cache);
    urgent(1, &[("cpu", "2")]).apply(&mut cache);
    let result = scheduler(Some(PREEMPT)).run_cycle(cache.snapshot(), 2 * MIN);
    assert!(result.evictions.is_empty());
    let message = condition_message(&result, "default/urgent").unwrap();
    assert!(
        message.contains("1 pod(s) that could make room are within their minimum runtime (their queue's or PriorityClass's)"),
        "{message}"
    );
    assert_eq!(result.wake_at, Some(HOUR));
}

#[test]
fn a_priority_classs_preemption_delay_wins_over_its_queues() {
    let mut cache = with_queue_protection(None, Some(10 * MIN));
    victim(&mut cache, "low", "n-00000", &[("cpu", "2")], 0);
    let mut gang = urgent(1, &[("cpu", "2")]);
    gang.spec.policy.preemption_delay = Some(MIN);
    gang.apply(&mut cache);
    let result = scheduler(Some(PREEMPT)).run_cycle(cache.snapshot(), 2 * MIN);
    assert_eq!(evicted_gangs(&result), ["default/low"]);
    // A class delay longer than the queue's holds it back, and says whose it is.
    let mut cache = with_queue_protection(None, Some(MIN));
    victim(&mut cache, "low", "n-00000", &[("cpu", "2")], 0);
    let mut gang = urgent(1, &[("cpu", "2")]);
    gang.spec.policy.preemption_delay = Some(10 * MIN);
    gang.apply(&mut cache);
    let result = scheduler(Some(PREEMPT)).run_cycle(cache.snapshot(), 2 * MIN);
    assert!(result.evictions.is_empty());
    let message = condition_message(&result, "default/urgent").unwrap();
    assert!(
        message.contains(
            "evicts nothing before 1970-01-01T00:10:00Z (its PriorityClass's preemption delay)"
        ),
        "{message}"
    );
}

/// A small world: two nodes of 4 GPUs; victim gangs (pods, minMember, GPUs per pod, start
/// in minutes), each pod on the first node with room from `first`; a one-pod preemptor of
/// `want` GPUs at 600 minutes.
#[derive(Clone, Debug)]
struct Small {
    gangs: Vec<(usize, usize, i64, i64, usize)>,
    want: i64,
}

fn small() -> impl Strategy<Value = Small> {
    (
        prop::collection::vec(
            (1usize..=2, 0usize..=2, 1i64..=2, 0i64..600, 0usize..2),
            1..=4,
        ),
        1i64..=4,
    )
        .prop_map(|(gangs, want)| Small { gangs, want })
}

/// A pod as the test's own model places it: (gang, node, GPUs, start ms).
type PodAt = (usize, usize, i64, i64);

fn build_small(w: &Small) -> (Cache, Vec<PodAt>, Vec<(usize, usize)>) {
    let mut cache = cache_with_default_queue();
    add_nodes(
        &mut cache,
        "n",
        2,
        &[("cpu", "16"), ("nvidia.com/gpu", "4")],
    );
    let mut free = [4i64, 4];
    let mut pods = Vec::new();
    let mut gangs = Vec::new();
    for (g, &(count, min, gpu, start, first)) in w.gangs.iter().enumerate() {
        let mut nodes = Vec::new();
        for _ in 0..count {
            let Some(n) = [first, 1 - first].into_iter().find(|n| free[*n] >= gpu) else {
                continue;
            };
            free[n] -= gpu;
            nodes.push(n);
        }
        if nodes.is_empty() {
            continue;
        }
        let min = min.clamp(1, nodes.len());
        let names: Vec<String> = nodes.iter().map(|n| format!("n-{n:05}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        Gang::new(&format!("g{g}"), min as u32)
            .priority(1)
            .created(start * MIN)
            .phase(PodGroupPhase::Running)
            .tasks(
                "",
                nodes.len(),
                &[("nvidia.com/gpu", gpu.to_string().as_str())],
            )
            .running_on(&names)
            .started(start * MIN)
            .apply(&mut cache);
        for &n in &nodes {
            pods.push((g, n, gpu, start * MIN));
        }
        gangs.push((g, min));
    }
    urgent(1, &[("nvidia.com/gpu", w.want.to_string().as_str())]).apply(&mut cache);
    (cache, pods, gangs)
}

/// The fewest GPU-milliseconds any valid victim set loses (every gang keeps its minMember
/// or goes whole, and the preemptor then fits on a node), by enumerating every set of pods.
fn least_gpu_loss(pods: &[PodAt], gangs: &[(usize, usize)], want: i64, now: i64) -> Option<i64> {
    let mut free = [4i64, 4];
    for &(_, n, gpu, _) in pods {
        free[n] -= gpu;
    }
    let mut best: Option<i64> = None;
    for mask in 0u32..(1 << pods.len()) {
        let chosen = |i: usize| mask & (1 << i) != 0;
        let valid = gangs.iter().all(|&(g, min)| {
            let placed = pods.iter().filter(|p| p.0 == g).count();
            let gone = (0..pods.len())
                .filter(|&i| chosen(i) && pods[i].0 == g)
                .count();
            gone == 0 || gone == placed || placed - gone >= min
        });
        if !valid {
            continue;
        }
        let fits = (0..2).any(|n| {
            let freed: i64 = (0..pods.len())
                .filter(|&i| chosen(i) && pods[i].1 == n)
                .map(|i| pods[i].2)
                .sum();
            free[n] + freed >= want
        });
        if !fits {
            continue;
        }
        let lost: i64 = (0..pods.len())
            .filter(|&i| chosen(i))
            .map(|i| (now - pods[i].3) * pods[i].2)
            .sum();
        best = Some(best.map_or(lost, |b| b.min(lost)));
    }
    best
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Never more GPU-hours lost than any other valid victim set: the engine's victims lose
    /// exactly the least any valid set loses (in GPU-milliseconds), and it evicts nothing
    /// when the preemptor fits without or no valid set makes room.
    #[test]
    fn preemption_loses_no_more_gpu_hours_than_any_valid_victim_set(w in small()) {
        let now = 600 * MIN;
        let (cache, pods, gangs) = build_small(&w);
        let result = scheduler(Some(PREEMPT)).run_cycle(cache.snapshot(), now);
        let least = least_gpu_loss(&pods, &gangs, w.want, now);
        let starts: BTreeMap<String, (i64, i64)> = w
            .gangs
            .iter()
            .enumerate()
            .map(|(g, &(_, _, gpu, start, _))| (format!("default/g{g}"), (gpu, start * MIN)))
            .collect();
        let lost: i64 = result
            .evictions
            .iter()
            .map(|e| {
                let (gpu, start) = starts[&e.job.to_string()];
                (now - start) * gpu
            })
            .sum();
        match least {
            // Room without evicting anything: allocate places it, nothing goes.
            Some(0) | None => prop_assert!(result.evictions.is_empty(), "{:?}", result.evictions),
            Some(least) => {
                prop_assert!(!result.evictions.is_empty(), "a valid set losing {} exists", least);
                prop_assert_eq!(lost, least, "{:?}", result.evictions);
            }
        }
    }

    /// No victim is younger than its minimum runtime, whether its queue's or its
    /// PriorityClass's (which wins).
    #[test]
    fn no_victim_is_younger_than_its_minimum_runtime_queues_or_classs(
        starts in proptest::collection::vec(0i64..20, 4),
        classes in proptest::collection::vec(proptest::option::of(1i64..15), 4),
        queue_min in proptest::option::of(1i64..15),
        now in 0i64..30,
    ) {
        let now = now * MIN + 20 * MIN;
        let mut cache = with_queue_protection(queue_min.map(|m| m * MIN), None);
        add_nodes(&mut cache, "m", 1, &[("cpu", "2")]);
        for (i, start) in starts.iter().enumerate() {
            let node = if i % 2 == 0 { "n-00000" } else { "m-00000" };
            Gang::new(&format!("low-{i}"), 1)
                .priority(1)
                .phase(PodGroupPhase::Running)
                .tasks("", 1, &[("cpu", "1")])
                .running_on(&[node])
                .started(start * MIN)
                .min_runtime_opt(classes[i].map(|m| m * MIN))
                .apply(&mut cache);
        }
        urgent(1, &[("cpu", "2")]).apply(&mut cache);
        let result = scheduler(Some(PREEMPT)).run_cycle(cache.snapshot(), now);
        let min_of = |i: usize| classes[i].or(queue_min);
        for e in &result.evictions {
            let i: usize = e.job.trim_start_matches("default/low-").parse().unwrap();
            let age = now - starts[i] * MIN;
            prop_assert!(min_of(i).is_none_or(|m| age >= m * MIN), "{} evicted at age {}", e.task, age);
        }
        let old_enough = |i: usize| min_of(i).is_none_or(|m| now - starts[i] * MIN >= m * MIN);
        let a_node_frees = (old_enough(0) && old_enough(2)) || (old_enough(1) && old_enough(3));
        prop_assert_eq!(!result.evictions.is_empty(), a_node_frees);
    }
}

/// S15 in the simulator: the urgent gang, which must sit inside one rack, evicts rack r1's
/// two jobs (96 GPU-hours of work done; rack r2's would lose 160, rack r0's young job is
/// protected by its class's minimum runtime) and nothing else.
#[test]
fn s15_the_urgent_gang_frees_the_cheapest_rack_and_nothing_else() {
    use rust_batch_engine::sim::{Scenario, Simulation};
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/scenarios");
    let file = "s15-least-work-preemption.yaml";
    let scenario = Scenario::load(&dir.join(file)).unwrap();
    let mut sim = Simulation::new(scenario, file).unwrap();
    let report = sim.run(&mut |_| {});
    assert!(report.invariants_hold(), "{:?}", report.invariants);
    assert_eq!(report.summary.evictions, 2, "{:?}", report.summary);
    let job = |name: &str| {
        report
            .jobs
            .iter()
            .find(|j| j.name == format!("default/{name}"))
            .unwrap()
    };
    let urgent = job("urgent");
    let started = urgent.started.expect("the urgent gang starts");
    assert!(
        (10 * HOUR..10 * HOUR + 2 * MIN).contains(&started),
        "{started}"
    );
    let mut nodes = urgent.nodes.clone();
    nodes.sort();
    assert_eq!(nodes, ["r1-1", "r1-2"]);
    for untouched in ["r0-old", "r0-young", "r2-old-1", "r2-old-2"] {
        let j = job(untouched);
        assert_eq!(
            j.started,
            Some(if untouched == "r0-young" { 9 * HOUR } else { 0 }),
            "{untouched}"
        );
        let pods = sim.job_pods(untouched);
        assert!(
            pods.iter()
                .all(|p| p.status == rust_batch_engine::model::TaskStatus::Running),
            "{untouched} still runs"
        );
    }
}
