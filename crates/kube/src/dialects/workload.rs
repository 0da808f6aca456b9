//! Kubernetes' Workload (`scheduling.k8s.io/v1beta1`): the producer's record a native
//! PodGroup names in `workloadRef` (the Job controller writes one per Job, and makes the
//! PodGroup from one of its `podGroupTemplates`). Read for explain and events only: the
//! PodGroup itself defines the gang. Watched where the API server serves it. Apart from
//! `native` so that the PodGroup kind stays one file and one line in `KINDS`.

use std::collections::{HashMap, HashSet};

use k8s_openapi::api::scheduling::v1beta1::PodGroupTemplate;
pub use k8s_openapi::api::scheduling::v1beta1::Workload;

/// The reason of the event on a PodGroup whose `workloadRef` names no Workload, or a
/// template its Workload does not have.
pub const WORKLOAD_REFERENCE: &str = "WorkloadReference";

/// What a PodGroup's `workloadRef` points at, read from the Workloads the index holds (by
/// `namespace/name`): for explain and the PodGroup's events. The Workload is the
/// producer's record (the Job controller writes one per Job); the PodGroup made from its
/// template is what defines the gang, so a reference that does not resolve changes nothing
/// in scheduling and is only said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkloadLink {
    /// `namespace/name` of the Workload.
    pub workload: String,
    pub template: String,
    /// What the template says, or why it cannot be read.
    pub found: Result<String, String>,
}

impl WorkloadLink {
    /// "workload ns/train, template workers: gang minCount 4" (or the problem).
    pub fn describe(&self) -> String {
        let head = format!("workload {}, template {}", self.workload, self.template);
        match &self.found {
            Ok(what) => format!("{head}: {what}"),
            Err(problem) => format!("{head}: {problem}"),
        }
    }
}

/// The link of `namespace`'s PodGroup referring to (`workload`, `template`).
pub fn workload_link(
    namespace: &str,
    (workload, template): (String, String),
    workloads: &HashMap<String, Workload>,
) -> WorkloadLink {
    let key = format!("{namespace}/{workload}");
    let found = match workloads.get(&key) {
        None => Err(format!("Workload {key} does not exist")),
        Some(w) => {
            let templates = w.spec.pod_group_templates.as_deref().unwrap_or_default();
            match templates.iter().find(|t| t.name == template) {
                Some(t) => Ok(template_summary(t)),
                None => Err(format!(
                    "Workload {key} has no podGroupTemplate {template:?} (it has: {})",
                    if templates.is_empty() {
                        "none".to_string()
                    } else {
                        templates
                            .iter()
                            .map(|t| t.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    }
                )),
            }
        }
    };
    WorkloadLink {
        workload: key,
        template,
        found,
    }
}

/// The Workloads the index holds, and the PodGroups whose reference must be checked again
/// (their own change, or their Workload's).
#[derive(Default)]
pub struct Workloads {
    /// By `namespace/name`, the newest seen.
    pub objects: HashMap<String, Workload>,
    /// Group keys to check.
    pub dirty: HashSet<String>,
}

impl Workloads {
    /// The PodGroups of `namespace` (keys, with whether they name a Workload) to check
    /// again when that namespace's Workloads change.
    pub fn touch_namespace(&mut self, namespace: &str, refs: Vec<(String, bool)>) {
        let prefix = format!("{namespace}/");
        self.dirty.extend(
            refs.into_iter()
                .filter(|(key, has_ref)| *has_ref && key.starts_with(&prefix))
                .map(|(key, _)| key),
        );
    }
}

/// A template in a few words: its policy, topology, disruption mode and priority class.
fn template_summary(t: &PodGroupTemplate) -> String {
    let mut parts = vec![
        match (&t.scheduling_policy.gang, &t.scheduling_policy.basic) {
            (Some(g), _) => format!("gang minCount {}", g.min_count),
            (None, Some(_)) => "basic (no gang)".to_string(),
            (None, None) => "no scheduling policy".to_string(),
        },
    ];
    let keys: Vec<&str> = t
        .scheduling_constraints
        .as_ref()
        .and_then(|c| c.topology.as_deref())
        .unwrap_or_default()
        .iter()
        .map(|c| c.key.as_str())
        .collect();
    if !keys.is_empty() {
        parts.push(format!("topology {}", keys.join(", ")));
    }
    if t.disruption_mode.as_ref().is_some_and(|d| d.all.is_some()) {
        parts.push("disruptionMode all".into());
    }
    if let Some(class) = t.priority_class_name.as_deref().filter(|c| !c.is_empty()) {
        parts.push(format!("priorityClassName {class}"));
    }
    parts.join(", ")
}
