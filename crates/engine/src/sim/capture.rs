//! A scenario from the engine's cache as a driver filled it (`rust-batch simulate
//! --from-cluster`): the nodes in groups of equal nodes (keeping their names), the queues,
//! every gang with its pods — those running pinned to their nodes with the time they have
//! run, those pending submitted at t=0 in their creation order — and the pods of no gang as
//! their nodes' usage, and what DRA devices and claims they have (`devices`). What a
//! scenario cannot say is listed as skipped, with the reason, and what it says only
//! approximately is listed as a note.
//!
//! Times are relative to `now` (the snapshot's time), which becomes t=0. A pod's runtime in
//! the scenario is what the scheduler expects of it (its runtime estimate, else its queue's
//! default): the simulation plays out what the estimates say. A pod without either runs
//! until the end of the simulation.

mod devices;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::devices::DeviceSetDef;
use super::scenario::{
    AffinityDef, ExactMatchDef, GangDef, HyperNodeDef, HyperNodeMemberDef, HyperNodeMemberType,
    JobDef, LabelMatchDef, MemberSelectorDef, Millis, NetworkTopologyDef, NodeAffinityDef,
    NodeGroup, OtherPodDef, QueueDef, RegexMatchDef, RunningPodDef, Scenario, SubGroupPolicyDef,
    TaskDef, MAX_DURATION,
};
use crate::cache::Cache;
use crate::model::pod_rules::HOSTNAME_LABEL;
use crate::model::resource::PODS;
use crate::model::topology::{KUEUE_PREFERRED_TOPOLOGY, KUEUE_REQUIRED_TOPOLOGY};
use crate::model::{
    JobInfo, MemberKind, MemberSelector, NodeInfo, QueueInfo, QueueTree, Resource, ResourceList,
    TaskInfo, TaskStatus, Timestamp, TopologyBound, TopologyMode, TopologyRequest,
};

/// What to call the scenario and what it runs with.
#[derive(Clone, Debug, Default)]
pub struct CaptureOptions {
    /// The snapshot's time (the driver's clock, ms): t=0 of the scenario.
    pub now: Timestamp,
    pub name: String,
    pub description: String,
    /// The scheduler configuration (Volcano format); the default when None.
    pub config: Option<String>,
}

/// An object left out of the scenario, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    /// `kind namespace/name`.
    pub object: String,
    pub reason: String,
}

/// The scenario, what it leaves out, and what it says only approximately.
#[derive(Clone, Debug)]
pub struct Captured {
    pub scenario: Scenario,
    pub skipped: Vec<Skipped>,
    pub notes: Vec<String>,
}

impl super::Simulation {
    /// The scenario of where the simulation is now (its time is t=0 of the new one): what
    /// `simulate --from-cluster` makes of a cluster, made of the simulated one.
    pub fn capture(&self, name: &str) -> Captured {
        capture(
            &self.cache,
            &CaptureOptions {
                now: self.now,
                name: name.into(),
                description: String::new(),
                config: self.scenario.config.clone(),
            },
        )
    }
}

