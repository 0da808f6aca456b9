//! Free room per topology domain: summed once a session per distinct set of usable nodes,
//! kept current by the event handlers, and the domains a gang fits in.

use super::*;

/// At most this many distinct static fits have their domain room kept per session; more
/// are summed afresh for each gang.
pub(super) const RESTRICTED_CACHED: usize = 8;

/// Per level, per domain, the room on the nodes some pods can use.
#[derive(Clone)]
pub(super) struct Restricted {
    pub(super) usable: Vec<crate::framework::StaticNodes>,
    pub(super) sums: Vec<Vec<Resource>>,
}

/// Calls `f` with the room per level and domain that pods passing `usable` can use (every
/// schedulable node's when they can use any): room on nodes the pods cannot use (another
/// pool, a taint) is no room. Summed once a session per distinct `usable`, then kept current
/// by the event handlers.
pub(super) fn with_sums<R>(
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
pub(super) fn fitting_domains(
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
pub(super) fn allowed_domains(
    view: &View,
    levels: &[usize],
    placed: &[NodeId],
) -> Vec<(String, NodeRule)> {
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
pub(super) fn domain_sums(
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
    pub(super) fn is_for(&self, usable: &[crate::framework::StaticNodes]) -> bool {
        self.usable.len() == usable.len() && self.usable.iter().zip(usable).all(|(a, b)| a.same(b))
    }

    pub(super) fn uses(&self, node: NodeId) -> bool {
        self.usable.iter().any(|u| u.passes(node))
    }
}

/// Adds `base`, or one set per GPU model within it when the model rule applies.
pub(super) fn push_with_models(
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
pub(super) fn pending_need(job: &JobInfo) -> Resource {
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
pub(super) fn placed_nodes(view: &View, job: &JobInfo) -> Vec<NodeId> {
    job.tasks()
        .iter()
        .filter(|t| t.status != TaskStatus::Pending && t.status.is_valid())
        .filter_map(|t| t.node.as_deref())
        .filter_map(|n| view.node_ids.get(n).copied())
        .collect()
}
