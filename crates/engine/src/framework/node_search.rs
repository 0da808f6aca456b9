//! Node search: which nodes a task can go to, found without rescanning a full cluster.
//! Static predicates are evaluated once per placement and session; per task template the
//! session keeps a candidate list that shrinks as nodes fill and grows back only where
//! something is released; a template that fits nowhere is answered from a memo until the
//! next release; consecutive pods of one role share one scored sample (`Window`).

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use super::fit::{NodeRejections, TaskUnfit, Unfit};
use super::session::Session;
use super::votes::{dynamic_fit, node_score};
use crate::model::{JobId, NodeId, Resource, TaskRef, TaskStatus};

/// What a session remembers to answer node searches quickly. Every field is derived from
/// the session's state and is only ever a cache of it.
#[derive(Default)]
pub(super) struct NodeSearch {
    /// Per placement key: the nodes that pass every static predicate (looked at this
    /// session)...
    static_fit: HashMap<u64, Arc<StaticFit>>,
    /// ...taken from the scheduler's, when the node specs are as they were then.
    kept_static_fits: Arc<KeptStaticFits>,
    /// Per task template: the nodes that may still fit it.
    candidates: HashMap<u64, Candidates>,
    /// Nodes on which resources were released during the session, in order.
    pub(super) released: Vec<NodeId>,
    /// Bumped on every release; memoized "nothing fits" answers are valid for one epoch.
    pub(super) epoch: u64,
    unfit_memo: HashMap<u64, (u64, TaskUnfit)>,
    scan_offset: usize,
    /// Every node whose usage changed during the session, in order.
    pub(super) touched: Vec<NodeId>,
    window: Option<Window>,
    /// Bound and running tasks per node (see `running_index`).
    running_index: Option<Arc<RunningIndex>>,
    /// What the nodes some placements (their keys, sorted) pass will have free: a gang's
    /// shortfall counts only room its pods could use.
    usable_free: RefCell<HashMap<Vec<u64>, (usize, Resource)>>,
    /// Per node slot, how many times its usage changed during the session (see `touch`).
    versions: Vec<u32>,
    /// Fit and score answers per template and node (see `Answers`).
    answers: Answers,
}

impl NodeSearch {
    pub(super) fn with_kept(kept_static_fits: Arc<KeptStaticFits>) -> Self {
        NodeSearch {
            kept_static_fits,
            ..Default::default()
        }
    }
}

/// Static fits a scheduler keeps from session to session: they depend only on the
/// placement (its key), the node specs (`ClusterState::node_specs_version`) and the
/// scheduler's static predicates (one memo per scheduler: a reloaded configuration starts
/// empty). A cycle at 5,000 nodes otherwise checked every node's labels and taints again
/// for each placement, every cycle, while only pods came and went. Dropped whole when the
/// node specs change or it holds KEPT_STATIC_FITS placements (each is a flag and an id per
/// node: 256 at 10,000 nodes is ~13 MB; past that, a cycle costs what it did without it).
#[derive(Default)]
pub(crate) struct KeptStaticFits(std::sync::Mutex<(u64, HashMap<u64, Arc<StaticFit>>)>);

const KEPT_STATIC_FITS: usize = 256;

impl KeptStaticFits {
    fn get(&self, specs: u64, key: u64) -> Option<Arc<StaticFit>> {
        let kept = self.0.lock().unwrap_or_else(|e| e.into_inner());
        (kept.0 == specs)
            .then(|| kept.1.get(&key).cloned())
            .flatten()
    }

    fn keep(&self, specs: u64, key: u64, fit: Arc<StaticFit>) {
        let mut kept = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if kept.0 != specs || kept.1.len() >= KEPT_STATIC_FITS {
            *kept = (specs, HashMap::new());
        }
        kept.1.insert(key, fit);
    }
}

/// What the dynamic predicates and node-order votes answered for a task template on each
/// node, each answer valid while the node's usage is as it was then (its entry in
/// `NodeSearch::versions`). Gangs of one shape scan the same nodes again and again (the
/// rotating sample goes round a large cluster many times a cycle) while each gang changes
/// only the few nodes its pods go to, so most answers are read back instead of asked for
/// again: per-node fit and score were most of an allocate cycle. Used only while no pod
/// vote is registered: then predicates and scores depend on the template and the node
/// alone (the contract of `PredicateFn` and `NodeOrderFn`), so a kept answer is the one
/// the votes would give.
#[derive(Default)]
struct Answers {
    /// The templates asked about most recently, at most `ANSWERED_TEMPLATES`.
    templates: Vec<TemplateAnswers>,
    /// Bumped on every use, to find the least recently used template.
    clock: u64,
}