/// The scenario of what `cache` holds at `opts.now`.
pub fn capture(cache: &Cache, opts: &CaptureOptions) -> Captured {
    let mut c = Capturing {
        now: opts.now,
        skipped: Vec::new(),
        notes: Vec::new(),
        other_pods: Vec::new(),
    };
    let snapshot = cache.snapshot();
    let mut nodes: Vec<&NodeInfo> = snapshot.nodes().map(|(_, n)| n).collect();
    nodes.sort_by(|a, b| a.name.cmp(&b.name));
    let node_names: BTreeSet<&str> = nodes.iter().map(|n| &*n.name).collect();

    let mut queues: Vec<&QueueInfo> = snapshot.queues().collect();
    queues.sort_by(|a, b| a.created.cmp(&b.created).then(a.name.cmp(&b.name)));
    let mut queue_defs: Vec<QueueDef> = queues.iter().filter_map(|q| c.queue(q)).collect();
    // A queue whose parent chain is broken, or whose guarantee exceeds its capability,
    // takes no work on the cluster; without it, its children may break in turn.
    loop {
        let infos: Vec<QueueInfo> = queue_defs.iter().map(QueueDef::to_info).collect();
        let tree = QueueTree::new(infos.iter());
        let broken: Vec<(String, String)> = infos
            .iter()
            .filter_map(|q| {
                let why = tree
                    .problem(&q.name)
                    .map(String::from)
                    .or_else(|| q.guarantee_problem())?;
                Some((q.name.to_string(), why))
            })
            .collect();
        if broken.is_empty() {
            break;
        }
        for (name, why) in broken {
            c.skip(
                format!("Queue {name}"),
                format!("{why}: it takes no work; its gangs are skipped too"),
            );
            queue_defs.retain(|q| q.name != name);
        }
    }
    // The simulator has queue default whether the cluster has its object or not.
    let default_queue = QueueDef::from_info(&QueueInfo::new("default", 1));
    let mut known_queues: BTreeMap<&str, &QueueDef> =
        queue_defs.iter().map(|q| (q.name.as_str(), q)).collect();
    known_queues.entry("default").or_insert(&default_queue);

    // Labels matter only where some pod's rules select pods by them.
    let labels_matter = snapshot.jobs().any(|(_, j)| {
        j.tasks()
            .iter()
            .any(|t| t.placement.rules().is_some() || !t.placement.host_ports.is_empty())
    }) || nodes.iter().any(|n| {
        n.tasks
            .values()
            .any(|t| t.placement.rules().is_some() || !t.placement.host_ports.is_empty())
    });

    let mut jobs: Vec<&JobInfo> = snapshot.jobs().map(|(_, j)| j).collect();
    jobs.sort_by(|a, b| a.created.cmp(&b.created).then(a.uid.cmp(&b.uid)));
    let mut job_defs = Vec::new();
    let mut captured_pods: BTreeSet<String> = BTreeSet::new();
    let mut captured_claims: BTreeSet<Arc<str>> = BTreeSet::new();
    let mut claim_jobs: BTreeMap<Arc<str>, BTreeSet<&str>> = BTreeMap::new();
    for job in &jobs {
        if let Some(def) = c.job(job, &known_queues, &node_names, labels_matter) {
            for t in job.tasks() {
                captured_pods.insert(t.uid.to_string());
                for claim in t.claims.iter() {
                    captured_claims.insert(claim.name.clone());
                    if claim.shared {
                        claim_jobs
                            .entry(claim.name.clone())
                            .or_default()
                            .insert(&job.uid);
                    }
                }
            }
            job_defs.push(def);
        }
    }
    for (claim, users) in claim_jobs.iter().filter(|(_, u)| u.len() > 1) {
        c.notes.push(format!(
            "claim {claim}: shared by pods of {} gangs; in the scenario each gang has a claim              of its own",
            users.len()
        ));
    }
    let (device_classes, captured_devices) = c.dra(&snapshot, &jobs, &nodes, &captured_claims);
    let node_groups = c.node_groups(&nodes, &captured_devices.per_node);
    // Whatever occupies a node and is in no captured gang is the node's usage.
    for n in &nodes {
        for (uid, t) in &n.tasks {
            if !t.status.occupies_node() || captured_pods.contains(&**uid) {
                continue;
            }
            let name = cache
                .pod(uid)
                .map(|p| format!("{}/{}", p.task.namespace, p.task.name))
                .unwrap_or_else(|| format!("{}/{uid}", t.namespace));
            c.other_pods.push(OtherPodDef {
                name,
                node: n.name.to_string(),
                requests: ResourceList(without_pods(&t.resreq)),
                labels: if labels_matter {
                    (*t.labels).clone()
                } else {
                    BTreeMap::new()
                },
            });
        }
    }
    let mut hypernodes: Vec<HyperNodeDef> = cache
        .hypernode_specs()
        .filter_map(|h| c.hypernode(h))
        .collect();
    hypernodes.sort_by(|a, b| a.name.cmp(&b.name));
    // A GangGroup member left out of the scenario leaves the group.
    let present: BTreeSet<(String, String)> = job_defs
        .iter()
        .map(|j| (j.namespace.clone(), j.name.clone()))
        .collect();
    for j in &mut job_defs {
        let before = j.gang.group.len();
        let ns = j.namespace.clone();
        j.gang
            .group
            .retain(|m| present.contains(&(ns.clone(), m.clone())));
        if j.gang.group.len() < before {
            c.notes.push(format!(
                "gang {}/{}: members of its GangGroup that are not captured are left out of it",
                j.namespace, j.name
            ));
        }
    }
    let Capturing {
        mut skipped,
        notes,
        mut other_pods,
        ..
    } = c;
    other_pods.sort_by(|a, b| a.node.cmp(&b.node).then(a.name.cmp(&b.name)));
    let mut scenario = Scenario {
        name: opts.name.clone(),
        description: opts.description.clone(),
        seed: 0,
        schedule_period: Millis(1000),
        max_time: Millis(24 * 3600 * 1000),
        config: opts.config.clone(),
        eviction_grace: Millis(30_000),
        node_groups,
        device_classes,
        device_pools: captured_devices.pools,
        hypernodes,
        topology_levels: Vec::new(),
        queues: queue_defs,
        other_pods,
        jobs: job_defs,
        events: Vec::new(),
        predict_start: true,
    };
    // HyperNodes the scheduler reports problems with (a member of a tier not below its
    // own, a missing child) are refused by the scenario's checks: the topology is left out
    // whole, and said.
    if let Ok(text) = scenario.to_yaml() {
        if let Err(super::ScenarioError::Invalid { field, message, .. }) =
            Scenario::parse(&text, "snapshot")
        {
            if field.starts_with("hypernodes") {
                skipped.push(Skipped {
                    object: "every HyperNode".into(),
                    reason: format!("{field}: {message}"),
                });
                scenario.hypernodes.clear();
            }
        }
    }
    Captured {
        scenario,
        skipped,
        notes,
    }
}

