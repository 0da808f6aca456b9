//! What the simulator measures and checks after every cycle: the two invariants (no partial
//! gang bound, no node over-committed), utilization, queue-share and GPU-fragmentation
//! samples, where each gang's pods landed in the topology, and the report.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::accuracy::JobPrediction;
use super::driver::Simulation;
use super::report::{JobReport, LevelSpread, Report, Sample};
use super::scenario::Scenario;
use crate::framework::SessionResult;
use crate::model::resource::{format_amount, CPU, GPU, MEMORY};
use crate::model::{Resource, TaskStatus};

/// The node label GPU feature discovery puts the GPU model in.
pub const GPU_MODEL_LABEL: &str = "nvidia.com/gpu.product";

/// A level at which the report measures how many domains a gang spans.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum ReportLevel {
    /// A node label key of the scenario's `topologyLevels`: its values are the domains.
    Label(String),
    /// A HyperNode tier: its HyperNodes are the domains.
    Tier(u32),
}

impl ReportLevel {
    /// The scenario's `topologyLevels` (narrowest first), then its HyperNode tiers (lowest
    /// first).
    pub(super) fn of(scenario: &Scenario) -> Vec<ReportLevel> {
        let mut tiers: Vec<u32> = scenario.hypernodes.iter().map(|h| h.tier).collect();
        tiers.sort_unstable();
        tiers.dedup();
        scenario
            .topology_levels
            .iter()
            .cloned()
            .map(ReportLevel::Label)
            .chain(tiers.into_iter().map(ReportLevel::Tier))
            .collect()
    }

    /// As the engine names levels: the label key, or `tier-N`.
    pub(super) fn name(&self) -> String {
        match self {
            ReportLevel::Label(key) => key.clone(),
            ReportLevel::Tier(t) => format!("tier-{t}"),
        }
    }
}

