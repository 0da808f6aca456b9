//! What a simulation run reports: per-job times and placement (nodes, domains spanned per
//! topology level, GPU models), utilization, queue shares and partially used GPU nodes over
//! time, and the invariant counters — as a table for people, JSON for tools, SVG for eyes.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::model::Timestamp;

/// One point of the utilization/queue-share step functions.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Sample {
    /// Virtual time, ms.
    pub t: Timestamp,
    /// resource -> used / allocatable.
    pub utilization: BTreeMap<String, f64>,
    /// queue -> resource -> the queue's allocation / cluster allocatable.
    pub queue_share: BTreeMap<String, BTreeMap<String, f64>>,
    pub pending_pods: usize,
    /// Nodes with GPUs (`nvidia.com/gpu` allocatable).
    pub gpu_nodes: usize,
    /// Nodes with some but not all of their GPUs allocated.
    pub partial_gpu_nodes: usize,
}

impl Sample {
    pub fn same_values(&self, other: &Sample) -> bool {
        self.utilization == other.utilization
            && self.queue_share == other.queue_share
            && self.pending_pods == other.pending_pods
            && self.gpu_nodes == other.gpu_nodes
            && self.partial_gpu_nodes == other.partial_gpu_nodes
    }
}

/// How many domains of one topology level a gang's nodes span.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LevelSpread {
    /// A label key of the scenario's `topologyLevels`, or `tier-N` for HyperNode tier N.
    pub level: String,
    /// A node in no domain of the level counts as a domain of its own.
    pub domains: usize,
}

