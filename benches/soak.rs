//! Soak on the real control plane (tests/cluster): an hour of churn on 500 kwok nodes —
//! gangs arriving and finishing (through the runtime annotation), PodGroups deleted with
//! their pods still there, nodes added and removed — while the scheduler's resident memory,
//! cycle time, watch lag (a probe pod's creation → the scheduler knows it) and API write
//! rate are sampled every minute. It prints one row per
//! sample and fails if the last samples are not flat against the first (memory and cycle
//! time), or if any node was ever over-committed or a gang left partly bound.
//!
//!   tests/cluster/with-cluster.sh cargo bench --bench soak                 # 500 nodes, 60 min
//!   RB_SOAK_MINUTES=10 tests/cluster/with-cluster.sh cargo bench --bench soak
//!
//! Under `cargo test` (no `--bench` argument) the same code runs on 20 nodes for 40 s,
//! sampling every 10 s, as a smoke test.

#[path = "../tests/e2e/common/mod.rs"]
mod common;

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use common::*;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams};
use rust_batch::kube::dialects::volcano::PodGroup;
use serde_json::json;

struct Plan {
    nodes: usize,
    duration: Duration,
    sample_every: Duration,
    /// Gangs created per second on average.
    gangs_per_second: f64,
}

/// One sample of the scheduler's health.
struct Sample {
    at: Duration,
    rss_mib: u64,
    cycle_ms: f64,
    watch_lag_ms: f64,
    writes_per_min: f64,
    bound: f64,
    pending: usize,
}

struct Metrics {
    cycle_sum: f64,
    cycle_count: f64,
    writes: f64,
    bound: f64,
}

