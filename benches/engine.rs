//! Engine benchmarks at the size the issue sets: 5,000 nodes and 50,000 pending pods in
//! 6,250 gangs of 8.
//!
//! - `allocate_5000_nodes_50000_pods`: one full cycle (enqueue, allocate, backfill) with the
//!   default configuration, from a fresh snapshot each time (target < 500 ms on one core);
//! - `open_session_nothing_changed`: the same cluster after everything that fits is bound,
//!   opening and closing a session with nothing to do (target < 5 ms);
//! - `snapshot`: taking a snapshot of the cache (O(1)).
//! - `cycle_nothing_changed`: once the gangs that did not fit are withdrawn (a settled
//!   cluster: 5,000 nodes running 43,000 pods), a whole cycle (every action) with nothing
//!   to do; `cycle_one_new_gang`: the cycle that binds one gang of 8 a user submits there.
//!   What a change waits for on a quiet cluster (issue 17: from the change that completes
//!   a gang to its binds sent ≤ 5 ms of scheduler time, the cycle a fraction of it).
//! - `preempt_reclaim_5000_nodes_50000_running`: one cycle (enqueue, allocate, preempt,
//!   reclaim with priority, gang, conformance / drf, predicates, proportion, nodeorder) over
//!   5,000 full nodes running 50,000 pods in 5,000 gangs, with 5,000 pending gangs across 20
//!   queues: a tenth of them outrank running gangs of their queue (preempt), and half of the
//!   queues are below their deserved share (reclaim). Target < 1 s on one core.
//!
//! - `allocate_5000_nodes_50000_pods_3_topology_levels`: the allocate cycle on the same
//!   cluster with every node labelled with an NVLink clique, a rack and a zone, two GPU
//!   models, and gpu-affinity on with those three levels (target < 500 ms on one core);
//! - `allocate_5000_nodes_10pct_gangs_need_search`: the same with 625 more gangs (a tenth)
//!   that task-by-task placement strands, so the whole-gang placement search must place
//!   them (target < 1 s on one core).
//! - `allocate_5000_nodes_50000_pods_pod_rules`: the plain cycle with every node labelled
//!   with its hostname and one of four zones, a fifth of the gangs carrying hostname
//!   anti-affinity within the gang (one worker per node) and a tenth a zone spread
//!   constraint (maxSkew 1, DoNotSchedule) (target < 1 s on one core).
//!
//! - `allocate_5000_nodes_50000_pods_dra`: the plain cluster's 5,000 nodes each publishing 8
//!   GPUs as DRA devices (two NVLink cliques of 4), 50,000 pending pods in gangs of 8, half
//!   of the gangs with a ResourceClaim per pod (from a template): three in four claim 1 GPU
//!   of model h100 (a class selector and a request selector), one in four 2 GPUs in one
//!   clique (matchAttribute). One allocate cycle (target < 1 s on one core).
//!
//! - `allocate_10000_nodes_100000_pods` and `open_session_nothing_changed_10000_nodes`:
//!   issue 17's size, the plain cluster twice over (12,500 gangs of 8): the allocate cycle
//!   (target < 1 s on one core) and a session with nothing changed (target < 5 ms).
//!
//! - `cycle_waiting_gangs` and `cycle_waiting_gangs_predict_start`: the plain cluster once
//!   everything that fits runs, every pod with a runtime estimate, 250 gangs waiting: a
//!   cycle without and with predicted start times (`--predict-start`).
//!
//! The cluster is built once, outside the timed part. Every cycle prints a decision digest
//! (binds and gang updates) before it is timed. `ENGINE_BENCH_ONLY=pod_rules` builds only
//! the clusters of benches whose name contains `pod_rules`; with criterion's `--list`, only
//! their untimed cycle runs (one cycle to profile:
//! `ENGINE_BENCH_ONLY=pod_rules valgrind --tool=callgrind target/release/deps/engine-… --bench --list pod_rules`).

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, SamplingMode};
use rust_batch::cache::Cache;
use rust_batch::model::pod_rules::{PodRules, HOSTNAME_LABEL};
use rust_batch::model::{NodeSpec, Placement, Taint, TaintEffect, Toleration};

