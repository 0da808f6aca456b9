//! Where a pod may run: node selector, required and preferred node affinity, taints and
//! tolerations, and (in `pod_rules.rs`) rules relative to other pods. Field names follow
//! the Kubernetes API so scenario files read like pod specs.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::pod_rules::{HostPort, PodRules};
use super::volumes::VolumeRules;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TaintEffect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Taint {
    pub key: String,
    #[serde(default)]
    pub value: String,
    pub effect: TaintEffect,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TolerationOperator {
    #[default]
    Equal,
    Exists,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Toleration {
    /// Empty key with `Exists` tolerates every taint.
    #[serde(default)]
    pub key: String,
    #[serde(default)]
    pub operator: TolerationOperator,
    #[serde(default)]
    pub value: String,
    /// None tolerates every effect.
    #[serde(default)]
    pub effect: Option<TaintEffect>,
}

impl Toleration {
    pub fn tolerates(&self, taint: &Taint) -> bool {
        if self.effect.is_some_and(|e| e != taint.effect) {
            return false;
        }
        if !self.key.is_empty() && self.key != taint.key {
            return false;
        }
        match self.operator {
            TolerationOperator::Exists => true,
            TolerationOperator::Equal => self.value == taint.value,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SelectorOperator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
    Gt,
    Lt,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeSelectorRequirement {
    pub key: String,
    pub operator: SelectorOperator,
    #[serde(default)]
    pub values: Vec<String>,
}

impl NodeSelectorRequirement {
    fn matches(&self, value: Option<&str>) -> bool {
        let number = |s: &str| s.parse::<i64>().ok();
        match self.operator {
            SelectorOperator::In => value.is_some_and(|v| self.values.iter().any(|x| x == v)),
            SelectorOperator::NotIn => !value.is_some_and(|v| self.values.iter().any(|x| x == v)),
            SelectorOperator::Exists => value.is_some(),
            SelectorOperator::DoesNotExist => value.is_none(),
            SelectorOperator::Gt | SelectorOperator::Lt => {
                let (Some(have), Some(bound)) = (
                    value.and_then(number),
                    self.values.first().and_then(|v| number(v)),
                ) else {
                    return false;
                };
                if self.operator == SelectorOperator::Gt {
                    have > bound
                } else {
                    have < bound
                }
            }
        }
    }
}

/// One term of `requiredDuringSchedulingIgnoredDuringExecution`: all requirements must hold.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeSelectorTerm {
    #[serde(default)]
    pub match_expressions: Vec<NodeSelectorRequirement>,
    /// Only `metadata.name` is a valid field, as in Kubernetes.
    #[serde(default)]
    pub match_fields: Vec<NodeSelectorRequirement>,
}

impl NodeSelectorTerm {
    pub fn matches(&self, node_name: &str, labels: &BTreeMap<String, String>) -> bool {
        // An empty term matches nothing (Kubernetes semantics).
        if self.match_expressions.is_empty() && self.match_fields.is_empty() {
            return false;
        }
        self.match_expressions
            .iter()
            .all(|r| r.matches(labels.get(&r.key).map(String::as_str)))
            && self
                .match_fields
                .iter()
                .all(|r| r.matches((r.key == "metadata.name").then_some(node_name)))
    }
}

/// Everything about a pod that decides which nodes it may run on. Tasks of one template
/// share one `Placement` (behind an `Arc`), and predicate results are cached by it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Placement {
    #[serde(default)]
    pub node_selector: BTreeMap<String, String>,
    /// Required node affinity: the node must match at least one term (if any are given).
    #[serde(default)]
    pub node_affinity: Vec<NodeSelectorTerm>,
    #[serde(default)]
    pub tolerations: Vec<Toleration>,
    /// Preferred node affinity: scored, never filtered.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub preferred_node_affinity: Vec<PreferredSchedulingTerm>,
    /// Inter-pod affinity, anti-affinity and topology spread, if the pod has any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_rules: Option<Box<PodRules>>,
    /// Ports the pod takes on its node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub host_ports: Vec<HostPort>,
    /// What the pod's PersistentVolumeClaims ask of its node, if it has any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volumes: Option<Box<VolumeRules>>,
}

/// One `preferredDuringSchedulingIgnoredDuringExecution` entry of node affinity.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PreferredSchedulingTerm {
    /// 1..=100.
    pub weight: i32,
    pub preference: NodeSelectorTerm,
}

/// Why a node's labels or taints exclude a pod.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum PlacementMismatch {
    NodeSelector,
    NodeAffinity,
    Taint(Taint),
}

impl std::fmt::Display for PlacementMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NodeSelector => write!(f, "node(s) didn't match node selector"),
            Self::NodeAffinity => write!(f, "node(s) didn't match required node affinity"),
            Self::Taint(t) => write!(
                f,
                "node(s) had untolerated taint {{{}: {}}}",
                t.key,
                if t.value.is_empty() { "" } else { &t.value }
            ),
        }
    }
}

