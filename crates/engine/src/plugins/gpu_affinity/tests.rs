use std::collections::BTreeMap;

use crate::model::{HyperNodeMember, HyperNodeSpec, MemberKind, MemberSelector, NodeSpec};
use crate::testkit::*;

pub(super) const CONF: &str = "actions: \"enqueue, allocate\"
tiers:
- plugins:
  - name: gang
  - name: predicates
  - name: nodeorder
  - name: gpu-affinity
    arguments:
      gpu-affinity.topologyLevels: example.com/rack
";

/// The same without gpu-affinity: least-requested scoring spreads gangs.
const SPREADING: &str = "actions: \"enqueue, allocate\"
tiers:
- plugins:
  - name: gang
  - name: predicates
  - name: nodeorder
";

fn labelled(name: &str, alloc: &[(&str, &str)], labels: &[(&str, &str)]) -> NodeSpec {
    NodeSpec {
        labels: crate::testkit::labels(labels),
        ..node(name, alloc)
    }
}

/// Racks of `per_rack` 4-cpu nodes, labelled example.com/rack=r{i}.
pub(super) fn racks(cache: &mut crate::cache::Cache, racks: usize, per_rack: usize) {
    for r in 0..racks {
        for i in 0..per_rack {
            cache.apply_node(labelled(
                &format!("r{r}-n{i}"),
                &[("cpu", "4"), ("memory", "16Gi")],
                &[("example.com/rack", &format!("r{r}"))],
            ));
        }
    }
}

fn hypernode(name: &str, tier: u32, kind: MemberKind, members: &[&str]) -> HyperNodeSpec {
    HyperNodeSpec {
        name: name.into(),
        tier,
        tier_name: Some(format!("tier{tier}")),
        members: members
            .iter()
            .map(|m| HyperNodeMember {
                kind: kind.clone(),
                selector: MemberSelector::Exact(m.to_string()),
            })
            .collect(),
    }
}

/// Two tier-1 HyperNodes (rack-a: r0-*, rack-b: r1-*) under one tier-2 spine.
pub(super) fn hypernodes(cache: &mut crate::cache::Cache) {
    cache.apply_hypernode(hypernode(
        "rack-a",
        1,
        MemberKind::Node,
        &["r0-n0", "r0-n1"],
    ));
    cache.apply_hypernode(HyperNodeSpec {
        name: "rack-b".into(),
        tier: 1,
        tier_name: Some("tier1".into()),
        members: vec![HyperNodeMember {
            kind: MemberKind::Node,
            selector: MemberSelector::Regex("r1-n[0-9]+".into()),
        }],
    });
    cache.apply_hypernode(hypernode(
        "spine",
        2,
        MemberKind::HyperNode,
        &["rack-a", "rack-b"],
    ));
}

pub(super) fn nodes_of(result: &crate::framework::SessionResult, job: &str) -> Vec<String> {
    let mut nodes = binds_by_job(result).get(job).cloned().unwrap_or_default();
    nodes.sort();
    nodes
}

fn racks_of(nodes: &[String]) -> BTreeMap<String, usize> {
    let mut racks = BTreeMap::new();
    for n in nodes {
        *racks.entry(n[..2].to_string()).or_default() += 1;
    }
    racks
}

#[test]
fn a_hard_network_topology_places_the_whole_gang_inside_one_tier_1_hypernode() {
    let mut cache = cache_with_default_queue();
    racks(&mut cache, 2, 2);
    hypernodes(&mut cache);
    // Least-requested scoring alone spreads these four over all four nodes.
    let job = Gang::new("ring", 4)
        .tasks("worker", 4, &[("cpu", "2")])
        .network_topology("hard", Some(1))
        .apply(&mut cache);
    let result = run_cycle(&cache, Some(CONF));
    let nodes = nodes_of(&result, &job);
    assert_eq!(nodes.len(), 4, "{result:?}");
    assert_eq!(racks_of(&nodes).len(), 1, "one rack: {nodes:?}");
    let spread = run_cycle(&cache, Some(SPREADING));
    assert_eq!(
        racks_of(&nodes_of(&spread, &job)).len(),
        2,
        "without the rule the gang spreads (so this test shows something)"
    );
}