struct Capturing {
    now: Timestamp,
    skipped: Vec<Skipped>,
    notes: Vec<String>,
    other_pods: Vec<OtherPodDef>,
}

fn without_pods(r: &Resource) -> Resource {
    let mut r = r.clone();
    r.set(PODS, 0);
    r
}

/// A duration the scenario can hold (positive, within the simulator's limit).
fn millis(ms: i64) -> Option<Millis> {
    (ms > 0 && ms <= MAX_DURATION.0).then_some(Millis(ms))
}

impl QueueDef {
    /// The scenario's queue for the engine's (`to_info`'s inverse, but for `created`).
    pub fn from_info(q: &QueueInfo) -> QueueDef {
        QueueDef {
            name: q.name.to_string(),
            weight: q.weight.max(1),
            capability: q.capability.clone().map(ResourceList),
            guarantee: q.guarantee.clone().map(ResourceList),
            reclaimable: q.reclaimable,
            state: q.state,
            deserved: q.deserved.clone().map(ResourceList),
            parent: q.parent.as_deref().map(String::from),
            priority: q.priority,
            created_before: None,
            default_runtime_estimate: q.default_runtime_estimate.and_then(millis),
            min_runtime: q.min_runtime.and_then(millis),
            preemption_delay: q.preemption_delay.and_then(millis),
            // As the live scheduler last recorded it (shortly before the snapshot): the
            // simulation decays it from t=0.
            past_usage: q.recorded_usage.as_ref().map(|u| u.amounts.clone()),
        }
    }
}

impl Capturing {
    fn skip(&mut self, object: String, reason: impl Into<String>) {
        self.skipped.push(Skipped {
            object,
            reason: reason.into(),
        });
    }

    /// Nodes in groups of equal nodes (allocatable, labels but the hostname, taints,
    /// schedulability, devices), each group keeping its nodes' names.
    fn node_groups(
        &mut self,
        nodes: &[&NodeInfo],
        devices: &BTreeMap<Arc<str>, Vec<DeviceSetDef>>,
    ) -> Vec<NodeGroup> {
        let mut groups: Vec<NodeGroup> = Vec::new();
        for n in nodes {
            let mut labels = (*n.labels).clone();
            if labels.get(HOSTNAME_LABEL).map(String::as_str) == Some(&*n.name) {
                labels.remove(HOSTNAME_LABEL);
            }
            let node_devices = devices.get(&n.name).cloned().unwrap_or_default();
            let unschedulable = n.unschedulable || !n.ready;
            if !n.ready {
                self.notes.push(format!(
                    "node {}: not Ready; written as unschedulable",
                    n.name
                ));
            }
            let allocatable = ResourceList(n.allocatable.clone());
            let taints = n.taints.to_vec();
            let same = groups.iter_mut().find(|g| {
                g.allocatable == allocatable
                    && g.labels == labels
                    && g.taints == taints
                    && g.unschedulable == unschedulable
                    && g.devices == node_devices
            });
            match same {
                Some(g) => {
                    g.count += 1;
                    g.names.push(n.name.to_string());
                }
                None => {
                    let base = n.name.trim_end_matches(|c: char| c.is_ascii_digit());
                    let base = base.trim_end_matches(['-', '.', '_']);
                    let base = if base.is_empty() { "nodes" } else { base };
                    let mut name = base.to_string();
                    let mut k = 1;
                    while groups.iter().any(|g| g.name == name) {
                        k += 1;
                        name = format!("{base}-group{k}");
                    }
                    groups.push(NodeGroup {
                        name,
                        count: 1,
                        names: vec![n.name.to_string()],
                        allocatable,
                        labels,
                        taints,
                        unschedulable,
                        devices: node_devices,
                    });
                }
            }
        }
        groups
    }