const ZONE: &str = "topology.kubernetes.io/zone";
use rust_batch::testkit::{self, Gang};

const CPU_NODES: usize = 4_000;
const GPU_NODES: usize = 1_000;
const GANGS: usize = 6_250;
const GANG_SIZE: usize = 8;
/// One gang in five asks for GPUs: 1,250 GPU gangs of 8 one-GPU pods want 10,000 GPUs of
/// the 8,000 there are, so 1,000 of them fit and 250 stay pending (and must say why).
const GPU_EVERY: usize = 5;
const QUEUES: usize = 4;

fn cluster() -> Cache {
    cluster_with(false, 0, false)
}

/// Racks of this many nodes, in zones of this many racks; GPU nodes in NVLink cliques of 4,
/// two GPU models by rack.
const RACK_NODES: usize = 40;
const ZONE_RACKS: usize = 32;
const CLIQUE_NODES: usize = 4;
/// The default configuration with the benchmark's three levels.
fn topology_conf() -> String {
    rust_batch::conf::DEFAULT_CONF.replace(
        rust_batch::conf::DEFAULT_TOPOLOGY_LEVELS,
        "nvidia.com/gpu.clique, example.com/rack, topology.kubernetes.io/zone",
    )
}

/// The benchmark cluster; with `topology`, every node labelled with three topology levels
/// (and GPU nodes with their model); with `stranded` pairs, that many more gangs that
/// task-by-task placement strands and the placement search places: the TFJob (a
/// 2-cpu PS and a 4-cpu/2-GPU worker) pinned to its own pair of nodes (4 cpu, and 5 cpu
/// with 2 GPUs), taken from the plain node pools so the cluster keeps 5,000 nodes.
fn cluster_with(topology: bool, stranded: usize, pod_rules: bool) -> Cache {
    cluster_at(1, topology, stranded, pod_rules)
}

