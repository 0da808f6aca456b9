//! End-to-end benchmark on the real control plane (tests/cluster): 500 kwok nodes, 5,000
//! pods in gangs of 10. It measures, in the same run and on the same cluster:
//!
//! - the ceiling: a null binder that binds pods round-robin as fast as it can, deciding
//!   nothing, with 16 binds in flight (rust-batch's starting limit) and with 64;
//! - rust-batch with its bind limit fixed at 16 (`--max-bind-concurrency 16`) and adaptive
//!   (from 16, as it runs by default): pods bound per second, and gang latency (the gang's
//!   last pod created → the whole gang bound) p50 and p99;
//!
//! and reports each rust-batch run's throughput as a fraction of the best null binder.
//!
//!   tests/cluster/with-cluster.sh cargo bench --bench kwok
//!
//! Under `cargo test` (no `--bench` argument) it runs the same code on 20 nodes and 100 pods
//! as a smoke test, asserting every gang bound whole.

#[path = "../tests/e2e/common/mod.rs"]
mod common;
mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::watcher;
use kube::Client;

/// rust-batch's starting bind limit, and the null binder's first setting.
const BIND_CONCURRENCY: usize = 16;
/// The null binder's second setting: near the API server's ceiling on this harness.
const WIDE_BIND_CONCURRENCY: usize = 64;

struct Size {
    nodes: usize,
    gangs: usize,
    gang_size: usize,
}

/// When each pod of a namespace was first seen bound, from a watch.
type Bound = Arc<Mutex<HashMap<String, Instant>>>;

fn observe_binds(client: &Client, ns: &str) -> Bound {
    let bound: Bound = Arc::default();
    let b = bound.clone();
    let api = Api::<Pod>::namespaced(client.clone(), ns);
    tokio::spawn(async move {
        let mut events = watcher::watcher(api, watcher::Config::default()).boxed();
        while let Some(Ok(ev)) = events.next().await {
            let pods: Vec<Pod> = match ev {
                watcher::Event::Apply(p) | watcher::Event::InitApply(p) => vec![p],
                _ => vec![],
            };
            for p in pods {
                if p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some() {
                    let name = p.metadata.name.clone().unwrap_or_default();
                    b.lock().unwrap().entry(name).or_insert_with(Instant::now);
                }
            }
        }
    });
    bound
}

/// The bench's pods, gang by gang, in `ns` (support's `Workload`: `support::CREATE_CONCURRENCY`
/// in flight); returns when each gang's last pod was created.
async fn create_pods(
    client: &Client,
    ns: &str,
    size: &Size,
    scheduler: &str,
) -> HashMap<String, Instant> {
    support::Workload {
        ns: ns.into(),
        pool: "bench".into(),
        scheduler: scheduler.into(),
        gangs: 0..size.gangs,
        gang_size: size.gang_size,
        dialect: support::Dialect::Volcano,
    }
    .create_pods(client)
    .await
}

