use super::*;

const MINIMAL: &str = "name: t\nnodeGroups:\n- name: g\n  count: 1\n  allocatable: {cpu: 4}\n";

#[test]
fn bundled_default_parses() {
    let s = Scenario::parse(DEFAULT_SCENARIO, "default.yaml").unwrap();
    assert!(!s.jobs.is_empty());
}

#[test]
fn huge_counts_and_durations_are_refused_not_simulated() {
    // Found writing the scenario fuzz target (the inputs are in fuzz/corpus/scenario):
    // replicas summed past u32::MAX panicked, a repeat's `every` times its count
    // overflowed the virtual clock, and a few bytes could ask for billions of nodes or
    // pods.
    let msg = |text: String| Scenario::parse(&text, "s.yaml").unwrap_err().to_string();
    let overflow = format!(
            "{MINIMAL}jobs:\n- name: j\n  tasks:\n  - role: a\n    replicas: 4294967295\n  - role: b\n    replicas: 4294967295\n"
        );
    assert!(
        msg(overflow).contains("s.yaml: jobs[0].tasks: 8589934590 pods in all"),
        "replicas"
    );
    let repeated = format!(
            "{MINIMAL}jobs:\n- name: j\n  repeat: {{count: 4000000, every: 10000years}}\n  tasks:\n  - role: a\n"
        );
    let m = msg(repeated);
    assert!(m.contains("jobs[0].repeat.every"), "{m}");
    assert!(
        m.contains("longer than the simulator's limit of 100 years"),
        "{m}"
    );
    let repeated = format!(
            "{MINIMAL}jobs:\n- name: j\n  repeat: {{count: 4000000, every: 1s}}\n  tasks:\n  - role: a\n"
        );
    let m = msg(repeated);
    assert!(
        m.contains("jobs[0].repeat.count: 4000000 pods in all") && m.contains("1000000"),
        "{m}"
    );
    let nodes = "name: t\nnodeGroups:\n- name: g\n  count: 1000000000\n  allocatable: {cpu: 4}\n";
    let m = msg(nodes.into());
    assert!(
        m.contains("nodeGroups[0].count: 1000000000 nodes in all") && m.contains("limit of 100000"),
        "{m}"
    );
    let added =
        format!("{MINIMAL}events:\n- at: 1m\n  addNodes: {{group: g, count: 4294967295}}\n");
    assert!(msg(added).contains("events[0].addNodes.count: 4294967296 nodes in all"));
    let long = format!("{MINIMAL}maxTime: 18446744073709551615s\n");
    assert!(msg(long).contains("maxTime"));
    // At the limits, it loads.
    let at_limits = format!(
            "{MINIMAL}maxTime: 100years\njobs:\n- name: j\n  repeat: {{count: 1000, every: 36500days}}\n  tasks:\n  - role: a\n    replicas: 1000\n"
        );
    Scenario::parse(&at_limits, "s.yaml").unwrap();
}

#[test]
fn errors_point_to_the_field() {
    let bad_quantity = format!(
        "{MINIMAL}jobs:\n- name: j\n  tasks:\n  - role: w\n    requests: {{memory: lots}}\n"
    );
    let msg = Scenario::parse(&bad_quantity, "s.yaml")
        .unwrap_err()
        .to_string();
    assert!(msg.contains("jobs[0].tasks[0].requests"), "{msg}");
    assert!(msg.contains("resource memory"), "{msg}");

    let looped = format!("{MINIMAL}queues:\n- name: a\n  parent: b\n- name: b\n  parent: a\n");
    let msg = Scenario::parse(&looped, "s.yaml").unwrap_err().to_string();
    assert!(
        msg.contains("s.yaml: queues[0].parent: queues a -> b form a cycle"),
        "{msg}"
    );
    let greedy = format!(
        "{MINIMAL}queues:\n- name: a\n  capability: {{cpu: \"2\"}}\n  guarantee: {{cpu: \"4\"}}\n"
    );
    let msg = Scenario::parse(&greedy, "s.yaml").unwrap_err().to_string();
    assert!(
        msg.contains("s.yaml: queues[0].guarantee: cpu 4 is above the capability 2"),
        "{msg}"
    );
    let bad_queue = format!("{MINIMAL}jobs:\n- name: j\n  queue: nope\n  tasks:\n  - role: w\n");
    let msg = Scenario::parse(&bad_queue, "s.yaml")
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("s.yaml: jobs[0].queue: queue \"nope\" is not defined"),
        "{msg}"
    );

    let bad_min = format!(
        "{MINIMAL}jobs:\n- name: j\n  minMember: 3\n  tasks:\n  - role: w\n    replicas: 2\n"
    );
    let msg = Scenario::parse(&bad_min, "s.yaml").unwrap_err().to_string();
    assert!(
        msg.contains("jobs[0].minMember: 3 is more than the job's 2 tasks"),
        "{msg}"
    );

    let bad_duration =
        format!("{MINIMAL}jobs:\n- name: j\n  submitAt: soon\n  tasks:\n  - role: w\n");
    let msg = Scenario::parse(&bad_duration, "s.yaml")
        .unwrap_err()
        .to_string();
    assert!(msg.contains("jobs[0].submitAt"), "{msg}");

    let bad_event = format!("{MINIMAL}events:\n- at: 1m\n  addNodes: {{group: gpu, count: 1}}\n");
    let msg = Scenario::parse(&bad_event, "s.yaml")
        .unwrap_err()
        .to_string();
    assert!(msg.contains("events[0].addNodes.group"), "{msg}");

    let unknown_field =
        format!("{MINIMAL}jobs:\n- name: j\n  minMembers: 1\n  tasks:\n  - role: w\n");
    let msg = Scenario::parse(&unknown_field, "s.yaml")
        .unwrap_err()
        .to_string();
    assert!(msg.contains("minMembers"), "{msg}");

    let bad_conf = format!("{MINIMAL}config: |\n  actions: \"allocate, teleport\"\n  tiers: []\n");
    let msg = Scenario::parse(&bad_conf, "s.yaml")
        .unwrap_err()
        .to_string();
    assert!(msg.contains("unknown action \"teleport\""), "{msg}");
}