/// The benchmark cluster `scale` times over: `scale` × 5,000 nodes, `scale` × 50,000
/// pending pods in gangs of 8 (the same shapes, queues and priorities).
fn cluster_at(scale: usize, topology: bool, stranded: usize, pod_rules: bool) -> Cache {
    let (cpu_nodes, gpu_nodes, gangs) = (CPU_NODES * scale, GPU_NODES * scale, GANGS * scale);
    let mut cache = testkit::cache_with_default_queue();
    for q in 0..QUEUES {
        cache.apply_queue(testkit::queue(&format!("team-{q}"), 1));
    }
    let cpu_shape = testkit::node("", &[("cpu", "64"), ("memory", "256Gi"), ("pods", "110")]);
    let topology_labels = |i: usize, gpu: Option<usize>| {
        let rack = i / RACK_NODES;
        let mut l = vec![
            ("example.com/rack".to_string(), format!("rack-{rack}")),
            (
                "topology.kubernetes.io/zone".to_string(),
                format!("zone-{}", rack / ZONE_RACKS),
            ),
        ];
        if let Some(g) = gpu {
            l.push((
                "nvidia.com/gpu.clique".to_string(),
                format!("clique-{}", g / CLIQUE_NODES),
            ));
            l.push((
                "nvidia.com/gpu.product".to_string(),
                ["A100", "H100"][rack % 2].to_string(),
            ));
        }
        l.into_iter()
            .collect::<std::collections::BTreeMap<String, String>>()
    };
    // As kubelets label nodes, and four zones.
    let host_labels = |name: &str, i: usize| -> std::collections::BTreeMap<String, String> {
        if !pod_rules {
            return Default::default();
        }
        [
            (HOSTNAME_LABEL.to_string(), name.to_string()),
            (ZONE.to_string(), format!("zone-{}", i % 4)),
        ]
        .into_iter()
        .collect()
    };
    for i in 0..cpu_nodes - stranded {
        let name = format!("cpu-{i:05}");
        let mut labels = host_labels(&name, i);
        if topology {
            labels.extend(topology_labels(i, None));
        }
        cache.apply_node(NodeSpec {
            name,
            labels,
            ..cpu_shape.clone()
        });
    }
    let gpu_taint = Taint {
        key: "nvidia.com/gpu".into(),
        value: "present".into(),
        effect: TaintEffect::NoSchedule,
    };
    let gpu_shape = testkit::node(
        "",
        &[
            ("cpu", "64"),
            ("memory", "512Gi"),
            ("nvidia.com/gpu", "8"),
            ("pods", "110"),
        ],
    );
    for i in 0..gpu_nodes - stranded {
        let name = format!("gpu-{i:05}");
        let mut labels = host_labels(&name, i);
        if topology {
            labels.extend(topology_labels(cpu_nodes + i, Some(i)));
        }
        cache.apply_node(NodeSpec {
            name,
            taints: vec![gpu_taint.clone()],
            labels,
            ..gpu_shape.clone()
        });
    }
    // The pairs are tainted so that only their own gang goes there.
    let pair_taint = Taint {
        key: "example.com/pair".into(),
        value: "reserved".into(),
        effect: TaintEffect::NoSchedule,
    };
    let tolerate_pair = Toleration {
        key: "example.com/pair".into(),
        operator: rust_batch::model::placement::TolerationOperator::Exists,
        ..Default::default()
    };
    for p in 0..stranded {
        let pool = [("pool".to_string(), format!("pair-{p}"))];
        cache.apply_node(NodeSpec {
            name: format!("pair-{p:05}-cpu"),
            labels: pool.clone().into_iter().collect(),
            taints: vec![pair_taint.clone()],
            ..testkit::node("", &[("cpu", "4"), ("memory", "16Gi")])
        });
        cache.apply_node(NodeSpec {
            name: format!("pair-{p:05}-gpu"),
            labels: pool.clone().into_iter().collect(),
            taints: vec![pair_taint.clone()],
            ..testkit::node(
                "",
                &[("cpu", "5"), ("memory", "16Gi"), ("nvidia.com/gpu", "2")],
            )
        });
        let mut gang = Gang::new(&format!("tfjob-{p:05}"), 2)
            .created(-1)
            .tasks("ps", 1, &[("cpu", "2")])
            .tasks("worker", 1, &[("cpu", "4"), ("nvidia.com/gpu", "2")]);
        for t in &mut gang.tasks {
            let mut placement = (*t.placement).clone();
            placement.node_selector = pool.clone().into_iter().collect();
            placement.tolerations = vec![tolerate_pair.clone()];
            t.set_placement(placement);
        }
        gang.apply(&mut cache);
    }
    let tolerate_gpu = Placement {
        tolerations: vec![Toleration {
            key: "nvidia.com/gpu".into(),
            operator: rust_batch::model::placement::TolerationOperator::Exists,
            ..Default::default()
        }],
        ..Default::default()
    };
    for g in 0..gangs {
        let gang = Gang::new(&format!("job-{g:05}"), GANG_SIZE as u32)
            .queue(&format!("team-{}", g % QUEUES))
            .priority((g % 3) as i32)
            .created(g as i64);
        let gang = if g % GPU_EVERY == 0 {
            gang.placed_tasks(
                "worker",
                GANG_SIZE,
                &[("cpu", "4"), ("memory", "32Gi"), ("nvidia.com/gpu", "1")],
                tolerate_gpu.clone(),
            )
        } else {
            gang.tasks("ps", 1, &[("cpu", "2"), ("memory", "4Gi")])
                .tasks("worker", GANG_SIZE - 1, &[("cpu", "4"), ("memory", "8Gi")])
        };
        let mut gang = gang;
        let rule = match g % 10 {
            1 | 2 if pod_rules => Some(format!(
                "podAntiAffinity: {{requiredDuringSchedulingIgnoredDuringExecution: \
                 [{{topologyKey: {HOSTNAME_LABEL}, labelSelector: {{matchLabels: {{job: job-{g}}}}}}}]}}"
            )),
            3 if pod_rules => Some(format!(
                "topologySpreadConstraints: [{{maxSkew: 1, topologyKey: {ZONE}, \
                 labelSelector: {{matchLabels: {{job: job-{g}}}}}}}]"
            )),
            _ => None,
        };
        if let Some(rule) = rule {
            let rules: PodRules = rust_batch::yaml::from_str(&rule).expect("rule YAML");
            let labels = std::sync::Arc::new(testkit::labels(&[("job", &format!("job-{g}"))]));
            for t in &mut gang.tasks {
                let mut placement = (*t.placement).clone();
                placement.pod_rules = Some(Box::new(rules.clone()));
                t.set_placement(placement);
                t.labels = labels.clone();
            }
        }
        gang.apply(&mut cache);
    }
    cache
}

