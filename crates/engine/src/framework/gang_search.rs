//! Whole-gang placement search: when placing a gang task by task fails, look for a
//! placement of the whole gang before giving up.
//!
//! Greedy placement strands gangs that fit: a small task takes the only node a large one
//! could use (a PS on the GPU node its worker needs). The search places the most
//! constrained role first (fewest feasible nodes, then the largest share of the scarce
//! resource), treats a role's identical pods as one unit, and backtracks within a budget.
//!
//! Why it does not explode: pods of one role (same template) are interchangeable, so a role
//! is placed as counts per class of identical nodes (same free and releasing resources,
//! same static predicates for every role of the gang, same set membership) rather than pod
//! by pod; within a class nodes are filled one after another (packing identical nodes
//! leaves a superset of room for everything placed later, so spreading need not be tried).
//! Classes are tried best fit first; counts from the most the class takes down to none.
//! Every tentative placement and every choice point costs one try; a gang stops at its own
//! budget and the cycle at a shared one.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use super::statement::Statement;
use super::votes::dynamic_fit;
use crate::model::{JobId, NodeId, TaskInfo, TaskRef};

/// Nodes a gang may use, as rules over node slots. A rule applies to every task, or only
/// to tasks that request a given resource (a GPU model binds GPU tasks only).
#[derive(Clone, Debug)]
pub struct NodeSet {
    /// What the set is, for messages: "rack r1", "nvidia.com/gpu.product=A100".
    pub name: String,
    pub rules: Vec<NodeRule>,
}

#[derive(Clone, Debug)]
pub struct NodeRule {
    /// The rule binds only tasks that request this resource; None: every task.
    pub only_for: Option<Arc<str>>,
    /// Per node slot, whether the node is in the set.
    pub nodes: Arc<Vec<bool>>,
    /// The same nodes, in id order (a small domain is scanned without a full-cluster pass).
    pub list: Arc<Vec<NodeId>>,
}

impl NodeRule {
    pub fn new(only_for: Option<Arc<str>>, list: Arc<Vec<NodeId>>, slots: usize) -> Self {
        let mut nodes = vec![false; slots];
        for n in list.iter() {
            nodes[n.0 as usize] = true;
        }
        NodeRule {
            only_for,
            nodes: Arc::new(nodes),
            list,
        }
    }
}

impl NodeSet {
    /// Whether `node` lies inside the set for every task (its rules that bind every task,
    /// not only those asking a resource: the topology domain, not the GPU model).
    pub fn contains(&self, node: NodeId) -> bool {
        self.rules
            .iter()
            .filter(|r| r.only_for.is_none())
            .all(|r| r.nodes.get(node.0 as usize).copied().unwrap_or(false))
    }

    pub fn allows(&self, task: &TaskInfo, node: NodeId) -> bool {
        self.rules.iter().all(|r| {
            let binds = r
                .only_for
                .as_deref()
                .is_none_or(|res| task.resreq.get(res) > 0);
            !binds || r.nodes.get(node.0 as usize).copied().unwrap_or(false)
        })
    }
}

/// A plugin's answer to "where should this gang go" (the HyperNodeOrder vote).
#[derive(Clone, Debug)]
pub struct GangDomains {
    /// Node sets to try, best first: a gang placed inside one of them meets the plugin's
    /// rules (one topology domain, one GPU model).
    pub options: Vec<NodeSet>,
    /// The gang may go only inside one of `options`; otherwise the whole cluster is tried
    /// after them.
    pub hard: bool,
    /// The constraint in words, for a gang that fits in none of the options.
    pub rule: String,
    /// Why the options fall short (the best domain's shortfall), for the same message.
    pub shortfall: Option<String>,
    /// For a hard topology rule: every domain the gang may land in, whatever room each has
    /// now (best first). Preemption makes room inside one of them only, and evicts nothing
    /// outside it. Empty when the rule is not a hard topology rule.
    pub allowed: Vec<NodeSet>,
}

/// How many tries the placement search may spend, per gang and in what is left of a cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SearchBudget {
    pub per_gang: u64,
    pub left_in_cycle: u64,
}

impl SearchBudget {
    pub fn new(per_gang: u64, per_cycle: u64) -> Self {
        SearchBudget {
            per_gang,
            left_in_cycle: per_cycle,
        }
    }
}

/// How a search ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SearchOutcome {
    /// The gang is placed (ready or pipelined) in the statement.
    Placed { tries: u64 },
    /// Every placement was tried: there is none.
    NoPlacement { tries: u64 },
    /// The budget ran out first.
    GaveUp { tries: u64 },
}

