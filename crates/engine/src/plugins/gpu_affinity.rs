//! gpu-affinity: a distributed training job runs at the speed of its slowest link, so its
//! gang goes on one GPU model and inside as few, as narrow topology domains as the cluster
//! allows.
//!
//! - GPU model: every GPU task of a gang lands on one GPU product (node label
//!   `nvidia.com/gpu.product`, as GPU Feature Discovery sets it) unless its pods pin models
//!   themselves. Hard by default (`gpu-affinity.gpuModel: hard|soft|off`).
//! - Topology: nested domains from node label keys (`gpu-affinity.topologyLevels`,
//!   narrowest first, Kueue's Topology style) or from Volcano HyperNodes (always, when
//!   present). A gang asks for a domain with Volcano's PodGroup `spec.networkTopology`
//!   (hard: the whole gang inside one domain at or below `highestTierAllowed`, or it waits)
//!   or Kueue's `kueue.x-k8s.io/podset-required-topology` / `podset-preferred-topology`
//!   annotations; a gang that asks nothing is placed softly: the narrowest single domain
//!   that holds it, else the fewest domains of the narrowest level, else anywhere.
//! - Fragmentation: among domains that hold the gang, the tightest fit first (large domains
//!   stay whole for large gangs); GPU tasks prefer nodes whose GPUs are already in use
//!   (whole nodes stay free).
//!
//! - Subgroups: a `subGroupPolicy` entry's own `networkTopology` keeps each of its
//!   subgroups inside one domain, each its own (`gpu_affinity/subgroups.rs`).
//!
//! Votes: HyperNodeOrder (the node sets a gang, or one subgroup, is placed inside, best
//! first), JobReady (a hard rule holds for what a gang has placed, whichever action placed
//! it) and NodeOrder (GPU packing). Free capacity per domain is kept up to date through event handlers, so
//! answering for one gang does not sum a zone's nodes.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ops::Range;
use std::rc::Rc;

use std::sync::{Arc, Mutex};

use serde::Deserialize;

use crate::conf::{ArgError, Arguments, List, Text, Weight};
use crate::framework::{vote, GangDomains, NodeRule, NodeSet, Plugin, Session};
use crate::model::devices::allocate::attribute as attribute_of;
use crate::model::devices::{AttrValue, GangDeviceRule};
use crate::model::topology::label_key_problem;
use crate::model::{
    JobInfo, NodeId, Resource, TaskInfo, TaskStatus, TopologyBound, TopologyLevel, TopologyMode,
    TopologyRequest,
};
use crate::snapshot::ClusterState;

mod subgroups;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelRule {
    Hard,
    Soft,
    Off,
}

#[derive(Clone, Debug, PartialEq)]
pub struct GpuAffinity {
    /// Node label keys, narrowest first.
    pub levels: Vec<String>,
    pub gpu_resource: String,
    pub model_label: String,
    pub model_rule: ModelRule,
    /// Weight of the GPU-packing node score.
    pub weight: f64,
    /// The GPU models of the last sessions' nodes (they depend on node specs only).
    pub models_kept: ModelsKept,
    /// DRA devices: the attribute whose value a gang's devices share (an NVLink clique),
    /// and whether that is required or preferred.
    pub device_domain: Option<(String, bool)>,
    /// DRA devices: the attribute naming a device's GPU model; one model per gang, hard or
    /// soft as `model_rule` says.
    pub device_model: Option<String>,
}

/// Each GPU node's model, kept while the node specs stay as they were
/// (`ClusterState::node_specs_version`): finding them reads every node's labels.
#[derive(Clone, Default)]
pub struct ModelsKept(Arc<Mutex<Option<VersionedModels>>>);

/// GPU models and the node specs version they were found at.
type VersionedModels = (u64, Arc<GpuModels>);

impl std::fmt::Debug for ModelsKept {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ModelsKept")
    }
}

/// A memo: plugins configured alike are alike whatever it holds.
impl PartialEq for ModelsKept {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// GPU nodes grouped by model.
pub struct GpuModels {
    /// Per node slot, its GPU model (index into `models`).
    model_of: Vec<Option<u32>>,
    models: Vec<(Arc<str>, Arc<Vec<NodeId>>)>,
}

/// The group of GPU nodes without the model label.
const UNLABELLED: &str = "(unlabelled)";

/// At most this many single domains per level are offered for one gang (the tightest
/// fits): the search tries each, and a gang that fits none of the best few rarely fits a
/// worse one.
const DOMAINS_PER_LEVEL: usize = 8;

/// gpu-affinity's arguments (see the module's doc).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct GpuAffinityArguments {
    /// Node label keys, narrowest first: a list, or one comma-separated string.
    #[serde(rename = "gpu-affinity.topologyLevels")]
    pub topology_levels: Option<List>,
    #[serde(rename = "gpu-affinity.gpuResource")]
    pub gpu_resource: Option<Text>,
    #[serde(rename = "gpu-affinity.gpuModelLabel")]
    pub gpu_model_label: Option<Text>,
    /// hard, soft or off.
    #[serde(rename = "gpu-affinity.gpuModel")]
    pub gpu_model: Option<Text>,
    #[serde(rename = "gpu-affinity.weight")]
    pub weight: Option<Weight>,
    /// A DRA device attribute (`domain/name`, e.g. `nvidia.com/nvlinkClique`) whose value
    /// every device of a gang shares.
    #[serde(rename = "gpu-affinity.deviceAttribute")]
    pub device_attribute: Option<Text>,
    /// hard or soft (default soft).
    #[serde(rename = "gpu-affinity.deviceAttributeMode")]
    pub device_attribute_mode: Option<Text>,
    /// A DRA device attribute naming the GPU model (e.g. `gpu.nvidia.com/productName`):
    /// one model per gang, as `gpu-affinity.gpuModel` rules for node labels.
    #[serde(rename = "gpu-affinity.deviceModelAttribute")]
    pub device_model_attribute: Option<Text>,
}

