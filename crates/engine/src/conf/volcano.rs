//! A Volcano configuration as Volcano v1.15.1 writes it: the plugins and actions Volcano has
//! (a name rust-batch lacks loads with a warning saying what is skipped; a name neither has
//! is an error with a "did you mean"), the arguments Volcano reads that rust-batch ignores
//! (warned), and Volcano's ConfigMap around the file (unwrapped).
//!
//! The lists are copied from the Volcano source at tag v1.15.1 (the module in
//! `volcano.sh/volcano@v1.15.1`); each names the file it comes from.

use serde_json::Value;

use super::{Arguments, ConfError, SchedulerConf};

/// Volcano v1.15.1's plugins, as `pkg/scheduler/plugins/factory.go` registers them (each
/// name is its package's `PluginName`: the numaaware package registers "numa-aware"), with
/// what Volcano does with one, which is what a configuration naming it loses here.
pub const VOLCANO_PLUGINS: &[(&str, &str)] = &[
    (
        "drf",
        "dominant-resource fairness between jobs and namespaces",
    ),
    ("gang", "all-or-nothing placement of a job's minAvailable"),
    (
        "deviceshare",
        "GPU sharing and vGPU slices (volcano.sh/vgpu-*, gpu-memory); such requests are \
         counted as extended resources, not matched to device slices",
    ),
    ("predicates", "kube-scheduler's filters"),
    ("priority", "job and task order by PriorityClass"),
    ("nodeorder", "kube-scheduler's node scores"),
    ("conformance", "never evicting system-critical pods"),
    ("binpack", "packing nodes"),
    (
        "resource-strategy-fit",
        "per-resource MostAllocated/LeastAllocated node scores; binpack and nodeorder still \
         score nodes",
    ),
    (
        "tdm",
        "time-division multiplexing of revocable nodes (volcano.sh/revocable-zone); those \
         nodes are scheduled like any other",
    ),
    (
        "overcommit",
        "admitting jobs up to a factor of the cluster's idle resources",
    ),
    (
        "sla",
        "per-job waiting-time limits (sla-waiting-time); a job past its limit is not moved \
         ahead",
    ),
    (
        "task-topology",
        "affinity and anti-affinity between a job's tasks (volcano.sh/task-topology-* \
         annotations); they change neither task order nor node scores",
    ),
    (
        "numa-aware",
        "NUMA-aligned placement (Numatopology objects); nodes are neither filtered nor \
         scored by NUMA fit",
    ),
    (
        "cdp",
        "cool-down protection of elastic pods; they may be preempted right after they start",
    ),
    (
        "rescheduling",
        "periodic eviction to rebalance nodes (lowNodeUtilization); nothing is evicted for it",
    ),
    (
        "usage",
        "nodes filtered and scored by their measured CPU and memory usage; requests alone \
         count",
    ),
    (
        "pdb",
        "PodDisruptionBudgets when picking victims; the eviction API still enforces them",
    ),
    (
        "nodegroup",
        "queue affinity to node groups (volcano.sh/nodegroup-name, a queue's spec.affinity); \
         a queue's jobs may use any node",
    ),
    (
        "network-topology-aware",
        "HyperNode network-topology scores; gangs are still kept inside topology domains by \
         gpu-affinity and the PodGroup's networkTopology",
    ),
    ("proportion", "queue shares by weight"),
    (
        "capacity",
        "queue shares by capability and deserved resources",
    ),
    (
        "extender",
        "calls to an HTTP scheduler extender; none is made",
    ),
    (
        "resourcequota",
        "holding back jobs that would exceed their namespace's ResourceQuota at enqueue; the \
         API server still enforces quotas when pods are created",
    ),
];

