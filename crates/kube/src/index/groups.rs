//! The index's PodGroups of every dialect (through `dialects::KINDS`), the verdicts the
//! status writer writes on them, Kubernetes' Workloads they name, and the debug API's view.

use super::*;

impl Index {
    // ----- PodGroups of every dialect --------------------------------------------------

    /// Which kind of object defines the gang `key`, if any (the first of
    /// `dialects::KINDS` that has it).
    pub fn group_dialect(&self, key: &str) -> Option<Dialect> {
        self.groups.defining(key).map(|s| s.dialect())
    }

    pub(super) fn has_group_object(&self, key: &str) -> bool {
        self.group_dialect(key).is_some()
    }

    /// The object that defines the gang `key`, for events.
    pub fn group_ref(&self, key: &str) -> Option<ObjectReference> {
        self.groups.defining(key)?.object_ref(key)
    }

    /// Makes the engine's gang `key` what its defining object says (or an event on that
    /// object says why it cannot). Returns whether the engine's view changed.
    pub(super) fn refresh_group(&mut self, key: &str) -> bool {
        let ctx = KindContext {
            priority_classes: &self.priority_classes,
        };
        let Some(converted) = self.groups.defining(key).and_then(|s| s.to_job(key, &ctx)) else {
            return false;
        };
        match converted {
            Ok(mut spec) => {
                // Its PriorityClass's minimum runtime and preemption delay (they win over
                // its queue's).
                let class = self.groups.defining(key).and_then(|s| s.class_of(key));
                if let Some(&(min, delay)) = class.and_then(|c| self.class_protection.get(&c)) {
                    spec.policy.min_runtime = min;
                    spec.policy.preemption_delay = delay;
                }
                self.deleted_groups.remove(key);
                let problem = spec.topology.as_ref().and_then(|t| t.problem.clone());
                if let Some(r) = self.group_ref(key) {
                    match problem {
                        Some(p) => self.report(r, EventType::Warning, INVALID_NETWORK_TOPOLOGY, p),
                        None => {
                            let uid = r.uid.unwrap_or_default();
                            self.events.forget_reason(&uid, INVALID_NETWORK_TOPOLOGY);
                        }
                    }
                }
                self.cache.apply_job(spec)
            }
            Err(e) => {
                self.cache.delete_job(key);
                if let Some(r) = self.group_ref(key) {
                    self.report(r, EventType::Warning, "Invalid", e.to_string());
                }
                true
            }
        }
    }

    /// A PodGroup from a watch; how soon a cycle needs it: never when the index already
    /// has this version (the echo of the status writer's own write, whose answer it
    /// stored) or a newer one; at once when the gang changed for the engine; soon when only
    /// its status did (someone else's write, which the status writer may have to mend).
    pub fn apply_group<G: GangKind>(&mut self, pg: &G) -> Wake {
        self.apply_group_object(G::DIALECT, &key_of_group(pg), pg)
    }

    /// `apply_group`, whatever the kind: `object` is one of `dialect`'s kind.
    pub(super) fn apply_group_object(
        &mut self,
        dialect: Dialect,
        key: &str,
        object: &dyn Any,
    ) -> Wake {
        let Some(store) = self.groups.of_mut(dialect) else {
            return Wake::No;
        };
        if !store.store_newest(key, object) {
            return Wake::No;
        }
        if store.workload_ref(key).is_some() {
            self.workloads.dirty.insert(key.to_string());
        }
        self.status_touched.groups.insert(key.to_string());
        if self.refresh_group(key) {
            Wake::Now
        } else {
            Wake::Soon
        }
    }

    /// The API server's answer to the status writer (a write or a reread): kept only while
    /// the index still has that object. A delete event that came first means the object is
    /// gone; stored again, it would stay in the index for good (no event ever removes it)
    /// and every change of its gang would write it again, answered 404.
    pub fn apply_group_answer<G: GangKind>(&mut self, pg: &G) {
        self.apply_group_answer_object(G::DIALECT, &key_of_group(pg), pg);
    }

