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

mod devices;
mod domains;
mod rules;
mod subgroups;

use devices::*;
use domains::*;

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

/// The gangs with pending pods.
fn state_pending(state: &ClusterState) -> Vec<crate::model::JobId> {
    state.tally().pending().iter().collect()
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
}

#[cfg(test)]
pub(super) mod tests;
