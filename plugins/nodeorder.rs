//! nodeorder: kube-scheduler's scoring, each on 0..=100 and weighted: least requested
//! (spread), most requested (pack), balanced allocation (cpu and memory used alike) and
//! taint toleration (avoid PreferNoSchedule taints the pod does not tolerate).

use crate::conf::{ArgError, Arguments};
use crate::framework::{Plugin, Session};
use crate::model::resource::{CPU, MEMORY};
use crate::model::{NodeInfo, TaintEffect, TaskInfo};

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NodeOrder {
    pub least_requested: f64,
    pub most_requested: f64,
    pub balanced: f64,
    pub taint_toleration: f64,
}

const KNOWN: &[&str] = &[
    "leastrequested.weight",
    "mostrequested.weight",
    "balancedresource.weight",
    "tainttoleration.weight",
];

pub fn build(args: &Arguments) -> Result<Box<dyn Plugin>, ArgError> {
    let w = |k: &str, default: f64| -> Result<f64, ArgError> {
        Ok(args.get_weight(k)?.map(f64::from).unwrap_or(default))
    };
    Ok(Box::new(NodeOrder {
        least_requested: w("leastrequested.weight", 1.0)?,
        most_requested: w("mostrequested.weight", 0.0)?,
        balanced: w("balancedresource.weight", 1.0)?,
        taint_toleration: w("tainttoleration.weight", 1.0)?,
    }))
}

/// Fraction of `name` the node would have in use with the task on it.
fn fraction_after(task: &TaskInfo, node: &NodeInfo, name: &str) -> Option<f64> {
    let cap = node.allocatable.get(name);
    (cap > 0).then(|| {
        let used = node.used.get(name) + node.pipelined.get(name) + task.resreq.get(name);
        (used as f64 / cap as f64).clamp(0.0, 1.0)
    })
}

pub fn least_requested(task: &TaskInfo, node: &NodeInfo) -> f64 {
    let f: Vec<f64> = [CPU, MEMORY]
        .iter()
        .filter_map(|r| fraction_after(task, node, r))
        .collect();
    if f.is_empty() {
        return 0.0;
    }
    f.iter().map(|x| (1.0 - x) * 100.0).sum::<f64>() / f.len() as f64
}

pub fn most_requested(task: &TaskInfo, node: &NodeInfo) -> f64 {
    let f: Vec<f64> = [CPU, MEMORY]
        .iter()
        .filter_map(|r| fraction_after(task, node, r))
        .collect();
    if f.is_empty() {
        return 0.0;
    }
    f.iter().map(|x| x * 100.0).sum::<f64>() / f.len() as f64
}

pub fn balanced(task: &TaskInfo, node: &NodeInfo) -> f64 {
    let (Some(c), Some(m)) = (
        fraction_after(task, node, CPU),
        fraction_after(task, node, MEMORY),
    ) else {
        return 0.0;
    };
    // Standard deviation of two fractions is half their distance.
    (1.0 - (c - m).abs() / 2.0) * 100.0
}

pub fn taint_toleration(task: &TaskInfo, node: &NodeInfo) -> f64 {
    let untolerated = node
        .taints
        .iter()
        .filter(|t| {
            t.effect == TaintEffect::PreferNoSchedule
                && !task
                    .placement
                    .tolerations
                    .iter()
                    .any(|tol| tol.tolerates(t))
        })
        .count();
    100.0 / (1.0 + untolerated as f64)
}

impl Plugin for NodeOrder {
    fn name(&self) -> &'static str {
        "nodeorder"
    }

    fn on_session_open(&mut self, ssn: &mut Session) {
        let w = *self;
        ssn.add_node_order_fn(
            self.name(),
            Box::new(move |t, n| {
                let mut score = 0.0;
                if w.least_requested > 0.0 {
                    score += w.least_requested * least_requested(t, n);
                }
                if w.most_requested > 0.0 {
                    score += w.most_requested * most_requested(t, n);
                }
                if w.balanced > 0.0 {
                    score += w.balanced * balanced(t, n);
                }
                if w.taint_toleration > 0.0 && !n.taints.is_empty() {
                    score += w.taint_toleration * taint_toleration(t, n);
                } else if w.taint_toleration > 0.0 {
                    score += w.taint_toleration * 100.0;
                }
                score
            }),
        );
    }

    fn argument_warnings(&self, args: &Arguments) -> Vec<String> {
        // Volcano's other weights (nodeaffinity, podaffinity, imagelocality, …) score things
        // this engine does not model; they are accepted and have no effect.
        args.unknown_keys(
            KNOWN,
            &[
                "nodeaffinity.",
                "podaffinity.",
                "imagelocality.",
                "podtopologyspread.",
                "selectorspread.",
                "volumebinding.",
            ],
        )
    }
}