fn benches(c: &mut Criterion) {
    if ![
        "allocate_5000_nodes_50000_pods",
        "open_session_nothing_changed",
        "snapshot",
        "cycle_nothing_changed",
        "cycle_one_new_gang",
    ]
    .iter()
    .any(|name| selected(name))
    {
        return;
    }
    let start = Instant::now();
    let mut cache = cluster();
    eprintln!(
        "built {CPU_NODES} + {GPU_NODES} nodes, {GANGS} gangs of {GANG_SIZE} in {:?}",
        start.elapsed()
    );
    let scheduler = testkit::scheduler(None);

    // One untimed cycle: what the cycle decides, for the record.
    let start = Instant::now();
    let result = scheduler.run_cycle(cache.snapshot(), 0);
    let gangs_bound = testkit::binds_by_job(&result).len();
    eprintln!(
        "one cycle: {} pods bound in {gangs_bound} gangs, {} gang updates, in {:?}",
        result.binds.len(),
        result.job_updates.len(),
        start.elapsed()
    );
    eprintln!("decision digest {:x}", decision_digest(&result));
    assert!(
        gangs_bound >= GANGS * 9 / 10,
        "most gangs should fit: {gangs_bound}"
    );

    let mut group = cycle_group(c);
    time_cycles(
        &mut group,
        "allocate_5000_nodes_50000_pods",
        &scheduler,
        &cache,
        0,
    );

    // Everything that fits is bound and running; nothing changes from here on.
    testkit::apply_result(&mut cache, &result);
    let idle = scheduler.open_close(cache.snapshot(), 1);
    print_decided("open_session_nothing_changed", &idle, None);
    group
        .sampling_mode(SamplingMode::Auto)
        .measurement_time(Duration::from_secs(3));
    group.bench_function("open_session_nothing_changed", |b| {
        b.iter_batched(
            || cache.snapshot(),
            |snapshot| scheduler.open_close(snapshot, 1),
            BatchSize::PerIteration,
        )
    });
    group.bench_function("snapshot", |b| b.iter(|| black_box(cache.snapshot())));

    // The cluster settles: the gangs that did not fit are withdrawn (pods, then gang), as
    // in the peers benchmark's idle phase. A cycle there costs what every change waits for.
    let bound = testkit::binds_by_job(&result);
    let unplaced: Vec<(String, Vec<std::sync::Arc<str>>)> = cache
        .state()
        .jobs()
        .filter(|(_, j)| !bound.contains_key(&*j.uid))
        .map(|(_, j)| {
            (
                j.uid.to_string(),
                j.tasks().iter().map(|t| t.uid.clone()).collect(),
            )
        })
        .collect();
    for (job, pods) in unplaced {
        for pod in pods {
            cache.delete_pod(&pod);
        }
        cache.delete_job(&job);
    }
    let idle = scheduler.run_cycle(cache.snapshot(), 2);
    assert!(idle.binds.is_empty(), "a settled cluster binds nothing");
    time_cycles(&mut group, "cycle_nothing_changed", &scheduler, &cache, 2);
    // A user submits one gang of 8 to the settled cluster: the cycle that binds it.
    Gang::new("submitted", GANG_SIZE as u32)
        .queue("team-0")
        .created(GANGS as i64)
        .tasks("worker", GANG_SIZE, &[("cpu", "1"), ("memory", "1Gi")])
        .apply(&mut cache);
    let one = scheduler.run_cycle(cache.snapshot(), 2);
    print_decided("cycle_one_new_gang", &one, None);
    assert_eq!(one.binds.len(), GANG_SIZE, "the submitted gang binds whole");
    time_cycles(&mut group, "cycle_one_new_gang", &scheduler, &cache, 2);
    group.finish();
}

