//! rust-batch at scale on a kwok cluster of its own (tests/cluster/up.sh): 5,000 nodes and
//! 50,000 pending pods in gangs of 10 (a Volcano PodGroup each), all created BEFORE the
//! scheduler starts (32 at a time); then start → first bind, start → all bound, peak RSS and
//! CPU. Then the scheduler stops, 5,000 more pods (500 gangs) are created pending, and it
//! starts again with everything else bound: restart → first bind, restart → all bound, peak
//! RSS. Targets (issue 17): restart → first bind < 5 s, RSS < 1 GiB. Every phase checks 0
//! partial gangs, 0 over-committed nodes, 0 pods seen on two nodes.
//!
//!   cargo bench --bench scale
//!   RB_SCALE_NODES=1000 RB_SCALE_PODS=10000 RB_SCALE_MORE=1000 cargo bench --bench scale
//!
//! Env: RB_SCALE_NODES (default 5000), RB_SCALE_PODS (default 50000), RB_SCALE_MORE (default
//! 5000), RB_BENCH_TIMEOUT (seconds each phase may take to bind everything; default 1800).
//! The bench starts and stops its own control plane (no with-cluster.sh needed; RB_BENCH_KEEP=1
//! leaves it running, with everything bound, to look into).
//!
//! Under `cargo test` (no `--bench` argument) it runs the same phases on the ambient cluster
//! (KUBECONFIG) with 10 nodes, 100 pods and 20 more, as a smoke test.

#[path = "../tests/e2e/common/mod.rs"]
mod common;
mod support;

use std::time::{Duration, Instant};

use support::*;

const GANG_SIZE: usize = 10;

struct Phase {
    name: &'static str,
    pods: usize,
    first_bind: Option<f64>,
    all_bound: Option<f64>,
    usage: Usage,
    cores_busy: f64,
    cores_stolen: f64,
    load1: f64,
}

/// Starts rust-batch, waits until every pod of `work` and before is bound (`total`), returns
/// the phase's figures; the scheduler keeps running (returned) for the invariants.
async fn phase(
    name: &'static str,
    cluster: &Cluster,
    log: &BindLog,
    total: usize,
    new: &Workload,
    smoke: bool,
) -> (Phase, Proc) {
    let kubeconfig = if smoke {
        common::scheduler_kubeconfig().to_path_buf()
    } else {
        cluster.kubeconfig.clone()
    };
    let cpu0 = machine_cpu();
    let mut cmd = rust_batch_command(&new.scheduler, &kubeconfig, common::free_port(), &[]);
    let mut proc = Proc::spawn(
        &new.scheduler,
        &mut cmd,
        log_dir().join(format!("scale-{name}.log")),
    );
    let t0 = proc.started;
    let timeout = Duration::from_secs(env_or("RB_BENCH_TIMEOUT", 1800u64));
    let all = wait_bound(log, total, timeout).await;
    proc.assert_running();
    let usage = proc.usage();
    // First and last bind among this phase's pods.
    let (first, last) = {
        let b = log.lock().unwrap();
        let mine: Vec<Instant> = new
            .gangs
            .clone()
            .flat_map(|g| (0..new.gang_size).map(move |i| format!("gang-{g}-{i}")))
            .filter_map(|p| b.first.get(&p).map(|(t, _)| *t))
            .collect();
        let secs = |i: Instant| i.saturating_duration_since(t0).as_secs_f64();
        (
            mine.iter().min().copied().map(secs),
            mine.iter().max().copied().map(secs),
        )
    };
    let p = Phase {
        name,
        pods: new.pods(),
        first_bind: first,
        all_bound: if all { last } else { None },
        usage,
        cores_busy: cores_busy(cpu0, machine_cpu()),
        cores_stolen: cores_stolen(cpu0, machine_cpu()),
        load1: load1(),
    };
    eprintln!(
        "[scale] {name}: first bind {:?} s, all bound {:?} s, peak RSS {} MiB",
        p.first_bind, p.all_bound, p.usage.peak_rss_mib
    );
    (p, proc)
}

