//! The simulator's running sums over its own pod table — what each node, each queue and the
//! cluster hold, how many pods wait — kept as pods change instead of recounted after every
//! step: at 20,000 nodes and 50,000 pods the recount was most of a simulated day's time.
//! Debug builds (the tests) recount after every cycle and compare (`Simulation::check_nodes`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use crate::model::resource::GPU;
use crate::model::Resource;

/// What one pod adds to the sums, remembered so that it is taken out exactly as it went in.
#[derive(Clone, Debug, Default)]
pub(super) struct PodShare {
    /// The node it occupies (a status that holds the node's resources).
    pub node: Option<Arc<str>>,
    /// Pending in a submitted job.
    pub pending: bool,
}

/// A node's sums: its GPUs and the requests of the pods occupying it.
#[derive(Clone, Debug, Default)]
pub(super) struct NodeTally {
    pub allocatable: Resource,
    pub used: Resource,
}

impl NodeTally {
    /// Some but not all of its GPUs allocated: room a whole-node worker cannot use.
    fn partially_used_gpus(&self) -> bool {
        let (used, all) = (self.used.get(GPU), self.allocatable.get(GPU));
        used > 0 && used < all
    }
}

#[derive(Clone, Debug, Default)]
pub(super) struct SimTally {
    pub nodes: HashMap<Arc<str>, NodeTally>,
    /// Allocatable of every live node.
    pub total: Resource,
    /// Requests of every pod occupying a node.
    pub used: Resource,
    /// The same by the pod's queue.
    pub queues: BTreeMap<String, Resource>,
    pub pending_pods: usize,
    pub gpu_nodes: usize,
    pub partial_gpu_nodes: usize,
    /// Nodes whose pods grew since the last over-commit check.
    pub grown: BTreeSet<Arc<str>>,
}

impl SimTally {
    pub fn add_node(&mut self, name: &Arc<str>, allocatable: &Resource) {
        self.total.add(allocatable);
        if allocatable.get(GPU) > 0 {
            self.gpu_nodes += 1;
        }
        self.nodes.insert(
            name.clone(),
            NodeTally {
                allocatable: allocatable.clone(),
                used: Resource::new(),
            },
        );
    }

    /// A node gone; its pods were taken out of the sums before (they went back to pending).
    pub fn remove_node(&mut self, name: &str) {
        let Some(node) = self.nodes.remove(name) else {
            return;
        };
        self.total.sub(&node.allocatable);
        if node.allocatable.get(GPU) > 0 {
            self.gpu_nodes -= 1;
        }
        if node.partially_used_gpus() {
            self.partial_gpu_nodes -= 1;
        }
        self.grown.remove(name);
    }

    /// A pod of no queue (the scenario's `otherPods`) on `name`.
    pub fn add_other(&mut self, name: &Arc<str>, request: &Resource) {
        self.used.add(request);
        if let Some(node) = self.nodes.get_mut(name) {
            let was_partial = node.partially_used_gpus();
            node.used.add(request);
            self.grown.insert(name.clone());
            if !was_partial && node.partially_used_gpus() {
                self.partial_gpu_nodes += 1;
            }
        }
    }

    /// Takes out an `add_other` pod, before its node is removed.
    pub fn remove_other(&mut self, name: &str, request: &Resource) {
        self.used.sub(request);
        if let Some(node) = self.nodes.get_mut(name) {
            let was_partial = node.partially_used_gpus();
            node.used.sub(request);
            if was_partial && !node.partially_used_gpus() {
                self.partial_gpu_nodes -= 1;
            }
        }
    }

    /// Adds (`sign` 1) or takes out (-1) one pod's share.
    pub fn apply(&mut self, share: &PodShare, queue: &str, request: &Resource, sign: i8) {
        if share.pending {
            if sign > 0 {
                self.pending_pods += 1;
            } else {
                self.pending_pods -= 1;
            }
        }
        let Some(name) = &share.node else {
            return;
        };
        let queue = self.queues.entry(queue.to_string()).or_default();
        if sign > 0 {
            self.used.add(request);
            queue.add(request);
        } else {
            self.used.sub(request);
            queue.sub(request);
        }
        let Some(node) = self.nodes.get_mut(name) else {
            return;
        };
        let was_partial = node.partially_used_gpus();
        if sign > 0 {
            node.used.add(request);
            self.grown.insert(name.clone());
        } else {
            node.used.sub(request);
        }
        match (was_partial, node.partially_used_gpus()) {
            (false, true) => self.partial_gpu_nodes += 1,
            (true, false) => self.partial_gpu_nodes -= 1,
            _ => {}
        }
    }
}
