//! DRA allocation under random worlds, over several cycles.
//!
//! Small random clusters (≤ 4 nodes of ≤ 8 GPUs each, in NVLink cliques of 1, 2 or 4, part
//! of them held by claims another scheduler allocated; ≤ 3 GPUs of a network-attached pool
//! that some of the nodes reach, allocatable once cluster-wide) and ≤ 4 gangs of ≤ 4 pods, each pod
//! with its own claim of 1–3 GPUs (one clique or not) and, for some gangs, a claim all its
//! pods share. Cycles run with their binds recorded back into the cache; between cycles a
//! random bound gang may finish (its pods go, their claims with them).
//!
//! Checked after every cycle:
//! - no device is ever held by two claims (counting the other scheduler's claims and every
//!   claim of every pod still bound);
//! - a gang binds only whole (every pod, as minMember is the gang's size) and only with all
//!   its claims allocated, on its pods' nodes, with the count asked and the clique kept;
//! - a claim shared by a gang's pods has one allocation.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use proptest::prelude::*;
use rust_batch_engine::framework::SessionResult;
use rust_batch_engine::model::devices::{
    AllocatedDevice, AllocationMode, AttrValue, ClaimSpec, Device, DeviceChoice, DeviceRequest,
    MatchAttribute, NodeDevices, TaskClaim,
};
use rust_batch_engine::testkit::*;

use crate::devices::{gpu_devices, gpu_request, set_gpu_class, CLIQUE, DRIVER};

#[derive(Clone, Debug)]
struct Node {
    gpus: usize,
    clique_size: usize,
    /// GPUs (from the first) held by another scheduler's claim.
    foreign: usize,
}

#[derive(Clone, Debug)]
struct GangShape {
    pods: usize,
    gpus_per_pod: u32,
    one_clique: bool,
    shared_gpus: Option<u32>,
}

#[derive(Clone, Debug)]
struct World {
    nodes: Vec<Node>,
    /// GPUs of a network-attached pool (`fabric`), and which nodes reach it.
    fabric: usize,
    reach: Vec<bool>,
    gangs: Vec<GangShape>,
    /// Per cycle after the first: which bound gang (index modulo) finishes, if any.
    finishes: Vec<Option<usize>>,
}

fn world() -> impl Strategy<Value = World> {
    let node = (
        0usize..=8,
        prop::sample::select(vec![1usize, 2, 4]),
        0usize..=3,
    )
        .prop_map(|(gpus, clique_size, foreign)| Node {
            gpus,
            clique_size,
            foreign: foreign.min(gpus),
        });
    let gang = (
        1usize..=4,
        1u32..=3,
        any::<bool>(),
        prop::option::of(1u32..=2),
    )
        .prop_map(|(pods, gpus_per_pod, one_clique, shared_gpus)| GangShape {
            pods,
            gpus_per_pod,
            one_clique,
            shared_gpus,
        });
    (
        prop::collection::vec(node, 1..=4),
        0usize..=3,
        prop::collection::vec(any::<bool>(), 4),
        prop::collection::vec(gang, 1..=4),
        prop::collection::vec(prop::option::of(0usize..4), 3),
    )
        .prop_map(|(nodes, fabric, reach, gangs, finishes)| World {
            nodes,
            fabric,
            reach,
            gangs,
            finishes,
        })
}

fn spec(count: u32, one_clique: bool) -> ClaimSpec {
    ClaimSpec {
        requests: vec![gpu_request(count, "gpu", &[])],
        constraints: one_clique
            .then(|| MatchAttribute {
                requests: vec![],
                attribute: CLIQUE.into(),
            })
            .into_iter()
            .collect(),
    }
}

/// The GPUs of node `i`, in cliques of its clique size.
fn node_gpus(i: usize, n: &Node) -> Vec<Device> {
    gpu_devices(&format!("node-{i}"), n.gpus, |j| {
        format!("{i}-{}", j / n.clique_size)
    })
}

fn clique_of(key: &str, world: &World) -> String {
    // key: driver/node-i/gpu-j, or driver/fabric/gpu-j (one clique of its own)
    if key.contains("/fabric/") {
        return "fabric".into();
    }
    let mut parts = key.split('/').skip(1);
    let node: usize = parts.next().unwrap()[5..].parse().unwrap();
    let gpu: usize = parts.next().unwrap()[4..].parse().unwrap();
    format!("{node}-{}", gpu / world.nodes[node].clique_size)
}

