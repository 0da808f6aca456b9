//! Rules relative to other pods in the pure engine: inter-pod affinity and anti-affinity
//! (a gang's own members included, and existing pods' anti-affinity toward newcomers),
//! topology spread, host ports and preferred node affinity, with the reasons a gang that
//! cannot meet them waits for. One cycle each, default configuration.

use std::collections::BTreeMap;

use rust_batch_engine::cache::Cache;
use rust_batch_engine::framework::SessionResult;
use rust_batch_engine::model::Placement;
use rust_batch_engine::testkit::*;

const CPU1: &[(&str, &str)] = &[("cpu", "1")];
const BIG: &[(&str, &str)] = &[("cpu", "16"), ("memory", "64Gi")];

fn rules(yaml: &str) -> Placement {
    rust_batch_engine::yaml::from_str(yaml).expect("placement YAML")
}

// (Pod overhead is part of a pod's request: `model::resource` tests `pod_requests`.)

/// Node of each bound pod of `job`.
fn placed(result: &SessionResult, job: &str) -> Vec<String> {
    let mut nodes: Vec<String> = result
        .binds
        .iter()
        .filter(|b| &*b.job == job)
        .map(|b| b.node.to_string())
        .collect();
    nodes.sort();
    nodes
}

fn per_node(nodes: &[String]) -> BTreeMap<&str, usize> {
    let mut m = BTreeMap::new();
    for n in nodes {
        *m.entry(n.as_str()).or_insert(0) += 1;
    }
    m
}

fn zones(cache: &mut Cache, per_zone: &[(&str, usize)]) {
    for (zone, n) in per_zone {
        for i in 0..*n {
            cache.apply_node(host(
                &format!("{zone}-{i}"),
                BIG,
                &[("topology.kubernetes.io/zone", zone)],
            ));
        }
    }
}

const ONE_PER_NODE: &str = "
podRules:
  podAntiAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
    - topologyKey: kubernetes.io/hostname
      labelSelector: {matchLabels: {job: w}}
";

#[test]
fn anti_affinity_holds_inside_a_gang() {
    let mut cache = cache_with_default_queue();
    zones(&mut cache, &[("a", 3)]);
    let job = Gang::new("w", 4)
        .placed_tasks("worker", 4, CPU1, rules(ONE_PER_NODE))
        .labelled(&[("job", "w")])
        .apply(&mut cache);
    let result = run_cycle(&cache, None);
    assert!(
        result.binds.is_empty(),
        "4 one-per-node pods on 3 nodes: none"
    );
    let msg = condition_message(&result, &job).unwrap();
    assert!(
        msg.contains("node(s) didn't match pod anti-affinity rules"),
        "{msg}"
    );

    cache.apply_node(host("a-3", BIG, &[("topology.kubernetes.io/zone", "a")]));
    let result = run_cycle(&cache, None);
    let nodes = placed(&result, &job);
    assert_eq!(nodes.len(), 4);
    assert!(per_node(&nodes).values().all(|n| *n == 1), "{nodes:?}");
}