/// Volcano v1.15.1's actions, as `pkg/scheduler/actions/factory.go` registers them (each
/// name is what its `Name()` returns), with what one does.
pub const VOLCANO_ACTIONS: &[(&str, &str)] = &[
    ("reclaim", "taking back resources a queue lent to others"),
    ("allocate", "placing pending jobs"),
    ("backfill", "placing best-effort pods"),
    ("preempt", "evicting lower-priority jobs in the same queue"),
    (
        "gangpreempt",
        "gang-aware preemption across topology domains; `preempt` does preemption here",
    ),
    (
        "gangreclaim",
        "gang-aware reclaim across topology domains; `reclaim` does reclaim here",
    ),
    ("enqueue", "admitting PodGroups when their minResources fit"),
    (
        "shuffle",
        "evicting the victims that plugins such as rescheduling choose; nothing is evicted \
         for it",
    ),
];

/// What a Volcano plugin's or action's argument changes there and rust-batch does without.
struct IgnoredArgument {
    /// The plugin or action that reads it.
    owner: &'static str,
    /// The key, or a prefix ending in '.' for a family of keys.
    key: &'static str,
    why: &'static str,
}

/// Arguments Volcano v1.15.1 reads for plugins and actions rust-batch also has, that
/// rust-batch does not act on. Sources, all under `pkg/scheduler/`:
/// plugins/predicates/predicates.go (`predicate.*`, `volumebinding.*`,
/// `dynamicresources.filterTimeoutSeconds`), plugins/nodeorder/nodeorder.go
/// (`imagelocality.weight`, and the volume-binding keys it shares with predicates),
/// plugins/capacity/capacity.go (`capacity.*`, `ancestorReclaimLevel`),
/// conf/constants.go (`predicateErrorCacheEnable`, read by allocate, backfill, preempt and
/// reclaim) and actions/preempt/preempt.go (the topology-aware preemption keys).
const IGNORED_ARGUMENTS: &[IgnoredArgument] = &[
    IgnoredArgument {
        owner: "predicates",
        key: "predicate.",
        why: "Volcano's switch for one of its filters; rust-batch always applies every \
              filter it has",
    },
    IgnoredArgument {
        owner: "predicates",
        key: "volumebinding.",
        why: "Volcano's volume-binding setting; rust-batch waits --volume-binding-timeout \
              for WaitForFirstConsumer claims",
    },
    IgnoredArgument {
        owner: "predicates",
        key: "dynamicresources.",
        why: "Volcano's dynamic-resource-allocation setting; rust-batch does not allocate \
              ResourceClaims",
    },
    IgnoredArgument {
        owner: "nodeorder",
        key: "imagelocality.",
        why: "Volcano's image-locality score; rust-batch does not see which images a node \
              holds",
    },
    IgnoredArgument {
        owner: "nodeorder",
        key: "selectorspread.",
        why: "an older kube-scheduler score; pod topology spread covers it",
    },
    IgnoredArgument {
        owner: "nodeorder",
        key: "volumebinding.",
        why: "Volcano's volume-binding score; rust-batch does not score nodes by volumes",
    },
    IgnoredArgument {
        owner: "capacity",
        key: "capacity.",
        why: "Volcano's dynamic-resource-allocation accounting for queues; rust-batch counts \
              requests only",
    },
    IgnoredArgument {
        owner: "capacity",
        key: "ancestorReclaimLevel",
        why: "Volcano's limit on how far up the queue tree reclaim looks",
    },
    IgnoredArgument {
        owner: "allocate",
        key: "predicateErrorCacheEnable",
        why: "Volcano's cache of filter failures; rust-batch keeps its own per cycle",
    },
    IgnoredArgument {
        owner: "backfill",
        key: "predicateErrorCacheEnable",
        why: "Volcano's cache of filter failures; rust-batch keeps its own per cycle",
    },
    IgnoredArgument {
        owner: "preempt",
        key: "predicateErrorCacheEnable",
        why: "Volcano's cache of filter failures; rust-batch keeps its own per cycle",
    },
    IgnoredArgument {
        owner: "reclaim",
        key: "predicateErrorCacheEnable",
        why: "Volcano's cache of filter failures; rust-batch keeps its own per cycle",
    },
    IgnoredArgument {
        owner: "preempt",
        key: "enableTopologyAwarePreemption",
        why: "Volcano's topology-aware victim search; rust-batch's preempt searches victims \
              its own way",
    },
    IgnoredArgument {
        owner: "preempt",
        key: "topologyAwarePreemptWorkerNum",
        why: "a tuning knob of Volcano's topology-aware preemption",
    },
    IgnoredArgument {
        owner: "preempt",
        key: "minCandidateNodesPercentage",
        why: "a tuning knob of Volcano's topology-aware preemption",
    },
    IgnoredArgument {
        owner: "preempt",
        key: "minCandidateNodesAbsolute",
        why: "a tuning knob of Volcano's topology-aware preemption",
    },
    IgnoredArgument {
        owner: "preempt",
        key: "maxCandidateNodesAbsolute",
        why: "a tuning knob of Volcano's topology-aware preemption",
    },
];