/// Prints what an untimed cycle decided (and how long it took, if timed), before criterion
/// times it.
fn print_decided(
    name: &str,
    result: &rust_batch::framework::SessionResult,
    took: Option<Duration>,
) {
    let took = took.map(|t| format!(", in {t:?}")).unwrap_or_default();
    eprintln!(
        "{name}: {} binds, {} gang updates{took}, decision digest {:x}",
        result.binds.len(),
        result.job_updates.len(),
        decision_digest(result)
    );
}

/// Changes when the decisions change (binds, gang updates and their messages): handy when
/// optimizing what must not.
fn decision_digest(result: &rust_batch::framework::SessionResult) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    for b in &result.binds {
        (&*b.task, &*b.node).hash(&mut h);
    }
    format!("{:?}", result.job_updates).hash(&mut h);
    h.finish()
}

/// Changes when the evictions change (which pods, for whom, why): the preempt cycle's
/// decisions are mostly evictions, which `decision_digest` leaves out.
fn eviction_digest(result: &rust_batch::framework::SessionResult) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    for e in &result.evictions {
        (
            &*e.task,
            e.node.as_deref(),
            e.preemptor.as_deref(),
            &e.reason,
        )
            .hash(&mut h);
    }
    h.finish()
}

/// Whether the benches named `name` run: `ENGINE_BENCH_ONLY=substring` skips building the
/// clusters of the others (criterion's own filter only skips their timing), so that one
/// cycle can be profiled alone, e.g. with `--list`, which runs each untimed cycle only.
fn selected(name: &str) -> bool {
    std::env::var("ENGINE_BENCH_ONLY").map_or(true, |only| name.contains(&only))
}

/// Times `scheduler`'s whole cycle on `cache` as it stands (each from a fresh snapshot).
fn time_cycles(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    scheduler: &rust_batch::framework::Scheduler,
    cache: &Cache,
    now: i64,
) {
    group.bench_function(name, |b| {
        b.iter_batched(
            || cache.snapshot(),
            |snapshot| scheduler.run_cycle(snapshot, now),
            BatchSize::PerIteration,
        )
    });
}

/// The group whole cycles are timed in: flat sampling, ten cycles (not 1 + 2 + … + 10).
fn cycle_group(
    c: &mut Criterion,
) -> criterion::BenchmarkGroup<'_, criterion::measurement::WallTime> {
    let mut group = c.benchmark_group("engine");
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5));
    group
}

/// One untimed cycle, described; then the timed cycles.
fn bench_cycle(c: &mut Criterion, name: &str, cache: &Cache, conf: &str) {
    if !selected(name) {
        return;
    }
    let scheduler = testkit::scheduler(Some(conf));
    let start = Instant::now();
    let result = scheduler.run_cycle(cache.snapshot(), 0);
    eprintln!(
        "{name}: {} pods bound in {} gangs, placement search {:?}, in {:?}, decision digest {:x}",
        result.binds.len(),
        testkit::binds_by_job(&result).len(),
        result.placement_search,
        start.elapsed(),
        decision_digest(&result)
    );
    let mut group = cycle_group(c);
    time_cycles(&mut group, name, &scheduler, cache, 0);
    group.finish();
}

/// Issue 13's figures beside the plain cycle: the same cluster with three topology levels
/// and gpu-affinity on (target < 500 ms), and with a tenth of its gangs stranded by
/// task-by-task placement so that the placement search must place them (target < 1 s).
fn topology_benches(c: &mut Criterion) {
    let name = "allocate_5000_nodes_50000_pods_3_topology_levels";
    if selected(name) {
        bench_cycle(c, name, &cluster_with(true, 0, false), &topology_conf());
    }
    let name = "allocate_5000_nodes_10pct_gangs_need_search";
    if selected(name) {
        let stranded = cluster_with(false, GANGS / 10, false);
        bench_cycle(c, name, &stranded, &topology_conf());
    }
    let name = "allocate_5000_nodes_50000_pods_pod_rules";
    if selected(name) {
        let ruled = cluster_with(false, 0, true);
        bench_cycle(c, name, &ruled, rust_batch::conf::DEFAULT_CONF);
    }
}

