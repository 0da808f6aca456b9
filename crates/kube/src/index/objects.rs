//! The index's other kinds: claims, volumes and storage classes (pods' volume rules),
//! nodes, disruption budgets, namespaces, queues, priority classes and Volcano HyperNodes.

use super::*;

impl Index {
    // ----- volumes ---------------------------------------------------------------------

    /// Lays the pod's volume rules over its placement while it waits to be placed (a bound
    /// pod's volumes are where it runs), and remembers what they were resolved from.
    pub(super) fn resolve_volumes(
        &mut self,
        pod: &Pod,
        uid: &str,
        update: &mut crate::cache::PodUpdate,
    ) {
        if update.task.node.is_some() {
            self.volume_pods.remove(uid);
            return;
        }
        let (rules, deps) = self.volume_objects.resolve(pod);
        let Some(mut rules) = rules else {
            self.volume_pods.remove(uid);
            return;
        };
        if let Some(why) = self.provisioning.backing_off(uid) {
            rules.blocked.get_or_insert_with(|| why.to_string());
        }
        let mut placement = (*update.task.placement).clone();
        placement.volumes = Some(Box::new(rules));
        update.task.set_placement(placement);
        self.volume_pods.insert(uid, pod.clone(), deps);
    }

    /// A claim, volume or class changed: the pods whose volume rules depend on it are
    /// resolved again.
    pub(super) fn refresh_volume_pods(&mut self, dep: &VolumeDep) {
        for pod in self.volume_pods.depending_on(dep) {
            self.apply_pod(&pod);
        }
    }

    /// Resolves a pending pod's volume rules again (its back-off began or ended).
    pub fn refresh_volume_pod(&mut self, uid: &str) {
        if let Some(pod) = self.volume_pods.get(uid).cloned() {
            self.apply_pod(&pod);
        }
    }

    pub fn apply_claim(&mut self, pvc: &PersistentVolumeClaim) {
        let key = format!("{}/{}", pvc.namespace().unwrap_or_default(), pvc.name_any());
        if store_newest(&mut self.volume_objects.claims, key.clone(), pvc) {
            self.refresh_volume_pods(&VolumeDep::Claim(key));
        }
    }

    pub fn delete_claim(&mut self, key: &str) {
        self.volume_objects.claims.remove(key);
        self.refresh_volume_pods(&VolumeDep::Claim(key.to_string()));
    }

    pub fn claim_keys(&self) -> Vec<String> {
        self.volume_objects.claims.keys().cloned().collect()
    }

    pub fn apply_volume(&mut self, pv: &PersistentVolume) {
        let name = pv.name_any();
        if store_newest(&mut self.volume_objects.volumes, name.clone(), pv) {
            self.refresh_volume_pods(&VolumeDep::Volume(name));
        }
    }

    pub fn delete_volume(&mut self, name: &str) {
        self.volume_objects.volumes.remove(name);
        self.refresh_volume_pods(&VolumeDep::Volume(name.to_string()));
    }

    pub fn volume_keys(&self) -> Vec<String> {
        self.volume_objects.volumes.keys().cloned().collect()
    }

    pub fn apply_class(&mut self, sc: &StorageClass) {
        let name = sc.name_any();
        if store_newest(&mut self.volume_objects.classes, name.clone(), sc) {
            self.refresh_volume_pods(&VolumeDep::Class(name));
        }
    }

    pub fn delete_class(&mut self, name: &str) {
        self.volume_objects.classes.remove(name);
        self.refresh_volume_pods(&VolumeDep::Class(name.to_string()));
    }

    pub fn class_keys(&self) -> Vec<String> {
        self.volume_objects.classes.keys().cloned().collect()
    }

    // ----- nodes ---------------------------------------------------------------------

    /// Applies a node's report; a cycle sees it at once if the engine's view changed (a
    /// heartbeat of its status conditions does not change it).
    pub fn apply_node(&mut self, node: &Node) -> Wake {
        match node_to_spec(node) {
            Ok(spec) => {
                let name = spec.name.clone();
                if self.cache.apply_node(spec) {
                    self.node_reach_changed(&name);
                    Wake::Now
                } else {
                    Wake::No
                }
            }
            Err(e) => {
                crate::retry::warn_limited("node ignored", &e.to_string());
                Wake::No
            }
        }
    }

    pub fn delete_node(&mut self, name: &str) {
        self.cache.delete_node(name);
        self.node_reach_changed(name);
    }

    pub fn node_keys(&self) -> Vec<String> {
        self.cache
            .state()
            .nodes()
            .map(|(_, n)| n.name.to_string())
            .collect()
    }

    // ----- disruption budgets --------------------------------------------------------