const TOPOLOGY: &str = r#"
name: t
topologyLevels: [example.com/rack, topology.kubernetes.io/zone]
nodeGroups:
- name: g
  count: 2
  allocatable: {cpu: 4}
  labels: {example.com/rack: r0}
hypernodes:
- name: leaf
  tier: 1
  members:
  - type: Node
    selector: {regexMatch: {pattern: "g-[12]"}}
- name: by-label
  tier: 1
  members:
  - type: Node
    selector: {labelMatch: {matchLabels: {example.com/rack: r9}}}
- name: spine
  tier: 2
  members:
  - type: HyperNode
    selector: {exactMatch: {name: leaf}}
jobs:
- name: j
  networkTopology: {mode: hard, highestTierAllowed: 2}
  tasks:
  - role: w
    annotations: {kueue.x-k8s.io/podset-required-topology: example.com/rack}
"#;

#[test]
fn topology_fields_parse_into_the_engine_model() {
    use crate::model::{TopologyBound, TopologyMode};
    let s = Scenario::parse(TOPOLOGY, "s.yaml").unwrap();
    assert_eq!(s.topology_levels.len(), 2);
    let specs: Vec<HyperNodeSpec> = s.hypernodes.iter().map(HyperNodeDef::to_spec).collect();
    assert_eq!(
        specs[0].members[0],
        HyperNodeMember {
            kind: MemberKind::Node,
            selector: MemberSelector::Regex("g-[12]".into())
        }
    );
    assert_eq!(
        specs[1].members[0].selector,
        MemberSelector::Labels([("example.com/rack".into(), "r9".into())].into())
    );
    assert_eq!(specs[2].members[0].kind, MemberKind::HyperNode);
    let req = s.jobs[0]
        .network_topology
        .as_ref()
        .unwrap()
        .to_request("default/j");
    assert_eq!(
        (req.mode, req.bound, req.problem),
        (TopologyMode::Hard, TopologyBound::Tier(2), None)
    );
    assert_eq!(
        s.jobs[0].tasks[0].annotations["kueue.x-k8s.io/podset-required-topology"],
        "example.com/rack"
    );
}

#[test]
fn a_malformed_topology_request_is_the_engines_to_report_not_a_scenario_error() {
    // As with a PodGroup on a live cluster: the gang is told, nothing is refused.
    let odd = TOPOLOGY
        .replace(
            "mode: hard, highestTierAllowed: 2",
            "mode: strict, highestTierAllowed: 0",
        )
        .replace(": example.com/rack}", ": \"not a key\"}");
    let s = Scenario::parse(&odd, "s.yaml").unwrap();
    let req = s.jobs[0]
        .network_topology
        .as_ref()
        .unwrap()
        .to_request("default/j");
    assert!(req
        .problem
        .unwrap()
        .starts_with("PodGroup default/j: spec.networkTopology"));
    // Types are still the scenario's to get right.
    let msg = Scenario::parse(
        &TOPOLOGY.replace("highestTierAllowed: 2", "highestTierAllowed: two"),
        "s.yaml",
    )
    .unwrap_err()
    .to_string();
    assert!(
        msg.contains("jobs[0].networkTopology.highestTierAllowed"),
        "{msg}"
    );
    let msg = Scenario::parse(&TOPOLOGY.replace("mode: hard", "tier: 1"), "s.yaml")
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("jobs[0].networkTopology") && msg.contains("tier"),
        "{msg}"
    );
}

