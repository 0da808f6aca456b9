//! Whole-gang placement against an exhaustive solver (and, at the end, subgroups placed in
//! domains of their own).
//!
//! Small random worlds (≤ 5 nodes with random cpu, memory and GPUs, rack and GPU-model
//! labels, part of each node taken by other schedulers' pods) and one gang (≤ 7 pods in
//! ≤ 3 roles, minMember ≤ pods, some roles pinned to a rack by nodeSelector), scheduled with
//! and without gpu-affinity, with and without a hard topology request (Volcano
//! networkTopology over rack HyperNodes, or Kueue's required-topology annotation on the rack
//! label). The solver tries every assignment of pods to nodes (or to none) and knows the
//! rules itself: resources, pod slots, node selectors, and — when they apply — one rack for
//! the whole gang and one GPU model for its GPU pods.
//!
//! Checked after one cycle:
//! - whenever the solver finds a placement, allocate binds the gang in that cycle (zero
//!   "fits but not placed");
//! - whatever it binds is a placement the solver accepts (no node over its allocatable, no
//!   hard rule broken), and when the solver finds none it binds nothing.

use std::collections::BTreeMap;

use proptest::prelude::*;
use rust_batch_engine::cache::Cache;
use rust_batch_engine::model::{
    HyperNodeMember, HyperNodeSpec, MemberKind, MemberSelector, NodeSpec,
};
use rust_batch_engine::testkit::*;

const RACKS: [&str; 2] = ["r0", "r1"];
const MODELS: [&str; 2] = ["A100", "H100"];
const GPU: &str = "nvidia.com/gpu";

#[derive(Clone, Debug)]
struct Node {
    cpu: i64,
    mem_gi: i64,
    gpus: i64,
    rack: usize,
    model: usize,
    /// Taken by another scheduler's pod.
    used_cpu: i64,
    used_gpus: i64,
}

