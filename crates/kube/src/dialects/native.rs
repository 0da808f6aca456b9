//! Kubernetes' own gang API: `scheduling.k8s.io/v1beta1` PodGroup (1.37; the API server
//! needs the GenericWorkload gate and `--runtime-config=scheduling.k8s.io/v1beta1=true`).
//! Pods join a group with `spec.schedulingGroup.podGroupName`; a pod whose PodGroup does
//! not exist yet waits for it, as in kube-scheduler. Built in, not a CRD: watched only where
//! the API server serves it.
//!
//! Read: `schedulingPolicy.gang.minCount` (`basic`: no gang, each pod alone),
//! `schedulingConstraints.topology[].key` (the whole group in one domain of that node
//! label), `priority`/`priorityClassName`, `preemptionPolicy: Never`, `disruptionMode`
//! (`All`: a member is evicted only with its whole group), `workloadRef` (read with its
//! Workload's `podGroupTemplates` in `super::workload`: shown by explain, a reference that
//! does not resolve said in an event). Refused with a named reason: `resourceClaims` (the group's own DRA claims).
//! Written: the `PodGroupInitiallyScheduled` condition — False (reason `Unschedulable`,
//! the engine's message) while the gang waits, True (reason `Scheduled`) once its minimum
//! is bound, and never back from True, as upstream defines it.

use k8s_openapi::api::core::v1::Pod;
pub use k8s_openapi::api::scheduling::v1beta1::PodGroup as NativePodGroup;
use serde_json::{json, Value};

use super::kind::{Dialect, GangKind, KindContext};
use super::volcano::api::DEFAULT_QUEUE;
use super::{check_name, GangDecl, QUEUE_NAME_ANNOTATION};
use crate::convert::ConvertError;
use crate::framework::{ConditionKind, JobCondition};
use crate::model::topology::{label_key_problem, TopologyBound, TopologyMode, TopologyRequest};
use crate::model::{GangOrigin, GangPolicy, JobInfo, JobSpec, PodGroupPhase, TaskStatus};

/// The condition kube-scheduler writes on a PodGroup (`PodGroupScheduled` before 1.37).
pub const INITIALLY_SCHEDULED: &str = "PodGroupInitiallyScheduled";

impl GangKind for NativePodGroup {
    const DIALECT: Dialect = Dialect("scheduling.k8s.io");
    const WATCH_NAME: &'static str = "scheduling.k8s.io PodGroup";
    const OFF_WHEN_ABSENT: &'static str =
        "Kubernetes' own PodGroups (scheduling.k8s.io/v1beta1 is not served)";
    const POD_FIELD: &'static str = "spec.schedulingGroup";

    /// Built in: the API server serves it (with its gate and runtime-config), no CRD.
    fn crd() -> Option<super::crds::CrdFile> {
        None
    }

    fn to_job(&self, ctx: &KindContext) -> Result<JobSpec, ConvertError> {
        to_job(self, ctx)
    }

    fn status_patch(
        &self,
        job: &JobInfo,
        condition: Option<&JobCondition>,
        now_ms: i64,
    ) -> Option<Value> {
        status_patch(self, job, condition, now_ms)
    }

    fn priority_class_name(&self) -> Option<&str> {
        self.spec.priority_class_name.as_deref()
    }

    fn workload_ref(&self) -> Option<(String, String)> {
        let r = self.spec.workload_ref.as_ref()?;
        Some((r.workload_name.clone(), r.template_name.clone()))
    }

    fn pod_declares(pod: &Pod) -> Result<Option<GangDecl>, ConvertError> {
        let Some(name) = pod
            .spec
            .as_ref()
            .and_then(|s| s.scheduling_group.as_ref())
            .and_then(|g| g.pod_group_name.clone())
            .filter(|n| !n.is_empty())
        else {
            return Ok(None);
        };
        let object = format!(
            "pod {}/{}",
            pod.metadata.namespace.as_deref().unwrap_or_default(),
            pod.metadata.name.as_deref().unwrap_or_default()
        );
        check_name(&name, &object)?;
        Ok(Some(GangDecl {
            name,
            ..Default::default()
        }))
    }
}

