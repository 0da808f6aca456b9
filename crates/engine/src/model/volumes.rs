//! What a pod's PersistentVolumeClaims ask of its node, resolved by the driver from the
//! claims, their volumes and their StorageClasses (kube-scheduler's VolumeBinding and
//! VolumeRestrictions in the engine's terms): a claim bound to a volume with required node
//! affinity pins the pod to the nodes that affinity allows; an unbound claim of a
//! WaitForFirstConsumer class is provisioned for the chosen node when the whole gang
//! commits (the node must be one its class's `allowedTopologies` allow); anything else —
//! an unbound claim of an Immediate class, a missing claim, class or volume — keeps the
//! pod off every node with a reason naming it. The rules are part of the pod's
//! `Placement`, so they are checked once per node per session and placement, never parsed
//! again per node.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::placement::NodeSelectorTerm;

/// The annotation kube-scheduler sets on an unbound WaitForFirstConsumer claim to ask its
/// provisioner for a volume reachable from that node.
pub const SELECTED_NODE_ANNOTATION: &str = "volume.kubernetes.io/selected-node";

/// A pod's volume rules. Empty for a pod without PersistentVolumeClaims.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VolumeRules {
    /// Claims bound to a volume with required node affinity: the node must match one term
    /// of each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bound: Vec<ClaimTopology>,
    /// Unbound claims of a WaitForFirstConsumer class, to be provisioned for the chosen
    /// node: the node must match one term of the class's allowedTopologies (none: any).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub provision: Vec<ClaimTopology>,
    /// Why no node can take the pod until something changes (an unbound Immediate claim, a
    /// missing claim, class or volume, a malformed volume affinity), naming it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked: Option<String>,
}

/// One claim (`namespace/name`) and the nodes its volume is, or may be, reachable from.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClaimTopology {
    pub claim: String,
    /// One must match; none given: every node.
    #[serde(default)]
    pub terms: Vec<NodeSelectorTerm>,
}

impl ClaimTopology {
    fn allows(&self, node_name: &str, labels: &BTreeMap<String, String>) -> bool {
        self.terms.is_empty() || self.terms.iter().any(|t| t.matches(node_name, labels))
    }
}

/// Why a pod's volumes keep it off a node, in kube-scheduler's words.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum VolumeMismatch {
    /// A bound volume's node affinity excludes the node.
    NodeConflict,
    /// A claim to provision cannot get a volume on the node (its class's topology).
    BindConflict,
    /// No node can take the pod (see `VolumeRules::blocked`).
    Blocked(String),
}

impl std::fmt::Display for VolumeMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NodeConflict => write!(f, "node(s) had volume node affinity conflict"),
            Self::BindConflict => write!(
                f,
                "node(s) didn't find available persistent volumes to bind"
            ),
            Self::Blocked(why) => write!(f, "{why}"),
        }
    }
}

impl VolumeRules {
    pub fn is_empty(&self) -> bool {
        self.bound.is_empty() && self.provision.is_empty() && self.blocked.is_none()
    }

    /// Whether the pod's volumes can be reached from (or provisioned for) the node.
    pub fn check(
        &self,
        node_name: &str,
        labels: &BTreeMap<String, String>,
    ) -> Result<(), VolumeMismatch> {
        if let Some(why) = &self.blocked {
            return Err(VolumeMismatch::Blocked(why.clone()));
        }
        if !self.bound.iter().all(|c| c.allows(node_name, labels)) {
            return Err(VolumeMismatch::NodeConflict);
        }
        if !self.provision.iter().all(|c| c.allows(node_name, labels)) {
            return Err(VolumeMismatch::BindConflict);
        }
        Ok(())
    }

    /// The claims (`namespace/name`) to provision for the pod's node when its gang commits.
    pub fn to_provision(&self) -> impl Iterator<Item = &str> {
        self.provision.iter().map(|c| c.claim.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::placement::{NodeSelectorRequirement, SelectorOperator};
    use crate::testkit::labels;

    fn zone(z: &str) -> NodeSelectorTerm {
        NodeSelectorTerm {
            match_expressions: vec![NodeSelectorRequirement {
                key: "zone".into(),
                operator: SelectorOperator::In,
                values: vec![z.into()],
            }],
            match_fields: vec![],
        }
    }

    fn claim(name: &str, terms: Vec<NodeSelectorTerm>) -> ClaimTopology {
        ClaimTopology {
            claim: name.into(),
            terms,
        }
    }

    #[test]
    fn a_bound_volume_pins_the_pod_to_its_affinity_and_every_volume_must_agree() {
        let rules = VolumeRules {
            bound: vec![
                claim("ns/a", vec![zone("a"), zone("b")]),
                claim("ns/b", vec![zone("b")]),
            ],
            ..Default::default()
        };
        assert_eq!(rules.check("n", &labels(&[("zone", "b")])), Ok(()));
        assert_eq!(
            rules.check("n", &labels(&[("zone", "a")])),
            Err(VolumeMismatch::NodeConflict)
        );
        assert_eq!(
            VolumeMismatch::NodeConflict.to_string(),
            "node(s) had volume node affinity conflict"
        );
        let anywhere = VolumeRules {
            bound: vec![claim("ns/a", vec![])],
            ..Default::default()
        };
        assert_eq!(anywhere.check("n", &labels(&[])), Ok(()));
    }

    #[test]
    fn a_claim_to_provision_goes_where_its_class_allows() {
        let rules = VolumeRules {
            provision: vec![claim("ns/data", vec![zone("a")])],
            ..Default::default()
        };
        assert_eq!(rules.check("n", &labels(&[("zone", "a")])), Ok(()));
        assert_eq!(
            rules.check("n", &labels(&[("zone", "c")])),
            Err(VolumeMismatch::BindConflict)
        );
        assert_eq!(rules.to_provision().collect::<Vec<_>>(), ["ns/data"]);
    }

    #[test]
    fn a_blocked_pod_fits_no_node_and_says_why() {
        let rules = VolumeRules {
            blocked: Some("persistentvolumeclaim \"x\" not found".into()),
            ..Default::default()
        };
        let e = rules.check("n", &labels(&[])).unwrap_err();
        assert_eq!(e.to_string(), "persistentvolumeclaim \"x\" not found");
        assert!(VolumeRules::default().is_empty() && !rules.is_empty());
    }
}
