//! The two coscheduling PodGroup kinds besides Volcano's: scheduler-plugins'
//! `scheduling.x-k8s.io/v1alpha1` (pods name it with the label
//! `scheduling.x-k8s.io/pod-group`) and the legacy `scheduling.sigs.k8s.io/v1alpha1` that
//! ACK and Koordinator use (Koordinator's gang annotations may sit on the object). Both
//! have a status subresource and their own phases; both are optional: a cluster without the
//! CRD just does not speak that dialect.

use std::collections::BTreeMap;

use ::kube::{CustomResource, ResourceExt};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::kind::{Dialect, GangKind, KindContext};
use super::koordinator;
use super::volcano::QUEUE_NAME_ANNOTATION;
use crate::convert::{resource_list, ConvertError};
use crate::framework::JobCondition;
use crate::model::{
    GangOrigin, GangPolicy, JobInfo, JobSpec, MatchPolicy, PodGroupPhase, TaskStatus,
};

/// scheduler-plugins: the pod's PodGroup (`scheduling.x-k8s.io/v1alpha1`).
pub const X_K8S_POD_GROUP_LABEL: &str = "scheduling.x-k8s.io/pod-group";

/// What scheduler-plugins and the legacy API write in a PodGroup's status.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CoschedulingStatus {
    /// Pending, PreScheduling, Scheduling, Scheduled, Running, Succeeded, Failed, Finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// The workload (an owner's name) the group belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub occupied_by: Option<String>,
    /// Pods scheduled (the legacy API only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduled: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub succeeded: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<i32>,
    /// When the group first left Pending.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_start_time: Option<Time>,
}

/// A PodGroup kind of this module: its spec fields, whatever its API group.
macro_rules! coscheduling_pod_group {
    ($spec:ident, $root:ident, $dialect:ident, $root_name:literal, $group:literal, $doc:literal) => {
        #[doc = $doc]
        #[derive(
            CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema,
        )]
        #[kube(
                                                                    group = $group,
                                                                    version = "v1alpha1",
                                                                    kind = "PodGroup",
                                                                    plural = "podgroups",
                                                                    root = $root_name,
                                                                    namespaced,
                                                                    status = "CoschedulingStatus",
                                                                    derive = "PartialEq"
                                                                )]
        #[serde(rename_all = "camelCase")]
        pub struct $spec {
            /// The minimal number of pods to run the group; none start until this many fit.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub min_member: Option<i32>,
            /// The minimal resources to run the group.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub min_resources: Option<BTreeMap<String, Quantity>>,
            /// How long the group may wait for all its members to fit before what it holds is
            /// released and it is retried.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub schedule_timeout_seconds: Option<i32>,
        }

        impl GangKind for $root {
            const DIALECT: Dialect = Dialect::$dialect;
            const WATCH_NAME: &'static str = concat!($group, " PodGroup");
            /// Under `optional/`: `kubectl apply -f crds/` leaves it out, so `kubectl get
            /// podgroup` keeps naming Volcano's (kubectl takes the first group discovery
            /// lists, and v1alpha1 groups sort before v1beta1).
            fn crd() -> Option<super::crds::CrdFile> {
                Some((
                    concat!("optional/", $group, "_podgroups.yaml"),
                    super::crds::approved_if_protected(
                        <$root as ::kube::core::crd::v1::CustomResourceExt>::crd(),
                    ),
                ))
            }
            fn to_job(&self, _: &KindContext) -> Result<JobSpec, ConvertError> {
                cosched_to_job(self)
            }
            fn status_patch(
                &self,
                job: &JobInfo,
                _: Option<&JobCondition>,
                now_ms: i64,
            ) -> Option<Value> {
                cosched_status_patch(self, job, now_ms)
            }
            fn stored_phase(&self) -> Option<&str> {
                self.status.as_ref()?.phase.as_deref()
            }
        }

        impl GroupObject for $root {
            fn metadata(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn min_member(&self) -> Option<i32> {
                self.spec.min_member
            }
            fn min_resources(&self) -> Option<&BTreeMap<String, Quantity>> {
                self.spec.min_resources.as_ref()
            }
            fn schedule_timeout_seconds(&self) -> Option<i32> {
                self.spec.schedule_timeout_seconds
            }
            fn cosched_status(&self) -> Option<&CoschedulingStatus> {
                self.status.as_ref()
            }
        }
    };
}

