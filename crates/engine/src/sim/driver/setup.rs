//! Setting a simulation up: its nodes, the pods of other schedulers, and each job's gang and pods as the scenario declares them.

use super::*;

impl Simulation {
    pub(super) fn setup(&mut self) {
        let mut queues = vec![QueueInfo::new("default", 1)];
        for q in &self.scenario.queues {
            let info = q.to_info();
            queues.retain(|existing| existing.name != info.name);
            queues.push(info);
        }
        for q in queues {
            self.cache.apply_queue(q);
        }
        if !self.scenario.device_classes.is_empty() {
            self.cache.set_device_classes(
                self.scenario
                    .device_classes
                    .iter()
                    .map(|c| (c.name.clone(), c.selectors.clone()))
                    .collect(),
            );
        }
        for h in &self.scenario.hypernodes {
            self.cache.apply_hypernode(h.to_spec());
        }
        for g in 0..self.scenario.node_groups.len() {
            let count = self.scenario.node_groups[g].count;
            self.add_nodes(g, count);
        }
        self.add_other_pods();
        let defs = self.scenario.jobs.clone();
        for def in &defs {
            let copies = def.repeat.as_ref().map(|r| r.count).unwrap_or(1);
            for k in 0..copies {
                let name = if def.repeat.is_some() {
                    format!("{}-{k}", def.name)
                } else {
                    def.name.clone()
                };
                let at = def.submit_at.0
                    + def
                        .repeat
                        .as_ref()
                        .map(|r| r.every.0 * i64::from(k))
                        .unwrap_or(0);
                let index = self.create_job(def, name);
                self.schedule(at, Event::Submit(index));
            }
        }
        for e in self.scenario.events.clone() {
            if let Some(c) = &e.add_nodes {
                self.schedule(e.at.0, Event::AddNodes(c.group.clone(), c.count));
            }
            if let Some(c) = &e.remove_nodes {
                self.schedule(e.at.0, Event::RemoveNodes(c.group.clone(), c.count));
            }
        }
    }

    /// The scenario's `otherPods`, running on their nodes.
    pub(super) fn add_other_pods(&mut self) {
        for def in self.scenario.other_pods.clone() {
            let Some(node) = self
                .nodes
                .get_key_value(def.node.as_str())
                .map(|(n, _)| n.clone())
            else {
                continue;
            };
            let (namespace, name) = def
                .name
                .split_once('/')
                .unwrap_or(("default", def.name.as_str()));
            let uid: Arc<str> = Arc::from(format!("other/{}", def.name));
            let mut task = TaskInfo::new(
                uid.clone(),
                namespace,
                name,
                "",
                def.requests.0.clone(),
                0,
                Arc::default(),
                0,
            );
            task.labels = Arc::new(def.labels.clone());
            task.status = TaskStatus::Running;
            task.node = Some(node.clone());
            task.critical = namespace == "kube-system";
            let request = task.resreq.clone();
            self.cache.apply_pod(PodUpdate { task, job: None });
            self.tally.add_other(&node, &request);
            self.other_pods.push(OtherPod {
                uid,
                node: Some(node),
                request,
            });
        }
    }

