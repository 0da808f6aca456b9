//! Prometheus metrics and the HTTP endpoints: /metrics, /healthz, /readyz.
//!
//! Two families: `rust_batch_*`, our own, and `volcano_*`, with Volcano's names, label sets
//! and units (per-queue accounts, PodGroups per phase, schedule attempts, preemption), so
//! dashboards built for Volcano keep working. README's "Metrics" list names every one; an
//! e2e test scrapes a running scheduler for each name it lists.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use prometheus::{
    Encoder, GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

use crate::conf::SchedulerConf;
use crate::model::resource::{CPU, MEMORY, PODS};
use crate::model::Resource;
use crate::snapshot::ClusterState;

/// Every metric rust-batch exports.
pub struct Metrics {
    registry: Registry,
    /// Pod created → bind sent, seconds.
    pub e2e_latency: Histogram,
    /// One whole cycle, seconds.
    pub cycle_latency: Histogram,
    /// Per action, seconds.
    pub action_latency: HistogramVec,
    pub pods_bound: IntCounter,
    pub bind_failures: IntCounter,
    /// Gangs reported unschedulable by the last cycle.
    pub unschedulable_gangs: IntGauge,
    /// API writes by kind (see `WRITE_KINDS`) and result (ok, or the failure's code).
    pub api_writes: IntCounterVec,
    /// How long API writes took, by kind, seconds.
    pub api_write_latency: HistogramVec,
    /// API reads the driver makes besides its watches (see `READ_KINDS`), by kind and result.
    pub api_reads: IntCounterVec,
    /// How long those reads took, by kind, seconds.
    pub api_read_latency: HistogramVec,
    /// How long binds and evictions waited for a permit to be sent, seconds.
    pub bind_permit_wait: Histogram,
    /// How many binds and evictions may be in flight now (the adaptive limit).
    pub bind_limit: IntGauge,
    /// Objects whose status waits to be written.
    pub status_backlog: IntGauge,
    /// 1 while this replica holds the leader lease (always 1 without leader election).
    pub leader: IntGauge,
    /// A new pod's creation → its watch event, seconds.
    pub watch_lag: Histogram,
    /// Pods chosen for eviction, by action: preempt, reclaim, release (a short gang's).
    pub victims: IntCounterVec,
    /// Whole-gang placement searches, by result (placed, none, gave_up), and their tries.
    pub placement_searches: IntCounterVec,
    pub placement_search_tries: IntCounter,
    /// Volcano's metrics (no prefix of ours).
    pub volcano: VolcanoMetrics,
    volcano_registry: Registry,
    /// Set while every watched kind's list is complete (cycles run only then).
    pub ready: AtomicBool,
}

const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];