fn to_job(pg: &NativePodGroup, ctx: &KindContext) -> Result<JobSpec, ConvertError> {
    let meta = &pg.metadata;
    let ns = meta.namespace.clone().unwrap_or_default();
    let name = meta.name.clone().unwrap_or_default();
    let object = format!("scheduling.k8s.io podgroup {ns}/{name}");
    let err = |field: &str, message: String| ConvertError {
        object: object.clone(),
        field: field.into(),
        message,
    };
    let spec = &pg.spec;
    let policy = &spec.scheduling_policy;
    let min_member = match (&policy.gang, &policy.basic) {
        (Some(g), None) if g.min_count >= 1 => g.min_count as u32,
        (Some(g), None) => {
            return Err(err(
                "spec.schedulingPolicy.gang.minCount",
                format!("must be >= 1, got {}", g.min_count),
            ))
        }
        // Basic: every pod is placed on its own, as kube-scheduler does.
        (None, Some(_)) => 1,
        _ => {
            return Err(err(
                "spec.schedulingPolicy",
                "exactly one of basic and gang must be set".into(),
            ))
        }
    };
    if spec.resource_claims.as_ref().is_some_and(|c| !c.is_empty()) {
        return Err(err(
            "spec.resourceClaims",
            "ResourceClaims shared by a PodGroup are not supported by rust-batch yet (no \
             dynamic resource allocation): the group waits; give each pod its own claim or \
             remove them"
                .into(),
        ));
    }
    let priority = spec
        .priority
        .or_else(|| {
            let class = spec.priority_class_name.as_ref()?;
            ctx.priority_classes.get(class).copied()
        })
        .unwrap_or(0);
    let preemption = spec.preemption_policy.as_deref();
    if let Some(p) = preemption.filter(|p| !matches!(*p, "Never" | "PreemptLowerPriority")) {
        return Err(err(
            "spec.preemptionPolicy",
            format!("{p:?} is not Never or PreemptLowerPriority"),
        ));
    }
    let disrupt_whole = spec
        .disruption_mode
        .as_ref()
        .is_some_and(|d| d.all.is_some());
    let topology = spec
        .scheduling_constraints
        .as_ref()
        .and_then(|c| c.topology.as_deref())
        .and_then(|t| topology_request(t, &object));
    let queue = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(QUEUE_NAME_ANNOTATION))
        .filter(|q| !q.is_empty())
        .cloned()
        .unwrap_or_else(|| DEFAULT_QUEUE.into());
    Ok(JobSpec {
        uid: format!("{ns}/{name}"),
        namespace: ns,
        name,
        queue,
        min_member,
        min_task_member: Default::default(),
        min_resources: None,
        priority,
        created: meta
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.as_millisecond())
            .unwrap_or(0),
        // The condition is never taken back: a group once scheduled stays admitted.
        phase: if initially_scheduled(pg) == Some(true) {
            PodGroupPhase::Running
        } else {
            PodGroupPhase::Pending
        },
        policy: GangPolicy {
            never_preempts: preemption == Some("Never"),
            disrupt_whole,
            ..Default::default()
        },
        origin: GangOrigin::Declared,
        topology,
        subgroups: Vec::new(),
    })
}

/// `schedulingConstraints.topology`: the whole group in one domain of the node label
/// `key`, through the same placement search as Kueue's required topology. Upstream allows
/// one constraint; more are a problem the group waits on.
fn topology_request(
    constraints: &[k8s_openapi::api::scheduling::v1beta1::TopologyConstraint],
    object: &str,
) -> Option<TopologyRequest> {
    let first = constraints.first()?;
    let source = "spec.schedulingConstraints.topology".to_string();
    let key = first.key.trim();
    let problem = if constraints.len() > 1 {
        Some(format!(
            "{object}: {source} has {} constraints; one is supported",
            constraints.len()
        ))
    } else {
        label_key_problem(key)
            .map(|why| format!("{object}: {source}[0].key {key:?} is not a node label key ({why})"))
    };
    Some(TopologyRequest {
        mode: TopologyMode::Hard,
        bound: if problem.is_none() {
            TopologyBound::LabelKey(key.to_string())
        } else {
            TopologyBound::Unbounded
        },
        source,
        problem,
    })
}

/// What the object's `PodGroupInitiallyScheduled` condition says, if it has one.
fn initially_scheduled(pg: &NativePodGroup) -> Option<bool> {
    let c = pg
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == INITIALLY_SCHEDULED)?;
    Some(c.status == "True")
}