#[test]
fn highest_tier_name_is_the_tier_whose_hypernodes_carry_that_name() {
    let mut cache = cache_with_default_queue();
    racks(&mut cache, 2, 2);
    hypernodes(&mut cache);
    let named = |name: &str, tier_name: &str, mut gang: Gang| {
        let mut request = crate::model::TopologyRequest::from_volcano(Some("hard"), None, name);
        request.bound = crate::model::TopologyBound::TierName(tier_name.into());
        gang.spec.topology = Some(request);
        gang
    };
    let ring = named(
        "ring",
        "tier1",
        Gang::new("ring", 4).tasks("worker", 4, &[("cpu", "2")]),
    )
    .apply(&mut cache);
    let result = run_cycle(&cache, Some(CONF));
    let nodes = nodes_of(&result, &ring);
    assert_eq!(nodes.len(), 4, "{result:?}");
    assert_eq!(racks_of(&nodes).len(), 1, "one rack: {nodes:?}");
    // A name no tier carries: a hard gang waits and says so.
    let mut cache = cache_with_default_queue();
    racks(&mut cache, 2, 2);
    hypernodes(&mut cache);
    let lost = named(
        "lost",
        "leaf",
        Gang::new("lost", 1).tasks("worker", 1, &[("cpu", "1")]),
    )
    .apply(&mut cache);
    let result = run_cycle(&cache, Some(CONF));
    assert!(result.binds.is_empty());
    assert!(condition_message(&result, &lost)
        .is_some_and(|m| m.contains("no HyperNode tier is named \"leaf\"")));
}

#[test]
fn a_hard_gang_larger_than_any_allowed_domain_waits_and_names_the_shortfall() {
    let mut cache = cache_with_default_queue();
    racks(&mut cache, 2, 2);
    hypernodes(&mut cache);
    let job = Gang::new("big", 6)
        .tasks("worker", 6, &[("cpu", "2")])
        .network_topology("hard", Some(1))
        .apply(&mut cache);
    let result = run_cycle(&cache, Some(CONF));
    assert!(result.binds.is_empty(), "{:?}", result.binds);
    assert_eq!(
        condition_message(&result, &job).as_deref(),
        Some(
            "spec.networkTopology hard within tier 1: no allowed domain holds the whole \
                 gang (the best tier-1 domain, rack-a, is short of 4 cpu)"
        )
    );
    // Tier 2 (the spine) holds it.
    let job2 = Gang::new("big2", 6)
        .created(1)
        .tasks("worker", 6, &[("cpu", "2")])
        .network_topology("hard", Some(2));
    let mut cache2 = cache_with_default_queue();
    racks(&mut cache2, 2, 2);
    hypernodes(&mut cache2);
    let job2 = job2.apply(&mut cache2);
    assert_eq!(nodes_of(&run_cycle(&cache2, Some(CONF)), &job2).len(), 6);
}

#[test]
fn a_soft_gang_too_big_for_one_rack_goes_to_the_fewest_racks() {
    let mut cache = cache_with_default_queue();
    racks(&mut cache, 3, 2);
    // 10 cpu: more than a rack (8), less than two.
    let job = Gang::new("wide", 5)
        .tasks("worker", 5, &[("cpu", "2")])
        .apply(&mut cache);
    let result = run_cycle(&cache, Some(CONF));
    let nodes = nodes_of(&result, &job);
    assert_eq!(nodes.len(), 5);
    assert_eq!(racks_of(&nodes).len(), 2, "{nodes:?}");
    let spread = run_cycle(&cache, Some(SPREADING));
    assert_eq!(racks_of(&nodes_of(&spread, &job)).len(), 3);
}

#[test]
fn room_the_gang_cannot_use_does_not_count() {
    // Three racks of pool a, and a roomier rack of pool b that the gang's nodeSelector
    // excludes: the fewest racks are counted among what the gang can use.
    let mut cache = cache_with_default_queue();
    racks(&mut cache, 3, 2);
    for i in 0..4 {
        cache.apply_node(labelled(
            &format!("r9-n{i}"),
            &[("cpu", "8"), ("memory", "16Gi")],
            &[("example.com/rack", "r9"), ("pool", "b")],
        ));
    }
    let mut gang = Gang::new("pooled", 5).tasks("worker", 5, &[("cpu", "2")]);
    for t in &mut gang.tasks {
        let mut p = (*t.placement).clone();
        p.node_selector = BTreeMap::from([("pool".to_string(), "a".to_string())]);
        t.set_placement(p);
    }
    for r in 0..3 {
        for i in 0..2 {
            let name = format!("r{r}-n{i}");
            let mut spec = labelled(
                &name,
                &[("cpu", "4"), ("memory", "16Gi")],
                &[("example.com/rack", &format!("r{r}")), ("pool", "a")],
            );
            spec.name = name;
            cache.apply_node(spec);
        }
    }
    let job = gang.apply(&mut cache);
    let nodes = nodes_of(&run_cycle(&cache, Some(CONF)), &job);
    assert_eq!(nodes.len(), 5);
    assert_eq!(racks_of(&nodes).len(), 2, "{nodes:?}");
}