/// Why a device attribute name cannot be one: attributes are `domain/name` (a name a
/// slice gives unqualified belongs to its driver, so the rule must say which).
fn device_attribute_problem(name: &str) -> Option<&'static str> {
    match name.rsplit_once('/') {
        None => Some("a device attribute is qualified: domain/name"),
        Some((domain, id)) if domain.is_empty() || id.is_empty() => {
            Some("neither the domain nor the name may be empty")
        }
        Some(_) => None,
    }
}

pub fn build(args: &Arguments) -> Result<Box<dyn Plugin>, ArgError> {
    let a: GpuAffinityArguments = args.parse()?;
    let err = |key: &str, message: String| ArgError {
        key: format!("{}.{key}", args.path),
        message,
    };
    let levels = a.topology_levels.unwrap_or_default().0;
    for key in &levels {
        if let Some(why) = label_key_problem(key) {
            return Err(err(
                "gpu-affinity.topologyLevels",
                format!("{key:?} is not a node label key ({why})"),
            ));
        }
    }
    let model_label = a
        .gpu_model_label
        .map_or_else(|| "nvidia.com/gpu.product".into(), |t| t.0);
    if let Some(why) = label_key_problem(&model_label) {
        return Err(err(
            "gpu-affinity.gpuModelLabel",
            format!("{model_label:?} is not a node label key ({why})"),
        ));
    }
    let model_rule = match a.gpu_model.as_ref().map(|t| t.0.as_str()) {
        None | Some("hard") => ModelRule::Hard,
        Some("soft") => ModelRule::Soft,
        Some("off") => ModelRule::Off,
        Some(other) => {
            return Err(err(
                "gpu-affinity.gpuModel",
                format!("expected hard, soft or off, got {other:?}"),
            ))
        }
    };
    let device_domain = match a.device_attribute.map(|t| t.0) {
        None => None,
        Some(name) => {
            if let Some(why) = device_attribute_problem(&name) {
                return Err(err(
                    "gpu-affinity.deviceAttribute",
                    format!("{name:?} is not a device attribute ({why})"),
                ));
            }
            let hard = match a.device_attribute_mode.as_ref().map(|t| t.0.as_str()) {
                None | Some("soft") => false,
                Some("hard") => true,
                Some(other) => {
                    return Err(err(
                        "gpu-affinity.deviceAttributeMode",
                        format!("expected hard or soft, got {other:?}"),
                    ))
                }
            };
            Some((name, hard))
        }
    };
    let device_model = match a.device_model_attribute.map(|t| t.0) {
        Some(name) => match device_attribute_problem(&name) {
            Some(why) => {
                return Err(err(
                    "gpu-affinity.deviceModelAttribute",
                    format!("{name:?} is not a device attribute ({why})"),
                ))
            }
            None => Some(name),
        },
        None => None,
    };
    Ok(Box::new(GpuAffinity {
        device_domain,
        device_model,
        levels,
        gpu_resource: a
            .gpu_resource
            .map_or_else(|| "nvidia.com/gpu".into(), |t| t.0),
        model_label,
        model_rule,
        weight: a.weight.map(Weight::as_f64).unwrap_or(1.0),
        models_kept: ModelsKept::default(),
    }))
}

/// What one session knows: the topologies, GPU models per node, and free capacity per
/// domain and per model, kept current by the event handlers.
struct View {
    slots: usize,
    /// Every level the session knows: the arguments' label levels, then the HyperNode
    /// tiers, then label keys gangs name that the arguments do not list (Kueue TAS).
    levels: Vec<Arc<TopologyLevel>>,
    label_levels: Range<usize>,
    hypernode_levels: Range<usize>,
    extra: HashMap<String, usize>,
    /// Per level, per domain: what its schedulable nodes will have free (summed when a
    /// gang first asks, from the session's state then: most sessions have no gang to ask).
    domain_free: RefCell<Option<Vec<Vec<Resource>>>>,
    /// The same, counting only the nodes some gangs' pods can use (per distinct static
    /// fit, e.g. the pods that do not tolerate GPU taints), also kept current by events.
    restricted: RefCell<Vec<Restricted>>,
    /// Nodes in the cluster: a gang whose static predicates pass this many can use any.
    node_count: usize,
    gpu: Arc<GpuModels>,
    /// The snapshot's index (shared, not copied: it was most of opening a session).
    node_ids: Arc<HashMap<Arc<str>, NodeId>>,
}

