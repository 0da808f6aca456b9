use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{Resource, Timestamp};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum QueueState {
    #[default]
    Open,
    /// Admits no new jobs; running ones go on.
    Closed,
    /// Being closed while PodGroups remain (Volcano's queue controller): admits no new jobs,
    /// places no new pods (Volcano's allocatable vote refuses every queue that is not
    /// Open), and running pods go on.
    Closing,
    Unknown,
}

/// A tenant queue (scheduling.volcano.sh/v1beta1 Queue).
#[derive(Clone, Debug, PartialEq)]
pub struct QueueInfo {
    pub name: Arc<str>,
    pub weight: u32,
    /// Upper bound of what the queue may use.
    pub capability: Option<Resource>,
    /// What the queue is always entitled to.
    pub guarantee: Option<Resource>,
    /// An explicit deserved share (capacity plugin).
    pub deserved: Option<Resource>,
    /// Whether other queues may take back what this queue uses beyond its share.
    pub reclaimable: bool,
    pub state: QueueState,
    pub parent: Option<Arc<str>>,
    pub created: Timestamp,
    /// `spec.priority`: queues of higher priority go first (proportion's and capacity's
    /// QueueOrder, as Volcano's).
    pub priority: i32,
    /// A setting of the queue this scheduler cannot honour and will not break (e.g.
    /// required node groups): the queue takes no new work and says why.
    pub refused: Option<String>,
    /// The runtime estimate (ms) of its pods that give none (queue annotation
    /// `rust-batch.io/default-runtime-estimate`): backfill's reservation and the predicted
    /// start times count on it.
    pub default_runtime_estimate: Option<i64>,
    /// How long (ms) its pods run before preempt or reclaim may take them (queue annotation
    /// `rust-batch.io/min-runtime`): fresh work is not thrown away.
    pub min_runtime: Option<i64>,
    /// How long (ms) its gangs wait for room before they may evict others (queue annotation
    /// `rust-batch.io/preemption-delay`): room that frees on its own is taken first.
    pub preemption_delay: Option<i64>,
    /// The queue's usage as last recorded (queue annotation `rust-batch.io/usage`, written
    /// by the live driver): where fair share over time starts after a restart
    /// (`framework::usage`). The scheduler's own account wins once it has one.
    pub recorded_usage: Option<QueueUsage>,
}

/// One queue's usage for fair share over time (`framework::usage`): the decayed average
/// amount of each resource it held, as of `at`, in the unit people write (cores, bytes,
/// GPUs).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct QueueUsage {
    /// When the averages were last brought up to date (ms on the driver's clock).
    pub at: Timestamp,
    /// Resource name → decayed average amount held.
    pub amounts: BTreeMap<String, f64>,
}

impl QueueInfo {
    pub fn new(name: &str, weight: u32) -> Self {
        QueueInfo {
            name: Arc::from(name),
            weight,
            capability: None,
            guarantee: None,
            deserved: None,
            reclaimable: true,
            state: QueueState::Open,
            parent: None,
            created: 0,
            priority: 0,
            refused: None,
            default_runtime_estimate: None,
            min_runtime: None,
            preemption_delay: None,
            recorded_usage: None,
        }
    }

    pub fn is_open(&self) -> bool {
        self.state == QueueState::Open
    }

    /// A guarantee above the capability, in a dimension the capability limits.
    pub fn guarantee_problem(&self) -> Option<String> {
        let limit = self.capability.as_ref()?.without_pods();
        let guarantee = self.guarantee.as_ref()?;
        let (name, need) = guarantee
            .dimensions()
            .find(|(n, v)| limit.get(n) > 0 && *v > limit.get(n))?;
        Some(format!(
            "spec.guarantee: {name} {} is above the capability {}",
            super::resource::format_amount(name, need),
            super::resource::format_amount(name, limit.get(name))
        ))
    }
}

/// The name Volcano gives the queue at the top of a hierarchy. A queue without a parent is a
/// child of `root` when a queue of that name exists, and top-level otherwise.
pub const ROOT_QUEUE: &str = "root";

/// The queue hierarchy (Queue `spec.parent`) resolved once per session: each queue's
/// ancestors and children, and the queues whose chain is broken (a missing parent or a
/// cycle). A broken queue is kept out of the tree — its parent's limits cannot be honoured —
/// and admits no job; the driver reports the problem as a Queue event.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QueueTree {
    /// Ancestors of each healthy queue, nearest first.
    ancestors: BTreeMap<Arc<str>, Vec<Arc<str>>>,
    children: BTreeMap<Arc<str>, Vec<Arc<str>>>,
    problems: BTreeMap<Arc<str>, String>,
}

