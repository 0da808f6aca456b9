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
