//! Sums over the cluster's gangs and nodes that every session reads as it opens or closes,
//! kept up to date as gangs and nodes change (`ClusterState::job_mut`, `node_mut` and the
//! cache's inserts and deletes), so that a session costs what changed rather than passes
//! over every gang and node: on a 5,000-node cluster those passes were most of a cycle in
//! which nothing changed, and a burst runs dozens of cycles a second.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::model::{JobId, JobInfo, NodeInfo, PodGroupPhase, Resource, TaskStatus};

/// See the module documentation. Equal to `Tally::of` the state it belongs to at all times
/// (checked in debug builds as sessions open).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tally {
    queues: BTreeMap<Arc<str>, QueueSums>,
    schedulable_allocatable: Resource,
    schedulable_used: Resource,
    /// What schedulable nodes will have free once releasing tasks are gone and pipelined
    /// ones arrive (`NodeInfo::future_free` summed): every gang allocate gives up on asks
    /// for it, and summing 20,000 nodes each session was a large part of a cycle.
    schedulable_future_free: Resource,
    anti_affinity_nodes: u32,
    unschedulable_nodes: u32,
    /// Gangs with pending members.
    pending: JobSet,
    /// Gangs with members the driver keeps out of the engine (`JobInfo::held_back`).
    held_back: JobSet,
    /// Gangs not admitted yet (phase Pending).
    unadmitted: JobSet,
    /// Gangs with members placed but not bound (Allocated or Pipelined).
    holding: JobSet,
    /// Gangs a session reports on even when it decides nothing about them
    /// (`JobInfo::unsettled`).
    unsettled: JobSet,
    /// Network-attached devices held by claims of pods on any node, by
    /// `driver/pool/device` (`NodeInfo::shared_holds` summed): one is free for no node
    /// while any node holds it.
    shared_holds: BTreeMap<Arc<str>, u32>,
    /// Nodes whose inventories reach network-attached devices: while there are any, one
    /// node's placement can change another node's answer for a pod with claims.
    shared_device_nodes: u32,
}

/// Sums over the gangs that name one queue (whether or not the queue exists).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QueueSums {
    /// How many gangs are in each phase (by `PodGroupPhase::index`).
    pub phases: [u32; 5],
    /// What their members hold on nodes.
    pub allocated: Resource,
    /// What all their members ask for.
    pub request: Resource,
    /// The minimum requests of gangs admitted (Inqueue) with no member running yet.
    pub inqueue: Resource,
    /// What those gangs still wait for: their minimum request less what they hold, never
    /// below zero in any dimension, pods not counted.
    pub waiting: Resource,
}

impl QueueSums {
    /// How many gangs name the queue.
    pub fn gangs(&self) -> u32 {
        self.phases.iter().sum()
    }
}

/// Whether a gang is admitted and none of its members runs yet (it counts against the
/// room admission leaves).
fn admitted_not_running(job: &JobInfo) -> bool {
    job.phase == PodGroupPhase::Inqueue && job.count(TaskStatus::Running) == 0
}

impl Tally {
    /// Summed afresh over a state's gangs and nodes.
    pub fn of<'a>(
        jobs: impl Iterator<Item = (JobId, &'a JobInfo)>,
        nodes: impl Iterator<Item = &'a NodeInfo>,
    ) -> Tally {
        let mut tally = Tally::default();
        for (id, job) in jobs {
            tally.add_job(id, job);
        }
        for node in nodes {
            tally.add_node(node);
        }
        tally
    }

    pub fn queues(&self) -> impl Iterator<Item = (&Arc<str>, &QueueSums)> {
        self.queues.iter()
    }

    /// The sums of the gangs naming queue `name` (None: no gang does).
    pub fn queue(&self, name: &str) -> Option<&QueueSums> {
        self.queues.get(name)
    }

    /// Allocatable of schedulable nodes.
    pub fn schedulable_allocatable(&self) -> &Resource {
        &self.schedulable_allocatable
    }

