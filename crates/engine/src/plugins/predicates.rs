//! predicates: a node must be ready and schedulable, match the pod's node selector and
//! required node affinity, carry no taint the pod does not tolerate, and reach the pod's
//! volumes (a bound volume's node affinity, the allowed topologies of a class to provision
//! from; a pod with an unbound Immediate claim, or a missing claim or class, fits no node:
//! kube-scheduler's VolumeBinding filter). These are static
//! (cached per placement for the session). Then, relative to other pods (running ones of
//! every scheduler and those placed earlier in the session alike): the pod's host ports
//! must be free on the node, its required inter-pod affinity and anti-affinity must hold,
//! existing pods' required anti-affinity must not shun it, and its DoNotSchedule topology
//! spread constraints must keep their skew (kube-scheduler's NodePorts, InterPodAffinity
//! and PodTopologySpread filters, which Volcano's predicates plugin runs too). Room for the pod's requests, extended resources
//! and one more pod is checked by the framework on every placement, with or without this
//! plugin (`framework::fit::resource_fit`): an over-committed node is never a matter of
//! configuration.

use crate::conf::{ArgError, Arguments, NoArguments};
use crate::framework::fit::{PodMismatch, Unfit};
use crate::framework::{vote, Plugin, Session};
use crate::model::volumes::VolumeMismatch;
use crate::model::{NodeInfo, TaskInfo};

pub struct Predicates;

/// Takes no arguments: Volcano's `predicate.*` switches (GPU sharing, proportional, …)
/// turn off filters rust-batch always applies, and load with a warning that says so
/// (`SchedulerConf::resolve_names`).
pub fn build(args: &Arguments) -> Result<Box<dyn Plugin>, ArgError> {
    args.parse::<NoArguments>()?;
    Ok(Box::new(Predicates))
}

pub fn static_fit(task: &TaskInfo, node: &NodeInfo) -> Result<(), Unfit> {
    let volumes = task.placement.volumes.as_deref();
    // A pod its volumes block fits no node whatever the node (kube-scheduler fails it in
    // PreFilter): every node says so, so that is the reason its gang gives.
    if let Some(why) = volumes.and_then(|v| v.blocked.as_ref()) {
        return Err(Unfit::Volume(VolumeMismatch::Blocked(why.clone())));
    }
    if !node.ready {
        return Err(Unfit::NodeNotReady);
    }
    if node.unschedulable {
        return Err(Unfit::NodeUnschedulable);
    }
    task.placement
        .check(&node.name, &node.labels, &node.taints)
        .map_err(Unfit::Placement)?;
    match volumes {
        Some(volumes) => volumes
            .check(&node.name, &node.labels)
            .map_err(Unfit::Volume),
        None => Ok(()),
    }
}

/// The node has none of the pod's host ports taken by a pod on it (a releasing pod holds
/// its ports until it is gone).
pub fn host_ports_free(task: &TaskInfo, node: &NodeInfo) -> Result<(), Unfit> {
    let wanted = &task.placement.host_ports;
    if wanted.is_empty() {
        return Ok(());
    }
    let taken = node
        .tasks
        .values()
        .flat_map(|t| t.placement.host_ports.iter());
    for port in taken {
        if wanted.iter().any(|w| w.conflicts(port)) {
            return Err(Unfit::Pod(PodMismatch::HostPorts));
        }
    }
    Ok(())
}