#[test]
fn a_kueue_required_topology_keeps_the_gang_in_one_domain_of_that_label() {
    let mut cache = cache_with_default_queue();
    racks(&mut cache, 2, 2);
    let conf = CONF.replace("gpu-affinity.topologyLevels: example.com/rack", "{}");
    let conf = conf.replace("    arguments:\n      {}\n", "");
    let job = Gang::new("tas", 2)
        .tasks("worker", 2, &[("cpu", "3")])
        .annotate(
            "kueue.x-k8s.io/podset-required-topology",
            "example.com/rack",
        )
        .apply(&mut cache);
    let result = run_cycle(&cache, Some(&conf));
    let nodes = nodes_of(&result, &job);
    assert_eq!(nodes.len(), 2);
    assert_eq!(racks_of(&nodes).len(), 1, "{nodes:?}");
}

fn gpu_pools(cache: &mut crate::cache::Cache) {
    for (model, prefix) in [("A100", "a"), ("H100", "h")] {
        for i in 0..2 {
            cache.apply_node(labelled(
                &format!("{prefix}{i}"),
                &[("cpu", "16"), ("memory", "64Gi"), ("nvidia.com/gpu", "2")],
                &[("nvidia.com/gpu.product", model)],
            ));
        }
    }
    // One node of each pool is half used: 3 GPUs free per model.
    foreign_pod(cache, "busy-a", "a0", &[("nvidia.com/gpu", "1")]);
    foreign_pod(cache, "busy-h", "h0", &[("nvidia.com/gpu", "1")]);
}

#[test]
fn every_gpu_task_of_a_gang_lands_on_one_gpu_model() {
    let mut cache = cache_with_default_queue();
    gpu_pools(&mut cache);
    let job = Gang::new("train", 3)
        .tasks("worker", 3, &[("nvidia.com/gpu", "1")])
        .apply(&mut cache);
    let result = run_cycle(&cache, Some(CONF));
    let nodes = nodes_of(&result, &job);
    assert_eq!(nodes.len(), 3);
    let models: std::collections::BTreeSet<char> =
        nodes.iter().map(|n| n.chars().next().unwrap()).collect();
    assert_eq!(models.len(), 1, "{nodes:?}");
    // Needing more of one model than any pool has free, it waits rather than mixing.
    let mut cache = cache_with_default_queue();
    gpu_pools(&mut cache);
    let job = Gang::new("mixed", 4)
        .tasks("worker", 4, &[("nvidia.com/gpu", "1")])
        .apply(&mut cache);
    let result = run_cycle(&cache, Some(CONF));
    assert!(result.binds.is_empty(), "{:?}", result.binds);
    let msg = condition_message(&result, &job).unwrap();
    assert!(
        msg.starts_with(
            "GPU model rule (one nvidia.com/gpu.product per gang): no allowed domain holds \
                 the whole gang"
        ),
        "{msg}"
    );
    // Soft: it mixes.
    let soft = CONF.replace(
        "example.com/rack\n",
        "example.com/rack\n      gpu-affinity.gpuModel: soft\n",
    );
    assert_eq!(nodes_of(&run_cycle(&cache, Some(&soft)), &job).len(), 4);
}

#[test]
fn gpu_models_kept_between_sessions_follow_relabelled_nodes() {
    // One scheduler across cycles, as a live driver runs it: the models it keeps are
    // found again once a node's labels change.
    let scheduler = crate::testkit::scheduler(Some(CONF));
    let mut cache = cache_with_default_queue();
    gpu_pools(&mut cache);
    let job = Gang::new("four", 4)
        .tasks("worker", 4, &[("nvidia.com/gpu", "1")])
        .apply(&mut cache);
    let waits = scheduler.run_cycle(cache.snapshot(), 0);
    assert!(
        waits.binds.is_empty(),
        "3 GPUs free per model: {:?}",
        waits.binds
    );
    for i in 0..2 {
        cache.apply_node(labelled(
            &format!("h{i}"),
            &[("cpu", "16"), ("memory", "64Gi"), ("nvidia.com/gpu", "2")],
            &[("nvidia.com/gpu.product", "A100")],
        ));
    }
    let fits = scheduler.run_cycle(cache.snapshot(), 1);
    assert_eq!(nodes_of(&fits, &job).len(), 4, "one model with 6 GPUs free");
}

