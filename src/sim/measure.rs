//! What the simulator measures and checks after every cycle: the two invariants (no partial
//! gang bound, no node over-committed), utilization and queue-share samples, and the report.

use std::collections::BTreeMap;

use super::driver::Simulation;
use super::report::{JobReport, Report, Sample};
use crate::framework::SessionResult;
use crate::model::resource::{format_amount, CPU, GPU, MEMORY};
use crate::model::{Resource, TaskStatus};

impl Simulation {
    pub(super) fn started_count(&self, j: usize) -> u32 {
        self.jobs[j]
            .pods
            .iter()
            .filter(|&&p| {
                matches!(
                    self.pods[p].status,
                    TaskStatus::Running | TaskStatus::Succeeded
                )
            })
            .count() as u32
    }

    /// No partial gang: every gang with binds in this cycle has, with them, at least
    /// minMember (and minTaskMember per role) pods started.
    pub(super) fn check_gangs(&mut self, result: &SessionResult) {
        let mut new: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for b in &result.binds {
            if let Some(&p) = self.pod_index.get(&b.task) {
                new.entry(self.pods[p].job).or_default().push(p);
            }
        }
        for (j, binds) in new {
            let job = &self.jobs[j];
            let mut by_role: BTreeMap<&str, u32> = BTreeMap::new();
            for &p in &job.pods {
                let pod = &self.pods[p];
                if matches!(pod.status, TaskStatus::Running | TaskStatus::Succeeded)
                    || binds.contains(&p)
                {
                    *by_role.entry(&pod.role).or_insert(0) += 1;
                }
            }
            let total: u32 = by_role.values().sum();
            let roles_ok = job
                .min_task_member
                .iter()
                .all(|(r, m)| by_role.get(r.as_str()).copied().unwrap_or(0) >= *m);
            if total < job.min_member || !roles_ok {
                self.partial_gangs += 1;
                self.violations.push(format!(
                    "t={}: gang {} bound partially: {total} of minMember {}",
                    self.now, job.uid, job.min_member
                ));
            }
        }
    }

    /// No node over-committed: requests of the pods on each node, summed from the
    /// simulator's own pod table, fit its allocatable.
    pub(super) fn check_nodes(&mut self) {
        let mut used: BTreeMap<&str, Resource> = BTreeMap::new();
        for pod in &self.pods {
            if let (Some(node), true) = (&pod.node, pod.status.occupies_node()) {
                used.entry(node).or_default().add(&pod.request);
            }
        }
        let mut bad = Vec::new();
        for (node, u) in &used {
            if let Some((_, alloc)) = self.nodes.get(*node) {
                if !u.fits(alloc) {
                    bad.push(format!(
                        "t={}: node {node} over-committed: {u} on {alloc}",
                        self.now
                    ));
                }
            }
        }
        self.overcommitted_nodes += bad.len() as u64;
        self.violations.extend(bad);
    }

    pub(super) fn sample(&mut self) {
        let mut total = Resource::new();
        for (_, alloc) in self.nodes.values() {
            total.add(alloc);
        }
        let mut used = Resource::new();
        let mut queues: BTreeMap<String, Resource> = BTreeMap::new();
        for q in self.cache.state().queues() {
            queues.insert(q.name.to_string(), Resource::new());
        }
        for pod in &self.pods {
            if pod.status.occupies_node()
                && pod
                    .node
                    .as_ref()
                    .is_some_and(|n| self.nodes.contains_key(n))
            {
                used.add(&pod.request);
                queues
                    .entry(self.jobs[pod.job].queue.clone())
                    .or_default()
                    .add(&pod.request);
            }
        }
        let fraction = |r: &Resource, name: &str| {
            let t = total.get(name);
            if t > 0 {
                r.get(name) as f64 / t as f64
            } else {
                0.0
            }
        };
        let resources: Vec<&str> = [CPU, MEMORY, GPU]
            .into_iter()
            .filter(|r| total.get(r) > 0)
            .collect();
        let sample = Sample {
            t: self.now,
            utilization: resources
                .iter()
                .map(|r| (r.to_string(), fraction(&used, r)))
                .collect(),
            queue_share: queues
                .iter()
                .map(|(q, r)| {
                    (
                        q.clone(),
                        resources
                            .iter()
                            .map(|n| (n.to_string(), fraction(r, n)))
                            .collect(),
                    )
                })
                .collect(),
            pending_pods: self
                .pods
                .iter()
                .filter(|p| p.status == TaskStatus::Pending && self.jobs[p.job].submitted.is_some())
                .count(),
        };
        if self
            .samples
            .last()
            .is_none_or(|last| !last.same_values(&sample))
        {
            self.samples.push(sample);
        }
    }

    pub fn report(&self) -> Report {
        let jobs = self
            .jobs
            .iter()
            .filter(|j| j.submitted.is_some())
            .map(|j| {
                let mut request = Resource::new();
                for &p in &j.pods {
                    request.add(&self.pods[p].request);
                }
                JobReport {
                    name: j.uid.clone(),
                    queue: j.queue.clone(),
                    tasks: j.pods.len(),
                    min_member: j.min_member,
                    request: request
                        .dimensions()
                        .filter(|(n, _)| *n != crate::model::resource::PODS)
                        .map(|(n, v)| format!("{n} {}", format_amount(n, v)))
                        .collect::<Vec<_>>()
                        .join(", "),
                    submitted: j.submitted.unwrap_or(0),
                    started: j.started,
                    finished: j.finished,
                    wait: j.started.map(|s| s - j.submitted.unwrap_or(0)),
                    status: if j.finished.is_some() {
                        "Completed"
                    } else if j.started.is_some() {
                        "Running"
                    } else {
                        "Pending"
                    }
                    .to_string(),
                    message: if j.started.is_none() {
                        j.message.clone()
                    } else {
                        None
                    },
                    reservation: j.reservation.clone(),
                }
            })
            .collect();
        Report::new(
            self.scenario.name.clone(),
            self.scenario.seed,
            self.now,
            jobs,
            self.samples.clone(),
            self.cycles,
            self.binds,
            self.evictions,
            self.partial_gangs,
            self.overcommitted_nodes,
            self.violations.clone(),
        )
    }
}