#[derive(Clone, Debug)]
struct Role {
    count: usize,
    cpu: i64,
    mem_gi: i64,
    gpus: i64,
    /// nodeSelector example.com/rack.
    rack: Option<usize>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Topo {
    None,
    VolcanoHard,
    KueueRequired,
}

#[derive(Clone, Debug)]
struct World {
    nodes: Vec<Node>,
    roles: Vec<Role>,
    min_member: usize,
    gpu_affinity: bool,
    topo: Topo,
}

fn node() -> impl Strategy<Value = Node> {
    (
        1i64..=8,
        1i64..=16,
        prop_oneof![Just(0i64), 1i64..=4],
        0..2usize,
        0..2usize,
    )
        .prop_flat_map(|(cpu, mem_gi, gpus, rack, model)| {
            (0..=cpu / 2, 0..=gpus / 2).prop_map(move |(used_cpu, used_gpus)| Node {
                cpu,
                mem_gi,
                gpus,
                rack,
                model,
                used_cpu,
                used_gpus,
            })
        })
}

fn role() -> impl Strategy<Value = Role> {
    (
        1usize..=3,
        1i64..=4,
        0i64..=4,
        prop_oneof![2 => Just(0i64), 1 => 1i64..=2],
        prop_oneof![3 => Just(None), 1 => (0..2usize).prop_map(Some)],
    )
        .prop_map(|(count, cpu, mem_gi, gpus, rack)| Role {
            count,
            cpu,
            mem_gi,
            gpus,
            rack,
        })
}

fn world() -> impl Strategy<Value = World> {
    (
        prop::collection::vec(node(), 1..=5),
        prop::collection::vec(role(), 1..=3),
        any::<bool>(),
        prop_oneof![
            Just(Topo::None),
            Just(Topo::VolcanoHard),
            Just(Topo::KueueRequired)
        ],
        0usize..=2,
    )
        .prop_map(|(nodes, mut roles, gpu_affinity, topo, slack)| {
            // At most 7 pods.
            while roles.iter().map(|r| r.count).sum::<usize>() > 7 {
                let r = roles.iter_mut().max_by_key(|r| r.count).unwrap();
                r.count -= 1;
            }
            roles.retain(|r| r.count > 0);
            let total: usize = roles.iter().map(|r| r.count).sum();
            World {
                nodes,
                roles,
                min_member: total.saturating_sub(slack).max(1),
                gpu_affinity,
                topo,
            }
        })
}

fn node_name(i: usize) -> String {
    format!("n{i}")
}

fn build(w: &World) -> (Cache, String) {
    let mut cache = cache_with_default_queue();
    for (i, n) in w.nodes.iter().enumerate() {
        let gpus = n.gpus.to_string();
        let mut alloc = vec![
            ("cpu", n.cpu.to_string()),
            ("memory", format!("{}Gi", n.mem_gi)),
        ];
        if n.gpus > 0 {
            alloc.push((GPU, gpus));
        }
        let alloc: Vec<(&str, &str)> = alloc.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let mut l = vec![("example.com/rack", RACKS[n.rack])];
        if n.gpus > 0 {
            l.push(("nvidia.com/gpu.product", MODELS[n.model]));
        }
        cache.apply_node(NodeSpec {
            labels: labels(&l),
            ..rust_batch_engine::testkit::node(&node_name(i), &alloc)
        });
        if n.used_cpu > 0 || n.used_gpus > 0 {
            let (c, g) = (n.used_cpu.to_string(), n.used_gpus.to_string());
            let mut req = vec![("cpu", c.as_str())];
            if n.used_gpus > 0 {
                req.push((GPU, g.as_str()));
            }
            foreign_pod(&mut cache, &format!("other-{i}"), &node_name(i), &req);
        }
    }
    if w.topo == Topo::VolcanoHard {
        for (r, rack) in RACKS.iter().enumerate() {
            let members: Vec<HyperNodeMember> = (0..w.nodes.len())
                .filter(|i| w.nodes[*i].rack == r)
                .map(|i| HyperNodeMember {
                    kind: MemberKind::Node,
                    selector: MemberSelector::Exact(node_name(i)),
                })
                .collect();
            cache.apply_hypernode(HyperNodeSpec {
                name: rack.to_string(),
                tier: 1,
                tier_name: None,
                members,
            });
        }
    }
    let mut gang = Gang::new("g", w.min_member as u32);
    for (k, role) in w.roles.iter().enumerate() {
        let (c, m, g) = (
            role.cpu.to_string(),
            format!("{}Gi", role.mem_gi),
            role.gpus.to_string(),
        );
        let mut req = vec![("cpu", c.as_str())];
        if role.mem_gi > 0 {
            req.push(("memory", m.as_str()));
        }
        if role.gpus > 0 {
            req.push((GPU, g.as_str()));
        }
        let before = gang.tasks.len();
        gang = gang.tasks(&format!("role{k}"), role.count, &req);
        if let Some(rack) = role.rack {
            for t in &mut gang.tasks[before..] {
                let mut p = (*t.placement).clone();
                p.node_selector =
                    BTreeMap::from([("example.com/rack".to_string(), RACKS[rack].to_string())]);
                t.set_placement(p);
            }
        }
    }
    gang = match w.topo {
        Topo::None => gang,
        Topo::VolcanoHard => gang.network_topology("hard", Some(1)),
        Topo::KueueRequired => gang.annotate(
            "kueue.x-k8s.io/podset-required-topology",
            "example.com/rack",
        ),
    };
    let uid = gang.apply(&mut cache);
    (cache, uid)
}

fn conf(w: &World) -> String {
    let mut text = "actions: \"enqueue, allocate\"\ntiers:\n- plugins:\n  - name: gang\n  \
                    - name: predicates\n  - name: nodeorder\n"
        .to_string();
    if w.gpu_affinity {
        text.push_str(
            "  - name: gpu-affinity\n    arguments:\n      gpu-affinity.topologyLevels: \
             example.com/rack\n",
        );
    }
    text
}

/// The pods in order, as (role index), and the rules that apply to the gang.
struct Rules {
    pods: Vec<usize>,
    one_rack: bool,
    one_model: bool,
}

fn rules(w: &World) -> Rules {
    let pods: Vec<usize> = w
        .roles
        .iter()
        .enumerate()
        .flat_map(|(k, r)| std::iter::repeat_n(k, r.count))
        .collect();
    // Kueue's annotation is read by gpu-affinity only; Volcano's hard request too.
    let one_rack = w.gpu_affinity && w.topo != Topo::None;
    let gpu_pods = pods.iter().filter(|k| w.roles[**k].gpus > 0).count();
    let one_model = w.gpu_affinity && gpu_pods >= 2;
    Rules {
        pods,
        one_rack,
        one_model,
    }
}

/// Whether `assignment` (pod -> node or None) is a valid placement of the gang.
fn valid(w: &World, r: &Rules, assignment: &[Option<usize>]) -> bool {
    let placed = assignment.iter().filter(|a| a.is_some()).count();
    if placed < w.min_member {
        return false;
    }
    let mut cpu = vec![0i64; w.nodes.len()];
    let mut mem = vec![0i64; w.nodes.len()];
    let mut gpu = vec![0i64; w.nodes.len()];
    let mut racks = std::collections::BTreeSet::new();
    let mut models = std::collections::BTreeSet::new();
    for (p, a) in assignment.iter().enumerate() {
        let Some(n) = *a else { continue };
        let role = &w.roles[r.pods[p]];
        let node = &w.nodes[n];
        if role.rack.is_some_and(|rk| rk != node.rack) {
            return false;
        }
        cpu[n] += role.cpu;
        mem[n] += role.mem_gi;
        gpu[n] += role.gpus;
        racks.insert(node.rack);
        if role.gpus > 0 {
            models.insert(node.model);
        }
    }
    for (n, node) in w.nodes.iter().enumerate() {
        if cpu[n] > node.cpu - node.used_cpu
            || mem[n] > node.mem_gi
            || gpu[n] > node.gpus - node.used_gpus
        {
            return false;
        }
    }
    !(r.one_rack && racks.len() > 1 || r.one_model && models.len() > 1)
}

/// Every assignment of pods to nodes or to none; true if one is valid.
fn solvable(w: &World, r: &Rules) -> bool {
    any_assignment(r.pods.len(), w.nodes.len(), &|a| valid(w, r, a))
}

/// Whether some assignment of `pods` pods to `nodes` nodes or to none passes `valid`.
fn any_assignment(pods: usize, nodes: usize, valid: &dyn Fn(&[Option<usize>]) -> bool) -> bool {
    fn go(
        pods: usize,
        nodes: usize,
        valid: &dyn Fn(&[Option<usize>]) -> bool,
        a: &mut Vec<Option<usize>>,
    ) -> bool {
        if a.len() == pods {
            return valid(a);
        }
        for choice in std::iter::once(None).chain((0..nodes).map(Some)) {
            a.push(choice);
            if go(pods, nodes, valid, a) {
                return true;
            }
            a.pop();
        }
        false
    }
    go(pods, nodes, valid, &mut Vec::new())
}

fn check(w: &World) -> Result<(), TestCaseError> {
    let (cache, uid) = build(w);
    let result = run_cycle(&cache, Some(&conf(w)));
    let r = rules(w);
    let fits = solvable(w, &r);
    let binds: Vec<_> = result.binds.iter().filter(|b| *b.job == *uid).collect();
    if binds.is_empty() {
        prop_assert!(
            !fits,
            "fits but not placed: {:?}\n{:?}",
            condition_message(&result, &uid),
            w
        );
        return Ok(());
    }
    prop_assert!(
        fits,
        "placed although the solver finds no placement: {binds:?}"
    );
    // What was bound must itself be a valid placement. Pods of one role are alike: the
    // role comes from the pod's name (default/g-role{k}-{i}).
    let mut assignment = vec![None; r.pods.len()];
    for b in &binds {
        let k: usize = b
            .task
            .split("-role")
            .nth(1)
            .and_then(|s| s.split('-').next())
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("role of {}", b.task));
        let p = (0..r.pods.len())
            .find(|p| r.pods[*p] == k && assignment[*p].is_none())
            .unwrap();
        assignment[p] = Some(b.node[1..].parse::<usize>().unwrap());
    }
    prop_assert!(
        valid(w, &r, &assignment),
        "the bound placement breaks a rule: {assignment:?}"
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 2000,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn every_gang_the_exhaustive_solver_can_place_is_placed_and_only_validly(w in world()) {
        check(&w)?;
    }
}

// ---------------------------------------------------------------------------------------
// Subgroups in domains of their own
// ---------------------------------------------------------------------------------------
//
// Small random worlds (≤ 5 nodes in two racks, tier-1 HyperNodes) and one gang of 1–3
// replicas of 1–3 pods, each replica a subgroup (Volcano `subGroupPolicy`, `matchLabelKeys:
// [replica]`) whose policy asks for a domain of its own, hard or soft, `minSubGroups`
// 1..=replicas. The solver tries every assignment of pods to nodes or to none, with the
// rules itself: resources; only whole replicas; at least minSubGroups of them; hard: each
// replica inside one rack (replicas in different racks allowed). Checked after one cycle:
// whatever is bound is such a placement; whenever one exists in which every replica has a
// rack of its own that holds it by itself (so that placing replicas one after another
// cannot strand a later one), the gang is bound.

#[derive(Clone, Debug)]
struct SubWorld {
    /// (cpu, rack) per node.
    nodes: Vec<(i64, usize)>,
    replicas: usize,
    size: usize,
    cpu: i64,
    min_groups: usize,
    hard: bool,
}

fn sub_world() -> impl Strategy<Value = SubWorld> {
    (
        prop::collection::vec((1i64..=8, 0usize..2), 1..=5),
        1usize..=3,
        1usize..=3,
        1i64..=4,
        any::<bool>(),
        0usize..3,
    )
        .prop_map(|(nodes, replicas, size, cpu, hard, min)| SubWorld {
            nodes,
            replicas,
            size: size.min(7 / replicas),
            cpu,
            min_groups: 1 + min % replicas,
            hard,
        })
}

fn sub_build(w: &SubWorld) -> (Cache, String) {
    let mut cache = cache_with_default_queue();
    for (i, (cpu, rack)) in w.nodes.iter().enumerate() {
        cache.apply_node(NodeSpec {
            labels: labels(&[("example.com/rack", RACKS[*rack])]),
            ..rust_batch_engine::testkit::node(&node_name(i), &[("cpu", &cpu.to_string())])
        });
    }
    for (r, rack) in RACKS.iter().enumerate() {
        let members = (0..w.nodes.len())
            .filter(|i| w.nodes[*i].1 == r)
            .map(|i| HyperNodeMember {
                kind: MemberKind::Node,
                selector: MemberSelector::Exact(node_name(i)),
            })
            .collect();
        cache.apply_hypernode(HyperNodeSpec {
            name: rack.to_string(),
            tier: 1,
            tier_name: None,
            members,
        });
    }
    let min_member = (w.min_groups * w.size) as u32;
    let mut gang =
        Gang::new("g", min_member).subgroups("worker", w.size as u32, w.min_groups as u32);
    for r in 0..w.replicas {
        gang = gang
            .tasks(&format!("rep{r}"), w.size, &[("cpu", &w.cpu.to_string())])
            .last_labelled(w.size, &[("role", "worker"), ("replica", &r.to_string())]);
    }
    let gang = gang.subgroup_topology(if w.hard { "hard" } else { "soft" }, Some(1));
    let uid = gang.apply(&mut cache);
    (cache, uid)
}

/// Whether `assignment` (replica-major pods -> node or None) keeps the subgroup rules;
/// `own_racks`: and every placed replica has a rack to itself that holds it alone.
fn sub_valid(w: &SubWorld, assignment: &[Option<usize>], own_racks: bool) -> bool {
    let mut used = vec![0i64; w.nodes.len()];
    let mut whole = 0;
    let mut racks_taken = std::collections::BTreeSet::new();
    for r in 0..w.replicas {
        let pods = &assignment[r * w.size..(r + 1) * w.size];
        let placed: Vec<usize> = pods.iter().flatten().copied().collect();
        if placed.is_empty() {
            continue;
        }
        if placed.len() < w.size {
            return false;
        }
        whole += 1;
        let racks: std::collections::BTreeSet<usize> =
            placed.iter().map(|n| w.nodes[*n].1).collect();
        if (w.hard || own_racks) && racks.len() > 1 {
            return false;
        }
        if own_racks && !racks.iter().all(|r| racks_taken.insert(*r)) {
            return false;
        }
        for n in placed {
            used[n] += w.cpu;
        }
    }
    whole >= w.min_groups && used.iter().zip(&w.nodes).all(|(u, (cpu, _))| u <= cpu)
}

fn sub_solvable(w: &SubWorld, own_racks: bool) -> bool {
    any_assignment(w.replicas * w.size, w.nodes.len(), &|a| {
        sub_valid(w, a, own_racks)
    })
}

fn sub_check(w: &SubWorld) -> Result<(), TestCaseError> {
    let (cache, uid) = sub_build(w);
    let conf = "actions: \"enqueue, allocate\"\ntiers:\n- plugins:\n  - name: gang\n  \
                - name: predicates\n  - name: nodeorder\n  - name: gpu-affinity\n";
    let result = run_cycle(&cache, Some(conf));
    let binds: Vec<_> = result.binds.iter().filter(|b| *b.job == *uid).collect();
    if binds.is_empty() {
        prop_assert!(
            !sub_solvable(w, true),
            "fits (each replica in a rack of its own) but not placed: {:?}\n{w:?}",
            condition_message(&result, &uid)
        );
        return Ok(());
    }
    // Pods are default/g-rep{r}-{i}.
    let mut assignment = vec![None; w.replicas * w.size];
    for b in &binds {
        let rest = b.task.split("-rep").nth(1).unwrap();
        let (r, i) = rest.split_once('-').unwrap();
        let (r, i): (usize, usize) = (r.parse().unwrap(), i.parse().unwrap());
        assignment[r * w.size + i] = Some(b.node[1..].parse::<usize>().unwrap());
    }
    prop_assert!(
        sub_valid(w, &assignment, false),
        "the bound placement breaks a subgroup rule: {assignment:?}\n{w:?}"
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 1000,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn subgroups_bind_whole_each_inside_its_own_domain_when_one_holds_each(w in sub_world()) {
        sub_check(&w)?;
    }
}
