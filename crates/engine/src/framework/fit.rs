//! Why a task does not fit, per node and aggregated per task and per gang, in words a user
//! can act on: which resource, how much is needed and what the best node has free.

use std::collections::BTreeMap;
use std::fmt;

use crate::model::devices::{DeviceMismatch, DEVICE_CLASS_PREFIX};
use crate::model::placement::PlacementMismatch;
use crate::model::resource::{format_amount, Shortfall, PODS};
use crate::model::volumes::VolumeMismatch;
use crate::model::{NodeInfo, QueueInfo, Resource, TaskInfo};

/// Room for the task's requests (extended resources and one pod included) now or once the
/// node's releasing pods are gone; the action decides whether to allocate or pipeline.
pub fn resource_fit(task: &TaskInfo, node: &NodeInfo) -> Result<(), Unfit> {
    match node.future_shortfall(&task.resreq) {
        None => Ok(()),
        Some(s) if &*s.resource == PODS => Err(Unfit::TooManyPods {
            limit: node.allocatable.pods,
        }),
        Some(s) => Err(Unfit::Resources(s)),
    }
}

/// Why one node cannot take one task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unfit {
    Resources(Shortfall),
    TooManyPods {
        limit: i64,
    },
    Placement(PlacementMismatch),
    NodeUnschedulable,
    NodeNotReady,
    /// A rule relative to other pods.
    Pod(PodMismatch),
    /// The pod's PersistentVolumeClaims.
    Volume(VolumeMismatch),
    /// The pod's ResourceClaims (DRA devices).
    Devices(DeviceMismatch),
    /// Any other plugin's reason.
    Other(String),
}

/// Why other pods keep a pod off a node, in kube-scheduler's words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PodMismatch {
    Affinity,
    AntiAffinity,
    ExistingAntiAffinity,
    Spread,
    /// The node lacks a spread constraint's topology key.
    SpreadLabel(String),
    HostPorts,
}

impl PodMismatch {
    /// Whether the node stays unfit for the task until something is released on it (so a
    /// node search may drop it until then): true of host ports; inter-pod rules can change
    /// when pods come or go on other nodes of the domain.
    pub fn until_release(&self) -> bool {
        matches!(self, Self::HostPorts)
    }

    /// The reason, when it names nothing of the node's or pod's own.
    fn fixed_text(&self) -> Option<&'static str> {
        Some(match self {
            Self::Affinity => "node(s) didn't match pod affinity rules",
            Self::AntiAffinity => "node(s) didn't match pod anti-affinity rules",
            Self::ExistingAntiAffinity => {
                "node(s) didn't satisfy existing pods anti-affinity rules"
            }
            Self::Spread => "node(s) didn't match pod topology spread constraints",
            Self::HostPorts => "node(s) didn't have free ports for the requested pod ports",
            Self::SpreadLabel(_) => return None,
        })
    }
}

impl fmt::Display for PodMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::SpreadLabel(key) => write!(
                f,
                "node(s) didn't match pod topology spread constraints (missing required label {key})"
            ),
            fixed => f.write_str(fixed.fixed_text().unwrap_or_default()),
        }
    }
}

impl Unfit {
    /// The reason without per-node numbers, to count nodes that failed alike.
    pub fn kind(&self) -> String {
        match self {
            Unfit::Resources(s) => format!("Insufficient {}", s.resource),
            Unfit::Placement(m) => m.to_string(),
            Unfit::Pod(m) => m.to_string(),
            Unfit::Volume(m) => m.to_string(),
            Unfit::Devices(m) => m.to_string(),
            Unfit::Other(s) => s.clone(),
            fixed => fixed.fixed_kind().unwrap_or_default().to_string(),
        }
    }

    /// `kind` when it names nothing of the node's or pod's own (no formatting needed).
    fn fixed_kind(&self) -> Option<&'static str> {
        match self {
            Unfit::TooManyPods { .. } => Some("Too many pods"),
            Unfit::NodeUnschedulable => Some("node(s) were unschedulable"),
            Unfit::NodeNotReady => Some("node(s) were not ready"),
            Unfit::Pod(m) => m.fixed_text(),
            _ => None,
        }
    }
}

