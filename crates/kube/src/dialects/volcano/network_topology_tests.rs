use super::*;
use crate::model::{TopologyBound, TopologyMode};

fn topology(network_topology: serde_json::Value) -> Option<TopologyRequest> {
    let pg: PodGroup = serde_json::from_value(json!({
        "metadata": {"name": "g", "namespace": "n"},
        "spec": {"minMember": 2, "networkTopology": network_topology}
    }))
    .unwrap();
    pod_group_to_job(&pg, &HashMap::new()).unwrap().topology
}

#[test]
fn network_topology_becomes_the_gangs_request() {
    let hard = topology(json!({"mode": "hard", "highestTierAllowed": 2})).unwrap();
    assert_eq!(
        (hard.mode, hard.bound, hard.problem),
        (TopologyMode::Hard, TopologyBound::Tier(2), None)
    );
    assert_eq!(hard.source, "spec.networkTopology");
    let soft = topology(json!({"mode": "soft"})).unwrap();
    assert_eq!(
        (soft.mode, soft.bound),
        (TopologyMode::Soft, TopologyBound::Unbounded)
    );
    // Upstream's default mode is hard, and a hard request without a tier means tier 1.
    let bare = topology(json!({})).unwrap();
    assert_eq!(
        (bare.mode, bare.bound),
        (TopologyMode::Hard, TopologyBound::Tier(1))
    );
    let pg: PodGroup = serde_json::from_value(json!({
        "metadata": {"name": "g", "namespace": "n"}, "spec": {"minMember": 2}
    }))
    .unwrap();
    assert_eq!(
        pod_group_to_job(&pg, &HashMap::new()).unwrap().topology,
        None
    );
}

#[test]
fn a_malformed_network_topology_names_the_podgroup_and_field() {
    let low = topology(json!({"mode": "hard", "highestTierAllowed": 0})).unwrap();
    assert_eq!(
        low.problem.as_deref(),
        Some("PodGroup n/g: spec.networkTopology.highestTierAllowed must be at least 1, got 0")
    );
    let odd = topology(json!({"mode": "strict", "highestTierAllowed": 1})).unwrap();
    assert!(
        odd.problem
            .as_deref()
            .is_some_and(|p| p.starts_with("PodGroup n/g: spec.networkTopology.mode \"strict\"")),
        "{odd:?}"
    );
    // highestTierName names a tier (resolved against the HyperNodes' tierName by the
    // placement); highestTierAllowed wins when both are set, as in Volcano.
    let named = topology(json!({"mode": "hard", "highestTierName": "spine"})).unwrap();
    assert_eq!(named.problem, None);
    assert_eq!(named.bound, TopologyBound::TierName("spine".into()));
    let both = topology(json!({"highestTierName": "spine", "highestTierAllowed": 2})).unwrap();
    assert_eq!(both.bound, TopologyBound::Tier(2));
}
