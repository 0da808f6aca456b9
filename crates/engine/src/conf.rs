//! The scheduler configuration file, in Volcano's format
//! (docs/src/architecture.md#5-config-file), so an existing volcano-scheduler.conf loads
//! unchanged. Every mistake is reported with the file, the key
//! and what would be valid; nothing here panics on input.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use serde::Deserialize;
use serde_json::Value;
use thiserror::Error;

mod arguments;
mod volcano;
pub use arguments::{
    Arguments, Flag, HumanDuration, List, NoArguments, Number, Text, UnknownArgument, Weight,
};
pub(crate) use volcano::ignored_argument;
pub use volcano::{VOLCANO_ACTIONS, VOLCANO_PLUGINS};

/// Everything a plugin can vote on. Each maps to Volcano's `enable…` switch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum VoteKind {
    JobOrder,
    QueueOrder,
    TaskOrder,
    Predicate,
    NodeOrder,
    JobValid,
    JobReady,
    JobPipelined,
    JobStarving,
    JobEnqueueable,
    Preemptable,
    Reclaimable,
    Overused,
    Allocatable,
    /// Which node sets (topology domains, GPU models) a gang should be placed inside.
    HyperNodeOrder,
}

/// Volcano switches we accept but that name votes this scheduler does not have; they load
/// (so existing files work) and change nothing. Spelt as Volcano v1.15.1's `PluginOption`
/// (pkg/scheduler/conf/scheduler_conf.go) spells them, plus enableNamespaceOrder of
/// earlier releases.
const INERT_SWITCHES: &[&str] = &[
    "enableNamespaceOrder",
    "enableHierarchy",
    "enablePreemptive",
    "EnabledClusterOrder",
    "enableBestNode",
    "enableTargetJob",
    "enableReservedNodes",
    "enabledVictim",
    "enabledSubJobReady",
    "enabledSubJobPipelined",
    "enabledSubJobOrder",
    "enabledHyperNodeGradient",
];

impl VoteKind {
    pub const ALL: [VoteKind; 15] = [
        Self::JobOrder,
        Self::QueueOrder,
        Self::TaskOrder,
        Self::Predicate,
        Self::NodeOrder,
        Self::JobValid,
        Self::JobReady,
        Self::JobPipelined,
        Self::JobStarving,
        Self::JobEnqueueable,
        Self::Preemptable,
        Self::Reclaimable,
        Self::Overused,
        Self::Allocatable,
        Self::HyperNodeOrder,
    ];

    /// The key in the config file.
    pub fn switch_name(self) -> &'static str {
        match self {
            Self::JobOrder => "enableJobOrder",
            Self::QueueOrder => "enableQueueOrder",
            Self::TaskOrder => "enableTaskOrder",
            Self::Predicate => "enablePredicate",
            Self::NodeOrder => "enableNodeOrder",
            Self::JobValid => "enableJobValid",
            Self::JobReady => "enableJobReady",
            Self::JobPipelined => "enableJobPipelined",
            Self::JobStarving => "enableJobStarving",
            Self::JobEnqueueable => "enableJobEnqueued",
            Self::Preemptable => "enablePreemptable",
            Self::Reclaimable => "enableReclaimable",
            Self::Overused => "enabledOverused",
            Self::Allocatable => "enabledAllocatable",
            Self::HyperNodeOrder => "enableHyperNodeOrder",
        }
    }

    /// `Some(Some(kind))` for a switch that controls a vote, `Some(None)` for a Volcano switch
    /// that has no effect here, `None` for an unknown key.
    pub fn from_switch(key: &str) -> Option<Option<VoteKind>> {
        // Volcano spells some switches "enabled…" and others "enable…"; accept both.
        let normalized = key.replacen("enabled", "enable", 1);
        if INERT_SWITCHES
            .iter()
            .any(|s| s.replacen("enabled", "enable", 1) == normalized)
        {
            return Some(None);
        }
        Self::ALL
            .iter()
            .find(|k| k.switch_name().replacen("enabled", "enable", 1) == normalized)
            .map(|k| Some(*k))
    }

    pub fn switch_names() -> Vec<&'static str> {
        Self::ALL
            .iter()
            .map(|k| k.switch_name())
            .chain(INERT_SWITCHES.iter().copied())
            .collect()
    }
}