impl Plugin for GpuAffinity {
    fn name(&self) -> &'static str {
        "gpu-affinity"
    }

    fn on_session_open(&self, ssn: &mut Session) {
        let state = ssn.state();
        let slots = state.node_slots();
        let mut levels: Vec<Arc<TopologyLevel>> = self
            .levels
            .iter()
            .map(|key| state.label_level(key))
            .collect();
        let label_levels = 0..levels.len();
        levels.extend(state.hypernodes.levels.iter().cloned().map(Arc::new));
        let hypernode_levels = label_levels.end..levels.len();
        let mut extra = HashMap::new();
        for job in state.tally().pending().iter().map(|id| state.job(id)) {
            if let Some(TopologyBound::LabelKey(key)) = job.topology_request().map(|r| &r.bound) {
                if !self.levels.contains(key) && !extra.contains_key(key) {
                    extra.insert(key.clone(), levels.len());
                    levels.push(state.label_level(key));
                }
            }
        }
        let gpu = self.gpu_models(state);
        let view = Rc::new(View {
            slots,
            node_count: state.node_index().len(),
            levels,
            label_levels,
            hypernode_levels,
            extra,
            domain_free: RefCell::default(),
            restricted: RefCell::default(),
            gpu,
            node_ids: state.node_index(),
        });
        let track = |sign: i64, view: Rc<View>| {
            Box::new(move |e: &crate::framework::Event| {
                use crate::framework::Change;
                // Evictions turn used into releasing: what will be free does not change.
                if !matches!(e.change, Change::Placed | Change::Unplaced) {
                    return;
                }
                let Some(node) = e.node else { return };
                let Some(id) = view.node_ids.get(&node.name) else {
                    return;
                };
                let change = |r: &mut Resource| {
                    if sign < 0 {
                        r.sub(&e.task.resreq);
                    } else {
                        r.add(&e.task.resreq);
                    }
                };
                let mut sums = view.domain_free.borrow_mut();
                let mut restricted = view.restricted.borrow_mut();
                for (l, level) in view.levels.iter().enumerate() {
                    if let Some(d) = level.domain_of[id.0 as usize] {
                        if let Some(sums) = sums.as_mut() {
                            change(&mut sums[l][d as usize]);
                        }
                        for r in restricted.iter_mut().filter(|r| r.uses(*id)) {
                            change(&mut r.sums[l][d as usize]);
                        }
                    }
                }
            }) as crate::framework::EventFn
        };
        ssn.add_event_handler(Some(track(-1, view.clone())), Some(track(1, view.clone())));
        let plugin = self.clone();
        let v = view.clone();
        let device_rules = self.device_rules();
        ssn.add(
            vote::GangDomains,
            Box::new(move |state, id, usable| {
                plugin.gang_domains(&v, state, id, usable).or_else(|| {
                    let rules = device_rules.as_deref()?;
                    device_domains(state, id, usable, rules)
                })
            }),
        );
        let plugin = self.clone();
        let v = view.clone();
        ssn.add(
            vote::SubGroupDomains,
            Box::new(move |state, id, key, usable| {
                plugin.subgroup_domains(&v, state, id, key, usable)
            }),
        );
        let plugin = self.clone();
        let v = view.clone();
        ssn.add(
            vote::JobReady,
            Box::new(move |job| {
                plugin.hard_rules_hold(&v, job)
                    && (job.subgroups.is_empty() || plugin.subgroup_rules_hold(&v, job))
            }),
        );
        if let Some(rules) = self.device_rules() {
            // The gangs a session may place pods of with claims, by pod uid: a rule's value
            // comes from the devices of the pod's siblings.
            let mut gang_of: HashMap<Arc<str>, crate::model::JobId> = HashMap::new();
            for id in state_pending(ssn.state()) {
                let job = ssn.state().job(id);
                if job.tasks().iter().filter(|t| !t.claims.is_empty()).count() < 2 {
                    continue;
                }
                for t in job.tasks().iter().filter(|t| !t.claims.is_empty()) {
                    gang_of.insert(t.uid.clone(), id);
                }
            }
            ssn.add(
                vote::DeviceRules,
                Box::new(move |state, t| match gang_of.get(&t.uid) {
                    Some(&id) => gang_device_rules(state, id, &t.uid, &rules),
                    None => Vec::new(),
                }),
            );
        }
        if self.weight > 0.0 {
            let (gpu, weight) = (self.gpu_resource.clone(), self.weight);
            ssn.add(
                vote::NodeOrder,
                Box::new(move |t, n| {
                    let want = t.resreq.get(&gpu);
                    let total = n.allocatable.get(&gpu);
                    if want <= 0 || total <= 0 {
                        return 0.0;
                    }
                    let used = total - n.future_idle(&gpu) + want;
                    weight * 100.0 * (used.min(total) as f64 / total as f64)
                }),
            );
        }
    }
}

/// A gang's rules for this session: the domain levels it may use (indices into
/// `View::levels`, narrowest first) and whether it must.
struct Wanted {
    levels: Vec<usize>,
    hard: bool,
    rule: String,
}

