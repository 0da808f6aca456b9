//! The test's own model of the cluster (never the engine's accounting), built from a world,
//! and the churn between cycles.

use std::collections::BTreeMap;
use std::sync::Arc;

use rust_batch_engine::cache::{Cache, PodUpdate};
use rust_batch_engine::model::{
    NodeSpec, Placement, PodGroupPhase, QueueInfo, QueueState, Resource, Taint, TaintEffect,
    TaskStatus, Toleration,
};
use rust_batch_engine::testkit::{self, Gang};

use super::world::*;

#[derive(Clone, Debug)]
pub(crate) struct PodModel {
    pub(crate) job: Option<String>,
    pub(crate) role: String,
    pub(crate) request: Resource,
    pub(crate) status: TaskStatus,
    pub(crate) node: Option<String>,
    pub(crate) zone: Option<u8>,
    pub(crate) tolerate: bool,
    /// The PodDisruptionBudgets covering the pod.
    pub(crate) budgets: Vec<String>,
}

#[derive(Clone, Debug)]
pub(crate) struct JobModel {
    pub(crate) min_member: u32,
    pub(crate) min_role: BTreeMap<String, u32>,
    pub(crate) queue: String,
    pub(crate) priority: i32,
    /// A subgroup policy over role r0 (Volcano's subGroupPolicy): its size, and each
    /// member pod's subgroup.
    pub(crate) subgroups: Option<(u32, BTreeMap<String, usize>)>,
}

pub(crate) struct Model {
    pub(crate) nodes: BTreeMap<String, NodeCfg>,
    pub(crate) pods: BTreeMap<String, PodModel>,
    pub(crate) jobs: BTreeMap<String, JobModel>,
    pub(crate) capability: BTreeMap<String, i64>,
    /// Queue -> its parent queue.
    pub(crate) parent: BTreeMap<String, String>,
    /// PodDisruptionBudget -> how many pods it lets go in a cycle.
    pub(crate) budgets: BTreeMap<String, u32>,
}

pub(crate) const ZONE: &str = "topology.kubernetes.io/zone";

pub(crate) fn node_allocatable(n: &NodeCfg) -> Resource {
    let mut r = testkit::res(&[
        ("cpu", &n.cpu.to_string()),
        ("memory", &format!("{}Gi", n.mem_gi)),
        ("pods", &n.pods.to_string()),
    ]);
    r.set_scalar("nvidia.com/gpu", n.gpu * 1000);
    r
}

pub(crate) fn request(cpu_m: i64, mem_mi: i64, gpu: i64) -> Vec<(&'static str, String)> {
    let mut v = Vec::new();
    if cpu_m > 0 {
        v.push(("cpu", format!("{cpu_m}m")));
    }
    if mem_mi > 0 {
        v.push(("memory", format!("{mem_mi}Mi")));
    }
    if gpu > 0 {
        v.push(("nvidia.com/gpu", gpu.to_string()));
    }
    v
}