/// The topology levels gpu-affinity uses in the default configuration (replace this text
/// in `DEFAULT_CONF` for other levels).
pub const DEFAULT_TOPOLOGY_LEVELS: &str = "nvidia.com/gpu.clique, topology.kubernetes.io/zone";

/// Volcano's default volcano-scheduler.conf, used when no file is given, with gpu-affinity
/// (one GPU model per gang; the narrowest NVLink clique or zone that holds it).
pub const DEFAULT_CONF: &str = r#"actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
    enablePreemptable: false
  - name: conformance
- plugins:
  - name: overcommit
  - name: drf
    enablePreemptable: false
  - name: predicates
  - name: proportion
  - name: nodeorder
  - name: binpack
  - name: gpu-affinity
    arguments:
      gpu-affinity.topologyLevels: nvidia.com/gpu.clique, topology.kubernetes.io/zone
"#;

#[derive(Debug, Error)]
pub enum ConfError {
    #[error("{file}: cannot read: {source}")]
    Io {
        file: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{file}: not a valid scheduler configuration: {message}")]
    Syntax { file: String, message: String },
    #[error("{file}: {key}: {message}")]
    Invalid {
        file: String,
        key: String,
        message: String,
    },
}

/// A problem with one key, before we know which file it came from.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{key}: {message}")]
pub struct ArgError {
    pub key: String,
    pub message: String,
}

/// A switch's value: true or false, or YAML 1.1's other spellings of them (`no`, `off`,
/// `yes`, `on`, `n`, `y`), which Volcano's YAML reader (gopkg.in/yaml.v2) takes as
/// booleans for its switches.
fn switch_value(v: &Value) -> Option<bool> {
    match v {
        Value::Bool(b) => Some(*b),
        Value::String(s) => match s.as_str() {
            "y" | "Y" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" => Some(true),
            "n" | "N" | "no" | "No" | "NO" | "off" | "Off" | "OFF" => Some(false),
            _ => None,
        },
        _ => None,
    }
}

/// How a message names a value the file gave: `true`, `10`, `"maybe"`, `a list`.
fn describe(v: &Value) -> String {
    match v {
        Value::Null => "nothing".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => format!("{s:?}"),
        Value::Array(_) => "a list".into(),
        Value::Object(_) => "a map".into(),
    }
}

/// One plugin in a tier, with its switches and arguments.
#[derive(Clone, Debug, PartialEq)]
pub struct PluginOption {
    pub name: String,
    /// Switches set to false (`enableJobOrder: false`, …). Everything else is on.
    pub disabled: Vec<VoteKind>,
    pub arguments: Arguments,
}

impl PluginOption {
    pub fn new(name: &str) -> Self {
        PluginOption {
            name: name.to_string(),
            disabled: Vec::new(),
            arguments: Arguments::default(),
        }
    }

    pub fn enabled(&self, kind: VoteKind) -> bool {
        !self.disabled.contains(&kind)
    }
}

#[derive(Clone, Debug, PartialEq, Default)]
pub struct Tier {
    pub plugins: Vec<PluginOption>,
}

/// A loaded, validated configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct SchedulerConf {
    /// Where it came from, for messages.
    pub source: String,
    pub actions: Vec<String>,
    pub tiers: Vec<Tier>,
    /// `configurations:` — arguments per action name.
    pub configurations: BTreeMap<String, Arguments>,
    /// Things that are allowed but probably not meant (unknown arguments, unknown top-level
    /// keys, Volcano plugins and actions skipped); `check-config` prints them, the scheduler
    /// logs them.
    pub warnings: Vec<String>,
    /// `--strict-config`: a Volcano plugin or action rust-batch does not have is an error,
    /// not a warning (see `resolve_names`). Kept by a reload of the same file.
    pub strict: bool,
}