impl fmt::Display for Unfit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unfit::Resources(s) => write!(
                f,
                "Insufficient {} (need {}, node has {} free)",
                s.resource,
                format_amount(&s.resource, s.need),
                format_amount(&s.resource, s.free.max(0))
            ),
            Unfit::TooManyPods { limit } => write!(f, "Too many pods (limit {limit})"),
            other => write!(f, "{}", other.kind()),
        }
    }
}

/// Per-reason node counts for one task, with the best shortfall seen for each resource.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeRejections {
    /// reason kind -> number of nodes.
    pub counts: BTreeMap<String, u32>,
    /// resource -> the shortfall on the node with the most of it free.
    pub best_shortfall: BTreeMap<String, Shortfall>,
    pub nodes: u32,
}

impl NodeRejections {
    /// Counts one node's reason. Whole clusters are counted for a task that fits nowhere:
    /// a reason already counted is found without formatting it.
    pub fn add(&mut self, unfit: &Unfit) {
        let counted = match unfit {
            Unfit::Resources(s) => self
                .counts
                .iter_mut()
                .find(|(kind, _)| kind.strip_prefix("Insufficient ") == Some(&*s.resource))
                .map(|(_, n)| n),
            other => other
                .fixed_kind()
                .and_then(|kind| self.counts.get_mut(kind)),
        };
        match counted {
            Some(n) => {
                *n += 1;
                self.nodes += 1;
            }
            None => self.add_n(unfit.kind(), 1),
        }
        if let Unfit::Resources(s) = unfit {
            match self.best_shortfall.get_mut(&*s.resource) {
                Some(best) if s.free > best.free => *best = s.clone(),
                Some(_) => {}
                None => {
                    self.best_shortfall
                        .insert(s.resource.to_string(), s.clone());
                }
            }
        }
    }

    pub fn merge(&mut self, other: &NodeRejections) {
        for (kind, n) in &other.counts {
            self.add_n(kind.clone(), *n);
        }
        for (resource, s) in &other.best_shortfall {
            let best = self
                .best_shortfall
                .entry(resource.clone())
                .or_insert_with(|| s.clone());
            if s.free > best.free {
                *best = s.clone();
            }
        }
    }

    pub fn add_n(&mut self, kind: String, n: u32) {
        *self.counts.entry(kind).or_insert(0) += n;
        self.nodes += n;
    }

    /// The reason most nodes gave, with the best node's numbers for a resource shortfall.
    pub fn dominant(&self) -> String {
        let Some((kind, _)) = self
            .counts
            .iter()
            .max_by(|a, b| a.1.cmp(b.1).then_with(|| b.0.cmp(a.0)))
        else {
            return "no nodes in the cluster".to_string();
        };
        self.describe_kind(kind)
    }

    fn describe_kind(&self, kind: &str) -> String {
        match kind.strip_prefix("Insufficient ") {
            Some(resource) => self
                .best_shortfall
                .get(resource)
                .map(|s| s.describe())
                .unwrap_or_else(|| kind.to_string()),
            None => kind.to_string(),
        }
    }

    /// "0/4 nodes are available: 3 Insufficient nvidia.com/gpu (need 2, best node has 1
    /// free), 1 node(s) had untolerated taint {gpu: }".
    pub fn summary(&self) -> String {
        let mut parts: Vec<(u32, String)> = self
            .counts
            .iter()
            .map(|(k, n)| (*n, self.describe_kind(k)))
            .collect();
        parts.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        let list: Vec<String> = parts.iter().map(|(n, d)| format!("{n} {d}")).collect();
        format!("0/{} nodes are available: {}", self.nodes, list.join(", "))
    }
}

/// Why a task could not be placed in a session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskUnfit {
    /// The dominant reason, used to group tasks in the gang message.
    pub reason: String,
    /// The full per-node breakdown.
    pub detail: String,
    /// Its queue, not the nodes, turned it away (more nodes would not help).
    pub by_queue: bool,
}