    pub(super) fn create_job(&mut self, def: &JobDef, name: String) -> usize {
        let index = self.jobs.len();
        let uid = format!("{}/{name}", def.namespace);
        let total = def.task_count();
        let spec = JobSpec {
            uid: uid.clone(),
            namespace: def.namespace.clone(),
            name: name.clone(),
            queue: def.queue.clone(),
            min_member: def.min_member.unwrap_or(total),
            min_task_member: def.min_task_member.clone(),
            min_resources: def.min_resources.as_ref().map(|r| r.0.clone()),
            priority: def.priority,
            created: 0,
            phase: PodGroupPhase::Pending,
            policy: GangPolicy {
                mode: def.gang.mode,
                match_policy: def.gang.match_policy,
                total_number: def.gang.total_number,
                group: {
                    let mut g: Vec<String> = def
                        .gang
                        .group
                        .iter()
                        .map(|m| format!("{}/{m}", def.namespace))
                        .chain((!def.gang.group.is_empty()).then(|| uid.clone()))
                        .collect();
                    g.sort();
                    g.dedup();
                    g
                },
                wait_timeout: def.gang.waiting_time.map(|m| m.0),
                min_runtime: def.min_runtime.map(|m| m.0),
                preemption_delay: def.preemption_delay.map(|m| m.0),
                never_preempts: def.gang.never_preempts,
                disrupt_whole: def.gang.disrupt_whole,
            },
            origin: GangOrigin::Declared,
            topology: def.network_topology.as_ref().map(|t| t.to_request(&uid)),
            subgroups: def
                .sub_group_policy
                .iter()
                .enumerate()
                .map(|(i, p)| p.to_policy(i, &uid))
                .collect(),
        };
        let mut pods = Vec::new();
        // One draw per job: a gang's pods work together and finish together.
        let jitter = if def.runtime_jitter > 0.0 {
            1.0 + def.runtime_jitter * (2.0 * self.rng.next_f64() - 1.0)
        } else {
            1.0
        };
        for t in &def.tasks {
            let labels = Arc::new(t.pod_labels(&name));
            let placement = Arc::new(t.placement(&labels));
            for r in 0..t.replicas {
                let pod_name = format!("{name}-{}-{r}", t.role);
                let pod_uid: Arc<str> = Arc::from(format!("{}/{pod_name}", def.namespace));
                let task = TaskInfo::new(
                    pod_uid.clone(),
                    def.namespace.as_str(),
                    pod_name.as_str(),
                    t.role.as_str(),
                    t.requests.0.clone(),
                    t.priority.unwrap_or(def.priority),
                    placement.clone(),
                    0,
                );
                let mut task = task;
                task.labels = match t.group_size {
                    Some(size) => {
                        let mut own = (*labels).clone();
                        own.insert(GROUP_INDEX_LABEL.into(), (r / size.max(1)).to_string());
                        Arc::new(own)
                    }
                    None => labels.clone(),
                };
                task.estimate = t.estimate.or(def.estimate).map(|m| m.0);
                task.never_preempts = t.never_preempts;
                if !t.claims.is_empty() {
                    task.set_claims(t.claims.iter().map(|c| c.for_pod(&uid, &pod_uid)).collect());
                }
                task.topology = TopologyRequest::from_kueue(&t.annotations, &pod_uid).map(Arc::new);
                let runtime = t
                    .runtime
                    .map(|m| (m.0 as f64 * jitter).round().max(1.0) as i64);
                let pod = self.pods.len();
                self.pod_index.insert(pod_uid.clone(), pod);
                self.pods.push(SimPod {
                    uid: pod_uid,
                    job: index,
                    role: Arc::from(t.role.as_str()),
                    request: task.resreq.clone(),
                    runtime,
                    status: TaskStatus::Pending,
                    node: None,
                    task,
                    finish_event: None,
                    share: PodShare::default(),
                    pinned: t
                        .running
                        .get(r as usize)
                        .map(|p| (Arc::from(p.node.as_str()), p.elapsed.0)),
                });
                pods.push(pod);
            }
        }
        self.job_index.insert(uid.clone(), index);
        self.jobs.push(SimJob {
            uid,
            name,
            queue: def.queue.clone(),
            min_member: spec.min_member,
            min_task_member: def.min_task_member.clone(),
            submitted: None,
            started: None,
            finished: None,
            pods,
            phase: PodGroupPhase::Pending,
            message: None,
            reservation: None,
            nodes: Vec::new(),
            domains: vec![Default::default(); self.levels.len()],
            gpu_models: Default::default(),
            predicted: None,
            predicted_at_head: None,
            spec,
            created_before: def.created_before.map_or(0, |m| m.0),
        });
        index
    }
}