    fn queue(&mut self, q: &QueueInfo) -> Option<QueueDef> {
        if let Some(why) = &q.refused {
            self.skip(
                format!("Queue {}", q.name),
                format!("the scheduler refuses it ({why}); its gangs are skipped too"),
            );
            return None;
        }
        let mut def = QueueDef::from_info(q);
        def.created_before = millis(self.now - q.created);
        Some(def)
    }

    fn job(
        &mut self,
        job: &JobInfo,
        queues: &BTreeMap<&str, &QueueDef>,
        nodes: &BTreeSet<&str>,
        labels_matter: bool,
    ) -> Option<JobDef> {
        let object = format!("gang {}", job.uid);
        let Some(queue) = queues.get(&*job.queue) else {
            self.skip(
                object,
                format!(
                    "queue {:?} does not exist or is refused: the gang cannot run (its running \
                     pods are kept as their nodes' usage)",
                    job.queue
                ),
            );
            return None;
        };
        let kept: Vec<&TaskInfo> = job
            .tasks()
            .iter()
            .filter(|t| {
                t.status == TaskStatus::Pending
                    || (t.status.occupies_node()
                        && t.node.as_deref().is_some_and(|n| nodes.contains(n)))
            })
            .collect();
        if kept.is_empty() {
            // Done (every pod ended), or nothing of it exists yet.
            return None;
        }
        if let Some(problem) = kept
            .iter()
            .find_map(|t| t.placement.pod_rules.as_ref().and_then(|r| r.problem()))
        {
            self.skip(
                object,
                format!("a pod's affinity or spread rules are malformed ({problem})"),
            );
            return None;
        }
        if !self.claims_capturable(&object, &kept) {
            return None;
        }
        let running = kept
            .iter()
            .filter(|t| t.status != TaskStatus::Pending)
            .count() as u32;
        let have = kept.len() as u32;
        let mut min_member = job.min_member;
        let mut min_task_member: BTreeMap<String, u32> = job
            .min_task_member
            .iter()
            .map(|(r, m)| (r.to_string(), *m))
            .collect();
        let role_count = |role: &str| kept.iter().filter(|t| &*t.role == role).count() as u32;
        let short_roles: Vec<String> = min_task_member
            .iter()
            .filter(|(r, m)| role_count(r) < **m)
            .map(|(r, _)| r.clone())
            .collect();
        if have < min_member || !short_roles.is_empty() {
            if running == 0 {
                self.skip(
                    object,
                    format!(
                        "has {have} of the {min_member} members it needs: it waits for more \
                         pods, which a snapshot cannot foresee"
                    ),
                );
                return None;
            }
            self.notes.push(format!(
                "{object}: {have} of its {min_member} members are running or pending (the \
                 others ended or are held back); its minimum is lowered to them"
            ));
            min_member = min_member.min(have);
            for r in short_roles {
                let n = role_count(&r);
                min_task_member.insert(r, n);
            }
        }
        if !job.held_back.is_empty() {
            self.notes.push(format!(
                "{object}: members held back (scheduling gates, or what the engine does not \
                 model) are left out"
            ));
        }
        let queue_default = queue.default_runtime_estimate;
        let mut tasks: Vec<TaskDef> = Vec::new();
        let mut endless = false;
        for t in &kept {
            let def = self.task(job, t, queue_default, labels_matter, &mut endless);
            let merged = tasks.iter_mut().find(|d| {
                TaskDef {
                    replicas: d.replicas,
                    running: d.running.clone(),
                    ..def.clone()
                } == **d
            });
            match merged {
                Some(d) => {
                    d.replicas += 1;
                    d.running.extend(def.running);
                }
                None => tasks.push(def),
            }
        }
        if endless {
            self.notes.push(format!(
                "{object}: no runtime estimate and its queue {} has no default: its pods run \
                 until the end of the simulation",
                job.queue
            ));
        }
        let (gang_topology, topology_note) = job
            .topology
            .as_deref()
            .filter(|t| !t.source.starts_with("annotation"))
            .map_or((None, None), network_topology);
        if let Some(n) = topology_note {
            self.notes.push(format!("{object}: {n}"));
        }
        let mut sub_group_policy = Vec::new();
        for p in job.subgroups.iter() {
            let (topology, note) = p.topology.as_ref().map_or((None, None), network_topology);
            if let Some(n) = note {
                self.notes
                    .push(format!("{object}: subgroup {}: {n}", p.name));
            }
            sub_group_policy.push(SubGroupPolicyDef {
                name: Some(p.name.to_string()),
                sub_group_size: p.size.max(1),
                min_sub_groups: p.min_groups,
                label_selector: p.selector.clone(),
                match_label_keys: p.match_label_keys.clone(),
                network_topology: topology,
            });
        }
        let group: Vec<String> = job
            .policy
            .group
            .iter()
            .filter(|g| **g != *job.uid)
            .filter_map(|g| {
                let (ns, name) = g.split_once('/')?;
                (ns == &*job.namespace).then(|| name.to_string())
            })
            .collect();
        Some(JobDef {
            name: job.name.to_string(),
            namespace: job.namespace.to_string(),
            queue: job.queue.to_string(),
            submit_at: Millis(0),
            created_before: millis(self.now - job.created),
            min_member: Some(min_member),
            min_task_member,
            min_resources: job.min_resources.clone().map(ResourceList),
            priority: job.priority,
            min_runtime: job.policy.min_runtime.and_then(millis),
            preemption_delay: job.policy.preemption_delay.and_then(millis),
            runtime_jitter: 0.0,
            estimate: None,
            repeat: None,
            gang: GangDef {
                mode: job.policy.mode,
                match_policy: job.policy.match_policy,
                total_number: job.policy.total_number,
                group,
                waiting_time: job.policy.wait_timeout.and_then(millis),
                never_preempts: job.policy.never_preempts,
                disrupt_whole: job.policy.disrupt_whole,
            },
            network_topology: gang_topology,
            sub_group_policy,
            tasks,
        })
    }