    pub(super) fn apply_group_answer_object(
        &mut self,
        dialect: Dialect,
        key: &str,
        object: &dyn Any,
    ) {
        let same = self
            .groups
            .of(dialect)
            .is_some_and(|s| s.holds(key, object));
        if same {
            let _ = self.apply_group_object(dialect, key, object);
        }
    }

    /// Whether the PodGroup of `dialect` at `key` is being deleted (it has a
    /// deletionTimestamp: finalizers hold it).
    pub fn group_deleting(&self, dialect: Dialect, key: &str) -> bool {
        let meta = self.groups.of(dialect).and_then(|s| s.meta(key));
        meta.is_some_and(|m| m.deletion_timestamp.is_some())
    }

    /// A status write was answered 404: the object is gone, forgotten as its delete event
    /// would (which is on its way, and then finds nothing).
    pub fn forget_gone(&mut self, t: &Target) {
        match t {
            Target::Group(dialect, key) => self.delete_group(*dialect, key),
            Target::Queue(name) => self.delete_queue(name),
            Target::Pod(uid) => {
                self.pending_pods.remove(uid);
                self.pod_conditions.remove(uid);
            }
        }
    }

    /// The PodScheduled=False (reason, message) a pending pod of ours should carry;
    /// touched for the status writer when it changes.
    pub fn want_pod_condition(&mut self, uid: &str, reason: &str, message: &str) {
        let same = self
            .pod_conditions
            .get(uid)
            .is_some_and(|(r, m)| r == reason && m == message);
        if !same {
            self.pod_conditions
                .insert(uid.to_string(), (reason.to_string(), message.to_string()));
            self.status_touched.pods.insert(uid.to_string());
        }
    }

    /// A gang's verdict from a cycle; touched for the status writer when its condition
    /// changes.
    pub fn record_verdict(&mut self, key: &str, verdict: Verdict) {
        let changed = self.verdicts.get(key).map(|(c, _)| c) != Some(&verdict.0);
        if changed {
            self.status_touched.groups.insert(key.to_string());
        }
        self.verdicts.insert(key.to_string(), verdict);
    }

    pub fn group_keys<G: GangKind>(&self) -> Vec<String> {
        self.groups.typed::<G>().keys().cloned().collect()
    }

    /// A PodGroup object of one kind is gone: another kind of the same name takes over, or
    /// the gang goes and its pods say so. The status writer drops it when it comes up: it
    /// writes only objects the index has.
    pub fn delete_group(&mut self, dialect: Dialect, key: &str) {
        let uid = self.groups.of_mut(dialect).and_then(|s| s.remove(key));
        if let Some(uid) = uid {
            self.events.forget(&uid);
        }
        if self.has_group_object(key) {
            self.refresh_group(key);
        } else {
            self.forget_group(key);
        }
    }

    pub(super) fn forget_group(&mut self, key: &str) {
        self.cache.delete_job(key);
        self.verdicts.remove(key);
        self.recovery.forget(key);
        self.provisioning.forget(key);
        self.forget_device_gang(key);
        let members = self.cache.orphans().get(key).map_or(0, |m| m.len());
        if members > 0 {
            self.deleted_groups.insert(key.to_string());
        }
        // Only pods still waiting are told: a controller deletes the PodGroup of a job that
        // finished (Volcano's does), and its Succeeded or Running pods lose nothing.
        let waiting: Vec<(String, String, String)> = self
            .cache
            .orphans()
            .get(key)
            .into_iter()
            .flatten()
            .filter_map(|uid| self.cache.pod(uid))
            .filter(|p| p.task.status == TaskStatus::Pending)
            .map(|p| {
                (
                    p.task.uid.to_string(),
                    p.task.namespace.to_string(),
                    p.task.name.to_string(),
                )
            })
            .collect();
        for (uid, ns, name) in waiting {
            self.report(
                pod_ref(&ns, &name, &uid),
                EventType::Warning,
                "FailedScheduling",
                deleted_group_message(key),
            );
        }
    }