/// Where a node is at one level: in a named domain, or in none, which makes it a domain of
/// its own (it shares that level with no other node).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Domain {
    Named(Arc<str>),
    Alone(Arc<str>),
}

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
    /// simulator's own pod table, fit its allocatable. Only a node whose pods grew since the
    /// last check can have become over-committed; debug builds recount every node from the
    /// pod table and compare with the running sums.
    pub(super) fn check_nodes(&mut self) {
        #[cfg(debug_assertions)]
        self.assert_tally_matches_pods();
        let mut bad = Vec::new();
        for name in std::mem::take(&mut self.tally.grown) {
            let (Some((_, alloc)), Some(node)) =
                (self.nodes.get(&name), self.tally.nodes.get(&name))
            else {
                continue;
            };
            if !node.used.fits(alloc) {
                bad.push(format!(
                    "t={}: node {name} over-committed: {} on {alloc}",
                    self.now, node.used
                ));
            }
        }
        self.overcommitted_nodes += bad.len() as u64;
        self.violations.extend(bad);
    }

    /// The running sums equal a recount of the pod table.
    #[cfg(debug_assertions)]
    fn assert_tally_matches_pods(&self) {
        let mut used: BTreeMap<&str, Resource> = BTreeMap::new();
        let mut pending = 0;
        for pod in &self.pods {
            if let (Some(node), true) = (&pod.node, pod.status.occupies_node()) {
                used.entry(node).or_default().add(&pod.request);
            }
            if pod.status == TaskStatus::Pending && self.jobs[pod.job].submitted.is_some() {
                pending += 1;
            }
        }
        for other in &self.other_pods {
            if let Some(node) = &other.node {
                used.entry(node).or_default().add(&other.request);
            }
        }
        assert_eq!(
            pending, self.tally.pending_pods,
            "pending pods: recount vs running sum"
        );
        for (name, node) in &self.tally.nodes {
            let recount = used.remove(&**name).unwrap_or_default();
            for (dim, v) in node.used.dimensions() {
                assert_eq!(
                    recount.get(dim),
                    v,
                    "node {name}, {dim}: recount vs running sum"
                );
            }
            for (dim, v) in recount.dimensions() {
                assert_eq!(
                    node.used.get(dim),
                    v,
                    "node {name}, {dim}: running sum vs recount"
                );
            }
        }
        assert!(
            used.is_empty(),
            "pods on nodes the sums do not know: {used:?}"
        );
        let partial = self
            .tally
            .nodes
            .values()
            .filter(|n| {
                let (u, all) = (n.used.get(GPU), n.allocatable.get(GPU));
                u > 0 && u < all
            })
            .count();
        assert_eq!(
            partial, self.tally.partial_gpu_nodes,
            "partially used GPU nodes"
        );
        let mut queues: BTreeMap<&str, Resource> = BTreeMap::new();
        let mut total = Resource::new();
        for pod in self
            .pods
            .iter()
            .filter(|p| p.node.is_some() && p.status.occupies_node())
        {
            queues
                .entry(&self.jobs[pod.job].queue)
                .or_default()
                .add(&pod.request);
            total.add(&pod.request);
        }
        for other in self.other_pods.iter().filter(|o| o.node.is_some()) {
            total.add(&other.request);
        }
        let same = |a: &Resource, b: &Resource| {
            a.dimensions().all(|(d, v)| b.get(d) == v) && b.dimensions().all(|(d, v)| a.get(d) == v)
        };
        assert!(
            same(&total, &self.tally.used),
            "used: recount vs running sum"
        );
        for (q, r) in &self.tally.queues {
            let recount = queues.remove(q.as_str()).unwrap_or_default();
            assert!(same(&recount, r), "queue {q}: recount vs running sum");
        }
        assert!(queues.is_empty(), "queues the sums do not know: {queues:?}");
    }

    /// Notes where a pod just bound landed: its node, that node's domain at each report
    /// level, and its GPU model. Read at bind time: nodes can be removed later.
    pub(super) fn record_placement(&mut self, p: usize, node: &Arc<str>) {
        let j = self.pods[p].job;
        if self.jobs[j].nodes.contains(node) {
            return;
        }
        let labels = self
            .nodes
            .get(node)
            .map(|(g, _)| &self.scenario.node_groups[*g].labels);
        let has_tiers = self
            .levels
            .iter()
            .any(|l| matches!(l, ReportLevel::Tier(_)));
        let snapshot = has_tiers.then(|| self.cache.snapshot());
        let domains: Vec<Domain> = self
            .levels
            .iter()
            .map(|level| {
                let named: Option<Arc<str>> = match level {
                    ReportLevel::Label(key) => labels
                        .and_then(|l| l.get(key))
                        .map(|v| Arc::from(v.as_str())),
                    ReportLevel::Tier(t) => snapshot.as_ref().and_then(|s| {
                        let id = s.node_by_name(node)?;
                        let level = s.hypernodes().levels.iter().find(|l| l.tier == Some(*t))?;
                        let d = (*level.domain_of.get(id.0 as usize)?)?;
                        Some(level.domains[d as usize].name.clone())
                    }),
                };
                named.map_or_else(|| Domain::Alone(node.clone()), Domain::Named)
            })
            .collect();
        let job = &mut self.jobs[j];
        job.nodes.push(node.clone());
        for (set, d) in job.domains.iter_mut().zip(domains) {
            set.insert(d);
        }
        if self.pods[p].request.get(GPU) > 0 {
            if let Some(model) = labels.and_then(|l| l.get(GPU_MODEL_LABEL)) {
                self.jobs[j].gpu_models.insert(Arc::from(model.as_str()));
            }
        }
    }

    pub(super) fn sample(&mut self) {
        let tally = &self.tally;
        let total = &tally.total;
        // The scenario's queues, and any other a running pod is in.
        let mut queues: BTreeMap<String, Resource> = tally
            .queues
            .iter()
            .filter(|(_, r)| r.dimensions().any(|(_, v)| v != 0))
            .map(|(q, r)| (q.clone(), r.clone()))
            .collect();
        for q in self.cache.state().queues() {
            queues.entry(q.name.to_string()).or_default();
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
                .map(|r| (r.to_string(), fraction(&tally.used, r)))
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
            pending_pods: tally.pending_pods,
            // A node with some but not all of its GPUs allocated: room a whole-node worker
            // cannot use (fragmentation).
            gpu_nodes: tally.gpu_nodes,
            partial_gpu_nodes: tally.partial_gpu_nodes,
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
                    // None for a gang that ran before it was submitted (a snapshot's,
                    // running at t=0): it did not wait in this run.
                    wait: j
                        .started
                        .map(|s| s - j.submitted.unwrap_or(0))
                        .filter(|w| *w >= 0),
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
                    nodes: j.nodes.iter().map(|n| n.to_string()).collect(),
                    spread: if j.nodes.is_empty() {
                        Vec::new()
                    } else {
                        self.levels
                            .iter()
                            .zip(&j.domains)
                            .map(|(level, domains)| LevelSpread {
                                level: level.name(),
                                domains: domains.len(),
                            })
                            .collect()
                    },
                    gpu_models: j.gpu_models.iter().map(|m| m.to_string()).collect(),
                    prediction: self.scenario.predict_start.then(|| {
                        JobPrediction::of(j.predicted.as_ref(), j.predicted_at_head.as_ref())
                    }),
                }
            })
            .collect();
        let mut report = Report::new(
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
            self.levels.iter().map(ReportLevel::name).collect(),
            self.topology_problems.clone(),
        );
        report.setup_problems = self.setup_problems.clone();
        report
    }
}

