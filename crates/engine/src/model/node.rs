use std::collections::BTreeMap;
use std::sync::Arc;

use super::devices::{NodeDevices, TaskClaim};
use super::pod_rules::Labels;
use super::resource::{Shortfall, CPU, MEMORY, PODS};
use super::{Placement, Resource, Taint, TaskStatus};

/// What a driver knows about a node from its spec and status.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct NodeSpec {
    pub name: String,
    pub allocatable: Resource,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub unschedulable: bool,
    pub ready: bool,
}

/// A pod as its node sees it: what it occupies. Every pod on a node is recorded, whichever
/// scheduler placed it, so nodes are never double-booked.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeTask {
    pub resreq: Resource,
    pub status: TaskStatus,
    /// The job (gang) uid if the pod is ours.
    pub job: Option<Arc<str>>,
    pub priority: i32,
    /// What other pods' rules see of it and what its own rules ask (anti-affinity toward
    /// pods that come later, host ports).
    pub namespace: Arc<str>,
    pub labels: Arc<Labels>,
    pub placement: Arc<Placement>,
    /// Its ResourceClaims: those allocated to devices of this node hold them.
    pub claims: Arc<[TaskClaim]>,
}

impl NodeTask {
    /// Whether the pod has required anti-affinity terms.
    pub fn required_anti_affinity(&self) -> bool {
        self.placement
            .rules()
            .is_some_and(|r| !r.pod_anti_affinity.required().is_empty())
    }

    /// The node's view of a task of a job (`job` its uid) or of a pod of another scheduler.
    pub fn of(task: &super::TaskInfo, job: Option<Arc<str>>) -> Self {
        NodeTask {
            resreq: task.resreq.clone(),
            status: task.status,
            job,
            priority: task.priority,
            namespace: task.namespace.clone(),
            labels: task.labels.clone(),
            placement: task.placement.clone(),
            claims: task.claims.clone(),
        }
    }
}

/// A claim holding devices of a node, how many of the node's pods use it and how many of
/// those are being released (evicted, terminating).
#[derive(Clone, Debug, PartialEq)]
pub struct HeldClaim {
    pub devices: Vec<u32>,
    pub users: u32,
    pub releasing: u32,
}

