//! Volcano's `topology.volcano.sh/v1alpha1` HyperNode (cluster-scoped): a named group of
//! nodes, or of other HyperNodes, at one tier of the network (tier 1: the nodes behind one
//! switch; higher tiers: what connects those). The type follows upstream field for field,
//! keeping what it does not model, as `api` does for PodGroup and Queue; the scheduler only
//! reads HyperNodes. [`hypernode_to_spec`] turns one into the engine's
//! [`model::HyperNodeSpec`]; what the engine then finds wrong across them (a bad regex, an
//! unknown member type, a cycle) comes back as the snapshot's topology problems, which the
//! driver turns into events on the HyperNodes they name.
//!
//! The CRD is more lenient than upstream's, on purpose: upstream refuses a member `type`
//! other than Node or HyperNode (an enum) and a selector with none or several of
//! exactMatch/regexMatch/labelMatch (CEL rules). Here the API server takes such objects and
//! the scheduler reports them, member by member, while using the rest: a HyperNode written
//! for a newer Volcano (a new member type) then degrades to a warning instead of being
//! refused, and the scheduler's handling of bad input is reachable from a real cluster.

use std::borrow::Cow;
use std::collections::BTreeMap;

use ::kube::core::object::{HasSpec, HasStatus};
use ::kube::core::{ClusterResourceScope, Resource};
use ::kube::ResourceExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    Condition, LabelSelectorRequirement, ObjectMeta,
};
use schemars::JsonSchema;
use serde::ser::SerializeStruct;
use serde::{Deserialize, Serialize, Serializer};

use super::api::Extra;
use crate::convert::ConvertError;
use crate::model;

/// API group of HyperNode.
pub const TOPOLOGY_GROUP: &str = "topology.volcano.sh";
/// API version of HyperNode.
pub const TOPOLOGY_VERSION: &str = "v1alpha1";
/// `TOPOLOGY_GROUP/TOPOLOGY_VERSION`.
pub const TOPOLOGY_API_VERSION: &str = "topology.volcano.sh/v1alpha1";

/// HyperNode represents a collection of nodes sharing similar network topology or
/// performance characteristics.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HyperNode {
    #[schemars(skip)]
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Spec defines the desired configuration of the HyperNode.
    // Not required by serde: one object without a spec must not fail a whole watch list.
    #[serde(default)]
    pub spec: HyperNodeSpec,
    /// Status provides the current state of the HyperNode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<HyperNodeStatus>,
}

/// HyperNodeSpec defines the desired state of a HyperNode.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("required" = ["tier"]))]
pub struct HyperNodeSpec {
    /// Tier categorizes the performance level of the HyperNode (1 is the narrowest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<i64>,
    /// TierName is the name of the tier (informational).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier_name: Option<String>,
    /// Members defines a list of node groups or individual nodes included in the HyperNode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub members: Option<Vec<MemberSpec>>,
    /// Fields this version does not model.
    #[serde(flatten)]
    pub extra: Extra,
}

/// MemberSpec represents a specific node or a HyperNode in the HyperNode.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemberSpec {
    /// Type specifies the member type: Node or HyperNode.
    // A plain string, not upstream's enum: see the module comment.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// Selector defines the selection rules for this member: exactly one of exactMatch,
    /// regexMatch and labelMatch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<MemberSelector>,
    /// Fields this version does not model.
    #[serde(flatten)]
    pub extra: Extra,
}

/// MemberSelector defines the selection rules of a member.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemberSelector {
    /// ExactMatch defines the exact match criteria.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exact_match: Option<ExactMatch>,
    /// RegexMatch defines the regex match criteria.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regex_match: Option<RegexMatch>,
    /// LabelMatch defines the labels match criteria (only for members of type Node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_match: Option<LabelMatch>,
    /// Fields this version does not model.
    #[serde(flatten)]
    pub extra: Extra,
}

/// ExactMatch selects one node or HyperNode by name.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExactMatch {
    /// Name specifies the exact name of the node or HyperNode to match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Fields this version does not model.
    #[serde(flatten)]
    pub extra: Extra,
}