pub(crate) fn build(w: &World) -> (Cache, Model) {
    let mut cache = testkit::cache_with_default_queue();
    let mut model = Model {
        nodes: BTreeMap::new(),
        pods: BTreeMap::new(),
        jobs: BTreeMap::new(),
        capability: BTreeMap::new(),
        parent: BTreeMap::new(),
        budgets: BTreeMap::new(),
    };
    for (i, q) in w.queues.iter().enumerate() {
        let name = format!("q{i}");
        let mut info = QueueInfo::new(&name, q.weight);
        if let Some(cpu) = q.capability_cpu {
            info.capability = Some(testkit::res(&[("cpu", &cpu.to_string())]));
            model.capability.insert(name.clone(), cpu * 1000);
        }
        if q.closed {
            info.state = QueueState::Closed;
        }
        if let Some(cpu) = q.deserved_cpu {
            info.deserved = Some(testkit::res(&[("cpu", &cpu.to_string())]));
        }
        if i > 0 && q.child_of_first {
            info.parent = Some("q0".into());
            model.parent.insert(name.clone(), "q0".into());
        }
        cache.apply_queue(info);
    }
    for (i, n) in w.nodes.iter().enumerate() {
        let name = format!("node-{i}");
        let mut spec = NodeSpec {
            name: name.clone(),
            allocatable: node_allocatable(n),
            ready: n.ready,
            unschedulable: n.unschedulable,
            ..Default::default()
        };
        spec.labels.insert(ZONE.into(), format!("z{}", n.zone));
        if n.tainted {
            spec.taints.push(Taint {
                key: "dedicated".into(),
                value: "batch".into(),
                effect: TaintEffect::NoSchedule,
            });
        }
        cache.apply_node(spec);
        if n.foreign_pct > 0 {
            let uid = format!("foreign-{i}");
            let cpu_m = n.cpu * 1000 * n.foreign_pct / 100;
            let mem_mi = n.mem_gi * 1024 * n.foreign_pct / 100;
            let req = request(cpu_m, mem_mi, 0);
            let pairs: Vec<(&str, &str)> = req.iter().map(|(k, v)| (*k, v.as_str())).collect();
            testkit::foreign_pod(&mut cache, &uid, &name, &pairs);
            model.pods.insert(
                uid,
                PodModel {
                    job: None,
                    role: String::new(),
                    request: Resource {
                        pods: 1,
                        ..testkit::res(&pairs)
                    },
                    status: TaskStatus::Running,
                    node: Some(name.clone()),
                    zone: None,
                    tolerate: true,
                    budgets: Vec::new(),
                },
            );
        }
        model.nodes.insert(name, n.clone());
    }
    for (g, cfg) in w.gangs.iter().enumerate() {
        let total: usize = cfg.roles.iter().map(|r| r.count).sum();
        let min_member = 1 + cfg.min_pick % total as u32;
        let queue = if cfg.queue == 3 {
            "default".to_string()
        } else {
            format!("q{}", cfg.queue)
        };
        let mut placement = Placement::default();
        if let Some(z) = cfg.zone {
            placement.node_selector.insert(ZONE.into(), format!("z{z}"));
        }
        if cfg.tolerate {
            placement.tolerations.push(Toleration {
                key: "dedicated".into(),
                value: "batch".into(),
                ..Default::default()
            });
        }
        let mut gang = Gang::new(&format!("g{g}"), min_member)
            .queue(&queue)
            .priority(cfg.priority)
            .created(g as i64);
        if cfg.inqueue {
            gang = gang.phase(PodGroupPhase::Inqueue);
        }
        let mut min_request = Resource::new();
        let mut min_role = BTreeMap::new();
        for (r, role) in cfg.roles.iter().enumerate() {
            let name = format!("r{r}");
            let req = request(role.cpu_m, role.mem_mi, role.gpu);
            let pairs: Vec<(&str, &str)> = req.iter().map(|(k, v)| (*k, v.as_str())).collect();
            gang = gang.placed_tasks(&name, role.count, &pairs, placement.clone());
            let role_min = role.min_pick % (role.count as u32 + 1);
            if role_min > 0 {
                gang = gang.min_role(&name, role_min);
                min_role.insert(name, role_min);
            }
            min_request.add(&testkit::res(&pairs));
        }
        if cfg.min_resources {
            gang.spec.min_resources = Some(min_request);
        }
        // One gang in five splits role r0 into subgroups of `size` pods (the last one may be
        // short and so never whole), with 0 or 1 whole ones required.
        let spin = w.seed.rotate_left(g as u32 * 3 + 5);
        let first = cfg.roles[0].count;
        let mut subgroups = None;
        if spin % 5 == 1 && first >= 2 {
            let size = 1 + (spin >> 8) as usize % first;
            gang = gang.subgroups("r0", size as u32, ((spin >> 16) % 2) as u32);
            let mut members = BTreeMap::new();
            for (i, t) in gang.tasks[..first].iter_mut().enumerate() {
                t.labels = std::sync::Arc::new(testkit::labels(&[
                    ("role", "r0"),
                    ("replica", &(i / size).to_string()),
                ]));
                members.insert(t.uid.to_string(), i / size);
            }
            subgroups = Some((size as u32, members));
        }
        // Two gangs in three carry runtime estimates (0-4 ms, against cycles 1 ms apart), so
        // backfill's reservations and EASY placements are exercised too.
        let spin = w.seed.wrapping_add(g as u64 * 7);
        if !spin.is_multiple_of(3) {
            gang = gang.estimate((spin % 5) as i64);
        }
        // One gang in four is under a PodDisruptionBudget letting 0-2 pods go; one in
        // sixteen also under a second, roomy one (the eviction API refuses such pods).
        let spin = w.seed.rotate_left(g as u32 * 5 + 11);
        let mut budgets = Vec::new();
        if spin.is_multiple_of(4) {
            budgets.push((format!("default/pdb-g{g}"), ((spin >> 8) % 3) as u32));
        }
        if spin % 16 == 4 {
            budgets.push(("default/pdb-roomy".to_string(), 100));
        }
        for (name, allowed) in &budgets {
            gang = gang.budget(name);
            cache.apply_budget(name, *allowed);
            model.budgets.insert(name.clone(), *allowed);
        }
        for t in &gang.tasks {
            model.pods.insert(
                t.uid.to_string(),
                PodModel {
                    job: Some(gang.uid().to_string()),
                    role: t.role.to_string(),
                    request: t.resreq.clone(),
                    status: TaskStatus::Pending,
                    node: None,
                    zone: cfg.zone,
                    tolerate: cfg.tolerate,
                    budgets: budgets.iter().map(|(n, _)| n.clone()).collect(),
                },
            );
        }
        model.jobs.insert(
            gang.uid().to_string(),
            JobModel {
                min_member,
                min_role,
                queue,
                priority: cfg.priority,
                subgroups,
            },
        );
        gang.apply(&mut cache);
    }
    (cache, model)
}