impl Placement {
    pub fn check(
        &self,
        node_name: &str,
        labels: &BTreeMap<String, String>,
        taints: &[Taint],
    ) -> Result<(), PlacementMismatch> {
        if !self
            .node_selector
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
        {
            return Err(PlacementMismatch::NodeSelector);
        }
        if !self.node_affinity.is_empty()
            && !self
                .node_affinity
                .iter()
                .any(|term| term.matches(node_name, labels))
        {
            return Err(PlacementMismatch::NodeAffinity);
        }
        // PreferNoSchedule is a preference, not a filter.
        if let Some(t) = taints.iter().find(|t| {
            t.effect != TaintEffect::PreferNoSchedule
                && !self.tolerations.iter().any(|tol| tol.tolerates(t))
        }) {
            return Err(PlacementMismatch::Taint(t.clone()));
        }
        Ok(())
    }

    /// Hash of the parts static predicates read — what `check` reads (node selector,
    /// required node affinity, tolerations) and the volume rules (where a pod's volumes can
    /// be reached): the key static predicates are cached by, so it must cover everything
    /// `predicates::static_fit` reads of a placement. Preferences, inter-pod rules and host
    /// ports are left out: they are scored or checked against other pods.
    pub fn static_key(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        // DefaultHasher::new() uses fixed keys, so the key is the same in every run.
        let mut h = std::hash::DefaultHasher::new();
        (
            &self.node_selector,
            &self.node_affinity,
            &self.tolerations,
            &self.volumes,
        )
            .hash(&mut h);
        h.finish()
    }

    /// Sum of the weights of the preferred node affinity terms the node matches.
    pub fn preferred_node_weight(&self, node_name: &str, labels: &BTreeMap<String, String>) -> i64 {
        self.preferred_node_affinity
            .iter()
            .filter(|p| p.preference.matches(node_name, labels))
            .map(|p| i64::from(p.weight))
            .sum()
    }

    /// The pod's inter-pod and spread rules, if it has any.
    pub fn rules(&self) -> Option<&PodRules> {
        self.pod_rules.as_deref().filter(|r| !r.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::labels;

    #[test]
    fn node_selector_and_affinity() {
        let p = Placement {
            node_selector: labels(&[("zone", "a")]),
            node_affinity: vec![NodeSelectorTerm {
                match_expressions: vec![NodeSelectorRequirement {
                    key: "gpus".into(),
                    operator: SelectorOperator::Gt,
                    values: vec!["2".into()],
                }],
                match_fields: vec![],
            }],
            ..Default::default()
        };
        assert_eq!(
            p.check("n", &labels(&[("zone", "a"), ("gpus", "4")]), &[]),
            Ok(())
        );
        assert_eq!(
            p.check("n", &labels(&[("zone", "b"), ("gpus", "4")]), &[]),
            Err(PlacementMismatch::NodeSelector)
        );
        assert_eq!(
            p.check("n", &labels(&[("zone", "a"), ("gpus", "2")]), &[]),
            Err(PlacementMismatch::NodeAffinity)
        );
        let by_name = Placement {
            node_affinity: vec![NodeSelectorTerm {
                match_expressions: vec![],
                match_fields: vec![NodeSelectorRequirement {
                    key: "metadata.name".into(),
                    operator: SelectorOperator::In,
                    values: vec!["n1".into()],
                }],
            }],
            ..Default::default()
        };
        assert!(by_name.check("n1", &labels(&[]), &[]).is_ok());
        assert!(by_name.check("n2", &labels(&[]), &[]).is_err());
    }

    #[test]
    fn taints_and_tolerations() {
        let gpu_taint = Taint {
            key: "nvidia.com/gpu".into(),
            value: "present".into(),
            effect: TaintEffect::NoSchedule,
        };
        let soft = Taint {
            key: "soft".into(),
            value: String::new(),
            effect: TaintEffect::PreferNoSchedule,
        };
        let none = Placement::default();
        assert!(matches!(
            none.check("n", &labels(&[]), std::slice::from_ref(&gpu_taint)),
            Err(PlacementMismatch::Taint(_))
        ));
        assert!(
            none.check("n", &labels(&[]), &[soft]).is_ok(),
            "PreferNoSchedule only prefers"
        );
        let exists = Placement {
            tolerations: vec![Toleration {
                key: "nvidia.com/gpu".into(),
                operator: TolerationOperator::Exists,
                ..Default::default()
            }],
            ..Default::default()
        };
        assert!(exists
            .check("n", &labels(&[]), std::slice::from_ref(&gpu_taint))
            .is_ok());
        let wrong_value = Placement {
            tolerations: vec![Toleration {
                key: "nvidia.com/gpu".into(),
                value: "absent".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        assert!(wrong_value
            .check("n", &labels(&[]), std::slice::from_ref(&gpu_taint))
            .is_err());
        let wildcard = Placement {
            tolerations: vec![Toleration {
                operator: TolerationOperator::Exists,
                ..Default::default()
            }],
            ..Default::default()
        };
        assert!(wildcard.check("n", &labels(&[]), &[gpu_taint]).is_ok());
    }
}