/// Where a gang whose devices must share attribute values (`device_rules`) may go: per
/// combination of values, the nodes with free devices that have it (now or once releases
/// are through), those that hold the gang's pending devices first, the tightest fit first
/// (large groups stay whole for large gangs), then the largest. Only the gang's values once
/// its devices have some.
fn device_domains(
    state: &ClusterState,
    id: crate::model::JobId,
    usable: &[crate::framework::StaticNodes],
    rules: &[(String, bool)],
) -> Option<GangDomains> {
    let job = state.job(id);
    let with_claims = || job.tasks().iter().filter(|t| !t.claims.is_empty());
    if job.pending_count() == 0 || with_claims().count() < 2 {
        return None;
    }
    let need: i64 = with_claims()
        .filter(|t| t.status == TaskStatus::Pending)
        .map(|t| {
            t.device_charge
                .scalars
                .iter()
                .map(|(_, v)| v / 1000)
                .sum::<i64>()
        })
        .sum();
    let fixed: Vec<Option<AttrValue>> = match job
        .tasks()
        .iter()
        .find(|t| t.status == TaskStatus::Pending && !t.claims.is_empty())
    {
        Some(t) => gang_device_rules(state, id, &t.uid, rules)
            .into_iter()
            .map(|r| r.value)
            .collect(),
        None => return None,
    };
    // Per combination of values: free devices and the nodes that have some.
    let mut groups: Vec<(Vec<AttrValue>, i64, Vec<NodeId>)> = Vec::new();
    for (nid, node) in state.nodes() {
        let Some(inv) = node.devices.as_deref() else {
            continue;
        };
        if !node.schedulable() || inv.problem.is_some() || !usable.iter().any(|u| u.passes(nid)) {
            continue;
        }
        let free = node.free_devices(true);
        let mut here: Vec<(Vec<AttrValue>, i64)> = Vec::new();
        'devices: for (i, d) in inv.devices.iter().enumerate() {
            if !free[i] {
                continue;
            }
            let mut key = Vec::with_capacity(rules.len());
            for ((attr, _), want) in rules.iter().zip(&fixed) {
                match (attribute_of(d, attr), want) {
                    (Some(v), Some(w)) if v != w => continue 'devices,
                    (Some(v), _) => key.push(v.clone()),
                    (None, _) => continue 'devices,
                }
            }
            match here.iter_mut().find(|(k, _)| *k == key) {
                Some((_, n)) => *n += 1,
                None => here.push((key, 1)),
            }
        }
        for (key, n) in here {
            match groups.iter_mut().find(|(k, _, _)| *k == key) {
                Some((_, total, nodes)) => {
                    *total += n;
                    nodes.push(nid);
                }
                None => groups.push((key, n, vec![nid])),
            }
        }
    }
    let hard = rules.iter().any(|(_, h)| *h);
    let names: Vec<&str> = rules.iter().map(|(a, _)| a.as_str()).collect();
    let rule = format!(
        "gpu-affinity: the gang's devices share one value of {} ({})",
        names.join(" and "),
        if hard { "hard" } else { "soft" }
    );
    let largest = groups.iter().map(|(_, n, _)| *n).max().unwrap_or(0);
    let shortfall = (largest < need)
        .then(|| format!("the gang needs {need} devices, the largest group has {largest} free"));
    // Those that hold the gang, tightest first; then the rest, largest first.
    groups.sort_by(|a, b| {
        let (fa, fb) = (a.1 >= need, b.1 >= need);
        fb.cmp(&fa)
            .then(if fa { a.1.cmp(&b.1) } else { b.1.cmp(&a.1) })
    });
    let slots = state.node_slots();
    let options = groups
        .into_iter()
        .take(DOMAINS_PER_LEVEL)
        .map(|(key, _, nodes)| NodeSet {
            name: names
                .iter()
                .zip(&key)
                .map(|(a, v)| format!("{a}={}", v.describe()))
                .collect::<Vec<_>>()
                .join(","),
            rules: vec![NodeRule::new(None, Arc::new(nodes), slots)],
        })
        .collect();
    Some(GangDomains {
        options,
        hard,
        rule,
        shortfall,
        // A device rule is kept inside the claim search, victims included: preemption
        // is not held to node domains for it.
        allowed: Vec::new(),
    })
}

/// The gangs with pending pods.
fn state_pending(state: &ClusterState) -> Vec<crate::model::JobId> {
    state.tally().pending().iter().collect()
}

/// `rules` (attribute, hard) with the values the gang's devices already have: those of the
/// first allocated claim of another pod of the gang that has the attribute.
fn gang_device_rules(
    state: &ClusterState,
    id: crate::model::JobId,
    uid: &str,
    rules: &[(String, bool)],
) -> Vec<GangDeviceRule> {
    let job = state.job(id);
    rules
        .iter()
        .map(|(attribute, hard)| {
            let value = job
                .tasks()
                .iter()
                .filter(|t| &*t.uid != uid)
                .flat_map(|t| t.claims.iter())
                .filter_map(|c| c.allocation.as_deref())
                .find_map(|a| {
                    let node = state.node(state.node_by_name(&a.node)?);
                    let inv = node.devices.as_deref()?;
                    a.devices.iter().find_map(|d| {
                        let i = inv.position(&d.key())?;
                        attribute_of(&inv.devices[i as usize], attribute).cloned()
                    })
                });
            GangDeviceRule {
                attribute: attribute.clone(),
                value,
                hard: *hard,
            }
        })
        .collect()
}

impl GpuAffinity {
    /// The rules on a gang's DRA devices this configuration asks for (attribute, hard).
    fn device_rules(&self) -> Option<Vec<(String, bool)>> {
        let mut rules = Vec::new();
        if let Some(model) = &self.device_model {
            match self.model_rule {
                ModelRule::Hard => rules.push((model.clone(), true)),
                ModelRule::Soft => rules.push((model.clone(), false)),
                ModelRule::Off => {}
            }
        }
        if let Some((domain, hard)) = &self.device_domain {
            rules.push((domain.clone(), *hard));
        }
        (!rules.is_empty()).then_some(rules)
    }