const PREEMPT_NODES: usize = 5_000;
const RUNNING_GANGS: usize = 5_000;
const RUNNING_GANG_SIZE: usize = 10;
const PENDING_GANGS: usize = 5_000;
const PREEMPT_QUEUES: usize = 20;

const PREEMPT_CONF: &str = "actions: \"enqueue, allocate, preempt, reclaim\"
tiers:
- plugins:
  - name: priority
  - name: gang
  - name: conformance
- plugins:
  - name: drf
  - name: predicates
  - name: proportion
  - name: nodeorder
";

/// Every node (32 CPUs) runs ten 3-CPU pods of ten different gangs, so no pending 3-CPU pod
/// fits without evictions. Queues 0–9 run two thirds of the gangs (above their deserved
/// share), queues 10–19 the rest; every queue has 250 pending gangs of four.
fn busy_cluster() -> Cache {
    let mut cache = testkit::cache_with_default_queue();
    for q in 0..PREEMPT_QUEUES {
        cache.apply_queue(testkit::queue(&format!("q-{q:02}"), 1));
    }
    testkit::add_nodes(
        &mut cache,
        "n",
        PREEMPT_NODES,
        &[("cpu", "32"), ("memory", "128Gi"), ("pods", "110")],
    );
    let stride = PREEMPT_NODES / RUNNING_GANG_SIZE;
    for g in 0..RUNNING_GANGS {
        let queue = if g % 3 == 0 { 10 + g % 10 } else { g % 10 };
        let nodes: Vec<String> = (0..RUNNING_GANG_SIZE)
            .map(|k| format!("n-{:05}", (g + k * stride) % PREEMPT_NODES))
            .collect();
        let nodes: Vec<&str> = nodes.iter().map(String::as_str).collect();
        // Half the gangs have a surplus of four pods above their minimum.
        let min = if g % 2 == 0 { 10 } else { 6 };
        Gang::new(&format!("run-{g:05}"), min)
            .queue(&format!("q-{queue:02}"))
            .priority((g % 4) as i32)
            .created(g as i64)
            .phase(rust_batch::model::PodGroupPhase::Running)
            .tasks("", RUNNING_GANG_SIZE, &[("cpu", "3"), ("memory", "8Gi")])
            .running_on(&nodes)
            .apply(&mut cache);
    }
    for p in 0..PENDING_GANGS {
        let priority = if p % 10 == 0 { 10 } else { 0 };
        Gang::new(&format!("wait-{p:05}"), 4)
            .queue(&format!("q-{:02}", p % PREEMPT_QUEUES))
            .priority(priority)
            .created((RUNNING_GANGS + p) as i64)
            .phase(rust_batch::model::PodGroupPhase::Inqueue)
            .tasks("", 4, &[("cpu", "3"), ("memory", "8Gi")])
            .apply(&mut cache);
    }
    cache
}

fn preempt_benches(c: &mut Criterion) {
    if !selected("preempt_reclaim_5000_nodes_50000_running") {
        return;
    }
    let start = Instant::now();
    let cache = busy_cluster();
    eprintln!(
        "built {PREEMPT_NODES} nodes, {RUNNING_GANGS} running gangs of {RUNNING_GANG_SIZE}, \
         {PENDING_GANGS} pending gangs in {:?}",
        start.elapsed()
    );
    let scheduler = testkit::scheduler(Some(PREEMPT_CONF));
    let start = Instant::now();
    let result = scheduler.run_cycle(cache.snapshot(), 0);
    let preempted = result
        .evictions
        .iter()
        .filter(|e| e.reason.starts_with("preempted"))
        .count();
    eprintln!(
        "one cycle: {preempted} preempted, {} reclaimed, {} binds, in {:?}, decision digest {:x}, eviction digest {:x}",
        result.evictions.len() - preempted,
        result.binds.len(),
        start.elapsed(),
        decision_digest(&result),
        eviction_digest(&result)
    );
    assert!(preempted > 0, "preempt should have work");
    assert!(
        result.evictions.len() > preempted,
        "reclaim should have work"
    );
    let mut group = c.benchmark_group("engine");
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5));
    time_cycles(
        &mut group,
        "preempt_reclaim_5000_nodes_50000_running",
        &scheduler,
        &cache,
        0,
    );
    group.finish();
}