async fn wait_all_bound(bound: &Bound, total: usize, timeout: Duration) {
    common::wait_for(timeout, "every pod bound", || async {
        (bound.lock().unwrap().len() >= total).then_some(())
    })
    .await;
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// When the last pod was bound, seconds after `start`.
fn last_bind(bound: &HashMap<String, Instant>, start: Instant) -> f64 {
    bound
        .values()
        .max()
        .unwrap()
        .duration_since(start)
        .as_secs_f64()
}

/// The null binder with `concurrency` binds in flight over fresh pods: seconds to bind all.
async fn run_null(client: &Client, size: &Size, nodes: &[String], concurrency: usize) -> f64 {
    let ns = format!("bench-null-{concurrency}");
    common::namespace(client, &ns).await;
    let bound = observe_binds(client, &ns);
    // Runs until the bench process ends (each run has its own namespace).
    drop(support::null_binder(
        client,
        &ns,
        nodes.to_vec(),
        concurrency,
        false,
    ));
    let start = Instant::now();
    create_pods(client, &ns, size, "null-binder").await;
    wait_all_bound(
        &bound,
        size.gangs * size.gang_size,
        Duration::from_secs(600),
    )
    .await;
    let secs = last_bind(&bound.lock().unwrap(), start);
    secs
}

/// rust-batch (with `args`) over fresh gangs: seconds to bind all, and gang latencies
/// (sorted).
async fn run_rust_batch(
    client: &Client,
    size: &Size,
    label: &str,
    args: &[&str],
) -> (f64, Vec<f64>) {
    let ns = format!("bench-rb-{label}");
    let scheduler = format!("rust-batch-{label}");
    common::namespace(client, &ns).await;
    let bound = observe_binds(client, &ns);
    let port = common::free_port();
    let address = format!("127.0.0.1:{port}");
    let mut all = vec!["--http-address", address.as_str()];
    all.extend_from_slice(args);
    let _scheduler = common::start_scheduler_with(&scheduler, &all);
    for g in 0..size.gangs {
        common::pod_group(client, &ns, &format!("gang-{g}"), size.gang_size as i32).await;
    }
    let start = Instant::now();
    let created = create_pods(client, &ns, size, &scheduler).await;
    wait_all_bound(
        &bound,
        size.gangs * size.gang_size,
        Duration::from_secs(600),
    )
    .await;
    let bound = bound.lock().unwrap().clone();
    let secs = last_bind(&bound, start);
    let mut latencies: Vec<f64> = created
        .iter()
        .map(|(group, last_created)| {
            let whole = (0..size.gang_size)
                .map(|i| bound[&format!("{group}-{i}")])
                .max()
                .unwrap();
            whole.saturating_duration_since(*last_created).as_secs_f64()
        })
        .collect();
    latencies.sort_by(f64::total_cmp);
    assert!(
        common::partial_gangs(client, &ns).await.is_empty(),
        "a gang was bound partially"
    );
    print_requests_per_pod(label, port).await;
    (secs, latencies)
}

/// A sum per label set of the samples of `metric` in a Prometheus text body, keyed by the
/// values of `labels` (joined with `/`).
fn samples(body: &str, metric: &str, labels: &[&str]) -> Vec<(String, f64)> {
    let mut out: Vec<(String, f64)> = Vec::new();
    for line in body.lines() {
        let Some(rest) = line.strip_prefix(metric) else {
            continue;
        };
        let (set, value) = match rest.strip_prefix('{') {
            Some(r) => match r.split_once('}') {
                Some((set, value)) => (set, value),
                None => continue,
            },
            None if rest.starts_with(' ') => ("", rest),
            None => continue,
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        let key: Vec<&str> = labels
            .iter()
            .map(|l| {
                set.split(&format!("{l}=\""))
                    .nth(1)
                    .and_then(|v| v.split('"').next())
                    .unwrap_or("")
            })
            .collect();
        let key = key.join("/");
        match out.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => *v += value,
            None => out.push((key, value)),
        }
    }
    out
}

/// Prints a rust-batch run's API requests per bound pod by kind and result, how long binds
/// waited for a permit, and the API server's mean latency per kind — from the scheduler's
/// own /metrics once its status writes have landed.
async fn print_requests_per_pod(label: &str, port: u16) {
    let scrape = || async {
        common::http_get(port, "/metrics")
            .await
            .map(|(_, b)| b)
            .unwrap_or_default()
    };
    // Status writes trail the binds (paced, and pod conditions after a grace).
    let settle = Instant::now();
    let mut body = scrape().await;
    while settle.elapsed() < Duration::from_secs(15) {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let again = scrape().await;
        let backlog = samples(&again, "rust_batch_status_backlog", &[]);
        let writes = |b: &str| samples(b, "rust_batch_api_writes_total", &[]);
        let quiet = writes(&again) == writes(&body) && backlog.iter().all(|(_, v)| *v == 0.0);
        body = again;
        if quiet {
            break;
        }
    }
    let bound: f64 = samples(&body, "rust_batch_pods_bound_total", &[])
        .iter()
        .map(|(_, v)| v)
        .sum();
    if bound == 0.0 {
        println!("  {label}: no /metrics (or nothing bound)");
        return;
    }
    let mut line = format!("  {label}: API requests per bound pod ({bound} bound):");
    let mut total = 0.0;
    for (metric, verb) in [
        ("rust_batch_api_writes_total", "write"),
        ("rust_batch_api_reads_total", "read"),
    ] {
        let mut rows = samples(&body, metric, &["kind", "result"]);
        rows.retain(|(_, n)| *n > 0.0);
        rows.sort_by(|a, b| a.0.cmp(&b.0));
        for (kind_result, n) in rows {
            total += n;
            line.push_str(&format!(" {verb} {kind_result} {:.3};", n / bound));
        }
    }
    line.push_str(&format!(" total {:.3}", total / bound));
    println!("{line}");
    let mean = |metric: &str, labels: &[&str]| -> Vec<(String, f64, f64)> {
        let sums = samples(&body, &format!("{metric}_sum"), labels);
        let counts = samples(&body, &format!("{metric}_count"), labels);
        sums.into_iter()
            .filter_map(|(k, s)| {
                let n = counts.iter().find(|(c, _)| *c == k)?.1;
                (n > 0.0).then(|| (k, s / n * 1000.0, n))
            })
            .collect()
    };
    let mut line = format!("  {label}: API latency mean ms:");
    for (kind, ms, n) in mean("rust_batch_api_write_duration_seconds", &["kind"])
        .into_iter()
        .chain(mean("rust_batch_api_read_duration_seconds", &["kind"]))
    {
        line.push_str(&format!(" {kind} {ms:.1} (n {n});"));
    }
    for (_, ms, n) in mean("rust_batch_bind_permit_wait_seconds", &[]) {
        line.push_str(&format!(" bind permit wait mean {ms:.1} ms (n {n})"));
    }
    println!("{line}");
}

async fn bench(size: Size) {
    let client = common::client().await;
    common::install_crds(&client).await;
    let total = size.gangs * size.gang_size;
    let t = Instant::now();
    let nodes = support::create_nodes(&client, "bench", "bench", size.nodes).await;
    eprintln!(
        "{} nodes ready in {:.1}s",
        nodes.len(),
        t.elapsed().as_secs_f64()
    );
    let narrow = BIND_CONCURRENCY.to_string();
    let null_16 = run_null(&client, &size, &nodes, BIND_CONCURRENCY).await;
    let null_64 = run_null(&client, &size, &nodes, WIDE_BIND_CONCURRENCY).await;
    let fixed = run_rust_batch(
        &client,
        &size,
        "fixed",
        &[
            "--bind-concurrency",
            &narrow,
            "--max-bind-concurrency",
            &narrow,
        ],
    )
    .await;
    let adaptive =
        run_rust_batch(&client, &size, "adaptive", &["--bind-concurrency", &narrow]).await;
    // Another build beside this one, same cluster and run (e.g. main, to compare API
    // requests per pod): RB_KWOK_BASELINE_BIN=/path/to/rust-batch.
    let baseline = match std::env::var("RB_KWOK_BASELINE_BIN") {
        Ok(bin) => {
            let this = std::env::var("RB_SCHEDULER_BIN").ok();
            std::env::set_var("RB_SCHEDULER_BIN", bin);
            let run =
                run_rust_batch(&client, &size, "baseline", &["--bind-concurrency", &narrow]).await;
            match this {
                Some(b) => std::env::set_var("RB_SCHEDULER_BIN", b),
                None => std::env::remove_var("RB_SCHEDULER_BIN"),
            }
            Some(run)
        }
        Err(_) => None,
    };

    let rate = |secs: f64| total as f64 / secs;
    let ceiling = rate(null_16).max(rate(null_64));
    println!(
        "kwok benchmark: {} nodes, {} pods in gangs of {}",
        size.nodes, total, size.gang_size
    );
    println!(
        "  null binder, {BIND_CONCURRENCY} in flight:  {:.0} pods/s ({null_16:.1}s)",
        rate(null_16)
    );
    println!(
        "  null binder, {WIDE_BIND_CONCURRENCY} in flight:  {:.0} pods/s ({null_64:.1}s)",
        rate(null_64)
    );
    let mut runs = vec![
        ("rust-batch, fixed 16", &fixed),
        ("rust-batch, adaptive", &adaptive),
    ];
    if let Some(b) = &baseline {
        runs.push(("baseline (RB_KWOK_BASELINE_BIN), adaptive", b));
    }
    for (name, (secs, latencies)) in runs {
        println!(
            "  {name}: {:.0} pods/s ({secs:.1}s) = {:.0}% of the best null binder; \
             gang latency (last pod created -> gang bound) p50 {:.3}s, p99 {:.3}s",
            rate(*secs),
            100.0 * rate(*secs) / ceiling,
            percentile(latencies, 0.5),
            percentile(latencies, 0.99)
        );
    }
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let size = if full {
        Size {
            nodes: 500,
            gangs: 500,
            gang_size: 10,
        }
    } else {
        Size {
            nodes: 20,
            gangs: 10,
            gang_size: 10,
        }
    };
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(bench(size));
}