struct TemplateAnswers {
    template: u64,
    used: u64,
    /// Per node slot.
    nodes: Vec<Answer>,
}

/// What one node answered for one template, when its version was `at - 1` (0: nothing).
#[derive(Clone, Copy, Default)]
struct Answer {
    at: u32,
    /// Every dynamic predicate passed.
    fits: bool,
    score: Option<f64>,
}

/// Templates whose answers are kept: a cycle places gangs of a few shapes over and over;
/// memory stays bounded (an entry per node slot each) however many shapes there are.
const ANSWERED_TEMPLATES: usize = 16;

impl Answers {
    /// The answers kept for `template`, made room for (the least recently used template's
    /// dropped) if there are none.
    fn of(&mut self, template: u64, slots: usize) -> &mut [Answer] {
        self.clock += 1;
        let at = match self.templates.iter().position(|t| t.template == template) {
            Some(i) => i,
            None if self.templates.len() < ANSWERED_TEMPLATES => {
                self.templates.push(TemplateAnswers {
                    template,
                    used: 0,
                    nodes: vec![Answer::default(); slots],
                });
                self.templates.len() - 1
            }
            None => {
                let (i, oldest) = self
                    .templates
                    .iter_mut()
                    .enumerate()
                    .min_by_key(|(_, t)| t.used)
                    .expect("full");
                oldest.template = template;
                oldest.nodes.fill(Answer::default());
                i
            }
        };
        let t = &mut self.templates[at];
        t.used = self.clock;
        &mut t.nodes
    }
}

impl Answer {
    /// Whether the node is known to fit, at its version `v`.
    fn fits_at(&self, v: u32) -> bool {
        self.at == v + 1 && self.fits
    }

    fn score_at(&self, v: u32) -> Option<f64> {
        self.score.filter(|_| self.at == v + 1)
    }

    fn set_fits(&mut self, v: u32) {
        if self.at != v + 1 {
            *self = Answer {
                at: v + 1,
                fits: true,
                score: None,
            };
        }
        self.fits = true;
    }

    fn set_score(&mut self, v: u32, score: f64) {
        if self.at != v + 1 {
            self.at = v + 1;
            self.fits = false;
        }
        self.score = Some(score);
    }
}

impl NodeSearch {
    /// Notes that a node's usage changed: answers kept for it no longer hold.
    pub(super) fn touch(&mut self, node: NodeId, slots: usize) {
        self.touched.push(node);
        if self.versions.len() < slots {
            self.versions.resize(slots, 0);
        }
        self.versions[node.0 as usize] += 1;
    }
}

/// Nodes that pass a placement's static predicates.
struct StaticFit {
    pass: Vec<bool>,
    nodes: Vec<NodeId>,
    rejections: NodeRejections,
}

/// The nodes that pass every static predicate for one placement (see
/// `Session::static_nodes`).
#[derive(Clone)]
pub struct StaticNodes(Arc<StaticFit>);

impl StaticNodes {
    /// In id order.
    pub fn nodes(&self) -> &[NodeId] {
        &self.0.nodes
    }

    pub fn passes(&self, node: NodeId) -> bool {
        self.0.pass[node.0 as usize]
    }