    fn task(
        &mut self,
        job: &JobInfo,
        t: &TaskInfo,
        queue_default: Option<Millis>,
        labels_matter: bool,
        endless: &mut bool,
    ) -> TaskDef {
        let estimate = t.checked_estimate().ok().flatten().and_then(millis);
        let mut runtime = estimate.or(queue_default);
        let mut running = Vec::new();
        if t.status != TaskStatus::Pending {
            let elapsed = t.started.map_or(0, |s| (self.now - s).max(0));
            if t.status == TaskStatus::Releasing {
                // Terminating: gone after a grace period, whatever its estimate said.
                runtime = millis(elapsed + 30_000);
            }
            running.push(RunningPodDef {
                node: t.node.as_deref().unwrap_or_default().to_string(),
                elapsed: Millis(elapsed.min(MAX_DURATION.0)),
            });
        }
        if runtime.is_none() {
            *endless = true;
        }
        let p = &*t.placement;
        if p.volumes.is_some() {
            self.notes.push(format!(
                "pod {}/{}: what its volumes ask of nodes is not captured",
                t.namespace, t.name
            ));
        }
        let rules = p.pod_rules.as_deref().cloned().unwrap_or_default();
        let mut annotations = BTreeMap::new();
        if let Some(req) = t.topology.as_deref() {
            match (&req.mode, &req.bound) {
                (TopologyMode::Hard, TopologyBound::LabelKey(k)) => {
                    annotations.insert(KUEUE_REQUIRED_TOPOLOGY.to_string(), k.clone());
                }
                (TopologyMode::Soft, TopologyBound::LabelKey(k)) => {
                    annotations.insert(KUEUE_PREFERRED_TOPOLOGY.to_string(), k.clone());
                }
                _ => self.notes.push(format!(
                    "pod {}/{}: its topology request ({}) is not captured",
                    t.namespace,
                    t.name,
                    req.problem.as_deref().unwrap_or(&req.source)
                )),
            }
        }
        TaskDef {
            role: t.role.to_string(),
            replicas: 1,
            requests: ResourceList(without_pods(&t.resreq)),
            runtime,
            estimate,
            running,
            priority: (t.priority != job.priority).then_some(t.priority),
            never_preempts: t.never_preempts,
            node_selector: p.node_selector.clone(),
            node_affinity: p.node_affinity.clone(),
            tolerations: p.tolerations.clone(),
            labels: if labels_matter {
                (*t.labels).clone()
            } else {
                BTreeMap::new()
            },
            affinity: AffinityDef {
                node_affinity: (!p.preferred_node_affinity.is_empty()).then(|| NodeAffinityDef {
                    required_during_scheduling_ignored_during_execution: None,
                    preferred_during_scheduling_ignored_during_execution: p
                        .preferred_node_affinity
                        .clone(),
                }),
                pod_affinity: rules.pod_affinity,
                pod_anti_affinity: rules.pod_anti_affinity,
            },
            topology_spread_constraints: rules.topology_spread_constraints,
            host_ports: p.host_ports.clone(),
            annotations,
            group_size: None,
            claims: t
                .claims
                .iter()
                .enumerate()
                .map(|(i, c)| devices::claim_def(t, &job.name, i, c))
                .collect(),
        }
    }