/// Per topology level, how the gangs that ran on more than one node were spread.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LevelSummary {
    pub level: String,
    /// Gangs whose pods ran on two nodes or more.
    pub multi_node_gangs: usize,
    /// Of those, the gangs whose nodes all lie in one domain of the level.
    pub within_one_domain: usize,
    /// within_one_domain / multi_node_gangs (none without multi-node gangs).
    pub share_within_one_domain: Option<f64>,
    /// The mean number of domains a multi-node gang spans.
    pub mean_domains: Option<f64>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct JobReport {
    pub name: String,
    pub queue: String,
    pub tasks: usize,
    pub min_member: u32,
    pub request: String,
    pub submitted: Timestamp,
    pub started: Option<Timestamp>,
    pub finished: Option<Timestamp>,
    pub wait: Option<i64>,
    pub status: String,
    /// Why a gang that never started is waiting.
    pub message: Option<String>,
    /// The last reservation backfill held for the gang while it waited (EASY backfill).
    pub reservation: Option<String>,
    /// The nodes its pods ran on, each once, in the order first bound.
    pub nodes: Vec<String>,
    /// Per topology level (the scenario's `topologyLevels`, narrowest first, then its
    /// HyperNode tiers), how many domains those nodes span; empty while it never ran.
    pub spread: Vec<LevelSpread>,
    /// The GPU models (node label `nvidia.com/gpu.product`) its GPU pods ran on.
    pub gpu_models: Vec<String>,
    /// Its predicted start times (scenarios with `predictStart` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prediction: Option<super::accuracy::JobPrediction>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Invariants {
    /// Gangs bound with fewer than minMember pods: must be 0.
    pub partial_gangs: u64,
    /// Times a node held more than its allocatable: must be 0.
    pub overcommitted_nodes: u64,
    /// What went wrong, if anything.
    pub violations: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Summary {
    pub jobs: usize,
    pub completed: usize,
    pub never_started: usize,
    pub makespan_ms: Timestamp,
    pub mean_wait_ms: Option<f64>,
    pub max_wait_ms: Option<i64>,
    /// resource -> time-weighted mean utilization.
    pub mean_utilization: BTreeMap<String, f64>,
    /// queue -> resource -> time-weighted mean share of the cluster.
    pub mean_queue_share: BTreeMap<String, BTreeMap<String, f64>>,
    pub cycles: u64,
    pub binds: u64,
    pub evictions: u64,
    /// Per topology level, the multi-node gangs kept within one domain.
    pub topology: Vec<LevelSummary>,
    /// Gangs whose GPU pods ran on nodes of more than one GPU model.
    pub mixed_gpu_model_gangs: usize,
    /// Time-weighted mean and the maximum of the nodes with some but not all of their GPUs
    /// allocated.
    pub mean_partial_gpu_nodes: f64,
    pub max_partial_gpu_nodes: usize,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    pub scenario: String,
    pub seed: u64,
    pub summary: Summary,
    pub invariants: Invariants,
    pub jobs: Vec<JobReport>,
    pub samples: Vec<Sample>,
    /// What the engine could not use of the scenario's topology, each once: malformed
    /// networkTopology or Kueue annotations, HyperNode problems that depend on the nodes.
    pub topology_problems: Vec<String>,
    /// What of the scenario's t=0 the simulated cluster could not set up: a pod running at
    /// t=0 whose claims find no devices on its node runs without them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub setup_problems: Vec<String>,
    /// How well the predicted start times held (scenarios with `predictStart` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub predictions: Option<super::accuracy::PredictionSummary>,
}

fn time_weighted(samples: &[Sample], end: Timestamp, value: impl Fn(&Sample) -> f64) -> f64 {
    let (Some(first), true) = (samples.first(), end > 0) else {
        return 0.0;
    };
    let mut acc = 0.0;
    for (i, s) in samples.iter().enumerate() {
        let until = samples.get(i + 1).map(|n| n.t).unwrap_or(end);
        acc += value(s) * (until - s.t).max(0) as f64;
    }
    let span = (end - first.t).max(1) as f64;
    acc / span
}

/// Rows of the queue-share table: the run cut in this many equal steps.
const SHARE_ROWS: usize = 12;

impl Report {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        scenario: String,
        seed: u64,
        end: Timestamp,
        jobs: Vec<JobReport>,
        samples: Vec<Sample>,
        cycles: u64,
        binds: u64,
        evictions: u64,
        partial_gangs: u64,
        overcommitted_nodes: u64,
        violations: Vec<String>,
        levels: Vec<String>,
        topology_problems: Vec<String>,
    ) -> Report {
        let waits: Vec<i64> = jobs.iter().filter_map(|j| j.wait).collect();
        let makespan = jobs.iter().filter_map(|j| j.finished).max().unwrap_or(end);
        let resources: Vec<String> = samples
            .iter()
            .flat_map(|s| s.utilization.keys().cloned())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        let queues: Vec<String> = samples
            .iter()
            .flat_map(|s| s.queue_share.keys().cloned())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        let mean_utilization = resources
            .iter()
            .map(|r| {
                (
                    r.clone(),
                    time_weighted(&samples, makespan, |s| {
                        s.utilization.get(r).copied().unwrap_or(0.0)
                    }),
                )
            })
            .collect();
        let mean_queue_share = queues
            .iter()
            .map(|q| {
                (
                    q.clone(),
                    resources
                        .iter()
                        .map(|r| {
                            (
                                r.clone(),
                                time_weighted(&samples, makespan, |s| {
                                    s.queue_share
                                        .get(q)
                                        .and_then(|m| m.get(r))
                                        .copied()
                                        .unwrap_or(0.0)
                                }),
                            )
                        })
                        .collect(),
                )
            })
            .collect();
        let topology = levels
            .iter()
            .map(|level| {
                let spans: Vec<usize> = jobs
                    .iter()
                    .filter(|j| j.nodes.len() > 1)
                    .filter_map(|j| j.spread.iter().find(|s| &s.level == level))
                    .map(|s| s.domains)
                    .collect();
                let within = spans.iter().filter(|&&d| d == 1).count();
                let n = spans.len();
                LevelSummary {
                    level: level.clone(),
                    multi_node_gangs: n,
                    within_one_domain: within,
                    share_within_one_domain: (n > 0).then(|| within as f64 / n as f64),
                    mean_domains: (n > 0).then(|| spans.iter().sum::<usize>() as f64 / n as f64),
                }
            })
            .collect();
        let mean_partial_gpu_nodes =
            time_weighted(&samples, makespan, |s| s.partial_gpu_nodes as f64);
        let max_partial_gpu_nodes = samples
            .iter()
            .filter(|s| s.t <= makespan)
            .map(|s| s.partial_gpu_nodes)
            .max()
            .unwrap_or(0);
        Report {
            scenario,
            seed,
            summary: Summary {
                jobs: jobs.len(),
                completed: jobs.iter().filter(|j| j.finished.is_some()).count(),
                never_started: jobs.iter().filter(|j| j.started.is_none()).count(),
                makespan_ms: makespan,
                mean_wait_ms: (!waits.is_empty())
                    .then(|| waits.iter().sum::<i64>() as f64 / waits.len() as f64),
                max_wait_ms: waits.iter().max().copied(),
                mean_utilization,
                mean_queue_share,
                cycles,
                binds,
                evictions,
                topology,
                mixed_gpu_model_gangs: jobs.iter().filter(|j| j.gpu_models.len() > 1).count(),
                mean_partial_gpu_nodes,
                max_partial_gpu_nodes,
            },
            invariants: Invariants {
                partial_gangs,
                overcommitted_nodes,
                violations,
            },
            predictions: jobs
                .iter()
                .any(|j| j.prediction.is_some())
                .then(|| super::accuracy::PredictionSummary::of(&jobs)),
            jobs,
            samples,
            topology_problems,
            setup_problems: Vec::new(),
        }
    }

    pub fn invariants_hold(&self) -> bool {
        self.invariants.partial_gangs == 0
            && self.invariants.overcommitted_nodes == 0
            && self.invariants.violations.is_empty()
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }

    /// The human report. Long job lists are cut to the first `max_jobs` rows.
    pub fn to_table(&self, max_jobs: usize) -> String {
        let mut out = String::new();
        let s = &self.summary;
        let _ = writeln!(out, "scenario: {} (seed {})", self.scenario, self.seed);
        let _ = writeln!(
            out,
            "jobs: {} submitted, {} completed, {} never started; makespan {}; {} cycles, {} binds, {} evictions",
            s.jobs,
            s.completed,
            s.never_started,
            fmt_ms(s.makespan_ms),
            s.cycles,
            s.binds,
            s.evictions
        );
        if let (Some(mean), Some(max)) = (s.mean_wait_ms, s.max_wait_ms) {
            let _ = writeln!(
                out,
                "wait: mean {}, max {}",
                fmt_ms(mean.round() as i64),
                fmt_ms(max)
            );
        }
        let util: Vec<String> = s
            .mean_utilization
            .iter()
            .map(|(r, v)| format!("{r} {:.1}%", v * 100.0))
            .collect();
        let _ = writeln!(out, "mean utilization: {}", util.join(", "));
        if s.mean_queue_share.len() > 1 {
            for (q, shares) in &s.mean_queue_share {
                let parts: Vec<String> = shares
                    .iter()
                    .map(|(r, v)| format!("{r} {:.1}%", v * 100.0))
                    .collect();
                let _ = writeln!(out, "queue {q}: mean share {}", parts.join(", "));
            }
        }
        if s.max_partial_gpu_nodes > 0 || self.samples.iter().any(|x| x.gpu_nodes > 0) {
            let _ = writeln!(
                out,
                "partially used GPU nodes: mean {:.1}, max {}",
                s.mean_partial_gpu_nodes, s.max_partial_gpu_nodes
            );
        }
        for l in &s.topology {
            match (l.share_within_one_domain, l.mean_domains) {
                (Some(share), Some(mean)) => {
                    let _ = writeln!(
                        out,
                        "multi-node gangs within one {}: {}/{} ({:.1}%), mean {:.2} domains",
                        l.level,
                        l.within_one_domain,
                        l.multi_node_gangs,
                        share * 100.0,
                        mean
                    );
                }
                _ => {
                    let _ = writeln!(out, "multi-node gangs within one {}: none ran", l.level);
                }
            }
        }
        if self.jobs.iter().any(|j| !j.gpu_models.is_empty()) {
            let _ = writeln!(out, "gangs mixing GPU models: {}", s.mixed_gpu_model_gangs);
        }
        for p in self.topology_problems.iter().take(10) {
            let _ = writeln!(out, "topology: {p}");
        }
        for p in self.setup_problems.iter().take(10) {
            let _ = writeln!(out, "setup: {p}");
        }
        out.push_str(&self.shares_over_time(SHARE_ROWS));
        let inv = &self.invariants;
        let _ = writeln!(
            out,
            "invariants: partial gangs bound = {}, over-committed nodes = {} ({})",
            inv.partial_gangs,
            inv.overcommitted_nodes,
            if self.invariants_hold() {
                "OK"
            } else {
                "VIOLATED"
            }
        );
        for v in inv.violations.iter().take(10) {
            let _ = writeln!(out, "  ! {v}");
        }
        let _ = writeln!(out);
        let placement = !s.topology.is_empty();
        let models = self.jobs.iter().any(|j| !j.gpu_models.is_empty());
        let rows: Vec<Vec<String>> = self
            .jobs
            .iter()
            .take(max_jobs)
            .map(|j| {
                let mut row = vec![
                    j.name.clone(),
                    j.queue.clone(),
                    format!("{}/{}", j.min_member, j.tasks),
                    fmt_ms(j.submitted),
                    j.started.map(fmt_ms).unwrap_or_else(|| "-".into()),
                    j.finished.map(fmt_ms).unwrap_or_else(|| "-".into()),
                    j.wait.map(fmt_ms).unwrap_or_else(|| "-".into()),
                    j.status.clone(),
                ];
                if placement {
                    row.push(spread_cell(j));
                }
                if models {
                    row.push(j.gpu_models.join(","));
                }
                row
            })
            .collect();
        let mut header = vec![
            "JOB",
            "QUEUE",
            "MIN/TASKS",
            "SUBMIT",
            "START",
            "FINISH",
            "WAIT",
            "STATUS",
        ];
        if placement {
            header.push("SPREAD");
        }
        if models {
            header.push("GPU MODEL");
        }
        out.push_str(&columns(&header, &rows));
        if self.jobs.len() > max_jobs {
            let _ = writeln!(
                out,
                "... {} more jobs (use --output json for all)",
                self.jobs.len() - max_jobs
            );
        }
        let reserved: Vec<&JobReport> = self
            .jobs
            .iter()
            .filter(|j| j.reservation.is_some())
            .collect();
        if !reserved.is_empty() {
            let _ = writeln!(out, "\nreservations (backfill):");
            for j in reserved.iter().take(max_jobs) {
                let _ = writeln!(
                    out,
                    "  {}: {}",
                    j.name,
                    j.reservation.as_deref().unwrap_or("")
                );
            }
        }
        if let Some(p) = &self.predictions {
            out.push_str(&p.to_table());
        }
        let waiting: Vec<&JobReport> = self.jobs.iter().filter(|j| j.message.is_some()).collect();
        if !waiting.is_empty() {
            let _ = writeln!(out, "\nwhy gangs are waiting:");
            for j in waiting.iter().take(max_jobs) {
                let _ = writeln!(out, "  {}: {}", j.name, j.message.as_deref().unwrap_or(""));
            }
        }
        out
    }

    /// Each queue's share of the cluster at `steps + 1` evenly spaced times (the sample in
    /// force at each), one column per queue and resource it ever held; empty with fewer
    /// than two queues holding anything.
    pub fn shares_over_time(&self, steps: usize) -> String {
        let mut held: Vec<(&str, &str)> = Vec::new();
        for s in &self.samples {
            for (q, shares) in &s.queue_share {
                for (r, v) in shares {
                    if *v > 0.0 && !held.contains(&(q.as_str(), r.as_str())) {
                        held.push((q, r));
                    }
                }
            }
        }
        held.sort_unstable();
        let queues = held
            .iter()
            .map(|(q, _)| q)
            .collect::<std::collections::BTreeSet<_>>();
        let (Some(first), true) = (self.samples.first(), queues.len() > 1) else {
            return String::new();
        };
        let (start, end) = (first.t, self.summary.makespan_ms.max(first.t));
        let mut header = vec!["TIME".to_string()];
        header.extend(held.iter().map(|(q, r)| format!("{q} {r}")));
        let mut rows = Vec::new();
        for i in 0..=steps {
            let t = start + (end - start) * i as i64 / steps.max(1) as i64;
            let Some(sample) = self.samples.iter().take_while(|s| s.t <= t).last() else {
                continue;
            };
            let mut row = vec![fmt_ms(t)];
            row.extend(held.iter().map(|(q, r)| {
                let v = sample.queue_share.get(*q).and_then(|m| m.get(*r));
                format!("{:.1}%", v.copied().unwrap_or(0.0) * 100.0)
            }));
            rows.push(row);
        }
        let header: Vec<&str> = header.iter().map(String::as_str).collect();
        format!(
            "queue shares of the cluster over time:\n{}",
            columns(&header, &rows)
        )
    }
}