    /// The budgets (`namespace/name`, sorted) that cover a pod of `ns` with `labels`.
    pub(super) fn budgets_covering(
        &self,
        ns: &str,
        labels: &BTreeMap<String, String>,
    ) -> Vec<Arc<str>> {
        let mut covering: Vec<Arc<str>> = self
            .budgets
            .iter()
            .filter(|(_, b)| b.namespace().as_deref() == Some(ns) && budgets::covers(b, labels))
            .map(|(key, _)| Arc::from(key.as_str()))
            .collect();
        covering.sort_unstable();
        covering
    }

    /// A budget appeared, changed or went: the engine learns what it allows, and our pods
    /// of its namespace which budgets cover them now.
    pub(super) fn refresh_budgets(&mut self, ns: &str) {
        let pods: Vec<(String, Vec<Arc<str>>)> = self
            .labels
            .iter()
            .filter(|(_, (pod_ns, _))| pod_ns == ns)
            .map(|(uid, (_, labels))| (uid.clone(), self.budgets_covering(ns, labels)))
            .collect();
        for (uid, covering) in pods {
            self.cache.set_pod_budgets(&uid, covering);
        }
    }

    pub fn apply_budget(&mut self, pdb: &PodDisruptionBudget) {
        let ns = pdb.namespace().unwrap_or_default();
        let key = format!("{ns}/{}", pdb.name_any());
        self.cache
            .apply_budget(&key, budgets::disruptions_allowed(pdb));
        self.budgets.insert(key, pdb.clone());
        self.refresh_budgets(&ns);
    }

    pub fn delete_budget(&mut self, key: &str) {
        self.cache.delete_budget(key);
        if self.budgets.remove(key).is_some() {
            let ns = key.split_once('/').map(|(ns, _)| ns).unwrap_or_default();
            self.refresh_budgets(ns);
        }
    }

    pub fn budget_keys(&self) -> Vec<String> {
        self.budgets.keys().cloned().collect()
    }

    // ----- namespaces -------------------------------------------------------------------

    pub fn apply_namespace(&mut self, ns: &Namespace) {
        self.cache
            .apply_namespace(&ns.name_any(), ns.labels().clone());
    }

    pub fn delete_namespace(&mut self, key: &str) {
        self.cache.delete_namespace(key);
    }

    pub fn namespace_keys(&self) -> Vec<String> {
        self.cache.namespace_names()
    }

    // ----- queues and priority classes -----------------------------------------------

    /// A Queue from a watch: a cycle needs it at once unless the index already has this
    /// version (the echo of the status writer's own write) or a newer one.
    pub fn apply_queue(&mut self, q: &Queue) -> Wake {
        let name = q.name_any();
        if !store_newest(&mut self.queues, name.clone(), q) {
            return Wake::No;
        }
        self.status_touched.queues.insert(name.clone());
        match queue_to_info(q) {
            Ok(info) => {
                self.cache.apply_queue(info);
                self.report_queue_problems();
            }
            Err(e) => {
                let r = q.object_ref(&());
                self.report(r, EventType::Warning, "InvalidQueue", e.to_string());
            }
        }
        Wake::Now
    }

    /// The API server's answer to the status writer: kept only while the index still has
    /// that queue (see `apply_group_answer`).
    pub fn apply_queue_answer(&mut self, q: &Queue) {
        let same = self
            .queues
            .get(&q.name_any())
            .is_some_and(|have| have.uid() == q.uid());
        if same {
            let _ = self.apply_queue(q);
        }
    }

    pub fn delete_queue(&mut self, name: &str) {
        if let Some(q) = self.queues.remove(name) {
            if let Some(uid) = q.uid() {
                self.events.forget(&uid);
            }
        }
        self.cache.delete_queue(name);
    }

    pub fn queue_keys(&self) -> Vec<String> {
        self.queues.keys().cloned().collect()
    }

    /// Events on queues whose parent is missing or loops, or whose guarantee exceeds
    /// their capability (reported once per distinct problem).
    pub(super) fn report_queue_problems(&mut self) {
        for (name, problem) in queue_problems(self.queues.values()) {
            if let Some(q) = self.queues.get(&name) {
                let r = q.object_ref(&());
                self.report(r, EventType::Warning, "InvalidQueue", problem);
            }
        }
    }

    pub fn apply_priority_class(&mut self, pc: &PriorityClass) {
        let name = pc.name_any();
        // Optional in the 1.37 schema (a zero value is left out): absent is 0.
        self.priority_classes
            .insert(name.clone(), pc.value.unwrap_or(0));
        let protection = self.class_protection_of(pc);
        if protection == (None, None) {
            self.class_protection.remove(&name);
        } else {
            self.class_protection.insert(name.clone(), protection);
        }
        // PodGroups that named this class before it was seen get its value now.
        let waiting: Vec<String> = self
            .groups
            .all()
            .flat_map(|s| s.naming_class(&name))
            .collect();
        for key in &waiting {
            self.refresh_group(key);
        }
    }