fn check_cycle(
    world: &World,
    result: &SessionResult,
    specs: &BTreeMap<String, (u32, bool)>,
    gang_size: &BTreeMap<String, usize>,
    ledger: &mut BTreeMap<String, String>,
) {
    let mut per_gang: BTreeMap<String, usize> = BTreeMap::new();
    let mut shared: BTreeMap<String, BTreeSet<Vec<String>>> = BTreeMap::new();
    for b in &result.binds {
        *per_gang.entry(b.job.to_string()).or_default() += 1;
        for c in b.claims.iter() {
            let a = c
                .allocation
                .as_ref()
                .unwrap_or_else(|| panic!("{} bound without claim {}", b.task, c.name));
            assert_eq!(a.node, b.node, "claim {} off its pod's node", c.name);
            let keys: Vec<String> = a.devices.iter().map(AllocatedDevice::key).collect();
            let (count, one) = specs[&*c.name];
            assert_eq!(keys.len(), count as usize, "claim {}: {keys:?}", c.name);
            if one {
                let cliques: BTreeSet<_> = keys.iter().map(|k| clique_of(k, world)).collect();
                assert_eq!(cliques.len(), 1, "claim {} spans cliques {keys:?}", c.name);
            }
            if c.shared {
                shared
                    .entry(c.name.to_string())
                    .or_default()
                    .insert(keys.clone());
            }
            for k in keys {
                match ledger.get(&k) {
                    Some(holder) if **holder != *c.name => {
                        panic!("device {k} held by {holder} and {}", c.name)
                    }
                    _ => {
                        ledger.insert(k, c.name.to_string());
                    }
                }
            }
        }
    }
    for (job, n) in per_gang {
        assert_eq!(n, gang_size[&job], "gang {job} bound in part");
    }
    for (claim, allocations) in shared {
        assert_eq!(
            allocations.len(),
            1,
            "shared claim {claim}: {allocations:?}"
        );
    }
}

fn run(world: &World) {
    let mut cache = cache_with_default_queue();
    set_gpu_class(&mut cache);
    let mut ledger: BTreeMap<String, String> = BTreeMap::new();
    for (i, n) in world.nodes.iter().enumerate() {
        let name = format!("node-{i}");
        let devices = node_gpus(i, n);
        let foreign: Vec<AllocatedDevice> = (0..n.foreign)
            .map(|j| AllocatedDevice {
                request: "gpu".into(),
                driver: DRIVER.into(),
                pool: name.as_str().into(),
                device: format!("gpu-{j}").into(),
            })
            .collect();
        for d in &foreign {
            ledger.insert(d.key(), format!("other/{name}"));
        }
        let held = BTreeMap::from([(Arc::<str>::from(format!("other/{name}")), foreign)]);
        let reached = if world.reach[i] { world.fabric } else { 0 };
        let fabric = gpu_devices("fabric", reached, |_| "fabric".into());
        let inventory = NodeDevices::new(devices, &held).with_shared(fabric, &BTreeMap::new());
        cache.apply_node(node(&name, &[("cpu", "64"), ("memory", "256Gi")]));
        cache.apply_node_devices(&name, Some(Arc::new(inventory)));
    }
    let mut specs = BTreeMap::new();
    let mut gang_size = BTreeMap::new();
    let mut gangs = Vec::new();
    for (g, shape) in world.gangs.iter().enumerate() {
        let name = format!("g{g}");
        let mut gang = Gang::new(&name, shape.pods as u32).created(g as i64).tasks(
            "",
            shape.pods,
            &[("cpu", "1")],
        );
        for (i, t) in gang.tasks.iter_mut().enumerate() {
            let own = format!("default/{name}-{i}-gpu");
            specs.insert(own.clone(), (shape.gpus_per_pod, shape.one_clique));
            let mut claims = vec![TaskClaim::new(
                own,
                spec(shape.gpus_per_pod, shape.one_clique),
            )];
            if let Some(n) = shape.shared_gpus {
                let team = format!("default/{name}-team");
                specs.insert(team.clone(), (n, true));
                let mut c = TaskClaim::new(team, spec(n, true));
                c.shared = true;
                claims.push(c);
            }
            t.set_claims(claims);
        }
        gang_size.insert(gang.uid().to_string(), shape.pods);
        gangs.push(
            gang.tasks
                .iter()
                .map(|t| t.uid.to_string())
                .collect::<Vec<_>>(),
        );
        gang.apply(&mut cache);
    }
    let mut bound_gangs: Vec<usize> = Vec::new();
    for cycle in 0..=world.finishes.len() {
        if cycle > 0 {
            if let Some(pick) = world.finishes[cycle - 1] {
                if !bound_gangs.is_empty() {
                    let g = bound_gangs.remove(pick % bound_gangs.len());
                    for uid in &gangs[g] {
                        cache.delete_pod(uid);
                    }
                    // Their claims are deallocated with them.
                    let prefix = format!("default/g{g}-");
                    ledger.retain(|_, holder| !holder.starts_with(&prefix));
                }
            }
        }
        let r = cycle_at(&mut cache, None, cycle as i64 * 1_000);
        check_cycle(world, &r, &specs, &gang_size, &mut ledger);
        for job in binds_by_job(&r).keys() {
            let g: usize = job.trim_start_matches("default/g").parse().unwrap();
            bound_gangs.push(g);
        }
        apply_result(&mut cache, &r);
    }
}