    /// The GPU models of the state's nodes, from the last session's if no node changed.
    fn gpu_models(&self, state: &ClusterState) -> Arc<GpuModels> {
        let version = state.node_specs_version();
        let mut kept = self.models_kept.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((v, models)) = kept.as_ref() {
            if *v == version {
                return models.clone();
            }
        }
        let mut model_of = vec![None; state.node_slots()];
        let mut models: Vec<(Arc<str>, Vec<NodeId>)> = Vec::new();
        for (id, node) in state.nodes() {
            if node.allocatable.get(&self.gpu_resource) <= 0 {
                continue;
            }
            // GPU nodes without the label are one more group: their model is unknown, so
            // a gang is not mixed across them and labelled ones.
            let model = node
                .labels
                .get(&self.model_label)
                .map(String::as_str)
                .unwrap_or(UNLABELLED);
            let i = match models.iter().position(|(m, _)| **m == *model) {
                Some(i) => i,
                None => {
                    models.push((Arc::from(model), Vec::new()));
                    models.len() - 1
                }
            };
            models[i].1.push(id);
            model_of[id.0 as usize] = Some(i as u32);
        }
        // Without a labelled GPU node there is nothing to tell models apart by.
        if models.iter().all(|(m, _)| &**m == UNLABELLED) {
            models.clear();
            model_of.iter_mut().for_each(|m| *m = None);
        }
        let models = Arc::new(GpuModels {
            model_of,
            models: models
                .into_iter()
                .map(|(m, ns)| (m, Arc::new(ns)))
                .collect(),
        });
        *kept = Some((version, models.clone()));
        models
    }

    /// The domain levels a gang may use, narrowest first, from its request (or the
    /// default: every level, softly); Err(why) for a hard request nothing can meet.
    fn wanted(
        &self,
        view: &View,
        request: Option<&TopologyRequest>,
    ) -> Result<Option<Wanted>, String> {
        let default_levels = || -> Vec<usize> {
            if view.hypernode_levels.is_empty() {
                view.label_levels.clone().collect()
            } else {
                view.hypernode_levels.clone().collect()
            }
        };
        let Some(req) = request else {
            let levels = default_levels();
            return Ok((!levels.is_empty()).then(|| Wanted {
                levels,
                hard: false,
                rule: "topology (soft)".into(),
            }));
        };
        let hard = req.mode == TopologyMode::Hard;
        if let Some(problem) = &req.problem {
            if hard {
                return Err(problem.clone());
            }
            // A malformed soft request is no request (and was reported where it came from).
            return self.wanted(view, None);
        }
        let rule = format!(
            "{} {} within {}",
            req.source,
            if hard { "hard" } else { "soft" },
            req.describe_bound()
        );
        // Volcano's highestTierName is the tier whose HyperNodes carry that name.
        let named_tier;
        let bound = match &req.bound {
            TopologyBound::TierName(name) => {
                match view
                    .levels
                    .iter()
                    .find(|l| l.tier_name.as_deref() == Some(name.as_str()))
                    .and_then(|l| l.tier)
                {
                    Some(tier) => {
                        named_tier = TopologyBound::Tier(tier);
                        &named_tier
                    }
                    None if hard => {
                        return Err(format!("{rule}: no HyperNode tier is named {name:?}"))
                    }
                    None => return self.wanted(view, None),
                }
            }
            bound => bound,
        };
        let levels: Vec<usize> = match bound {
            TopologyBound::Unbounded | TopologyBound::TierName(_) => default_levels(),
            TopologyBound::Tier(tier) => {
                let within: Vec<usize> = view
                    .hypernode_levels
                    .clone()
                    .filter(|l| view.levels[*l].tier.is_some_and(|t| t <= *tier))
                    .collect();
                match within.last() {
                    Some(_) => within,
                    None if hard && view.hypernode_levels.is_empty() => {
                        return Err(format!(
                            "{rule}: no HyperNodes describe the network topology"
                        ))
                    }
                    None if hard => {
                        return Err(format!(
                            "{rule}: no HyperNode has a tier at or below {tier}"
                        ))
                    }
                    None => default_levels(),
                }
            }
            TopologyBound::LabelKey(key) => {
                match view
                    .label_levels
                    .clone()
                    .find(|l| &*view.levels[*l].key == key)
                {
                    Some(top) => (view.label_levels.start..=top).collect(),
                    None => view.extra.get(key).copied().into_iter().collect(),
                }
            }
        };
        if hard && levels.iter().all(|l| view.levels[*l].domains.is_empty()) {
            return Err(format!("{rule}: no node has such a domain"));
        }
        Ok(Some(Wanted { levels, hard, rule }))
    }

    /// Whether the gang's GPU tasks must share one model, and the model its placed GPU
    /// members already use.
    fn model_rule(&self, view: &View, job: &JobInfo) -> Option<Option<u32>> {
        if self.model_rule == ModelRule::Off || view.gpu.models.is_empty() {
            return None;
        }
        let gpu_tasks: Vec<_> = job
            .tasks()
            .iter()
            .filter(|t| t.resreq.get(&self.gpu_resource) > 0 && t.status.is_valid())
            .collect();
        if gpu_tasks.len() < 2 || gpu_tasks.iter().any(|t| self.pins_model(t)) {
            return None;
        }
        let placed = gpu_tasks
            .iter()
            .filter(|t| t.status != TaskStatus::Pending)
            .filter_map(|t| t.node.as_deref())
            .filter_map(|n| view.node_ids.get(n))
            .find_map(|id| view.gpu.model_of[id.0 as usize]);
        Some(placed)
    }

    fn pins_model(&self, t: &crate::model::TaskInfo) -> bool {
        let p = &t.placement;
        p.node_selector.contains_key(&self.model_label)
            || p.node_affinity.iter().any(|term| {
                term.match_expressions
                    .iter()
                    .any(|e| e.key == self.model_label)
            })
    }