coscheduling_pod_group!(
    XK8sPodGroupSpec,
    XK8sPodGroup,
    X_K8S,
    "XK8sPodGroup",
    "scheduling.x-k8s.io",
    "scheduler-plugins' PodGroup (`scheduling.x-k8s.io/v1alpha1`)."
);
coscheduling_pod_group!(
    SigsPodGroupSpec,
    SigsPodGroup,
    SIGS,
    "SigsPodGroup",
    "scheduling.sigs.k8s.io",
    "The legacy PodGroup (`scheduling.sigs.k8s.io/v1alpha1`) of ACK and Koordinator."
);

/// What a coscheduling PodGroup kind offers, whatever its group.
pub trait GroupObject: GangKind {
    fn metadata(&self) -> &ObjectMeta;
    fn min_member(&self) -> Option<i32>;
    fn min_resources(&self) -> Option<&BTreeMap<String, Quantity>>;
    fn schedule_timeout_seconds(&self) -> Option<i32>;
    fn cosched_status(&self) -> Option<&CoschedulingStatus>;
}

/// The engine's phase from a coscheduling phase, so a restarted scheduler resumes where it
/// was (an admitted gang stays admitted).
pub fn phase_from_cosched(phase: Option<&str>) -> PodGroupPhase {
    match phase {
        Some("PreScheduling" | "Scheduling") => PodGroupPhase::Inqueue,
        Some("Scheduled" | "Running") => PodGroupPhase::Running,
        Some("Succeeded" | "Failed" | "Finished") => PodGroupPhase::Completed,
        _ => PodGroupPhase::Pending,
    }
}

/// The coscheduling phase that describes a gang: Pending until admitted with enough pods,
/// PreScheduling once admitted, Scheduling while some members are placed, Scheduled when
/// minMember are bound, Running when minMember run, Succeeded/Failed when all are done.
pub fn cosched_phase(job: &JobInfo) -> &'static str {
    let n = |s: TaskStatus| job.count(s);
    match job.phase {
        PodGroupPhase::Pending | PodGroupPhase::Unknown => "Pending",
        PodGroupPhase::Inqueue if job.valid_count() < job.min_member => "Pending",
        PodGroupPhase::Inqueue => {
            let placed = n(TaskStatus::Allocated)
                + n(TaskStatus::Pipelined)
                + n(TaskStatus::Binding)
                + n(TaskStatus::Bound);
            if placed > 0 {
                "Scheduling"
            } else {
                "PreScheduling"
            }
        }
        PodGroupPhase::Running if n(TaskStatus::Running) >= job.min_member => "Running",
        PodGroupPhase::Running => "Scheduled",
        PodGroupPhase::Completed if n(TaskStatus::Failed) > 0 => "Failed",
        PodGroupPhase::Completed => "Succeeded",
    }
}