#[test]
fn topology_errors_point_to_the_field() {
    let msg = |from: &str, to: &str| {
        assert!(TOPOLOGY.contains(from), "{from}");
        Scenario::parse(&TOPOLOGY.replace(from, to), "s.yaml")
            .unwrap_err()
            .to_string()
    };
    let cases = [
            (
                "example.com/rack, topology",
                "Example.com/rack, topology",
                "s.yaml: topologyLevels[0]: \"Example.com/rack\" is not a node label key",
            ),
            (
                "topologyLevels: [example.com/rack, topology.kubernetes.io/zone]",
                "topologyLevels: [example.com/rack, example.com/rack]",
                "s.yaml: topologyLevels[1]: \"example.com/rack\" is listed twice",
            ),
            (
                "- type: Node\n    selector: {regexMatch",
                "- type: Switch\n    selector: {regexMatch",
                "hypernodes[0].members[0].type: unknown variant `Switch`",
            ),
            (
                "{regexMatch: {pattern: \"g-[12]\"}}",
                "{regexMatch: {pattern: \"g-[12\"}}",
                "s.yaml: hypernodes[0].members[0].selector.regexMatch.pattern: \"g-[12\" is not a regular expression",
            ),
            (
                "{regexMatch: {pattern: \"g-[12]\"}}",
                "{regexMatch: {pattern: g}, exactMatch: {name: g-1}}",
                "s.yaml: hypernodes[0].members[0].selector: exactMatch, regexMatch and labelMatch are exclusive",
            ),
            (
                "{regexMatch: {pattern: \"g-[12]\"}}",
                "{}",
                "s.yaml: hypernodes[0].members[0].selector: no selector given; give one of",
            ),
            (
                "name: leaf\n  tier: 1",
                "name: leaf\n  tier: 0",
                "s.yaml: hypernodes[0].tier: must be at least 1",
            ),
            (
                "name: by-label",
                "name: leaf",
                "s.yaml: hypernodes[1].name: \"leaf\" is used twice",
            ),
            (
                "{exactMatch: {name: leaf}}",
                "{exactMatch: {name: leaves}}",
                "s.yaml: hypernodes[2].members[0].selector.exactMatch.name: no HyperNode \"leaves\" is declared",
            ),
            (
                "{exactMatch: {name: leaf}}",
                "{regexMatch: {pattern: \".*\"}}",
                "s.yaml: hypernodes[2].members[0].selector: selects HyperNode spine of tier 2; members must be of a lower tier than spine's 2",
            ),
            (
                "type: HyperNode\n    selector: {exactMatch: {name: leaf}}",
                "type: HyperNode\n    selector: {labelMatch: {matchLabels: {a: b}}}",
                "s.yaml: hypernodes[2].members[0].selector.labelMatch: selects nodes by their labels",
            ),
            (
                "{regexMatch: {pattern: \"g-[12]\"}}",
                "{regexMatch: {pattern: \"\"}}",
                "s.yaml: hypernodes[0].members[0].selector.regexMatch.pattern: must not be empty",
            ),
            (
                "- name: spine\n  tier: 2\n  members:\n  - type: HyperNode\n    selector: {exactMatch: {name: leaf}}",
                "- name: spine\n  tier: 2\n  members: []",
                "s.yaml: hypernodes[2].members: a HyperNode needs at least one member",
            ),
            (
                "{matchLabels: {example.com/rack: r9}}",
                "{matchExpressions: []}",
                "hypernodes[1].members[0].selector.labelMatch.matchExpressions: unknown field `matchExpressions`, expected `matchLabels`",
            ),
        ];
    for (from, to, want) in cases {
        let m = msg(from, to);
        assert!(m.contains(want), "{to}: {m}");
    }
    let many = format!(
        "{MINIMAL}hypernodes:\n{}",
        "- {name: h, tier: 1, members: []}\n".repeat(MAX_HYPERNODES + 1)
    );
    let m = Scenario::parse(&many, "s.yaml").unwrap_err().to_string();
    assert!(
        m.contains("s.yaml: hypernodes: 1001 HyperNodes is more than"),
        "{m}"
    );
}