    fn gang_domains(
        &self,
        view: &View,
        state: &ClusterState,
        id: crate::model::JobId,
        usable: &[crate::framework::StaticNodes],
    ) -> Option<GangDomains> {
        let job = state.job(id);
        if job.pending_count() == 0 {
            return None;
        }
        let request = job.topology_request();
        // One pod is in one domain and on one model whatever happens, unless it asks for a
        // domain outright (it must then land inside one, or wait).
        if job.tasks().len() < 2 && request.is_none_or(|r| r.mode == TopologyMode::Soft) {
            return None;
        }
        let unconstrained = usable.iter().any(|u| u.nodes().len() == view.node_count);
        // The rule binds only where the gang's pods could mix models: on nodes they can use.
        let model = self.model_rule(view, job).and_then(|placed| {
            if placed.is_some() || unconstrained {
                return Some(placed);
            }
            let usable_models = view
                .gpu
                .models
                .iter()
                .filter(|(_, nodes)| nodes.iter().any(|n| usable.iter().any(|u| u.passes(*n))))
                .count();
            (usable_models > 1).then_some(None)
        });
        // A gang whose pods say themselves where to go (spread, pod affinity, preferred
        // nodes) is not packed into one domain by default: their rules come first.
        let own_rules = request.is_none()
            && job.tasks().iter().any(|t| {
                t.status == TaskStatus::Pending
                    && (t.placement.rules().is_some()
                        || !t.placement.preferred_node_affinity.is_empty())
            });
        let wanted = match self.wanted(view, request) {
            Ok(_) if own_rules => None,
            Ok(w) => w,
            Err(why) => {
                return Some(GangDomains {
                    options: Vec::new(),
                    hard: true,
                    rule: why,
                    shortfall: None,
                    allowed: Vec::new(),
                })
            }
        };
        if wanted.is_none() && model.is_none() {
            return None;
        }
        let need = pending_need(job);
        let dominant = self.dominant(&need);
        let placed = placed_nodes(view, job);
        with_sums(view, state, usable, |sums| {
            self.gang_options(view, &wanted, model, sums, &need, &dominant, &placed)
        })
    }

    /// The node sets of `gang_domains` given the room per domain (`sums`).
    #[allow(clippy::too_many_arguments)]
    fn gang_options(
        &self,
        view: &View,
        wanted: &Option<Wanted>,
        model: Option<Option<u32>>,
        sums: &[Vec<Resource>],
        need: &Resource,
        dominant: &str,
        placed: &[NodeId],
    ) -> Option<GangDomains> {
        let domain_free = |l: usize, d: usize| &sums[l][d];
        let models: Vec<u32> = match model {
            None => Vec::new(),
            Some(Some(m)) => vec![m],
            Some(None) => (0..view.gpu.models.len() as u32).collect(),
        };
        let model_rule = |m: u32| {
            NodeRule::new(
                Some(Arc::from(self.gpu_resource.as_str())),
                view.gpu.models[m as usize].1.clone(),
                view.slots,
            )
        };
        let mut options = Vec::new();
        let mut shortfall = None;
        if let Some(w) = &wanted {
            let (fitting, short) = fitting_domains(view, &w.levels, sums, need, dominant, placed);
            shortfall = short;
            for (name, base) in fitting {
                push_with_models(&mut options, name, base, &models, &model_rule, view);
            }
            // Soft: the fewest domains of the narrowest level that hold the gang together.
            if !w.hard {
                if let Some(&l) = w.levels.first() {
                    let level = &view.levels[l];
                    let rooms: Vec<&Resource> = (0..level.domains.len())
                        .map(|d| domain_free(l, d))
                        .collect();
                    let mut by_room: Vec<(i64, usize)> = rooms
                        .iter()
                        .enumerate()
                        .map(|(d, room)| (room.get(dominant), d))
                        .collect();
                    by_room.sort_by(|a, b| b.cmp(a));
                    let mut nodes = Vec::new();
                    let mut room = Resource::new();
                    let mut names = Vec::new();
                    for (k, &(_, d)) in by_room.iter().enumerate() {
                        let domain = &level.domains[d];
                        nodes.extend(&domain.nodes);
                        room.add(rooms[d]);
                        names.push(domain.name.to_string());
                        if k >= 1 && need.fits(&room) {
                            nodes.sort_unstable();
                            let base = NodeRule::new(None, Arc::new(nodes), view.slots);
                            let name = format!("{} {}", level.key, names.join("+"));
                            push_with_models(&mut options, name, base, &models, &model_rule, view);
                            break;
                        }
                    }
                }
            }
        }
        let topo_hard = wanted.as_ref().is_some_and(|w| w.hard);
        // Where preemption may make room for a hard gang: every allowed domain.
        let mut allowed = Vec::new();
        if let Some(w) = wanted.as_ref().filter(|w| w.hard) {
            for (name, base) in allowed_domains(view, &w.levels, placed) {
                push_with_models(&mut allowed, name, base, &models, &model_rule, view);
            }
        }
        if !topo_hard {
            for &m in &models {
                options.push(NodeSet {
                    name: format!("{}={}", self.model_label, view.gpu.models[m as usize].0),
                    rules: vec![model_rule(m)],
                });
            }
        }
        let model_hard = model.is_some() && self.model_rule == ModelRule::Hard;
        let rule = match (&wanted, model_hard) {
            (Some(w), true) if w.hard => format!("{}, one {} per gang", w.rule, self.model_label),
            (Some(w), _) if w.hard => w.rule.clone(),
            _ => format!("GPU model rule (one {} per gang)", self.model_label),
        };
        Some(GangDomains {
            options,
            hard: topo_hard || model_hard,
            rule,
            shortfall,
            allowed,
        })
    }

