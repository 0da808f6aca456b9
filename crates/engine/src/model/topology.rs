//! Network topology: nested domains of nodes (an NVLink clique inside a rack inside a zone),
//! built either from node label keys (Kueue's Topology object style) or from Volcano's
//! HyperNode objects, and what a gang asks of them (Volcano's PodGroup `networkTopology`,
//! Kueue's TAS pod annotations). One engine model for both sources.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::{NodeId, NodeInfo};

/// How strictly a gang must stay inside one domain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TopologyMode {
    /// The whole gang inside one domain at or below the bound, or it waits.
    Hard,
    /// The fewest, narrowest domains the cluster allows.
    Soft,
}

/// Which level bounds a gang's domain.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum TopologyBound {
    /// Volcano's `highestTierAllowed`: a HyperNode tier (1 is the narrowest).
    Tier(u32),
    /// Volcano's `highestTierName`: the tier whose HyperNodes carry this `tierName`.
    TierName(String),
    /// Kueue's TAS annotations: a node label key whose values are the domains.
    LabelKey(String),
    /// No bound given (soft only): as narrow as possible.
    Unbounded,
}

/// A gang's topology request.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TopologyRequest {
    pub mode: TopologyMode,
    pub bound: TopologyBound,
    /// Where the request comes from, for messages (`spec.networkTopology`,
    /// `kueue.x-k8s.io/podset-required-topology`).
    pub source: String,
    /// Why the request is malformed, naming the object and field. A malformed hard request
    /// makes the gang wait with this message; a malformed soft one is ignored (and said).
    pub problem: Option<String>,
}

/// Kueue's TAS pod annotations: the node label key whose domain the pod set must (or
/// should) fit in.
pub const KUEUE_REQUIRED_TOPOLOGY: &str = "kueue.x-k8s.io/podset-required-topology";
pub const KUEUE_PREFERRED_TOPOLOGY: &str = "kueue.x-k8s.io/podset-preferred-topology";

impl TopologyRequest {
    /// Volcano's PodGroup `spec.networkTopology` (`mode` defaults to hard; a hard request
    /// without `highestTierAllowed` means the narrowest tier). `object` names the PodGroup
    /// for messages.
    pub fn from_volcano(
        mode: Option<&str>,
        highest_tier_allowed: Option<i64>,
        object: &str,
    ) -> TopologyRequest {
        Self::from_volcano_field(mode, highest_tier_allowed, object, "spec.networkTopology")
    }

    /// As `from_volcano`, for a `networkTopology` found at `field` (a subgroup policy's:
    /// `spec.subGroupPolicy[0].networkTopology`).
    pub fn from_volcano_field(
        mode: Option<&str>,
        highest_tier_allowed: Option<i64>,
        object: &str,
        field: &str,
    ) -> TopologyRequest {
        let source = field.to_string();
        let mut problem = None;
        let mode = match mode.unwrap_or("hard") {
            "hard" | "" => TopologyMode::Hard,
            "soft" => TopologyMode::Soft,
            other => {
                problem = Some(format!(
                    "PodGroup {object}: {field}.mode {other:?} is not hard or soft; treated as \
                     soft"
                ));
                TopologyMode::Soft
            }
        };
        let bound = match highest_tier_allowed {
            Some(t) if t >= 1 && t <= i64::from(u32::MAX) => TopologyBound::Tier(t as u32),
            Some(t) => {
                problem = Some(format!(
                    "PodGroup {object}: {field}.highestTierAllowed must be at least 1, got {t}"
                ));
                TopologyBound::Unbounded
            }
            None if mode == TopologyMode::Hard => TopologyBound::Tier(1),
            None => TopologyBound::Unbounded,
        };
        TopologyRequest {
            mode,
            bound,
            source,
            problem,
        }
    }

