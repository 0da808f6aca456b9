//! Rules that place a pod relative to other pods: inter-pod affinity and anti-affinity,
//! topology spread constraints, host ports. Field names follow the Kubernetes API so
//! scenario files read like pod specs; `matchLabelKeys` and `mismatchLabelKeys` are folded
//! into the selectors with the owning pod's labels (`PodAffinityTerm::resolved`) before the
//! engine sees them, as the API server does for affinity since 1.31.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub type Labels = BTreeMap<String, String>;

/// The well-known label every kubelet sets to the node's hostname.
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum LabelOperator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LabelSelectorRequirement {
    pub key: String,
    pub operator: LabelOperator,
    #[serde(default)]
    pub values: Vec<String>,
}

/// A Kubernetes label selector. An empty selector matches every set of labels.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LabelSelector {
    #[serde(default)]
    pub match_labels: Labels,
    #[serde(default)]
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

impl LabelSelector {
    pub fn matches(&self, labels: &Labels) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|r| {
                let value = labels.get(&r.key);
                match r.operator {
                    LabelOperator::In => value.is_some_and(|v| r.values.contains(v)),
                    LabelOperator::NotIn => !value.is_some_and(|v| r.values.contains(v)),
                    LabelOperator::Exists => value.is_some(),
                    LabelOperator::DoesNotExist => value.is_none(),
                }
            })
    }

    /// One `key=value` pair every matching pod carries, if the selector has one: matching
    /// pods are looked up by it instead of scanning every pod.
    pub fn required_pair(&self) -> Option<(&str, &str)> {
        if let Some((k, v)) = self.match_labels.iter().next() {
            return Some((k, v));
        }
        self.match_expressions
            .iter()
            .find_map(|r| match (r.operator, r.values.as_slice()) {
                (LabelOperator::In, [v]) => Some((r.key.as_str(), v.as_str())),
                _ => None,
            })
    }

    /// What is wrong with the selector, in the API server's words (operators that take no
    /// values given some, `In` without any).
    pub fn problem(&self) -> Option<String> {
        self.match_expressions
            .iter()
            .find_map(|r| match r.operator {
                LabelOperator::In | LabelOperator::NotIn if r.values.is_empty() => Some(format!(
                    "matchExpressions key {:?}: operator {:?} needs at least one value",
                    r.key, r.operator
                )),
                LabelOperator::Exists | LabelOperator::DoesNotExist if !r.values.is_empty() => {
                    Some(format!(
                        "matchExpressions key {:?}: operator {:?} takes no values",
                        r.key, r.operator
                    ))
                }
                _ => None,
            })
    }
}

/// Which pods a term is about and over which topology domain.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodAffinityTerm {
    /// None matches no pod (Kubernetes semantics).
    #[serde(default)]
    pub label_selector: Option<LabelSelector>,
    /// With `namespace_selector`, the namespaces the term looks in; both empty: the pod's own.
    #[serde(default)]
    pub namespaces: Vec<String>,
    /// Namespaces by their labels; `{}` is every namespace.
    #[serde(default)]
    pub namespace_selector: Option<LabelSelector>,
    pub topology_key: String,
    #[serde(default)]
    pub match_label_keys: Vec<String>,
    #[serde(default)]
    pub mismatch_label_keys: Vec<String>,
}

impl PodAffinityTerm {
    /// The term with `matchLabelKeys` (`key In [owner's value]`) and `mismatchLabelKeys`
    /// (`key NotIn [owner's value]`) folded into its selector, as the API server does.
    pub fn resolved(mut self, owner_labels: &Labels) -> Self {
        let keys = std::mem::take(&mut self.match_label_keys)
            .into_iter()
            .map(|k| (k, LabelOperator::In))
            .chain(
                std::mem::take(&mut self.mismatch_label_keys)
                    .into_iter()
                    .map(|k| (k, LabelOperator::NotIn)),
            );
        for (key, operator) in keys {
            if let (Some(selector), Some(value)) =
                (self.label_selector.as_mut(), owner_labels.get(&key))
            {
                selector.match_expressions.push(LabelSelectorRequirement {
                    key,
                    operator,
                    values: vec![value.clone()],
                });
            }
        }
        self
    }

    /// Whether a pod in `namespace` with `labels` is one the term is about, for a term
    /// owned by a pod in `owner_namespace`.
    pub fn selects(
        &self,
        owner_namespace: &str,
        namespace: &str,
        labels: &Labels,
        namespace_labels: impl Fn(&str) -> Option<Labels>,
    ) -> bool {
        self.selects_namespace(owner_namespace, namespace, namespace_labels)
            && self
                .label_selector
                .as_ref()
                .is_some_and(|s| s.matches(labels))
    }