#[test]
fn existing_pods_anti_affinity_keeps_newcomers_away() {
    let mut cache = cache_with_default_queue();
    zones(&mut cache, &[("a", 2)]);
    // A pod of another scheduler on a-0 that wants no `app: web` pod beside it.
    foreign_pod_with(
        &mut cache,
        "loner",
        "a-0",
        &[("app", "db")],
        rules(
            "podRules: {podAntiAffinity: {requiredDuringSchedulingIgnoredDuringExecution: \
             [{topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: web}}}]}}",
        ),
    );
    let web = Gang::new("web", 2)
        .tasks("", 2, CPU1)
        .labelled(&[("app", "web")])
        .apply(&mut cache);
    let other = Gang::new("other", 1)
        .tasks("", 1, &[("cpu", "15")])
        .labelled(&[("app", "batch")])
        .apply(&mut cache);
    let result = run_cycle(&cache, None);
    assert_eq!(placed(&result, &web), ["a-1", "a-1"]);
    assert_eq!(
        placed(&result, &other).len(),
        1,
        "unselected pods are not kept away"
    );

    let mut cache = cache_with_default_queue();
    zones(&mut cache, &[("a", 1)]);
    foreign_pod_with(
        &mut cache,
        "loner",
        "a-0",
        &[],
        rules(
            "podRules: {podAntiAffinity: {requiredDuringSchedulingIgnoredDuringExecution: \
             [{topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: web}}}]}}",
        ),
    );
    let web = Gang::new("web", 1)
        .tasks("", 1, CPU1)
        .labelled(&[("app", "web")])
        .apply(&mut cache);
    let result = run_cycle(&cache, None);
    assert!(result.binds.is_empty());
    let msg = condition_message(&result, &web).unwrap();
    assert!(
        msg.contains("node(s) didn't satisfy existing pods anti-affinity rules"),
        "{msg}"
    );
}

#[test]
fn required_affinity_follows_the_pods_it_names_and_a_self_affine_gang_stays_together() {
    let mut cache = cache_with_default_queue();
    zones(&mut cache, &[("a", 2), ("b", 2)]);
    foreign_pod_with(
        &mut cache,
        "cache-0",
        "b-1",
        &[("app", "cache")],
        Placement::default(),
    );
    let near = rules(
        "podRules: {podAffinity: {requiredDuringSchedulingIgnoredDuringExecution: \
         [{topologyKey: topology.kubernetes.io/zone, labelSelector: {matchLabels: {app: cache}}}]}}",
    );
    let job = Gang::new("near", 3)
        .placed_tasks("", 3, CPU1, near)
        .apply(&mut cache);
    let result = run_cycle(&cache, None);
    let nodes = placed(&result, &job);
    assert_eq!(nodes.len(), 3);
    assert!(nodes.iter().all(|n| n.starts_with("b-")), "{nodes:?}");

    // Nobody matches yet: the gang's own first member opens a zone, the rest follow.
    let together = rules(
        "podRules: {podAffinity: {requiredDuringSchedulingIgnoredDuringExecution: \
         [{topologyKey: topology.kubernetes.io/zone, labelSelector: {matchLabels: {job: t}}}]}}",
    );
    let mut cache = cache_with_default_queue();
    zones(&mut cache, &[("a", 2), ("b", 2)]);
    let job = Gang::new("t", 6)
        .placed_tasks("", 6, CPU1, together)
        .labelled(&[("job", "t")])
        .apply(&mut cache);
    let result = run_cycle(&cache, None);
    let nodes = placed(&result, &job);
    assert_eq!(nodes.len(), 6);
    let zone = &nodes[0][..1];
    assert!(nodes.iter().all(|n| n.starts_with(zone)), "{nodes:?}");

    // Affinity to pods that exist nowhere, and the pod is not one of them: waits.
    let mut cache = cache_with_default_queue();
    zones(&mut cache, &[("a", 1)]);
    let job = Gang::new("lost", 1)
        .placed_tasks(
            "",
            1,
            CPU1,
            rules(
                "podRules: {podAffinity: {requiredDuringSchedulingIgnoredDuringExecution: \
                 [{topologyKey: topology.kubernetes.io/zone, labelSelector: {matchLabels: {app: ghost}}}]}}",
            ),
        )
        .apply(&mut cache);
    let result = run_cycle(&cache, None);
    assert!(result.binds.is_empty());
    assert!(condition_message(&result, &job)
        .unwrap()
        .contains("node(s) didn't match pod affinity rules"));
}

const ZONE_SPREAD: &str = "
podRules:
  topologySpreadConstraints:
  - maxSkew: 1
    topologyKey: topology.kubernetes.io/zone
    labelSelector: {matchLabels: {job: s}}