/// A merge patch setting `PodGroupInitiallyScheduled`, or None when the object already
/// says it (or says True: that is final). Other conditions (DisruptionTarget) are kept: a
/// merge patch replaces the whole list.
fn status_patch(
    pg: &NativePodGroup,
    job: &JobInfo,
    condition: Option<&JobCondition>,
    now_ms: i64,
) -> Option<Value> {
    if initially_scheduled(pg) == Some(true) {
        return None;
    }
    let bound = job.count(TaskStatus::Bound)
        + job.count(TaskStatus::Running)
        + job.count(TaskStatus::Succeeded)
        + job.count(TaskStatus::Failed);
    let (status, reason, message) = if job.min_member > 0 && bound >= job.min_member {
        (
            "True",
            "Scheduled",
            format!("{bound}/{} pods of the group are bound", job.tasks().len()),
        )
    } else {
        match condition {
            Some(c) if c.kind == ConditionKind::Unschedulable => {
                ("False", "Unschedulable", c.message.clone())
            }
            _ => return None,
        }
    };
    let current = pg.status.as_ref().and_then(|s| s.conditions.as_ref());
    let existing = current
        .into_iter()
        .flatten()
        .find(|c| c.type_ == INITIALLY_SCHEDULED);
    if existing.is_some_and(|c| c.status == status && c.reason == reason && c.message == message) {
        return None;
    }
    let time = match existing {
        Some(c) if c.status == status => c.last_transition_time.0.to_string(),
        _ => k8s_openapi::jiff::Timestamp::from_millisecond(now_ms)
            .map(|t| t.to_string())
            .unwrap_or_default(),
    };
    let mut conditions: Vec<Value> = current
        .into_iter()
        .flatten()
        .filter(|c| c.type_ != INITIALLY_SCHEDULED)
        .filter_map(|c| serde_json::to_value(c).ok())
        .collect();
    let mut ours = json!({
        "type": INITIALLY_SCHEDULED,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": time,
    });
    if let Some(g) = pg.metadata.generation {
        ours["observedGeneration"] = g.into();
    }
    conditions.push(ours);
    Some(json!({ "status": { "conditions": conditions } }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::GangReason;
    use crate::model::TaskInfo;
    use std::collections::HashMap;

    fn pg(spec: &str) -> NativePodGroup {
        crate::yaml::from_str(&format!(
            "apiVersion: scheduling.k8s.io/v1beta1\nkind: PodGroup\n\
             metadata: {{name: trainers, namespace: ns, generation: 1}}\nspec: {spec}\n"
        ))
        .unwrap()
    }

    fn convert(p: &NativePodGroup) -> Result<JobSpec, ConvertError> {
        let classes = HashMap::from([("high".to_string(), 1000)]);
        p.to_job(&KindContext {
            priority_classes: &classes,
        })
    }

    #[test]
    fn gang_min_count_priority_topology_and_policies_convert() {
        let spec = convert(&pg(
            "{schedulingPolicy: {gang: {minCount: 4}}, priorityClassName: high, \
             preemptionPolicy: Never, disruptionMode: {all: {}}, \
             schedulingConstraints: {topology: [{key: topology.kubernetes.io/rack}]}, \
             workloadRef: {workloadName: train, templateName: workers}}",
        ))
        .unwrap();
        assert_eq!(spec.uid, "ns/trainers");
        assert_eq!(spec.min_member, 4);
        assert_eq!(spec.priority, 1000, "from the PriorityClass");
        assert!(spec.policy.never_preempts);
        assert!(spec.policy.disrupt_whole);
        let t = spec.topology.unwrap();
        assert_eq!(t.mode, TopologyMode::Hard);
        assert_eq!(
            t.bound,
            TopologyBound::LabelKey("topology.kubernetes.io/rack".into())
        );
        assert_eq!(t.problem, None);
        let spec = convert(&pg(
            "{schedulingPolicy: {gang: {minCount: 2}}, priority: 7, priorityClassName: high}",
        ))
        .unwrap();
        assert_eq!(spec.priority, 7, "spec.priority (set by admission) wins");
        assert!(!spec.policy.never_preempts && !spec.policy.disrupt_whole);
    }

    #[test]
    fn basic_is_no_gang_and_bad_objects_name_the_field() {
        let spec = convert(&pg("{schedulingPolicy: {basic: {}}}")).unwrap();
        assert_eq!(spec.min_member, 1);
        for (yaml, field) in [
            ("{schedulingPolicy: {gang: {minCount: 0}}}", "gang.minCount"),
            ("{schedulingPolicy: {}}", "spec.schedulingPolicy"),
            (
                "{schedulingPolicy: {gang: {minCount: 2}}, resourceClaims: [{name: gpus, resourceClaimName: c}]}",
                "spec.resourceClaims",
            ),
            (
                "{schedulingPolicy: {gang: {minCount: 2}}, preemptionPolicy: Sometimes}",
                "spec.preemptionPolicy",
            ),
        ] {
            let e = convert(&pg(yaml)).unwrap_err().to_string();
            assert!(
                e.contains("scheduling.k8s.io podgroup ns/trainers") && e.contains(field),
                "{yaml}: {e}"
            );
        }
        let t = convert(&pg(
            "{schedulingPolicy: {gang: {minCount: 2}}, schedulingConstraints: {topology: [{key: 'not a key'}]}}",
        ))
        .unwrap()
        .topology
        .unwrap();
        assert!(t.problem.unwrap().contains("\"not a key\""));
    }

    #[test]
    fn pods_join_by_scheduling_group_before_any_annotation() {
        let pod: Pod = crate::yaml::from_str(
            "metadata: {name: w0, namespace: ns, annotations: {scheduling.k8s.io/group-name: vc}}\n\
             spec: {containers: [], schedulingGroup: {podGroupName: trainers}}\n",
        )
        .unwrap();
        let decl = super::super::pod_gang(&pod).unwrap().unwrap();
        assert_eq!(decl.name, "trainers");
        assert_eq!(decl.implicit_min, None, "waits for its PodGroup");
        assert_eq!(
            decl.overrides.as_deref(),
            Some(
                "the pod joins PodGroup trainers of scheduling.k8s.io (spec.schedulingGroup), \
                 which takes precedence over its annotation scheduling.k8s.io/group-name \
                 \"vc\"; that declaration is ignored"
            )
        );
        let bad: Pod = crate::yaml::from_str(
            "metadata: {name: w0, namespace: ns}\nspec: {containers: [], schedulingGroup: {podGroupName: Bad_Name}}\n",
        )
        .unwrap();
        assert!(super::super::pod_gang(&bad).is_err());
    }

    fn job(min: u32, statuses: &[TaskStatus]) -> JobInfo {
        let mut job = JobInfo::new(
            convert(&pg(&format!(
                "{{schedulingPolicy: {{gang: {{minCount: {min}}}}}}}"
            )))
            .unwrap(),
        );
        for (i, s) in statuses.iter().enumerate() {
            let mut t = TaskInfo::new(
                format!("ns/p{i}"),
                "ns",
                format!("p{i}"),
                "",
                Default::default(),
                0,
                Default::default(),
                0,
            );
            t.status = *s;
            if *s != TaskStatus::Pending {
                t.node = Some("n".into());
            }
            job.upsert_task(t);
        }
        job
    }

    #[test]
    fn initially_scheduled_goes_false_then_true_and_never_back() {
        let object = pg("{schedulingPolicy: {gang: {minCount: 2}}}");
        let waiting = job(2, &[TaskStatus::Pending]);
        let unschedulable = JobCondition {
            kind: ConditionKind::Unschedulable,
            reason: GangReason::NotEnoughTasks,
            message:
                "1/2 tasks in gang unschedulable: pod group is not ready, 1 Pending, 2 minAvailable"
                    .into(),
        };
        assert_eq!(
            status_patch(&object, &waiting, None, 0),
            None,
            "no verdict yet"
        );
        let patch = status_patch(&object, &waiting, Some(&unschedulable), 0).unwrap();
        let c = &patch["status"]["conditions"][0];
        assert_eq!(c["type"], INITIALLY_SCHEDULED);
        assert_eq!(c["status"], "False");
        assert_eq!(c["reason"], "Unschedulable");
        assert_eq!(c["message"], unschedulable.message.as_str());
        let mut written = object.clone();
        written.status = Some(serde_json::from_value(patch["status"].clone()).unwrap());
        assert_eq!(
            status_patch(&written, &waiting, Some(&unschedulable), 5),
            None
        );

        let bound = job(2, &[TaskStatus::Bound, TaskStatus::Running]);
        let patch = status_patch(&written, &bound, None, 10).unwrap();
        let c = &patch["status"]["conditions"][0];
        assert_eq!(
            (c["status"].as_str(), c["reason"].as_str()),
            (Some("True"), Some("Scheduled"))
        );
        written.status = Some(serde_json::from_value(patch["status"].clone()).unwrap());
        assert_eq!(
            status_patch(&written, &waiting, Some(&unschedulable), 20),
            None,
            "True is final"
        );
        assert_eq!(convert(&written).unwrap().phase, PodGroupPhase::Running);
    }
}