/// The engine's gang for a coscheduling PodGroup. The legacy kind may carry Koordinator's
/// gang annotations (mode, groups, waiting-time, total-number, match-policy); their
/// waiting-time wins over `scheduleTimeoutSeconds`.
pub fn cosched_to_job<G: GroupObject>(group: &G) -> Result<JobSpec, ConvertError> {
    let meta = group.metadata();
    let ns = meta.namespace.clone().unwrap_or_default();
    let name = meta.name.clone().unwrap_or_default();
    let object = format!("{} podgroup {ns}/{name}", G::DIALECT.api_group());
    let err = |field: &str, message: String| ConvertError {
        object: object.clone(),
        field: field.into(),
        message,
    };
    let min_member = group.min_member().unwrap_or(1);
    if min_member < 0 {
        return Err(err(
            "spec.minMember",
            format!("must be >= 0, got {min_member}"),
        ));
    }
    let timeout = match group.schedule_timeout_seconds() {
        Some(s) if s < 0 => {
            return Err(err(
                "spec.scheduleTimeoutSeconds",
                format!("must be >= 0, got {s}"),
            ))
        }
        Some(s) => Some(i64::from(s) * 1000),
        None => None,
    };
    let min_resources = group
        .min_resources()
        .map(|r| resource_list(Some(r)).map_err(|e| err("spec.minResources", e.to_string())))
        .transpose()?;
    let annotations = meta.annotations.clone().unwrap_or_default();
    let mut policy = GangPolicy {
        wait_timeout: timeout,
        ..Default::default()
    };
    let koordinator_keys = annotations
        .keys()
        .any(|k| k.starts_with("gang.scheduling.koordinator.sh/"));
    if G::DIALECT == Dialect::SIGS && koordinator_keys {
        let gang = koordinator::gang_policy(&annotations, &ns, &name, &object)?;
        policy = GangPolicy {
            wait_timeout: gang.policy.wait_timeout.or(timeout),
            ..gang.policy
        };
    } else if G::DIALECT == Dialect::SIGS {
        policy.match_policy = MatchPolicy::OnceSatisfied; // Koordinator's default
    }
    if let Some(total) = policy.total_number {
        if (min_member as u32) > total {
            return Err(err(
                "spec.minMember",
                format!("minMember {min_member} is larger than total-number {total}"),
            ));
        }
    }
    Ok(JobSpec {
        uid: format!("{ns}/{name}"),
        namespace: ns.clone(),
        name: name.clone(),
        queue: annotations
            .get(QUEUE_NAME_ANNOTATION)
            .filter(|q| !q.is_empty())
            .cloned()
            .unwrap_or_else(|| super::volcano::api::DEFAULT_QUEUE.into()),
        min_member: min_member as u32,
        min_task_member: BTreeMap::new(),
        min_resources,
        // These kinds carry no priority; the gang orders by its creation time.
        priority: 0,
        created: meta
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.as_millisecond())
            .unwrap_or(0),
        phase: phase_from_cosched(group.cosched_status().and_then(|s| s.phase.as_deref())),
        policy,
        origin: GangOrigin::Declared,
        topology: None,
        subgroups: Vec::new(),
    })
}

/// A merge patch for the status subresource, or None when it already says this.
pub fn cosched_status_patch<G: GroupObject>(
    group: &G,
    job: &JobInfo,
    now_ms: i64,
) -> Option<Value> {
    let current = group.cosched_status().cloned().unwrap_or_default();
    let n = |s: TaskStatus| job.count(s) as i32;
    let phase = cosched_phase(job);
    let running = n(TaskStatus::Running);
    let scheduled = running + n(TaskStatus::Bound) + n(TaskStatus::Binding);
    let (succeeded, failed) = (n(TaskStatus::Succeeded), n(TaskStatus::Failed));
    let start = current.schedule_start_time.is_none() && phase != "Pending";
    let legacy = G::DIALECT == Dialect::SIGS;
    let same = current.phase.as_deref() == Some(phase)
        && current.running.unwrap_or(0) == running
        && current.succeeded.unwrap_or(0) == succeeded
        && current.failed.unwrap_or(0) == failed
        && (!legacy || current.scheduled.unwrap_or(0) == scheduled)
        && !start;
    if same {
        return None;
    }
    let mut status = json!({
        "phase": phase,
        "running": running,
        "succeeded": succeeded,
        "failed": failed,
    });
    if legacy {
        status["scheduled"] = scheduled.into();
    }
    if start {
        if let Ok(t) = k8s_openapi::jiff::Timestamp::from_millisecond(now_ms) {
            status["scheduleStartTime"] = t.to_string().into();
        }
    }
    Some(json!({ "status": status }))
}