fn volcano_plugin(name: &str) -> Option<&'static str> {
    VOLCANO_PLUGINS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, what)| *what)
}

fn volcano_action(name: &str) -> Option<&'static str> {
    VOLCANO_ACTIONS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, what)| *what)
}

/// The name `wanted` was most likely meant to be, among `candidates`: equal but for case
/// and separators ("numaaware", "Task_Topology"), else the closest within a few edits.
pub(super) fn closest<'a>(
    wanted: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let squash = |s: &str| -> String {
        s.chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .map(|c| c.to_ascii_lowercase())
            .collect()
    };
    let wanted_squashed = squash(wanted);
    let most_edits = (wanted.chars().count() / 3).max(2);
    candidates
        .into_iter()
        .map(|c| {
            let distance = if squash(c) == wanted_squashed {
                0
            } else {
                strsim::levenshtein(wanted, c)
            };
            (distance, c)
        })
        .filter(|(distance, _)| *distance <= most_edits)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, c)| c)
}

/// "; did you mean "x"?" (saying when "x" is a Volcano name rust-batch skips), or nothing.
fn did_you_mean(wanted: &str, ours: &[&str], volcano: &[(&str, &str)]) -> String {
    let candidates = ours.iter().copied().chain(
        volcano
            .iter()
            .map(|(n, _)| *n)
            .filter(|n| !ours.contains(n)),
    );
    match closest(wanted, candidates) {
        Some(c) if ours.contains(&c) => format!("; did you mean {c:?}?"),
        Some(c) => format!(
            "; did you mean {c:?}? (a Volcano name rust-batch does not have: it would be \
             skipped with a warning)"
        ),
        None => String::new(),
    }
}

