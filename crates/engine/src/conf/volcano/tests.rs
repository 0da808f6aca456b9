use super::*;

const OURS_ACTIONS: &[&str] = &["enqueue", "allocate", "preempt", "reclaim", "backfill"];
const OURS_PLUGINS: &[&str] = &[
    "binpack",
    "capacity",
    "conformance",
    "drf",
    "gang",
    "gpu-affinity",
    "nodeorder",
    "overcommit",
    "predicates",
    "priority",
    "proportion",
];

fn resolve(text: &str, strict: bool) -> Result<SchedulerConf, ConfError> {
    let mut conf = SchedulerConf::parse(text, "s.conf")?;
    conf.strict = strict;
    conf.resolve_names(OURS_ACTIONS, OURS_PLUGINS)?;
    Ok(conf)
}

/// The names Volcano v1.15.1 registers, read off its factory files (see the lists'
/// docs): a new Volcano plugin or action must be added to the lists on purpose.
#[test]
fn lists_match_volcano_v1_15_1_factories() {
    let plugins: Vec<&str> = VOLCANO_PLUGINS.iter().map(|(n, _)| *n).collect();
    assert_eq!(
        plugins,
        [
            "drf",
            "gang",
            "deviceshare",
            "predicates",
            "priority",
            "nodeorder",
            "conformance",
            "binpack",
            "resource-strategy-fit",
            "tdm",
            "overcommit",
            "sla",
            "task-topology",
            "numa-aware",
            "cdp",
            "rescheduling",
            "usage",
            "pdb",
            "nodegroup",
            "network-topology-aware",
            "proportion",
            "capacity",
            "extender",
            "resourcequota",
        ]
    );
    let actions: Vec<&str> = VOLCANO_ACTIONS.iter().map(|(n, _)| *n).collect();
    assert_eq!(
        actions,
        [
            "reclaim",
            "allocate",
            "backfill",
            "preempt",
            "gangpreempt",
            "gangreclaim",
            "enqueue",
            "shuffle"
        ]
    );
}

#[test]
fn volcano_only_plugins_are_skipped_with_a_warning_naming_them() {
    let text = "actions: \"enqueue, allocate\"\ntiers:\n- plugins:\n  - name: gang\n  - name: sla\n    arguments: {sla-waiting-time: 1h}\n- plugins:\n  - name: task-topology\n  - name: numa-aware\n  - name: binpack\n";
    let conf = resolve(text, false).unwrap();
    let names: Vec<Vec<&str>> = conf
        .tiers
        .iter()
        .map(|t| t.plugins.iter().map(|p| p.name.as_str()).collect())
        .collect();
    assert_eq!(names, [vec!["gang"], vec!["binpack"]]);
    assert_eq!(conf.warnings.len(), 3, "{:?}", conf.warnings);
    assert!(
        conf.warnings[0].starts_with(
            "tiers[0].plugins[1].name: \"sla\" is a Volcano plugin rust-batch does not \
                 have, skipped with its arguments: per-job waiting-time limits"
        ),
        "{}",
        conf.warnings[0]
    );
    assert!(
        conf.warnings[1].starts_with("tiers[1].plugins[0].name: \"task-topology\""),
        "{}",
        conf.warnings[1]
    );
    assert!(conf.warnings[2].contains("NUMA"), "{}", conf.warnings[2]);
}

#[test]
fn every_volcano_name_rust_batch_lacks_loads() {
    for (name, _) in VOLCANO_PLUGINS {
        let text = format!("actions: allocate\ntiers:\n- plugins:\n  - name: {name}\n");
        let conf = resolve(&text, false).unwrap_or_else(|e| panic!("{name}: {e}"));
        let kept = conf.plugin(name).is_some();
        assert_eq!(kept, OURS_PLUGINS.contains(name), "{name}");
        assert_eq!(
            conf.warnings.is_empty(),
            kept,
            "{name}: {:?}",
            conf.warnings
        );
    }
    for (name, _) in VOLCANO_ACTIONS {
        let other = if *name == "allocate" {
            "enqueue"
        } else {
            "allocate"
        };
        let text = format!("actions: \"{other}, {name}\"\ntiers: []\n");
        let conf = resolve(&text, false).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            conf.actions.contains(&name.to_string()),
            OURS_ACTIONS.contains(name),
            "{name}"
        );
    }
}

