//! binpack: prefer nodes that are already full, per resource weights, so whole nodes stay
//! free for large gangs. Arguments as in Volcano: `binpack.weight`, `binpack.cpu`,
//! `binpack.memory`, `binpack.resources: nvidia.com/gpu, example.com/foo` and
//! `binpack.resources.nvidia.com/gpu: 2`.

use serde::Deserialize;

use crate::conf::{ArgError, Arguments, Text, Weight};
use crate::framework::{vote, Plugin, Session};
use crate::model::resource::{CPU, MEMORY};
use crate::model::{NodeInfo, Resource, TaskInfo};

#[derive(Clone, Debug, PartialEq)]
pub struct Binpack {
    pub weight: f64,
    /// (resource, weight) pairs, weight > 0.
    pub resources: Vec<(String, f64)>,
}

/// binpack's arguments, as Volcano spells them (`binpack.resources.NAME` is read per
/// resource listed in `binpack.resources`).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct BinpackArguments {
    #[serde(rename = "binpack.weight")]
    pub weight: Option<Weight>,
    #[serde(rename = "binpack.cpu")]
    pub cpu: Option<Weight>,
    #[serde(rename = "binpack.memory")]
    pub memory: Option<Weight>,
    /// Other resources to pack, comma-separated.
    #[serde(rename = "binpack.resources")]
    pub resources: Option<Text>,
}

/// The weight of each resource in `binpack.resources`: `binpack.resources.nvidia.com/gpu`.
const RESOURCE_WEIGHT: &str = "binpack.resources.";

pub fn build(args: &Arguments) -> Result<Box<dyn Plugin>, ArgError> {
    let a: BinpackArguments = args.parse()?;
    args.declare_family(RESOURCE_WEIGHT);
    let or_one = |w: Option<Weight>| w.map(Weight::as_f64).unwrap_or(1.0);
    let weight = or_one(a.weight);
    let mut resources = vec![
        (CPU.to_string(), or_one(a.cpu)),
        (MEMORY.to_string(), or_one(a.memory)),
    ];
    if let Some(Text(list)) = a.resources {
        for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let w = or_one(args.get(&format!("{RESOURCE_WEIGHT}{name}"))?);
            resources.push((name.to_string(), w));
        }
    }
    resources.retain(|(_, w)| *w > 0.0);
    Ok(Box::new(Binpack { weight, resources }))
}

/// A weighed resource, resolved once so scoring reads cpu and memory from their fields.
#[derive(Clone, Debug, PartialEq)]
enum Dim {
    Cpu,
    Memory,
    Other(String),
}

impl Dim {
    fn of(name: &str) -> Self {
        match name {
            CPU => Dim::Cpu,
            MEMORY => Dim::Memory,
            other => Dim::Other(other.to_string()),
        }
    }

    fn get(&self, r: &Resource) -> i64 {
        match self {
            Dim::Cpu => r.milli_cpu,
            Dim::Memory => r.memory,
            Dim::Other(name) => r.get(name),
        }
    }
}

/// Σ w_r · (used_r + request_r) / allocatable_r over the resources the task requests,
/// divided by Σ w_r, times 100 and the plugin weight; 0 if the task would overflow.
fn score_with(weight: f64, dims: &[(Dim, f64)], task: &TaskInfo, node: &NodeInfo) -> f64 {
    let mut sum = 0.0;
    let mut weights = 0.0;
    for (dim, w) in dims {
        let request = dim.get(&task.resreq);
        if request == 0 {
            continue;
        }
        let cap = dim.get(&node.allocatable);
        let used = dim.get(&node.used) + dim.get(&node.pipelined) + request;
        if cap <= 0 || used > cap {
            return 0.0;
        }
        sum += w * used as f64 / cap as f64;
        weights += w;
    }
    if weights == 0.0 {
        return 0.0;
    }
    sum / weights * 100.0 * weight
}

impl Binpack {
    fn dims(&self) -> Vec<(Dim, f64)> {
        self.resources
            .iter()
            .map(|(name, w)| (Dim::of(name), *w))
            .collect()
    }

    /// Σ w_r · (used_r + request_r) / allocatable_r over the resources the task requests,
    /// divided by Σ w_r, times 100 and the plugin weight; 0 if the task would overflow.
    pub fn score(&self, task: &TaskInfo, node: &NodeInfo) -> f64 {
        score_with(self.weight, &self.dims(), task, node)
    }
}

