//! Volcano's scheduler metrics (v1.15.1's `pkg/scheduler/metrics`), by Volcano's names,
//! labels, units and histogram buckets, so the dashboards Volcano ships work on rust-batch
//! unchanged. What each one measures here, and why the few Volcano has that rust-batch does
//! not export are left out, is in `docs/src/volcano-metrics.md`;
//! `tests/offline/volcano_dashboards.rs` checks `catalogue` against the dashboards and against
//! Volcano's own definitions.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus::core::Collector;
use prometheus::proto::MetricType;
use prometheus::{
    GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry,
};

use crate::cache::Cache;
use crate::conf::SchedulerConf;
use crate::framework::{Bind, SessionHook};
use crate::model::resource::{CPU, MEMORY, PODS};
use crate::model::{PodGroupPhase, Resource, Timestamp};
use crate::snapshot::ClusterState;

/// Go's `prometheus.ExponentialBucketsRange(min, max, count)`: `count` upper bounds from
/// `min` to `max`, each the same factor above the one before (computed as Go does, so the
/// `le` labels are Volcano's).
pub fn exponential_buckets_range(min: f64, max: f64, count: usize) -> Vec<f64> {
    let growth = (max / min).powf(1.0 / (count as f64 - 1.0));
    (0..count).map(|i| min * growth.powf(i as f64)).collect()
}

/// Volcano's bucket layouts, (min, max, count) of `exponential_buckets_range`.
mod buckets {
    /// A session (`e2e_scheduling_latency_milliseconds`) and its opening.
    pub const SESSION: (f64, f64, usize) = (1.0, 5000.0, 20);
    pub const ACTION: (f64, f64, usize) = (1.0, 2000.0, 20);
    pub const PLUGIN: (f64, f64, usize) = (0.1, 100.0, 15);
    /// A pod's creation to a stage of its scheduling.
    pub const TASK: (f64, f64, usize) = (50.0, 60000.0, 30);
    /// One stage of one pod's scheduling (pre-bind, bind).
    pub const STAGE: (f64, f64, usize) = (0.1, 500.0, 20);
    /// A gang's creation to its last pod placed.
    pub const JOB: (f64, f64, usize) = (100.0, 120000.0, 30);
}

fn histogram_opts(name: &str, help: &str, (min, max, count): (f64, f64, usize)) -> HistogramOpts {
    HistogramOpts::new(format!("volcano_{name}"), help)
        .buckets(exponential_buckets_range(min, max, count))
}

fn opts(name: &str, help: &str) -> Opts {
    Opts::new(format!("volcano_{name}"), help)
}

/// Label `stage` of `task_scheduling_latency_milliseconds`: a pod's creation to its watch
/// event, to the cycle that placed it, to its bind being ready to send, to its bind answered.
pub const TASK_STAGES: [&str; 4] = ["Watched", "Assumed", "PreBound", "Bound"];

/// Label `stage` of `scheduling_stage_duration_milliseconds` that rust-batch reports:
/// `PreBind` (a gang's wait for its claims to be provisioned) and `Bind` (the bind call).
/// Volcano's `Predicate` and `Scoring` run inside the engine, which reads no clock.
pub const STAGES: [&str; 2] = ["PreBind", "Bind"];

/// What a queue's resource gauges say, each a CPU (millicores), a memory (bytes) and a
/// scalar (milli-units, label `resource`) gauge: (what, help of each).
const QUEUE_RESOURCES: [(&str, [&str; 3]); 5] = [
    (
        "allocated",
        [
            "Allocated CPU count for one queue",
            "Allocated memory for one queue",
            "Allocated scalar resources for one queue",
        ],
    ),
    (
        "request",
        [
            "Request CPU count for one queue",
            "Request memory for one queue",
            "Request scalar resources for one queue",
        ],
    ),
    (
        "deserved",
        [
            "Deserved CPU count for one queue",
            "Deserved memory for one queue",
            "Deserved scalar resources for one queue",
        ],
    ),
    (
        "capacity",
        [
            "Capacity CPU count for one queue",
            "Capacity memory for one queue",
            "Capacity scalar resources for one queue",
        ],
    ),
    (
        "real_capacity",
        [
            "Real capacity (what it may hold, borrowing included) CPU count for one queue",
            "Real capacity memory for one queue",
            "Real capacity scalar resources for one queue",
        ],
    ),
];