#[test]
fn volcano_only_actions_and_their_configurations_are_skipped() {
    let text = "actions: \"enqueue, allocate, gangpreempt, shuffle, backfill\"\ntiers: []\nconfigurations:\n- name: gangpreempt\n  arguments: {maxDomains: 3}\n- name: allocate\n  arguments: {minNodesToFind: 50}\n";
    let conf = resolve(text, false).unwrap();
    assert_eq!(conf.actions, ["enqueue", "allocate", "backfill"]);
    assert!(conf.configurations.contains_key("allocate"));
    assert!(!conf.configurations.contains_key("gangpreempt"));
    let all = conf.warnings.join("\n");
    assert!(
            all.contains("actions[2]: \"gangpreempt\" is a Volcano action rust-batch does not have, skipped: gang-aware"),
            "{all}"
        );
    assert!(all.contains("actions[3]: \"shuffle\""), "{all}");
    assert!(
        all.contains("configurations[0]: arguments of \"gangpreempt\""),
        "{all}"
    );
}

#[test]
fn only_volcano_actions_is_an_error() {
    let msg = resolve("actions: shuffle\ntiers: []\n", false)
        .unwrap_err()
        .to_string();
    assert!(
        msg.starts_with("s.conf: actions: no action rust-batch has"),
        "{msg}"
    );
}

#[test]
fn strict_refuses_volcano_only_names() {
    let msg = resolve(
        "actions: allocate\ntiers:\n- plugins:\n  - name: gang\n  - name: usage\n",
        true,
    )
    .unwrap_err()
    .to_string();
    assert!(
        msg.starts_with(
            "s.conf: tiers[0].plugins[1].name: \"usage\" is a Volcano plugin rust-batch \
                 does not have, refused by --strict-config (without it, skipped with a \
                 warning): nodes filtered"
        ),
        "{msg}"
    );
    assert!(msg.contains("--strict-config"), "{msg}");
    let msg = resolve("actions: \"allocate, shuffle\"\ntiers: []\n", true)
        .unwrap_err()
        .to_string();
    assert!(msg.starts_with("s.conf: actions[1]: \"shuffle\""), "{msg}");
    let msg = resolve(
        "actions: allocate\ntiers: []\nconfigurations:\n- name: gangreclaim\n",
        true,
    )
    .unwrap_err()
    .to_string();
    assert!(
        msg.starts_with("s.conf: configurations[0].name: \"gangreclaim\""),
        "{msg}"
    );
    // What rust-batch has passes strict mode unchanged.
    let conf = resolve(super::super::DEFAULT_CONF, true).unwrap();
    assert!(conf.warnings.is_empty(), "{:?}", conf.warnings);
}

#[test]
fn unknown_names_are_errors_with_did_you_mean() {
    let msg = resolve(
        "actions: allocate\ntiers:\n- plugins:\n  - name: binpak\n",
        false,
    )
    .unwrap_err()
    .to_string();
    assert!(
        msg.starts_with(
            "s.conf: tiers[0].plugins[0].name: unknown plugin \"binpak\"; known plugins: \
                 binpack, "
        ),
        "{msg}"
    );
    assert!(
        msg.ends_with(", proportion; did you mean \"binpack\"?"),
        "{msg}"
    );
    // Volcano's directory name is not its plugin's name; the suggestion says what the
    // right name would do here.
    let msg = resolve(
        "actions: allocate\ntiers:\n- plugins:\n  - name: numaaware\n",
        false,
    )
    .unwrap_err()
    .to_string();
    assert!(
            msg.ends_with("; did you mean \"numa-aware\"? (a Volcano name rust-batch does not have: it would be skipped with a warning)"),
            "{msg}"
        );
    let msg = resolve("actions: \"allocate, alocate\"\ntiers: []\n", false)
        .unwrap_err()
        .to_string();
    assert!(
        msg.starts_with("s.conf: actions[1]: unknown action \"alocate\"; known actions: ")
            && msg.ends_with("; did you mean \"allocate\"?"),
        "{msg}"
    );
    let msg = resolve(
        "actions: allocate\ntiers: []\nconfigurations:\n- name: teleport\n",
        false,
    )
    .unwrap_err()
    .to_string();
    assert!(
        msg.starts_with("s.conf: configurations[0].name: unknown action \"teleport\"; known")
            && !msg.contains("did you mean"),
        "{msg}"
    );
}