impl SchedulerConf {
    /// Checks every action and plugin name against what this program has (`actions`,
    /// `plugins`: the registry's names) and Volcano v1.15.1's lists. A name only Volcano has
    /// is dropped with a warning saying what is skipped (or refused when `strict`); a name
    /// neither has is an error with a "did you mean". Then warns about the arguments Volcano
    /// reads that rust-batch ignores.
    pub fn resolve_names(&mut self, actions: &[&str], plugins: &[&str]) -> Result<(), ConfError> {
        let invalid = |key: String, message: String| ConfError::Invalid {
            file: self.source.clone(),
            key,
            message,
        };
        let refused = "refused by --strict-config (without it, skipped with a warning)";
        let mut warnings = Vec::new();

        let mut kept_actions = Vec::new();
        for (i, name) in self.actions.iter().enumerate() {
            if actions.contains(&name.as_str()) {
                kept_actions.push(name.clone());
            } else if let Some(what) = volcano_action(name) {
                if self.strict {
                    return Err(invalid(
                        format!("actions[{i}]"),
                        format!(
                            "{name:?} is a Volcano action rust-batch does not have, {refused}: \
                             {what}"
                        ),
                    ));
                }
                warnings.push(format!(
                    "actions[{i}]: {name:?} is a Volcano action rust-batch does not have, \
                     skipped: {what}"
                ));
            } else {
                return Err(invalid(
                    format!("actions[{i}]"),
                    format!(
                        "unknown action {name:?}; known actions: {}{}",
                        actions.join(", "),
                        did_you_mean(name, actions, VOLCANO_ACTIONS)
                    ),
                ));
            }
        }
        if kept_actions.is_empty() {
            return Err(invalid(
                "actions".into(),
                format!(
                    "no action rust-batch has is listed, so nothing would be scheduled; known \
                     actions: {}",
                    actions.join(", ")
                ),
            ));
        }

        for (t, tier) in self.tiers.iter_mut().enumerate() {
            let mut kept = Vec::new();
            for (p, plugin) in std::mem::take(&mut tier.plugins).into_iter().enumerate() {
                let name = plugin.name.as_str();
                let at = format!("tiers[{t}].plugins[{p}].name");
                if plugins.contains(&name) {
                    kept.push(plugin);
                } else if let Some(what) = volcano_plugin(name) {
                    if self.strict {
                        return Err(ConfError::Invalid {
                            file: self.source.clone(),
                            key: at,
                            message: format!(
                                "{name:?} is a Volcano plugin rust-batch does not have, \
                                 {refused}: {what}"
                            ),
                        });
                    }
                    let arguments = if plugin.arguments.is_empty() {
                        ""
                    } else {
                        " with its arguments"
                    };
                    warnings.push(format!(
                        "{at}: {name:?} is a Volcano plugin rust-batch does not have, skipped\
                         {arguments}: {what}"
                    ));
                } else {
                    return Err(ConfError::Invalid {
                        file: self.source.clone(),
                        key: at,
                        message: format!(
                            "unknown plugin {name:?}; known plugins: {}{}",
                            plugins.join(", "),
                            did_you_mean(name, plugins, VOLCANO_PLUGINS)
                        ),
                    });
                }
            }
            tier.plugins = kept;
        }

        let mut kept_configurations = std::collections::BTreeMap::new();
        for (name, args) in std::mem::take(&mut self.configurations) {
            let at = args
                .path
                .strip_suffix(".arguments")
                .unwrap_or(&args.path)
                .to_string();
            if actions.contains(&name.as_str()) {
                kept_configurations.insert(name, args);
            } else if let Some(what) = volcano_action(&name) {
                if self.strict {
                    return Err(ConfError::Invalid {
                        file: self.source.clone(),
                        key: format!("{at}.name"),
                        message: format!(
                            "{name:?} is a Volcano action rust-batch does not have, {refused}: \
                             {what}"
                        ),
                    });
                }
                warnings.push(format!(
                    "{at}: arguments of {name:?}, a Volcano action rust-batch does not have, \
                     skipped"
                ));
            } else {
                return Err(ConfError::Invalid {
                    file: self.source.clone(),
                    key: format!("{at}.name"),
                    message: format!(
                        "unknown action {name:?}; known actions: {}{}",
                        actions.join(", "),
                        did_you_mean(&name, actions, VOLCANO_ACTIONS)
                    ),
                });
            }
        }

        self.actions = kept_actions;
        self.configurations = kept_configurations;
        for plugin in self.tiers.iter().flat_map(|t| &t.plugins) {
            warnings.extend(ignored_arguments(&plugin.name, &plugin.arguments));
        }
        for (name, args) in &self.configurations {
            warnings.extend(ignored_arguments(name, args));
        }
        for w in warnings {
            if !self.warnings.contains(&w) {
                self.warnings.push(w);
            }
        }
        Ok(())
    }
}

/// Why rust-batch ignores `key` of `owner`'s arguments, when Volcano reads it and
/// rust-batch does not (`resolve_names` warns about it; the owner need not know it).
pub(crate) fn ignored_argument(owner: &str, key: &str) -> Option<&'static str> {
    IGNORED_ARGUMENTS
        .iter()
        .find(|r| {
            r.owner == owner && (r.key == key || (r.key.ends_with('.') && key.starts_with(r.key)))
        })
        .map(|r| r.why)
}

/// Warnings for the arguments of `owner` that Volcano reads and rust-batch ignores.
fn ignored_arguments(owner: &str, args: &Arguments) -> Vec<String> {
    args.keys()
        .filter_map(|key| {
            let why = ignored_argument(owner, key)?;
            Some(format!(
                "{}.{key}: ignored: {why} (Volcano's {owner} reads it)",
                args.path
            ))
        })
        .collect()
}