    pub fn delete_priority_class(&mut self, name: &str) {
        self.priority_classes.remove(name);
        self.class_protection.remove(name);
    }

    /// A PriorityClass's minimum runtime and preemption delay (its `rust-batch.io/*`
    /// annotations, read as a queue's are). A value that does not parse, is zero or is over
    /// a year is an `InvalidPriorityClass` event naming the annotation, and is left out.
    pub(super) fn class_protection_of(&mut self, pc: &PriorityClass) -> (Option<i64>, Option<i64>) {
        use crate::dialects::volcano::{duration_value, MIN_RUNTIME, PREEMPTION_DELAY};
        let mut read = |key: &str| {
            let text = pc.metadata.annotations.as_ref()?.get(key)?;
            match duration_value(text) {
                Ok(ms) => Some(ms),
                Err(why) => {
                    let r = pc.object_ref(&());
                    let message = format!("metadata.annotations[{key}]: {why}");
                    self.report(r, EventType::Warning, "InvalidPriorityClass", message);
                    None
                }
            }
        };
        (read(MIN_RUNTIME), read(PREEMPTION_DELAY))
    }

    pub fn priority_class_keys(&self) -> Vec<String> {
        self.priority_classes.keys().cloned().collect()
    }

    // ----- network topology (Volcano HyperNodes) ---------------------------------------

    pub fn apply_hypernode(&mut self, hn: &HyperNode) {
        let name = hn.name_any();
        if !store_newest(&mut self.hypernodes, name.clone(), hn) {
            return;
        }
        match hypernode_to_spec(hn) {
            Ok(spec) => {
                // An error it was told before is gone (what the topology finds wrong with
                // it now is `report_topology_problems`'s to say).
                if !self.hypernode_problems.contains_key(&name) {
                    if let Some(uid) = hn.uid() {
                        self.events.forget_reason(&uid, INVALID_HYPERNODE);
                    }
                }
                self.cache.apply_hypernode(spec)
            }
            Err(e) => {
                // Unusable as a whole: left out of the topology, and said.
                self.cache.delete_hypernode(&name);
                self.hypernode_problems.remove(&name);
                let r = hn.object_ref(&());
                self.report(r, EventType::Warning, INVALID_HYPERNODE, e.to_string());
            }
        }
    }

    pub fn delete_hypernode(&mut self, name: &str) {
        if let Some(uid) = self.hypernodes.remove(name).and_then(|h| h.uid()) {
            self.events.forget(&uid);
        }
        self.hypernode_problems.remove(name);
        self.cache.delete_hypernode(name);
    }

    pub fn hypernode_keys(&self) -> Vec<String> {
        self.hypernodes.keys().cloned().collect()
    }

    /// What the engine found wrong with the HyperNodes in `snapshot`'s topology, as one
    /// Warning event per HyperNode (its problems, one per line), sent when they change: a
    /// topology is resolved once per change of HyperNodes or nodes, so checking it costs
    /// nothing in the cycles between. A HyperNode whose problems went is forgotten, so
    /// the same problem coming back is reported again.
    pub fn report_topology_problems(&mut self, snapshot: &Snapshot) {
        let topology = snapshot.hypernodes_shared();
        if self
            .topology_checked
            .as_ref()
            .is_some_and(|t| Arc::ptr_eq(t, topology))
        {
            return;
        }
        self.topology_checked = Some(topology.clone());
        let mut now: BTreeMap<String, Vec<&str>> = BTreeMap::new();
        for line in &topology.problems {
            // Every line names its HyperNode first: "HyperNode NAME: ...".
            match line
                .strip_prefix("HyperNode ")
                .and_then(|rest| rest.split_once(':'))
            {
                Some((name, _)) => now.entry(name.to_string()).or_default().push(line),
                None => crate::retry::warn_limited("HyperNode topology problem", line),
            }
        }
        let gone: Vec<String> = self
            .hypernode_problems
            .keys()
            .filter(|name| !now.contains_key(*name))
            .cloned()
            .collect();
        for name in gone {
            self.hypernode_problems.remove(&name);
            if let Some(uid) = self.hypernodes.get(&name).and_then(|h| h.uid()) {
                self.events.forget_reason(&uid, INVALID_HYPERNODE);
            }
        }
        for (name, lines) in now {
            let message = lines.join("\n");
            let Some(hn) = self.hypernodes.get(&name) else {
                continue;
            };
            let r = hn.object_ref(&());
            self.report(r, EventType::Warning, INVALID_HYPERNODE, message.clone());
            self.hypernode_problems.insert(name, message);
        }
    }
}
