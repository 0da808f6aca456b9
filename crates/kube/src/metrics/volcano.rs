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

    /// After a cycle, what Volcano's gang plugin reports as its session closes: per gang
    /// with pods, how many more must be placed for its minimum (`unschedule_task_count`,
    /// label `job_id` = its name, as Volcano has it; 0 once it is whole) and how many gangs
    /// are short (`unschedule_job_count`); with `drf` configured, each gang's dominant
    /// share (`job_share`, as drf orders gangs by it). Also each gang's creation time
    /// (Volcano sets it when it sees the PodGroup), and the per-job series of gangs gone are
    /// dropped.
    pub fn observe_jobs(&self, state: &ClusterState, conf: &SchedulerConf) {
        let drf = conf
            .tiers
            .iter()
            .flat_map(|t| &t.plugins)
            .any(|p| p.name == "drf");
        let total = state.total_allocatable();
        let mut reported = self.reported();
        reported.passes += 1;
        let pass = reported.passes;
        let mut short = 0;
        for (_, job) in state.jobs() {
            let gang = match reported.gangs.get_mut(&job.uid) {
                Some(g) => g,
                None => reported
                    .gangs
                    .entry(job.uid.clone())
                    .or_insert_with(|| GangSeries::new(job, pass)),
            };
            gang.seen = pass;
            if job.created > 0 && gang.labels.is_none() {
                let labels = job_labels(&job.name, &job.queue, &job.namespace);
                self.job_start_time
                    .with_label_values(&label_refs(&labels))
                    .set((job.created / 1000) as f64);
                gang.labels = Some(labels);
            }
            let share = drf.then(|| crate::plugins::drf::dominant_share(&job.allocated, &total));
            if gang.share != share {
                let values = [&*job.namespace, &*job.name];
                match share {
                    Some(v) => self.job_share.with_label_values(&values).set(v),
                    // drf no longer configured.
                    None => {
                        let _ = self.job_share.remove_label_values(&values);
                    }
                }
                gang.share = share;
            }
            if job.tasks().is_empty() {
                continue;
            }
            let missing = (i64::from(job.min_member) - i64::from(job.ready_count())).max(0);
            if missing > 0 {
                short += 1;
            }
            // Volcano leaves a terminated gang's last count as it was, until it is deleted.
            if job.phase != PodGroupPhase::Completed && gang.unready != Some(missing) {
                self.unschedule_task_count
                    .with_label_values(&[&*job.name])
                    .set(missing);
                gang.unready = Some(missing);
            }
        }
        self.unschedule_job_count.set(short);
        // Gangs gone take their series along.
        let mut names_dropped = HashSet::new();
        reported.gangs.retain(|_, g| {
            if g.seen == pass {
                return true;
            }
            if let Some(labels) = &g.labels {
                let values = label_refs(labels);
                let _ = self.job_duration_ms.remove_label_values(&values);
                let _ = self.job_start_time.remove_label_values(&values);
                let _ = self.job_last_time.remove_label_values(&values);
            }
            if g.share.is_some() {
                let _ = self
                    .job_share
                    .remove_label_values(&[&*g.namespace, &*g.name]);
            }
            if g.unready.is_some() {
                let _ = self.unschedule_task_count.remove_label_values(&[&*g.name]);
                names_dropped.insert(g.name.clone());
            }
            false
        });
        // `job_id` is only the name (Volcano's label): a gang of the same name in another
        // namespace sets it again.
        if !names_dropped.is_empty() {
            for g in reported.gangs.values() {
                if let (Some(n), true) = (g.unready, names_dropped.contains(&g.name)) {
                    self.unschedule_task_count
                        .with_label_values(&[&*g.name])
                        .set(n);
                }
            }
        }
    }

    /// Every queue's accounts after a cycle: what the configured queue plugin (`capacity`,
    /// else `proportion`'s water-filling) says it holds, asks for, deserves and may hold,
    /// its capability as written, and its PodGroups per phase. Series of queues and
    /// resources no longer there are dropped.
    pub fn observe_queues(&self, state: &ClusterState, conf: &SchedulerConf) {
        let accounts = queue_accounts(state, conf);
        let total = state.total_allocatable();
        let cluster_scalars: BTreeSet<&str> = scalar_names(&total).collect();
        let mut series: HashSet<(String, Vec<String>)> = HashSet::new();
        let mut set = |metric: String, labels: Vec<String>, value: i64| {
            if let Some(g) = self.queue_gauges.get(&metric) {
                g.with_label_values(&label_refs(&labels)).set(value);
                series.insert((metric, labels));
            }
        };
        for (queue, a) in &accounts {
            let q = queue.to_string();
            for (what, r) in [
                ("allocated", Some(&a.allocated)),
                ("request", Some(&a.request)),
                ("deserved", Some(&a.deserved)),
                ("capacity", a.capability.as_ref()),
                ("real_capacity", Some(&a.real_capacity)),
            ] {
                let Some(r) = r else { continue };
                // The capability as written: a dimension it does not name is no limit and
                // has no series.
                let written = what == "capacity";
                for (dim, unit) in [(CPU, "milli_cpu"), (MEMORY, "memory_bytes")] {
                    if !written || r.get(dim) != 0 {
                        set(format!("queue_{what}_{unit}"), vec![q.clone()], r.get(dim));
                    }
                }
                let own: BTreeSet<&str> = scalar_names(r).collect();
                let names = if written {
                    own
                } else {
                    own.union(&cluster_scalars).copied().collect()
                };
                for name in names {
                    set(
                        format!("queue_{what}_scalar_resources"),
                        vec![q.clone(), name.to_string()],
                        r.get(name),
                    );
                }
            }
            set("queue_weight".into(), vec![q.clone()], i64::from(a.weight));
            set(
                "queue_overused".into(),
                vec![q.clone()],
                i64::from(a.overused),
            );
            let counts = state
                .tally()
                .queue(queue)
                .map(|s| s.phases)
                .unwrap_or_default();
            for (i, phase) in ["pending", "inqueue", "running", "unknown", "completed"]
                .iter()
                .enumerate()
            {
                set(
                    format!("queue_pod_group_{phase}_count"),
                    vec![q.clone()],
                    i64::from(counts[i]),
                );
            }
            self.queue_share.with_label_values(&[&q]).set(a.share);
        }
        let mut reported = self.reported();
        for (metric, labels) in reported.queue_series.difference(&series) {
            if let Some(g) = self.queue_gauges.get(metric) {
                let _ = g.remove_label_values(&label_refs(labels));
            }
            if labels.len() == 1 && !accounts.contains_key(labels[0].as_str()) {
                let _ = self.queue_share.remove_label_values(&[&labels[0]]);
            }
        }
        reported.queue_series = series;
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

fn job_labels(name: &str, queue: &str, namespace: &str) -> JobLabels {
    [name.to_string(), queue.to_string(), namespace.to_string()]
}

fn label_refs(labels: &[String]) -> Vec<&str> {
    labels.iter().map(String::as_str).collect()
}

/// The extended resources `r` names (not CPU, memory or pods).
fn scalar_names(r: &Resource) -> impl Iterator<Item = &str> {
    r.dimensions()
        .map(|(n, _)| n)
        .filter(|n| ![CPU, MEMORY, PODS].contains(n))
}

/// One queue's accounts as the engine's queue plugin computes them.
struct QueueAccount {
    weight: u32,
    allocated: Resource,
    /// What its gangs' pods ask for, placed or not (Volcano's `request`).
    request: Resource,
    deserved: Resource,
    /// The queue's capability as written, if it has one.
    capability: Option<Resource>,
    /// The most it may hold: the plugin's bound (capacity's real capability; proportion's
    /// cluster total lowered to the capability).
    real_capacity: Resource,
    share: f64,
    overused: bool,
}

/// Queue accounts from the configured plugin's own computation.
fn queue_accounts(state: &ClusterState, conf: &SchedulerConf) -> BTreeMap<String, QueueAccount> {
    let tree = crate::model::QueueTree::new(state.queues());
    let capacity_plugin = conf
        .tiers
        .iter()
        .flat_map(|t| &t.plugins)
        .any(|p| p.name == "capacity");
    let queues: BTreeMap<&str, &crate::model::QueueInfo> =
        state.queues().map(|q| (&*q.name, q)).collect();
    let capability = |name: &str| -> Option<Resource> {
        queues
            .get(name)?
            .capability
            .as_ref()
            .map(Resource::without_pods)
    };
    if capacity_plugin {
        // A parent's request includes its descendants', as its allocated does.
        let mut requests: BTreeMap<&str, Resource> = BTreeMap::new();
        for (name, sums) in state.tally().queues() {
            let request = sums.request.without_pods();
            for q in tree.path(name) {
                requests.entry(q).or_default().add(&request);
            }
        }
        crate::plugins::capacity::session_attrs(state, &tree)
            .into_iter()
            .map(|(name, a)| {
                let overused = a.deserved.dimensions().next().is_some()
                    && a.deserved
                        .dimensions()
                        .all(|(n, d)| a.allocated.get(n) >= d);
                let account = QueueAccount {
                    weight: queues.get(&*name).map_or(0, |q| q.weight),
                    share: share(&a.allocated, &a.deserved),
                    overused,
                    request: requests.get(&*name).cloned().unwrap_or_default(),
                    capability: capability(&name),
                    allocated: a.allocated,
                    deserved: a.deserved,
                    real_capacity: a.real_capability,
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
                    capability: capability(&name),
                    allocated: q.allocated,
                    request: q.request,
                    deserved: q.deserved,
                    real_capacity: q.capability,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Bind;
    use crate::metrics::{CycleTimer, Metrics};
    use crate::model::TaskStatus;
    use crate::testkit::*;

    /// A series' value (a histogram's sample count), if the series exists.
    fn sample(m: &VolcanoMetrics, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let want: BTreeMap<&str, &str> = labels.iter().copied().collect();
        let families: Vec<_> = m.collectors().iter().flat_map(|c| c.collect()).collect();
        let family = families.iter().find(|f| f.name() == name)?;
        let series = family.get_metric().iter().find(|s| {
            let have: BTreeMap<&str, &str> = s
                .get_label()
                .iter()
                .map(|l| (l.name(), l.value()))
                .collect();
            have == want
        })?;
        Some(match family.get_field_type() {
            MetricType::HISTOGRAM => series.get_histogram().get_sample_count() as f64,
            MetricType::COUNTER => series.get_counter().get_value(),
            _ => series.get_gauge().get_value(),
        })
    }

    const GIB: i64 = 1 << 30;

    /// One 8-cpu, 32Gi, 4-GPU node; queue `q` (capability 3 cpu, 2 GPUs) with gang `train`
    /// (2 of 3 pods running, 1 cpu and 1 GPU each) and gang `big` (one pending 4-cpu pod).
    fn cluster() -> crate::cache::Cache {
        let mut cache = cache_with_default_queue();
        let mut q = queue("q", 2);
        q.capability = Some(res(&[("cpu", "3"), ("nvidia.com/gpu", "2")]));
        cache.apply_queue(q);
        add_nodes(
            &mut cache,
            "n",
            1,
            &[("cpu", "8"), ("memory", "32Gi"), ("nvidia.com/gpu", "4")],
        );
        Gang::new("train", 3)
            .queue("q")
            .created(10_000)
            .tasks("", 3, &[("cpu", "1"), ("nvidia.com/gpu", "1")])
            .running_on(&["n-00000", "n-00000"])
            .apply(&mut cache);
        Gang::new("big", 1)
            .queue("q")
            .created(20_000)
            .tasks("", 1, &[("cpu", "4")])
            .apply(&mut cache);
        cache
    }

    #[test]
    fn buckets_are_volcanos() {
        let b = exponential_buckets_range(1.0, 5000.0, 20);
        assert_eq!(b.len(), 20);
        assert_eq!(b[0], 1.0);
        assert!((b[19] - 5000.0).abs() < 1e-9);
        assert!(b.windows(2).all(|w| w[1] > w[0]));
    }

    #[test]
    fn queue_accounts_by_volcanos_names_and_units() {
        let cache = cluster();
        let m = VolcanoMetrics::new().unwrap();
        for plugin in ["proportion", "capacity"] {
            let conf = conf(Some(&format!(
                "actions: allocate\ntiers:\n- plugins:\n  - name: gang\n  - name: {plugin}\n"
            )));
            m.observe_queues(cache.state(), &conf);
            let q = ("queue_name", "q");
            let gpu = ("resource", "nvidia.com/gpu");
            let v = |name: &str, labels: &[(&str, &str)]| {
                sample(&m, &format!("volcano_{name}"), labels)
            };
            assert_eq!(
                v("queue_allocated_milli_cpu", &[q]),
                Some(2000.0),
                "{plugin}"
            );
            assert_eq!(
                v("queue_allocated_scalar_resources", &[q, gpu]),
                Some(2000.0)
            );
            // Placed and pending pods: 3 × 1 cpu and 4 cpu.
            assert_eq!(v("queue_request_milli_cpu", &[q]), Some(7000.0), "{plugin}");
            assert_eq!(v("queue_request_scalar_resources", &[q, gpu]), Some(3000.0));
            assert_eq!(v("queue_request_memory_bytes", &[q]), Some(0.0));
            // The capability as written: memory is not named, so no limit and no series.
            assert_eq!(v("queue_capacity_milli_cpu", &[q]), Some(3000.0));
            assert_eq!(v("queue_capacity_memory_bytes", &[q]), None, "{plugin}");
            assert_eq!(
                v("queue_capacity_scalar_resources", &[q, gpu]),
                Some(2000.0)
            );
            // What it may hold: the cluster, lowered to the capability where it names one.
            assert_eq!(
                v("queue_real_capacity_milli_cpu", &[q]),
                Some(3000.0),
                "{plugin}"
            );
            assert_eq!(
                v("queue_real_capacity_memory_bytes", &[q]),
                Some((32 * GIB) as f64),
                "{plugin}"
            );
            assert_eq!(
                v("queue_real_capacity_scalar_resources", &[q, gpu]),
                Some(2000.0)
            );
            assert_eq!(v("queue_weight", &[q]), Some(2.0));
            assert!(v("queue_deserved_milli_cpu", &[q]).is_some());
            assert!(v("queue_share", &[q]).is_some());
            // The default queue has no capability: no capacity series at all.
            let d = ("queue_name", "default");
            assert_eq!(v("queue_capacity_milli_cpu", &[d]), None);
            assert_eq!(
                v("queue_real_capacity_milli_cpu", &[d]),
                Some(8000.0),
                "{plugin}"
            );
        }
        // A queue gone takes its series along.
        let mut cache = cache;
        cache.delete_job("default/train");
        cache.delete_job("default/big");
        cache.delete_queue("q");
        m.observe_queues(cache.state(), &conf(None));
        let q = [("queue_name", "q")];
        assert_eq!(sample(&m, "volcano_queue_allocated_milli_cpu", &q), None);
        assert_eq!(sample(&m, "volcano_queue_capacity_milli_cpu", &q), None);
        assert_eq!(sample(&m, "volcano_queue_share", &q), None);
        assert_eq!(
            sample(
                &m,
                "volcano_queue_real_capacity_scalar_resources",
                &[("queue_name", "q"), ("resource", "nvidia.com/gpu")]
            ),
            None
        );
    }

    #[test]
    fn gangs_short_of_their_minimum_as_volcanos_gang_plugin_counts_them() {
        let mut cache = cluster();
        let m = VolcanoMetrics::new().unwrap();
        m.observe_jobs(cache.state(), &conf(None));
        let count = |job: &str| sample(&m, "volcano_unschedule_task_count", &[("job_id", job)]);
        assert_eq!(count("train"), Some(1.0), "2 of 3 placed");
        assert_eq!(count("big"), Some(1.0));
        assert_eq!(sample(&m, "volcano_unschedule_job_count", &[]), Some(2.0));
        let train = [
            ("job_name", "train"),
            ("queue", "q"),
            ("job_namespace", "default"),
        ];
        assert_eq!(
            sample(&m, "volcano_e2e_job_scheduling_start_time", &train),
            Some(10.0),
            "the PodGroup's creation, unix seconds"
        );
        // drf is configured by default: the dominant share, 2 of 4 GPUs.
        assert_eq!(
            sample(
                &m,
                "volcano_job_share",
                &[("job_ns", "default"), ("job_id", "train")]
            ),
            Some(0.5)
        );
        cache.set_pod_status(
            "default/train-2",
            TaskStatus::Running,
            Some("n-00000".into()),
        );
        cache.delete_job("default/big");
        m.observe_jobs(cache.state(), &conf(None));
        assert_eq!(count("train"), Some(0.0), "whole: 0, as Volcano sets it");
        assert_eq!(count("big"), None, "gone");
        assert_eq!(sample(&m, "volcano_unschedule_job_count", &[]), Some(0.0));
        cache.delete_job("default/train");
        m.observe_jobs(cache.state(), &conf(None));
        assert_eq!(
            sample(&m, "volcano_e2e_job_scheduling_start_time", &train),
            None
        );
    }

    #[test]
    fn a_gang_gone_leaves_the_count_of_another_of_its_name() {
        let mut cache = cluster();
        let mut other =
            Gang::new("train", 2)
                .queue("q")
                .created(30_000)
                .tasks("", 2, &[("cpu", "1")]);
        other.spec.namespace = "other".into();
        other.spec.uid = "other/train".into();
        for t in &mut other.tasks {
            t.namespace = Arc::from("other");
            t.uid = Arc::from(format!("other/{}", t.name));
        }
        other.apply(&mut cache);
        let m = VolcanoMetrics::new().unwrap();
        m.observe_jobs(cache.state(), &conf(None));
        cache.delete_job("default/train");
        m.observe_jobs(cache.state(), &conf(None));
        assert_eq!(
            sample(&m, "volcano_unschedule_task_count", &[("job_id", "train")]),
            Some(2.0),
            "other/train's, both pods pending"
        );
        let gone = [
            ("job_name", "train"),
            ("queue", "q"),
            ("job_namespace", "default"),
        ];
        assert_eq!(
            sample(&m, "volcano_e2e_job_scheduling_start_time", &gone),
            None
        );
        let kept = [
            ("job_name", "train"),
            ("queue", "q"),
            ("job_namespace", "other"),
        ];
        assert_eq!(
            sample(&m, "volcano_e2e_job_scheduling_start_time", &kept),
            Some(30.0)
        );
    }

    #[test]
    fn placing_a_gang_sets_its_scheduling_duration_once_per_cycle() {
        let cache = cluster();
        let m = VolcanoMetrics::new().unwrap();
        let bind = |task: &str| Bind {
            job: Arc::from("default/train"),
            task: Arc::from(format!("default/{task}")),
            namespace: Arc::from("default"),
            name: Arc::from(task),
            node: Arc::from("n-00000"),
        };
        m.observe_assumed(&cache, &[bind("train-0"), bind("train-1")], 12_500);
        let train = [
            ("job_name", "train"),
            ("queue", "q"),
            ("job_namespace", "default"),
        ];
        assert_eq!(
            sample(&m, "volcano_e2e_job_scheduling_duration", &train),
            Some(2500.0)
        );
        assert_eq!(
            sample(&m, "volcano_e2e_job_scheduling_last_time", &train),
            Some(12.0)
        );
        assert_eq!(
            sample(&m, "volcano_e2e_job_scheduling_latency_milliseconds", &[]),
            Some(1.0),
            "one observation per gang"
        );
        assert_eq!(
            sample(
                &m,
                "volcano_task_scheduling_latency_milliseconds",
                &[("stage", "Assumed")]
            ),
            Some(2.0),
            "one per pod"
        );
        m.observe_pre_bound(&cache, &[bind("train-0")], &[700], 13_000);
        assert_eq!(
            sample(
                &m,
                "volcano_task_scheduling_latency_milliseconds",
                &[("stage", "PreBound")]
            ),
            Some(1.0)
        );
        assert_eq!(
            sample(
                &m,
                "volcano_scheduling_stage_duration_milliseconds",
                &[("stage", "PreBind")]
            ),
            Some(1.0)
        );
    }

    #[test]
    fn a_cycle_times_each_plugins_session_hooks() {
        let mut cache = cluster();
        cache.delete_job("default/big");
        let metrics = Metrics::new().unwrap();
        let scheduler = scheduler(None);
        let mut timer = CycleTimer::start(&metrics, Duration::ZERO);
        scheduler.run_cycle_traced(cache.snapshot(), 0, &mut timer);
        timer.finish();
        let m = &metrics.volcano;
        let plugin = "volcano_plugin_scheduling_latency_milliseconds";
        for name in ["priority", "gang", "drf", "proportion", "gpu-affinity"] {
            for hook in ["OnSessionOpen", "OnSessionClose"] {
                assert_eq!(
                    sample(m, plugin, &[("plugin", name), ("OnSession", hook)]),
                    Some(1.0),
                    "{name} {hook}"
                );
            }
        }
        for action in ["enqueue", "allocate", "backfill"] {
            assert_eq!(
                sample(
                    m,
                    "volcano_action_scheduling_latency_milliseconds",
                    &[("action", action)]
                ),
                Some(1.0)
            );
        }
        assert_eq!(
            sample(m, "volcano_open_session_duration_milliseconds", &[]),
            Some(1.0)
        );
        assert_eq!(
            sample(m, "volcano_e2e_scheduling_latency_milliseconds", &[]),
            Some(1.0)
        );
    }

    #[test]
    fn the_catalogue_lists_every_registered_metric() {
        let names: Vec<String> = VolcanoMetrics::catalogue()
            .unwrap()
            .into_iter()
            .map(|m| m.name)
            .collect();
        let metrics = Metrics::new().unwrap();
        // Every family served (those with a series already) is in the catalogue.
        for line in metrics.render().lines() {
            if let Some(rest) = line.strip_prefix("# TYPE volcano_") {
                let name = format!("volcano_{}", rest.split(' ').next().unwrap());
                assert!(names.contains(&name), "{name}");
            }
        }
        let plugin = VolcanoMetrics::catalogue()
            .unwrap()
            .into_iter()
            .find(|m| m.name == "volcano_plugin_scheduling_latency_milliseconds")
            .unwrap();
        assert_eq!(plugin.kind, "histogram");
        assert_eq!(plugin.labels, ["plugin", "OnSession"]);
        assert_eq!(plugin.buckets.len(), 15);
    }
}