    pub fn selects_namespace(
        &self,
        owner_namespace: &str,
        namespace: &str,
        namespace_labels: impl Fn(&str) -> Option<Labels>,
    ) -> bool {
        if self.namespaces.is_empty() && self.namespace_selector.is_none() {
            return namespace == owner_namespace;
        }
        self.namespaces.iter().any(|n| n == namespace)
            || self.namespace_selector.as_ref().is_some_and(|s| {
                s.match_labels.is_empty() && s.match_expressions.is_empty()
                    || namespace_labels(namespace).is_some_and(|l| s.matches(&l))
            })
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WeightedPodAffinityTerm {
    /// 1..=100.
    pub weight: i32,
    pub pod_affinity_term: PodAffinityTerm,
}

/// `podAffinity` or `podAntiAffinity`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodAffinity {
    #[serde(default)]
    pub required_during_scheduling_ignored_during_execution: Vec<PodAffinityTerm>,
    #[serde(default)]
    pub preferred_during_scheduling_ignored_during_execution: Vec<WeightedPodAffinityTerm>,
}

impl PodAffinity {
    pub fn is_empty(&self) -> bool {
        self.required_during_scheduling_ignored_during_execution
            .is_empty()
            && self
                .preferred_during_scheduling_ignored_during_execution
                .is_empty()
    }

    pub fn required(&self) -> &[PodAffinityTerm] {
        &self.required_during_scheduling_ignored_during_execution
    }

    pub fn preferred(&self) -> &[WeightedPodAffinityTerm] {
        &self.preferred_during_scheduling_ignored_during_execution
    }

    fn resolved(self, owner_labels: &Labels) -> Self {
        PodAffinity {
            required_during_scheduling_ignored_during_execution: self
                .required_during_scheduling_ignored_during_execution
                .into_iter()
                .map(|t| t.resolved(owner_labels))
                .collect(),
            preferred_during_scheduling_ignored_during_execution: self
                .preferred_during_scheduling_ignored_during_execution
                .into_iter()
                .map(|w| WeightedPodAffinityTerm {
                    weight: w.weight,
                    pod_affinity_term: w.pod_affinity_term.resolved(owner_labels),
                })
                .collect(),
        }
    }

    fn terms(&self) -> impl Iterator<Item = &PodAffinityTerm> {
        self.required()
            .iter()
            .chain(self.preferred().iter().map(|w| &w.pod_affinity_term))
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum WhenUnsatisfiable {
    #[default]
    DoNotSchedule,
    ScheduleAnyway,
}

/// Whether a node's affinity or taints decide if its domain counts for a spread.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum NodeInclusionPolicy {
    Honor,
    Ignore,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TopologySpreadConstraint {
    pub max_skew: i32,
    pub topology_key: String,
    #[serde(default)]
    pub when_unsatisfiable: WhenUnsatisfiable,
    /// None matches no pod.
    #[serde(default)]
    pub label_selector: Option<LabelSelector>,
    #[serde(default)]
    pub min_domains: Option<i32>,
    /// Default Honor: only nodes the pod's node selector and affinity allow count.
    #[serde(default)]
    pub node_affinity_policy: Option<NodeInclusionPolicy>,
    /// Default Ignore: tainted nodes count.
    #[serde(default)]
    pub node_taints_policy: Option<NodeInclusionPolicy>,
    #[serde(default)]
    pub match_label_keys: Vec<String>,
}

impl TopologySpreadConstraint {
    /// `matchLabelKeys` folded into the selector with the owner's values (Kubernetes'
    /// default since 1.27): pods of another revision of the same workload do not count.
    pub fn resolved(mut self, owner_labels: &Labels) -> Self {
        for key in std::mem::take(&mut self.match_label_keys) {
            if let (Some(selector), Some(value)) =
                (self.label_selector.as_mut(), owner_labels.get(&key))
            {
                selector.match_expressions.push(LabelSelectorRequirement {
                    key,
                    operator: LabelOperator::In,
                    values: vec![value.clone()],
                });
            }
        }
        self
    }

    pub fn honours_node_affinity(&self) -> bool {
        self.node_affinity_policy != Some(NodeInclusionPolicy::Ignore)
    }

    pub fn honours_taints(&self) -> bool {
        self.node_taints_policy == Some(NodeInclusionPolicy::Honor)
    }

    /// What the API server would refuse.
    pub fn problem(&self) -> Option<String> {
        if self.max_skew < 1 {
            return Some(format!("maxSkew must be at least 1, not {}", self.max_skew));
        }
        if self.topology_key.is_empty() {
            return Some("topologyKey must not be empty".into());
        }
        if let Some(m) = self.min_domains {
            if m < 1 {
                return Some(format!("minDomains must be at least 1, not {m}"));
            }
            if self.when_unsatisfiable != WhenUnsatisfiable::DoNotSchedule {
                return Some(
                    "minDomains is only allowed with whenUnsatisfiable DoNotSchedule".into(),
                );
            }
        }
        self.label_selector
            .as_ref()
            .and_then(LabelSelector::problem)
            .map(|p| format!("labelSelector: {p}"))
    }
}

/// A port a pod takes on its node (`hostPort`, or a container port with `hostNetwork`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HostPort {
    pub port: i32,
    #[serde(default = "tcp")]
    pub protocol: String,
    /// Empty or 0.0.0.0: every address.
    #[serde(default)]
    pub host_ip: String,
}

fn tcp() -> String {
    "TCP".into()
}

impl HostPort {
    /// Whether two pods wanting these ports cannot share a node (kube-scheduler's NodePorts).
    pub fn conflicts(&self, other: &HostPort) -> bool {
        let any = |ip: &str| ip.is_empty() || ip == "0.0.0.0" || ip == "::";
        self.port == other.port
            && self.protocol == other.protocol
            && (any(&self.host_ip) || any(&other.host_ip) || self.host_ip == other.host_ip)
    }
}

/// Everything that places a pod relative to other pods. Boxed in `Placement` so pods
/// without any (nearly all) pay one pointer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodRules {
    #[serde(default)]
    pub pod_affinity: PodAffinity,
    #[serde(default)]
    pub pod_anti_affinity: PodAffinity,
    #[serde(default)]
    pub topology_spread_constraints: Vec<TopologySpreadConstraint>,
}

impl PodRules {
    pub fn is_empty(&self) -> bool {
        self.pod_affinity.is_empty()
            && self.pod_anti_affinity.is_empty()
            && self.topology_spread_constraints.is_empty()
    }