    /// The scarcest resource of `need` (GPUs if it asks any).
    fn dominant(&self, need: &Resource) -> String {
        if need.get(&self.gpu_resource) > 0 {
            self.gpu_resource.clone()
        } else {
            crate::model::resource::CPU.to_string()
        }
    }

    /// JobReady: what the gang has placed keeps its hard rules (one domain within the
    /// bound, one GPU model), whichever action placed it. Members bound before the rule
    /// applied (e.g. before the HyperNodes existed) are not held against new ones.
    fn hard_rules_hold(&self, view: &View, job: &JobInfo) -> bool {
        let model_hard = self.model_rule == ModelRule::Hard && self.model_rule(view, job).is_some();
        // The levels of a hard topology request (Err: a hard request nothing can meet).
        let levels = match self.wanted(view, job.topology_request()) {
            Ok(Some(w)) if w.hard => Ok(Some(w.levels)),
            Ok(_) => Ok(None),
            Err(_) => Err(()),
        };
        if !model_hard && matches!(levels, Ok(None)) {
            return true;
        }
        let rules = HardRules { model_hard, levels };
        let placed = |t: &TaskInfo| t.status.is_allocated() || t.status == TaskStatus::Pipelined;
        if self.placement_keeps_rules(view, job, &rules, &placed) {
            return true;
        }
        let earlier = |t: &TaskInfo| {
            matches!(
                t.status,
                TaskStatus::Bound | TaskStatus::Binding | TaskStatus::Running
            )
        };
        let fresh =
            |t: &TaskInfo| matches!(t.status, TaskStatus::Allocated | TaskStatus::Pipelined);
        !self.placement_keeps_rules(view, job, &rules, &earlier)
            && self.placement_keeps_rules(view, job, &rules, &fresh)
    }

    /// Whether the members `which` selects keep the gang's hard rules.
    fn placement_keeps_rules(
        &self,
        view: &View,
        job: &JobInfo,
        rules: &HardRules,
        which: &dyn Fn(&TaskInfo) -> bool,
    ) -> bool {
        let mut nodes = Vec::new();
        let mut models = Vec::new();
        for t in job.tasks().iter().filter(|t| which(t)) {
            let Some(&id) = t.node.as_deref().and_then(|n| view.node_ids.get(n)) else {
                continue;
            };
            nodes.push(id);
            if t.resreq.get(&self.gpu_resource) > 0 {
                models.push(view.gpu.model_of[id.0 as usize]);
            }
        }
        // Even one pod breaks a hard request when it lands outside every allowed domain
        // (or the request is malformed).
        if nodes.is_empty() {
            return true;
        }
        if rules.model_hard && models.windows(2).any(|w| w[0] != w[1]) {
            return false;
        }
        match &rules.levels {
            Ok(Some(levels)) => view.one_domain(levels, &nodes),
            Ok(None) => true,
            Err(()) => false,
        }
    }
}

/// A gang's hard rules, as JobReady checks them.
struct HardRules {
    model_hard: bool,
    /// The levels of a hard topology request; Err for a hard request nothing can meet.
    levels: Result<Option<Vec<usize>>, ()>,
}

/// At most this many distinct static fits have their domain room kept per session; more
/// are summed afresh for each gang.
const RESTRICTED_CACHED: usize = 8;

/// Per level, per domain, the room on the nodes some pods can use.
#[derive(Clone)]
struct Restricted {
    usable: Vec<crate::framework::StaticNodes>,
    sums: Vec<Vec<Resource>>,
}

/// Calls `f` with the room per level and domain that pods passing `usable` can use (every
/// schedulable node's when they can use any): room on nodes the pods cannot use (another
/// pool, a taint) is no room. Summed once a session per distinct `usable`, then kept current
/// by the event handlers.
fn with_sums<R>(
    view: &View,
    state: &ClusterState,
    usable: &[crate::framework::StaticNodes],
    f: impl FnOnce(&[Vec<Resource>]) -> R,
) -> R {
    let unconstrained = usable.iter().any(|u| u.nodes().len() == view.node_count);
    view.domain_free
        .borrow_mut()
        .get_or_insert_with(|| domain_sums(&view.levels, state, None));
    if unconstrained {
        return f(view.domain_free.borrow().as_ref().expect("summed above"));
    }
    let restricted = view.restricted.borrow();
    if let Some(r) = restricted.iter().find(|r| r.is_for(usable)) {
        return f(&r.sums);
    }
    drop(restricted);
    let sums = domain_sums(&view.levels, state, Some(usable));
    let mut cached = view.restricted.borrow_mut();
    if cached.len() < RESTRICTED_CACHED {
        cached.push(Restricted {
            usable: usable.to_vec(),
            sums: sums.clone(),
        });
    }
    drop(cached);
    f(&sums)
}