";

#[test]
fn topology_spread_keeps_the_skew_counting_the_gang_and_running_pods() {
    let mut cache = cache_with_default_queue();
    zones(&mut cache, &[("a", 2), ("b", 2)]);
    let job = Gang::new("s", 4)
        .placed_tasks("", 4, CPU1, rules(ZONE_SPREAD))
        .labelled(&[("job", "s")])
        .apply(&mut cache);
    let result = run_cycle(&cache, None);
    let nodes = placed(&result, &job);
    let a = nodes.iter().filter(|n| n.starts_with("a-")).count();
    assert_eq!((a, nodes.len() - a), (2, 2), "{nodes:?}");

    // Two matching pods already run in zone a: the next two go to b.
    let mut cache = cache_with_default_queue();
    zones(&mut cache, &[("a", 2), ("b", 2)]);
    for i in 0..2 {
        foreign_pod_with(
            &mut cache,
            &format!("old-{i}"),
            "a-0",
            &[("job", "s")],
            Placement::default(),
        );
    }
    let job = Gang::new("s", 2)
        .placed_tasks("", 2, CPU1, rules(ZONE_SPREAD))
        .labelled(&[("job", "s")])
        .apply(&mut cache);
    let result = run_cycle(&cache, None);
    let nodes = placed(&result, &job);
    assert!(
        nodes.len() == 2 && nodes.iter().all(|n| n.starts_with("b-")),
        "{nodes:?}"
    );

    // Zone b has no room: at most one more than b's zero fits in a, so a gang of 4 waits.
    let mut cache = cache_with_default_queue();
    zones(&mut cache, &[("a", 2)]);
    cache.apply_node(host(
        "b-0",
        &[("cpu", "100m")],
        &[("topology.kubernetes.io/zone", "b")],
    ));
    let job = Gang::new("s", 4)
        .placed_tasks("", 4, CPU1, rules(ZONE_SPREAD))
        .labelled(&[("job", "s")])
        .apply(&mut cache);
    let result = run_cycle(&cache, None);
    assert!(result.binds.is_empty(), "{:?}", placed(&result, &job));
    let msg = condition_message(&result, &job).unwrap();
    assert!(
        msg.contains("node(s) didn't match pod topology spread constraints"),
        "{msg}"
    );
}

#[test]
fn a_spread_key_no_node_has_is_named() {
    let mut cache = cache_with_default_queue();
    zones(&mut cache, &[("a", 2)]);
    let job = Gang::new("s", 1)
        .placed_tasks(
            "",
            1,
            CPU1,
            rules(
                "podRules: {topologySpreadConstraints: [{maxSkew: 1, topologyKey: example.com/rack, \
                 labelSelector: {matchLabels: {job: s}}}]}",
            ),
        )
        .apply(&mut cache);
    let result = run_cycle(&cache, None);
    assert!(result.binds.is_empty());
    let msg = condition_message(&result, &job).unwrap();
    assert!(
        msg.contains("missing required label example.com/rack"),
        "{msg}"
    );
}

#[test]
fn host_ports_are_one_per_node() {
    let mut cache = cache_with_default_queue();
    zones(&mut cache, &[("a", 1)]);
    let port = rules("hostPorts: [{port: 9000}]");
    let job = Gang::new("mpi", 2)
        .placed_tasks("", 2, CPU1, port.clone())
        .apply(&mut cache);
    let result = run_cycle(&cache, None);
    assert!(
        result.binds.is_empty(),
        "two pods with hostPort 9000 on one node"
    );
    assert!(condition_message(&result, &job)
        .unwrap()
        .contains("node(s) didn't have free ports for the requested pod ports"));

    let mut cache = cache_with_default_queue();
    zones(&mut cache, &[("a", 3)]);
    // A pod of another scheduler holds the port on a-0.
    foreign_pod_with(&mut cache, "sshd", "a-0", &[], port.clone());
    let job = Gang::new("mpi", 2)
        .placed_tasks("", 2, CPU1, port)
        .apply(&mut cache);
    let result = run_cycle(&cache, None);
    assert_eq!(placed(&result, &job), ["a-1", "a-2"]);
}