impl TaskUnfit {
    pub fn other(reason: impl Into<String>) -> Self {
        let reason = reason.into();
        TaskUnfit {
            detail: reason.clone(),
            reason,
            by_queue: false,
        }
    }

    /// The task would take its queue beyond its capability; naming the devices it asks of
    /// DeviceClasses the capability counts (which resource holds it is the queue's to
    /// know, but a claim's devices are the usual one).
    pub fn over_capability(queue: &QueueInfo, need: &Resource) -> Self {
        let mut reason = format!("queue {:?} would exceed its capability", &*queue.name);
        if let Some(note) = device_quota_note(queue.capability.as_ref(), need) {
            reason.push_str(&format!(" ({note})"));
        }
        TaskUnfit {
            by_queue: true,
            ..Self::other(reason)
        }
    }
}

/// What `need` asks of the DeviceClasses `capability` counts devices of, with that
/// capability: `deviceclass/gpu 2 of its 8`; None when it asks none of them.
pub fn device_quota_note(capability: Option<&Resource>, need: &Resource) -> Option<String> {
    let capability = capability?;
    let named: Vec<String> = need
        .dimensions()
        .filter(|(name, want)| {
            name.starts_with(DEVICE_CLASS_PREFIX) && *want > 0 && capability.get(name) > 0
        })
        .map(|(name, want)| {
            format!(
                "{name} {} of its {}",
                format_amount(name, want),
                format_amount(name, capability.get(name))
            )
        })
        .collect();
    (!named.is_empty()).then(|| named.join(", "))
}

/// Builds the gang message: "3/5 tasks in gang unschedulable: 2 tasks: Insufficient
/// nvidia.com/gpu (need 2, best node has 1 free), 1 task: node(s) didn't match node
/// selector".
pub fn gang_message<'a>(
    total_tasks: usize,
    unfit: impl IntoIterator<Item = &'a TaskUnfit>,
    shortage: Option<String>,
) -> String {
    let mut by_reason: BTreeMap<&str, u32> = BTreeMap::new();
    let mut n = 0;
    for u in unfit {
        *by_reason.entry(&u.reason).or_insert(0) += 1;
        n += 1;
    }
    let mut parts: Vec<(u32, &str)> = by_reason.into_iter().map(|(r, c)| (c, r)).collect();
    parts.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1)));
    // "5 tasks: node(s) had untolerated taint": the count is of tasks, whatever the
    // reason counts inside (nodes).
    let list: Vec<String> = parts
        .iter()
        .map(|(c, r)| format!("{c} {}: {r}", if *c == 1 { "task" } else { "tasks" }))
        .collect();
    let mut msg = format!(
        "{n}/{total_tasks} tasks in gang unschedulable: {}",
        list.join(", ")
    );
    if let Some(s) = shortage {
        msg.push_str("; ");
        msg.push_str(&s);
    }
    msg
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn gpu_short(free: i64) -> Unfit {
        Unfit::Resources(Shortfall {
            resource: Arc::from("nvidia.com/gpu"),
            need: 2000,
            free,
        })
    }

    #[test]
    fn rejections_name_the_best_node() {
        let mut r = NodeRejections::default();
        r.add(&gpu_short(0));
        r.add(&gpu_short(1000));
        r.add(&Unfit::NodeUnschedulable);
        assert_eq!(
            r.dominant(),
            "Insufficient nvidia.com/gpu (need 2, best node has 1 free)"
        );
        assert_eq!(
            r.summary(),
            "0/3 nodes are available: 2 Insufficient nvidia.com/gpu (need 2, best node has 1 free), 1 node(s) were unschedulable"
        );
    }

    #[test]
    fn gang_message_groups_tasks_by_reason() {
        let gpu = TaskUnfit::other("Insufficient nvidia.com/gpu (need 2, best node has 1 free)");
        let sel = TaskUnfit::other("node(s) didn't match node selector");
        let msg = gang_message(5, [&gpu, &gpu, &sel], None);
        assert_eq!(
            msg,
            "3/5 tasks in gang unschedulable: 2 tasks: Insufficient nvidia.com/gpu (need 2, best node has 1 free), 1 task: node(s) didn't match node selector"
        );
    }
}