    /// Requests of the tasks on schedulable nodes.
    pub fn schedulable_used(&self) -> &Resource {
        &self.schedulable_used
    }

    /// What schedulable nodes will have free once releasing tasks are gone and pipelined
    /// tasks arrive.
    pub fn schedulable_future_free(&self) -> &Resource {
        &self.schedulable_future_free
    }

    /// Whether every node takes new pods (none cordoned or not ready): then "every node"
    /// and "every schedulable node" are the same set.
    pub fn all_nodes_schedulable(&self) -> bool {
        self.unschedulable_nodes == 0
    }

    /// Whether a pod on some node carries required anti-affinity.
    pub fn any_anti_affinity(&self) -> bool {
        self.anti_affinity_nodes > 0
    }

    pub fn pending(&self) -> &JobSet {
        &self.pending
    }

    pub fn held_back(&self) -> &JobSet {
        &self.held_back
    }

    pub fn unadmitted(&self) -> &JobSet {
        &self.unadmitted
    }

    pub fn holding(&self) -> &JobSet {
        &self.holding
    }

    pub fn unsettled(&self) -> &JobSet {
        &self.unsettled
    }

    pub(super) fn add_job(&mut self, id: JobId, job: &JobInfo) {
        self.account_job(job, true);
        self.pending.set(id, job.pending_count() > 0);
        self.held_back.set(id, !job.held_back.is_empty());
        self.unadmitted.set(id, job.phase == PodGroupPhase::Pending);
        self.holding.set(id, job.holds_placements());
        self.unsettled.set(id, job.unsettled());
    }

    pub(super) fn remove_job(&mut self, id: JobId, job: &JobInfo) {
        self.account_job(job, false);
        self.pending.set(id, false);
        self.held_back.set(id, false);
        self.unadmitted.set(id, false);
        self.holding.set(id, false);
        self.unsettled.set(id, false);
    }

    fn account_job(&mut self, job: &JobInfo, adding: bool) {
        let op = signed(adding);
        let sums = self.queues.entry(job.queue.clone()).or_default();
        op(&mut sums.allocated, &job.allocated);
        op(&mut sums.request, &job.total_request);
        if admitted_not_running(job) {
            let min = job.min_request();
            let mut waiting = min.minus(&job.allocated);
            waiting.pods = 0;
            waiting.max_with(&Resource::new());
            op(&mut sums.inqueue, &min);
            op(&mut sums.waiting, &waiting);
        }
        if adding {
            sums.phases[job.phase.index()] += 1;
        } else {
            sums.phases[job.phase.index()] -= 1;
            if sums.gangs() == 0 {
                self.queues.remove(&job.queue);
            }
        }
    }

    pub(super) fn add_node(&mut self, node: &NodeInfo) {
        self.account_node(node, true);
        for (key, n) in &node.shared_holds {
            *self.shared_holds.entry(key.clone()).or_insert(0) += u32::from(*n);
        }
        self.shared_device_nodes += u32::from(reaches_shared(node));
        self.anti_affinity_nodes += u32::from(node.anti_affinity_tasks > 0);
        self.unschedulable_nodes += u32::from(!node.schedulable());
    }

    pub(super) fn remove_node(&mut self, node: &NodeInfo) {
        self.account_node(node, false);
        for (key, n) in &node.shared_holds {
            if let Some(total) = self.shared_holds.get_mut(key) {
                *total -= u32::from(*n);
                if *total == 0 {
                    self.shared_holds.remove(key);
                }
            }
        }
        self.shared_device_nodes -= u32::from(reaches_shared(node));
        self.anti_affinity_nodes -= u32::from(node.anti_affinity_tasks > 0);
        self.unschedulable_nodes -= u32::from(!node.schedulable());
    }

