//! rust-batch: a gang-aware batch scheduler for Kubernetes.
//!
//! The engine (`model`, `snapshot`, `cache`, `conf`, `framework`, `actions`, `plugins`) is
//! pure: it does no I/O and reads no clock. Drivers feed it and apply its decisions: `sim`
//! (a discrete-event cluster with a virtual clock) and `kube` (the live scheduler). `REGISTRY`
//! below is every action and plugin, handed to `framework::Scheduler::new`: the framework
//! itself names none of them.

pub mod cache;
pub mod conf;
pub mod framework;
pub mod kube;
pub mod model;
pub mod sim;
pub mod snapshot;
pub mod testkit;
pub mod yaml;

#[path = "../actions/mod.rs"]
pub mod actions;
#[path = "../plugins/mod.rs"]
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
}