    /// Kueue's TAS annotations on a pod (`object` names it): required wins over preferred.
    pub fn from_kueue(
        annotations: &BTreeMap<String, String>,
        object: &str,
    ) -> Option<TopologyRequest> {
        let (key, mode) = [
            (KUEUE_REQUIRED_TOPOLOGY, TopologyMode::Hard),
            (KUEUE_PREFERRED_TOPOLOGY, TopologyMode::Soft),
        ]
        .into_iter()
        .find(|(k, _)| annotations.contains_key(*k))?;
        let value = annotations[key].trim();
        let problem = label_key_problem(value).map(|why| {
            format!("pod {object}: annotation {key} {value:?} is not a node label key ({why})")
        });
        Some(TopologyRequest {
            mode,
            bound: if problem.is_none() {
                TopologyBound::LabelKey(value.to_string())
            } else {
                TopologyBound::Unbounded
            },
            source: format!("annotation {key}"),
            problem,
        })
    }

    /// The bound in words: "tier 2", "topology.kubernetes.io/zone".
    pub fn describe_bound(&self) -> String {
        match &self.bound {
            TopologyBound::Tier(t) => format!("tier {t}"),
            TopologyBound::TierName(name) => format!("tier {name:?}"),
            TopologyBound::LabelKey(k) => k.clone(),
            TopologyBound::Unbounded => "any level".to_string(),
        }
    }
}

/// Why `key` is not a valid label key (`[prefix/]name`, name at most 63 characters of
/// alphanumerics, `-`, `_` and `.`, starting and ending alphanumeric; prefix a DNS
/// subdomain), or None.
pub fn label_key_problem(key: &str) -> Option<String> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    let alnum_ends = |s: &str| {
        s.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
            && s.chars().last().is_some_and(|c| c.is_ascii_alphanumeric())
    };
    if name.is_empty() {
        return Some("the name part is empty".into());
    }
    if name.len() > 63 {
        return Some("the name part is longer than 63 characters".into());
    }
    if !alnum_ends(name)
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Some(
            "the name part must be alphanumerics, '-', '_' or '.', starting and ending \
             alphanumeric"
                .into(),
        );
    }
    if let Some(p) = prefix {
        let ok = !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|part| {
                alnum_ends(part)
                    && part
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            });
        if !ok {
            return Some("the prefix must be a DNS subdomain".into());
        }
    }
    None
}