impl Metrics {
    pub fn new() -> Result<Arc<Self>, prometheus::Error> {
        let registry = Registry::new_custom(Some("rust_batch".into()), None)?;
        let histogram = |name: &str, help: &str| {
            Histogram::with_opts(HistogramOpts::new(name, help).buckets(LATENCY_BUCKETS.to_vec()))
        };
        let m = Metrics {
            e2e_latency: histogram(
                "e2e_scheduling_latency_seconds",
                "Time from pod creation to its bind being sent",
            )?,
            cycle_latency: histogram("cycle_latency_seconds", "Duration of one scheduling cycle")?,
            action_latency: HistogramVec::new(
                HistogramOpts::new(
                    "action_latency_seconds",
                    "Duration of each action in a cycle",
                )
                .buckets(LATENCY_BUCKETS.to_vec()),
                &["action"],
            )?,
            pods_bound: IntCounter::new("pods_bound_total", "Pods bound")?,
            bind_failures: IntCounter::new("bind_failures_total", "Binds the API server refused")?,
            unschedulable_gangs: IntGauge::new(
                "unschedulable_gangs",
                "Gangs the last cycle could not schedule",
            )?,
            api_writes: IntCounterVec::new(
                Opts::new("api_writes_total", "API writes by kind and result"),
                &["kind", "result"],
            )?,
            api_write_latency: HistogramVec::new(
                HistogramOpts::new(
                    "api_write_duration_seconds",
                    "How long API writes took, by kind",
                )
                .buckets(LATENCY_BUCKETS.to_vec()),
                &["kind"],
            )?,
            api_reads: IntCounterVec::new(
                Opts::new(
                    "api_reads_total",
                    "API reads besides the watches (a reread after a conflict), by kind and result",
                ),
                &["kind", "result"],
            )?,
            api_read_latency: HistogramVec::new(
                HistogramOpts::new(
                    "api_read_duration_seconds",
                    "How long API reads besides the watches took, by kind",
                )
                .buckets(LATENCY_BUCKETS.to_vec()),
                &["kind"],
            )?,
            bind_permit_wait: histogram(
                "bind_permit_wait_seconds",
                "How long binds and evictions waited for a permit to be sent",
            )?,
            bind_limit: IntGauge::new(
                "bind_concurrency_limit",
                "How many binds and evictions may be in flight now (adaptive)",
            )?,
            status_backlog: IntGauge::new(
                "status_backlog",
                "PodGroups and Queues whose status waits to be written",
            )?,
            leader: IntGauge::new(
                "leader",
                "1 while this replica is the leader (schedules and writes), 0 on a standby",
            )?,
            watch_lag: histogram(
                "watch_lag_seconds",
                "Time from a new pod's creation to its watch event",
            )?,
            victims: IntCounterVec::new(
                Opts::new(
                    "victims_total",
                    "Pods chosen for eviction, by action (preempt, reclaim, release)",
                ),
                &["action"],
            )?,
            placement_searches: IntCounterVec::new(
                Opts::new(
                    "placement_searches_total",
                    "Whole-gang placement searches, by result (placed, none, gave_up)",
                ),
                &["result"],
            )?,
            placement_search_tries: IntCounter::new(
                "placement_search_tries_total",
                "Tries the whole-gang placement searches spent",
            )?,
            volcano: VolcanoMetrics::new()?,
            volcano_registry: Registry::new(),
            ready: AtomicBool::new(false),
            registry,
        };
        m.registry.register(Box::new(m.e2e_latency.clone()))?;
        m.registry.register(Box::new(m.cycle_latency.clone()))?;
        m.registry.register(Box::new(m.action_latency.clone()))?;
        m.registry.register(Box::new(m.pods_bound.clone()))?;
        m.registry.register(Box::new(m.bind_failures.clone()))?;
        m.registry
            .register(Box::new(m.unschedulable_gangs.clone()))?;
        m.registry.register(Box::new(m.api_writes.clone()))?;
        m.registry.register(Box::new(m.api_write_latency.clone()))?;
        m.registry.register(Box::new(m.api_reads.clone()))?;
        m.registry.register(Box::new(m.api_read_latency.clone()))?;
        m.registry.register(Box::new(m.bind_permit_wait.clone()))?;
        m.registry.register(Box::new(m.bind_limit.clone()))?;
        m.registry.register(Box::new(m.status_backlog.clone()))?;
        m.registry.register(Box::new(m.leader.clone()))?;
        m.registry.register(Box::new(m.watch_lag.clone()))?;
        m.registry.register(Box::new(m.victims.clone()))?;
        for action in ["preempt", "reclaim", "release"] {
            m.victims.with_label_values(&[action]);
        }
        m.registry
            .register(Box::new(m.placement_searches.clone()))?;
        m.registry
            .register(Box::new(m.placement_search_tries.clone()))?;
        for result in ["placed", "none", "gave_up"] {
            m.placement_searches.with_label_values(&[result]);
        }
        // Served from the start (a scrape right after the first bind must not miss it).
        for kind in WRITE_KINDS {
            m.api_writes.with_label_values(&[kind, "ok"]);
            m.api_write_latency.with_label_values(&[kind]);
        }
        for kind in READ_KINDS {
            m.api_reads.with_label_values(&[kind, "ok"]);
            m.api_read_latency.with_label_values(&[kind]);
        }
        m.volcano.register(&m.volcano_registry)?;
        Ok(Arc::new(m))
    }