async fn scrape(port: u16) -> Metrics {
    let body = http_get(port, "/metrics")
        .await
        .map(|(_, b)| b)
        .unwrap_or_default();
    let sum = |prefix: &str| -> f64 {
        body.lines()
            .filter(|l| l.starts_with(prefix))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    Metrics {
        cycle_sum: sum("rust_batch_cycle_latency_seconds_sum"),
        cycle_count: sum("rust_batch_cycle_latency_seconds_count"),
        writes: sum("rust_batch_api_writes_total"),
        bound: sum("rust_batch_pods_bound_total"),
    }
}

/// How long a new pod takes to reach the scheduler's index: a probe pod (a kube-batch gang
/// of one that fits nowhere) is created, and the scheduler's gang API polled until it
/// knows the gang.
async fn watch_lag(place: &Place<'_>, port: u16, n: usize) -> f64 {
    let probe = format!("probe-{n}");
    let annotations =
        json!({"scheduling.k8s.io/group-name": &probe, "scheduling.k8s.io/group-min-member": "1"});
    let p: Pod = serde_json::from_value(json!({
        "metadata": {"name": &probe, "namespace": place.ns, "annotations": annotations},
        "spec": {"schedulerName": place.scheduler, "nodeSelector": {"pool": "nowhere"},
                 "containers": [{"name": "c", "image": "x"}]}
    }))
    .unwrap();
    let pods = Api::<Pod>::namespaced(place.client.clone(), place.ns);
    let start = Instant::now();
    pods.create(&kube::api::PostParams::default(), &p)
        .await
        .expect("probe created");
    let path = format!("/apis/v1/plugins/Coscheduling/gang/{}/{probe}", place.ns);
    while http_get(port, &path).await.map(|(code, _)| code) != Some(200) {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "probe pod never seen"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let lag = start.elapsed().as_secs_f64() * 1000.0;
    let _ = pods.delete(&probe, &DeleteParams::default()).await;
    lag
}

/// A small deterministic generator (xorshift).
struct Dice(u64);

impl Dice {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let minutes: u64 = std::env::var("RB_SOAK_MINUTES")
        .ok()
        .and_then(|m| m.parse().ok())
        .unwrap_or(60);
    let plan = if bench {
        Plan {
            nodes: 500,
            duration: Duration::from_secs(minutes * 60),
            sample_every: Duration::from_secs(60),
            gangs_per_second: 1.0,
        }
    } else {
        Plan {
            nodes: 20,
            duration: Duration::from_secs(40),
            sample_every: Duration::from_secs(10),
            gangs_per_second: 1.0,
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(soak(plan, bench));
}

async fn soak(plan: Plan, bench: bool) {
    let (ns, pool, name) = ("soak", "soak", "rb-soak");
    let client = client().await;
    install_crds(&client).await;
    namespace(&client, ns).await;
    let shape = json!({"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": "8"});
    let mut next_node = plan.nodes + 1;
    fake_nodes(&client, "soak", 1..=plan.nodes, pool, &shape).await;
    let port = free_port();
    let port_arg = format!("127.0.0.1:{port}");
    let log = std::env::temp_dir().join(format!("rb-soak-{}.log", std::process::id()));
    let scheduler = start_scheduler_logged(name, &["--http-address", &port_arg], &log);
    let pid = scheduler.0.id();
    let place = Place {
        client: &client,
        ns,
        pool,
        scheduler: name,
    };
    let pods_api = Api::<Pod>::namespaced(client.clone(), ns);
    let groups_api = Api::<PodGroup>::namespaced(client.clone(), ns);
    let nodes_api = Api::<Node>::all(client.clone());
    let mut dice = Dice(0x9e37_79b9_7f4a_7c15);
    let mut gang = 0usize;
    let mut live: VecDeque<String> = VecDeque::new();
    let mut samples: Vec<Sample> = Vec::new();
    let start = Instant::now();
    let mut last_sample = Instant::now();
    let mut last = scrape(port).await;
    let tick = Duration::from_secs(1);
    println!(
        "soak: {} nodes, {:?}, a sample every {:?}",
        plan.nodes, plan.duration, plan.sample_every
    );
    println!("minute | RSS MiB | cycle ms (avg) | watch lag ms (avg) | API writes/min | pods bound | pending pods");
    while start.elapsed() < plan.duration {
        let tick_start = Instant::now();
        // Gangs arrive: 2–8 pods of 1–4 GPUs, running 20–120 s.
        let arriving = (plan.gangs_per_second + dice.below(100) as f64 / 100.0) as usize;
        for _ in 0..arriving {
            let group = format!("g{gang}");
            gang += 1;
            let size = 2 + dice.below(7) as usize;
            let gpus = 1 + dice.below(4);
            let runtime = format!("{}s", 20 + dice.below(100));
            pod_group(&client, ns, &group, size as i32).await;
            for i in 0..size {
                place
                    .pod(
                        &group,
                        &format!("{group}-{i}"),
                        "worker",
                        json!({"cpu": "2", "nvidia.com/gpu": gpus.to_string()}),
                        Some(&runtime),
                    )
                    .await;
            }
            live.push_back(group);
        }
        // Finished gangs go (their pods and PodGroup); now and then a PodGroup is deleted
        // with its pods still running or pending.
        let pods = pods_api
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        let done: std::collections::HashSet<String> = pods
            .iter()
            .filter(|p| phase(p) == "Succeeded")
            .filter_map(|p| {
                p.metadata
                    .annotations
                    .as_ref()?
                    .get("scheduling.k8s.io/group-name")
                    .cloned()
            })
            .collect();
        for g in done.iter().take(20) {
            let _ = groups_api.delete(g, &DeleteParams::default()).await;
            let lp = ListParams::default().fields(&format!("metadata.name={g}-0"));
            let _ = pods_api
                .delete_collection(&DeleteParams::default(), &lp)
                .await;
            for i in 0..8 {
                let _ = pods_api
                    .delete(&format!("{g}-{i}"), &DeleteParams::default())
                    .await;
            }
            live.retain(|l| l != g);
        }
        if dice.below(20) == 0 {
            if let Some(g) = live.pop_front() {
                let _ = groups_api.delete(&g, &DeleteParams::default()).await;
            }
        }
        // Nodes come and go (about one change every 10 s).
        if dice.below(10) == 0 {
            if dice.below(2) == 0 {
                let _ = nodes_api
                    .delete(
                        &format!("soak-n{}", 1 + dice.below(plan.nodes as u64)),
                        &DeleteParams::default(),
                    )
                    .await;
            } else {
                fake_node(&client, &format!("soak-n{next_node}"), pool, shape.clone()).await;
                next_node += 1;
            }
        }
        let all = Api::<Pod>::all(client.clone())
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        assert_not_over_committed(&client, &all).await;
        if last_sample.elapsed() >= plan.sample_every {
            let now = scrape(port).await;
            let per = |a: f64, b: f64| if b > 0.0 { a / b * 1000.0 } else { 0.0 };
            let minutes = last_sample.elapsed().as_secs_f64() / 60.0;
            let s = Sample {
                at: start.elapsed(),
                rss_mib: rss_mib(pid),
                cycle_ms: per(
                    now.cycle_sum - last.cycle_sum,
                    now.cycle_count - last.cycle_count,
                ),
                watch_lag_ms: watch_lag(&place, port, samples.len()).await,
                writes_per_min: (now.writes - last.writes) / minutes,
                bound: now.bound,
                pending: pods.iter().filter(|p| node_of(p).is_none()).count(),
            };
            println!(
                "{:6.1} | {:7} | {:14.1} | {:18.1} | {:14.0} | {:10} | {:12}",
                s.at.as_secs_f64() / 60.0,
                s.rss_mib,
                s.cycle_ms,
                s.watch_lag_ms,
                s.writes_per_min,
                s.bound,
                s.pending
            );
            samples.push(s);
            last = now;
            last_sample = Instant::now();
        }
        if let Some(rest) = tick.checked_sub(tick_start.elapsed()) {
            tokio::time::sleep(rest).await;
        }
    }
    let partial = partial_gangs(&client, ns).await;
    // A gang may be mid-bind at the last poll: look again before calling it partial.
    if !partial.is_empty() {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let again = partial_gangs(&client, ns).await;
        let stuck: Vec<_> = again.iter().filter(|g| partial.contains(g)).collect();
        assert!(stuck.is_empty(), "gangs left partly bound: {stuck:?}");
    }
    assert!(samples.len() >= 2, "at least two samples");
    let bound = samples.last().map_or(0.0, |s| s.bound);
    assert!(bound > 0.0, "the soak bound pods");
    if bench {
        // Flat: the last quarter of the run against the second sample (the first includes
        // start-up).
        let base = &samples[1.min(samples.len() - 1)];
        let tail = &samples[samples.len() * 3 / 4..];
        let max_rss = tail.iter().map(|s| s.rss_mib).max().unwrap_or(0);
        assert!(
            max_rss <= base.rss_mib * 2 + 64,
            "resident memory grew from {} MiB to {max_rss} MiB",
            base.rss_mib
        );
    }
    let stderr = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        !stderr.contains("panicked"),
        "the scheduler did not panic:\n{stderr}"
    );
    drop(scheduler);
    println!("soak: OK ({} gangs, {bound} pods bound)", gang);
}