/// Volcano's per-queue gauges of one value per queue besides the resources.
const QUEUE_VALUES: &[(&str, &str)] = &[
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

/// One metric as registered: what `catalogue` lists.
#[derive(Clone, Debug, PartialEq)]
pub struct MetricInfo {
    pub name: String,
    /// `counter`, `gauge`, `histogram` or `summary`.
    pub kind: &'static str,
    /// The variable labels, in order.
    pub labels: Vec<String>,
    /// A histogram's upper bounds (empty otherwise).
    pub buckets: Vec<f64>,
}

/// Label values of a gang's per-job series: `job_name`, `queue`, `job_namespace`.
type JobLabels = [String; 3];

/// What the last passes set, to drop the series of what is gone and to set only what
/// changed (a pass over ten thousand gangs then does one map lookup per gang).
#[derive(Default)]
struct Reported {
    /// Per-queue series: (metric, label values).
    queue_series: HashSet<(String, Vec<String>)>,
    /// Per-gang series, by gang uid.
    gangs: HashMap<Arc<str>, GangSeries>,
    /// Passes of `observe_jobs` so far (a gang the latest did not see is gone).
    passes: u64,
}

/// What one gang's series say.
struct GangSeries {
    namespace: Arc<str>,
    name: Arc<str>,
    /// Label values of its start time, duration and last time series, once set.
    labels: Option<JobLabels>,
    /// `unschedule_task_count` (label `job_id`: its name) as last set.
    unready: Option<i64>,
    /// `job_share` (labels `job_ns`, `job_id`) as last set.
    share: Option<f64>,
    /// The last pass that saw it.
    seen: u64,
}

impl GangSeries {
    fn new(job: &crate::model::JobInfo, seen: u64) -> Self {
        GangSeries {
            namespace: job.namespace.clone(),
            name: job.name.clone(),
            labels: None,
            unready: None,
            share: None,
            seen,
        }
    }
}

/// Volcano's scheduler metrics.
pub struct VolcanoMetrics {
    /// Per-queue gauges by name (without `volcano_`): label `queue_name`, and `resource` for
    /// the scalar ones.
    queue_gauges: BTreeMap<String, IntGaugeVec>,
    queue_share: GaugeVec,
    pub schedule_attempts: IntCounterVec,
    pub preemption_victims: IntGauge,
    pub preemption_attempts: IntCounter,
    unschedule_job_count: IntGauge,
    unschedule_task_count: IntGaugeVec,
    job_share: GaugeVec,
    e2e_latency_ms: Histogram,
    open_session_ms: Histogram,
    action_latency_ms: HistogramVec,
    plugin_latency_ms: HistogramVec,
    task_latency_ms: HistogramVec,
    stage_duration_ms: HistogramVec,
    job_latency_ms: Histogram,
    job_duration_ms: GaugeVec,
    job_start_time: GaugeVec,
    job_last_time: GaugeVec,
    reported: Mutex<Reported>,
}

const JOB_LABELS: &[&str] = &["job_name", "queue", "job_namespace"];

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

impl VolcanoMetrics {
    pub(super) fn new() -> Result<Self, prometheus::Error> {
        let mut queue_gauges = BTreeMap::new();
        for (what, helps) in QUEUE_RESOURCES {
            for (unit, help) in ["milli_cpu", "memory_bytes"].iter().zip(helps) {
                let name = format!("queue_{what}_{unit}");
                let g = IntGaugeVec::new(opts(&name, help), &["queue_name"])?;
                queue_gauges.insert(name, g);
            }
            let name = format!("queue_{what}_scalar_resources");
            let g = IntGaugeVec::new(opts(&name, helps[2]), &["queue_name", "resource"])?;
            queue_gauges.insert(name, g);
        }
        for (name, help) in QUEUE_VALUES {
            let g = IntGaugeVec::new(opts(name, help), &["queue_name"])?;
            queue_gauges.insert(name.to_string(), g);
        }
        let schedule_attempts = IntCounterVec::new(
            opts(
                "schedule_attempts_total",
                "Number of attempts to schedule pods, by the result. 'unschedulable' means a pod \
                 could not be scheduled, while 'error' means an internal scheduler problem.",
            ),
            &["result"],
        )?;
        for result in ["scheduled", "unschedulable", "error"] {
            schedule_attempts.with_label_values(&[result]);
        }
        let job_gauge = |name: &str, help: &str| GaugeVec::new(opts(name, help), JOB_LABELS);
        let m = VolcanoMetrics {
            queue_gauges,
            queue_share: GaugeVec::new(
                opts("queue_share", "Share for one queue"),
                &["queue_name"],
            )?,
            schedule_attempts,
            preemption_victims: IntGauge::with_opts(opts(
                "pod_preemption_victims",
                "Number of selected preemption victims",
            ))?,
            preemption_attempts: IntCounter::with_opts(opts(
                "total_preemption_attempts",
                "Total preemption attempts in the cluster till now",
            ))?,
            unschedule_job_count: IntGauge::with_opts(opts(
                "unschedule_job_count",
                "Number of jobs could not be scheduled",
            ))?,
            unschedule_task_count: IntGaugeVec::new(
                opts(
                    "unschedule_task_count",
                    "Number of tasks could not be scheduled",
                ),
                &["job_id"],
            )?,
            job_share: GaugeVec::new(
                opts("job_share", "Share for one job"),
                &["job_ns", "job_id"],
            )?,
            e2e_latency_ms: Histogram::with_opts(histogram_opts(
                "e2e_scheduling_latency_milliseconds",
                "Duration of a single scheduling session execution in milliseconds. It covers \
                 the entire cycle from session open, action executions to session close.",
                buckets::SESSION,
            ))?,
            open_session_ms: Histogram::with_opts(histogram_opts(
                "open_session_duration_milliseconds",
                "Duration of opening a scheduling session in milliseconds, including cache \
                 snapshot and session initialization.",
                buckets::SESSION,
            ))?,
            action_latency_ms: HistogramVec::new(
                histogram_opts(
                    "action_scheduling_latency_milliseconds",
                    "Action scheduling latency in milliseconds",
                    buckets::ACTION,
                ),
                &["action"],
            )?,
            plugin_latency_ms: HistogramVec::new(
                histogram_opts(
                    "plugin_scheduling_latency_milliseconds",
                    "Plugin scheduling latency in milliseconds",
                    buckets::PLUGIN,
                ),
                &["plugin", "OnSession"],
            )?,
            task_latency_ms: HistogramVec::new(
                histogram_opts(
                    "task_scheduling_latency_milliseconds",
                    "Task scheduling latency from creation to various stages in milliseconds",
                    buckets::TASK,
                ),
                &["stage"],
            )?,
            stage_duration_ms: HistogramVec::new(
                histogram_opts(
                    "scheduling_stage_duration_milliseconds",
                    "Duration of per-task scheduling stages (PreBind, Bind) in milliseconds",
                    buckets::STAGE,
                ),
                &["stage"],
            )?,
            job_latency_ms: Histogram::with_opts(histogram_opts(
                "e2e_job_scheduling_latency_milliseconds",
                "End-to-end job scheduling latency in milliseconds (histogram of per-job \
                 duration from creation to last task assumed)",
                buckets::JOB,
            ))?,
            job_duration_ms: job_gauge(
                "e2e_job_scheduling_duration",
                "Per-job duration from job creation to last task assumed in scheduler cache, \
                 in milliseconds",
            )?,
            job_start_time: job_gauge(
                "e2e_job_scheduling_start_time",
                "E2E job scheduling start time",
            )?,
            job_last_time: job_gauge(
                "e2e_job_scheduling_last_time",
                "E2E job scheduling last time",
            )?,
            reported: Mutex::new(Reported::default()),
        };
        // Served from the start, as rust-batch's own are: the stages it reports.
        for stage in TASK_STAGES {
            m.task_latency_ms.with_label_values(&[stage]);
        }
        for stage in STAGES {
            m.stage_duration_ms.with_label_values(&[stage]);
        }
        Ok(m)
    }

    /// Every collector, once: what `register` registers and `catalogue` lists.
    fn collectors(&self) -> Vec<Box<dyn Collector>> {
        let mut all: Vec<Box<dyn Collector>> = self
            .queue_gauges
            .values()
            .map(|g| Box::new(g.clone()) as Box<dyn Collector>)
            .collect();
        all.extend([
            Box::new(self.queue_share.clone()) as Box<dyn Collector>,
            Box::new(self.schedule_attempts.clone()),
            Box::new(self.preemption_victims.clone()),
            Box::new(self.preemption_attempts.clone()),
            Box::new(self.unschedule_job_count.clone()),
            Box::new(self.unschedule_task_count.clone()),
            Box::new(self.job_share.clone()),
            Box::new(self.e2e_latency_ms.clone()),
            Box::new(self.open_session_ms.clone()),
            Box::new(self.action_latency_ms.clone()),
            Box::new(self.plugin_latency_ms.clone()),
            Box::new(self.task_latency_ms.clone()),
            Box::new(self.stage_duration_ms.clone()),
            Box::new(self.job_latency_ms.clone()),
            Box::new(self.job_duration_ms.clone()),
            Box::new(self.job_start_time.clone()),
            Box::new(self.job_last_time.clone()),
        ]);
        all
    }

    pub(super) fn register(&self, r: &Registry) -> Result<(), prometheus::Error> {
        for c in self.collectors() {
            r.register(c)?;
        }
        Ok(())
    }

    /// Every Volcano metric rust-batch registers: name, type, labels and buckets, read from
    /// the collectors themselves (a fresh set: reading a histogram's buckets needs a series,
    /// and the served metrics get none they did not observe).
    pub fn catalogue() -> Result<Vec<MetricInfo>, prometheus::Error> {
        let fresh = VolcanoMetrics::new()?;
        let mut all = Vec::new();
        for c in fresh.collectors() {
            let desc = c.desc()[0].clone();
            let family = &c.collect()[0];
            let kind = match family.get_field_type() {
                MetricType::COUNTER => "counter",
                MetricType::GAUGE => "gauge",
                MetricType::HISTOGRAM => "histogram",
                MetricType::SUMMARY => "summary",
                MetricType::UNTYPED => "untyped",
            };
            let mut buckets = Vec::new();
            if kind == "histogram" {
                let probe = if desc.variable_labels.is_empty() {
                    Some(family.clone())
                } else {
                    probe_histogram(&fresh, &desc.fq_name)
                };
                let probe = probe.ok_or_else(|| {
                    prometheus::Error::Msg(format!("no series to read {}'s buckets", desc.fq_name))
                })?;
                if let Some(m) = probe.get_metric().first() {
                    buckets = m
                        .get_histogram()
                        .get_bucket()
                        .iter()
                        .map(|b| b.upper_bound())
                        .collect();
                }
            }
            all.push(MetricInfo {
                name: desc.fq_name.clone(),
                kind,
                labels: desc.variable_labels.clone(),
                buckets,
            });
        }
        Ok(all)
    }

    // ----- what the driver reports -----------------------------------------------------

    /// One whole cycle: snapshot, session open, actions, session close.
    pub fn observe_session(&self, took: Duration) {
        self.e2e_latency_ms.observe(ms(took));
    }

    /// A session opened: snapshot and every plugin's registration.
    pub fn observe_open_session(&self, took: Duration) {
        self.open_session_ms.observe(ms(took));
    }

    pub fn observe_action(&self, action: &str, took: Duration) {
        self.action_latency_ms
            .with_label_values(&[action])
            .observe(ms(took));
    }

    pub fn observe_plugin(&self, plugin: &str, hook: SessionHook, took: Duration) {
        self.plugin_latency_ms
            .with_label_values(&[plugin, hook.volcano_name()])
            .observe(ms(took));
    }

    /// The histogram of a pod's creation to a stage of `TASK_STAGES` (the index keeps the
    /// `Watched` one).
    pub fn task_stage(&self, stage: &str) -> Histogram {
        self.task_latency_ms.with_label_values(&[stage])
    }

    /// A pod reached `stage` now; it was created at `created` (0: unknown, not counted).
    pub fn observe_task_stage(&self, stage: &str, created: Timestamp, now: Timestamp) {
        if created > 0 {
            self.task_latency_ms
                .with_label_values(&[stage])
                .observe((now - created).max(0) as f64);
        }
    }

    /// One stage of `STAGES` took `took` for one pod.
    pub fn observe_stage(&self, stage: &str, took: Duration) {
        self.stage_duration_ms
            .with_label_values(&[stage])
            .observe(ms(took));
    }

    /// A cycle's binds, as it decided them (Volcano's "assumed"): each pod's creation to
    /// now, and each gang's creation to now (its last pod placed so far), once per gang.
    pub fn observe_assumed(&self, cache: &Cache, binds: &[Bind], now: Timestamp) {
        if binds.is_empty() {
            return;
        }
        let state = cache.state();
        let mut gangs: HashSet<&str> = HashSet::new();
        let mut reported = self.reported();
        for b in binds {
            if let Some(p) = cache.pod(&b.task) {
                self.observe_task_stage("Assumed", p.task.created, now);
            }
            if !gangs.insert(&b.job) {
                continue;
            }
            let Some(job) = state.job_by_uid(&b.job).map(|id| state.job(id)) else {
                continue;
            };
            if job.created <= 0 {
                continue;
            }
            let took = (now - job.created).max(0) as f64;
            let seen = reported.passes;
            let gang = reported
                .gangs
                .entry(job.uid.clone())
                .or_insert_with(|| GangSeries::new(job, seen));
            let labels = gang.labels.get_or_insert_with(|| {
                let labels = job_labels(&job.name, &job.queue, &job.namespace);
                self.job_start_time
                    .with_label_values(&label_refs(&labels))
                    .set((job.created / 1000) as f64);
                labels
            });
            let values = label_refs(labels);
            self.job_duration_ms.with_label_values(&values).set(took);
            self.job_latency_ms.observe(took);
            self.job_last_time
                .with_label_values(&values)
                .set((now / 1000) as f64);
        }
    }

    /// Binds about to be sent, their pre-bind work done (Volcano's "PreBound"): each pod's
    /// creation to now; `waited` is how long each waited for its gang's claims to be
    /// provisioned (Volcano's `PreBind` stage), empty for binds that had none to wait for.
    pub fn observe_pre_bound(&self, cache: &Cache, binds: &[Bind], waited: &[i64], now: Timestamp) {
        for b in binds {
            if let Some(p) = cache.pod(&b.task) {
                self.observe_task_stage("PreBound", p.task.created, now);
            }
        }
        for w in waited {
            self.observe_stage("PreBind", Duration::from_millis((*w).max(0) as u64));
        }
    }

    fn reported(&self) -> std::sync::MutexGuard<'_, Reported> {
        self.reported.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A histogram's family with one series, from `m`'s collector named `name` (a vec gets a
/// series with empty label values; `m` is a copy nothing serves).
fn probe_histogram(m: &VolcanoMetrics, name: &str) -> Option<prometheus::proto::MetricFamily> {
    let vecs = [
        &m.action_latency_ms,
        &m.plugin_latency_ms,
        &m.task_latency_ms,
        &m.stage_duration_ms,
    ];
    for v in vecs {
        let family = &v.collect()[0];
        if family.name() != name {
            continue;
        }
        let arity = v.desc()[0].variable_labels.len();
        let values: Vec<&str> = (0..arity).map(|_| "").collect();
        v.with_label_values(&values);
        return v.collect().into_iter().next();
    }
    None
}

mod gauges;
use gauges::{job_labels, label_refs};

#[cfg(test)]
mod tests;
