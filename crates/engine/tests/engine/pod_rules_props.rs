//! Property test: every placement the engine commits satisfies the pods' required rules
//! relative to other pods, checked after every cycle by an independent checker over the
//! whole cluster (like the partial-gang and over-commit invariants of `engine_props`).
//!
//! Random nodes (zones, sizes, some tainted, some cordoned), pods of another scheduler
//! (labels, host ports, anti-affinity), and random gangs whose pods carry hostname or zone
//! anti-affinity within the gang, zone spread (maxSkew 1–2, DoNotSchedule), zone affinity
//! to their own gang, host ports, or nothing; several cycles with churn (pods finish).
//! Checked from the test's own record of where each pod is, never the engine's:
//! - host ports: no two pods on one node want the same port;
//! - required anti-affinity: no pod with such a term has a pod it selects in its domain;
//! - required affinity: a pod bound this cycle has a pod it names in its domain, or none
//!   exists anywhere (the first of a group that wants to be together);
//! - spread: a gang bound whole in one cycle has max − min ≤ maxSkew over the zones of the
//!   nodes it may use (sequential placement keeps that bound at every step);
//! - no partial gang, no node over-committed.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use proptest::prelude::*;
use rust_batch_engine::cache::{Cache, PodUpdate};
use rust_batch_engine::model::pod_rules::{HostPort, Labels, PodRules};
use rust_batch_engine::model::{Placement, Resource, Taint, TaintEffect, TaskInfo, TaskStatus};
use rust_batch_engine::testkit::*;

const ZONE: &str = "topology.kubernetes.io/zone";