    /// The same session's answer for the same placement (so the same nodes).
    pub fn same(&self, other: &StaticNodes) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// Nodes that may still fit one task template. Nodes that fail a (monotone) dynamic
/// predicate are dropped until something is released on them, so a full cluster is not
/// rescanned for every pending task.
struct Candidates {
    nodes: Vec<NodeId>,
    present: Vec<bool>,
    synced: usize,
}

/// The nodes found and scored for the previous task placed through `best_feasible_node`,
/// kept while the same gang places more tasks of the same template. Such tasks are
/// interchangeable (same request and placement), so instead of scanning and scoring a fresh
/// sample for every pod of a role, only the nodes whose usage changed since (usually just
/// the one the previous pod went to) are checked and scored again. Relies on predicates
/// and node-order functions depending only on the task's template and the node.
struct Window {
    job: JobId,
    template: u64,
    /// In scan order, so ties go to the node found first, as in a fresh scan.
    nodes: Vec<(NodeId, f64)>,
    /// How much of `Session::touched` the scores account for.
    synced: usize,
}

/// Beyond this many node changes, a window is scanned afresh rather than patched.
const WINDOW_MAX_CHANGES: usize = 32;

/// Our bound and running tasks when a session first asks (see `Session::running_index`).
pub struct RunningIndex {
    /// Per node slot, its tasks.
    pub by_node: Vec<Vec<TaskRef>>,
    /// Per queue, the nodes its tasks run on, in id order.
    pub nodes_by_queue: HashMap<Arc<str>, Vec<NodeId>>,
}

impl Session {
    /// What the schedulable nodes will have free once releases and pipelined tasks are
    /// through (kept by the state's tally as nodes change).
    pub(super) fn cluster_free(&self) -> &Resource {
        self.state.tally().schedulable_future_free()
    }

    /// What the schedulable nodes that pass any of these placements' static predicates will
    /// have free; None when one of them passes every node (then it is `cluster_free`) or
    /// was not looked at this session.
    pub(super) fn usable_free(&self, placement_keys: &[u64]) -> Option<Resource> {
        let mut keys = placement_keys.to_vec();
        keys.sort_unstable();
        keys.dedup();
        let fits: Vec<&Arc<StaticFit>> = keys
            .iter()
            .map(|k| self.search.static_fit.get(k))
            .collect::<Option<_>>()?;
        let all = self.state.node_count();
        if fits.iter().any(|f| f.nodes.len() == all) {
            return None;
        }
        let version = self.search.touched.len();
        if let Some((at, free)) = self.search.usable_free.borrow().get(&keys) {
            if *at == version {
                return Some(free.clone());
            }
        }
        let mut free = Resource::new();
        for (id, n) in self.state.nodes() {
            if n.schedulable() && fits.iter().any(|f| f.pass[id.0 as usize]) {
                // `future_free`, without a Resource made per node.
                free.add(&n.idle);
                free.add(&n.releasing);
                free.sub(&n.pipelined);
            }
        }
        self.search
            .usable_free
            .borrow_mut()
            .insert(keys, (version, free.clone()));
        Some(free)
    }

    /// Nodes on which the task could run if they had room: every static predicate passes
    /// (selector, affinity, taints, node state). Preempt, reclaim and reservations look
    /// there for every task they try to place, so the session's list is shared, not copied.
    pub fn static_nodes(&mut self, task: TaskRef) -> StaticNodes {
        StaticNodes(self.static_fit(task))
    }

    /// Tasks of ours running on `node` (bound before this session, not releasing): the
    /// only possible victims — never a task this very session just placed.
    pub fn running_tasks_on(&mut self, node: NodeId) -> Vec<TaskRef> {
        let index = self.running_index();
        index.by_node[node.0 as usize]
            .iter()
            .copied()
            .filter(|t| {
                matches!(
                    self.state.task(*t).status,
                    TaskStatus::Bound | TaskStatus::Running
                )
            })
            .collect()
    }

    /// Per node slot, the tasks of ours that were bound or running when first asked
    /// (built once per session; no task becomes bound or running later in a session, so
    /// callers only need to re-check the status of what they read).
    pub fn running_index(&mut self) -> Arc<RunningIndex> {
        if let Some(index) = &self.search.running_index {
            return index.clone();
        }
        let mut index = vec![Vec::new(); self.state.node_slots()];
        let mut by_queue: HashMap<Arc<str>, Vec<NodeId>> = HashMap::new();
        for (job, info) in self.state.jobs() {
            for (i, t) in info.tasks().iter().enumerate() {
                if !matches!(t.status, TaskStatus::Bound | TaskStatus::Running) {
                    continue;
                }
                if let Some(node) = t.node.as_deref().and_then(|n| self.state.node_by_name(n)) {
                    index[node.0 as usize].push(TaskRef {
                        job,
                        index: i as u32,
                    });
                    by_queue.entry(info.queue.clone()).or_default().push(node);
                }
            }
        }
        for nodes in by_queue.values_mut() {
            nodes.sort_unstable();
            nodes.dedup();
        }
        let index = Arc::new(RunningIndex {
            by_node: index,
            nodes_by_queue: by_queue,
        });
        self.search.running_index = Some(index.clone());
        index
    }