impl QueueTree {
    pub fn new<'a>(queues: impl IntoIterator<Item = &'a QueueInfo>) -> Self {
        use petgraph::algo::tarjan_scc;
        use petgraph::graphmap::DiGraphMap;
        let queues: BTreeMap<Arc<str>, &QueueInfo> =
            queues.into_iter().map(|q| (q.name.clone(), q)).collect();
        let has_root = queues.contains_key(ROOT_QUEUE);
        let parent_of = |q: &QueueInfo| -> Option<Arc<str>> {
            if &*q.name == ROOT_QUEUE {
                return None;
            }
            match q.parent.as_deref().filter(|p| !p.is_empty()) {
                None | Some(ROOT_QUEUE) => has_root.then(|| Arc::from(ROOT_QUEUE)),
                Some(p) => Some(Arc::from(p)),
            }
        };
        let mut tree = QueueTree::default();
        // Edges child -> parent, between existing queues.
        let mut graph: DiGraphMap<&str, ()> = DiGraphMap::new();
        let mut parents: BTreeMap<Arc<str>, Arc<str>> = BTreeMap::new();
        for (name, q) in &queues {
            graph.add_node(name);
            let Some(parent) = parent_of(q) else { continue };
            match queues.get_key_value(&parent) {
                Some((p, _)) => {
                    graph.add_edge(name, p, ());
                    parents.insert(name.clone(), parent);
                }
                None => {
                    let problem = format!("spec.parent: queue {parent:?} does not exist");
                    tree.problems.insert(name.clone(), problem);
                }
            }
        }
        for scc in tarjan_scc(&graph) {
            let looped = scc.len() > 1 || scc.first().is_some_and(|n| graph.contains_edge(n, n));
            if looped {
                let mut cycle = scc.clone();
                cycle.sort();
                let problem = format!("spec.parent: queues {} form a cycle", cycle.join(" -> "));
                for q in scc {
                    tree.problems.insert(Arc::from(q), problem.clone());
                }
            }
        }
        // Every other queue's chain ends at a top-level queue or at a broken one.
        for name in queues.keys() {
            if tree.problems.contains_key(name) {
                continue;
            }
            let mut chain: Vec<Arc<str>> = Vec::new();
            let mut current = name;
            let mut broken = None;
            while let Some(parent) = parents.get(current) {
                if tree.problems.contains_key(parent) {
                    broken = Some(parent.clone());
                    break;
                }
                chain.push(parent.clone());
                current = parent;
            }
            match broken {
                Some(b) => {
                    let problem = format!("spec.parent: ancestor queue {b:?} is invalid");
                    tree.problems.insert(name.clone(), problem);
                }
                None => {
                    if let Some(parent) = chain.first() {
                        tree.children
                            .entry(parent.clone())
                            .or_default()
                            .push(name.clone());
                    }
                    tree.ancestors.insert(name.clone(), chain);
                }
            }
        }
        tree
    }

    /// Every broken queue and why, as a Queue event says it.
    pub fn problems(&self) -> &BTreeMap<Arc<str>, String> {
        &self.problems
    }

    /// Why the queue cannot take work, if its parent chain is broken.
    pub fn problem(&self, queue: &str) -> Option<&str> {
        self.problems.get(queue).map(String::as_str)
    }

    /// Ancestors, nearest first (empty for a top-level or a broken queue).
    pub fn ancestors(&self, queue: &str) -> &[Arc<str>] {
        self.ancestors.get(queue).map(Vec::as_slice).unwrap_or(&[])
    }

    /// Healthy child queues.
    pub fn children(&self, queue: &str) -> &[Arc<str>] {
        self.children.get(queue).map(Vec::as_slice).unwrap_or(&[])
    }

    pub fn is_leaf(&self, queue: &str) -> bool {
        self.children(queue).is_empty()
    }

    /// Healthy queues without a parent.
    pub fn top_level(&self) -> impl Iterator<Item = &Arc<str>> {
        self.ancestors
            .iter()
            .filter(|(_, a)| a.is_empty())
            .map(|(n, _)| n)
    }

    /// The queue and its ancestors, nearest first (nothing for a broken queue); no
    /// allocation, as plugins walk it for every task placed.
    pub fn path<'a>(&'a self, queue: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.ancestors
            .get(queue)
            .into_iter()
            .flat_map(move |a| std::iter::once(queue).chain(a.iter().map(|q| &**q)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(name: &str, parent: Option<&str>) -> QueueInfo {
        let mut q = QueueInfo::new(name, 1);
        q.parent = parent.map(Arc::from);
        q
    }

    #[test]
    fn tree_resolves_ancestors_children_and_broken_chains() {
        let qs = [
            q("eng", None),
            q("ml", Some("eng")),
            q("ml-train", Some("ml")),
            q("orphan", Some("nowhere")),
            q("orphan-child", Some("orphan")),
            q("a", Some("b")),
            q("b", Some("a")),
            q("self", Some("self")),
        ];
        let t = QueueTree::new(qs.iter());
        let names = |v: &[Arc<str>]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(names(t.ancestors("ml-train")), ["ml", "eng"]);
        assert_eq!(names(t.children("eng")), ["ml"]);
        assert!(t.is_leaf("ml-train") && !t.is_leaf("ml"));
        assert_eq!(
            t.problem("orphan"),
            Some("spec.parent: queue \"nowhere\" does not exist")
        );
        assert_eq!(
            t.problem("orphan-child"),
            Some("spec.parent: ancestor queue \"orphan\" is invalid")
        );
        assert_eq!(
            t.problem("a"),
            Some("spec.parent: queues a -> b form a cycle")
        );
        assert_eq!(t.problem("b"), t.problem("a"));
        assert_eq!(
            t.problem("self"),
            Some("spec.parent: queues self form a cycle")
        );
        assert!(t.ancestors("a").is_empty() && t.problem("eng").is_none());
        let top: Vec<_> = t.top_level().map(|s| s.to_string()).collect();
        assert_eq!(top, ["eng"]);
    }

    #[test]
    fn a_root_queue_adopts_queues_without_a_parent() {
        let qs = [q("root", None), q("default", None), q("x", Some("root"))];
        let t = QueueTree::new(qs.iter());
        assert_eq!(&*t.ancestors("default")[0], "root");
        assert_eq!(&*t.ancestors("x")[0], "root");
        assert!(t.ancestors("root").is_empty());
        // Without a root queue, "root" as a parent means top-level.
        let t = QueueTree::new([q("x", Some("root"))].iter());
        assert!(t.problem("x").is_none() && t.ancestors("x").is_empty());
    }
}