    /// The rules with their label keys folded in with the owner's labels.
    pub fn resolved(self, owner_labels: &Labels) -> Self {
        PodRules {
            pod_affinity: self.pod_affinity.resolved(owner_labels),
            pod_anti_affinity: self.pod_anti_affinity.resolved(owner_labels),
            topology_spread_constraints: self
                .topology_spread_constraints
                .into_iter()
                .map(|c| c.resolved(owner_labels))
                .collect(),
        }
    }

    /// Placing other pods can only take nodes away from this pod, never give it one (only
    /// anti-affinity): "nothing fits" stays true until something is released.
    pub fn monotone(&self) -> bool {
        self.pod_affinity.required().is_empty()
            && !self
                .topology_spread_constraints
                .iter()
                .any(|c| c.when_unsatisfiable == WhenUnsatisfiable::DoNotSchedule)
    }

    /// Every rule is about the node alone (hostname topology): placing a pod changes what
    /// this pod may do only on that pod's node.
    pub fn node_local(&self) -> bool {
        self.topology_spread_constraints.is_empty()
            && self
                .pod_affinity
                .terms()
                .chain(self.pod_anti_affinity.terms())
                .all(|t| t.topology_key == HOSTNAME_LABEL)
    }

    /// What the API server would refuse, naming the field.
    pub fn problem(&self) -> Option<String> {
        for (field, a) in [
            ("podAffinity", &self.pod_affinity),
            ("podAntiAffinity", &self.pod_anti_affinity),
        ] {
            for (i, t) in a.required().iter().enumerate() {
                if let Some(p) = term_problem(t) {
                    return Some(format!(
                        "{field}.requiredDuringSchedulingIgnoredDuringExecution[{i}]: {p}"
                    ));
                }
            }
            for (i, w) in a.preferred().iter().enumerate() {
                let p = if !(1..=100).contains(&w.weight) {
                    Some(format!("weight must be 1..100, not {}", w.weight))
                } else {
                    term_problem(&w.pod_affinity_term)
                };
                if let Some(p) = p {
                    return Some(format!(
                        "{field}.preferredDuringSchedulingIgnoredDuringExecution[{i}]: {p}"
                    ));
                }
            }
        }
        self.topology_spread_constraints
            .iter()
            .enumerate()
            .find_map(|(i, c)| {
                c.problem()
                    .map(|p| format!("topologySpreadConstraints[{i}]: {p}"))
            })
    }
}

fn term_problem(t: &PodAffinityTerm) -> Option<String> {
    if t.topology_key.is_empty() {
        return Some("topologyKey must not be empty".into());
    }
    t.label_selector
        .as_ref()
        .and_then(LabelSelector::problem)
        .map(|p| format!("labelSelector: {p}"))
        .or_else(|| {
            t.namespace_selector
                .as_ref()
                .and_then(LabelSelector::problem)
                .map(|p| format!("namespaceSelector: {p}"))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn selectors_match_like_kubernetes() {
        let s: LabelSelector = crate::yaml::from_str(
            "{matchLabels: {app: x}, matchExpressions: [{key: tier, operator: NotIn, values: [db]}, {key: gpu, operator: Exists}]}",
        )
        .unwrap();
        assert!(s.matches(&labels(&[("app", "x"), ("gpu", "1")])));
        assert!(!s.matches(&labels(&[("app", "x"), ("gpu", "1"), ("tier", "db")])));
        assert!(!s.matches(&labels(&[("app", "x")])));
        assert!(
            LabelSelector::default().matches(&labels(&[])),
            "empty matches all"
        );
        assert_eq!(s.required_pair(), Some(("app", "x")));
    }

    #[test]
    fn terms_look_in_the_owner_namespace_unless_told_otherwise() {
        let mut t = PodAffinityTerm {
            label_selector: Some(LabelSelector::default()),
            topology_key: HOSTNAME_LABEL.into(),
            ..Default::default()
        };
        let none = |_: &str| None;
        assert!(t.selects("a", "a", &labels(&[]), none));
        assert!(!t.selects("a", "b", &labels(&[]), none));
        t.namespace_selector = Some(LabelSelector::default());
        assert!(
            t.selects("a", "b", &labels(&[]), none),
            "{{}} is every namespace"
        );
        t.namespace_selector = Some(LabelSelector {
            match_labels: labels(&[("team", "ml")]),
            ..Default::default()
        });
        let ns = |n: &str| (n == "b").then(|| labels(&[("team", "ml")]));
        assert!(t.selects("a", "b", &labels(&[]), ns));
        assert!(!t.selects("a", "c", &labels(&[]), ns));
        let no_selector = PodAffinityTerm {
            topology_key: HOSTNAME_LABEL.into(),
            ..Default::default()
        };
        assert!(
            !no_selector.selects("a", "a", &labels(&[]), none),
            "null selects none"
        );
    }

    #[test]
    fn match_label_keys_fold_in_the_owner_values() {
        let t = PodAffinityTerm {
            label_selector: Some(LabelSelector::default()),
            topology_key: "zone".into(),
            match_label_keys: vec!["job".into()],
            mismatch_label_keys: vec!["tenant".into()],
            ..Default::default()
        }
        .resolved(&labels(&[("job", "j1"), ("tenant", "t1")]));
        let s = t.label_selector.as_ref().unwrap();
        assert!(s.matches(&labels(&[("job", "j1"), ("tenant", "t2")])));
        assert!(!s.matches(&labels(&[("job", "j2"), ("tenant", "t2")])));
        assert!(!s.matches(&labels(&[("job", "j1"), ("tenant", "t1")])));
    }

    #[test]
    fn bad_rules_name_their_field() {
        let rules: PodRules =
            crate::yaml::from_str("{topologySpreadConstraints: [{maxSkew: 0, topologyKey: zone}]}")
                .unwrap();
        assert_eq!(
            rules.problem().as_deref(),
            Some("topologySpreadConstraints[0]: maxSkew must be at least 1, not 0")
        );
        let rules: PodRules = crate::yaml::from_str(
            "{podAntiAffinity: {requiredDuringSchedulingIgnoredDuringExecution: [{topologyKey: zone, labelSelector: {matchExpressions: [{key: a, operator: In}]}}]}}",
        )
        .unwrap();
        assert_eq!(
            rules.problem().as_deref(),
            Some("podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]: labelSelector: matchExpressions key \"a\": operator In needs at least one value")
        );
    }

    #[test]
    fn host_ports_clash_on_the_same_port_protocol_and_address() {
        let p = |port, proto: &str, ip: &str| HostPort {
            port,
            protocol: proto.into(),
            host_ip: ip.into(),
        };
        assert!(p(9000, "TCP", "").conflicts(&p(9000, "TCP", "10.0.0.1")));
        assert!(!p(9000, "TCP", "").conflicts(&p(9000, "UDP", "")));
        assert!(!p(9000, "TCP", "10.0.0.1").conflicts(&p(9000, "TCP", "10.0.0.2")));
        assert!(!p(9000, "TCP", "").conflicts(&p(9001, "TCP", "")));
    }
}