    fn static_fit(&mut self, task: TaskRef) -> Arc<StaticFit> {
        let t = self.state.task(task);
        if let Some(fit) = self.search.static_fit.get(&t.placement_key) {
            return fit.clone();
        }
        let specs = self.state.node_specs_version();
        if let Some(fit) = self.search.kept_static_fits.get(specs, t.placement_key) {
            self.search.static_fit.insert(t.placement_key, fit.clone());
            return fit;
        }
        let mut fit = StaticFit {
            pass: vec![false; self.state.node_slots()],
            nodes: Vec::new(),
            rejections: NodeRejections::default(),
        };
        for (id, node) in self.state.nodes() {
            match self
                .votes
                .static_predicate
                .all()
                .try_for_each(|f| f(t, node))
            {
                Ok(()) => {
                    fit.pass[id.0 as usize] = true;
                    fit.nodes.push(id);
                }
                Err(unfit) => fit.rejections.add(&unfit),
            }
        }
        let fit = Arc::new(fit);
        self.search.static_fit.insert(t.placement_key, fit.clone());
        self.search
            .kept_static_fits
            .keep(specs, t.placement_key, fit.clone());
        fit
    }

    /// Up to `want` nodes on which `task` fits now (every predicate passes), scanning from a
    /// rotating offset so that load spreads; or why none does.
    pub fn feasible_nodes(&mut self, task: TaskRef, want: usize) -> Result<Vec<NodeId>, TaskUnfit> {
        let template = self.state.task(task).template;
        let memo = self.template_answers(self.state.task(task), true);
        if let Some((epoch, unfit)) = self.search.unfit_memo.get(&template).filter(|_| memo) {
            if *epoch == self.search.epoch {
                return Err(unfit.clone());
            }
        }
        let found = self.scan_candidates(task, want);
        if !found.is_empty() {
            return Ok(found);
        }
        let fit = self.static_fit(task);
        let t = self.state.task(task);
        // Nothing fits: say why, from every node (once per template until a release).
        // The headline reason comes from the nodes the task could run on but for their
        // current load (what the user can act on); selector or taint misses on other pools
        // only when no node passes those.
        let mut near = NodeRejections::default();
        let pods = self.pod_view();
        for &id in &fit.nodes {
            let node = self.state.node(id);
            if let Err(unfit) = dynamic_fit(&self.votes, &pods, t, id, node) {
                near.add(&unfit);
            }
        }
        let mut all = fit.rejections.clone();
        all.merge(&near);
        let reason = if near.nodes > 0 {
            near.dominant()
        } else {
            all.dominant()
        };
        let unfit = TaskUnfit {
            reason,
            detail: all.summary(),
            by_queue: false,
        };
        if memo {
            self.search
                .unfit_memo
                .insert(template, (self.search.epoch, unfit.clone()));
        }
        Err(unfit)
    }

    /// Up to `want` nodes on which `task` fits now, without saying why none does (cheaper
    /// than `feasible_nodes` when nothing fits: preempt asks for every starving task).
    pub fn feasible_nodes_quiet(&mut self, task: TaskRef, want: usize) -> Vec<NodeId> {
        let template = self.state.task(task).template;
        let memo = self.template_answers(self.state.task(task), true);
        if let Some((epoch, _)) = self.search.unfit_memo.get(&template).filter(|_| memo) {
            if *epoch == self.search.epoch {
                return Vec::new();
            }
        }
        self.scan_candidates(task, want)
    }