impl HeldClaim {
    /// Every pod using the claim is being released: its devices come free once they are
    /// gone and the claim is deallocated, not before (a pod may only be pipelined onto
    /// them).
    pub fn leaving(&self) -> bool {
        self.users > 0 && self.users == self.releasing
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct NodeInfo {
    pub name: Arc<str>,
    pub allocatable: Resource,
    /// Requests of every task that occupies the node (including releasing ones).
    pub used: Resource,
    /// `allocatable - used`, kept up to date so fit checks allocate nothing.
    pub idle: Resource,
    /// Requests of tasks being released: free once they terminate.
    pub releasing: Resource,
    /// Requests of tasks pipelined onto the node against releasing resources.
    pub pipelined: Resource,
    /// Shared with the node's earlier copies: a node is copied whenever a snapshot still
    /// holds it and one of its pods changes, and its labels rarely change with it.
    pub labels: Arc<BTreeMap<String, String>>,
    pub taints: Arc<[Taint]>,
    pub unschedulable: bool,
    pub ready: bool,
    /// Each task shared (an `Arc`): a node is copied whenever a snapshot still holds it and
    /// a session places a pod there or a pod of it changes, and a copy then costs two
    /// reference counts per task instead of a clone of each (on 5,000 nodes running ten
    /// pods each, those clones and their drops were 6% of the live scheduler's CPU: five
    /// scattered counts per task, cache misses on a large heap).
    pub tasks: BTreeMap<Arc<str>, Arc<NodeTask>>,
    /// How many of `tasks` carry required pod anti-affinity (which pods placed later must
    /// respect): counted as tasks come and go, so a session asks each node, not each task.
    pub anti_affinity_tasks: u32,
    /// The devices the node's ResourceSlices publish (see `model::devices`), if any.
    pub devices: Option<Arc<NodeDevices>>,
    /// How many claims hold each device (by inventory index): those allocated in the API
    /// and those of pods placed here (`device_claims`).
    pub device_holds: Vec<u16>,
    /// Claims of the node's pods not yet allocated in the API (placed by a session, or
    /// written and not yet seen back), with the devices each holds.
    pub device_claims: BTreeMap<Arc<str>, HeldClaim>,
    /// Claims allocated in the API on this node that pods of the node use (their devices
    /// are held by the inventory itself), with those pods counted.
    pub api_claim_users: BTreeMap<Arc<str>, HeldClaim>,
    /// How many of each device's holders are leaving (`HeldClaim::leaving`): a device
    /// whose holders all leave is free for pods pipelined behind the releases.
    pub device_leaving: Vec<u16>,
    /// Network-attached devices (`NodeDevices::shared`) that claims of the node's pods
    /// hold, by `driver/pool/device`, with how many: summed over the cluster
    /// (`Tally::shared_holds`), what one node takes no other node may.
    pub shared_holds: BTreeMap<Arc<str>, u16>,
}

impl NodeInfo {
    pub fn new(spec: NodeSpec) -> Self {
        NodeInfo {
            name: Arc::from(spec.name.as_str()),
            idle: spec.allocatable.clone(),
            allocatable: spec.allocatable,
            used: Resource::new(),
            releasing: Resource::new(),
            pipelined: Resource::new(),
            labels: Arc::new(spec.labels),
            taints: spec.taints.into(),
            unschedulable: spec.unschedulable,
            ready: spec.ready,
            tasks: BTreeMap::new(),
            anti_affinity_tasks: 0,
            devices: None,
            device_holds: Vec::new(),
            device_claims: BTreeMap::new(),
            api_claim_users: BTreeMap::new(),
            device_leaving: Vec::new(),
            shared_holds: BTreeMap::new(),
        }
    }

    /// Replaces spec fields, keeping the tasks and their accounting.
    /// Whether `spec` says what this node already says (a status heartbeat, a change of
    /// something the engine does not read).
    pub fn has_spec(&self, spec: &NodeSpec) -> bool {
        self.allocatable == spec.allocatable
            && *self.labels == spec.labels
            && *self.taints == *spec.taints
            && self.unschedulable == spec.unschedulable
            && self.ready == spec.ready
    }

    pub fn update_spec(&mut self, spec: NodeSpec) {
        self.allocatable = spec.allocatable;
        self.idle = self.allocatable.minus(&self.used);
        if *self.labels != spec.labels {
            self.labels = Arc::new(spec.labels);
        }
        if *self.taints != *spec.taints {
            self.taints = spec.taints.into();
        }
        self.unschedulable = spec.unschedulable;
        self.ready = spec.ready;
    }

    /// Replaces the node's device inventory, keeping the claims of its pods held.
    pub fn set_devices(&mut self, devices: Option<Arc<NodeDevices>>) {
        self.devices = devices;
        self.device_holds = self
            .devices
            .as_ref()
            .map(|d| d.initial_holds())
            .unwrap_or_default();
        self.device_leaving = vec![0; self.device_holds.len()];
        self.device_claims.clear();
        self.api_claim_users.clear();
        self.shared_holds.clear();
        let tasks: Vec<Arc<NodeTask>> = self.tasks.values().cloned().collect();
        for t in tasks {
            self.account_claims(&t.claims, true, t.status == TaskStatus::Releasing);
        }
    }

    /// Holds (or lets go of) the devices of `claims` allocated on this node, once per
    /// claim however many pods use it; a claim the API already records as allocated is
    /// held by the inventory itself. `releasing`: the pod using them is being released.
    pub fn account_claims(&mut self, claims: &[TaskClaim], add: bool, releasing: bool) {
        let Some(inv) = self.devices.clone() else {
            return;
        };
        for c in claims {
            let Some(alloc) = c.allocation.as_deref() else {
                continue;
            };
            if alloc.node != self.name {
                continue;
            }
            let in_api = inv.allocated.get(&c.name);
            let held = if in_api.is_some() {
                &mut self.api_claim_users
            } else {
                &mut self.device_claims
            };
            if !held.contains_key(&c.name) {
                if !add {
                    continue;
                }
                let devices: Vec<u32> = match in_api {
                    Some(ids) => ids.clone(),
                    None => alloc
                        .devices
                        .iter()
                        .filter_map(|d| inv.position(&d.key()))
                        .collect(),
                };
                if in_api.is_none() {
                    for &i in &devices {
                        self.device_holds[i as usize] += 1;
                        if inv.is_shared(i) {
                            let key = Arc::from(inv.devices[i as usize].key());
                            *self.shared_holds.entry(key).or_insert(0) += 1;
                        }
                    }
                }
                held.insert(
                    c.name.clone(),
                    HeldClaim {
                        devices,
                        users: 0,
                        releasing: 0,
                    },
                );
            }
            let entry = held.get_mut(&c.name).expect("present");
            let was_leaving = entry.leaving();
            let step = |n: &mut u32| {
                if add {
                    *n += 1
                } else {
                    *n -= 1
                }
            };
            step(&mut entry.users);
            if releasing {
                step(&mut entry.releasing);
            }
            let leaving = entry.leaving();
            if leaving != was_leaving {
                for &i in &entry.devices {
                    if leaving {
                        self.device_leaving[i as usize] += 1;
                    } else {
                        self.device_leaving[i as usize] -= 1;
                    }
                }
            }
            if entry.users == 0 {
                let gone = held.remove(&c.name).expect("present");
                if in_api.is_none() {
                    for i in gone.devices {
                        self.device_holds[i as usize] -= 1;
                        if inv.is_shared(i) {
                            let key = inv.devices[i as usize].key();
                            if let Some(n) = self.shared_holds.get_mut(key.as_str()) {
                                *n -= 1;
                                if *n == 0 {
                                    self.shared_holds.remove(key.as_str());
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    /// Which devices are free (by inventory index): now, or once the pods being released
    /// are gone (`future`: their claims deallocated; what pipelined pods hold stays held).
    pub fn free_devices(&self, future: bool) -> Vec<bool> {
        if future {
            self.device_holds
                .iter()
                .zip(&self.device_leaving)
                .map(|(h, l)| h == l)
                .collect()
        } else {
            self.device_holds.iter().map(|&h| h == 0).collect()
        }
    }

    /// Whether `claim` holds devices of this node (allocated in the API or by a pod here).
    pub fn holds_claim(&self, claim: &str) -> bool {
        self.device_claims.contains_key(claim)
            || self
                .devices
                .as_ref()
                .is_some_and(|d| d.allocated.contains_key(claim))
    }

    fn account(&mut self, task: &NodeTask, add: bool) {
        if !task.claims.is_empty() {
            self.account_claims(&task.claims, add, task.status == TaskStatus::Releasing);
        }
        if task.required_anti_affinity() {
            if add {
                self.anti_affinity_tasks += 1;
            } else {
                self.anti_affinity_tasks -= 1;
            }
        }
        let apply = |r: &mut Resource, add_to: bool| {
            if add_to {
                r.add(&task.resreq)
            } else {
                r.sub(&task.resreq)
            }
        };
        if task.status == TaskStatus::Pipelined {
            apply(&mut self.pipelined, add);
            return;
        }
        if task.status.occupies_node() {
            apply(&mut self.used, add);
            apply(&mut self.idle, !add);
        }
        if task.status == TaskStatus::Releasing {
            apply(&mut self.releasing, add);
        }
    }

    /// Adds (or replaces) a task on the node and accounts for its resources.
    pub fn add_task(&mut self, uid: Arc<str>, task: NodeTask) {
        self.account(&task, true);
        if let Some(replaced) = self.tasks.insert(uid, Arc::new(task)) {
            self.account(&replaced, false);
        }
    }

    pub fn remove_task(&mut self, uid: &str) -> Option<Arc<NodeTask>> {
        let task = self.tasks.remove(uid)?;
        self.account(&task, false);
        Some(task)
    }

    /// Number of pods on the node (pipelined ones included: they will be there).
    pub fn pod_count(&self) -> i64 {
        self.used.pods + self.pipelined.pods
    }

    /// Whether `req` fits in what is idle now.
    pub fn fits_idle(&self, req: &Resource) -> bool {
        req.fits(&self.idle)
    }

    /// What will be free once releasing tasks are gone and pipelined tasks arrive, in
    /// every dimension.
    pub fn future_free(&self) -> Resource {
        let mut free = self.idle.clone();
        free.add(&self.releasing);
        free.sub(&self.pipelined);
        free
    }

    /// What will be free once releasing tasks are gone and pipelined tasks arrive.
    pub fn future_idle(&self, name: &str) -> i64 {
        self.idle.get(name) + self.releasing.get(name) - self.pipelined.get(name)
    }

    /// Whether `req` fits in what will be free once releasing tasks are gone and pipelined
    /// tasks arrive: `future_shortfall(req).is_none()`, without making the shortfall.
    pub fn fits_future_idle(&self, req: &Resource) -> bool {
        let (i, r, p) = (&self.idle, &self.releasing, &self.pipelined);
        let fits = |need: i64, free: i64| need == 0 || need <= free;
        fits(req.milli_cpu, i.milli_cpu + r.milli_cpu - p.milli_cpu)
            && fits(req.memory, i.memory + r.memory - p.memory)
            && fits(req.pods, i.pods + r.pods - p.pods)
            && req
                .scalars
                .iter()
                .all(|(name, need)| fits(*need, i.scalar(name) + r.scalar(name) - p.scalar(name)))
    }

    /// The first dimension of `req` (in `Resource::dimensions` order) that does not fit in
    /// what will be free once releasing tasks are gone and pipelined tasks arrive. The same
    /// answer as `req.shortfall_with(|n| self.future_idle(n))`, without looking dimensions up
    /// by name: this runs for every candidate node of every task.
    pub fn future_shortfall(&self, req: &Resource) -> Option<Shortfall> {
        // Node scans meet a shortfall on most nodes of a full cluster: the fixed names are
        // shared, not allocated for each.
        static FIXED: std::sync::LazyLock<[Arc<str>; 3]> =
            std::sync::LazyLock::new(|| [Arc::from(CPU), Arc::from(MEMORY), Arc::from(PODS)]);
        let (i, r, p) = (&self.idle, &self.releasing, &self.pipelined);
        let fixed = [
            (0, req.milli_cpu, i.milli_cpu + r.milli_cpu - p.milli_cpu),
            (1, req.memory, i.memory + r.memory - p.memory),
            (2, req.pods, i.pods + r.pods - p.pods),
        ];
        for (name, need, free) in fixed {
            if need != 0 && need > free {
                return Some(Shortfall {
                    resource: FIXED[name].clone(),
                    need,
                    free,
                });
            }
        }
        for (name, need) in &req.scalars {
            let free = i.scalar(name) + r.scalar(name) - p.scalar(name);
            if *need != 0 && *need > free {
                return Some(Shortfall {
                    resource: name.clone(),
                    need: *need,
                    free,
                });
            }
        }
        None
    }

    /// Whether the node can take pods at all.
    pub fn schedulable(&self) -> bool {
        self.ready && !self.unschedulable
    }
}