    fn account_node(&mut self, node: &NodeInfo, adding: bool) {
        let op = signed(adding);
        if node.schedulable() {
            op(&mut self.schedulable_allocatable, &node.allocatable);
            op(&mut self.schedulable_used, &node.used);
            op(&mut self.schedulable_future_free, &node.future_free());
        }
    }
}

/// Whether the node's inventory reaches network-attached devices.
fn reaches_shared(node: &NodeInfo) -> bool {
    node.devices
        .as_ref()
        .is_some_and(|d| d.shared.iter().any(|s| *s))
}

impl Tally {
    /// How many claims, on any node, hold the network-attached device `key`.
    pub fn shared_held(&self, key: &str) -> u32 {
        self.shared_holds.get(key).copied().unwrap_or(0)
    }

    /// Whether any node reaches network-attached devices.
    pub fn has_shared_devices(&self) -> bool {
        self.shared_device_nodes > 0
    }
}

/// Adds to a sum, or takes away from it.
fn signed(adding: bool) -> fn(&mut Resource, &Resource) {
    if adding {
        Resource::add
    } else {
        Resource::sub
    }
}

/// A set of gangs by slot (a bit each): copied with the tally whenever a snapshot holds it
/// and the cache changes, so it must be cheap to copy — 5,000 gangs are 80 words.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobSet(Vec<u64>);

impl JobSet {
    pub fn contains(&self, id: JobId) -> bool {
        let i = id.0 as usize;
        self.0.get(i / 64).is_some_and(|w| w & (1 << (i % 64)) != 0)
    }

    pub fn set(&mut self, id: JobId, member: bool) {
        let (word, bit) = (id.0 as usize / 64, 1u64 << (id.0 % 64));
        if member {
            if self.0.len() <= word {
                self.0.resize(word + 1, 0);
            }
            self.0[word] |= bit;
        } else if let Some(w) = self.0.get_mut(word) {
            *w &= !bit;
            // No trailing empty words: equal sets compare equal.
            while self.0.last() == Some(&0) {
                self.0.pop();
            }
        }
    }

    /// The members in slot order.
    pub fn iter(&self) -> impl Iterator<Item = JobId> + '_ {
        self.0.iter().enumerate().flat_map(|(w, &word)| {
            let mut bits = word;
            std::iter::from_fn(move || {
                (bits != 0).then(|| {
                    let bit = bits.trailing_zeros();
                    bits &= bits - 1;
                    JobId((w * 64) as u32 + bit)
                })
            })
        })
    }

    /// Every member of either.
    pub fn union(&self, other: &JobSet) -> JobSet {
        let mut both = self.clone();
        both.union_with(other);
        both
    }

    /// Adds every member of `other`.
    pub fn union_with(&mut self, other: &JobSet) {
        if self.0.len() < other.0.len() {
            self.0.resize(other.0.len(), 0);
        }
        for (w, o) in self.0.iter_mut().zip(&other.0) {
            *w |= o;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_sets_list_members_in_slot_order_and_compare_by_members() {
        let mut a = JobSet::default();
        for i in [130, 3, 64, 0, 63] {
            a.set(JobId(i), true);
        }
        assert_eq!(
            a.iter().map(|j| j.0).collect::<Vec<_>>(),
            vec![0, 3, 63, 64, 130]
        );
        assert!(a.contains(JobId(64)) && !a.contains(JobId(65)) && !a.contains(JobId(9999)));
        a.set(JobId(130), false);
        a.set(JobId(7), false);
        let mut b = JobSet::default();
        for i in [64, 63, 3, 0] {
            b.set(JobId(i), true);
        }
        assert_eq!(a, b, "no trailing empty words once 130 left");
        let mut c = JobSet::default();
        c.set(JobId(200), true);
        c.union_with(&a);
        assert_eq!(
            c.iter().map(|j| j.0).collect::<Vec<_>>(),
            vec![0, 3, 63, 64, 200]
        );
    }
}
