//! nodeorder: kube-scheduler's scoring, each on 0..=100 and weighted: least requested
//! (spread), most requested (pack), balanced allocation (cpu and memory used alike), taint
//! toleration (avoid PreferNoSchedule taints the pod does not tolerate), preferred node
//! affinity, preferred inter-pod affinity and anti-affinity (-100..=100) and soft topology
//! spread (ScheduleAnyway: fewer matching pods in the node's domain score higher).

use serde::Deserialize;

use crate::conf::{ArgError, Arguments, Weight};
use crate::framework::{vote, Plugin, Session};
use crate::model::{NodeInfo, TaintEffect, TaskInfo};

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NodeOrder {
    pub least_requested: f64,
    pub most_requested: f64,
    pub balanced: f64,
    pub taint_toleration: f64,
    pub node_affinity: f64,
    pub pod_affinity: f64,
    pub pod_topology_spread: f64,
}

/// nodeorder's arguments: the weights, as Volcano spells them. Volcano's other keys
/// (`imagelocality.weight`, …) score what this engine does not model: they load with a
/// warning that says so (`SchedulerConf::resolve_names`).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct NodeOrderArguments {
    #[serde(rename = "leastrequested.weight")]
    pub least_requested: Option<Weight>,
    #[serde(rename = "mostrequested.weight")]
    pub most_requested: Option<Weight>,
    #[serde(rename = "balancedresource.weight")]
    pub balanced: Option<Weight>,
    #[serde(rename = "tainttoleration.weight")]
    pub taint_toleration: Option<Weight>,
    #[serde(rename = "nodeaffinity.weight")]
    pub node_affinity: Option<Weight>,
    #[serde(rename = "podaffinity.weight")]
    pub pod_affinity: Option<Weight>,
    #[serde(rename = "podtopologyspread.weight")]
    pub pod_topology_spread: Option<Weight>,
}

pub fn build(args: &Arguments) -> Result<Box<dyn Plugin>, ArgError> {
    let a: NodeOrderArguments = args.parse()?;
    let w = |w: Option<Weight>, default: f64| w.map(Weight::as_f64).unwrap_or(default);
    Ok(Box::new(NodeOrder {
        least_requested: w(a.least_requested, 1.0),
        most_requested: w(a.most_requested, 0.0),
        balanced: w(a.balanced, 1.0),
        taint_toleration: w(a.taint_toleration, 1.0),
        node_affinity: w(a.node_affinity, 1.0),
        pod_affinity: w(a.pod_affinity, 1.0),
        // kube-scheduler's default weight for PodTopologySpread.
        pod_topology_spread: w(a.pod_topology_spread, 2.0),
    }))
}

/// Fraction of a dimension the node would have in use with the task on it, if the node
/// has any of it.
fn fraction(allocatable: i64, used: i64) -> Option<f64> {
    (allocatable > 0).then(|| (used as f64 / allocatable as f64).clamp(0.0, 1.0))
}

/// The cpu and memory fractions the node would have in use with the task on it. Read from
/// the fields directly: scores run for every candidate node of every task.
fn fractions(task: &TaskInfo, node: &NodeInfo) -> (Option<f64>, Option<f64>) {
    let (a, u, p, r) = (&node.allocatable, &node.used, &node.pipelined, &task.resreq);
    (
        fraction(a.milli_cpu, u.milli_cpu + p.milli_cpu + r.milli_cpu),
        fraction(a.memory, u.memory + p.memory + r.memory),
    )
}

/// Mean of `f` over the fractions the node has (cpu, then memory); 0 if it has neither.
fn mean(cpu: Option<f64>, memory: Option<f64>, f: impl Fn(f64) -> f64) -> f64 {
    match (cpu, memory) {
        (Some(c), Some(m)) => (f(c) + f(m)) / 2.0,
        (Some(x), None) | (None, Some(x)) => f(x),
        (None, None) => 0.0,
    }
}

fn least_of(cpu: Option<f64>, memory: Option<f64>) -> f64 {
    mean(cpu, memory, |x| (1.0 - x) * 100.0)
}

fn most_of(cpu: Option<f64>, memory: Option<f64>) -> f64 {
    mean(cpu, memory, |x| x * 100.0)
}

fn balanced_of(cpu: Option<f64>, memory: Option<f64>) -> f64 {
    let (Some(c), Some(m)) = (cpu, memory) else {
        return 0.0;
    };
    // Standard deviation of two fractions is half their distance.
    (1.0 - (c - m).abs() / 2.0) * 100.0
}

pub fn least_requested(task: &TaskInfo, node: &NodeInfo) -> f64 {
    let (c, m) = fractions(task, node);
    least_of(c, m)
}

pub fn most_requested(task: &TaskInfo, node: &NodeInfo) -> f64 {
    let (c, m) = fractions(task, node);
    most_of(c, m)
}