#[test]
fn preferences_steer_but_never_refuse() {
    let mut cache = cache_with_default_queue();
    zones(&mut cache, &[("a", 2), ("b", 2)]);
    let prefer_b = rules(
        "preferredNodeAffinity: [{weight: 50, preference: {matchExpressions: \
         [{key: topology.kubernetes.io/zone, operator: In, values: [b]}]}}]",
    );
    let job = Gang::new("p", 2)
        .placed_tasks("", 2, CPU1, prefer_b.clone())
        .apply(&mut cache);
    let result = run_cycle(&cache, None);
    let nodes = placed(&result, &job);
    assert!(nodes.iter().all(|n| n.starts_with("b-")), "{nodes:?}");

    // Zone b full: the preference gives way.
    let mut cache = cache_with_default_queue();
    zones(&mut cache, &[("a", 1)]);
    cache.apply_node(host(
        "b-0",
        &[("cpu", "100m")],
        &[("topology.kubernetes.io/zone", "b")],
    ));
    let job = Gang::new("p", 1)
        .placed_tasks("", 1, CPU1, prefer_b)
        .apply(&mut cache);
    assert_eq!(placed(&run_cycle(&cache, None), &job), ["a-0"]);

    // Preferred anti-affinity within a gang spreads it over nodes.
    let mut cache = cache_with_default_queue();
    zones(&mut cache, &[("a", 3)]);
    let apart = rules(
        "podRules: {podAntiAffinity: {preferredDuringSchedulingIgnoredDuringExecution: \
         [{weight: 100, podAffinityTerm: {topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {job: x}}}}]}}",
    );
    let job = Gang::new("x", 3)
        .placed_tasks("", 3, &[("cpu", "1"), ("memory", "1Gi")], apart)
        .labelled(&[("job", "x")])
        .apply(&mut cache);
    let result = run_cycle(&cache, None);
    let nodes = placed(&result, &job);
    assert_eq!(per_node(&nodes).len(), 3, "{nodes:?}");
}

#[test]
fn soft_spread_prefers_the_emptier_zone() {
    let mut cache = cache_with_default_queue();
    zones(&mut cache, &[("a", 2), ("b", 2)]);
    for i in 0..3 {
        foreign_pod_with(
            &mut cache,
            &format!("old-{i}"),
            "a-0",
            &[("job", "s")],
            Placement::default(),
        );
    }
    let soft = rules(
        "podRules: {topologySpreadConstraints: [{maxSkew: 1, whenUnsatisfiable: ScheduleAnyway, \
         topologyKey: topology.kubernetes.io/zone, labelSelector: {matchLabels: {job: s}}}]}",
    );
    let job = Gang::new("s", 2)
        .placed_tasks("", 2, CPU1, soft)
        .labelled(&[("job", "s")])
        .apply(&mut cache);
    let nodes = placed(&run_cycle(&cache, None), &job);
    assert!(nodes.iter().all(|n| n.starts_with("b-")), "{nodes:?}");
}

#[test]
fn ephemeral_storage_is_fitted_like_cpu() {
    let mut cache = cache_with_default_queue();
    cache.apply_node(host(
        "n",
        &[("cpu", "8"), ("ephemeral-storage", "10Gi")],
        &[],
    ));
    let job = Gang::new("scratch", 2)
        .tasks("", 2, &[("cpu", "1"), ("ephemeral-storage", "6Gi")])
        .apply(&mut cache);
    let result = run_cycle(&cache, None);
    assert!(result.binds.is_empty());
    assert!(condition_message(&result, &job)
        .unwrap()
        .contains("Insufficient ephemeral-storage"));
}