/// Issue 17's size: 10,000 nodes and 100,000 pending pods in 12,500 gangs of 8 (the plain
/// cluster twice over). The allocate cycle (target < 1 s on one core), then, once
/// everything that fits is bound, a session opened and closed with nothing changed (target
/// < 5 ms).
fn scale_benches(c: &mut Criterion) {
    let (cycle, open) = (
        "allocate_10000_nodes_100000_pods",
        "open_session_nothing_changed_10000_nodes",
    );
    if !selected(cycle) && !selected(open) {
        return;
    }
    let start = Instant::now();
    let mut cache = cluster_at(2, false, 0, false);
    eprintln!(
        "built {} + {} nodes, {} gangs of {GANG_SIZE} in {:?}",
        2 * CPU_NODES,
        2 * GPU_NODES,
        2 * GANGS,
        start.elapsed()
    );
    let scheduler = testkit::scheduler(None);
    let start = Instant::now();
    let result = scheduler.run_cycle(cache.snapshot(), 0);
    let gangs_bound = testkit::binds_by_job(&result).len();
    eprintln!(
        "{cycle}: {} pods bound in {gangs_bound} gangs, {} gang updates, in {:?}, decision digest {:x}",
        result.binds.len(),
        result.job_updates.len(),
        start.elapsed(),
        decision_digest(&result)
    );
    assert!(
        gangs_bound >= 2 * GANGS * 9 / 10,
        "most gangs should fit: {gangs_bound}"
    );
    let mut group = cycle_group(c);
    if selected(cycle) {
        time_cycles(&mut group, cycle, &scheduler, &cache, 0);
    }
    testkit::apply_result(&mut cache, &result);
    if selected(open) {
        let start = Instant::now();
        let idle = scheduler.open_close(cache.snapshot(), 1);
        print_decided(open, &idle, Some(start.elapsed()));
        group
            .sampling_mode(SamplingMode::Auto)
            .measurement_time(Duration::from_secs(3));
        group.bench_function(open, |b| {
            b.iter_batched(
                || cache.snapshot(),
                |snapshot| scheduler.open_close(snapshot, 1),
                BatchSize::PerIteration,
            )
        });
    }
    group.finish();
}

/// The DRA cluster (see the module comment).
fn dra_cluster() -> Cache {
    use rust_batch::model::devices::{
        AllocationMode, AttrValue, ClaimSpec, Device, DeviceChoice, DeviceRequest, MatchAttribute,
        NodeDevices, TaskClaim,
    };
    use std::collections::BTreeMap;
    use std::sync::Arc;
    let mut cache = testkit::cache_with_default_queue();
    for q in 0..QUEUES {
        cache.apply_queue(testkit::queue(&format!("team-{q}"), 1));
    }
    cache.set_device_classes(BTreeMap::from([(
        "gpu".to_string(),
        vec!["device.driver == \"gpu.example.com\"".to_string()],
    )]));
    let shape = testkit::node("", &[("cpu", "64"), ("memory", "512Gi"), ("pods", "110")]);
    for i in 0..CPU_NODES + GPU_NODES {
        let name = format!("node-{i:05}");
        cache.apply_node(NodeSpec {
            name: name.clone(),
            ..shape.clone()
        });
        let devices = (0..8)
            .map(|d| Device {
                driver: "gpu.example.com".into(),
                pool: name.as_str().into(),
                name: format!("gpu-{d}").into(),
                attributes: BTreeMap::from([
                    (
                        "gpu.example.com/clique".to_string(),
                        AttrValue::String(format!("{name}-{}", d / 4)),
                    ),
                    (
                        "gpu.example.com/model".to_string(),
                        AttrValue::String("h100".into()),
                    ),
                ]),
                capacity: BTreeMap::new(),
                consumes: Vec::new(),
            })
            .collect();
        let inventory = NodeDevices::new(devices, &BTreeMap::new());
        cache.apply_node_devices(&name, Some(Arc::new(inventory)));
    }
    let request = |count: u32, selectors: Vec<String>| DeviceRequest {
        name: "gpu".into(),
        choices: vec![DeviceChoice {
            name: String::new(),
            device_class_name: "gpu".into(),
            selectors,
            mode: AllocationMode::ExactCount(count),
        }],
    };
    let one_h100 = ClaimSpec {
        requests: vec![request(
            1,
            vec!["device.attributes[\"gpu.example.com\"].model == \"h100\"".into()],
        )],
        constraints: vec![],
    };
    let two_in_a_clique = ClaimSpec {
        requests: vec![request(2, vec![])],
        constraints: vec![MatchAttribute {
            requests: vec![],
            attribute: "gpu.example.com/clique".into(),
        }],
    };
    for g in 0..GANGS {
        let mut gang = Gang::new(&format!("job-{g:05}"), GANG_SIZE as u32)
            .queue(&format!("team-{}", g % QUEUES))
            .priority((g % 3) as i32)
            .created(g as i64)
            .tasks("worker", GANG_SIZE, &[("cpu", "4"), ("memory", "8Gi")]);
        if g % 2 == 0 {
            let spec = if g % 8 == 0 {
                &two_in_a_clique
            } else {
                &one_h100
            };
            for t in &mut gang.tasks {
                let name = format!("default/{}-gpu", t.name);
                t.set_claims(vec![TaskClaim::new(name, spec.clone())]);
            }
        }
        gang.apply(&mut cache);
    }
    cache
}