#[cfg(test)]
mod tests {
    use crate::sim::report::LevelSpread;
    use crate::sim::{Scenario, Simulation};

    /// Two racks of two 4-GPU nodes, one GPU model each; HyperNodes mirror the racks
    /// (one selected by a name pattern, one by labels) plus one that claims a node already
    /// in a rack. No topology-aware plugin: `wide` must span both racks and models, which
    /// gpu-affinity would rightly refuse.
    const RACKS: &str = r#"
name: racks
topologyLevels: [example.com/rack]
config: |
  actions: "enqueue, allocate"
  tiers: [{plugins: [{name: gang}, {name: predicates}, {name: proportion}, {name: binpack}]}]
nodeGroups:
- name: a
  count: 2
  allocatable: {cpu: "8", nvidia.com/gpu: 4}
  labels: {example.com/rack: ra, nvidia.com/gpu.product: A100}
- name: b
  count: 2
  allocatable: {cpu: "8", nvidia.com/gpu: 4}
  labels: {example.com/rack: rb, nvidia.com/gpu.product: H100}
hypernodes:
- name: sw-a
  tier: 1
  members: [{type: Node, selector: {regexMatch: {pattern: "a-.*"}}}]
- name: sw-b
  tier: 1
  members: [{type: Node, selector: {labelMatch: {matchLabels: {example.com/rack: rb}}}}]
- name: claims-a-1
  tier: 1
  members: [{type: Node, selector: {exactMatch: {name: a-1}}}]
jobs:
- name: wide
  networkTopology: {mode: sideways}
  tasks: [{role: w, replicas: 4, requests: {nvidia.com/gpu: 4}, runtime: 1m}]
- name: half
  submitAt: 2m
  tasks:
  - role: w
    requests: {nvidia.com/gpu: 2}
    runtime: 1m
    annotations: {kueue.x-k8s.io/podset-preferred-topology: "not a key"}
- name: cpu-only
  submitAt: 2m
  tasks: [{role: w, requests: {cpu: "1"}, runtime: 1m}]
"#;