    fn hypernode(&mut self, h: &crate::model::HyperNodeSpec) -> Option<HyperNodeDef> {
        let mut members = Vec::new();
        for m in &h.members {
            let selector = match &m.selector {
                MemberSelector::Exact(name) => MemberSelectorDef {
                    exact_match: Some(ExactMatchDef { name: name.clone() }),
                    ..Default::default()
                },
                MemberSelector::Regex(pattern) => MemberSelectorDef {
                    regex_match: Some(RegexMatchDef {
                        pattern: pattern.clone(),
                    }),
                    ..Default::default()
                },
                MemberSelector::Labels(labels) => MemberSelectorDef {
                    label_match: Some(LabelMatchDef {
                        match_labels: labels.clone(),
                    }),
                    ..Default::default()
                },
                MemberSelector::Invalid(why) => {
                    self.skip(
                        format!("HyperNode {}", h.name),
                        format!("a member's selector is invalid ({why})"),
                    );
                    return None;
                }
            };
            let kind = match &m.kind {
                MemberKind::Node => HyperNodeMemberType::Node,
                MemberKind::HyperNode => HyperNodeMemberType::HyperNode,
                MemberKind::Unknown(kind) => {
                    self.skip(
                        format!("HyperNode {}", h.name),
                        format!("a member of unknown type {kind:?}"),
                    );
                    return None;
                }
            };
            members.push(HyperNodeMemberDef { kind, selector });
        }
        if members.is_empty() || h.tier == 0 {
            self.skip(
                format!("HyperNode {}", h.name),
                "no members or tier 0: the scheduler does not use it",
            );
            return None;
        }
        if h.tier_name.is_some() {
            self.notes.push(format!(
                "HyperNode {}: its tierName is not captured",
                h.name
            ));
        }
        Some(HyperNodeDef {
            name: h.name.clone(),
            tier: h.tier,
            members,
        })
    }
}

/// Volcano's `networkTopology` for a request, or a note saying why there is none.
fn network_topology(req: &TopologyRequest) -> (Option<NetworkTopologyDef>, Option<String>) {
    if let Some(problem) = &req.problem {
        return (
            None,
            Some(format!("topology request not captured: {problem}")),
        );
    }
    let mode = match req.mode {
        TopologyMode::Hard => "hard",
        TopologyMode::Soft => "soft",
    };
    match &req.bound {
        TopologyBound::Tier(t) => (
            Some(NetworkTopologyDef {
                mode: Some(mode.into()),
                highest_tier_allowed: Some(i64::from(*t)),
            }),
            None,
        ),
        TopologyBound::Unbounded => (
            Some(NetworkTopologyDef {
                mode: Some(mode.into()),
                highest_tier_allowed: None,
            }),
            None,
        ),
        other => (
            None,
            Some(format!(
                "topology request ({} within {other:?}) not captured",
                req.source
            )),
        ),
    }
}
