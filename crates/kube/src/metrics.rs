//! Prometheus metrics and the HTTP endpoints: /metrics, /healthz, /readyz.
//!
//! Two families: `rust_batch_*`, our own, and `volcano_*`, with the names, label sets, units
//! and buckets of Volcano's scheduler (see `volcano`), so dashboards built for Volcano keep
//! working. README's "Metrics" list names every one; an e2e test scrapes a running
//! scheduler for each name it lists.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts,
    Registry, TextEncoder,
};

use crate::framework::{CycleObserver, Session, SessionHook};

mod volcano;
pub use volcano::{exponential_buckets_range, MetricInfo, VolcanoMetrics, STAGES, TASK_STAGES};

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
    /// Per waiting gang with a predicted start (--predict-start), that time (Unix seconds).
    pub predicted_start: prometheus::GaugeVec,
    /// Waiting gangs whose start could not be predicted (--predict-start).
    pub predicted_start_unknown: IntGauge,
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
    /// Fair share over time: the usage half-life the configuration weighs shares by,
    /// seconds (0: off), and each queue's decayed average use of each resource.
    pub usage_half_life: prometheus::Gauge,
    pub queue_usage: prometheus::GaugeVec,
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
            predicted_start: prometheus::GaugeVec::new(
                Opts::new(
                    "gang_predicted_start_seconds",
                    "Predicted start of each waiting gang, Unix time, by the runtime estimates",
                ),
                &["namespace", "name"],
            )?,
            predicted_start_unknown: IntGauge::new(
                "gangs_start_unknown",
                "Waiting gangs whose start time cannot be predicted (a runtime estimate is missing)",
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
            usage_half_life: prometheus::Gauge::new(
                "queue_usage_half_life_seconds",
                "Fair share over time: the half-life queue usage decays with (0: off)",
            )?,
            queue_usage: prometheus::GaugeVec::new(
                Opts::new(
                    "queue_usage",
                    "Fair share over time: each queue's decayed average use of a resource \
                     (cores, bytes, GPUs)",
                ),
                &["queue", "resource"],
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
        m.registry.register(Box::new(m.predicted_start.clone()))?;
        m.registry
            .register(Box::new(m.predicted_start_unknown.clone()))?;
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
        m.registry.register(Box::new(m.usage_half_life.clone()))?;
        m.registry.register(Box::new(m.queue_usage.clone()))?;
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

/// Times one cycle's steps for both families: each action, and Volcano's per-plugin
/// session hooks, session opening and whole session. The engine reads no clock: it tells
/// this observer where it is (see `CycleObserver`).
pub struct CycleTimer<'a> {
    metrics: &'a Metrics,
    /// How long taking the snapshot the session opens on took: Volcano's session opening
    /// and session include it.
    snapshot_took: Duration,
    started: Instant,
    step: Instant,
}

impl<'a> CycleTimer<'a> {
    /// A cycle starting now on a snapshot that took `snapshot_took` to take.
    pub fn start(metrics: &'a Metrics, snapshot_took: Duration) -> Self {
        let now = Instant::now();
        CycleTimer {
            metrics,
            snapshot_took,
            started: now,
            step: now,
        }
    }

    /// The cycle ended: how long it took (its snapshot not included).
    pub fn finish(self) -> Duration {
        let took = self.started.elapsed();
        self.metrics.cycle_latency.observe(took.as_secs_f64());
        self.metrics
            .volcano
            .observe_session(self.snapshot_took + took);
        took
    }
}

impl CycleObserver for CycleTimer<'_> {
    fn plugin(&mut self, plugin: &'static str, hook: SessionHook, starting: bool) {
        if starting {
            self.step = Instant::now();
        } else {
            self.metrics
                .volcano
                .observe_plugin(plugin, hook, self.step.elapsed());
        }
    }

    fn opened(&mut self, _: &Session) {
        self.metrics
            .volcano
            .observe_open_session(self.snapshot_took + self.started.elapsed());
    }

    fn action(&mut self, action: &'static str, starting: bool, _: &Session) {
        if starting {
            self.step = Instant::now();
        } else {
            let took = self.step.elapsed();
            self.metrics
                .action_latency
                .with_label_values(&[action])
                .observe(took.as_secs_f64());
            self.metrics.volcano.observe_action(action, took);
        }
    }
}

/// Every kind of API write the driver makes (label `kind` of `api_writes_total`), with its
/// verb and resource: `binding` POST pods/binding, `eviction` POST pods/eviction, `podgroup
/// status` PATCH podgroups (Volcano's, no status subresource) or podgroups/status,
/// `queue status` PATCH queues/status, `pod condition` PATCH pods/status, `event` POST
/// events, `claim` PATCH persistentvolumeclaims (the selected-node annotation), `queue`
/// POST queues (the default queue, at start).
pub const WRITE_KINDS: [&str; 9] = [
    "binding",
    "eviction",
    "podgroup status",
    "queue status",
    "pod condition",
    "event",
    "claim",
    "queue",
    "queue usage",
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

impl Metrics {
    /// The last cycle's predicted starts: one gauge per gang with a time (the set replaced
    /// every cycle, so gangs that started or left are gone), and the count of unknowns.
    /// Fair share over time: every queue's usage (`Scheduler::queue_usage`), or none.
    pub fn queue_usages(&self, usage: Option<&crate::framework::UsageLedger>) {
        self.queue_usage.reset();
        let Some(usage) = usage else {
            self.usage_half_life.set(0.0);
            return;
        };
        self.usage_half_life.set(usage.half_life() as f64 / 1000.0);
        for (queue, u) in usage.queues() {
            for (resource, amount) in &u.amounts {
                self.queue_usage
                    .with_label_values(&[&**queue, resource.as_str()])
                    .set(*amount);
            }
        }
    }

    pub fn predicted_starts(&self, predictions: &[(Arc<str>, crate::framework::PredictedStart)]) {
        use crate::framework::PredictedStart;
        self.predicted_start.reset();
        let mut unknown = 0;
        for (uid, p) in predictions {
            match p {
                PredictedStart::At(at) => {
                    let (ns, name) = uid.split_once('/').unwrap_or(("", uid));
                    self.predicted_start
                        .with_label_values(&[ns, name])
                        .set(*at as f64 / 1000.0);
                }
                PredictedStart::Unknown(_) => unknown += 1,
            }
        }
        self.predicted_start_unknown.set(unknown);
    }
}