/// The single domains of `levels` (narrowest first) that hold `need` and every node in
/// `placed`, tightest fit of the `dominant` resource first, at most DOMAINS_PER_LEVEL a
/// level, each as its name and node rule; and, when a level's best domain falls short, by
/// how much (the widest level's, for the waiting gang's message).
fn fitting_domains(
    view: &View,
    levels: &[usize],
    sums: &[Vec<Resource>],
    need: &Resource,
    dominant: &str,
    placed: &[NodeId],
) -> (Vec<(String, NodeRule)>, Option<String>) {
    let mut out = Vec::new();
    let mut shortfall = None;
    for &l in levels {
        let level = &view.levels[l];
        let mut fits: Vec<(i64, usize)> = Vec::new();
        let mut best: Option<(i64, usize)> = None;
        for (d, room) in sums[l].iter().enumerate().take(level.domains.len()) {
            if !placed
                .iter()
                .all(|n| level.domain_of[n.0 as usize] == Some(d as u32))
            {
                continue;
            }
            let left = room.get(dominant) - need.get(dominant);
            if best.is_none_or(|(b, _)| left > b) {
                best = Some((left, d));
            }
            if need.fits(room) {
                fits.push((left, d));
            }
        }
        fits.sort();
        for &(_, d) in fits.iter().take(DOMAINS_PER_LEVEL) {
            let domain = &level.domains[d];
            let list = Arc::new(domain.nodes.clone());
            let name = format!("{} {}", level.key, domain.name);
            out.push((name, NodeRule::new(None, list, view.slots)));
        }
        if let Some((left, d)) = best {
            if left < 0 {
                shortfall = Some(format!(
                    "the best {} domain, {}, is short of {} {dominant}",
                    level.key,
                    level.domains[d].name,
                    crate::model::resource::format_amount(dominant, -left)
                ));
            }
        }
    }
    (out, shortfall)
}

/// Every domain of `levels` (narrowest first) that holds every node in `placed`, whatever
/// room it has now, each as its name and node rule: where preemption may make room for a
/// gang with a hard topology rule (`GangDomains::allowed`).
fn allowed_domains(view: &View, levels: &[usize], placed: &[NodeId]) -> Vec<(String, NodeRule)> {
    let mut out = Vec::new();
    for &l in levels {
        let level = &view.levels[l];
        for (d, domain) in level.domains.iter().enumerate() {
            let holds_placed = placed
                .iter()
                .all(|n| level.domain_of[n.0 as usize] == Some(d as u32));
            if holds_placed && !domain.nodes.is_empty() {
                let list = Arc::new(domain.nodes.clone());
                let name = format!("{} {}", level.key, domain.name);
                out.push((name, NodeRule::new(None, list, view.slots)));
            }
        }
    }
    out
}

/// Per level, per domain, what its schedulable nodes will have free: all of them, or only
/// those `usable` lets some pod pass.
fn domain_sums(
    levels: &[Arc<TopologyLevel>],
    state: &ClusterState,
    usable: Option<&[crate::framework::StaticNodes]>,
) -> Vec<Vec<Resource>> {
    levels
        .iter()
        .map(|level| {
            level
                .domains
                .iter()
                .map(|domain| {
                    let mut sum = Resource::new();
                    for &n in &domain.nodes {
                        let node = state.node(n);
                        let counted = usable.is_none_or(|us| us.iter().any(|u| u.passes(n)));
                        if node.schedulable() && counted {
                            sum.add(&node.future_free());
                        }
                    }
                    sum
                })
                .collect()
        })
        .collect()
}

impl Restricted {
    fn is_for(&self, usable: &[crate::framework::StaticNodes]) -> bool {
        self.usable.len() == usable.len() && self.usable.iter().zip(usable).all(|(a, b)| a.same(b))
    }

    fn uses(&self, node: NodeId) -> bool {
        self.usable.iter().any(|u| u.passes(node))
    }
}

/// Adds `base`, or one set per GPU model within it when the model rule applies.
fn push_with_models(
    options: &mut Vec<NodeSet>,
    name: String,
    base: NodeRule,
    models: &[u32],
    model_rule: &dyn Fn(u32) -> NodeRule,
    view: &View,
) {
    let present: Vec<u32> = models
        .iter()
        .copied()
        .filter(|m| {
            base.list
                .iter()
                .any(|n| view.gpu.model_of[n.0 as usize] == Some(*m))
        })
        .collect();
    // With one model (or none) in the domain, the domain alone is the rule: its GPU tasks
    // cannot go anywhere else in it.
    if present.len() <= 1 {
        let name = match present.first() {
            Some(m) => format!("{name}, {}", view.gpu.models[*m as usize].0),
            None => name,
        };
        options.push(NodeSet {
            name,
            rules: vec![base],
        });
        return;
    }
    for m in present {
        options.push(NodeSet {
            name: format!("{name}, {}", view.gpu.models[m as usize].0),
            rules: vec![base.clone(), model_rule(m)],
        });
    }
}

/// What the gang's pending members ask, when all of them are needed for its minimum
/// (otherwise nothing: which members go is the search's choice, so no domain is ruled out
/// by their sum).
fn pending_need(job: &JobInfo) -> Resource {
    let pending: Vec<_> = job
        .tasks()
        .iter()
        .filter(|t| t.status == TaskStatus::Pending)
        .collect();
    let need = (job.min_member as usize).saturating_sub(job.ready_count() as usize);
    let mut sum = Resource::new();
    if need >= pending.len() {
        for t in pending {
            sum.add(&t.resreq);
        }
    }
    sum
}

/// Nodes of the gang's placed members (they pin its domain).
fn placed_nodes(view: &View, job: &JobInfo) -> Vec<NodeId> {
    job.tasks()
        .iter()
        .filter(|t| t.status != TaskStatus::Pending && t.status.is_valid())
        .filter_map(|t| t.node.as_deref())
        .filter_map(|n| view.node_ids.get(n).copied())
        .collect()
}

#[cfg(test)]
pub(super) mod tests {
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
            let mut gang = Gang::new(name, workers as u32).tasks(
                "worker",
                workers,
                &[("nvidia.com/gpu", "2")],
            );
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
}
