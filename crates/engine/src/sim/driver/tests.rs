use crate::model::TaskStatus;
use crate::sim::report::LevelSpread;
use crate::sim::{Scenario, Simulation};

/// Two racks of two 4-GPU nodes (HyperNodes mirror them), one node of each rack busy for
/// 10m. Gangs that must stay in one rack wait for it; a request the engine cannot use
/// waits with the engine's reason. The default configuration (gpu-affinity).
const REQUESTS: &str = r#"
name: requests
maxTime: 30m
topologyLevels: [example.com/rack]
nodeGroups:
- {name: a1, count: 1, allocatable: {nvidia.com/gpu: 4}, labels: {example.com/rack: ra, slot: a1}}
- {name: a2, count: 1, allocatable: {nvidia.com/gpu: 4}, labels: {example.com/rack: ra, slot: a2}}
- {name: b1, count: 1, allocatable: {nvidia.com/gpu: 4}, labels: {example.com/rack: rb, slot: b1}}
- {name: b2, count: 1, allocatable: {nvidia.com/gpu: 4}, labels: {example.com/rack: rb, slot: b2}}
hypernodes:
- {name: sw-a, tier: 1, members: [{type: Node, selector: {regexMatch: {pattern: "a.-1"}}}]}
- {name: sw-b, tier: 1, members: [{type: Node, selector: {labelMatch: {matchLabels: {example.com/rack: rb}}}}]}
jobs:
- name: block-a
  tasks: [{role: w, requests: {nvidia.com/gpu: 4}, runtime: 10m, nodeSelector: {slot: a1}}]
- name: block-b
  tasks: [{role: w, requests: {nvidia.com/gpu: 4}, runtime: 10m, nodeSelector: {slot: b1}}]
- name: volcano
  submitAt: 10s
  networkTopology: {highestTierAllowed: 1}
  tasks: [{role: w, replicas: 2, requests: {nvidia.com/gpu: 4}, runtime: 5m}]
- name: kueue
  submitAt: 10s
  tasks:
  - role: w
    replicas: 2
    requests: {nvidia.com/gpu: 4}
    runtime: 5m
    annotations: {kueue.x-k8s.io/podset-required-topology: example.com/rack}
- name: odd
  submitAt: 10s
  networkTopology: {mode: hard, highestTierAllowed: 0}
  tasks: [{role: w, replicas: 2, requests: {nvidia.com/gpu: 1}, runtime: 1m}]
"#;

#[test]
fn topology_requests_and_hypernodes_of_a_scenario_reach_the_engine() {
    let scenario = Scenario::parse(REQUESTS, "requests.yaml").unwrap();
    let mut sim = Simulation::new(scenario, "requests.yaml").unwrap();
    sim.run_until(60_000, &mut |_| {});
    let message = |sim: &Simulation, job: &str| sim.job(job).unwrap().message.clone();
    for job in ["volcano", "kueue", "odd"] {
        assert!(
            sim.job_pods(job)
                .iter()
                .all(|p| p.status == TaskStatus::Pending),
            "{job} waits: a2 and b2 are free, but in two racks (odd: its request is malformed)"
        );
    }
    let volcano = message(&sim, "volcano").unwrap_or_default();
    assert!(
        volcano.contains("spec.networkTopology hard within tier 1"),
        "{volcano}"
    );
    let kueue = message(&sim, "kueue").unwrap_or_default();
    assert!(
        kueue.contains("kueue.x-k8s.io/podset-required-topology hard within example.com/rack"),
        "{kueue}"
    );
    let odd = message(&sim, "odd").unwrap_or_default();
    assert!(
            odd.contains(
                "PodGroup default/odd: spec.networkTopology.highestTierAllowed must be at least 1, got 0"
            ),
            "{odd}"
        );

    let report = sim.run(&mut |_| {});
    assert!(report.invariants_hold(), "{:?}", report.invariants);
    let job = |name: &str| report.jobs.iter().find(|j| j.name == name).unwrap();
    let one_rack = [
        LevelSpread {
            level: "example.com/rack".into(),
            domains: 1,
        },
        LevelSpread {
            level: "tier-1".into(),
            domains: 1,
        },
    ];
    for name in ["default/volcano", "default/kueue"] {
        let j = job(name);
        assert!(j.started.is_some_and(|t| t >= 600_000), "{name}: {j:?}");
        assert_eq!(j.nodes.len(), 2, "{name}");
        assert_eq!(j.spread, one_rack, "{name}");
    }
    assert_eq!(job("default/odd").started, None);
    assert!(report
        .topology_problems
        .iter()
        .any(|p| p.contains("PodGroup default/odd")));
}