impl Plugin for Predicates {
    fn name(&self) -> &'static str {
        "predicates"
    }

    fn on_session_open(&self, ssn: &mut Session) {
        ssn.add(vote::StaticPredicate, Box::new(static_fit));
        let used = ssn.pod_rules_in_use();
        if used.pending_host_ports {
            ssn.add(vote::Predicate, Box::new(host_ports_free));
        }
        if used.pod_relative() {
            ssn.add(
                vote::PodPredicate,
                Box::new(|pods, t, id, _| match pods.fit(t) {
                    Some(fit) => fit.check(id).map_err(Unfit::Pod),
                    None => Ok(()),
                }),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use crate::model::placement::{
        NodeSelectorRequirement, NodeSelectorTerm, SelectorOperator, TolerationOperator,
    };
    use crate::model::{NodeSpec, Placement, Taint, TaintEffect, Toleration};
    use crate::testkit::*;

    const PREDICATES: &str = crate::conf_yaml!("enqueue, allocate"; ["gang", "predicates"]);

    fn labelled(name: &str, labels: &[(&str, &str)]) -> NodeSpec {
        NodeSpec {
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..node(name, &[("cpu", "4")])
        }
    }

    /// Runs one cycle with a single one-pod gang; returns the node it was bound to, or the
    /// gang's condition message.
    fn place(cache: &mut crate::cache::Cache, placement: Placement) -> Result<String, String> {
        let job = Gang::new("p", 1)
            .placed_tasks("", 1, &[("cpu", "1")], placement)
            .apply(cache);
        let result = run_cycle(cache, Some(PREDICATES));
        cache.delete_job(&job);
        cache.delete_pod("default/p-0");
        match result.binds.first() {
            Some(b) => Ok(b.node.to_string()),
            None => Err(condition_message(&result, &job).unwrap()),
        }
    }

    #[test]
    fn node_selector_and_required_affinity() {
        let mut cache = cache_with_default_queue();
        cache.apply_node(labelled("a", &[("zone", "a")]));
        cache.apply_node(labelled("b", &[("zone", "b"), ("gpus", "8")]));
        let selector = |zone: &str| Placement {
            node_selector: BTreeMap::from([("zone".to_string(), zone.to_string())]),
            ..Default::default()
        };
        assert_eq!(place(&mut cache, selector("a")), Ok("a".into()));
        assert_eq!(place(&mut cache, selector("b")), Ok("b".into()));
        assert_eq!(
            place(&mut cache, selector("c")),
            Err(
                "1/1 tasks in gang unschedulable: 1 task: node(s) didn't match node selector"
                    .into()
            )
        );
        let affinity = |op: SelectorOperator, value: &str| Placement {
            node_affinity: vec![NodeSelectorTerm {
                match_expressions: vec![NodeSelectorRequirement {
                    key: "gpus".into(),
                    operator: op,
                    values: vec![value.into()],
                }],
                match_fields: vec![],
            }],
            ..Default::default()
        };
        assert_eq!(
            place(&mut cache, affinity(SelectorOperator::Gt, "4")),
            Ok("b".into())
        );
        assert_eq!(
            place(&mut cache, affinity(SelectorOperator::Gt, "8")),
            Err(
                "1/1 tasks in gang unschedulable: 1 task: node(s) didn't match required node affinity"
                    .into()
            )
        );
    }

    #[test]
    fn volumes_go_where_their_volume_is_and_blocked_claims_wait_with_their_name() {
        use crate::model::volumes::{ClaimTopology, VolumeRules};
        let mut cache = cache_with_default_queue();
        cache.apply_node(labelled("a", &[("zone", "a")]));
        cache.apply_node(labelled("b", &[("zone", "b")]));
        let zone = |z: &str| NodeSelectorTerm {
            match_expressions: vec![NodeSelectorRequirement {
                key: "zone".into(),
                operator: SelectorOperator::In,
                values: vec![z.into()],
            }],
            match_fields: vec![],
        };
        let with = |rules: VolumeRules| Placement {
            volumes: Some(Box::new(rules)),
            ..Default::default()
        };
        let bound_in = |z: &str| VolumeRules {
            bound: vec![ClaimTopology {
                claim: "default/data".into(),
                terms: vec![zone(z)],
            }],
            ..Default::default()
        };
        assert_eq!(place(&mut cache, with(bound_in("b"))), Ok("b".into()));
        assert_eq!(place(&mut cache, with(bound_in("a"))), Ok("a".into()));
        assert_eq!(
            place(&mut cache, with(bound_in("c"))),
            Err(
                "1/1 tasks in gang unschedulable: 1 task: node(s) had volume node affinity conflict"
                    .into()
            )
        );
        let provision_in = |z: &str| VolumeRules {
            provision: vec![ClaimTopology {
                claim: "default/scratch".into(),
                terms: vec![zone(z)],
            }],
            ..Default::default()
        };
        assert_eq!(place(&mut cache, with(provision_in("b"))), Ok("b".into()));
        assert_eq!(
            place(&mut cache, with(provision_in("c"))),
            Err("1/1 tasks in gang unschedulable: 1 task: node(s) didn't find available persistent volumes to bind".into())
        );
        let blocked = VolumeRules {
            blocked: Some(
                "pod has unbound immediate PersistentVolumeClaims: persistentvolumeclaim \"data\" is not bound"
                    .into(),
            ),
            ..Default::default()
        };
        // Blocked beats every other reason (kube-scheduler's PreFilter): nodes the pod's
        // selector rules out say so too, so that is what its gang is told.
        let blocked_elsewhere = Placement {
            node_selector: BTreeMap::from([("zone".to_string(), "c".to_string())]),
            ..with(blocked.clone())
        };
        assert_eq!(
            place(&mut cache, blocked_elsewhere),
            Err("1/1 tasks in gang unschedulable: 1 task: pod has unbound immediate PersistentVolumeClaims: persistentvolumeclaim \"data\" is not bound".into())
        );
        assert_eq!(
            place(&mut cache, with(blocked)),
            Err("1/1 tasks in gang unschedulable: 1 task: pod has unbound immediate PersistentVolumeClaims: persistentvolumeclaim \"data\" is not bound".into())
        );
    }

    #[test]
    fn a_gang_whose_pods_each_have_a_local_volume_goes_to_those_nodes() {
        use crate::model::volumes::{ClaimTopology, VolumeRules};
        let mut cache = cache_with_default_queue();
        for n in ["n0", "n1", "n2"] {
            cache.apply_node(labelled(n, &[]));
        }
        // Each pod's volume lives on one node (a local PV pinned by metadata.name).
        let on = |n: &str| Placement {
            volumes: Some(Box::new(VolumeRules {
                bound: vec![ClaimTopology {
                    claim: format!("default/data-{n}"),
                    terms: vec![NodeSelectorTerm {
                        match_expressions: vec![],
                        match_fields: vec![NodeSelectorRequirement {
                            key: "metadata.name".into(),
                            operator: SelectorOperator::In,
                            values: vec![n.into()],
                        }],
                    }],
                }],
                ..Default::default()
            })),
            ..Default::default()
        };
        let job = Gang::new("local", 2)
            .placed_tasks("", 1, &[("cpu", "1")], on("n2"))
            .placed_tasks("", 1, &[("cpu", "1")], on("n0"))
            .apply(&mut cache);
        let result = run_cycle(&cache, Some(PREDICATES));
        let mut nodes = binds_by_job(&result)[&job].clone();
        nodes.sort();
        assert_eq!(nodes, ["n0", "n2"]);
    }

    #[test]
    fn taints_need_tolerations_and_prefer_no_schedule_only_prefers() {
        let mut cache = cache_with_default_queue();
        let taint = |key: &str, effect| Taint {
            key: key.into(),
            value: "yes".into(),
            effect,
        };
        cache.apply_node(NodeSpec {
            taints: vec![taint("gpu", TaintEffect::NoSchedule)],
            ..node("tainted", &[("cpu", "4")])
        });
        assert_eq!(
            place(&mut cache, Placement::default()),
            Err(
                "1/1 tasks in gang unschedulable: 1 task: node(s) had untolerated taint {gpu: yes}"
                    .into()
            )
        );
        let tolerate = Placement {
            tolerations: vec![Toleration {
                key: "gpu".into(),
                operator: TolerationOperator::Exists,
                ..Default::default()
            }],
            ..Default::default()
        };
        assert_eq!(place(&mut cache, tolerate), Ok("tainted".into()));
        cache.apply_node(NodeSpec {
            taints: vec![taint("soft", TaintEffect::PreferNoSchedule)],
            ..node("tainted", &[("cpu", "4")])
        });
        assert_eq!(
            place(&mut cache, Placement::default()),
            Ok("tainted".into())
        );
    }

    #[test]
    fn unschedulable_and_not_ready_nodes_take_nothing() {
        let mut cache = cache_with_default_queue();
        cache.apply_node(NodeSpec {
            unschedulable: true,
            ..node("cordoned", &[("cpu", "4")])
        });
        cache.apply_node(NodeSpec {
            ready: false,
            ..node("down", &[("cpu", "4")])
        });
        assert_eq!(
            place(&mut cache, Placement::default()),
            Err("1/1 tasks in gang unschedulable: 1 task: node(s) were not ready".into())
        );
        cache.apply_node(node("up", &[("cpu", "4")]));
        assert_eq!(place(&mut cache, Placement::default()), Ok("up".into()));
        let s = cache.snapshot();
        let t = crate::model::TaskInfo::new(
            "t",
            "default",
            "t",
            "",
            res(&[("cpu", "1")]),
            0,
            Default::default(),
            0,
        );
        let n = |name: &str| s.node(s.node_by_name(name).unwrap()).clone();
        assert_eq!(
            super::static_fit(&t, &n("cordoned")),
            Err(crate::framework::fit::Unfit::NodeUnschedulable)
        );
        assert_eq!(
            super::static_fit(&t, &n("down")),
            Err(crate::framework::fit::Unfit::NodeNotReady)
        );
    }

    #[test]
    fn pod_count_and_extended_resources_are_fitted_by_the_framework() {
        let mut cache = cache_with_default_queue();
        add_nodes(&mut cache, "n", 1, &[("cpu", "8"), ("pods", "2")]);
        let job = Gang::new("many", 1)
            .tasks("", 3, &[("cpu", "1")])
            .apply(&mut cache);
        let result = run_cycle(&cache, Some(PREDICATES));
        assert_eq!(binds_by_job(&result).get(&job).map(Vec::len), Some(2));

        let mut cache = cache_with_default_queue();
        add_nodes(&mut cache, "n", 1, &[("cpu", "8"), ("pods", "2")]);
        let job = Gang::new("many", 3)
            .tasks("", 3, &[("cpu", "1")])
            .apply(&mut cache);
        let result = run_cycle(&cache, Some(PREDICATES));
        assert!(result.binds.is_empty());
        assert_eq!(
            condition_message(&result, &job).as_deref(),
            Some("1/3 tasks in gang unschedulable: 1 task: Too many pods")
        );

        // No predicates plugin at all: resources are still fitted.
        let mut cache = cache_with_default_queue();
        add_nodes(
            &mut cache,
            "n",
            1,
            &[("cpu", "8"), ("example.com/fpga", "1")],
        );
        let job = Gang::new("fpga", 2)
            .tasks("", 2, &[("example.com/fpga", "1")])
            .apply(&mut cache);
        let bare = crate::conf_yaml!("enqueue, allocate"; ["gang"]);
        let result = run_cycle(&cache, Some(bare));
        assert!(result.binds.is_empty());
        assert_eq!(
            condition_message(&result, &job).as_deref(),
            Some(
                "1/2 tasks in gang unschedulable: 1 task: Insufficient example.com/fpga (need 1, best \
                 node has 0 free); gang is short of 1 example.com/fpga"
            )
        );
    }
}