#[test]
fn gpu_nodes_without_a_model_label_are_a_group_of_their_own() {
    // Labelled pools elsewhere, and an unlabelled pool the gang is pinned to by its
    // nodeSelector: the gang is placed there when it fits, and told what it lacks when
    // it does not (not only the model rule).
    let mut cache = cache_with_default_queue();
    gpu_pools(&mut cache);
    for i in 0..2 {
        cache.apply_node(labelled(
            &format!("u{i}"),
            &[("cpu", "8"), ("memory", "32Gi"), ("nvidia.com/gpu", "2")],
            &[("pool", "plain")],
        ));
    }
    let pinned = |name: &str, workers: usize| {
        let mut gang =
            Gang::new(name, workers as u32).tasks("worker", workers, &[("nvidia.com/gpu", "2")]);
        for t in &mut gang.tasks {
            let mut p = (*t.placement).clone();
            p.node_selector = BTreeMap::from([("pool".to_string(), "plain".to_string())]);
            t.set_placement(p);
        }
        gang
    };
    let fits = pinned("fits", 2).apply(&mut cache);
    let result = run_cycle(&cache, Some(CONF));
    assert_eq!(nodes_of(&result, &fits), ["u0", "u1"]);
    let mut cache2 = cache_with_default_queue();
    gpu_pools(&mut cache2);
    for i in 0..2 {
        cache2.apply_node(labelled(
            &format!("u{i}"),
            &[("cpu", "8"), ("memory", "32Gi"), ("nvidia.com/gpu", "2")],
            &[("pool", "plain")],
        ));
    }
    let big = pinned("big", 4).apply(&mut cache2);
    let result = run_cycle(&cache2, Some(CONF));
    assert!(result.binds.is_empty());
    let msg = condition_message(&result, &big).unwrap();
    assert!(
        msg.contains("Insufficient nvidia.com/gpu")
            && !msg.contains("GPU model rule")
            && msg.contains("gang is short of 4 nvidia.com/gpu"),
        "{msg}"
    );
}

#[test]
fn pods_that_pin_a_gpu_model_themselves_are_left_to_their_own_rule() {
    let mut cache = cache_with_default_queue();
    gpu_pools(&mut cache);
    let mut gang = Gang::new("pinned", 4).tasks("worker", 4, &[("nvidia.com/gpu", "1")]);
    for t in &mut gang.tasks {
        let mut p = (*t.placement).clone();
        p.node_affinity = vec![serde_json::from_value(serde_json::json!({
            "matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In",
                                  "values": ["A100", "H100"]}]
        }))
        .unwrap()];
        t.set_placement(p);
    }
    let job = gang.apply(&mut cache);
    assert_eq!(nodes_of(&run_cycle(&cache, Some(CONF)), &job).len(), 4);
}

#[test]
fn a_malformed_hard_request_makes_its_gang_wait_and_no_one_else() {
    let mut cache = cache_with_default_queue();
    racks(&mut cache, 2, 2);
    let bad = Gang::new("bad", 2)
        .created(1)
        .tasks("worker", 2, &[("cpu", "1")])
        .network_topology("hard", Some(0))
        .apply(&mut cache);
    let good = Gang::new("good", 2)
        .created(2)
        .tasks("worker", 2, &[("cpu", "1")])
        .apply(&mut cache);
    let result = run_cycle(&cache, Some(CONF));
    assert_eq!(
        condition_message(&result, &bad).as_deref(),
        Some(
            "PodGroup default/bad: spec.networkTopology.highestTierAllowed must be at least \
                 1, got 0: no allowed domain holds the whole gang"
        )
    );
    assert_eq!(nodes_of(&result, &good).len(), 2);
    // One pod asking for a domain outright is held to it too.
    let lone = Gang::new("lone", 1)
        .created(3)
        .tasks("worker", 1, &[("cpu", "1")])
        .network_topology("hard", Some(0))
        .apply(&mut cache);
    let result = run_cycle(&cache, Some(CONF));
    assert!(nodes_of(&result, &lone).is_empty());
    assert!(condition_message(&result, &lone)
        .unwrap()
        .contains("highestTierAllowed must be at least 1"));
    // A hard tier with no HyperNodes at all says so.
    let mut cache = cache_with_default_queue();
    racks(&mut cache, 1, 2);
    let job = Gang::new("tiered", 2)
        .tasks("worker", 2, &[("cpu", "1")])
        .network_topology("hard", Some(1))
        .apply(&mut cache);
    let msg = condition_message(&run_cycle(&cache, Some(CONF)), &job).unwrap();
    assert!(
        msg.starts_with(
            "spec.networkTopology hard within tier 1: no HyperNodes describe the network \
                 topology"
        ),
        "{msg}"
    );
}

#[test]
fn arguments_are_validated() {
    let conf = |args: &str| {
        checked_conf(
            &format!(
                "actions: allocate\ntiers:\n- plugins:\n  - name: gpu-affinity\n    \
                     arguments: {{{args}}}\n"
            ),
            "s.conf",
        )
    };
    assert!(conf("gpu-affinity.topologyLevels: \"a/rack, zone\"").is_ok());
    assert!(conf("gpu-affinity.topologyLevels: [a/rack, zone]").is_ok());
    let e = conf("gpu-affinity.topologyLevels: \"bad key!\"").unwrap_err();
    assert!(
        e.to_string()
            .contains("\"bad key!\" is not a node label key"),
        "{e}"
    );
    let e = conf("gpu-affinity.gpuModel: strict").unwrap_err();
    assert!(e.to_string().contains("expected hard, soft or off"), "{e}");
}