#[derive(Clone, Debug)]
struct NodeCfg {
    zone: u8,
    cpu: i64,
    tainted: bool,
    cordoned: bool,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Rule {
    None,
    HostAnti,
    ZoneAnti,
    Spread(i32),
    ZoneTogether,
    Port(i32),
}

#[derive(Clone, Debug)]
struct GangCfg {
    size: usize,
    min: usize,
    cpu_m: i64,
    rule: Rule,
}

#[derive(Clone, Debug)]
struct World {
    nodes: Vec<NodeCfg>,
    foreign: Vec<(usize, u8)>,
    gangs: Vec<GangCfg>,
    cycles: usize,
    churn: u64,
}

fn world() -> impl Strategy<Value = World> {
    let node = (
        0u8..3,
        1i64..=8,
        prop::bool::weighted(0.1),
        prop::bool::weighted(0.05),
    )
        .prop_map(|(zone, cpu, tainted, cordoned)| NodeCfg {
            zone,
            cpu,
            tainted,
            cordoned,
        });
    let rule = prop_oneof![
        Just(Rule::None),
        Just(Rule::HostAnti),
        Just(Rule::ZoneAnti),
        (1i32..=2).prop_map(Rule::Spread),
        Just(Rule::ZoneTogether),
        (9000i32..9002).prop_map(Rule::Port),
    ];
    let gang =
        (1usize..=6, 0usize..=6, 250i64..=2000, rule).prop_map(|(size, min, cpu_m, rule)| {
            GangCfg {
                size,
                min: min.clamp(1, size),
                cpu_m,
                rule,
            }
        });
    (
        prop::collection::vec(node, 1..=8),
        prop::collection::vec((0usize..8, 0u8..3), 0..=4),
        prop::collection::vec(gang, 1..=6),
        1usize..=3,
        any::<u64>(),
    )
        .prop_map(|(nodes, foreign, gangs, cycles, churn)| World {
            nodes,
            foreign,
            gangs,
            cycles,
            churn,
        })
}

fn rules_of(gang: &str, rule: Rule) -> Placement {
    let selector = format!("{{matchLabels: {{gang: {gang}}}}}");
    let yaml = match rule {
        Rule::None => return Placement::default(),
        Rule::Port(p) => return rust_batch_engine::yaml::from_str(&format!("hostPorts: [{{port: {p}}}]")).unwrap(),
        Rule::HostAnti => format!(
            "podAntiAffinity: {{requiredDuringSchedulingIgnoredDuringExecution: [{{topologyKey: kubernetes.io/hostname, labelSelector: {selector}}}]}}"
        ),
        Rule::ZoneAnti => format!(
            "podAntiAffinity: {{requiredDuringSchedulingIgnoredDuringExecution: [{{topologyKey: {ZONE}, labelSelector: {selector}}}]}}"
        ),
        Rule::ZoneTogether => format!(
            "podAffinity: {{requiredDuringSchedulingIgnoredDuringExecution: [{{topologyKey: {ZONE}, labelSelector: {selector}}}]}}"
        ),
        Rule::Spread(skew) => format!(
            "topologySpreadConstraints: [{{maxSkew: {skew}, topologyKey: {ZONE}, labelSelector: {selector}}}]"
        ),
    };
    let rules: PodRules = rust_batch_engine::yaml::from_str(&yaml).unwrap();
    Placement {
        pod_rules: Some(Box::new(rules)),
        ..Default::default()
    }
}

/// The test's own record of a pod.
#[derive(Clone)]
struct Pod {
    gang: Option<String>,
    labels: Labels,
    placement: Placement,
    cpu_m: i64,
    node: Option<String>,
}

struct Model {
    pods: BTreeMap<String, Pod>,
    nodes: HashMap<String, (String, i64)>,
    min: HashMap<String, usize>,
}

fn build(w: &World) -> (Cache, Model) {
    let mut cache = cache_with_default_queue();
    let mut model = Model {
        pods: BTreeMap::new(),
        nodes: HashMap::new(),
        min: HashMap::new(),
    };
    for (i, n) in w.nodes.iter().enumerate() {
        let name = format!("n{i}");
        let zone = format!("z{}", n.zone);
        let mut spec = host(
            &name,
            &[("cpu", &n.cpu.to_string()), ("memory", "64Gi")],
            &[(ZONE, &zone)],
        );
        spec.unschedulable = n.cordoned;
        if n.tainted {
            spec.taints = vec![Taint {
                key: "dedicated".into(),
                value: "x".into(),
                effect: TaintEffect::NoSchedule,
            }];
        }
        cache.apply_node(spec);
        model.nodes.insert(name, (zone, n.cpu * 1000));
    }
    for (i, (node, kind)) in w.foreign.iter().enumerate() {
        let node = format!("n{}", node % w.nodes.len());
        let uid = format!("foreign-{i}");
        // Another scheduler's pod: a port, or anti-affinity toward gang g0, or plain.
        let (labels_of, placement) = match kind {
            0 => (vec![("app", "sshd")], rules_of("none", Rule::Port(9000))),
            1 => (vec![("app", "db")], rules_of("g0", Rule::HostAnti)),
            _ => (vec![("gang", "g1")], Placement::default()),
        };
        foreign_pod_with(&mut cache, &uid, &node, &labels_of, placement.clone());
        model.pods.insert(
            uid,
            Pod {
                gang: None,
                labels: labels(&labels_of),
                placement,
                cpu_m: 100,
                node: Some(node),
            },
        );
    }
    for (g, cfg) in w.gangs.iter().enumerate() {
        let name = format!("g{g}");
        let placement = rules_of(&name, cfg.rule);
        let cpu = format!("{}m", cfg.cpu_m);
        let uid = Gang::new(&name, cfg.min as u32)
            .placed_tasks("", cfg.size, &[("cpu", &cpu)], placement.clone())
            .labelled(&[("gang", &name)])
            .apply(&mut cache);
        model.min.insert(uid.clone(), cfg.min);
        for i in 0..cfg.size {
            model.pods.insert(
                format!("default/{name}-{i}"),
                Pod {
                    gang: Some(uid.clone()),
                    labels: labels(&[("gang", &name)]),
                    placement: placement.clone(),
                    cpu_m: cfg.cpu_m,
                    node: None,
                },
            );
        }
    }
    (cache, model)
}

fn domain<'a>(model: &'a Model, node: &'a str, key: &str) -> &'a str {
    if key == ZONE {
        &model.nodes[node].0
    } else {
        node
    }
}

fn check(model: &Model, fresh: &BTreeMap<String, Vec<String>>) -> Result<(), TestCaseError> {
    let placed: Vec<(&String, &Pod, &str)> = model
        .pods
        .iter()
        .filter_map(|(uid, p)| p.node.as_deref().map(|n| (uid, p, n)))
        .collect();
    // Over-commit.
    let mut used: HashMap<&str, i64> = HashMap::new();
    for (_, p, n) in &placed {
        *used.entry(n).or_default() += p.cpu_m;
    }
    for (n, u) in used {
        prop_assert!(u <= model.nodes[n].1, "node {n} over-committed: {u}m");
    }
    // Partial gangs.
    for (gang, binds) in fresh {
        let present = placed
            .iter()
            .filter(|(_, p, _)| p.gang.as_ref() == Some(gang))
            .count();
        prop_assert!(
            present >= model.min[gang],
            "{gang}: {} bound, {present} present",
            binds.len()
        );
    }
    for (i, (uid, p, n)) in placed.iter().enumerate() {
        // Host ports.
        for (other, q, m) in &placed[i + 1..] {
            // Pods of another scheduler are where it put them: only ours are checked.
            if n == m && (p.gang.is_some() || q.gang.is_some()) {
                let clash = p
                    .placement
                    .host_ports
                    .iter()
                    .any(|a: &HostPort| q.placement.host_ports.iter().any(|b| a.conflicts(b)));
                prop_assert!(!clash, "{uid} and {other} share a host port on {n}");
            }
        }
        let Some(rules) = p.placement.rules() else {
            continue;
        };
        for term in rules.pod_anti_affinity.required() {
            let d = domain(model, n, &term.topology_key);
            for (other, q, m) in &placed {
                if other != uid
                    && domain(model, m, &term.topology_key) == d
                    && term
                        .label_selector
                        .as_ref()
                        .is_some_and(|s| s.matches(&q.labels))
                {
                    return Err(TestCaseError::fail(format!(
                        "{uid} on {n} shuns {other} on {m} ({})",
                        term.topology_key
                    )));
                }
            }
        }
        // Required affinity of a pod bound this cycle: another pod it names is in its
        // domain, or none is anywhere (the first of a group that wants to be together).
        let fresh_here = p.gang.as_ref().is_some_and(|g| fresh.contains_key(g));
        for term in rules.pod_affinity.required().iter().filter(|_| fresh_here) {
            let selects = |q: &Pod| {
                term.label_selector
                    .as_ref()
                    .is_some_and(|s| s.matches(&q.labels))
            };
            let d = domain(model, n, &term.topology_key);
            let near = placed.iter().any(|(o, q, m)| {
                o != uid && selects(q) && domain(model, m, &term.topology_key) == d
            });
            let anywhere = placed.iter().any(|(o, q, _)| o != uid && selects(q));
            prop_assert!(near || !anywhere, "{uid} on {n}: no pod it needs in {d}");
        }
    }
    // Spread of gangs bound whole in this cycle.
    for (gang, binds) in fresh {
        let Some((_, p, _)) = placed
            .iter()
            .find(|(_, q, _)| q.gang.as_ref() == Some(gang))
        else {
            continue;
        };
        let Some(c) = p
            .placement
            .rules()
            .and_then(|r| r.topology_spread_constraints.first())
        else {
            continue;
        };
        let present = placed
            .iter()
            .filter(|(_, q, _)| q.gang.as_ref() == Some(gang))
            .count();
        if present != binds.len() {
            continue;
        }
        // Every present pod the constraint selects counts (another scheduler's too); the
        // bound holds if it held before the gang came.
        let selects = |q: &Pod| {
            c.label_selector
                .as_ref()
                .is_some_and(|s| s.matches(&q.labels))
        };
        let mut before: BTreeMap<&str, i64> =
            model.nodes.values().map(|(z, _)| (z.as_str(), 0)).collect();
        for (_, _, m) in placed
            .iter()
            .filter(|(_, q, _)| q.gang.is_none() && selects(q))
        {
            *before.get_mut(domain(model, m, ZONE)).unwrap() += 1;
        }
        let skew = |c: &BTreeMap<&str, i64>| c.values().max().unwrap() - c.values().min().unwrap();
        if skew(&before) > i64::from(c.max_skew) {
            continue;
        }
        let mut counts = before.clone();
        for b in binds {
            *counts.get_mut(domain(model, b, ZONE)).unwrap() += 1;
        }
        let (min, max) = (
            counts.values().min().unwrap(),
            counts.values().max().unwrap(),
        );
        prop_assert!(
            max - min <= i64::from(c.max_skew),
            "{gang} spread {counts:?} beyond maxSkew {}",
            c.max_skew
        );
    }
    Ok(())
}

fn run(w: &World) -> Result<(), TestCaseError> {
    let (mut cache, mut model) = build(w);
    let scheduler = scheduler(None);
    let mut rng = w.churn | 1;
    for round in 0..w.cycles {
        let result = scheduler.run_cycle(cache.snapshot(), round as i64 * 1000);
        let mut fresh: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for b in &result.binds {
            let pod = model.pods.get_mut(&*b.task).expect("a known pod");
            prop_assert!(pod.node.is_none(), "{} bound twice", b.task);
            pod.node = Some(b.node.to_string());
            fresh
                .entry(b.job.to_string())
                .or_default()
                .push(b.node.to_string());
        }
        prop_assert!(
            result.evictions.is_empty(),
            "nothing here is worth preempting"
        );
        apply_result(&mut cache, &result);
        check(&model, &fresh)?;
        // Churn: some running pods of ours finish and come back as new pending pods.
        let running: Vec<String> = model
            .pods
            .iter()
            .filter(|(_, p)| p.gang.is_some() && p.node.is_some())
            .map(|(u, _)| u.clone())
            .collect();
        for uid in running {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            if rng.is_multiple_of(4) {
                let pod = model.pods.get_mut(&uid).unwrap();
                pod.node = None;
                let mut task = TaskInfo::new(
                    uid.as_str(),
                    "default",
                    uid.trim_start_matches("default/"),
                    "",
                    Resource::from_quantities([("cpu", format!("{}m", pod.cpu_m).as_str())])
                        .unwrap(),
                    0,
                    Arc::new(pod.placement.clone()),
                    0,
                );
                task.labels = Arc::new(pod.labels.clone());
                task.status = TaskStatus::Pending;
                cache.apply_pod(PodUpdate {
                    task,
                    job: pod.gang.clone(),
                });
            }
        }
    }
    Ok(())
}

proptest! {
    // Seeds of past failures live next to this file (pod_rules_props.proptest-regressions).
    #![proptest_config(ProptestConfig {
        cases: 512,
        failure_persistence: Some(Box::new(
            proptest::test_runner::FileFailurePersistence::WithSource("proptest-regressions"),
        )),
        ..ProptestConfig::default()
    })]

    #[test]
    fn committed_placements_satisfy_every_required_pod_rule(w in world()) {
        run(&w)?;
    }
}