impl SearchOutcome {
    pub fn tries(self) -> u64 {
        match self {
            Self::Placed { tries } | Self::NoPlacement { tries } | Self::GaveUp { tries } => tries,
        }
    }
}

/// Pods of one template: interchangeable for every predicate and score.
struct Unit {
    tasks: Vec<TaskRef>,
    /// Nodes passing the unit's static predicates (and the node set), in id order.
    candidates: Vec<NodeId>,
    /// Bit of this unit in a node's static-fit mask.
    bit: u64,
    /// The resource the unit needs most of, relative to what the cluster has.
    dominant: Option<Arc<str>>,
    dominant_share: f64,
}

struct Search<'a> {
    job: JobId,
    units: Vec<Unit>,
    /// Members still to place for the gang to reach its minimum.
    need: usize,
    /// Per node slot, the bits of the units whose static predicates (and set) it passes.
    masks: Vec<u64>,
    within: Option<&'a NodeSet>,
    /// Only room that is free now counts (backfill binds what it places at once).
    idle_only: bool,
    /// A part of the gang (one subgroup): placing `need` of its tasks is enough; the gang
    /// need not be ready yet.
    part: bool,
    tries: u64,
    limit: u64,
}

enum Step {
    Found,
    NotHere,
    OutOfBudget,
}

/// The hasher of node class keys: a multiply-rotate hash (FxHash's) instead of SipHash,
/// whose cost dominated building classes (four resources hashed per node looked at). Keys
/// only group nodes within one search, never leave the process, and a collision costs at
/// most a worse try: every placement is still checked by `may_place`.
#[derive(Default)]
struct ClassHasher(u64);