/// RegexMatch selects nodes or HyperNodes whose whole name matches a pattern.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RegexMatch {
    /// Pattern defines the regex pattern to match node names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    /// Fields this version does not model.
    #[serde(flatten)]
    pub extra: Extra,
}

/// LabelMatch selects nodes by their labels.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LabelMatch {
    /// matchLabels is a map of {key,value} pairs a node must all carry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_labels: Option<BTreeMap<String, String>>,
    /// matchExpressions is a list of label selector requirements (not supported by
    /// rust-batch: such a member is skipped, and said).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_expressions: Option<Vec<LabelSelectorRequirement>>,
    /// Fields this version does not model.
    #[serde(flatten)]
    pub extra: Extra,
}

/// HyperNodeStatus represents the observed state of a HyperNode.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HyperNodeStatus {
    /// Conditions provide details about the current state of the HyperNode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
    /// NodeCount is the total number of nodes currently in the HyperNode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub node_count: Option<i64>,
    /// Fields this version does not model.
    #[serde(flatten)]
    pub extra: Extra,
}

impl HyperNode {
    /// A new object with this name and spec, no status.
    pub fn new(name: &str, spec: HyperNodeSpec) -> Self {
        HyperNode {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                ..Default::default()
            },
            spec,
            status: None,
        }
    }
}

impl Resource for HyperNode {
    type DynamicType = ();
    type Scope = ClusterResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "HyperNode".into()
    }

    fn group(_: &()) -> Cow<'_, str> {
        TOPOLOGY_GROUP.into()
    }

    fn version(_: &()) -> Cow<'_, str> {
        TOPOLOGY_VERSION.into()
    }

    fn api_version(_: &()) -> Cow<'_, str> {
        TOPOLOGY_API_VERSION.into()
    }

    fn plural(_: &()) -> Cow<'_, str> {
        "hypernodes".into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl HasSpec for HyperNode {
    type Spec = HyperNodeSpec;

    fn spec(&self) -> &HyperNodeSpec {
        &self.spec
    }

    fn spec_mut(&mut self) -> &mut HyperNodeSpec {
        &mut self.spec
    }
}

impl HasStatus for HyperNode {
    type Status = HyperNodeStatus;

    fn status(&self) -> Option<&HyperNodeStatus> {
        self.status.as_ref()
    }

    fn status_mut(&mut self) -> &mut Option<HyperNodeStatus> {
        &mut self.status
    }
}

impl Serialize for HyperNode {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let mut obj = ser.serialize_struct("HyperNode", 4 + usize::from(self.status.is_some()))?;
        obj.serialize_field("apiVersion", TOPOLOGY_API_VERSION)?;
        obj.serialize_field("kind", "HyperNode")?;
        obj.serialize_field("metadata", &self.metadata)?;
        obj.serialize_field("spec", &self.spec)?;
        match &self.status {
            Some(status) => obj.serialize_field("status", status)?,
            None => obj.skip_field("status")?,
        }
        obj.end()
    }
}

/// A HyperNode as the engine's topology input. A tier that is missing or below 1 makes
/// the whole object unusable (an error naming the field); a member that is malformed is
/// kept as [`model::MemberKind::Unknown`] or [`model::MemberSelector::Invalid`] (saying
/// which field is wrong), so the engine skips that member alone and reports it.
pub fn hypernode_to_spec(hn: &HyperNode) -> Result<model::HyperNodeSpec, ConvertError> {
    let name = hn.name_any();
    let err = |field: &str, message: String| ConvertError {
        object: format!("HyperNode {name}"),
        field: field.into(),
        message,
    };
    let tier = match hn.spec.tier {
        None => return Err(err("spec.tier", "is missing".into())),
        Some(t) => u32::try_from(t)
            .ok()
            .filter(|t| *t >= 1)
            .ok_or_else(|| err("spec.tier", format!("must be at least 1, got {t}")))?,
    };
    let members = hn
        .spec
        .members
        .iter()
        .flatten()
        .map(|m| {
            let kind = match m.type_.as_deref().unwrap_or("") {
                "Node" => model::MemberKind::Node,
                "HyperNode" => model::MemberKind::HyperNode,
                other => model::MemberKind::Unknown(other.to_string()),
            };
            let selector = member_selector(m.selector.as_ref(), &kind);
            model::HyperNodeMember { kind, selector }
        })
        .collect();
    Ok(model::HyperNodeSpec {
        name,
        tier,
        tier_name: hn.spec.tier_name.clone(),
        members,
    })
}