// The values of `arguments` and of the switches are kept as the file gave them: a plugin
// reads its arguments into its own struct (`Arguments::parse`) when it is built.
// No deny_unknown_fields: it does not mix with `flatten`; switches are checked by hand.
#[derive(Deserialize)]
struct RawPlugin {
    name: String,
    #[serde(default)]
    arguments: Option<BTreeMap<String, Value>>,
    #[serde(flatten)]
    switches: BTreeMap<String, Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTier {
    #[serde(default)]
    plugins: Vec<RawPlugin>,
}

#[derive(Deserialize)]
struct RawConfiguration {
    name: String,
    #[serde(default)]
    arguments: Option<BTreeMap<String, Value>>,
}

#[derive(Deserialize)]
struct RawConf {
    actions: Option<String>,
    #[serde(default)]
    tiers: Vec<RawTier>,
    #[serde(default)]
    configurations: Vec<RawConfiguration>,
    #[serde(flatten)]
    other: BTreeMap<String, Value>,
}

/// Top-level keys Volcano's file may carry that do not change scheduling decisions here.
const KNOWN_TOP_LEVEL: &[&str] = &["metrics"];

impl SchedulerConf {
    pub fn default_conf() -> Self {
        // The embedded default is tested to parse; an error here is a build defect.
        Self::parse(DEFAULT_CONF, "<built-in default>")
            .expect("built-in default configuration is valid")
    }

    pub fn load(path: &Path) -> Result<Self, ConfError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ConfError::Io {
            file: file.clone(),
            source,
        })?;
        Self::parse(&text, &file)
    }

    /// This configuration with `--strict-config` on or off.
    pub fn with_strict(mut self, strict: bool) -> Self {
        self.strict = strict;
        self
    }

    /// Parses a configuration: Volcano's volcano-scheduler.conf, or a Kubernetes ConfigMap
    /// holding one (`data.volcano-scheduler.conf`, or its one `*.conf` key), as Volcano ships
    /// it; messages about the payload name the ConfigMap and key after `file`.
    pub fn parse(text: &str, file: &str) -> Result<Self, ConfError> {
        match volcano::config_map_payload(text) {
            Ok(None) => Self::parse_bare(text, file),
            Ok(Some((payload, within))) => {
                Self::parse_bare(&payload, &format!("{file} ({within})"))
            }
            Err(message) => Err(ConfError::Syntax {
                file: file.to_string(),
                message,
            }),
        }
    }

    fn parse_bare(text: &str, file: &str) -> Result<Self, ConfError> {
        let syntax = |message: String| ConfError::Syntax {
            file: file.to_string(),
            message,
        };
        let invalid = |key: String, message: String| ConfError::Invalid {
            file: file.to_string(),
            key,
            message,
        };
        if text.trim().is_empty() {
            return Err(syntax(
                "the file is empty; it needs at least `actions:` and `tiers:`".into(),
            ));
        }
        let raw: RawConf = crate::yaml::from_str_with_path(text).map_err(syntax)?;
        let mut warnings = Vec::new();
        for key in raw.other.keys() {
            if !KNOWN_TOP_LEVEL.contains(&key.as_str()) {
                warnings.push(format!("{key}: unknown top-level key, ignored"));
            }
        }

        let actions_text = raw.actions.ok_or_else(|| {
            invalid(
                "actions".into(),
                "missing; e.g. actions: \"enqueue, allocate, backfill\"".into(),
            )
        })?;
        let actions: Vec<String> = actions_text
            .split(',')
            .map(|a| a.trim().to_string())
            .filter(|a| !a.is_empty())
            .collect();
        if actions.is_empty() {
            return Err(invalid("actions".into(), "no action listed".into()));
        }
        for (i, a) in actions.iter().enumerate() {
            if actions[..i].contains(a) {
                return Err(invalid(
                    format!("actions[{i}]"),
                    format!("action {a:?} is listed twice"),
                ));
            }
        }

        let mut tiers = Vec::new();
        let mut seen = Vec::<String>::new();
        for (t, raw_tier) in raw.tiers.into_iter().enumerate() {
            let mut tier = Tier::default();
            for (p, raw_plugin) in raw_tier.plugins.into_iter().enumerate() {
                let at = format!("tiers[{t}].plugins[{p}]");
                let name = raw_plugin.name.trim().to_string();
                if seen.contains(&name) {
                    return Err(invalid(
                        format!("{at}.name"),
                        format!("plugin {name:?} is configured twice"),
                    ));
                }
                // Two answers to "what does a queue deserve" cannot both hold.
                let rival = match name.as_str() {
                    "capacity" => Some("proportion"),
                    "proportion" => Some("capacity"),
                    _ => None,
                };
                if let Some(rival) = rival.filter(|r| seen.iter().any(|s| s == r)) {
                    return Err(invalid(
                        format!("{at}.name"),
                        format!(
                            "plugins {rival:?} and {name:?} both divide the cluster between \
                             queues; configure one of them (capacity for explicit deserved \
                             shares and hierarchical queues, proportion for weights)"
                        ),
                    ));
                }
                seen.push(name.clone());
                let mut disabled = Vec::new();
                for (key, value) in &raw_plugin.switches {
                    let Some(kind) = VoteKind::from_switch(key) else {
                        return Err(invalid(
                            format!("{at}.{key}"),
                            format!(
                                "unknown key; valid keys: name, arguments, {}",
                                VoteKind::switch_names().join(", ")
                            ),
                        ));
                    };
                    match switch_value(value) {
                        Some(true) => {}
                        Some(false) => disabled.extend(kind),
                        None => {
                            return Err(invalid(
                                format!("{at}.{key}"),
                                format!("expected true or false, got {}", describe(value)),
                            ))
                        }
                    }
                }
                let arguments = Arguments::from_values(
                    format!("{at}.arguments"),
                    raw_plugin.arguments.unwrap_or_default(),
                );
                let option = PluginOption {
                    name: name.clone(),
                    disabled,
                    arguments,
                };
                tier.plugins.push(option);
            }
            tiers.push(tier);
        }
        if tiers.iter().all(|t| t.plugins.is_empty()) {
            warnings
                .push("tiers: no plugin configured; gangs and predicates are not enforced".into());
        }

        let mut configurations = BTreeMap::new();
        for (i, c) in raw.configurations.into_iter().enumerate() {
            let at = format!("configurations[{i}]");
            let args =
                Arguments::from_values(format!("{at}.arguments"), c.arguments.unwrap_or_default());
            configurations.insert(c.name, args);
        }

        Ok(SchedulerConf {
            source: file.to_string(),
            actions,
            tiers,
            configurations,
            warnings,
            strict: false,
        })
    }

    pub fn action_arguments(&self, action: &str) -> Arguments {
        self.configurations
            .get(action)
            .cloned()
            .unwrap_or_else(|| Arguments::new(format!("configurations[{action}].arguments")))
    }

    pub fn plugin(&self, name: &str) -> Option<&PluginOption> {
        self.tiers
            .iter()
            .flat_map(|t| &t.plugins)
            .find(|p| p.name == name)
    }
}