    /// Counts what a cycle's placement searches did.
    pub fn placement_search(&self, stats: &crate::framework::SearchStats) {
        let none = stats.searches - stats.placed - stats.gave_up;
        for (result, n) in [
            ("placed", stats.placed),
            ("none", none),
            ("gave_up", stats.gave_up),
        ] {
            self.placement_searches
                .with_label_values(&[result])
                .inc_by(u64::from(n));
        }
        self.placement_search_tries.inc_by(stats.tries);
    }

    /// Counts one API write, how long it took and how it ended.
    pub fn api_write_timed(
        &self,
        kind: &str,
        took: std::time::Duration,
        error: Option<&::kube::Error>,
    ) {
        self.api_write_latency
            .with_label_values(&[kind])
            .observe(took.as_secs_f64());
        self.api_writes
            .with_label_values(&[kind, &result_label(error)])
            .inc();
    }

    /// Counts one API read (not a watch), how long it took and how it ended.
    pub fn api_read_timed(
        &self,
        kind: &str,
        took: std::time::Duration,
        error: Option<&::kube::Error>,
    ) {
        self.api_read_latency
            .with_label_values(&[kind])
            .observe(took.as_secs_f64());
        self.api_reads
            .with_label_values(&[kind, &result_label(error)])
            .inc();
    }

    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        let encoder = TextEncoder::new();
        let mut families = self.registry.gather();
        families.extend(self.volcano_registry.gather());
        if let Err(e) = encoder.encode(&families, &mut buf) {
            return format!("# error encoding metrics: {e}\n");
        }
        String::from_utf8(buf).unwrap_or_default()
    }
}

/// Every kind of API write the driver makes (label `kind` of `api_writes_total`), with its
/// verb and resource: `binding` POST pods/binding, `eviction` POST pods/eviction, `podgroup
/// status` PATCH podgroups (Volcano's, no status subresource) or podgroups/status,
/// `queue status` PATCH queues/status, `pod condition` PATCH pods/status, `event` POST
/// events, `claim` PATCH persistentvolumeclaims (the selected-node annotation), `queue`
/// POST queues (the default queue, at start).
pub const WRITE_KINDS: [&str; 8] = [
    "binding",
    "eviction",
    "podgroup status",
    "queue status",
    "pod condition",
    "event",
    "claim",
    "queue",
];

/// Every kind of API read besides the watches (label `kind` of `api_reads_total`): a GET of
/// a `podgroup`, `queue` or `pod` whose status write met a conflict.
pub const READ_KINDS: [&str; 3] = ["podgroup", "queue", "pod"];

/// A call's result label: ok, the HTTP code, or unreachable.
fn result_label(error: Option<&::kube::Error>) -> String {
    match error {
        None => "ok".to_string(),
        Some(::kube::Error::Api(s)) => s.code.to_string(),
        Some(_) => "unreachable".to_string(),
    }
}

/// Volcano's scheduler metrics, by Volcano's names and labels: per queue (label
/// `queue_name`) its allocated, deserved and capacity (capability) resources — CPU in
/// millicores, memory in bytes, every other resource in milli-units with label `resource` —
/// weight, share and whether it is overused, and its PodGroups per phase; schedule
/// attempts by result; preemption victims and attempts; latencies in milliseconds.
pub struct VolcanoMetrics {
    queue_gauges: BTreeMap<&'static str, IntGaugeVec>,
    queue_scalars: BTreeMap<&'static str, IntGaugeVec>,
    queue_share: GaugeVec,
    /// Queues (and scalar resources per queue) reported last time, to drop what is gone.
    reported: Mutex<BTreeMap<String, BTreeSet<String>>>,
    pub schedule_attempts: IntCounterVec,
    pub preemption_victims: IntGauge,
    pub preemption_attempts: IntCounter,
    pub unschedule_job_count: IntGauge,
    pub e2e_latency_ms: Histogram,
    pub action_latency_ms: HistogramVec,
}