/// The one selector a member must have. `Invalid` says what is wrong relative to the
/// member's `selector` field (the engine prefixes `spec.members[i].selector: `).
fn member_selector(
    selector: Option<&MemberSelector>,
    kind: &model::MemberKind,
) -> model::MemberSelector {
    use model::MemberSelector::{Exact, Invalid, Labels, Regex};
    const ONE_OF: &str = "exactly one of exactMatch, regexMatch and labelMatch";
    let Some(s) = selector else {
        return Invalid(format!("missing; {ONE_OF} is needed"));
    };
    let set: Vec<&str> = [
        ("exactMatch", s.exact_match.is_some()),
        ("regexMatch", s.regex_match.is_some()),
        ("labelMatch", s.label_match.is_some()),
    ]
    .into_iter()
    .filter_map(|(field, present)| present.then_some(field))
    .collect();
    match set.as_slice() {
        [] => return Invalid(format!("none of its fields is set; {ONE_OF} is needed")),
        [_] => {}
        several => {
            let how_many = if several.len() == 2 { "both" } else { "all" };
            return Invalid(format!(
                "{} are {how_many} set; {ONE_OF} is allowed",
                several.join(" and ")
            ));
        }
    }
    if let Some(exact) = &s.exact_match {
        return match non_empty(exact.name.as_deref()) {
            Some(name) => Exact(name.to_string()),
            None => Invalid("exactMatch.name is empty".into()),
        };
    }
    if let Some(regex) = &s.regex_match {
        return match non_empty(regex.pattern.as_deref()) {
            Some(pattern) => Regex(pattern.to_string()),
            None => Invalid("regexMatch.pattern is empty".into()),
        };
    }
    let Some(labels) = &s.label_match else {
        unreachable!("exactly one selector field is set")
    };
    if *kind == model::MemberKind::HyperNode {
        return Invalid("labelMatch selects nodes only, not members of type HyperNode".into());
    }
    if labels
        .match_expressions
        .as_ref()
        .is_some_and(|e| !e.is_empty())
    {
        return Invalid(
            "labelMatch.matchExpressions is not supported; use labelMatch.matchLabels".into(),
        );
    }
    match &labels.match_labels {
        Some(m) if !m.is_empty() => Labels(m.clone()),
        // An empty selector would take every node of the cluster into one HyperNode.
        _ => Invalid("labelMatch.matchLabels is empty".into()),
    }
}