/// "3 nodes: example.com/rack 2, tier-1 2"; "-" for a job that never ran.
fn spread_cell(j: &JobReport) -> String {
    if j.nodes.is_empty() {
        return "-".into();
    }
    let levels: Vec<String> = j
        .spread
        .iter()
        .map(|s| format!("{} {}", s.level, s.domains))
        .collect();
    let nodes = match j.nodes.len() {
        1 => "1 node".to_string(),
        n => format!("{n} nodes"),
    };
    format!("{nodes}: {}", levels.join(", "))
}

/// A left-aligned text table, columns two spaces apart.
fn columns<R: AsRef<[String]>>(header: &[&str], rows: &[R]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r.as_ref()) {
            *w = (*w).max(c.len());
        }
    }
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        cells
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_string()
    };
    let mut out = line(&mut header.iter().copied());
    out.push('\n');
    for r in rows {
        out.push_str(&line(&mut r.as_ref().iter().map(String::as_str)));
        out.push('\n');
    }
    out
}

/// "1h02m03s", "4m05s", "12.5s".
pub fn fmt_ms(ms: i64) -> String {
    let s = ms / 1000;
    if s >= 3600 {
        format!("{}h{:02}m{:02}s", s / 3600, s % 3600 / 60, s % 60)
    } else if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else if ms % 1000 == 0 {
        format!("{s}s")
    } else {
        format!("{:.1}s", ms as f64 / 1000.0)
    }
}