    /// Scans a template's candidate nodes from the rotating offset for up to `want` on
    /// which the task fits, dropping those it does not fit (until something is released).
    fn scan_candidates(&mut self, task: TaskRef, want: usize) -> Vec<NodeId> {
        let template = self.state.task(task).template;
        let fit = self.static_fit(task);
        let slots = self.state.node_slots();
        let cands = self
            .search
            .candidates
            .entry(template)
            .or_insert_with(|| Candidates {
                nodes: fit.nodes.clone(),
                present: fit.pass.clone(),
                synced: self.search.released.len(),
            });
        for &n in &self.search.released[cands.synced..] {
            let i = n.0 as usize;
            if fit.pass[i] && !cands.present[i] {
                cands.present[i] = true;
                cands.nodes.push(n);
            }
        }
        cands.synced = self.search.released.len();
        debug_assert_eq!(cands.present.len(), slots);

        let t = self.state.task(task);
        let pods = super::pod_index::PodView {
            index: &self.pods,
            state: &self.state,
        };
        // Answers kept from earlier scans (see `Answers`): only "fits" is kept, as a node
        // that does not fit is dropped from the candidates until a release changes it.
        // See `template_answers`: a shared claim's answers change off the node.
        let mut answers = (self.votes.pod_predicate.is_empty()
            && !t.claims.iter().any(|c| c.shared)
            && (t.claims.is_empty()
                || self.votes.device_rules.is_empty() && !self.state.tally().has_shared_devices()))
        .then(|| self.search.answers.of(template, slots));
        let versions = &self.search.versions;
        let len = cands.nodes.len();
        let mut found = Vec::with_capacity(want.min(len));
        let mut dropped = Vec::new();
        let start = if len == 0 {
            0
        } else {
            self.search.scan_offset % len
        };
        let mut visited = 0;
        // From `start` to the end, then from the start: the same order as `(start + i) % len`
        // without a division per node.
        let order = (start..len).chain(0..start);
        for pos in order {
            if found.len() >= want {
                break;
            }
            visited += 1;
            let id = cands.nodes[pos];
            let v = versions.get(id.0 as usize).copied().unwrap_or(0);
            let answer = answers.as_deref_mut().map(|a| &mut a[id.0 as usize]);
            if answer.as_ref().is_some_and(|a| a.fits_at(v)) {
                found.push(id);
                continue;
            }
            let node = self.state.node(id);
            match dynamic_fit(&self.votes, &pods, t, id, node) {
                Ok(()) => {
                    if let Some(a) = answer {
                        a.set_fits(v);
                    }
                    found.push(id)
                }
                // Another pod's coming or going elsewhere in a domain may change this.
                Err(Unfit::Pod(m)) if !m.until_release() => {}
                Err(Unfit::Devices(m)) if !m.until_release() => {}
                Err(_) => dropped.push(pos),
            }
        }
        self.search.scan_offset = self.search.scan_offset.wrapping_add(visited);
        dropped.sort_unstable_by(|a, b| b.cmp(a));
        for pos in dropped {
            let id = cands.nodes.swap_remove(pos);
            cands.present[id.0 as usize] = false;
        }
        found
    }