proptest! {
    // Seeds of past failures live next to this file (devices_props.proptest-regressions).
    #![proptest_config(ProptestConfig {
        cases: 256,
        failure_persistence: Some(Box::new(
            proptest::test_runner::FileFailurePersistence::WithSource("proptest-regressions"),
        )),
        ..ProptestConfig::default()
    })]

    #[test]
    fn devices_are_never_allocated_twice_and_gangs_bind_whole_with_their_claims(w in world()) {
        run(&w);
    }
}

/// Device quota per queue under random worlds: two queues, each with a capability in GPUs
/// of class `gpu` (`deviceclass/gpu`), gangs of either queue asking GPUs through claims of
/// their own and, for some, one their pods share; cycles of enqueue, allocate, reclaim and
/// backfill, bound gangs finishing between them. After every cycle, the distinct devices
/// the claims of each queue's bound pods hold never exceed its capability.
#[derive(Clone, Debug)]
struct QuotaWorld {
    nodes: Vec<Node>,
    caps: [u32; 2],
    gangs: Vec<(usize, GangShape)>,
    finishes: Vec<Option<usize>>,
}

fn quota_world() -> impl Strategy<Value = QuotaWorld> {
    let node =
        (1usize..=8, prop::sample::select(vec![1usize, 2, 4])).prop_map(|(gpus, clique_size)| {
            Node {
                gpus,
                clique_size,
                foreign: 0,
            }
        });
    let gang = (
        0usize..2,
        1usize..=3,
        1u32..=3,
        any::<bool>(),
        prop::option::of(1u32..=2),
    )
        .prop_map(|(queue, pods, gpus_per_pod, one_clique, shared_gpus)| {
            (
                queue,
                GangShape {
                    pods,
                    gpus_per_pod,
                    one_clique,
                    shared_gpus,
                },
            )
        });
    (
        prop::collection::vec(node, 1..=3),
        [1u32..=8, 1u32..=8],
        prop::collection::vec(gang, 1..=6),
        prop::collection::vec(prop::option::of(0usize..6), 4),
    )
        .prop_map(|(nodes, caps, gangs, finishes)| QuotaWorld {
            nodes,
            caps,
            gangs,
            finishes,
        })
}

const QUOTA_CONF: &str = "actions: \"enqueue, allocate, reclaim, backfill\"
tiers:
- plugins:
  - name: priority
  - name: gang
  - name: conformance
- plugins:
  - name: drf
  - name: predicates
  - name: proportion
  - name: nodeorder
";

/// A bound pod's claims and the devices each holds.
type ClaimsHeld = Vec<(String, Vec<String>)>;