/// Volcano's per-queue gauges of one value per queue.
const QUEUE_GAUGES: &[(&str, &str)] = &[
    (
        "queue_allocated_milli_cpu",
        "Allocated CPU count for one queue",
    ),
    (
        "queue_allocated_memory_bytes",
        "Allocated memory for one queue",
    ),
    (
        "queue_deserved_milli_cpu",
        "Deserved CPU count for one queue",
    ),
    (
        "queue_deserved_memory_bytes",
        "Deserved memory for one queue",
    ),
    (
        "queue_capacity_milli_cpu",
        "Capacity CPU count for one queue",
    ),
    (
        "queue_capacity_memory_bytes",
        "Capacity memory for one queue",
    ),
    ("queue_weight", "Weight for one queue"),
    ("queue_overused", "If one queue is overused"),
    (
        "queue_pod_group_pending_count",
        "The number of Pending PodGroup in this queue",
    ),
    (
        "queue_pod_group_inqueue_count",
        "The number of Inqueue PodGroup in this queue",
    ),
    (
        "queue_pod_group_running_count",
        "The number of Running PodGroup in this queue",
    ),
    (
        "queue_pod_group_unknown_count",
        "The number of Unknown PodGroup in this queue",
    ),
    (
        "queue_pod_group_completed_count",
        "The number of Completed PodGroup in this queue",
    ),
];

/// Volcano's per-queue gauges of extended resources (label `resource`).
const QUEUE_SCALARS: &[(&str, &str)] = &[
    (
        "queue_allocated_scalar_resources",
        "Allocated scalar resources for one queue",
    ),
    (
        "queue_deserved_scalar_resources",
        "Deserved scalar resources for one queue",
    ),
    (
        "queue_capacity_scalar_resources",
        "Capacity scalar resources for one queue",
    ),
];

/// Volcano's latency buckets (milliseconds): 5 ms doubling, 15 buckets.
fn volcano_buckets() -> Vec<f64> {
    prometheus::exponential_buckets(5.0, 2.0, 15).unwrap_or_default()
}

/// One queue's accounts as the engine's queue plugin computes them.
struct QueueAccount {
    weight: u32,
    allocated: Resource,
    deserved: Resource,
    capacity: Resource,
    share: f64,
    overused: bool,
}

impl VolcanoMetrics {
    fn new() -> Result<Self, prometheus::Error> {
        let name = |n: &str| format!("volcano_{n}");
        let mut queue_gauges = BTreeMap::new();
        for (n, help) in QUEUE_GAUGES {
            queue_gauges.insert(
                *n,
                IntGaugeVec::new(Opts::new(name(n), *help), &["queue_name"])?,
            );
        }
        let mut queue_scalars = BTreeMap::new();
        for (n, help) in QUEUE_SCALARS {
            queue_scalars.insert(
                *n,
                IntGaugeVec::new(Opts::new(name(n), *help), &["queue_name", "resource"])?,
            );
        }
        let attempts = IntCounterVec::new(
            Opts::new(
                name("schedule_attempts_total"),
                "Number of attempts to schedule pods, by the result. 'unschedulable' means a pod \
                 could not be scheduled, while 'error' means an internal scheduler problem.",
            ),
            &["result"],
        )?;
        for result in ["scheduled", "unschedulable", "error"] {
            attempts.with_label_values(&[result]);
        }
        Ok(VolcanoMetrics {
            queue_gauges,
            queue_scalars,
            queue_share: GaugeVec::new(
                Opts::new(name("queue_share"), "Share for one queue"),
                &["queue_name"],
            )?,
            reported: Mutex::new(BTreeMap::new()),
            schedule_attempts: attempts,
            preemption_victims: IntGauge::new(
                name("pod_preemption_victims"),
                "Number of selected preemption victims",
            )?,
            preemption_attempts: IntCounter::new(
                name("total_preemption_attempts"),
                "Total preemption attempts in the cluster till now",
            )?,
            unschedule_job_count: IntGauge::new(
                name("unschedule_job_count"),
                "Number of jobs could not be scheduled",
            )?,
            e2e_latency_ms: Histogram::with_opts(
                HistogramOpts::new(
                    name("e2e_scheduling_latency_milliseconds"),
                    "E2e scheduling latency in milliseconds (scheduling algorithm + binding)",
                )
                .buckets(volcano_buckets()),
            )?,
            action_latency_ms: HistogramVec::new(
                HistogramOpts::new(
                    name("action_scheduling_latency_milliseconds"),
                    "Action scheduling latency in milliseconds",
                )
                .buckets(volcano_buckets()),
                &["action"],
            )?,
        })
    }

