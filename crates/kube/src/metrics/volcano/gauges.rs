//! The per-job and per-queue gauges, recomputed from the cluster's state (at most once a
//! second while cycles run, see the driver).

use super::*;
use crate::framework::usage::half_life_argument;
use crate::framework::UsageLedger;

impl VolcanoMetrics {
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
    /// resources no longer there are dropped. `usage`: the scheduler's decayed usage when
    /// fair share over time is on, which weighs proportion's deserved shares as the plugin
    /// weighs them.
    pub fn observe_queues(
        &self,
        state: &ClusterState,
        conf: &SchedulerConf,
        usage: Option<&UsageLedger>,
    ) {
        let accounts = queue_accounts(state, conf, usage);
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
}

pub(super) fn job_labels(name: &str, queue: &str, namespace: &str) -> JobLabels {
    [name.to_string(), queue.to_string(), namespace.to_string()]
}

pub(super) fn label_refs(labels: &[String]) -> Vec<&str> {
    labels.iter().map(String::as_str).collect()
}

/// The extended resources `r` names (not CPU, memory or pods).
pub(super) fn scalar_names(r: &Resource) -> impl Iterator<Item = &str> {
    r.dimensions()
        .map(|(n, _)| n)
        .filter(|n| ![CPU, MEMORY, PODS].contains(n))
}

/// One queue's accounts as the engine's queue plugin computes them.
pub(super) struct QueueAccount {
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

/// Queue accounts from the configured plugin's own computation: capacity's (its deserved
/// shares are contracts, which usage does not change), else proportion's, weighed by
/// `usage` when proportion has fair share over time on (`usageHalfLife`).
pub(super) fn queue_accounts(
    state: &ClusterState,
    conf: &SchedulerConf,
    usage: Option<&UsageLedger>,
) -> BTreeMap<String, QueueAccount> {
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
        let mut shares = crate::plugins::proportion::queue_shares(state, &tree);
        let weighed = conf.tiers.iter().flat_map(|t| &t.plugins).any(|p| {
            p.name == "proportion" && matches!(half_life_argument(&p.arguments), Ok(Some(_)))
        });
        if let Some(usage) = usage.filter(|_| weighed) {
            let total = state.total_allocatable();
            crate::plugins::proportion::weigh_by_usage(&total, &mut shares, usage);
        }
        shares
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
pub(super) fn share(allocated: &Resource, deserved: &Resource) -> f64 {
    deserved
        .dimensions()
        .filter(|(_, d)| *d > 0)
        .map(|(n, d)| allocated.get(n) as f64 / d as f64)
        .fold(0.0, f64::max)
}