fn run_quota(world: &QuotaWorld) {
    use rust_batch_engine::model::TaskStatus;
    let mut cache = rust_batch_engine::cache::Cache::new();
    let queues = ["q0", "q1"];
    for (q, cap) in queues.iter().zip(world.caps) {
        let mut info = queue(q, 1);
        let cap = cap.to_string();
        info.capability = Some(res(&[("deviceclass/gpu", cap.as_str())]));
        cache.apply_queue(info);
    }
    set_gpu_class(&mut cache);
    for (i, n) in world.nodes.iter().enumerate() {
        let name = format!("node-{i}");
        let devices = node_gpus(i, n);
        cache.apply_node(node(&name, &[("cpu", "64"), ("memory", "256Gi")]));
        cache.apply_node_devices(
            &name,
            Some(Arc::new(NodeDevices::new(devices, &BTreeMap::new()))),
        );
    }
    let mut queue_of = BTreeMap::new();
    let mut pods_of: Vec<Vec<String>> = Vec::new();
    for (g, (q, shape)) in world.gangs.iter().enumerate() {
        let name = format!("g{g}");
        let mut gang = Gang::new(&name, shape.pods as u32)
            .queue(queues[*q])
            .created(g as i64)
            .tasks("", shape.pods, &[("cpu", "1")]);
        for (i, t) in gang.tasks.iter_mut().enumerate() {
            let mut claims = vec![TaskClaim::new(
                format!("default/{name}-{i}-gpu"),
                spec(shape.gpus_per_pod, shape.one_clique),
            )];
            if let Some(n) = shape.shared_gpus {
                let mut c = TaskClaim::new(format!("default/{name}-team"), spec(n, true));
                c.shared = true;
                claims.push(c);
            }
            t.set_claims(claims);
        }
        queue_of.insert(gang.uid().to_string(), *q);
        pods_of.push(gang.tasks.iter().map(|t| t.uid.to_string()).collect());
        gang.apply(&mut cache);
    }
    // Bound pods and their claims' devices, by pod uid.
    let mut holding: BTreeMap<String, (usize, ClaimsHeld)> = BTreeMap::new();
    let mut bound_gangs: Vec<usize> = Vec::new();
    for cycle in 0..=world.finishes.len() {
        if cycle > 0 {
            if let Some(pick) = world.finishes[cycle - 1] {
                if !bound_gangs.is_empty() {
                    let g = bound_gangs.remove(pick % bound_gangs.len());
                    for uid in &pods_of[g] {
                        cache.delete_pod(uid);
                        holding.remove(uid);
                    }
                }
            }
        }
        let r = cycle_at(&mut cache, Some(QUOTA_CONF), cycle as i64 * 1_000);
        for e in &r.evictions {
            holding.remove(&*e.task);
        }
        for b in &r.binds {
            let claims = b
                .claims
                .iter()
                .map(|c| {
                    let a = c.allocation.as_ref().expect("bound with its claims");
                    (
                        c.name.to_string(),
                        a.devices.iter().map(|d| d.key()).collect(),
                    )
                })
                .collect();
            holding.insert(b.task.to_string(), (queue_of[&*b.job], claims));
        }
        for job in binds_by_job(&r).keys() {
            let g: usize = job.trim_start_matches("default/g").parse().unwrap();
            if !bound_gangs.contains(&g) {
                bound_gangs.push(g);
            }
        }
        bound_gangs.retain(|g| {
            pods_of[*g].iter().any(|uid| {
                cache
                    .pod(uid)
                    .is_some_and(|p| p.task.status == TaskStatus::Running)
            })
        });
        for (q, cap) in world.caps.iter().enumerate() {
            let devices: BTreeSet<&String> = holding
                .values()
                .filter(|(queue, _)| *queue == q)
                .flat_map(|(_, claims)| claims.iter().flat_map(|(_, d)| d))
                .collect();
            assert!(
                devices.len() as u32 <= *cap,
                "cycle {cycle}: queue q{q} holds {} GPUs over its capability {cap}: {devices:?}",
                devices.len()
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 128,
        failure_persistence: Some(Box::new(
            proptest::test_runner::FileFailurePersistence::WithSource("proptest-regressions"),
        )),
        ..ProptestConfig::default()
    })]

    #[test]
    fn a_queue_never_holds_more_devices_than_its_capability(w in quota_world()) {
        run_quota(&w);
    }
}

/// Partitionable devices under random worlds: nodes with 1–2 GPUs, each publishing MIG-like
/// partitions (seven of 1 slice, two of 3, one of 7) that draw on the GPU's counter set of
/// 7 slices; gangs whose pods each claim one partition of a random profile. After every
/// cycle, the partitions the claims of bound pods hold never draw more than 7 slices of
/// any GPU.
#[derive(Clone, Debug)]
struct MigWorld {
    gpus: Vec<usize>,
    gangs: Vec<(usize, Vec<usize>)>,
    finishes: Vec<Option<usize>>,
}

const PROFILES: [(&str, i64, usize); 3] = [("1g", 1, 7), ("3g", 3, 2), ("7g", 7, 1)];

fn mig_world() -> impl Strategy<Value = MigWorld> {
    let gang = (1usize..=3, prop::collection::vec(0usize..3, 3)).prop_map(|(pods, p)| (pods, p));
    (
        prop::collection::vec(1usize..=2, 1..=2),
        prop::collection::vec(gang, 1..=6),
        prop::collection::vec(prop::option::of(0usize..6), 3),
    )
        .prop_map(|(gpus, gangs, finishes)| MigWorld {
            gpus,
            gangs,
            finishes,
        })
}