/// The scheduler configuration inside a Kubernetes ConfigMap, as Volcano ships it
/// (`kubectl get configmap volcano-scheduler-configmap -o yaml`, or Volcano's installer
/// manifest with its many documents): the text of `data.volcano-scheduler.conf`, or of the
/// one `*.conf` key, and a description of where it came from. `Ok(None)` when `text` holds
/// no ConfigMap (a bare configuration, or YAML that the bare parse will report on).
pub(super) fn config_map_payload(text: &str) -> Result<Option<(String, String)>, String> {
    // Only a file that could be a ConfigMap is read twice.
    if !text.contains("ConfigMap") {
        return Ok(None);
    }
    let Ok(documents) = crate::yaml::from_str_multiple::<Value>(text) else {
        return Ok(None);
    };
    // A `kubectl get -o yaml` of several objects is a List with items.
    let objects: Vec<&Value> = documents
        .iter()
        .flat_map(|d| match d.get("kind").and_then(Value::as_str) {
            Some("List") => d
                .get("items")
                .and_then(Value::as_array)
                .map(|items| items.iter().collect())
                .unwrap_or_default(),
            _ => vec![d],
        })
        .collect();
    let config_maps: Vec<&Value> = objects
        .into_iter()
        .filter(|o| o.get("kind").and_then(Value::as_str) == Some("ConfigMap"))
        .collect();
    let name = |cm: &Value| -> String {
        let meta = cm.get("metadata");
        let field = |f: &str| meta.and_then(|m| m.get(f)).and_then(Value::as_str);
        match (field("namespace"), field("name")) {
            (Some(ns), Some(n)) => format!("{ns}/{n}"),
            (None, Some(n)) => n.to_string(),
            _ => "without a name".to_string(),
        }
    };
    let conf_keys = |cm: &Value| -> Vec<String> {
        let Some(data) = cm.get("data").and_then(Value::as_object) else {
            return Vec::new();
        };
        let keys: Vec<String> = data.keys().cloned().collect();
        if keys.iter().any(|k| k == "volcano-scheduler.conf") {
            vec!["volcano-scheduler.conf".to_string()]
        } else {
            keys.into_iter().filter(|k| k.ends_with(".conf")).collect()
        }
    };
    let chosen = match config_maps.as_slice() {
        [] => return Ok(None),
        [only] => *only,
        several => {
            let with_conf: Vec<&&Value> = several
                .iter()
                .filter(|cm| conf_keys(cm).len() == 1)
                .collect();
            match with_conf.as_slice() {
                [only] => **only,
                _ => {
                    let names: Vec<String> = several.iter().map(|cm| name(cm)).collect();
                    return Err(format!(
                        "{} ConfigMaps ({}), and not exactly one of them has a \
                         volcano-scheduler.conf (or a single *.conf) key; give the one to use",
                        several.len(),
                        names.join(", ")
                    ));
                }
            }
        }
    };
    let keys = conf_keys(chosen);
    let [key] = keys.as_slice() else {
        let data: Vec<String> = chosen
            .get("data")
            .and_then(Value::as_object)
            .map(|d| d.keys().cloned().collect())
            .unwrap_or_default();
        return Err(format!(
            "ConfigMap {}: data has {} (want volcano-scheduler.conf, or exactly one *.conf key)",
            name(chosen),
            if data.is_empty() {
                "no keys".to_string()
            } else {
                format!("keys {}", data.join(", "))
            }
        ));
    };
    let payload = chosen
        .get("data")
        .and_then(|d| d.get(key.as_str()))
        .and_then(Value::as_str)
        .ok_or_else(|| format!("ConfigMap {}: data.{key} is not a string", name(chosen)))?;
    Ok(Some((
        payload.to_string(),
        format!("ConfigMap {}, data.{key}", name(chosen)),
    )))
}

#[cfg(test)]
mod tests;