impl Simulation {
    /// Starts a job's pods that run at t=0 on their nodes, as long before as they have run;
    /// each ends its runtime after its start (at once if that is past).
    pub(super) fn start_pinned(&mut self, j: usize) {
        let mut earliest: Option<Timestamp> = None;
        for p in self.jobs[j].pods.clone() {
            let Some((node, elapsed)) = self.pods[p].pinned.clone() else {
                continue;
            };
            let Some(node) = self.nodes.get_key_value(&*node).map(|(n, _)| n.clone()) else {
                continue;
            };
            let started = self.now - elapsed;
            self.pods[p].task.started = Some(started);
            self.pin_claims(p, &node);
            self.set_pod(p, TaskStatus::Running, Some(node.clone()));
            self.record_placement(p, &node);
            if let Some(runtime) = self.pods[p].runtime {
                let end = (started + runtime).max(self.now);
                let id = self.schedule(end, Event::Finish(p));
                self.pods[p].finish_event = Some(id);
            }
            earliest = Some(earliest.map_or(started, |e| e.min(started)));
        }
        let job = &self.jobs[j];
        if job.started.is_none() && self.started_count(j) >= job.min_member.max(1) {
            self.jobs[j].started = earliest;
        }
    }

    /// The devices a pod running at t=0 holds on its node through its claims, as their
    /// allocations held devices on the cluster the scenario was taken of. A shared claim a
    /// pod of the job already holds keeps its allocation; the others are allocated by the
    /// engine's own search among the devices still free on the node: a scenario does not
    /// name devices, so which devices may differ from the cluster's, but not how many, of
    /// which class, or under which constraints. A pod whose claims find no room there runs
    /// without them, and the report says so.
    fn pin_claims(&mut self, p: usize, node: &Arc<str>) {
        let claims = self.pods[p].task.claims.clone();
        if claims.is_empty() {
            return;
        }
        let state = self.cache.state();
        let Some(id) = state.node_by_name(node) else {
            return;
        };
        match crate::framework::device_fit::claims_on(state, &claims, state.node(id), false, &[]) {
            Ok(allocated) => {
                let allocated = allocated.unwrap_or(claims);
                self.hold_devices(p, &allocated);
                self.pods[p].task.replace_claims(allocated);
            }
            Err(why) => {
                let problem = format!(
                    "{} runs on {node} at t=0 without the devices of its claims: {why}",
                    self.pods[p].uid
                );
                self.setup_problems.push(problem);
            }
        }
    }

    /// A shared claim of pod `p` allocated (`Some`) or let go of by its last user (`None`):
    /// the pending pods of its job that use it follow, as pods using an allocated
    /// ResourceClaim go where its devices are.
    pub(super) fn share_claim(
        &mut self,
        p: usize,
        claim: &Arc<str>,
        allocation: Option<Arc<crate::model::devices::ClaimAllocation>>,
    ) {
        let j = self.pods[p].job;
        if self.jobs[j].submitted.is_none() {
            return;
        }
        for q in self.jobs[j].pods.clone() {
            let pod = &self.pods[q];
            let uses = |c: &crate::model::devices::TaskClaim| c.shared && c.name == *claim;
            if q == p
                || pod.status != TaskStatus::Pending
                || !pod
                    .task
                    .claims
                    .iter()
                    .any(|c| uses(c) && c.allocation != allocation)
            {
                continue;
            }
            let updated: Vec<_> = pod
                .task
                .claims
                .iter()
                .map(|c| crate::model::devices::TaskClaim {
                    allocation: if uses(c) {
                        allocation.clone()
                    } else {
                        c.allocation.clone()
                    },
                    ..c.clone()
                })
                .collect();
            self.pods[q].task.replace_claims(updated.into());
            self.cache.apply_pod(PodUpdate {
                task: self.pods[q].task.clone(),
                job: Some(self.jobs[j].uid.clone()),
            });
            self.dirty = true;
        }
    }
}