async fn scale(cluster: Cluster, nodes: usize, pods: usize, more: usize, smoke: bool) {
    let client = cluster.client.clone();
    common::install_crds(&client).await;
    let t = Instant::now();
    let pool = "scale";
    create_nodes(&client, "scale", pool, nodes).await;
    eprintln!(
        "[scale] {nodes} nodes ready in {:.1}s",
        t.elapsed().as_secs_f64()
    );
    // A fresh control plane only: under `cargo test` other tests list pods on the ambient one.
    if !smoke {
        let settled = cluster.settle_kwok(Duration::from_secs(300)).await;
        eprintln!(
            "[scale] kwok done with the nodes {:.1}s later",
            settled.as_secs_f64()
        );
    }
    let ns = "scale";
    common::namespace(&client, ns).await;
    let scheduler = "rust-batch-scale".to_string();
    let first = Workload {
        ns: ns.into(),
        pool: pool.into(),
        scheduler: scheduler.clone(),
        gangs: 0..pods / GANG_SIZE,
        gang_size: GANG_SIZE,
        dialect: Dialect::Volcano,
    };
    let t = Instant::now();
    first.create_pod_groups(&client).await;
    first.create_pods(&client).await;
    let created_in = t.elapsed().as_secs_f64();
    eprintln!(
        "[scale] {} pods (and {} PodGroups) created in {created_in:.1}s",
        first.pods(),
        first.gangs.len()
    );
    let (log, watch) = observe_binds(&client, ns).await;

    let (start, mut proc) = phase("start", &cluster, &log, first.pods(), &first, smoke).await;
    check_invariants(&client, ns, &log).await;
    proc.stop();
    drop(proc);

    let second = Workload {
        gangs: first.gangs.end..first.gangs.end + more / GANG_SIZE,
        ..first.clone()
    };
    second.create_pod_groups(&client).await;
    second.create_pods(&client).await;
    let (restart, proc) = phase(
        "restart",
        &cluster,
        &log,
        first.pods() + second.pods(),
        &second,
        smoke,
    )
    .await;
    check_invariants(&client, ns, &log).await;
    drop(proc);
    watch.abort();

    let cp = |var: &str| cluster.pid(var).map(usage).unwrap_or_default();
    let (api, etcd, kwok) = (cp("APISERVER_PID"), cp("ETCD_PID"), cp("KWOK_PID"));
    println!();
    println!(
        "scale benchmark: {nodes} kwok nodes, {} pods in gangs of {GANG_SIZE} pending before the start ({created_in:.0}s to create), {} more before the restart",
        first.pods(),
        second.pods()
    );
    println!();
    println!(
        "| phase | pending pods | → first bind | → all bound | pods/s | peak RSS | CPU s | cores busy (of {}) / stolen / load1 |",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    println!("|---|---|---|---|---|---|---|---|");
    for p in [&start, &restart] {
        let rate = match p.all_bound {
            Some(s) => format!("{:.0}", p.pods as f64 / s),
            None => "timed out".into(),
        };
        println!(
            "| {} | {} | {} | {} | {rate} | {} MiB | {:.1} | {:.2} / {:.2} / {:.1} |",
            p.name,
            p.pods,
            p.first_bind.map_or("–".into(), |s| format!("{s:.2} s")),
            p.all_bound.map_or("–".into(), |s| format!("{s:.1} s")),
            p.usage.peak_rss_mib,
            p.usage.cpu_s,
            p.cores_busy,
            p.cores_stolen,
            p.load1
        );
    }
    println!(
        "control plane at the end: kube-apiserver {} MiB peak, {:.0} CPU s; etcd {} MiB, {:.0} CPU s; kwok {} MiB, {:.0} CPU s",
        api.peak_rss_mib, api.cpu_s, etcd.peak_rss_mib, etcd.cpu_s, kwok.peak_rss_mib, kwok.cpu_s
    );
    assert!(
        start.all_bound.is_some() && restart.all_bound.is_some(),
        "not every pod was bound"
    );
    drop(cluster);
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        if full {
            let cluster = Cluster::fresh("scale").await;
            scale(
                cluster,
                env_or("RB_SCALE_NODES", 5000),
                env_or("RB_SCALE_PODS", 50_000),
                env_or("RB_SCALE_MORE", 5000),
                false,
            )
            .await;
        } else {
            scale(Cluster::ambient().await, 10, 100, 20, true).await;
        }
    });
    // Watches still open do not hold the process.
    rt.shutdown_timeout(Duration::from_secs(5));
}
