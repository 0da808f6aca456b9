//! What a pod's rules relative to other pods say about each node, worked out once per pod
//! and per change of the pod index (kube-scheduler's PreFilter and PreScore state): which
//! topology domains hold pods its affinity terms need or its anti-affinity terms shun,
//! which domains existing pods' anti-affinity closes to it, and per spread constraint how
//! many matching pods each domain holds. Checking a node is then a few array lookups.

use std::sync::Arc;

use super::fit::PodMismatch;
use super::pod_index::{Domains, PodView};
use crate::model::pod_rules::{
    LabelSelector, PodAffinityTerm, TopologySpreadConstraint, WhenUnsatisfiable,
};
use crate::model::{NodeId, TaskInfo};

/// Per domain of one topology key, whether it holds a pod a term is about.
struct TermDomains {
    domains: Arc<Domains>,
    hit: Vec<bool>,
}

impl TermDomains {
    fn new(domains: Arc<Domains>) -> Self {
        let hit = vec![false; domains.len()];
        TermDomains { domains, hit }
    }

    fn mark(&mut self, node: NodeId) {
        if let Some(d) = self.domains.of(node) {
            self.hit[d as usize] = true;
        }
    }

    /// None: the node has no value for the key.
    fn hit(&self, node: NodeId) -> Option<bool> {
        self.domains.of(node).map(|d| self.hit[d as usize])
    }
}

struct Spread {
    key: String,
    domains: Arc<Domains>,
    /// Matching pods per domain (on nodes the constraint counts).
    counts: Vec<i64>,
    min: i64,
    max: i64,
    self_match: i64,
    max_skew: i64,
    hard: bool,
}

/// The pod's rules against the pods where they are now (see the module comment).
pub struct PodFit {
    affinity: Vec<TermDomains>,
    /// No pod anywhere matches the required affinity terms and the pod matches them all
    /// itself: the first pod of a group that wants to be together may go anywhere.
    affinity_waived: bool,
    anti: Vec<TermDomains>,
    existing_anti: Vec<TermDomains>,
    spread: Vec<Spread>,
    /// Preferred terms: signed weight (negative for anti-affinity) and where they hit.
    preferred: Vec<(i64, TermDomains)>,
    preferred_total: i64,
    /// The pod has no rule and no pod's rule is about it.
    pub empty: bool,
}

fn spread_term(c: &TopologySpreadConstraint) -> PodAffinityTerm {
    PodAffinityTerm {
        label_selector: c.label_selector.clone(),
        topology_key: c.topology_key.clone(),
        ..Default::default()
    }
}

impl PodFit {
    pub fn new(view: &PodView, t: &TaskInfo) -> PodFit {
        let ns = t.namespace.as_ref();
        let term_domains = |term: &PodAffinityTerm| {
            let mut td = TermDomains::new(view.domains(&term.topology_key));
            view.for_each_selected(ns, term, |node, _| td.mark(node));
            td
        };
        let mut fit = PodFit {
            affinity: Vec::new(),
            affinity_waived: false,
            anti: Vec::new(),
            existing_anti: Vec::new(),
            spread: Vec::new(),
            preferred: Vec::new(),
            preferred_total: 0,
            empty: true,
        };
        // Existing pods' required anti-affinity toward this pod (the symmetric rule).
        let mut closed: Vec<(String, NodeId)> = Vec::new();
        view.for_each_anti_term_selecting(ns, &t.labels, |term, node| {
            closed.push((term.topology_key.clone(), node));
        });
        let mut by_key: Vec<(String, TermDomains)> = Vec::new();
        for (key, node) in closed {
            let at = match by_key.iter().position(|(k, _)| *k == key) {
                Some(at) => at,
                None => {
                    let td = TermDomains::new(view.domains(&key));
                    by_key.push((key, td));
                    by_key.len() - 1
                }
            };
            by_key[at].1.mark(node);
        }
        fit.existing_anti = by_key.into_iter().map(|(_, td)| td).collect();
        let Some(rules) = t.placement.rules() else {
            fit.empty = fit.existing_anti.is_empty();
            return fit;
        };
        fit.empty = false;
        let required = rules.pod_affinity.required();
        fit.affinity = required.iter().map(term_domains).collect();
        if !required.is_empty() && fit.affinity.iter().all(|td| !td.hit.contains(&true)) {
            fit.affinity_waived = required
                .iter()
                .all(|term| term.selects(ns, ns, &t.labels, |n| view.namespace_labels(n)));
        }
        fit.anti = rules
            .pod_anti_affinity
            .required()
            .iter()
            .map(term_domains)
            .collect();
        for (sign, a) in [(1, &rules.pod_affinity), (-1, &rules.pod_anti_affinity)] {
            for w in a.preferred() {
                fit.preferred_total += i64::from(w.weight);
                fit.preferred.push((
                    sign * i64::from(w.weight),
                    term_domains(&w.pod_affinity_term),
                ));
            }
        }
        for c in &rules.topology_spread_constraints {
            fit.spread.push(spread(view, t, c));
        }
        fit
    }