#[test]
fn closest_needs_a_near_name() {
    assert_eq!(closest("magic", ["binpack", "gang"]), None);
    assert_eq!(
        closest("Task_Topology", ["task-topology"]),
        Some("task-topology")
    );
    assert_eq!(closest("drff", ["drf", "gang"]), Some("drf"));
    assert_eq!(closest("", ["drf"]), None);
}

#[test]
fn volcano_arguments_rust_batch_ignores_are_warned() {
    let text = "actions: \"allocate, preempt\"\ntiers:\n- plugins:\n  - name: predicates\n    arguments:\n      predicate.NodeAffinityEnable: false\n      predicate.CacheEnable: true\n  - name: nodeorder\n    arguments: {imagelocality.weight: 1, leastrequested.weight: 1}\nconfigurations:\n- name: allocate\n  arguments: {predicateErrorCacheEnable: true, minNodesToFind: 10}\n- name: preempt\n  arguments: {enableTopologyAwarePreemption: true}\n";
    let conf = resolve(text, false).unwrap();
    let all = conf.warnings.join("\n");
    assert_eq!(conf.warnings.len(), 5, "{all}");
    assert!(
        all.contains(
            "tiers[0].plugins[0].arguments.predicate.NodeAffinityEnable: ignored: Volcano's \
                 switch for one of its filters"
        ),
        "{all}"
    );
    assert!(
        all.contains("tiers[0].plugins[1].arguments.imagelocality.weight: ignored"),
        "{all}"
    );
    assert!(
        all.contains("configurations[0].arguments.predicateErrorCacheEnable: ignored"),
        "{all}"
    );
    assert!(
        all.contains("configurations[1].arguments.enableTopologyAwarePreemption: ignored"),
        "{all}"
    );
    assert!(
        !all.contains("leastrequested") && !all.contains("minNodesToFind"),
        "{all}"
    );
}

const CONFIG_MAP: &str = r#"apiVersion: v1
kind: ConfigMap
metadata:
  name: volcano-scheduler-configmap
  namespace: volcano-system
data:
  volcano-scheduler.conf: |
    actions: "enqueue, allocate, backfill"
    tiers:
    - plugins:
      - name: priority
      - name: gang
"#;

#[test]
fn a_config_map_is_unwrapped() {
    let conf = SchedulerConf::parse(CONFIG_MAP, "cm.yaml").unwrap();
    assert_eq!(conf.actions, ["enqueue", "allocate", "backfill"]);
    assert_eq!(conf.tiers[0].plugins.len(), 2);
    assert_eq!(
        conf.source,
        "cm.yaml (ConfigMap volcano-system/volcano-scheduler-configmap, \
             data.volcano-scheduler.conf)"
    );
}

#[test]
fn a_config_map_with_one_other_conf_key_is_unwrapped() {
    let text = "kind: ConfigMap\nmetadata: {name: sched}\ndata:\n  README: hello\n  my.conf: \"actions: allocate\\ntiers: []\\n\"\n";
    let conf = SchedulerConf::parse(text, "cm.yaml").unwrap();
    assert_eq!(conf.actions, ["allocate"]);
    assert_eq!(conf.source, "cm.yaml (ConfigMap sched, data.my.conf)");
}