    /// Whether the gang `key` is another scheduler's (its object exists, none of its pods
    /// are ours, some are theirs): its status is not ours to write.
    pub fn foreign(&self, key: &str, job: &JobInfo) -> bool {
        job.tasks().is_empty() && self.foreign_members.contains_key(key)
    }

    // ----- Workloads (scheduling.k8s.io) -------------------------------------------------

    /// A Workload from the watch: nothing a cycle reads, only what explain and the
    /// PodGroups' events say of the groups that name it.
    pub fn apply_workload(&mut self, w: &Workload) -> Wake {
        let key = key_of_group(w);
        if store_newest(&mut self.workloads.objects, key, w) {
            self.touch_workload_refs(&w.namespace().unwrap_or_default());
        }
        Wake::No
    }

    pub fn delete_workload(&mut self, key: &str) {
        if self.workloads.objects.remove(key).is_some() {
            let ns = key.split_once('/').map_or("", |(ns, _)| ns);
            self.touch_workload_refs(ns);
        }
    }

    pub fn workload_keys(&self) -> Vec<String> {
        self.workloads.objects.keys().cloned().collect()
    }

    pub(super) fn touch_workload_refs(&mut self, ns: &str) {
        let mut refs = Vec::new();
        for store in self.groups.all() {
            for key in store.keys() {
                let has_ref = store.workload_ref(&key).is_some();
                refs.push((key, has_ref));
            }
        }
        self.workloads.touch_namespace(ns, refs);
    }

    /// What the `workloadRef` of gang `key`'s PodGroup points at, if it has one.
    pub fn workload_link(&self, key: &str) -> Option<WorkloadLink> {
        let r = self.groups.defining(key)?.workload_ref(key)?;
        let ns = key.split_once('/').map_or("", |(ns, _)| ns);
        Some(workload_link(ns, r, &self.workloads.objects))
    }

    /// Tells each PodGroup whose `workloadRef` changed, or whose Workload did, when the
    /// reference does not resolve (one event until that changes). Called once the lists
    /// are in: a Workload not listed yet is not missing.
    pub fn report_workload_refs(&mut self) {
        let dirty: Vec<String> = self.workloads.dirty.drain().collect();
        for key in dirty {
            let Some(r) = self.group_ref(&key) else {
                continue;
            };
            match self.workload_link(&key) {
                Some(link) if link.found.is_err() => {
                    self.report(r, EventType::Warning, WORKLOAD_REFERENCE, link.describe())
                }
                _ => {
                    let uid = r.uid.unwrap_or_default();
                    self.events.forget_reason(&uid, WORKLOAD_REFERENCE);
                }
            }
        }
    }

    // ----- the debug API's view ------------------------------------------------------

    /// Every gang's key.
    pub fn gang_keys(&self) -> Vec<String> {
        self.cache
            .state()
            .jobs()
            .map(|(_, j)| j.uid.to_string())
            .collect()
    }

    /// What the debug API shows of one gang.
    pub fn gang_view(&self, key: &str) -> Option<GangView> {
        let state = self.cache.state();
        let job = state.job(state.job_by_uid(key)?).clone();
        let mut held: Vec<(String, String)> = self
            .held_by_gang
            .get(key)
            .into_iter()
            .flatten()
            .map(|uid| (self.held[uid].pod.clone(), self.held[uid].hold.describe()))
            .collect();
        held.sort();
        Some(GangView {
            workload: self.workload_link(key).map(|l| l.describe()),
            dialect: self.group_dialect(key),
            verdict: self.verdicts.get(key).cloned(),
            job,
            held,
        })
    }
}

/// One gang as the debug API reads it.
pub struct GangView {
    pub job: JobInfo,
    /// Which object defines it, if one does.
    pub dialect: Option<Dialect>,
    pub verdict: Option<Verdict>,
    /// Members kept out of the engine (`namespace/name`, why), by name.
    pub held: Vec<(String, String)>,
    /// The Workload and template its PodGroup names, in words.
    pub workload: Option<String>,
}