    fn register(&self, r: &Registry) -> Result<(), prometheus::Error> {
        for g in self
            .queue_gauges
            .values()
            .chain(self.queue_scalars.values())
        {
            r.register(Box::new(g.clone()))?;
        }
        r.register(Box::new(self.queue_share.clone()))?;
        r.register(Box::new(self.schedule_attempts.clone()))?;
        r.register(Box::new(self.preemption_victims.clone()))?;
        r.register(Box::new(self.preemption_attempts.clone()))?;
        r.register(Box::new(self.unschedule_job_count.clone()))?;
        r.register(Box::new(self.e2e_latency_ms.clone()))?;
        r.register(Box::new(self.action_latency_ms.clone()))?;
        Ok(())
    }

    fn set(&self, metric: &str, queue: &str, value: i64) {
        if let Some(g) = self.queue_gauges.get(metric) {
            g.with_label_values(&[queue]).set(value);
        }
    }

    /// Every queue's accounts after a cycle: what the configured queue plugin (`capacity`,
    /// else `proportion`'s water-filling) says it holds, deserves and may use, and its
    /// PodGroups per phase. Queues and resources no longer there are dropped.
    pub fn observe_queues(&self, state: &ClusterState, conf: &SchedulerConf) {
        let accounts = queue_accounts(state, conf);
        let scalars: BTreeSet<String> = state
            .total_allocatable()
            .dimensions()
            .map(|(n, _)| n)
            .filter(|n| ![CPU, MEMORY, PODS].contains(n))
            .map(String::from)
            .collect();
        let mut reported = self.reported.lock().unwrap_or_else(|e| e.into_inner());
        for (queue, a) in &accounts {
            let q: &str = queue;
            for (prefix, r) in [
                ("allocated", &a.allocated),
                ("deserved", &a.deserved),
                ("capacity", &a.capacity),
            ] {
                self.set(&format!("queue_{prefix}_milli_cpu"), q, r.get(CPU));
                self.set(&format!("queue_{prefix}_memory_bytes"), q, r.get(MEMORY));
                let key = format!("queue_{prefix}_scalar_resources");
                if let Some(g) = self.queue_scalars.get(key.as_str()) {
                    for name in &scalars {
                        g.with_label_values(&[q, name]).set(r.get(name));
                    }
                }
            }
            self.set("queue_weight", q, i64::from(a.weight));
            self.set("queue_overused", q, i64::from(a.overused));
            self.queue_share.with_label_values(&[q]).set(a.share);
            let counts = state.tally().queue(q).map(|s| s.phases).unwrap_or_default();
            for (i, phase) in ["pending", "inqueue", "running", "unknown", "completed"]
                .iter()
                .enumerate()
            {
                self.set(
                    &format!("queue_pod_group_{phase}_count"),
                    q,
                    i64::from(counts[i]),
                );
            }
        }
        for (queue, before) in reported.iter() {
            let gone = !accounts.contains_key(queue.as_str());
            if gone {
                for g in self.queue_gauges.values() {
                    let _ = g.remove_label_values(&[queue]);
                }
                let _ = self.queue_share.remove_label_values(&[queue]);
            }
            for name in before.iter().filter(|n| gone || !scalars.contains(*n)) {
                for g in self.queue_scalars.values() {
                    let _ = g.remove_label_values(&[queue, name]);
                }
            }
        }
        *reported = accounts
            .keys()
            .map(|q| (q.to_string(), scalars.clone()))
            .collect();
    }
}