/// `namespace/name` of an object.
pub fn key_of_group<G: ResourceExt>(g: &G) -> String {
    format!("{}/{}", g.namespace().unwrap_or_default(), g.name_any())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{GangMode, TaskInfo};

    fn x_k8s(yaml: &str) -> XK8sPodGroup {
        crate::yaml::from_str(yaml).unwrap()
    }

    fn sigs(yaml: &str) -> SigsPodGroup {
        crate::yaml::from_str(yaml).unwrap()
    }

    #[test]
    fn scheduler_plugins_pod_group_converts_with_its_timeout() {
        let pg = x_k8s(
            r#"
apiVersion: scheduling.x-k8s.io/v1alpha1
kind: PodGroup
metadata: {name: nginx, namespace: default}
spec: {minMember: 3, minResources: {cpu: "3"}, scheduleTimeoutSeconds: 10}
status: {phase: PreScheduling}
"#,
        );
        let spec = cosched_to_job(&pg).unwrap();
        assert_eq!(spec.uid, "default/nginx");
        assert_eq!(spec.min_member, 3);
        assert_eq!(spec.policy.wait_timeout, Some(10_000));
        assert_eq!(spec.phase, PodGroupPhase::Inqueue, "resumes admitted");
        assert_eq!(spec.policy.match_policy, MatchPolicy::WaitingAndRunning);
        assert!(spec.min_resources.is_some());
    }

    #[test]
    fn legacy_pod_group_reads_koordinator_annotations() {
        let pg = sigs(
            r#"
apiVersion: scheduling.sigs.k8s.io/v1alpha1
kind: PodGroup
metadata:
  name: gang-a
  namespace: default
  annotations:
    gang.scheduling.koordinator.sh/mode: NonStrict
    gang.scheduling.koordinator.sh/groups: '["default/gang-a","default/gang-b"]'
    gang.scheduling.koordinator.sh/waiting-time: 1m
spec: {minMember: 2, scheduleTimeoutSeconds: 5}
"#,
        );
        let spec = cosched_to_job(&pg).unwrap();
        assert_eq!(spec.policy.mode, GangMode::NonStrict);
        assert_eq!(spec.policy.group, vec!["default/gang-a", "default/gang-b"]);
        assert_eq!(spec.policy.wait_timeout, Some(60_000), "waiting-time wins");
        assert_eq!(spec.policy.match_policy, MatchPolicy::OnceSatisfied);
    }

    #[test]
    fn bad_objects_name_the_field() {
        let pg = x_k8s(
            "apiVersion: scheduling.x-k8s.io/v1alpha1\nkind: PodGroup\nmetadata: {name: a, namespace: n}\nspec: {minMember: -1}\n",
        );
        let e = cosched_to_job(&pg).unwrap_err().to_string();
        assert!(
            e.contains("scheduling.x-k8s.io podgroup n/a: spec.minMember"),
            "{e}"
        );
        let pg = sigs(
            "apiVersion: scheduling.sigs.k8s.io/v1alpha1\nkind: PodGroup\nmetadata: {name: a, namespace: n, annotations: {gang.scheduling.koordinator.sh/total-number: '2'}}\nspec: {minMember: 3}\n",
        );
        let e = cosched_to_job(&pg).unwrap_err().to_string();
        assert!(e.contains("larger than total-number 2"), "{e}");
    }

    #[test]
    fn phases_follow_the_gang_and_status_is_patched_only_on_change() {
        let pg = x_k8s(
            "apiVersion: scheduling.x-k8s.io/v1alpha1\nkind: PodGroup\nmetadata: {name: a, namespace: n}\nspec: {minMember: 2}\n",
        );
        let mut job = JobInfo::new(cosched_to_job(&pg).unwrap());
        assert_eq!(cosched_phase(&job), "Pending");
        job.phase = PodGroupPhase::Inqueue;
        for i in 0..2 {
            let mut t = TaskInfo::new(
                format!("n/p{i}"),
                "n",
                format!("p{i}"),
                "",
                Default::default(),
                0,
                Default::default(),
                0,
            );
            t.status = TaskStatus::Running;
            t.node = Some("node".into());
            job.upsert_task(t);
        }
        job.phase = PodGroupPhase::Running;
        assert_eq!(cosched_phase(&job), "Running");
        let patch = cosched_status_patch(&pg, &job, 0).unwrap();
        assert_eq!(patch["status"]["phase"], "Running");
        assert_eq!(patch["status"]["running"], 2);
        assert!(patch["status"].get("scheduleStartTime").is_some());
        let mut written = pg.clone();
        written.status = Some(serde_json::from_value(patch["status"].clone()).unwrap());
        assert_eq!(cosched_status_patch(&written, &job, 1).as_ref(), None);
    }
}
