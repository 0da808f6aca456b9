//! rust-batch's engine: a gang-aware batch scheduler that knows nothing of Kubernetes.
//!
//! The engine (`model`, `snapshot`, `cache`, `conf`, `framework`, `actions`, `plugins`) is
//! pure: it does no I/O and reads no clock, and this crate does not depend on kube or
//! k8s-openapi. Drivers feed it and apply its decisions: `sim` (a discrete-event cluster with
//! a virtual clock, in this crate) and the live scheduler (the `rust-batch-kube` crate).
//! `REGISTRY` below is every action and plugin, handed to `framework::Scheduler::new`: the
//! framework itself names none of them.

pub mod cache;
pub mod conf;
pub mod framework;
pub mod model;
pub mod sim;
pub mod snapshot;
pub mod testkit;
pub mod yaml;

pub mod actions;
pub mod plugins;

/// Every action and plugin this program has: what a configuration may name.
pub const REGISTRY: framework::Registry = framework::Registry {
    actions: actions::BUILDERS,
    plugins: plugins::BUILDERS,
};

/// Configurations checked against the registry (the format itself is tested in `conf`).
#[cfg(test)]
mod tests {
    use crate::testkit::checked_conf as check;

    #[test]
    fn unknown_action_names_the_known_ones() {
        // Not one of Volcano's ("shuffle" is: it would load with a warning).
        let err = check("actions: \"enqueue, teleport\"\ntiers: []\n", "s.conf").unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.starts_with("s.conf: actions[1]: unknown action \"teleport\""),
            "{msg}"
        );
        assert!(msg.contains("allocate"), "{msg}");
    }

    #[test]
    fn unknown_plugin_is_an_error() {
        let text = "actions: allocate\ntiers:\n- plugins:\n  - name: gang\n  - name: magic\n";
        let msg = check(text, "s.conf").unwrap_err().to_string();
        assert!(
            msg.starts_with("s.conf: tiers[0].plugins[1].name: unknown plugin \"magic\""),
            "{msg}"
        );
        assert!(msg.contains("binpack"), "{msg}");
    }

    #[test]
    fn configurations_are_validated_per_action() {
        let text = "actions: allocate\ntiers: []\nconfigurations:\n- name: allocate\n  arguments:\n    minNodesToFind: lots\n";
        let msg = check(text, "s.conf").unwrap_err().to_string();
        assert!(
            msg.contains("configurations[0].arguments.minNodesToFind"),
            "{msg}"
        );
        let text = "actions: allocate\ntiers: []\nconfigurations:\n- name: allocate\n  arguments:\n    minNodesToFind: 50\n";
        let conf = check(text, "s.conf").unwrap();
        assert!(conf.configurations.contains_key("allocate"));
    }

    #[test]
    fn bad_argument_types_name_the_key() {
        let text = "actions: allocate\ntiers:\n- plugins:\n  - name: binpack\n    arguments:\n      binpack.weight: heavy\n";
        let msg = check(text, "s.conf").unwrap_err().to_string();
        assert!(
            msg.contains(
                "tiers[0].plugins[0].arguments.binpack.weight: expected a number, got \"heavy\""
            ),
            "{msg}"
        );
    }
    #[test]
    fn wrong_argument_types_name_the_path_in_any_tier() {
        let text = "actions: allocate\ntiers:\n- plugins:\n  - name: gang\n- plugins:\n  - name: predicates\n  - name: nodeorder\n  - name: binpack\n    arguments:\n      binpack.weight: heavy\n";
        let msg = check(text, "s.conf").unwrap_err().to_string();
        assert_eq!(
            msg,
            "s.conf: tiers[1].plugins[2].arguments.binpack.weight: expected a number, got \"heavy\""
        );
        let text = "actions: \"allocate, backfill\"\ntiers: []\nconfigurations:\n- name: allocate\n- name: backfill\n  arguments: {reservation: maybe}\n";
        let msg = check(text, "s.conf").unwrap_err().to_string();
        assert_eq!(
            msg,
            "s.conf: configurations[1].arguments.reservation: expected true or false, got \"maybe\""
        );
    }

    #[test]
    fn unknown_arguments_are_warned_by_path_with_the_nearest_known_key() {
        let text = "actions: \"enqueue, allocate\"\ntiers:\n- plugins:\n  - name: gang\n    arguments: {gang.magic: 1}\n  - name: binpack\n    arguments: {binpack.wieght: 10, binpack.Memory: 2, binpack.resources.nvidia.com/gpu: 3}\nconfigurations:\n- name: allocate\n  arguments: {minNodesToFnd: 10}\n";
        let conf = check(text, "s.conf").unwrap();
        assert_eq!(
            conf.warnings,
            [
                "tiers[0].plugins[0].arguments.gang.magic",
                "tiers[0].plugins[1].arguments.binpack.Memory: not an argument of binpack, \
                 ignored; did you mean \"binpack.memory\"?",
                "tiers[0].plugins[1].arguments.binpack.wieght: not an argument of binpack, \
                 ignored; did you mean \"binpack.weight\"?",
                "configurations[0].arguments.minNodesToFnd: not an argument of allocate, \
                 ignored; did you mean \"minNodesToFind\"?",
            ]
        );
        // Checked again (a command, then the driver), it warns once.
        let again = crate::framework::Scheduler::new(conf.clone(), &crate::REGISTRY).unwrap();
        assert_eq!(again.conf().warnings, conf.warnings);
    }

    /// Keys Volcano reads and rust-batch ignores keep the warning that says why, and only it.
    #[test]
    fn volcano_arguments_rust_batch_ignores_are_not_called_unknown() {
        let text = "actions: \"allocate, preempt\"\ntiers:\n- plugins:\n  - name: predicates\n    arguments: {predicate.GPUSharingEnable: true, predicate.CacheEnable: true}\n  - name: nodeorder\n    arguments: {leastrequested.weight: 1, imagelocality.weight: 1, volumebinding.weight: 1}\n  - name: capacity\n    arguments: {ancestorReclaimLevel: 2}\nconfigurations:\n- name: preempt\n  arguments: {enableTopologyAwarePreemption: true, predicateErrorCacheEnable: true}\n";
        let conf = check(text, "s.conf").unwrap();
        assert_eq!(conf.warnings.len(), 7, "{:#?}", conf.warnings);
        assert!(
            conf.warnings.iter().all(|w| w.contains(": ignored: ")),
            "{:#?}",
            conf.warnings
        );
    }

    /// Volcano reads its switches with YAML 1.1's booleans (gopkg.in/yaml.v2): `no` is false.
    #[test]
    fn switches_take_yaml_1_1_booleans_as_volcano_does() {
        let text = "actions: allocate\ntiers:\n- plugins:\n  - name: gang\n    enablePreemptable: no\n    enableJobReady: on\n";
        let conf = check(text, "s.conf").unwrap();
        let gang = conf.plugin("gang").unwrap();
        assert!(!gang.enabled(crate::conf::VoteKind::Preemptable));
        assert!(gang.enabled(crate::conf::VoteKind::JobReady));
        // An argument keeps its spelling: gpu-affinity's gpuModel "off" is not false.
        let text = "actions: allocate\ntiers:\n- plugins:\n  - name: gpu-affinity\n    arguments: {gpu-affinity.gpuModel: off}\n";
        assert!(check(text, "s.conf").is_ok());
    }

    /// A volcano-scheduler.conf as Volcano's documentation writes one, dotted keys and
    /// quoted numbers included, loads without a warning about what rust-batch reads.
    #[test]
    fn a_volcano_file_with_arguments_loads() {
        let text = r#"actions: "enqueue, allocate, backfill, preempt, reclaim"
tiers:
- plugins:
  - name: priority
  - name: gang
    enablePreemptable: false
    enableJobStarving: false
  - name: conformance
- plugins:
  - name: overcommit
    arguments:
      overcommit-factor: 1.5
  - name: drf
    enablePreemptable: false
  - name: predicates
  - name: proportion
  - name: nodeorder
    arguments:
      leastrequested.weight: 1
      mostrequested.weight: 0
      nodeaffinity.weight: 2
      podaffinity.weight: 2
      balancedresource.weight: 1
      tainttoleration.weight: 3
      podtopologyspread.weight: 2
  - name: binpack
    arguments:
      binpack.weight: "10"
      binpack.cpu: 2
      binpack.memory: 1
      binpack.resources: nvidia.com/gpu, example.com/foo
      binpack.resources.nvidia.com/gpu: 2
      binpack.resources.example.com/foo: 3
configurations:
- name: allocate
  arguments:
    minNodesToFind: 50
"#;
        let conf = check(text, "volcano-scheduler.conf").unwrap();
        assert!(conf.warnings.is_empty(), "{:#?}", conf.warnings);
    }
}