fn run_mig(world: &MigWorld) {
    use rust_batch_engine::model::devices::{CounterDraw, CounterSet};
    let mut cache = cache_with_default_queue();
    set_gpu_class(&mut cache);
    // device key -> (node, gpu, slices)
    let mut slices_of: BTreeMap<String, (usize, usize, i64)> = BTreeMap::new();
    for (n, &gpus) in world.gpus.iter().enumerate() {
        let name = format!("node-{n}");
        let mut devices = Vec::new();
        let mut sets = Vec::new();
        for g in 0..gpus {
            sets.push(CounterSet {
                driver: DRIVER.into(),
                pool: name.as_str().into(),
                name: format!("gpu-{g}"),
                counters: BTreeMap::from([("slices".to_string(), 7000)]),
            });
            for (profile, slices, count) in PROFILES {
                for k in 0..count {
                    let d = Device {
                        driver: DRIVER.into(),
                        pool: name.as_str().into(),
                        name: format!("gpu-{g}-{profile}-{k}").into(),
                        attributes: BTreeMap::from([(
                            "gpu.example.com/profile".to_string(),
                            AttrValue::String(profile.into()),
                        )]),
                        capacity: BTreeMap::new(),
                        consumes: vec![CounterDraw {
                            counter_set: format!("gpu-{g}"),
                            counters: BTreeMap::from([("slices".to_string(), slices * 1000)]),
                        }],
                    };
                    slices_of.insert(d.key(), (n, g, slices));
                    devices.push(d);
                }
            }
        }
        let inventory = NodeDevices::new(devices, &BTreeMap::new()).with_counters(sets);
        cache.apply_node(node(&name, &[("cpu", "64"), ("memory", "256Gi")]));
        cache.apply_node_devices(&name, Some(Arc::new(inventory)));
    }
    let mut pods_of: Vec<Vec<String>> = Vec::new();
    for (g, (pods, profiles)) in world.gangs.iter().enumerate() {
        let name = format!("g{g}");
        let mut gang =
            Gang::new(&name, *pods as u32)
                .created(g as i64)
                .tasks("", *pods, &[("cpu", "1")]);
        for (i, t) in gang.tasks.iter_mut().enumerate() {
            let profile = PROFILES[profiles[i % profiles.len()]].0;
            let spec = ClaimSpec {
                requests: vec![DeviceRequest {
                    name: "mig".into(),
                    choices: vec![DeviceChoice {
                        name: String::new(),
                        device_class_name: "gpu".into(),
                        selectors: vec![format!(
                            "device.attributes[\"gpu.example.com\"].profile == \"{profile}\""
                        )],
                        mode: AllocationMode::ExactCount(1),
                    }],
                }],
                constraints: vec![],
            };
            t.set_claims(vec![TaskClaim::new(format!("default/{name}-{i}"), spec)]);
        }
        pods_of.push(gang.tasks.iter().map(|t| t.uid.to_string()).collect());
        gang.apply(&mut cache);
    }
    let mut holding: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut bound: Vec<usize> = Vec::new();
    for cycle in 0..=world.finishes.len() {
        if cycle > 0 {
            if let Some(pick) = world.finishes[cycle - 1] {
                if !bound.is_empty() {
                    let g = bound.remove(pick % bound.len());
                    for uid in &pods_of[g] {
                        cache.delete_pod(uid);
                        holding.remove(uid);
                    }
                }
            }
        }
        let r = cycle_at(&mut cache, None, cycle as i64 * 1_000);
        for b in &r.binds {
            let keys = b
                .claims
                .iter()
                .flat_map(|c| {
                    c.allocation
                        .as_ref()
                        .expect("bound with its claims")
                        .devices
                        .iter()
                        .map(|d| d.key())
                        .collect::<Vec<_>>()
                })
                .collect();
            holding.insert(b.task.to_string(), keys);
        }
        for job in binds_by_job(&r).keys() {
            let g: usize = job.trim_start_matches("default/g").parse().unwrap();
            if !bound.contains(&g) {
                bound.push(g);
            }
        }
        let mut drawn: BTreeMap<(usize, usize), i64> = BTreeMap::new();
        let mut seen = BTreeSet::new();
        for key in holding.values().flatten() {
            assert!(
                seen.insert(key.clone()),
                "cycle {cycle}: {key} allocated twice"
            );
            let (n, g, slices) = slices_of[key];
            *drawn.entry((n, g)).or_default() += slices;
        }
        for ((n, g), slices) in drawn {
            assert!(
                slices <= 7,
                "cycle {cycle}: GPU {g} of node-{n} has {slices} of 7 slices drawn: {holding:?}"
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 128,
        failure_persistence: Some(Box::new(
            proptest::test_runner::FileFailurePersistence::WithSource("proptest-regressions"),
        )),
        ..ProptestConfig::default()
    })]

    #[test]
    fn partitions_never_draw_more_than_their_counter_sets_hold(w in mig_world()) {
        run_mig(&w);
    }
}