fn dra_benches(c: &mut Criterion) {
    let name = "allocate_5000_nodes_50000_pods_dra";
    if selected(name) {
        let start = Instant::now();
        let cache = dra_cluster();
        eprintln!("built the DRA cluster in {:?}", start.elapsed());
        bench_cycle(c, name, &cache, rust_batch::conf::DEFAULT_CONF);
    }
}

/// Predicted start times (`--predict-start`): the cluster once everything that fits runs,
/// every pod with a runtime estimate (10m to 60m by gang), 250 GPU gangs waiting; the cycle
/// without and with predictions, timed in the same run (their ratio is the cost).
fn predict_benches(c: &mut Criterion) {
    if !selected("predict_start") {
        return;
    }
    let mut cache = cluster();
    let scheduler = testkit::scheduler(None);
    let first = scheduler.run_cycle(cache.snapshot(), 0);
    testkit::apply_result(&mut cache, &first);
    let tasks: Vec<(String, rust_batch::model::TaskInfo)> = cache
        .state()
        .jobs()
        .enumerate()
        .flat_map(|(i, (_, j))| {
            let uid = j.uid.to_string();
            j.tasks()
                .iter()
                .map(move |t| {
                    let mut t = t.clone();
                    t.estimate = Some((10 + (i % 6) as i64 * 10) * 60_000);
                    (uid.clone(), t)
                })
                .collect::<Vec<_>>()
        })
        .collect();
    for (job, task) in tasks {
        cache.apply_pod(rust_batch::cache::PodUpdate {
            task,
            job: Some(job),
        });
    }
    let mut predicting = testkit::scheduler(None);
    predicting.predict_starts(Some(Default::default()));
    let plain = scheduler.run_cycle(cache.snapshot(), 1);
    let predicted = predicting.run_cycle(cache.snapshot(), 1);
    assert_eq!(
        decision_digest(&plain),
        decision_digest(&predicted),
        "predicting changes no decision"
    );
    let known = predicted
        .predictions
        .iter()
        .filter(|(_, p)| matches!(p, rust_batch::framework::PredictedStart::At(_)))
        .count();
    eprintln!(
        "predict_start: {} waiting gangs, {known} with a predicted time",
        predicted.predictions.len()
    );
    let mut group = cycle_group(c);
    time_cycles(&mut group, "cycle_waiting_gangs", &scheduler, &cache, 1);
    time_cycles(
        &mut group,
        "cycle_waiting_gangs_predict_start",
        &predicting,
        &cache,
        1,
    );
    group.finish();
}

criterion_group!(
    engine,
    predict_benches,
    preempt_benches,
    benches,
    topology_benches,
    dra_benches,
    scale_benches
);
criterion_main!(engine);
