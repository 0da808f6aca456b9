//! Prometheus metrics and the HTTP endpoints: /metrics, /healthz, /readyz.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts,
    Registry, TextEncoder,
};

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
    /// API writes by kind (binding, eviction, podgroup status, queue status, event) and
    /// result (ok, or the failure's code).
    pub api_writes: IntCounterVec,
    /// Objects whose status waits to be written.
    pub status_backlog: IntGauge,
    /// 1 while this replica holds the leader lease (always 1 without leader election).
    pub leader: IntGauge,
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
            status_backlog: IntGauge::new(
                "status_backlog",
                "PodGroups and Queues whose status waits to be written",
            )?,
            leader: IntGauge::new(
                "leader",
                "1 while this replica is the leader (schedules and writes), 0 on a standby",
            )?,
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
        m.registry.register(Box::new(m.status_backlog.clone()))?;
        m.registry.register(Box::new(m.leader.clone()))?;
        Ok(Arc::new(m))
    }

    /// Counts one API write and how it ended.
    pub fn api_write(&self, kind: &str, error: Option<&::kube::Error>) {
        let result = match error {
            None => "ok".to_string(),
            Some(::kube::Error::Api(s)) => s.code.to_string(),
            Some(_) => "unreachable".to_string(),
        };
        self.api_writes.with_label_values(&[kind, &result]).inc();
    }

    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        let encoder = TextEncoder::new();
        if let Err(e) = encoder.encode(&self.registry.gather(), &mut buf) {
            return format!("# error encoding metrics: {e}\n");
        }
        String::from_utf8(buf).unwrap_or_default()
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