#[test]
fn the_scheduler_config_map_is_found_among_other_objects() {
    let text = format!(
            "apiVersion: v1\nkind: Namespace\nmetadata: {{name: volcano-system}}\n---\nkind: ConfigMap\nmetadata: {{name: admission}}\ndata: {{admission.yaml: x}}\n---\n{CONFIG_MAP}"
        );
    let conf = SchedulerConf::parse(&text, "installer.yaml").unwrap();
    assert_eq!(conf.tiers[0].plugins.len(), 2);
    let list = "apiVersion: v1\nkind: List\nitems:\n- kind: ConfigMap\n  metadata: {name: a}\n  data: {volcano-scheduler.conf: \"actions: enqueue\\n\"}\n";
    let conf = SchedulerConf::parse(list, "list.yaml").unwrap();
    assert_eq!(conf.actions, ["enqueue"]);
}

#[test]
fn config_maps_without_one_configuration_are_errors_naming_the_keys() {
    let text = "kind: ConfigMap\nmetadata: {name: sched}\ndata: {a.conf: x, b.conf: y}\n";
    let msg = SchedulerConf::parse(text, "cm.yaml")
        .unwrap_err()
        .to_string();
    assert!(
            msg.starts_with("cm.yaml: not a valid scheduler configuration: ConfigMap sched: data has keys a.conf, b.conf"),
            "{msg}"
        );
    let text = "kind: ConfigMap\nmetadata: {name: sched}\n";
    let msg = SchedulerConf::parse(text, "cm.yaml")
        .unwrap_err()
        .to_string();
    assert!(msg.contains("ConfigMap sched: data has no keys"), "{msg}");
    let text = "kind: ConfigMap\nmetadata: {name: a}\n---\nkind: ConfigMap\nmetadata: {name: b}\n";
    let msg = SchedulerConf::parse(text, "two.yaml")
        .unwrap_err()
        .to_string();
    assert!(msg.contains("2 ConfigMaps (a, b)"), "{msg}");
    let text = "kind: ConfigMap\nmetadata: {name: a}\ndata: {x.conf: [1]}\n";
    let msg = SchedulerConf::parse(text, "cm.yaml")
        .unwrap_err()
        .to_string();
    assert!(msg.contains("data.x.conf is not a string"), "{msg}");
    // The payload's own mistakes name where it came from.
    let text =
        "kind: ConfigMap\nmetadata: {name: a}\ndata: {volcano-scheduler.conf: \"tiers: []\"}\n";
    let msg = SchedulerConf::parse(text, "cm.yaml")
        .unwrap_err()
        .to_string();
    assert!(
        msg.starts_with("cm.yaml (ConfigMap a, data.volcano-scheduler.conf): actions: missing"),
        "{msg}"
    );
}

#[test]
fn odd_inputs_are_errors_not_panics() {
    for text in [
        "ConfigMap",
        "kind: ConfigMap",
        "kind: List\nitems: 5\n",
        "kind: List\nitems: [ConfigMap]\n",
        "- kind: ConfigMap\n",
        "kind: ConfigMap\ndata: 7\n",
        "kind: ConfigMap\ndata: {volcano-scheduler.conf: \"kind: ConfigMap\"}\n",
        "kind: ConfigMap\nmetadata: 3\ndata: {}\n",
        "---\n---\nkind: ConfigMap\n",
        "kind: [ConfigMap\n",
    ] {
        assert!(SchedulerConf::parse(text, "x").is_err(), "{text}");
    }
}

proptest::proptest! {
    /// Any text, ConfigMaps and Volcano's names mixed in, is a configuration or an
    /// error: never a panic.
    #[test]
    fn any_text_loads_or_is_an_error(
        text in "(kind: (ConfigMap|List)\n|data:\n  |volcano-scheduler.conf: \\|\n|items:\n- |---\n|actions: \"(enqueue|shuffle|gangpreempt|x), allocate\"\n|tiers:\n- plugins:\n  - name: (sla|gang|numaaware|drf|)\n|    arguments: \\{a: 1\\}\n|configurations:\n- name: (gangreclaim|allocate|y)\n|[ -~\n]{0,8})*",
        strict in proptest::bool::ANY,
    ) {
        if let Ok(conf) = SchedulerConf::parse(&text, "p.conf") {
            let _ = conf.with_strict(strict).resolve_names(OURS_ACTIONS, OURS_PLUGINS);
        }
    }
}
