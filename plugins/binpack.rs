//! binpack: prefer nodes that are already full, per resource weights, so whole nodes stay
//! free for large gangs. Arguments as in Volcano: `binpack.weight`, `binpack.cpu`,
//! `binpack.memory`, `binpack.resources: nvidia.com/gpu, example.com/foo` and
//! `binpack.resources.nvidia.com/gpu: 2`.

use crate::conf::{ArgError, Arguments};
use crate::framework::{Plugin, Session};
use crate::model::resource::{CPU, MEMORY};
use crate::model::{NodeInfo, TaskInfo};

#[derive(Clone, Debug, PartialEq)]
pub struct Binpack {
    pub weight: f64,
    /// (resource, weight) pairs, weight > 0.
    pub resources: Vec<(String, f64)>,
}

pub fn build(args: &Arguments) -> Result<Box<dyn Plugin>, ArgError> {
    let weight = args
        .get_weight("binpack.weight")?
        .map(f64::from)
        .unwrap_or(1.0);
    let mut resources = vec![
        (
            CPU.to_string(),
            args.get_weight("binpack.cpu")?
                .map(f64::from)
                .unwrap_or(1.0),
        ),
        (
            MEMORY.to_string(),
            args.get_weight("binpack.memory")?
                .map(f64::from)
                .unwrap_or(1.0),
        ),
    ];
    if let Some(list) = args.get_str("binpack.resources")? {
        for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let key = format!("binpack.resources.{name}");
            let w = args.get_weight(&key)?.map(f64::from).unwrap_or(1.0);
            resources.push((name.to_string(), w));
        }
    }
    resources.retain(|(_, w)| *w > 0.0);
    Ok(Box::new(Binpack { weight, resources }))
}

impl Binpack {
    /// Σ w_r · (used_r + request_r) / allocatable_r over the resources the task requests,
    /// divided by Σ w_r, times 100 and the plugin weight; 0 if the task would overflow.
    pub fn score(&self, task: &TaskInfo, node: &NodeInfo) -> f64 {
        let mut sum = 0.0;
        let mut weights = 0.0;
        for (name, w) in &self.resources {
            let request = task.resreq.get(name);
            if request == 0 {
                continue;
            }
            let cap = node.allocatable.get(name);
            let used = node.used.get(name) + node.pipelined.get(name) + request;
            if cap <= 0 || used > cap {
                return 0.0;
            }
            sum += w * used as f64 / cap as f64;
            weights += w;
        }
        if weights == 0.0 {
            return 0.0;
        }
        sum / weights * 100.0 * self.weight
    }
}

impl Plugin for Binpack {
    fn name(&self) -> &'static str {
        "binpack"
    }

    fn on_session_open(&mut self, ssn: &mut Session) {
        if self.weight == 0.0 {
            return;
        }
        let this = self.clone();
        ssn.add_node_order_fn(self.name(), Box::new(move |t, n| this.score(t, n)));
    }

    fn argument_warnings(&self, args: &Arguments) -> Vec<String> {
        args.unknown_keys(
            &[
                "binpack.weight",
                "binpack.cpu",
                "binpack.memory",
                "binpack.resources",
            ],
            &["binpack.resources."],
        )
    }
}