impl Plugin for Binpack {
    fn name(&self) -> &'static str {
        "binpack"
    }

    fn on_session_open(&self, ssn: &mut Session) {
        if self.weight == 0.0 {
            return;
        }
        let (weight, dims) = (self.weight, self.dims());
        ssn.add(
            vote::NodeOrder,
            Box::new(move |t, n| score_with(weight, &dims, t, n)),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::testkit::*;

    const SHAPE: &[(&str, &str)] = &[("cpu", "8"), ("memory", "8Gi"), ("nvidia.com/gpu", "8")];

    #[test]
    fn per_resource_weights_shape_the_score() {
        let mut cache = cache_with_default_queue();
        add_nodes(&mut cache, "n", 1, SHAPE);
        foreign_pod(
            &mut cache,
            "other",
            "n-00000",
            &[("cpu", "2"), ("nvidia.com/gpu", "4")],
        );
        Gang::new("j", 1)
            .tasks(
                "",
                1,
                &[("cpu", "2"), ("memory", "4Gi"), ("nvidia.com/gpu", "2")],
            )
            .apply(&mut cache);
        let score = |args: &str| {
            let conf = format!(
                "actions: allocate\ntiers:\n- plugins:\n  - name: binpack\n    arguments: {{{args}}}\n"
            );
            let ssn = open_session(&cache, Some(&conf));
            let t = task_ref(ssn.state(), "default/j-0").unwrap();
            ssn.node_score(t, ssn.node_ids()[0])
        };
        // cpu (2+2)/8 = 0.5 weight 1, gpu (4+2)/8 = 0.75 weight 3, memory weight 0:
        // (0.5 + 3 * 0.75) / 4 * 100 * 10.
        assert_eq!(
            score(
                "binpack.weight: 10, binpack.cpu: 1, binpack.memory: 0, binpack.resources: nvidia.com/gpu, binpack.resources.nvidia.com/gpu: 3"
            ),
            687.5
        );
        // Defaults: cpu and memory weight 1, GPUs not weighed: (0.5 + 0.5) / 2 * 100.
        assert_eq!(score(""), 50.0);
        // Weight 0 turns the plugin off.
        assert_eq!(score("binpack.weight: 0"), 0.0);
        let conf = "actions: allocate\ntiers:\n- plugins:\n  - name: binpack\n    arguments: {binpack.resources: nvidia.com/gpu, binpack.resources.nvidia.com/gpu: heavy}\n";
        let err = crate::testkit::checked_conf(conf, "s.conf").unwrap_err();
        assert!(
            err.to_string().contains("binpack.resources.nvidia.com/gpu"),
            "{err}"
        );
    }

    #[test]
    fn fuller_nodes_score_higher_and_overflow_scores_zero() {
        let b = Binpack {
            weight: 1.0,
            resources: vec![(CPU.into(), 1.0), (MEMORY.into(), 1.0)],
        };
        let t = lone_task(&[("cpu", "2"), ("memory", "2Gi")]);
        let emptier = node_using("n", SHAPE, &[("cpu", "1"), ("memory", "1Gi")]);
        let fuller = node_using("n", SHAPE, &[("cpu", "4"), ("memory", "4Gi")]);
        assert!(b.score(&t, &fuller) > b.score(&t, &emptier));
        let full = node_using("n", SHAPE, &[("cpu", "7"), ("memory", "1Gi")]);
        assert_eq!(b.score(&t, &full), 0.0, "cpu would overflow");
        assert_eq!(
            b.score(&lone_task(&[]), &fuller),
            0.0,
            "requests nothing it weighs"
        );
    }

    #[test]
    fn allocate_packs_with_binpack() {
        let mut cache = cache_with_default_queue();
        add_nodes(&mut cache, "n", 3, &[("cpu", "8"), ("memory", "8Gi")]);
        foreign_pod(
            &mut cache,
            "other",
            "n-00001",
            &[("cpu", "2"), ("memory", "2Gi")],
        );
        for i in 0..3 {
            Gang::new(&format!("j{i}"), 1)
                .created(i)
                .tasks("", 1, &[("cpu", "1"), ("memory", "1Gi")])
                .apply(&mut cache);
        }
        let conf = crate::conf_yaml!("enqueue, allocate"; ["gang", "predicates", "binpack"]);
        let result = run_cycle(&cache, Some(conf));
        let nodes: Vec<&str> = result.binds.iter().map(|b| &*b.node).collect();
        assert_eq!(nodes, ["n-00001"; 3]);
    }
}