impl fmt::Display for SchedulerConf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "actions: {}", self.actions.join(", "))?;
        for (i, t) in self.tiers.iter().enumerate() {
            let names: Vec<String> = t
                .plugins
                .iter()
                .map(|p| {
                    if p.disabled.is_empty() {
                        p.name.clone()
                    } else {
                        let off: Vec<&str> = p.disabled.iter().map(|k| k.switch_name()).collect();
                        format!("{} ({} off)", p.name, off.join(", "))
                    }
                })
                .collect();
            writeln!(f, "tier {}: {}", i + 1, names.join(", "))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn switches_round_trip() {
        for k in VoteKind::ALL {
            assert_eq!(VoteKind::from_switch(k.switch_name()), Some(Some(k)));
        }
        assert_eq!(
            VoteKind::from_switch("enableOverused"),
            Some(Some(VoteKind::Overused))
        );
        assert_eq!(VoteKind::from_switch("enableBestNode"), Some(None));
        assert_eq!(VoteKind::from_switch("enableMagic"), None);
    }

    /// Every switch of Volcano v1.15.1's `PluginOption` (pkg/scheduler/conf/scheduler_conf.go),
    /// spelt as its yaml tags spell them, loads.
    #[test]
    fn every_volcano_switch_loads() {
        for key in [
            "enableJobOrder",
            "enableHierarchy",
            "enableJobReady",
            "enableJobPipelined",
            "enableTaskOrder",
            "enablePreemptable",
            "enableReclaimable",
            "enablePreemptive",
            "enableQueueOrder",
            "EnabledClusterOrder",
            "enablePredicate",
            "enableBestNode",
            "enableNodeOrder",
            "enableTargetJob",
            "enableReservedNodes",
            "enableJobEnqueued",
            "enabledVictim",
            "enableJobStarving",
            "enabledOverused",
            "enabledAllocatable",
            "enabledHyperNodeOrder",
            "enabledSubJobReady",
            "enabledSubJobPipelined",
            "enabledSubJobOrder",
            "enabledHyperNodeGradient",
        ] {
            assert!(VoteKind::from_switch(key).is_some(), "{key}");
            let text = format!(
                "actions: allocate\ntiers:\n- plugins:\n  - name: gang\n    {key}: false\n"
            );
            SchedulerConf::parse(&text, "s.conf").unwrap_or_else(|e| panic!("{key}: {e}"));
        }
    }

    #[test]
    fn volcano_default_loads_unchanged_with_gpu_affinity_added() {
        let conf = SchedulerConf::parse(DEFAULT_CONF, "volcano-scheduler.conf").unwrap();
        assert_eq!(conf.actions, ["enqueue", "allocate", "backfill"]);
        assert_eq!(conf.tiers.len(), 2);
        let names: Vec<&str> = conf.tiers[1].plugins.iter().map(|p| &*p.name).collect();
        assert_eq!(
            names,
            [
                "overcommit",
                "drf",
                "predicates",
                "proportion",
                "nodeorder",
                "binpack",
                "gpu-affinity"
            ]
        );
        let gang = conf.plugin("gang").unwrap();
        assert!(!gang.enabled(VoteKind::Preemptable));
        assert!(gang.enabled(VoteKind::JobReady));
        assert!(conf.warnings.is_empty(), "{:?}", conf.warnings);
    }

    #[test]
    fn capacity_and_proportion_together_are_an_error() {
        let text = "actions: \"allocate\"\ntiers:\n- plugins:\n  - name: proportion\n- plugins:\n  - name: capacity\n";
        let msg = SchedulerConf::parse(text, "s.conf")
            .unwrap_err()
            .to_string();
        assert!(
            msg.starts_with(
                "s.conf: tiers[1].plugins[0].name: plugins \"proportion\" and \"capacity\""
            ),
            "{msg}"
        );
        assert!(msg.contains("configure one of them"), "{msg}");
    }

    #[test]
    fn bad_switch_and_argument_types_name_the_key() {
        let text =
            "actions: allocate\ntiers:\n- plugins:\n  - name: gang\n    enableJobReady: maybe\n";
        let msg = SchedulerConf::parse(text, "s.conf")
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("tiers[0].plugins[0].enableJobReady: expected true or false"),
            "{msg}"
        );

        let text =
            "actions: allocate\ntiers:\n- plugins:\n  - name: gang\n    enableEverything: true\n";
        let msg = SchedulerConf::parse(text, "s.conf")
            .unwrap_err()
            .to_string();
        assert!(msg.contains("enableEverything: unknown key"), "{msg}");
    }

    /// Lists written empty are no items, as Volcano (and serde_yaml before) read them.
    #[test]
    fn empty_lists_load() {
        let conf = SchedulerConf::parse(
            "actions: allocate\ntiers:\n- plugins:\n- plugins:\n  - name: gang\n    arguments:\nconfigurations:\n",
            "s.conf",
        )
        .unwrap();
        assert_eq!(conf.tiers.len(), 2);
        assert!(conf.tiers[0].plugins.is_empty());
        assert!(conf.plugin("gang").unwrap().arguments.is_empty());
        let conf = SchedulerConf::parse("actions: allocate\ntiers:\n", "s.conf").unwrap();
        assert!(conf.tiers.is_empty());
    }

    /// Syntax errors give the line and column, and the path when there is one.
    #[test]
    fn syntax_errors_name_line_and_column() {
        let msg = SchedulerConf::parse("actions: allocate\ntiers: 5\n", "s.conf")
            .unwrap_err()
            .to_string();
        assert!(
            msg.starts_with("s.conf: not a valid scheduler configuration: tiers: ")
                && msg.ends_with("at line 2, column 8"),
            "{msg}"
        );
    }

    #[test]
    fn malformed_and_empty_files_are_errors_not_panics() {
        for text in [
            "",
            "actions: [",
            "- just\n- a list\n",
            "tiers: 5",
            "actions: allocate\ntiers:\n- plugins:\n  - nme: gang\n",
        ] {
            let err = SchedulerConf::parse(text, "x.conf").unwrap_err();
            assert!(err.to_string().starts_with("x.conf"), "{err}");
        }
        let err = SchedulerConf::load(Path::new("/nonexistent/rb.conf")).unwrap_err();
        assert!(
            err.to_string()
                .contains("/nonexistent/rb.conf: cannot read"),
            "{err}"
        );
    }
}