impl ClassHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl Hasher for ClassHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
    }

    fn write_u8(&mut self, n: u8) {
        self.add(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// At most this many node classes are tried per role: beyond, the cluster is so varied
/// that the budget would run out anyway.
const MAX_CLASSES: usize = 256;

/// A role's classes are built from the first nodes (in id order) where one of its pods fits,
/// at least this many and at least four per pod: on a large domain the search then costs in
/// proportion to the gang, not to the domain (at the price of completeness there; small
/// worlds, where a miss would show, are scanned whole).
const MIN_NODES_SCANNED: usize = 64;

/// Feasible nodes counted per role to rank roles by how constrained they are: past this,
/// a role is not constrained.
const FEASIBLE_COUNTED: usize = 64;

/// Above this many candidate nodes the sum of their free resources is not checked before a
/// search inside a node set (the plugin naming the set checked the set's capacity).
const ROOM_CHECK_NODES: usize = 512;

impl Statement<'_> {
    /// Searches for a placement of `tasks` (the gang's pending members) that makes the gang
    /// ready or pipelined, inside `within` if given. On success the placement is left in
    /// the statement; otherwise the statement is as it was.
    pub fn search_gang(
        &mut self,
        job: JobId,
        tasks: &[TaskRef],
        within: Option<&NodeSet>,
        budget: &mut SearchBudget,
    ) -> SearchOutcome {
        self.search_counted(job, tasks, within, false, budget)
    }

    /// As `search_gang`, with every task placed on room that is free now (allocated,
    /// never pipelined): for backfill, which binds what it places at once.
    pub fn search_gang_on_idle(
        &mut self,
        job: JobId,
        tasks: &[TaskRef],
        within: Option<&NodeSet>,
        budget: &mut SearchBudget,
    ) -> SearchOutcome {
        self.search_counted(job, tasks, within, true, budget)
    }

    /// Searches for a placement of at least `need` of `tasks` (one part of a gang: a
    /// subgroup) inside `within` if given, whether or not the gang is ready with it. On
    /// success the placement is left in the statement; otherwise the statement is as it
    /// was.
    pub fn search_part(
        &mut self,
        job: JobId,
        tasks: &[TaskRef],
        need: usize,
        within: Option<&NodeSet>,
        budget: &mut SearchBudget,
    ) -> SearchOutcome {
        let limit = budget.per_gang.min(budget.left_in_cycle);
        let outcome = self.search_gang_within(job, tasks, within, false, limit, Some(need));
        budget.left_in_cycle = budget.left_in_cycle.saturating_sub(outcome.tries());
        outcome
    }

    fn search_counted(
        &mut self,
        job: JobId,
        tasks: &[TaskRef],
        within: Option<&NodeSet>,
        idle_only: bool,
        budget: &mut SearchBudget,
    ) -> SearchOutcome {
        let limit = budget.per_gang.min(budget.left_in_cycle);
        let outcome = self.search_gang_within(job, tasks, within, idle_only, limit, None);
        budget.left_in_cycle = budget.left_in_cycle.saturating_sub(outcome.tries());
        let stats = &mut self.search_stats;
        stats.searches += 1;
        stats.tries += outcome.tries();
        match outcome {
            SearchOutcome::Placed { .. } => stats.placed += 1,
            SearchOutcome::GaveUp { .. } => stats.gave_up += 1,
            SearchOutcome::NoPlacement { .. } => {}
        }
        outcome
    }

    fn search_gang_within(
        &mut self,
        job: JobId,
        tasks: &[TaskRef],
        within: Option<&NodeSet>,
        idle_only: bool,
        limit: u64,
        part: Option<usize>,
    ) -> SearchOutcome {
        let j = self.job(job);
        let need = part
            .unwrap_or_else(|| (j.min_member as usize).saturating_sub(j.ready_count() as usize));
        if tasks.len() < need || tasks.is_empty() {
            return SearchOutcome::NoPlacement { tries: 0 };
        }
        let units = self.unit_candidates(tasks, within);
        if units.len() > 64 {
            // More templates than a mask holds: a gang this varied is left to greedy.
            return SearchOutcome::GaveUp { tries: 0 };
        }
        let mut masks = vec![0u64; self.state().node_slots()];
        for u in &units {
            for n in &u.candidates {
                masks[n.0 as usize] |= u.bit;
            }
        }
        let candidates: usize = units.iter().map(|u| u.candidates.len()).sum();
        let checked_by_plugin = within.is_some() && candidates > ROOM_CHECK_NODES;
        if !checked_by_plugin && !self.room_for(&units, &masks, need) {
            return SearchOutcome::NoPlacement { tries: 0 };
        }
        // Ordered only now: counting feasible nodes scans every candidate of a gang that
        // fits nowhere, which the room check above answers from sums.
        let units = self.order_units(units);
        let mut search = Search {
            job,
            units,
            need,
            masks,
            within,
            idle_only,
            part: part.is_some(),
            tries: 0,
            limit,
        };
        let start = self.mark();
        match self.place_unit(&mut search, 0, 0) {
            Step::Found => SearchOutcome::Placed {
                tries: search.tries,
            },
            Step::NotHere => {
                self.rollback_to(start);
                SearchOutcome::NoPlacement {
                    tries: search.tries,
                }
            }
            Step::OutOfBudget => {
                self.rollback_to(start);
                SearchOutcome::GaveUp {
                    tries: search.tries,
                }
            }
        }
    }

    /// Orders a gang's tasks most constrained first, as the search places roles: fewest
    /// nodes passing their static predicates, then the largest share of the scarcest
    /// resource; tasks of one template stay together, in their order. For actions that place
    /// task by task with their own means (preempt), so that a small task does not take the
    /// only room a large one could have.
    pub fn most_constrained_first(&mut self, tasks: &mut [TaskRef]) {
        let total = self.total_allocatable().clone();
        let mut keys: HashMap<u64, (usize, f64)> = HashMap::new();
        for &t in tasks.iter() {
            let template = self.task(t).template;
            if keys.contains_key(&template) {
                continue;
            }
            let nodes = self.static_nodes(t).nodes().len();
            let share = self
                .task(t)
                .resreq
                .dimensions()
                .filter(|(name, _)| *name != crate::model::resource::PODS)
                .map(|(name, v)| v as f64 / total.get(name).max(1) as f64)
                .fold(0.0, f64::max);
            keys.insert(template, (nodes, share));
        }
        tasks.sort_by(|a, b| {
            let (na, sa) = keys[&self.task(*a).template];
            let (nb, sb) = keys[&self.task(*b).template];
            na.cmp(&nb).then_with(|| sb.total_cmp(&sa))
        });
    }

    /// The gang's tasks grouped by template (in the order templates first appear), each with
    /// the nodes passing its static predicates and the node set; `order_units` orders them.
    fn unit_candidates(&mut self, tasks: &[TaskRef], within: Option<&NodeSet>) -> Vec<Unit> {
        let mut by_template: Vec<(u64, Vec<TaskRef>)> = Vec::new();
        for &t in tasks {
            let template = self.task(t).template;
            match by_template.iter_mut().find(|(k, _)| *k == template) {
                Some((_, ts)) => ts.push(t),
                None => by_template.push((template, vec![t])),
            }
        }
        let total = self.total_allocatable().clone();
        by_template
            .into_iter()
            .enumerate()
            .map(|(i, (_, ts))| {
                let first = ts[0];
                let fit = self.static_nodes(first);
                let t = self.task(first);
                // A rule every task obeys narrows the scan to its nodes.
                let narrowest = within.and_then(|w| {
                    w.rules
                        .iter()
                        .filter(|r| r.only_for.is_none())
                        .min_by_key(|r| r.list.len())
                });
                let scan: &[NodeId] = match narrowest {
                    Some(r) => &r.list,
                    None => fit.nodes(),
                };
                let candidates: Vec<NodeId> = match within {
                    // Every node of the static list passes: copied whole.
                    None => scan.to_vec(),
                    Some(w) => scan
                        .iter()
                        .copied()
                        .filter(|n| fit.passes(*n) && w.allows(t, *n))
                        .collect(),
                };
                let (dominant, dominant_share) = t
                    .resreq
                    .dimensions()
                    .filter(|(name, _)| *name != crate::model::resource::PODS)
                    .map(|(name, v)| {
                        let cap = total.get(name).max(1) as f64;
                        (Some(Arc::from(name)), v as f64 / cap)
                    })
                    .max_by(|a, b| a.1.total_cmp(&b.1))
                    .unwrap_or((None, 0.0));
                Unit {
                    tasks: ts,
                    candidates,
                    bit: 1u64 << i.min(63),
                    dominant,
                    dominant_share,
                }
            })
            .collect()
    }

    /// The units most constrained first: fewest feasible nodes (counted up to
    /// `FEASIBLE_COUNTED`), then the largest share of the scarcest resource, then the most
    /// tasks; otherwise in the order their templates first appear.
    fn order_units(&self, units: Vec<Unit>) -> Vec<Unit> {
        let pods = self.pod_view();
        let mut units: Vec<(usize, Unit)> = units
            .into_iter()
            .map(|u| {
                let t = self.task(u.tasks[0]);
                let feasible = u
                    .candidates
                    .iter()
                    .filter(|n| dynamic_fit(&self.votes, &pods, t, **n, self.node(**n)).is_ok())
                    .take(FEASIBLE_COUNTED)
                    .count();
                (feasible, u)
            })
            .collect();
        units.sort_by(|(fa, a), (fb, b)| {
            fa.cmp(fb)
                .then_with(|| b.dominant_share.total_cmp(&a.dominant_share))
                .then_with(|| b.tasks.len().cmp(&a.tasks.len()))
        });
        units.into_iter().map(|(_, u)| u).collect()
    }

    /// A necessary condition: the `need` members must fit in what the candidate nodes
    /// (those with a bit in `masks`) will have free, summed (checked only when every
    /// pending member is needed, the usual case; otherwise which members go is part of the
    /// search).
    fn room_for(&self, units: &[Unit], masks: &[u64], need: usize) -> bool {
        let pending: usize = units.iter().map(|u| u.tasks.len()).sum();
        if need < pending {
            return true;
        }
        let mut request = crate::model::Resource::new();
        for u in units {
            for &t in &u.tasks {
                request.add(&self.task(t).resreq);
            }
        }
        // Candidates on every node, all schedulable: what the session keeps summed (exact
        // integers, so the same sum), rather than every node of the cluster summed again for
        // each gang that does not fit.
        let live = self.state().node_count();
        if units.iter().any(|u| u.candidates.len() == live)
            && self.state().tally().all_nodes_schedulable()
        {
            return request.fits(self.cluster_free());
        }
        // The union of the units' candidates in id order, without sorting and deduplicating
        // thousands of node ids per search.
        // Summed part by part (exact integers: the same sum as each node's future_free),
        // without a resource allocated per node.
        let mut free = crate::model::Resource::new();
        let mut pipelined = crate::model::Resource::new();
        for (slot, _) in masks.iter().enumerate().filter(|(_, m)| **m != 0) {
            let node = self.node(NodeId(slot as u32));
            free.add(&node.idle);
            free.add(&node.releasing);
            pipelined.add(&node.pipelined);
        }
        free.sub(&pipelined);
        request.fits(&free)
    }

    fn spend(&self, s: &mut Search, n: u64) -> bool {
        s.tries += n;
        s.tries <= s.limit
    }

    /// Places units `u..` given `placed` members placed so far.
    fn place_unit(&mut self, s: &mut Search, u: usize, placed: usize) -> Step {
        if u == s.units.len() {
            let ready = s.part || self.job_ready(s.job) || self.job_pipelined(s.job);
            return if placed >= s.need && ready {
                Step::Found
            } else {
                Step::NotHere
            };
        }
        let left: usize = s.units[u..].iter().map(|x| x.tasks.len()).sum();
        if placed + left < s.need {
            return Step::NotHere;
        }
        if !self.spend(s, 1) {
            return Step::OutOfBudget;
        }
        let classes = self.classes(s, u);
        self.fill_class(s, u, &classes, 0, 0, placed)
    }

    /// Puts as many of unit `u`'s tasks from `next` on as class `c` takes, then tries
    /// every count from that down to none, with the rest going to later classes.
    fn fill_class(
        &mut self,
        s: &mut Search,
        u: usize,
        classes: &[Vec<NodeId>],
        c: usize,
        next: usize,
        placed: usize,
    ) -> Step {
        let len = s.units[u].tasks.len();
        if c == classes.len() || next == len {
            return self.place_unit(s, u + 1, placed);
        }
        let mut marks = vec![self.mark()];
        let mut t = next;
        'nodes: for &node in &classes[c] {
            while t < len {
                let task = s.units[u].tasks[t];
                if !self.spend(s, 1) {
                    return Step::OutOfBudget;
                }
                if !self.may_place(task, node, s.idle_only) {
                    continue 'nodes;
                }
                if self.fits_now(task, node) {
                    self.allocate(task, node);
                } else {
                    self.pipeline(task, node);
                }
                t += 1;
                marks.push(self.mark());
            }
            break;
        }
        for count in (0..=t - next).rev() {
            self.rollback_to(marks[count]);
            match self.fill_class(s, u, classes, c + 1, next + count, placed + count) {
                Step::NotHere => {}
                other => return other,
            }
        }
        Step::NotHere
    }

    /// Whether `task` may go on `node` now: its queue takes it, and every dynamic
    /// predicate passes (static ones were checked when the unit's candidates were chosen).
    fn may_place(&self, task: TaskRef, node: NodeId, idle_only: bool) -> bool {
        let t = self.task(task);
        if idle_only && !self.fits_now(task, node) {
            return false;
        }
        let job = self.job(task.job);
        if let Some(q) = self.queue(&job.queue) {
            if !self.allocatable(q, task) {
                return false;
            }
        }
        dynamic_fit(&self.votes, &self.pod_view(), t, node, self.node(node)).is_ok()
    }

    /// Unit `u`'s candidate nodes where one of its tasks fits now, grouped into classes of
    /// identical nodes, best fit first (least left of the unit's dominant resource), then
    /// the highest score.
    fn classes(&self, s: &Search, u: usize) -> Vec<Vec<NodeId>> {
        let unit = &s.units[u];
        let first = unit.tasks[0];
        let t = self.task(first);
        let mut index: HashMap<u64, usize> = HashMap::new();
        let mut classes: Vec<(f64, f64, Vec<NodeId>)> = Vec::new();
        let enough = MIN_NODES_SCANNED.max(4 * unit.tasks.len());
        let mut found = 0;
        let pods = self.pod_view();
        for &n in &unit.candidates {
            if found >= enough {
                break;
            }
            let node = self.node(n);
            if dynamic_fit(&self.votes, &pods, t, n, node).is_err()
                || s.idle_only && !self.fits_now(first, n)
            {
                continue;
            }
            found += 1;
            let mut h = ClassHasher::default();
            node.allocatable.hash(&mut h);
            node.idle.hash(&mut h);
            node.releasing.hash(&mut h);
            node.pipelined.hash(&mut h);
            s.masks[n.0 as usize].hash(&mut h);
            if let Some(w) = s.within {
                for r in &w.rules {
                    r.nodes[n.0 as usize].hash(&mut h);
                }
            }
            let key = h.finish();
            match index.get(&key) {
                Some(&i) => classes[i].2.push(n),
                None => {
                    let left = match &unit.dominant {
                        Some(d) => (node.future_idle(d) - t.resreq.get(d)) as f64,
                        None => 0.0,
                    };
                    let score = self.node_score(first, n);
                    index.insert(key, classes.len());
                    classes.push((left, score, vec![n]));
                }
            }
        }
        classes.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| b.1.total_cmp(&a.1)));
        classes.truncate(MAX_CLASSES);
        classes.into_iter().map(|(_, _, ns)| ns).collect()
    }
}