    #[test]
    fn the_report_says_where_each_gang_ran_and_how_fragmented_gpus_were() {
        let scenario = Scenario::parse(RACKS, "racks.yaml").unwrap();
        let report = Simulation::new(scenario, "racks.yaml")
            .unwrap()
            .run(&mut |_| {});
        assert!(report.invariants_hold(), "{:?}", report.invariants);
        let job = |name: &str| report.jobs.iter().find(|j| j.name == name).unwrap();

        let wide = job("default/wide");
        let mut nodes = wide.nodes.clone();
        nodes.sort();
        assert_eq!(nodes, ["a-1", "a-2", "b-1", "b-2"]);
        // claims-a-1 sorts before sw-a, so a-1 stays in it: three tier-1 domains.
        let spread = |level: &str, domains| LevelSpread {
            level: level.into(),
            domains,
        };
        assert_eq!(
            wide.spread,
            [spread("example.com/rack", 2), spread("tier-1", 3)]
        );
        assert_eq!(wide.gpu_models, ["A100", "H100"]);
        let half = job("default/half");
        assert_eq!(half.nodes.len(), 1);
        assert_eq!(
            half.spread,
            [spread("example.com/rack", 1), spread("tier-1", 1)]
        );
        // GPU models count GPU pods only.
        assert!(job("default/cpu-only").gpu_models.is_empty());

        let s = &report.summary;
        assert_eq!(s.mixed_gpu_model_gangs, 1);
        assert_eq!(s.topology.len(), 2);
        for level in &s.topology {
            assert_eq!(
                (level.multi_node_gangs, level.within_one_domain),
                (1, 0),
                "only wide ran on several nodes: {level:?}"
            );
            assert_eq!(level.share_within_one_domain, Some(0.0));
        }
        assert_eq!(s.topology[0].mean_domains, Some(2.0));

        // While half runs (2m to 3m) one node has 2 of its 4 GPUs allocated; while wide
        // runs every GPU node is full.
        let at = |t: i64| {
            report
                .samples
                .iter()
                .take_while(|x| x.t <= t)
                .last()
                .unwrap()
        };
        assert_eq!((at(30_000).gpu_nodes, at(30_000).partial_gpu_nodes), (4, 0));
        assert_eq!(at(150_000).partial_gpu_nodes, 1);
        assert_eq!(s.max_partial_gpu_nodes, 1);
        assert!(s.mean_partial_gpu_nodes > 0.0 && s.mean_partial_gpu_nodes < 1.0);

        // Malformed requests and HyperNode problems are listed, each once.
        let problems = report.topology_problems.join("\n");
        assert!(
            problems.contains(
                "PodGroup default/wide: spec.networkTopology.mode \"sideways\" is not hard or soft"
            ),
            "{problems}"
        );
        assert!(
            problems.contains(
                "pod default/half-w-0: annotation kueue.x-k8s.io/podset-preferred-topology"
            ),
            "{problems}"
        );
        assert!(
            problems.contains("HyperNode sw-a: node a-1 is already in HyperNode claims-a-1"),
            "{problems}"
        );
        assert_eq!(report.topology_problems.len(), 3, "{problems}");

        let table = report.to_table(10);
        for line in [
            "partially used GPU nodes: mean ",
            "multi-node gangs within one example.com/rack: 0/1 (0.0%), mean 2.00 domains",
            "multi-node gangs within one tier-1: 0/1 (0.0%), mean 3.00 domains",
            "gangs mixing GPU models: 1",
            "4 nodes: example.com/rack 2, tier-1 3",
            "topology: PodGroup default/wide",
        ] {
            assert!(table.contains(line), "{line}\n{table}");
        }
        let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
        assert_eq!(json["jobs"][0]["spread"][0]["domains"], 2);
        assert_eq!(json["summary"]["topology"][1]["level"], "tier-1");
        let svg = crate::sim::plot::render(&report);
        assert!(svg.contains("gang spread"), "the SVG has the spread panel");
        assert!(svg.contains("within one example.com/rack"));
        assert!(svg.contains("partially used GPU nodes"));
    }
}
