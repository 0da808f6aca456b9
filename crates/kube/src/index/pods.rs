//! The index's pods: ours become the engine's tasks (or are held out, gated or refused,
//! with the reason), everyone's count on their nodes; their PodScheduled condition as last
//! seen, and pods whose group is missing.

use super::*;

impl Index {
    // ----- pods ----------------------------------------------------------------------

    /// Notes a pod's PodScheduled condition while it is a pending pod of ours (from the
    /// watch, or the answer to the status writer's own write); forgets it once bound.
    pub fn note_pod_status(&mut self, pod: &Pod) {
        let uid = pod.uid().unwrap_or_default();
        let bound = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_ref())
            .is_some();
        if bound || pod.metadata.deletion_timestamp.is_some() || !self.ours(pod) {
            self.pending_pods.remove(&uid);
            self.pod_conditions.remove(&uid);
            return;
        }
        let rv = pod.resource_version();
        if let Some(seen) = self.pending_pods.get(&uid) {
            if older(rv.as_deref(), seen.resource_version.as_deref()) {
                return;
            }
        }
        let scheduled = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled"))
            .map(|c| {
                (
                    c.status.clone(),
                    c.reason.clone().unwrap_or_default(),
                    c.message.clone().unwrap_or_default(),
                )
            });
        self.status_touched.pods.insert(uid.clone());
        self.pending_pods.insert(
            uid,
            PendingPod {
                namespace: pod.namespace().unwrap_or_default(),
                name: pod.name_any(),
                resource_version: rv,
                scheduled,
            },
        );
    }

    /// The API server's answer to the status writer: noted only while the pod is a pending
    /// pod the index knows (a delete event may have come first).
    pub fn note_pod_answer(&mut self, pod: &Pod) {
        if self
            .pending_pods
            .contains_key(&pod.uid().unwrap_or_default())
        {
            self.note_pod_status(pod);
        }
    }

    /// A pod seen for the first time, unbound, once the pods are listed: a new pod; how
    /// long it took the watch to bring it.
    pub(super) fn observe_watch_lag(&self, pod: &Pod, uid: &str) {
        let Some(h) = &self.watch_lag else {
            return;
        };
        let unbound = pod.spec.as_ref().is_some_and(|s| s.node_name.is_none());
        if !unbound || self.cache.pod(uid).is_some() || !self.readiness.complete() {
            return;
        }
        if let Some(created) = &pod.metadata.creation_timestamp {
            let created: std::time::SystemTime = created.0.into();
            if let Ok(lag) = std::time::SystemTime::now().duration_since(created) {
                h.observe(lag.as_secs_f64());
                if let Some(ms) = &self.watched {
                    ms.observe(lag.as_secs_f64() * 1000.0);
                }
            }
        }
    }

    /// Applies a pod's report; returns how soon a cycle should see it: at once for a pod of
    /// ours that may be placed now; soon (cycles spaced, see the driver) for other changes
    /// the engine reads (a bound pod running or finishing, other schedulers' pods); not at
    /// all (the periodic cycle sees it) when it changed nothing the engine reads (our own
    /// condition writes, status conditions) or is a pending member of a gang still short of
    /// its minimum.
    pub fn apply_pod(&mut self, pod: &Pod) -> Wake {
        let uid = pod.uid().unwrap_or_default();
        let ns = pod.namespace().unwrap_or_default();
        let name = pod.name_any();
        self.note_pod_status(pod);
        self.observe_watch_lag(pod, &uid);
        let ours = self.ours(pod);
        let job = if ours {
            match pod_gang(pod) {
                Ok(decl) => {
                    if let Some(d) = &decl {
                        self.report_overridden(&uid, &ns, &name, d);
                    }
                    let key = self.gang_for(pod, decl);
                    if let Some(hold) = hold_of(pod) {
                        self.hold(&uid, &ns, &name, key, hold);
                        return Wake::Now;
                    }
                    self.release(&uid);
                    Some(key)
                }
                Err(e) => {
                    self.forget_pod_of_gang(&uid);
                    self.report(
                        pod_ref(&ns, &name, &uid),
                        EventType::Warning,
                        "FailedScheduling",
                        format!("cannot schedule: {e}"),
                    );
                    return Wake::Now;
                }
            }
        } else {
            if let Some(group) = pod_group_name(pod) {
                self.foreign_members
                    .entry(format!("{ns}/{group}"))
                    .or_default()
                    .insert(uid.clone());
            }
            None
        };
        match pod_to_update_with_warnings(pod, job) {
            Ok((mut update, warnings)) => {
                if ours {
                    self.resolve_volumes(pod, &uid, &mut update);
                    self.resolve_claims(pod, &uid, &mut update);
                    for w in warnings {
                        self.report(
                            pod_ref(&ns, &name, &uid),
                            EventType::Warning,
                            w.reason,
                            w.message,
                        );
                    }
                    let labels = Arc::clone(&update.task.labels);
                    update.task.budgets = self.budgets_covering(&ns, &labels);
                    self.labels.insert(uid.clone(), (ns.clone(), labels));
                }
                if self.cache.apply_pod(update) {
                    self.wake_for_pod(&uid, ours)
                } else {
                    Wake::No
                }
            }
            Err(e) => {
                self.forget_pod_of_gang(&uid);
                if ours {
                    self.report(
                        pod_ref(&ns, &name, &uid),
                        EventType::Warning,
                        "FailedScheduling",
                        format!("cannot schedule: {e}"),
                    );
                }
                Wake::Now
            }
        }
    }

    /// How soon a cycle needs a pod the engine's view just changed for. A pending pod of
    /// ours whose gang still has fewer members than its minimum: not at all — the gang's
    /// last member wakes the cycle (an idle cluster binds it at once), not each one before
    /// it, and the periodic cycle still reports on short gangs. Another pending pod of
    /// ours may be placed now; anything else (a pod running or finishing, another
    /// scheduler's pod) is news nothing waits on.
    pub(super) fn wake_for_pod(&self, uid: &str, ours: bool) -> Wake {
        let Some(update) = self.cache.pod(uid) else {
            return Wake::Soon;
        };
        let pending = update.task.status == TaskStatus::Pending && update.task.node.is_none();
        if !pending {
            return Wake::Soon;
        }
        match update.job.as_deref() {
            Some(job) if self.cache.gang_short_of_members(job) => Wake::No,
            _ if ours => Wake::Now,
            _ => Wake::Soon,
        }
    }

    /// Keeps a pod of ours out of the engine, counted in its gang's `HeldBack`, and tells
    /// it why once per change. A gated pod is no candidate: the API server would refuse its
    /// bind and leave its gang short (the API server itself gives it PodScheduled=False,
    /// reason SchedulingGated). A refused pod would be placed ignoring what it asks for.
    pub(super) fn hold(&mut self, uid: &str, ns: &str, name: &str, gang: String, hold: Hold) {
        if self.cache.pod(uid).is_some() {
            self.cache.delete_pod(uid);
            self.labels.remove(uid);
        }
        let r = pod_ref(ns, name, uid);
        match &hold {
            Hold::Gated(gates) => self.report(
                r,
                EventType::Normal,
                "SchedulingGated",
                format!(
                    "the pod is gated by {}; it is not scheduled (nor counted for its gang) until the gates are removed",
                    gates.join(", ")
                ),
            ),
            Hold::Refused(why) => {
                self.report(
                    r,
                    EventType::Warning,
                    "FailedScheduling",
                    format!("{why}; the pod is not scheduled (nor counted for its gang)"),
                );
                self.want_pod_condition(uid, UNSUPPORTED, why);
            }
        }
        let before = self.held.insert(
            uid.to_string(),
            HeldPod {
                gang: gang.clone(),
                pod: format!("{ns}/{name}"),
                hold,
            },
        );
        if let Some(before) = before.filter(|b| b.gang != gang) {
            if let Some(uids) = self.held_by_gang.get_mut(&before.gang) {
                uids.remove(uid);
            }
            self.count_held(&before.gang);
        }
        self.held_by_gang
            .entry(gang.clone())
            .or_default()
            .insert(uid.to_string());
        self.count_held(&gang);
    }

    /// A held pod is held no more (a candidate now, or gone). Returns its gang.
    pub(super) fn release(&mut self, uid: &str) -> Option<String> {
        let HeldPod { gang, hold, .. } = self.held.remove(uid)?;
        if matches!(hold, Hold::Refused(_)) {
            // Its gang's next verdict says what it waits for now.
            self.pod_conditions.remove(uid);
        }
        if let Some(uids) = self.held_by_gang.get_mut(&gang) {
            uids.remove(uid);
        }
        self.count_held(&gang);
        Some(gang)
    }

    /// Tells the engine how many of a gang's members are held back, and why.
    pub(super) fn count_held(&mut self, gang: &str) {
        let mut held = HeldBack::default();
        for uid in self.held_by_gang.get(gang).into_iter().flatten() {
            match &self.held[uid].hold {
                Hold::Gated(gates) => {
                    held.gated_pods += 1;
                    for gate in gates {
                        *held.gated.entry(gate.clone()).or_default() += 1;
                    }
                }
                Hold::Refused(why) => *held.refused.entry(why.clone()).or_default() += 1,
            }
        }
        if held.is_empty() {
            self.held_by_gang.remove(gang);
        }
        self.cache.set_held_back(gang, held);
    }

    /// A pod declaring two gangs is told which one it joins and which it does not.
    pub(super) fn report_overridden(&mut self, uid: &str, ns: &str, name: &str, decl: &GangDecl) {
        if let Some(note) = &decl.overrides {
            let r = pod_ref(ns, name, uid);
            self.report(
                r,
                EventType::Warning,
                CONFLICTING_DECLARATIONS,
                note.clone(),
            );
        }
    }

    /// The gang key of a pod of ours. Gangs declared on the pods alone (kube-batch's
    /// group-min-member, ACK labels) and pods with no gang (a gang of one, as Volcano's shadow
    /// PodGroups) are made up here; a PodGroup object of the same name takes precedence.
    pub(super) fn gang_for(&mut self, pod: &Pod, decl: Option<GangDecl>) -> String {
        let uid = pod.uid().unwrap_or_default();
        let ns = pod.namespace().unwrap_or_default();
        let (name, min, policy, origin) = match decl {
            Some(d) => match d.implicit_min {
                Some(min) => (d.name, min, d.policy, GangOrigin::Declared),
                None => return format!("{ns}/{}", d.name),
            },
            None => (
                format!("podgroup-{uid}"),
                1,
                Default::default(),
                GangOrigin::SinglePod,
            ),
        };
        let key = format!("{ns}/{name}");
        if !self.has_group_object(&key) {
            let queue = pod
                .annotations()
                .get(QUEUE_NAME_ANNOTATION)
                .cloned()
                .unwrap_or_else(|| "default".into());
            let created = pod
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.as_millisecond())
                .unwrap_or(0);
            // The gang keeps its phase and its earliest creation time as members come and go.
            let existing = self
                .cache
                .state()
                .job_by_uid(&key)
                .map(|id| self.cache.state().job(id));
            let spec = JobSpec {
                uid: key.clone(),
                namespace: ns.clone(),
                name,
                queue,
                min_member: min,
                priority: pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0),
                created: existing.map_or(created, |j| j.created.min(created)),
                phase: existing.map(|j| j.phase).unwrap_or_default(),
                policy,
                origin,
                ..Default::default()
            };
            self.cache.apply_job(spec);
        }
        self.implicit.entry(key.clone()).or_default().insert(uid);
        key
    }

    pub fn delete_pod(&mut self, uid: &str) {
        self.pending_pods.remove(uid);
        self.pod_conditions.remove(uid);
        for members in self.foreign_members.values_mut() {
            members.remove(uid);
        }
        self.foreign_members.retain(|_, m| !m.is_empty());
        self.volume_pods.remove(uid);
        self.forget_claims_pod(uid);
        self.events.forget(uid);
        self.forget_pod_of_gang(uid);
    }

    /// Takes a pod out of the engine, and its made-up gang with its last member.
    pub(super) fn forget_pod_of_gang(&mut self, uid: &str) {
        let job = self.cache.pod(uid).and_then(|p| p.job.clone());
        let held = self.release(uid);
        let job = job.or(held);
        self.cache.delete_pod(uid);
        self.labels.remove(uid);
        let Some(job) = job else {
            return;
        };
        if let Some(members) = self.implicit.get_mut(&job) {
            members.remove(uid);
            if members.is_empty() {
                self.implicit.remove(&job);
                if !self.has_group_object(&job) {
                    self.cache.delete_job(&job);
                    self.verdicts.remove(&job);
                    self.recovery.forget(&job);
                    self.provisioning.forget(&job);
                    self.forget_device_gang(&job);
                }
            }
        }
    }

    /// Every pod the index knows (by uid), for a relist to find the ones that went.
    pub fn pod_keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self.cache.pod_uids().map(|u| u.to_string()).collect();
        keys.extend(self.held.keys().cloned());
        keys
    }

    /// Pods of ours waiting for a PodGroup that does not exist, told so once the PodGroups
    /// of every installed dialect are listed (a restarted scheduler must not tell pods
    /// that their group is missing before it has read the groups) and the pod has waited
    /// MISSING_GROUP_GRACE_MS: each kind is listed at its own resourceVersion, so a group
    /// created just before its pods can be missing from the groups' list while its pods are
    /// in theirs — its watch event follows within milliseconds.
    pub fn report_missing_groups(&mut self, now_ms: i64) {
        // A deleted group's pods were told once; forget it when they are gone too.
        let orphans = self.cache.orphans();
        self.deleted_groups
            .retain(|key| orphans.get(key.as_str()).is_some_and(|o| !o.is_empty()));
        let mut missing = Vec::new();
        let mut waiting = HashMap::new();
        for (key, uids) in self.cache.orphans() {
            for uid in uids {
                if let Some(p) = self.cache.pod(uid) {
                    if p.task.status == TaskStatus::Pending {
                        let since = self.orphaned_since.get(uid).copied().unwrap_or(now_ms);
                        waiting.insert(uid.clone(), since);
                        if now_ms - since >= MISSING_GROUP_GRACE_MS {
                            missing.push((key.to_string(), p.task.clone()));
                        }
                    }
                }
            }
        }
        self.orphaned_since = waiting;
        for (key, task) in missing {
            let group = key.split_once('/').map_or(key.as_str(), |x| x.1);
            // An object that exists but cannot be used got an event saying why.
            let message = match self.group_dialect(&key) {
                // The pods waiting when it went were told so then (the same words, so
                // told once); a pod naming it since is told now.
                None if self.deleted_groups.contains(&key) => deleted_group_message(&key),
                Some(d) => format!(
                    "PodGroup {group} ({}) cannot be used (see its events); the pod waits \
                     until it is fixed",
                    d.api_group()
                ),
                None => format!(
                    "PodGroup {group} does not exist in namespace {}; the pod waits for it",
                    task.namespace
                ),
            };
            self.report(
                pod_ref(&task.namespace, &task.name, &task.uid),
                EventType::Warning,
                "FailedScheduling",
                message,
            );
        }
    }
}

/// Why a pod of ours is kept out of the engine, if it is: what it asks for that the engine
/// does not model, else its scheduling gates. A bound pod is none of the scheduler's
/// business any more.
fn hold_of(pod: &Pod) -> Option<Hold> {
    let spec = pod.spec.as_ref()?;
    if spec.node_name.as_deref().is_some_and(|n| !n.is_empty()) {
        return None;
    }
    if let Some(why) = unsupported_fields(spec) {
        return Some(Hold::Refused(why));
    }
    let gates: Vec<String> = spec
        .scheduling_gates
        .iter()
        .flatten()
        .map(|g| g.name.clone())
        .collect();
    (!gates.is_empty()).then_some(Hold::Gated(gates))
}