fn non_empty(v: Option<&str>) -> Option<&str> {
    v.map(str::trim).filter(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::{MemberKind, MemberSelector as Sel};
    use serde_json::json;

    fn hypernode(spec: serde_json::Value) -> HyperNode {
        serde_json::from_value(json!({
            "apiVersion": TOPOLOGY_API_VERSION, "kind": "HyperNode",
            "metadata": {"name": "rack-a"},
            "spec": spec
        }))
        .unwrap()
    }

    fn members(spec: serde_json::Value) -> Vec<model::HyperNodeMember> {
        hypernode_to_spec(&hypernode(spec)).unwrap().members
    }

    #[test]
    fn an_upstream_hypernode_converts_member_by_member() {
        let spec = hypernode_to_spec(&hypernode(json!({
            "tier": 1,
            "tierName": "leaf",
            "members": [
                {"type": "Node", "selector": {"exactMatch": {"name": "gpu-0"}}},
                {"type": "Node", "selector": {"regexMatch": {"pattern": "gpu-[1-3]"}}},
                {"type": "Node", "selector": {"labelMatch": {"matchLabels": {"rack": "a"}}}},
                {"type": "HyperNode", "selector": {"exactMatch": {"name": "s0"}}},
            ]
        })))
        .unwrap();
        assert_eq!((spec.name.as_str(), spec.tier), ("rack-a", 1));
        let m: Vec<(MemberKind, Sel)> = spec
            .members
            .into_iter()
            .map(|m| (m.kind, m.selector))
            .collect();
        assert_eq!(
            m,
            vec![
                (MemberKind::Node, Sel::Exact("gpu-0".into())),
                (MemberKind::Node, Sel::Regex("gpu-[1-3]".into())),
                (
                    MemberKind::Node,
                    Sel::Labels([("rack".to_string(), "a".to_string())].into())
                ),
                (MemberKind::HyperNode, Sel::Exact("s0".into())),
            ]
        );
    }

    #[test]
    fn a_bad_tier_is_an_error_naming_the_field() {
        let e = hypernode_to_spec(&hypernode(json!({"members": []}))).unwrap_err();
        assert_eq!(e.to_string(), "HyperNode rack-a: spec.tier: is missing");
        for tier in [0, -3, 1_i64 << 40] {
            let e = hypernode_to_spec(&hypernode(json!({ "tier": tier }))).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!("HyperNode rack-a: spec.tier: must be at least 1, got {tier}")
            );
        }
        // Without a spec at all the object still deserializes (a watch list never fails).
        let bare: HyperNode = serde_json::from_value(json!({"metadata": {"name": "x"}})).unwrap();
        assert!(hypernode_to_spec(&bare).is_err());
    }

    #[test]
    fn an_unknown_member_type_is_kept_as_unknown() {
        let m = members(json!({"tier": 1, "members": [
            {"type": "Switch", "selector": {"exactMatch": {"name": "n0"}}},
            {"selector": {"exactMatch": {"name": "n1"}}},
        ]}));
        assert_eq!(m[0].kind, MemberKind::Unknown("Switch".into()));
        assert_eq!(m[0].selector, Sel::Exact("n0".into()));
        assert_eq!(m[1].kind, MemberKind::Unknown(String::new()));
    }

    #[test]
    fn malformed_selectors_are_invalid_naming_the_field() {
        let m = members(json!({"tier": 2, "members": [
            {"type": "Node"},
            {"type": "Node", "selector": {}},
            {"type": "Node", "selector": {"exactMatch": {"name": "a"}, "regexMatch": {"pattern": "b"}}},
            {"type": "Node", "selector": {"exactMatch": {}}},
            {"type": "Node", "selector": {"regexMatch": {"pattern": " "}}},
            {"type": "Node", "selector": {"labelMatch": {"matchExpressions": [
                {"key": "rack", "operator": "In", "values": ["a"]}]}}},
            {"type": "Node", "selector": {"labelMatch": {}}},
            {"type": "HyperNode", "selector": {"labelMatch": {"matchLabels": {"a": "b"}}}},
        ]}));
        let why: Vec<String> = m
            .into_iter()
            .map(|m| match m.selector {
                Sel::Invalid(why) => why,
                other => panic!("{other:?} should be invalid"),
            })
            .collect();
        assert_eq!(
            why,
            [
                "missing; exactly one of exactMatch, regexMatch and labelMatch is needed",
                "none of its fields is set; exactly one of exactMatch, regexMatch and labelMatch is needed",
                "exactMatch and regexMatch are both set; exactly one of exactMatch, regexMatch and labelMatch is allowed",
                "exactMatch.name is empty",
                "regexMatch.pattern is empty",
                "labelMatch.matchExpressions is not supported; use labelMatch.matchLabels",
                "labelMatch.matchLabels is empty",
                "labelMatch selects nodes only, not members of type HyperNode",
            ]
        );
    }

    #[test]
    fn fields_not_modelled_survive_a_round_trip() {
        let hn = hypernode(json!({"tier": 1, "futureKnob": 3, "members": [
            {"type": "Node", "weight": 2, "selector": {"exactMatch": {"name": "a"}}}]}));
        let value = serde_json::to_value(&hn).unwrap();
        assert_eq!(value["apiVersion"], TOPOLOGY_API_VERSION);
        assert_eq!(value["kind"], "HyperNode");
        assert_eq!(value["spec"]["futureKnob"], 3);
        assert_eq!(value["spec"]["members"][0]["weight"], 2);
    }
}