    /// The best node for `task` among up to `want` feasible nodes (the highest score; the
    /// first found wins ties), or why none fits. Consecutive tasks of one gang with the same
    /// template share one sample of nodes (see `Window`); other tasks scan afresh with
    /// `feasible_nodes`.
    pub fn best_feasible_node(&mut self, task: TaskRef, want: usize) -> Result<NodeId, TaskUnfit> {
        let template = self.state.task(task).template;
        let shared = self.template_answers(self.state.task(task), false);
        if let Some(mut w) = self.search.window.take().filter(|_| shared) {
            let changed = &self.search.touched[w.synced..];
            if w.job == task.job && w.template == template && changed.len() <= WINDOW_MAX_CHANGES {
                let t = self.state.task(task);
                if !changed.is_empty() {
                    let (state, votes) = (&self.state, &self.votes);
                    let pods = super::pod_index::PodView {
                        index: &self.pods,
                        state,
                    };
                    // Each changed node looked up in the window (usually one, the node the
                    // previous pod went to), rather than every window node looked up among
                    // the changed ones. A node changed twice is checked twice, alike.
                    for &id in changed {
                        let Some(pos) = w.nodes.iter().position(|(n, _)| *n == id) else {
                            continue;
                        };
                        let node = state.node(id);
                        if dynamic_fit(votes, &pods, t, id, node).is_err() {
                            // In order: ties go to the node found first.
                            w.nodes.remove(pos);
                            continue;
                        }
                        w.nodes[pos].1 = node_score(votes, &pods, t, id, node);
                    }
                }
                w.synced = self.search.touched.len();
                if let Some(best) = highest(&w.nodes) {
                    self.search.window = Some(w);
                    return Ok(best);
                }
            }
        }
        let nodes = self.feasible_nodes(task, want)?;
        let t = self.state.task(task);
        let pods = super::pod_index::PodView {
            index: &self.pods,
            state: &self.state,
        };
        let slots = self.state.node_slots();
        let mut answers = self
            .votes
            .pod_node_order
            .is_empty()
            .then(|| self.search.answers.of(template, slots));
        let versions = &self.search.versions;
        let scored: Vec<(NodeId, f64)> = nodes
            .iter()
            .map(|&n| {
                let v = versions.get(n.0 as usize).copied().unwrap_or(0);
                let answer = answers.as_deref_mut().map(|a| &mut a[n.0 as usize]);
                if let Some(score) = answer.as_ref().and_then(|a| a.score_at(v)) {
                    return (n, score);
                }
                let score = node_score(&self.votes, &pods, t, n, self.state.node(n));
                if let Some(a) = answer {
                    a.set_score(v, score);
                }
                (n, score)
            })
            .collect();
        let best = highest(&scored).expect("feasible_nodes returns at least one node");
        self.search.window = Some(Window {
            job: task.job,
            template,
            nodes: scored,
            synced: self.search.touched.len(),
        });
        Ok(best)
    }
}

/// The node with the highest score; the first one wins ties.
fn highest(nodes: &[(NodeId, f64)]) -> Option<NodeId> {
    let mut best: Option<(NodeId, f64)> = None;
    for &(n, score) in nodes {
        if best.is_none_or(|(_, b)| score > b) {
            best = Some((n, score));
        }
    }
    best.map(|(n, _)| n)
}

#[cfg(test)]
mod tests {
    use crate::cache::Cache;
    use crate::model::{NodeSpec, Placement};
    use crate::testkit::{self, Gang};

    fn zoned(name: &str, zone: &str) -> NodeSpec {
        NodeSpec {
            labels: testkit::labels(&[("zone", zone)]),
            ..testkit::node(name, &[("cpu", "4"), ("memory", "8Gi"), ("pods", "110")])
        }
    }

    fn in_zone_a(name: &str) -> Gang {
        let placement = Placement {
            node_selector: testkit::labels(&[("zone", "a")]),
            ..Default::default()
        };
        Gang::new(name, 1).placed_tasks("w", 1, &[("cpu", "1")], placement)
    }

    /// One scheduler runs every cycle, and keeps which nodes a placement's static
    /// predicates pass: kept only while no node changes, and never taken for another
    /// cache's nodes.
    #[test]
    fn static_fits_kept_across_cycles_follow_node_changes() {
        let scheduler = testkit::scheduler(None);
        // Submits a gang of one pod that wants zone a; the nodes its cycle binds it to.
        let submit = |cache: &mut Cache, name: &str, now: i64| -> Vec<String> {
            in_zone_a(name).apply(cache);
            let r = scheduler.run_cycle(cache.snapshot(), now);
            testkit::apply_result(cache, &r);
            r.binds.iter().map(|b| b.node.to_string()).collect()
        };
        let mut cache = testkit::cache_with_default_queue();
        cache.apply_node(zoned("n1", "a"));
        cache.apply_node(zoned("n2", "b"));
        assert_eq!(submit(&mut cache, "first", 0), ["n1"]);
        // Nothing but pods changed: the same answer.
        assert_eq!(submit(&mut cache, "second", 1), ["n1"]);
        // The zones swap: the same placement now passes n2 only.
        cache.apply_node(zoned("n1", "b"));
        cache.apply_node(zoned("n2", "a"));
        assert_eq!(submit(&mut cache, "third", 2), ["n2"]);
        // Another cache with the same node names, the zones the other way round.
        let mut other = testkit::cache_with_default_queue();
        other.apply_node(zoned("n1", "a"));
        other.apply_node(zoned("n2", "b"));
        assert_eq!(submit(&mut other, "elsewhere", 0), ["n1"]);
        // A node leaves: what passed it does not pass it any more.
        cache.delete_node("n2");
        assert!(submit(&mut cache, "fourth", 3).is_empty());
    }
}