/// A small deterministic generator for the churn between cycles.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub(crate) fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

pub(crate) fn holds_node(s: TaskStatus) -> bool {
    matches!(
        s,
        TaskStatus::Bound | TaskStatus::Running | TaskStatus::Releasing
    )
}

/// Some pods finish, some are evicted (Releasing), evicted ones go away and their controller
/// creates them again as new pending pods.
pub(crate) fn churn(cache: &mut Cache, model: &mut Model, rng: &mut Rng, round: usize) {
    let uids: Vec<String> = model.pods.keys().cloned().collect();
    for uid in uids {
        let pod = model.pods[&uid].clone();
        let Some(job) = pod.job.clone() else {
            continue;
        };
        match pod.status {
            TaskStatus::Running if rng.chance(30) => {
                cache.set_pod_status(
                    &uid,
                    TaskStatus::Succeeded,
                    pod.node.as_deref().map(Arc::from),
                );
                model.pods.get_mut(&uid).unwrap().status = TaskStatus::Succeeded;
            }
            TaskStatus::Running if rng.chance(20) => {
                cache.set_pod_status(
                    &uid,
                    TaskStatus::Releasing,
                    pod.node.as_deref().map(Arc::from),
                );
                model.pods.get_mut(&uid).unwrap().status = TaskStatus::Releasing;
            }
            TaskStatus::Releasing => {
                let mut update = cache.pod(&uid).unwrap().clone();
                cache.delete_pod(&uid);
                model.pods.remove(&uid);
                let new_uid = format!("{uid}-r{round}");
                update.task.uid = Arc::from(new_uid.as_str());
                update.task.name = update.task.uid.clone();
                update.task.status = TaskStatus::Pending;
                update.task.node = None;
                cache.apply_pod(PodUpdate {
                    task: update.task,
                    job: Some(job),
                });
                model.pods.insert(
                    new_uid,
                    PodModel {
                        status: TaskStatus::Pending,
                        node: None,
                        ..pod
                    },
                );
            }
            _ => {}
        }
    }
}
