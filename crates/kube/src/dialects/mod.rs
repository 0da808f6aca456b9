//! The gang dialects: every way users declare gangs, in one place. Each dialect's keys and
//! objects live in its file — `volcano` (PodGroup, Queue, the group-name annotation; also
//! what operators such as the training-operator create), `coscheduling`
//! (scheduler-plugins' and the legacy PodGroup), `koordinator` (gang annotations),
//! `kube_batch` (kube-batch's and ACK's pod-only gangs), `native` (Kubernetes' own
//! `scheduling.k8s.io` PodGroup; `workload`: the Workloads it names) — and `crds`
//! generates the CRDs from the types each kind names. Each
//! PodGroup kind implements `kind::GangKind` and is registered in [`KINDS`].
//! [`pod_gang`] is the one function that says which gang a pod declares.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;

use super::convert::ConvertError;
use crate::model::GangPolicy;

pub mod coscheduling;
pub mod crds;
pub mod kind;
pub mod koordinator;
pub mod kube_batch;
pub mod native;
pub mod volcano;
pub mod workload;

/// Every PodGroup kind, in precedence order: when several kinds name the same
/// `namespace/name`, the first defines the gang; a pod field of a kind's own
/// (`GangKind::pod_declares`) is read in this order too, before any annotation or label.
/// Kubernetes' own PodGroup comes first: the API server validates it and its pods'
/// `spec.schedulingGroup`, and kube-scheduler reads nothing else.
pub static KINDS: &[kind::Kind] = &[
    kind::kind::<native::NativePodGroup>(),
    kind::kind::<volcano::PodGroup>(),
    kind::kind::<coscheduling::XK8sPodGroup>(),
    kind::kind::<coscheduling::SigsPodGroup>(),
];

pub use coscheduling::X_K8S_POD_GROUP_LABEL;
pub use kube_batch::{
    ACK_GROUP_NAME, ACK_GROUP_NAME_SHORT, ACK_MIN_AVAILABLE, KUBE_BATCH_MIN_MEMBER,
};
pub use volcano::{
    GROUP_NAME_ANNOTATION, QUEUE_NAME_ANNOTATION, TASK_SPEC_ANNOTATION, VOLCANO_GROUP_NAME,
};

/// How a pod declares its gang.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GangDecl {
    pub name: String,
    /// The minimum the pod itself carries: such a gang exists without a PodGroup object
    /// (a PodGroup of the same name, if one appears, takes precedence).
    pub implicit_min: Option<u32>,
    /// The gang's policy, as the pod declares it (Koordinator annotations); the default
    /// (Volcano's semantics) otherwise.
    pub policy: GangPolicy,
    /// Another declaration the pod carries that lost to this one: the event that tells the
    /// pod so, naming both.
    pub overrides: Option<String>,
}

pub(crate) fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        })
}

/// The gang a pod declares, in this order of precedence (the first key present wins):
/// 0. a pod field of a registered kind (`spec.schedulingGroup.podGroupName`, Kubernetes'
///    own PodGroup): it wins over every key below, which is then named in `overrides`;
/// 1. annotation `scheduling.k8s.io/group-name` (Volcano, kube-batch; with kube-batch's
///    `scheduling.k8s.io/group-min-member` the gang needs no PodGroup object);
/// 2. `scheduling.volcano.sh/group-name`, annotation then label;
/// 3. label `scheduling.x-k8s.io/pod-group` (scheduler-plugins; needs its PodGroup);
/// 4. annotation `gang.scheduling.koordinator.sh/name` with the other Koordinator keys
///    (with `min-available` the gang needs no PodGroup object);
/// 5. ACK labels `pod-group.scheduling.sigs.k8s.io/name` (or `pod-group.scheduling.sigs.k8s.io`)
///    with `pod-group.scheduling.sigs.k8s.io/min-available`: a label-only gang; without
///    min-available the gang is its `scheduling.sigs.k8s.io` PodGroup.
///
/// Whatever key named it, a gang's PodGroup object, if one exists, is what defines it (see
/// the driver for the precedence between PodGroup kinds).
pub fn pod_gang(pod: &Pod) -> Result<Option<GangDecl>, ConvertError> {
    for k in KINDS {
        if let Some(mut decl) = (k.pod_declares)(pod)? {
            let other = keyed_gang(pod).ok().flatten();
            decl.overrides = other.map(|o| {
                format!(
                    "the pod joins PodGroup {} of {} ({}), which takes precedence over its \
                     {} {:?}; that declaration is ignored",
                    decl.name,
                    k.dialect.api_group(),
                    k.pod_field,
                    o.source,
                    o.decl.name
                )
            });
            return Ok(Some(decl));
        }
    }
    Ok(keyed_gang(pod)?.map(|k| k.decl))
}