/// Queue accounts from the configured plugin's own computation.
fn queue_accounts(state: &ClusterState, conf: &SchedulerConf) -> BTreeMap<String, QueueAccount> {
    let tree = crate::model::QueueTree::new(state.queues());
    let capacity_plugin = conf
        .tiers
        .iter()
        .flat_map(|t| &t.plugins)
        .any(|p| p.name == "capacity");
    let weights: BTreeMap<&str, u32> = state.queues().map(|q| (&*q.name, q.weight)).collect();
    if capacity_plugin {
        crate::plugins::capacity::session_attrs(state, &tree)
            .into_iter()
            .map(|(name, a)| {
                let overused = a.deserved.dimensions().next().is_some()
                    && a.deserved
                        .dimensions()
                        .all(|(n, d)| a.allocated.get(n) >= d);
                let account = QueueAccount {
                    weight: weights.get(&*name).copied().unwrap_or(0),
                    share: share(&a.allocated, &a.deserved),
                    overused,
                    allocated: a.allocated,
                    deserved: a.deserved,
                    capacity: a.real_capability,
                };
                (name.to_string(), account)
            })
            .collect()
    } else {
        crate::plugins::proportion::queue_shares(state, &tree)
            .into_iter()
            .map(|(name, q)| {
                let account = QueueAccount {
                    weight: q.weight,
                    share: q.share(),
                    overused: q.overused(),
                    allocated: q.allocated,
                    deserved: q.deserved,
                    capacity: q.capability,
                };
                (name.to_string(), account)
            })
            .collect()
    }
}

/// The largest allocated / deserved ratio over the dimensions deserved names.
fn share(allocated: &Resource, deserved: &Resource) -> f64 {
    deserved
        .dimensions()
        .filter(|(_, d)| *d > 0)
        .map(|(n, d)| allocated.get(n) as f64 / d as f64)
        .fold(0.0, f64::max)
}

/// Ready once every watched kind is listed, leader or standby: a standby with a warm
/// cache is what a rollout waits for (were a standby unready, a rolling update of a
/// Deployment with a leader would never finish). Which one this is says the
/// `X-Rust-Batch-Leader` header (`true`/`false`) and the body (`ok: leader`,
/// `ok: standby`).
fn readyz(m: &Metrics) -> impl axum::response::IntoResponse {
    let leader = m.leader.get() == 1;
    let header = [("x-rust-batch-leader", if leader { "true" } else { "false" })];
    if m.ready.load(Ordering::Relaxed) {
        let body = if leader { "ok: leader" } else { "ok: standby" };
        (StatusCode::OK, header, body)
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            header,
            "waiting for the lists of every watched kind",
        )
    }
}

/// Serves /metrics, /healthz and /readyz, plus the driver's `extra` routes (the gang debug
/// API), until the process ends.
pub async fn serve(addr: SocketAddr, metrics: Arc<Metrics>, extra: Router) -> std::io::Result<()> {
    let m = metrics.clone();
    let r = metrics.clone();
    let app = Router::new()
        .route("/metrics", get(move || async move { m.render() }))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(move || async move { readyz(&r) }))
        .merge(extra);
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(address = %listener.local_addr()?, "serving /metrics, /healthz, /readyz");
    axum::serve(listener, app).await
}