    /// Whether the node passes the pod's required rules and existing pods' anti-affinity.
    pub fn check(&self, node: NodeId) -> Result<(), PodMismatch> {
        if !self.affinity_waived && self.affinity.iter().any(|td| td.hit(node) != Some(true)) {
            return Err(PodMismatch::Affinity);
        }
        if self.anti.iter().any(|td| td.hit(node) == Some(true)) {
            return Err(PodMismatch::AntiAffinity);
        }
        if self
            .existing_anti
            .iter()
            .any(|td| td.hit(node) == Some(true))
        {
            return Err(PodMismatch::ExistingAntiAffinity);
        }
        for s in self.spread.iter().filter(|s| s.hard) {
            let Some(d) = s.domains.of(node) else {
                return Err(PodMismatch::SpreadLabel(s.key.clone()));
            };
            if s.counts[d as usize] + s.self_match - s.min > s.max_skew {
                return Err(PodMismatch::Spread);
            }
        }
        Ok(())
    }

    /// Preferred inter-pod affinity: -100..=100, the weights of the terms the node's
    /// domains satisfy over all the pod's preferred weights.
    pub fn affinity_score(&self, node: NodeId) -> f64 {
        if self.preferred_total == 0 {
            return 0.0;
        }
        let raw: i64 = self
            .preferred
            .iter()
            .filter(|(_, td)| td.hit(node) == Some(true))
            .map(|(w, _)| w)
            .sum();
        100.0 * raw as f64 / self.preferred_total as f64
    }

    /// Soft spread (ScheduleAnyway): 0..=100, higher where fewer matching pods are.
    pub fn spread_score(&self, node: NodeId) -> f64 {
        let soft: Vec<&Spread> = self.spread.iter().filter(|s| !s.hard).collect();
        if soft.is_empty() {
            return 0.0;
        }
        let sum: f64 = soft
            .iter()
            .map(|s| match s.domains.of(node) {
                Some(d) => {
                    let above = (s.counts[d as usize] - s.min) as f64;
                    1.0 - above / (s.max - s.min + 1) as f64
                }
                None => 0.0,
            })
            .sum();
        100.0 * sum / soft.len() as f64
    }
}

/// The nodes a spread constraint counts for one placement: those with the key, and (by the
/// policies) those the pod's node selector and required affinity allow and whose taints it
/// tolerates. It depends on nodes' labels and taints only, so a session works it out once
/// per placement and constraint (`PodView::counted_nodes`), not once per pod placed.
pub struct CountedNodes {
    pub node: Vec<bool>,
    pub domain: Vec<bool>,
}

impl CountedNodes {
    pub fn new(view: &PodView, t: &TaskInfo, c: &TopologySpreadConstraint) -> CountedNodes {
        let domains = view.domains(&c.topology_key);
        let state = view.state();
        let mut node = vec![false; state.node_slots()];
        let mut domain = vec![false; domains.len()];
        for (id, n) in state.nodes() {
            let Some(d) = domains.of(id) else { continue };
            let p = &t.placement;
            let affinity_ok =
                !c.honours_node_affinity() || p.check(&n.name, &n.labels, &[]).is_ok();
            let taints_ok = !c.honours_taints() || p.check(&n.name, &n.labels, &n.taints).is_ok();
            if affinity_ok && taints_ok {
                node[id.0 as usize] = true;
                domain[d as usize] = true;
            }
        }
        CountedNodes { node, domain }
    }
}

fn spread(view: &PodView, t: &TaskInfo, c: &TopologySpreadConstraint) -> Spread {
    let domains = view.domains(&c.topology_key);
    let counted = view.counted_nodes(t, c);
    let mut counts = vec![0i64; domains.len()];
    let term = spread_term(c);
    view.for_each_selected(&t.namespace, &term, |node, _| {
        if counted.node[node.0 as usize] {
            if let Some(d) = domains.of(node) {
                counts[d as usize] += 1;
            }
        }
    });
    let eligible: Vec<i64> = counts
        .iter()
        .zip(&counted.domain)
        .filter(|(_, c)| **c)
        .map(|(n, _)| *n)
        .collect();
    let mut min = eligible.iter().copied().min().unwrap_or(0);
    let max = eligible.iter().copied().max().unwrap_or(0);
    if c.min_domains
        .is_some_and(|m| (eligible.len() as i64) < i64::from(m))
    {
        min = 0;
    }
    let self_match = i64::from(
        c.label_selector
            .as_ref()
            .is_some_and(|s: &LabelSelector| s.matches(&t.labels)),
    );
    Spread {
        key: c.topology_key.clone(),
        domains,
        counts,
        min,
        max,
        self_match,
        max_skew: i64::from(c.max_skew),
        hard: c.when_unsatisfiable == WhenUnsatisfiable::DoNotSchedule,
    }
}