/// A gang declared by annotations or labels, with the key that declared it.
struct Keyed {
    decl: GangDecl,
    source: String,
}

fn keyed_gang(pod: &Pod) -> Result<Option<Keyed>, ConvertError> {
    let meta = &pod.metadata;
    let object = format!(
        "pod {}/{}",
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default()
    );
    let ann = |k: &str| {
        meta.annotations
            .as_ref()
            .and_then(|a| a.get(k))
            .filter(|v| !v.is_empty())
            .cloned()
    };
    let label = |k: &str| {
        meta.labels
            .as_ref()
            .and_then(|a| a.get(k))
            .filter(|v| !v.is_empty())
            .cloned()
    };
    let min = |field: String, value: Option<String>| -> Result<Option<u32>, ConvertError> {
        value
            .map(|v| {
                v.trim().parse::<u32>().map_err(|_| ConvertError {
                    object: object.clone(),
                    field,
                    message: format!("{v:?} is not a whole number >= 0"),
                })
            })
            .transpose()
    };
    let mut policy = GangPolicy::default();
    let mut source = format!("annotation {GROUP_NAME_ANNOTATION}");
    let (name, implicit_min) = if let Some(name) = ann(GROUP_NAME_ANNOTATION) {
        let m = min(
            format!("metadata.annotations[{KUBE_BATCH_MIN_MEMBER}]"),
            ann(KUBE_BATCH_MIN_MEMBER),
        )?;
        (name, m)
    } else if let Some(name) = ann(VOLCANO_GROUP_NAME).or_else(|| label(VOLCANO_GROUP_NAME)) {
        source = format!("key {VOLCANO_GROUP_NAME}");
        (name, None)
    } else if let Some(name) = label(X_K8S_POD_GROUP_LABEL) {
        source = format!("label {X_K8S_POD_GROUP_LABEL}");
        (name, None)
    } else if let Some(name) = ann(koordinator::NAME) {
        source = format!("annotation {}", koordinator::NAME);
        check_name(&name, &object)?;
        let ns = meta.namespace.clone().unwrap_or_default();
        let empty = BTreeMap::new();
        let annotations = meta.annotations.as_ref().unwrap_or(&empty);
        let gang = koordinator::gang_policy(annotations, &ns, &name, &object)?;
        policy = gang.policy;
        (name, gang.min_available)
    } else if let Some(name) = label(ACK_GROUP_NAME).or_else(|| label(ACK_GROUP_NAME_SHORT)) {
        // With min-available the labels alone make the gang; without, its PodGroup object
        // (scheduling.sigs.k8s.io) does. Never a gang of one by default: pods that arrive
        // before their PodGroup must not bind one by one.
        source = format!("label {ACK_GROUP_NAME}");
        let m = min(
            format!("metadata.labels[{ACK_MIN_AVAILABLE}]"),
            label(ACK_MIN_AVAILABLE),
        )?;
        (name, m)
    } else {
        return Ok(None);
    };
    check_name(&name, &object)?;
    Ok(Some(Keyed {
        decl: GangDecl {
            name,
            implicit_min,
            policy,
            overrides: None,
        },
        source,
    }))
}

pub(crate) fn check_name(name: &str, object: &str) -> Result<(), ConvertError> {
    if !is_dns_subdomain(name) {
        return Err(ConvertError {
            object: object.to_string(),
            field: "gang name".into(),
            message: format!(
                "{name:?} is not a DNS subdomain (lowercase letters, digits, '-' and '.')"
            ),
        });
    }
    Ok(())
}