/// Volcano's HyperNode (topology.volcano.sh/v1alpha1): a named group of nodes or of other
/// HyperNodes at one tier.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HyperNodeSpec {
    pub name: String,
    pub tier: u32,
    /// `spec.tierName`: what `highestTierName` refers to.
    pub tier_name: Option<String>,
    pub members: Vec<HyperNodeMember>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HyperNodeMember {
    pub kind: MemberKind,
    pub selector: MemberSelector,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MemberKind {
    Node,
    HyperNode,
    /// A type this scheduler does not know: the member is skipped, and said.
    Unknown(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MemberSelector {
    Exact(String),
    Regex(String),
    Labels(BTreeMap<String, String>),
    /// No selector, or several at once: skipped, and said.
    Invalid(String),
}

/// One level of the topology: every node belongs to at most one of its domains.
#[derive(Clone, Debug, PartialEq)]
pub struct TopologyLevel {
    /// The label key (from labels), or `tier-N` (from HyperNodes).
    pub key: Arc<str>,
    /// The HyperNode tier, when built from HyperNodes.
    pub tier: Option<u32>,
    /// The tier's name (the first `tierName` its HyperNodes give).
    pub tier_name: Option<Arc<str>>,
    /// Per node slot, its domain's index in `domains`.
    pub domain_of: Vec<Option<u32>>,
    pub domains: Vec<TopologyDomain>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct TopologyDomain {
    /// The label value or the HyperNode's name.
    pub name: Arc<str>,
    /// In id order.
    pub nodes: Vec<NodeId>,
}

/// Nested domains, narrowest level first. Empty when nothing describes the topology.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Topology {
    pub levels: Vec<TopologyLevel>,
    /// What was wrong with the objects it was built from, one line each (naming the object
    /// and field); what was wrong is left out and everything else used.
    pub problems: Vec<String>,
}

impl Topology {
    pub fn is_empty(&self) -> bool {
        self.levels.is_empty()
    }

    /// Levels from node label keys, narrowest first: a node without a key's label is in no
    /// domain of that level.
    pub fn from_labels<'a>(
        keys: &[String],
        nodes: impl Iterator<Item = (NodeId, &'a NodeInfo)> + Clone,
        slots: usize,
    ) -> Topology {
        let levels = keys
            .iter()
            .map(|key| {
                let mut level = TopologyLevel {
                    key: Arc::from(key.as_str()),
                    tier: None,
                    tier_name: None,
                    domain_of: vec![None; slots],
                    domains: Vec::new(),
                };
                let mut index: HashMap<&str, u32> = HashMap::new();
                for (id, node) in nodes.clone() {
                    let Some(value) = node.labels.get(key) else {
                        continue;
                    };
                    let d = *index.entry(value.as_str()).or_insert_with(|| {
                        level.domains.push(TopologyDomain {
                            name: Arc::from(value.as_str()),
                            nodes: Vec::new(),
                        });
                        level.domains.len() as u32 - 1
                    });
                    level.domains[d as usize].nodes.push(id);
                    level.domain_of[id.0 as usize] = Some(d);
                }
                level
            })
            .collect();
        Topology {
            levels,
            problems: Vec::new(),
        }
    }

    /// Levels from HyperNodes, one per tier, narrowest (lowest tier) first. A HyperNode's
    /// nodes are its Node members and the nodes of its HyperNode members, recursively.
    /// Problems (unknown member types, bad regexes, cycles, unknown members, a node in two
    /// HyperNodes of one tier) are reported and the offending part left out.
    pub fn from_hypernodes<'a>(
        hypernodes: &[HyperNodeSpec],
        nodes: impl Iterator<Item = (NodeId, &'a NodeInfo)> + Clone,
        slots: usize,
    ) -> Topology {
        let mut problems = Vec::new();
        let by_name: BTreeMap<&str, &HyperNodeSpec> =
            hypernodes.iter().map(|h| (h.name.as_str(), h)).collect();
        let mut resolved: HashMap<String, Option<Vec<NodeId>>> = HashMap::new();
        for h in hypernodes {
            let mut path = Vec::new();
            resolve(h, &by_name, &nodes, &mut resolved, &mut path, &mut problems);
        }
        let mut tiers: BTreeMap<u32, Vec<&HyperNodeSpec>> = BTreeMap::new();
        for h in hypernodes {
            if h.tier == 0 {
                problems.push(format!(
                    "HyperNode {}: spec.tier must be at least 1, got 0",
                    h.name
                ));
                continue;
            }
            tiers.entry(h.tier).or_default().push(h);
        }
        let mut levels = Vec::new();
        for (tier, members) in tiers {
            let mut level = TopologyLevel {
                key: Arc::from(format!("tier-{tier}").as_str()),
                tier: Some(tier),
                tier_name: members
                    .iter()
                    .find_map(|h| h.tier_name.as_deref().filter(|n| !n.is_empty()))
                    .map(Arc::from),
                domain_of: vec![None; slots],
                domains: Vec::new(),
            };
            for h in members {
                let Some(Some(ids)) = resolved.get(&h.name) else {
                    continue;
                };
                let d = level.domains.len() as u32;
                let mut kept = Vec::with_capacity(ids.len());
                for &id in ids {
                    let slot = &mut level.domain_of[id.0 as usize];
                    match slot {
                        Some(other) => problems.push(format!(
                            "HyperNode {}: node {} is already in HyperNode {} of tier {tier}; \
                             kept there",
                            h.name, id.0, level.domains[*other as usize].name
                        )),
                        None => {
                            *slot = Some(d);
                            kept.push(id);
                        }
                    }
                }
                level.domains.push(TopologyDomain {
                    name: Arc::from(h.name.as_str()),
                    nodes: kept,
                });
            }
            levels.push(level);
        }
        // Name nodes in problems by name, not slot.
        let names: HashMap<u32, &str> = nodes.map(|(id, n)| (id.0, &*n.name)).collect();
        for p in &mut problems {
            if let Some(rest) = p.split(": node ").nth(1) {
                if let Some(slot) = rest.split(' ').next().and_then(|s| s.parse::<u32>().ok()) {
                    if let Some(name) = names.get(&slot) {
                        *p = p.replacen(&format!("node {slot} "), &format!("node {name} "), 1);
                    }
                }
            }
        }
        Topology { levels, problems }
    }

    /// The level with this label key or tier.
    pub fn level_of(&self, bound: &TopologyBound) -> Option<usize> {
        match bound {
            TopologyBound::Tier(t) => self.levels.iter().position(|l| l.tier == Some(*t)),
            TopologyBound::TierName(n) => self
                .levels
                .iter()
                .position(|l| l.tier_name.as_deref() == Some(n.as_str())),
            TopologyBound::LabelKey(k) => self.levels.iter().position(|l| &*l.key == k),
            TopologyBound::Unbounded => None,
        }
    }

    /// The highest level index whose tier is at most `tier` (HyperNode tiers need not be
    /// contiguous).
    pub fn highest_level_within_tier(&self, tier: u32) -> Option<usize> {
        self.levels
            .iter()
            .rposition(|l| l.tier.is_some_and(|t| t <= tier))
    }
}

/// The nodes of `h` (None while it is being resolved or if it is part of a cycle).
fn resolve<'a>(
    h: &HyperNodeSpec,
    by_name: &BTreeMap<&str, &HyperNodeSpec>,
    nodes: &(impl Iterator<Item = (NodeId, &'a NodeInfo)> + Clone),
    resolved: &mut HashMap<String, Option<Vec<NodeId>>>,
    path: &mut Vec<String>,
    problems: &mut Vec<String>,
) -> Option<Vec<NodeId>> {
    if let Some(done) = resolved.get(&h.name) {
        return done.clone();
    }
    if path.contains(&h.name) {
        let mut cycle = path.clone();
        cycle.push(h.name.clone());
        problems.push(format!(
            "HyperNode {}: spec.members form a cycle ({}); left out",
            h.name,
            cycle.join(" -> ")
        ));
        for name in &cycle {
            resolved.insert(name.clone(), None);
        }
        return None;
    }
    path.push(h.name.clone());
    let mut ids: Vec<NodeId> = Vec::new();
    for (i, m) in h.members.iter().enumerate() {
        let field = format!("HyperNode {}: spec.members[{i}]", h.name);
        let matcher = match &m.selector {
            MemberSelector::Invalid(why) => {
                problems.push(format!("{field}.selector: {why}; member skipped"));
                continue;
            }
            MemberSelector::Exact(name) => Matcher::Exact(name),
            MemberSelector::Labels(labels) => Matcher::Labels(labels),
            // Unanchored, as Volcano's Go regexp.MatchString: anchor the pattern to match
            // whole names.
            MemberSelector::Regex(pattern) => match regex::Regex::new(pattern) {
                Ok(re) => Matcher::Regex(re),
                Err(e) => {
                    problems.push(format!(
                        "{field}.selector.regexMatch.pattern {pattern:?} is not a valid \
                         regular expression ({}); member skipped",
                        e.to_string().lines().last().unwrap_or_default().trim()
                    ));
                    continue;
                }
            },
        };
        match &m.kind {
            MemberKind::Unknown(kind) => problems.push(format!(
                "{field}.type {kind:?} is not Node or HyperNode; member skipped"
            )),
            // A node member that matches nothing is normal while a cluster scales.
            MemberKind::Node => {
                for (id, node) in nodes.clone() {
                    if matcher.matches(&node.name, &node.labels) {
                        ids.push(id);
                    }
                }
            }
            MemberKind::HyperNode => {
                let children: Vec<&HyperNodeSpec> = by_name
                    .values()
                    .copied()
                    .filter(|c| matcher.matches(&c.name, &BTreeMap::new()))
                    .collect();
                if children.is_empty() {
                    if let Matcher::Exact(name) = &matcher {
                        problems.push(format!(
                            "{field}: HyperNode {name:?} does not exist; member skipped"
                        ));
                    }
                }
                for child in children {
                    if child.tier >= h.tier {
                        problems.push(format!(
                            "{field}: HyperNode {} has tier {}, not below {}; member skipped",
                            child.name, child.tier, h.tier
                        ));
                        continue;
                    }
                    // Tiers strictly fall along members, so a cycle cannot get here;
                    // `resolve` still refuses one rather than recurse forever.
                    if let Some(child_ids) =
                        resolve(child, by_name, nodes, resolved, path, problems)
                    {
                        ids.extend(child_ids);
                    }
                }
            }
        }
    }
    path.pop();
    if resolved.contains_key(&h.name) {
        // Part of a cycle found below.
        return None;
    }
    ids.sort_unstable();
    ids.dedup();
    resolved.insert(h.name.clone(), Some(ids.clone()));
    Some(ids)
}

enum Matcher<'a> {
    Exact(&'a str),
    Regex(regex::Regex),
    Labels(&'a BTreeMap<String, String>),
}

impl Matcher<'_> {
    fn matches(&self, name: &str, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Matcher::Exact(n) => *n == name,
            Matcher::Regex(re) => re.is_match(name),
            Matcher::Labels(want) => want.iter().all(|(k, v)| labels.get(k) == Some(v)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{NodeSpec, Resource};

    fn nodes(names: &[(&str, &[(&str, &str)])]) -> Vec<NodeInfo> {
        names
            .iter()
            .map(|(n, labels)| {
                NodeInfo::new(NodeSpec {
                    name: n.to_string(),
                    allocatable: Resource::new(),
                    labels: labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                    taints: vec![],
                    unschedulable: false,
                    ready: true,
                })
            })
            .collect()
    }

    fn iter(ns: &[NodeInfo]) -> impl Iterator<Item = (NodeId, &NodeInfo)> + Clone {
        ns.iter().enumerate().map(|(i, n)| (NodeId(i as u32), n))
    }

    fn member(kind: MemberKind, selector: MemberSelector) -> HyperNodeMember {
        HyperNodeMember { kind, selector }
    }

    fn hn(name: &str, tier: u32, members: Vec<HyperNodeMember>) -> HyperNodeSpec {
        HyperNodeSpec {
            name: name.into(),
            tier,
            tier_name: None,
            members,
        }
    }

    #[test]
    fn requests_from_volcano_and_kueue_name_what_is_wrong() {
        let hard = TopologyRequest::from_volcano(None, Some(2), "ns/pg");
        assert_eq!(
            (hard.mode, &hard.bound, &hard.problem),
            (TopologyMode::Hard, &TopologyBound::Tier(2), &None)
        );
        assert_eq!(
            TopologyRequest::from_volcano(Some("hard"), None, "ns/pg").bound,
            TopologyBound::Tier(1)
        );
        let soft = TopologyRequest::from_volcano(Some("soft"), None, "ns/pg");
        assert_eq!(soft.bound, TopologyBound::Unbounded);
        let odd = TopologyRequest::from_volcano(Some("strict"), Some(0), "ns/pg");
        assert_eq!(
            odd.problem.as_deref(),
            Some(
                "PodGroup ns/pg: spec.networkTopology.highestTierAllowed must be at least 1, got 0"
            )
        );
        let ann = |k: &str, v: &str| BTreeMap::from([(k.to_string(), v.to_string())]);
        let req = TopologyRequest::from_kueue(
            &ann(KUEUE_REQUIRED_TOPOLOGY, "cloud.example.com/rack"),
            "ns/p",
        )
        .unwrap();
        assert_eq!(req.mode, TopologyMode::Hard);
        assert_eq!(
            req.bound,
            TopologyBound::LabelKey("cloud.example.com/rack".into())
        );
        let bad =
            TopologyRequest::from_kueue(&ann(KUEUE_PREFERRED_TOPOLOGY, "a b"), "ns/p").unwrap();
        assert_eq!(bad.mode, TopologyMode::Soft);
        assert!(bad
            .problem
            .unwrap()
            .starts_with("pod ns/p: annotation kueue.x-k8s.io/podset-preferred-topology \"a b\""));
        assert!(TopologyRequest::from_kueue(&BTreeMap::new(), "x").is_none());
        assert!(label_key_problem("topology.kubernetes.io/zone").is_none());
        assert!(label_key_problem("Bad_Prefix/zone").is_some());
    }

    #[test]
    fn label_levels_group_nodes_by_value_narrowest_first() {
        let ns = nodes(&[
            ("a", &[("rack", "r1"), ("zone", "z1")]),
            ("b", &[("rack", "r2"), ("zone", "z1")]),
            ("c", &[("zone", "z2")]),
        ]);
        let t = Topology::from_labels(&["rack".into(), "zone".into()], iter(&ns), 3);
        assert_eq!(t.levels.len(), 2);
        assert_eq!(t.levels[0].domains.len(), 2);
        assert_eq!(t.levels[0].domain_of, vec![Some(0), Some(1), None]);
        assert_eq!(t.levels[1].domains[0].nodes, vec![NodeId(0), NodeId(1)]);
        assert_eq!(t.level_of(&TopologyBound::LabelKey("zone".into())), Some(1));
    }

    #[test]
    fn hypernodes_nest_and_select_by_name_regex_and_labels() {
        let ns = nodes(&[
            ("gpu-0", &[]),
            ("gpu-1", &[]),
            ("gpu-2", &[("rack", "b")]),
            ("cpu-0", &[]),
        ]);
        let hs = vec![
            hn(
                "s0",
                1,
                vec![member(
                    MemberKind::Node,
                    MemberSelector::Regex("gpu-[01]".into()),
                )],
            ),
            hn(
                "s1",
                1,
                vec![member(
                    MemberKind::Node,
                    MemberSelector::Labels([("rack".to_string(), "b".to_string())].into()),
                )],
            ),
            hn(
                "top",
                2,
                vec![
                    member(MemberKind::HyperNode, MemberSelector::Exact("s0".into())),
                    member(MemberKind::HyperNode, MemberSelector::Exact("s1".into())),
                ],
            ),
        ];
        let t = Topology::from_hypernodes(&hs, iter(&ns), 4);
        assert!(t.problems.is_empty(), "{:?}", t.problems);
        assert_eq!(t.levels.len(), 2);
        assert_eq!(t.levels[0].tier, Some(1));
        assert_eq!(t.levels[0].domain_of, vec![Some(0), Some(0), Some(1), None]);
        assert_eq!(
            t.levels[1].domains[0].nodes,
            vec![NodeId(0), NodeId(1), NodeId(2)]
        );
        assert_eq!(t.level_of(&TopologyBound::Tier(2)), Some(1));
        assert_eq!(t.highest_level_within_tier(5), Some(1));
    }

    #[test]
    fn malformed_hypernodes_are_reported_and_left_out() {
        let ns = nodes(&[("n0", &[]), ("n1", &[])]);
        let hs = vec![
            hn(
                "bad-regex",
                1,
                vec![
                    member(MemberKind::Node, MemberSelector::Regex("n[".into())),
                    member(MemberKind::Node, MemberSelector::Exact("n0".into())),
                ],
            ),
            hn(
                "odd-type",
                1,
                vec![member(
                    MemberKind::Unknown("Switch".into()),
                    MemberSelector::Exact("n1".into()),
                )],
            ),
            hn(
                "loop-a",
                3,
                vec![member(
                    MemberKind::HyperNode,
                    MemberSelector::Exact("loop-b".into()),
                )],
            ),
            hn(
                "loop-b",
                2,
                vec![member(
                    MemberKind::HyperNode,
                    MemberSelector::Exact("loop-a".into()),
                )],
            ),
            hn(
                "self",
                2,
                vec![member(
                    MemberKind::HyperNode,
                    MemberSelector::Exact("self".into()),
                )],
            ),
        ];
        let t = Topology::from_hypernodes(&hs, iter(&ns), 2);
        let all = t.problems.join("\n");
        assert!(all.contains("HyperNode bad-regex: spec.members[0].selector.regexMatch.pattern"));
        assert!(all.contains("HyperNode odd-type: spec.members[0].type \"Switch\""));
        assert!(
            all.contains(
                "HyperNode loop-b: spec.members[0]: HyperNode loop-a has tier 3, not below 2"
            ),
            "{all}"
        );
        assert!(all.contains("HyperNode self"), "{all}");
        // What was sound is kept: bad-regex still holds n0.
        assert_eq!(t.levels[0].domains[0].nodes, vec![NodeId(0)]);
    }

    #[test]
    fn a_node_in_two_hypernodes_of_one_tier_stays_in_the_first() {
        let ns = nodes(&[("n0", &[])]);
        let one = |name: &str| {
            hn(
                name,
                1,
                vec![member(MemberKind::Node, MemberSelector::Exact("n0".into()))],
            )
        };
        let t = Topology::from_hypernodes(&[one("a"), one("b")], iter(&ns), 1);
        assert_eq!(t.levels[0].domain_of, vec![Some(0)]);
        assert!(t.problems[0].contains("node n0 is already in HyperNode a"));
    }
}
