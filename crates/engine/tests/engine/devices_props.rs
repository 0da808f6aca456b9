//! DRA allocation under random worlds, over several cycles.
//!
//! Small random clusters (≤ 4 nodes of ≤ 8 GPUs each, in NVLink cliques of 1, 2 or 4, part
//! of them held by claims another scheduler allocated) and ≤ 4 gangs of ≤ 4 pods, each pod
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

const DRIVER: &str = "gpu.example.com";
const CLIQUE: &str = "gpu.example.com/clique";

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
        prop::collection::vec(gang, 1..=4),
        prop::collection::vec(prop::option::of(0usize..4), 3),
    )
        .prop_map(|(nodes, gangs, finishes)| World {
            nodes,
            gangs,
            finishes,
        })
}

fn spec(count: u32, one_clique: bool) -> ClaimSpec {
    ClaimSpec {
        requests: vec![DeviceRequest {
            name: "gpu".into(),
            choices: vec![DeviceChoice {
                name: String::new(),
                device_class_name: "gpu".into(),
                selectors: vec![],
                mode: AllocationMode::ExactCount(count),
            }],
        }],
        constraints: one_clique
            .then(|| MatchAttribute {
                requests: vec![],
                attribute: CLIQUE.into(),
            })
            .into_iter()
            .collect(),
    }
}

fn clique_of(key: &str, world: &World) -> String {
    // key: driver/node-i/gpu-j
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
    cache.set_device_classes(BTreeMap::from([(
        "gpu".to_string(),
        vec![format!("device.driver == \"{DRIVER}\"")],
    )]));
    let mut ledger: BTreeMap<String, String> = BTreeMap::new();
    for (i, n) in world.nodes.iter().enumerate() {
        let name = format!("node-{i}");
        let devices: Vec<Device> = (0..n.gpus)
            .map(|j| Device {
                driver: DRIVER.into(),
                pool: name.as_str().into(),
                name: format!("gpu-{j}").into(),
                attributes: BTreeMap::from([(
                    CLIQUE.to_string(),
                    AttrValue::String(format!("{i}-{}", j / n.clique_size)),
                )]),
                capacity: BTreeMap::new(),
            })
            .collect();
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
        cache.apply_node(node(&name, &[("cpu", "64"), ("memory", "256Gi")]));
        cache.apply_node_devices(&name, Some(Arc::new(NodeDevices::new(devices, &held))));
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