/// Which gang a pod names, if any (every dialect; see `pod_gang`).
pub fn pod_group_name(pod: &Pod) -> Option<String> {
    pod_gang(pod).ok().flatten().map(|d| d.name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(yaml: &str) -> Pod {
        crate::yaml::from_str(yaml).unwrap()
    }

    #[test]
    fn the_group_name_annotation_names_the_gang() {
        let p = pod(r#"
metadata:
  name: w-0
  namespace: ml
  annotations: {scheduling.k8s.io/group-name: tf, volcano.sh/task-spec: worker}
spec: {containers: []}
"#);
        assert_eq!(pod_group_name(&p).as_deref(), Some("tf"));
    }

    #[test]
    fn gang_dialects_and_their_precedence() {
        let ack = pod(r#"
metadata:
  name: w
  namespace: ns
  labels: {pod-group.scheduling.sigs.k8s.io/name: tf-smoke-gpu, pod-group.scheduling.sigs.k8s.io/min-available: "5"}
spec: {containers: []}
"#);
        assert_eq!(
            pod_gang(&ack).unwrap(),
            Some(GangDecl {
                name: "tf-smoke-gpu".into(),
                implicit_min: Some(5),
                policy: GangPolicy::default(),
                overrides: None,
            })
        );
        let kube_batch = pod(r#"
metadata:
  name: w
  annotations: {scheduling.k8s.io/group-name: g1, scheduling.k8s.io/group-min-member: "3"}
  labels: {pod-group.scheduling.sigs.k8s.io/name: other}
spec: {containers: []}
"#);
        assert_eq!(
            pod_gang(&kube_batch).unwrap(),
            Some(GangDecl {
                name: "g1".into(),
                implicit_min: Some(3),
                policy: GangPolicy::default(),
                overrides: None,
            }),
            "the Volcano/kube-batch annotation wins over ACK labels"
        );
        let volcano_label = pod("metadata: {name: w, labels: {scheduling.volcano.sh/group-name: pg}}\nspec: {containers: []}\n");
        assert_eq!(
            pod_gang(&volcano_label).unwrap(),
            Some(GangDecl {
                name: "pg".into(),
                implicit_min: None,
                policy: GangPolicy::default(),
                overrides: None,
            })
        );
        let bad_min = pod("metadata: {name: w, labels: {pod-group.scheduling.sigs.k8s.io/name: g, pod-group.scheduling.sigs.k8s.io/min-available: five}}\nspec: {containers: []}\n");
        let e = pod_gang(&bad_min).unwrap_err();
        assert!(
            e.to_string().contains("min-available") && e.to_string().contains("\"five\""),
            "{e}"
        );
        let bad_name = pod("metadata: {name: w, labels: {pod-group.scheduling.sigs.k8s.io/name: Bad_Name}}\nspec: {containers: []}\n");
        assert!(pod_gang(&bad_name)
            .unwrap_err()
            .to_string()
            .contains("not a DNS subdomain"));
        let none = pod("metadata: {name: w}\nspec: {containers: []}\n");
        assert_eq!(pod_gang(&none).unwrap(), None);

        let x_k8s = pod(r#"
metadata:
  name: w
  labels: {scheduling.x-k8s.io/pod-group: pg1, pod-group.scheduling.sigs.k8s.io/name: other}
  annotations: {gang.scheduling.koordinator.sh/name: koord}
spec: {containers: []}
"#);
        assert_eq!(
            pod_gang(&x_k8s).unwrap().map(|d| (d.name, d.implicit_min)),
            Some(("pg1".into(), None)),
            "the scheduler-plugins label wins over Koordinator and ACK keys; its PodGroup defines it"
        );
        let koord = pod(r#"
metadata:
  name: w
  namespace: default
  labels: {pod-group.scheduling.sigs.k8s.io/name: other}
  annotations:
    gang.scheduling.koordinator.sh/name: gang-example
    gang.scheduling.koordinator.sh/min-available: "2"
    gang.scheduling.koordinator.sh/mode: NonStrict
spec: {containers: []}
"#);
        let d = pod_gang(&koord).unwrap().unwrap();
        assert_eq!(
            (d.name.as_str(), d.implicit_min),
            ("gang-example", Some(2)),
            "Koordinator's annotation wins over ACK labels"
        );
        assert_eq!(d.policy.mode, crate::model::GangMode::NonStrict);
        let koord_bad = pod(r#"
metadata:
  name: w
  annotations: {gang.scheduling.koordinator.sh/name: g, gang.scheduling.koordinator.sh/groups: "[oops"}
spec: {containers: []}
"#);
        assert!(pod_gang(&koord_bad)
            .unwrap_err()
            .to_string()
            .contains("is not a JSON list"));
    }
}