pub fn balanced(task: &TaskInfo, node: &NodeInfo) -> f64 {
    let (c, m) = fractions(task, node);
    balanced_of(c, m)
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

/// Preferred node affinity: 0..=100, the weights of the preferred terms the node matches
/// over all the pod's preferred weights.
pub fn preferred_node_affinity(task: &TaskInfo, node: &NodeInfo) -> f64 {
    let p = &task.placement;
    let total: i64 = p
        .preferred_node_affinity
        .iter()
        .map(|t| i64::from(t.weight))
        .sum();
    if total == 0 {
        return 0.0;
    }
    100.0 * p.preferred_node_weight(&node.name, &node.labels) as f64 / total as f64
}

impl Plugin for NodeOrder {
    fn name(&self) -> &'static str {
        "nodeorder"
    }

    fn on_session_open(&self, ssn: &mut Session) {
        let w = *self;
        ssn.add(
            vote::NodeOrder,
            Box::new(move |t, n| {
                let (c, m) = fractions(t, n);
                let mut score = 0.0;
                if w.least_requested > 0.0 {
                    score += w.least_requested * least_of(c, m);
                }
                if w.most_requested > 0.0 {
                    score += w.most_requested * most_of(c, m);
                }
                if w.balanced > 0.0 {
                    score += w.balanced * balanced_of(c, m);
                }
                if w.taint_toleration > 0.0 && !n.taints.is_empty() {
                    score += w.taint_toleration * taint_toleration(t, n);
                } else if w.taint_toleration > 0.0 {
                    score += w.taint_toleration * 100.0;
                }
                score
            }),
        );
        let used = ssn.pod_rules_in_use();
        if w.node_affinity > 0.0 && used.preferred_node_affinity {
            ssn.add(
                vote::NodeOrder,
                Box::new(move |t, n| w.node_affinity * preferred_node_affinity(t, n)),
            );
        }
        if used.pending_rules && (w.pod_affinity > 0.0 || w.pod_topology_spread > 0.0) {
            ssn.add(
                vote::PodNodeOrder,
                Box::new(move |pods, t, id, _| match pods.fit(t) {
                    Some(fit) => {
                        w.pod_affinity * fit.affinity_score(id)
                            + w.pod_topology_spread * fit.spread_score(id)
                    }
                    None => 0.0,
                }),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Taint;
    use crate::testkit::*;

    const SHAPE: &[(&str, &str)] = &[("cpu", "8"), ("memory", "8Gi")];

    #[test]
    fn least_requested_prefers_the_emptier_node() {
        let t = lone_task(&[("cpu", "1"), ("memory", "1Gi")]);
        let empty = node_using("e", SHAPE, &[]);
        let busy = node_using("b", SHAPE, &[("cpu", "4"), ("memory", "4Gi")]);
        assert_eq!(least_requested(&t, &empty), 87.5);
        assert_eq!(least_requested(&t, &busy), 37.5);
        assert_eq!(most_requested(&t, &busy), 62.5);
        assert!(most_requested(&t, &busy) > most_requested(&t, &empty));
    }

    #[test]
    fn balanced_prefers_a_node_used_alike_in_cpu_and_memory() {
        let t = lone_task(&[("cpu", "1"), ("memory", "1Gi")]);
        let skewed = node_using("s", SHAPE, &[("cpu", "6")]);
        let even = node_using("e", SHAPE, &[("cpu", "3"), ("memory", "3Gi")]);
        assert_eq!(balanced(&t, &even), 100.0);
        assert!(balanced(&t, &skewed) < balanced(&t, &even));
    }

    #[test]
    fn untolerated_prefer_no_schedule_taints_lower_the_score() {
        let t = lone_task(&[("cpu", "1")]);
        let mut soft = node_using("s", SHAPE, &[]);
        soft.taints = [Taint {
            key: "k".into(),
            value: String::new(),
            effect: TaintEffect::PreferNoSchedule,
        }]
        .into();
        assert_eq!(taint_toleration(&t, &node_using("p", SHAPE, &[])), 100.0);
        assert_eq!(taint_toleration(&t, &soft), 50.0);
    }

    fn spread(conf: &str) -> Vec<String> {
        // Four one-pod gangs on two nodes, one of which is half used.
        let mut cache = cache_with_default_queue();
        add_nodes(&mut cache, "n", 2, SHAPE);
        foreign_pod(
            &mut cache,
            "other",
            "n-00001",
            &[("cpu", "4"), ("memory", "4Gi")],
        );
        for i in 0..4 {
            Gang::new(&format!("j{i}"), 1)
                .created(i)
                .tasks("", 1, &[("cpu", "1"), ("memory", "1Gi")])
                .apply(&mut cache);
        }
        run_cycle(&cache, Some(conf))
            .binds
            .iter()
            .map(|b| b.node.to_string())
            .collect()
    }

    #[test]
    fn least_requested_spreads_and_most_requested_packs() {
        let conf = |args: &str| {
            format!(
                "actions: \"enqueue, allocate\"\ntiers:\n- plugins:\n  - name: gang\n  - name: predicates\n  - name: nodeorder\n    arguments: {{{args}}}\n"
            )
        };
        let least = spread(&conf(
            "leastrequested.weight: 1, balancedresource.weight: 0",
        ));
        // The empty node takes pods until it is as used as the other (4 + 4 = 8 after all).
        assert_eq!(least, ["n-00000"; 4]);
        let most = spread(&conf("leastrequested.weight: 0, mostrequested.weight: 1"));
        assert_eq!(most, ["n-00001"; 4], "packs onto the used node");
    }

    #[test]
    fn unknown_weights_are_warnings_known_ones_are_parsed() {
        let conf = crate::testkit::checked_conf(
            "actions: allocate\ntiers:\n- plugins:\n  - name: nodeorder\n    arguments: {leastrequested.weight: 2, nodeaffinity.weight: 3, magic.weight: 1}\n",
            "s.conf",
        )
        .unwrap();
        assert_eq!(
            conf.warnings,
            ["tiers[0].plugins[0].arguments.magic.weight"]
        );
        let args = &conf.plugin("nodeorder").unwrap().arguments;
        assert!(build(args).is_ok());
    }
}
