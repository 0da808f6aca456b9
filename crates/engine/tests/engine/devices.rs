//! DRA devices in the engine: ResourceClaims allocated in the same search that places the
//! gang, whole or not at all, with class and request CEL selectors, matchAttribute
//! constraints, firstAvailable alternatives, shared claims and the named reasons a gang
//! waits for. Pure engine: a cache, the default configuration, virtual time.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use rust_batch_engine::cache::Cache;
use rust_batch_engine::framework::SessionResult;
use rust_batch_engine::model::devices::{
    AllocationMode, AttrValue, ClaimSpec, Device, DeviceChoice, DeviceRequest, MatchAttribute,
    NodeDevices, TaskClaim,
};
use rust_batch_engine::testkit::*;

pub(crate) const DRIVER: &str = "gpu.example.com";
pub(crate) const CLIQUE: &str = "gpu.example.com/clique";
const CPU: &[(&str, &str)] = &[("cpu", "1")];

/// `n` GPUs on `node`, GPU `i` in clique `clique(i)`, model `a100`.
fn gpus(node: &str, n: usize, clique: impl Fn(usize) -> String) -> Arc<NodeDevices> {
    Arc::new(NodeDevices::new(
        gpu_devices(node, n, clique),
        &BTreeMap::new(),
    ))
}

/// `n` GPUs `gpu-<i>` of `pool` (a node's name, or a network-attached pool's), GPU `i`
/// in clique `clique(i)`, model `a100`, 40 GiB.
pub(crate) fn gpu_devices(pool: &str, n: usize, clique: impl Fn(usize) -> String) -> Vec<Device> {
    (0..n)
        .map(|i| Device {
            driver: DRIVER.into(),
            pool: pool.into(),
            name: format!("gpu-{i}").into(),
            attributes: BTreeMap::from([
                (CLIQUE.to_string(), AttrValue::String(clique(i))),
                ("model".to_string(), AttrValue::String("a100".into())),
            ]),
            capacity: BTreeMap::from([(
                "gpu.example.com/memory".to_string(),
                40 * (1i64 << 30) * 1000,
            )]),
            consumes: Vec::new(),
        })
        .collect()
}

/// DeviceClass `gpu`: every device of the driver.
pub(crate) fn set_gpu_class(cache: &mut Cache) {
    cache.set_device_classes(BTreeMap::from([(
        "gpu".to_string(),
        vec![format!("device.driver == \"{DRIVER}\"")],
    )]));
}

fn cluster(nodes: &[(&str, Arc<NodeDevices>)]) -> Cache {
    let mut cache = cache_with_default_queue();
    set_gpu_class(&mut cache);
    for (name, devices) in nodes {
        cache.apply_node(node(name, &[("cpu", "16"), ("memory", "64Gi")]));
        cache.apply_node_devices(name, Some(devices.clone()));
    }
    cache
}

pub(crate) fn gpu_request(count: u32, class: &str, selectors: &[&str]) -> DeviceRequest {
    DeviceRequest {
        name: "gpu".into(),
        choices: vec![DeviceChoice {
            name: String::new(),
            device_class_name: class.into(),
            selectors: selectors.iter().map(|s| s.to_string()).collect(),
            mode: AllocationMode::ExactCount(count),
        }],
    }
}

/// A claim of `count` GPUs in one clique.
fn one_clique(count: u32) -> ClaimSpec {
    ClaimSpec {
        requests: vec![gpu_request(count, "gpu", &[])],
        constraints: vec![MatchAttribute {
            requests: vec![],
            attribute: CLIQUE.into(),
        }],
    }
}

/// A gang of `n` pods, each with its own claim (as from a template) of `spec`.
fn gang_with_claims(name: &str, n: usize, spec: &ClaimSpec) -> Gang {
    let mut g = Gang::new(name, n as u32).tasks("", n, CPU);
    for (i, t) in g.tasks.iter_mut().enumerate() {
        t.set_claims(vec![TaskClaim::new(
            format!("default/{name}-{i}-gpu"),
            spec.clone(),
        )]);
    }
    g
}

fn bound(result: &SessionResult, job: &str) -> usize {
    binds_by_job(result).get(job).map_or(0, Vec::len)
}

/// Every device in the binds, checked never to be given twice; by claim.
fn devices_of(result: &SessionResult) -> BTreeMap<String, Vec<String>> {
    let mut seen = BTreeSet::new();
    let mut by_claim: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for b in &result.binds {
        for c in b.claims.iter() {
            let a = c
                .allocation
                .as_ref()
                .expect("a bound pod's claim is allocated");
            assert_eq!(
                a.node, b.node,
                "claim {} allocated off its pod's node",
                c.name
            );
            if by_claim.contains_key(&*c.name) {
                continue;
            }
            for d in &a.devices {
                assert!(seen.insert(d.key()), "device {} allocated twice", d.key());
            }
            by_claim.insert(
                c.name.to_string(),
                a.devices.iter().map(|d| d.key()).collect(),
            );
        }
    }
    by_claim
}

#[test]
fn a_gang_of_four_pods_with_two_gpus_each_in_one_clique_binds_whole() {
    // Two nodes of 8 GPUs in two cliques of 4 each.
    let clique = |i: usize| format!("c{}", i / 4);
    let mut cache = cluster(&[("n0", gpus("n0", 8, clique)), ("n1", gpus("n1", 8, clique))]);
    let job = gang_with_claims("train", 4, &one_clique(2)).apply(&mut cache);
    let r = cycle_at(&mut cache, None, 0);
    assert_eq!(bound(&r, &job), 4, "{:?}", condition_message(&r, &job));
    let claims = devices_of(&r);
    assert_eq!(claims.len(), 4);
    for (claim, devices) in &claims {
        assert_eq!(devices.len(), 2, "{claim}");
        let idx: Vec<usize> = devices
            .iter()
            .map(|d| d.rsplit('-').next().unwrap().parse().unwrap())
            .collect();
        assert_eq!(
            idx[0] / 4,
            idx[1] / 4,
            "{claim}: {devices:?} span two cliques"
        );
    }
}

#[test]
fn a_gang_whose_pods_could_only_split_a_clique_waits_whole_and_says_why() {
    // Every GPU in a clique of its own: no pod gets two GPUs in one clique.
    let mut cache = cluster(&[("n0", gpus("n0", 8, |i| format!("c{i}")))]);
    let job = gang_with_claims("train", 4, &one_clique(2)).apply(&mut cache);
    let r = cycle_at(&mut cache, None, 0);
    assert!(r.binds.is_empty(), "nothing binds: {:?}", r.binds);
    let msg = condition_message(&r, &job).unwrap();
    assert!(msg.contains("cannot allocate all claims"), "{msg}");

    // Without the constraint the same node holds the gang.
    let mut cache = cluster(&[("n0", gpus("n0", 8, |i| format!("c{i}")))]);
    let free = ClaimSpec {
        requests: vec![gpu_request(2, "gpu", &[])],
        constraints: vec![],
    };
    let job = gang_with_claims("train", 4, &free).apply(&mut cache);
    let r = cycle_at(&mut cache, None, 0);
    assert_eq!(bound(&r, &job), 4);
    assert_eq!(devices_of(&r).len(), 4);
}

#[test]
fn a_gang_that_fits_only_in_part_binds_nothing_and_devices_stay_free() {
    // 6 GPUs, 4 pods × 2: three pods would fit.
    let mut cache = cluster(&[("n0", gpus("n0", 6, |_| "c".into()))]);
    let big = gang_with_claims("big", 4, &one_clique(2)).apply(&mut cache);
    let r = cycle_at(&mut cache, None, 0);
    assert_eq!(bound(&r, &big), 0);
    // The devices the discarded placement took are free again: a gang of 3 takes all 6.
    let small = gang_with_claims("small", 3, &one_clique(2)).apply(&mut cache);
    let r = cycle_at(&mut cache, None, 0);
    assert_eq!(bound(&r, &small), 3);
    assert_eq!(devices_of(&r).values().flatten().count(), 6);
}

#[test]
fn devices_bound_in_one_cycle_are_held_in_the_next() {
    let mut cache = cluster(&[("n0", gpus("n0", 4, |_| "c".into()))]);
    let first = gang_with_claims("first", 2, &one_clique(2)).apply(&mut cache);
    let r = cycle_at(&mut cache, None, 0);
    assert_eq!(bound(&r, &first), 2);
    apply_result(&mut cache, &r);
    let second = gang_with_claims("second", 1, &one_clique(1)).apply(&mut cache);
    let r = cycle_at(&mut cache, None, 1_000);
    assert_eq!(bound(&r, &second), 0, "all four GPUs are held");
    assert!(condition_message(&r, &second)
        .unwrap()
        .contains("cannot allocate all claims"));
}

#[test]
fn devices_allocated_in_the_api_by_anyone_are_never_given_again() {
    // Claim other/x holds gpu-0 and gpu-1 (another scheduler allocated it).
    let held = BTreeMap::from([(
        Arc::<str>::from("other/x"),
        (0..2)
            .map(|i| rust_batch_engine::model::devices::AllocatedDevice {
                request: "gpu".into(),
                driver: DRIVER.into(),
                pool: "n0".into(),
                device: format!("gpu-{i}").into(),
            })
            .collect(),
    )]);
    let base = gpus("n0", 4, |_| "c".into());
    let inv = Arc::new(NodeDevices::new(base.devices.clone(), &held));
    let mut cache = cluster(&[("n0", inv)]);
    let job = gang_with_claims("g", 1, &one_clique(3)).apply(&mut cache);
    let r = cycle_at(&mut cache, None, 0);
    assert_eq!(bound(&r, &job), 0, "only 2 of 4 GPUs are free");
    let job2 = gang_with_claims("h", 1, &one_clique(2)).apply(&mut cache);
    let r = cycle_at(&mut cache, None, 0);
    assert_eq!(bound(&r, &job2), 1);
    let got = devices_of(&r);
    assert_eq!(
        got.values().next().unwrap(),
        &vec![format!("{DRIVER}/n0/gpu-2"), format!("{DRIVER}/n0/gpu-3")]
    );
}

#[test]
fn a_shared_claim_is_allocated_once_and_its_pods_go_to_its_node() {
    let mut cache = cluster(&[
        ("n0", gpus("n0", 2, |_| "c".into())),
        ("n1", gpus("n1", 2, |_| "c".into())),
    ]);
    let mut g = Gang::new("shared", 3).tasks("", 3, CPU);
    let mut claim = TaskClaim::new("default/team-gpus", one_clique(2));
    claim.shared = true;
    for t in &mut g.tasks {
        t.set_claims(vec![claim.clone()]);
    }
    let job = g.apply(&mut cache);
    let r = cycle_at(&mut cache, None, 0);
    assert_eq!(bound(&r, &job), 3, "{:?}", condition_message(&r, &job));
    let nodes: BTreeSet<_> = r.binds.iter().map(|b| b.node.clone()).collect();
    assert_eq!(
        nodes.len(),
        1,
        "every pod of the claim on its node: {nodes:?}"
    );
    let allocations: BTreeSet<_> = r
        .binds
        .iter()
        .map(|b| b.claims[0].allocation.clone().unwrap())
        .collect::<Vec<_>>()
        .into_iter()
        .map(|a| (a.node.clone(), a.devices.clone()))
        .collect();
    assert_eq!(allocations.len(), 1, "one allocation: {allocations:?}");
}

#[test]
fn first_available_takes_the_first_alternative_that_fits() {
    let mut cache = cluster(&[("n0", gpus("n0", 2, |_| "c".into()))]);
    let spec = ClaimSpec {
        requests: vec![DeviceRequest {
            name: "gpu".into(),
            choices: vec![
                DeviceChoice {
                    name: "four".into(),
                    device_class_name: "gpu".into(),
                    selectors: vec![],
                    mode: AllocationMode::ExactCount(4),
                },
                DeviceChoice {
                    name: "two".into(),
                    device_class_name: "gpu".into(),
                    selectors: vec![],
                    mode: AllocationMode::ExactCount(2),
                },
            ],
        }],
        constraints: vec![],
    };
    let job = gang_with_claims("fa", 1, &spec).apply(&mut cache);
    let r = cycle_at(&mut cache, None, 0);
    assert_eq!(bound(&r, &job), 1);
    let a = r.binds[0].claims[0].allocation.clone().unwrap();
    assert_eq!(a.devices.len(), 2);
    assert!(a.devices.iter().all(|d| d.request == "gpu/two"));
}

#[test]
fn allocation_mode_all_takes_every_matching_device_or_none() {
    let mut cache = cluster(&[("n0", gpus("n0", 3, |_| "c".into()))]);
    let mut all = one_clique(1);
    all.requests[0].choices[0].mode = AllocationMode::All;
    let job = gang_with_claims("all", 1, &all).apply(&mut cache);
    let r = cycle_at(&mut cache, None, 0);
    assert_eq!(bound(&r, &job), 1);
    assert_eq!(devices_of(&r).values().next().unwrap().len(), 3);
    apply_result(&mut cache, &r);
    let again = gang_with_claims("again", 1, &all).apply(&mut cache);
    let r = cycle_at(&mut cache, None, 1_000);
    assert_eq!(bound(&r, &again), 0, "All needs every matching device free");
}

#[test]
fn request_selectors_choose_devices_by_attribute_and_capacity() {
    let mut cache = cluster(&[("n0", gpus("n0", 4, |i| format!("c{}", i % 2)))]);
    let spec = ClaimSpec {
        requests: vec![gpu_request(
            2,
            "gpu",
            &[
                r#"device.attributes["gpu.example.com"].clique == "c1""#,
                r#"device.capacity["gpu.example.com"].memory.compareTo(quantity("40Gi")) >= 0"#,
            ],
        )],
        constraints: vec![],
    };
    let job = gang_with_claims("sel", 1, &spec).apply(&mut cache);
    let r = cycle_at(&mut cache, None, 0);
    assert_eq!(bound(&r, &job), 1, "{:?}", condition_message(&r, &job));
    assert_eq!(
        devices_of(&r).values().next().unwrap(),
        &vec![format!("{DRIVER}/n0/gpu-1"), format!("{DRIVER}/n0/gpu-3")]
    );
}

/// The message a one-pod gang with `spec` waits with.
fn waits_with(spec: ClaimSpec) -> String {
    let mut cache = cluster(&[("n0", gpus("n0", 8, |_| "c".into()))]);
    let job = gang_with_claims("bad", 1, &spec).apply(&mut cache);
    // Everyone else keeps scheduling.
    let fine = gang_with_claims("fine", 1, &one_clique(1)).apply(&mut cache);
    let r = cycle_at(&mut cache, None, 0);
    assert_eq!(bound(&r, &job), 0);
    assert_eq!(bound(&r, &fine), 1);
    condition_message(&r, &job).unwrap()
}

#[test]
fn bad_input_waits_with_a_named_reason_and_others_schedule() {
    let missing = ClaimSpec {
        requests: vec![gpu_request(1, "nope", &[])],
        constraints: vec![],
    };
    let msg = waits_with(missing);
    assert!(
        msg.contains("request gpu: device class nope does not exist"),
        "{msg}"
    );

    let syntax = ClaimSpec {
        requests: vec![gpu_request(1, "gpu", &["device.driver =="])],
        constraints: vec![],
    };
    let msg = waits_with(syntax);
    assert!(
        msg.contains("claim default/bad-0-gpu: selector #0: CEL compile error"),
        "{msg}"
    );

    let runtime = ClaimSpec {
        requests: vec![gpu_request(
            1,
            "gpu",
            &[r#"device.attributes["gpu.example.com"].missing == "x""#],
        )],
        constraints: vec![],
    };
    let msg = waits_with(runtime);
    assert!(
        msg.contains("claim default/bad-0-gpu: selector #0: CEL runtime error"),
        "{msg}"
    );

    let too_many = ClaimSpec {
        requests: vec![gpu_request(16, "gpu", &[])],
        constraints: vec![],
    };
    let msg = waits_with(too_many);
    assert!(msg.contains("cannot allocate all claims"), "{msg}");

    let mut blocked = TaskClaim::new("default/t-gpu", one_clique(1));
    blocked.blocked = Some("resourceclaimtemplate default/t not found".into());
    let mut cache = cluster(&[("n0", gpus("n0", 8, |_| "c".into()))]);
    let mut g = Gang::new("tpl", 1).tasks("", 1, CPU);
    g.tasks[0].set_claims(vec![blocked]);
    let job = g.apply(&mut cache);
    let r = cycle_at(&mut cache, None, 0);
    assert_eq!(bound(&r, &job), 0);
    let msg = condition_message(&r, &job).unwrap();
    assert!(
        msg.contains("resourceclaimtemplate default/t not found"),
        "{msg}"
    );
}

#[test]
fn a_class_selector_that_fails_is_named_by_its_class() {
    let mut cache = cluster(&[("n0", gpus("n0", 2, |_| "c".into()))]);
    cache.set_device_classes(BTreeMap::from([(
        "gpu".to_string(),
        vec!["device.attributes[\"gpu.example.com\"].missing".to_string()],
    )]));
    let job = gang_with_claims("c", 1, &one_clique(1)).apply(&mut cache);
    let r = cycle_at(&mut cache, None, 0);
    assert_eq!(bound(&r, &job), 0);
    let msg = condition_message(&r, &job).unwrap();
    assert!(
        msg.contains("class gpu: selector #0: CEL runtime error"),
        "{msg}"
    );
}

#[test]
fn a_slice_with_a_device_twice_is_refused_by_name() {
    let mut devices = gpus("n0", 2, |_| "c".into()).devices.clone();
    devices.push(devices[0].clone());
    let inv = Arc::new(NodeDevices::new(devices, &BTreeMap::new()));
    let mut cache = cluster(&[("n0", inv)]);
    let job = gang_with_claims("dup", 1, &one_clique(1)).apply(&mut cache);
    let r = cycle_at(&mut cache, None, 0);
    assert_eq!(bound(&r, &job), 0);
    let msg = condition_message(&r, &job).unwrap();
    assert!(
        msg.contains("publishes device gpu-0 more than once"),
        "{msg}"
    );
}

#[test]
fn a_discarded_statement_gives_every_device_back_exactly() {
    use rust_batch_engine::framework::Statement;
    let mut cache = cluster(&[
        ("n0", gpus("n0", 4, |_| "c".into())),
        ("n1", gpus("n1", 4, |_| "c".into())),
    ]);
    let mut g = Gang::new("g", 3).tasks("", 3, CPU);
    let mut team = TaskClaim::new("default/team", one_clique(1));
    team.shared = true;
    for (i, t) in g.tasks.iter_mut().enumerate() {
        let own = TaskClaim::new(format!("default/g-{i}-gpu"), one_clique(1));
        t.set_claims(vec![own, team.clone()]);
    }
    g.apply(&mut cache);
    let snapshot = cache.snapshot();
    let tasks: Vec<_> = (0..3)
        .map(|i| task_ref(&snapshot, &format!("default/g-{i}")).unwrap())
        .collect();
    let mut ssn = open_session(&cache, None);
    let before = ssn.fingerprint();
    let n0 = ssn.state().node_by_name("n0").unwrap();
    {
        let mut stmt = Statement::new(&mut ssn);
        for &t in &tasks {
            stmt.allocate(t, n0);
        }
        let node = stmt.node(n0);
        assert_eq!(
            node.device_claims.len(),
            4,
            "three own claims and the shared one"
        );
        assert_eq!(node.device_holds.iter().filter(|h| **h > 0).count(), 4);
        assert_eq!(node.device_claims["default/team"].users, 3);
        assert_eq!(stmt.state().claims_placed()["default/team"].1, 3);
        stmt.discard();
    }
    assert_eq!(
        ssn.fingerprint(),
        before,
        "devices, claims and tasks as they were"
    );
    assert!(ssn.state().claims_placed().is_empty());
}

/// gpu-affinity with `deviceAttribute`, in `mode` (hard or soft).
fn affinity_conf(mode: &str) -> String {
    format!(
        "actions: \"enqueue, allocate, backfill\"
tiers:
- plugins:
  - name: priority
  - name: gang
  - name: conformance
- plugins:
  - name: predicates
  - name: proportion
  - name: nodeorder
  - name: gpu-affinity
    arguments:
      gpu-affinity.deviceAttribute: {CLIQUE}
      gpu-affinity.deviceAttributeMode: {mode}
"
    )
}

/// A gang of `n` pods, each claiming `count` GPUs with no constraint of its own.
fn free_gang(name: &str, n: usize, count: u32) -> Gang {
    let spec = ClaimSpec {
        requests: vec![gpu_request(count, "gpu", &[])],
        constraints: vec![],
    };
    gang_with_claims(name, n, &spec)
}

/// The cliques of the devices a gang's binds hold (device keys are driver/node/gpu-i).
fn cliques_of(r: &SessionResult, clique: impl Fn(&str, usize) -> String) -> BTreeSet<String> {
    devices_of(r)
        .values()
        .flatten()
        .map(|key| {
            let mut parts = key.split('/').skip(1);
            let node = parts.next().unwrap();
            let i: usize = parts.next().unwrap()[4..].parse().unwrap();
            clique(node, i)
        })
        .collect()
}

#[test]
fn gpu_affinity_keeps_a_gangs_devices_in_one_clique_across_nodes() {
    // A multi-node NVLink domain per pair of nodes: n0 and n1 in clique x, n2 and n3 in y.
    let of = |node: &str| if node < "n2" { "x" } else { "y" }.to_string();
    let nodes: Vec<(String, Arc<NodeDevices>)> = ["n0", "n1", "n2", "n3"]
        .iter()
        .map(|n| (n.to_string(), gpus(n, 2, |_| of(n))))
        .collect();
    let refs: Vec<(&str, Arc<NodeDevices>)> =
        nodes.iter().map(|(n, d)| (n.as_str(), d.clone())).collect();
    let mut cache = cluster(&refs);
    let conf = affinity_conf("hard");
    // One GPU taken: one clique has 3 left, the other 4.
    let filler = free_gang("filler", 1, 1).apply(&mut cache);
    let r = cycle_at(&mut cache, Some(conf.as_str()), 0);
    assert_eq!(bound(&r, &filler), 1);
    let taken = cliques_of(&r, |n, _| of(n));
    // 4 pods × 1 GPU: 7 GPUs are free, but only the other clique holds 4.
    let train = free_gang("train", 4, 1).apply(&mut cache);
    let r = cycle_at(&mut cache, Some(conf.as_str()), 1_000);
    assert_eq!(bound(&r, &train), 4, "{:?}", condition_message(&r, &train));
    let used = cliques_of(&r, |n, _| of(n));
    assert_eq!(used.len(), 1, "train spans cliques: {used:?}");
    assert!(used.is_disjoint(&taken), "{used:?} {taken:?}");
    // 3 pods × 1 GPU: the 3 left, all in the filler's clique.
    let rest = free_gang("rest", 3, 1).apply(&mut cache);
    let r = cycle_at(&mut cache, Some(conf.as_str()), 2_000);
    assert_eq!(bound(&r, &rest), 3, "{:?}", condition_message(&r, &rest));
    assert_eq!(cliques_of(&r, |n, _| of(n)), taken);
}

#[test]
fn a_hard_device_rule_makes_a_gang_wait_and_a_soft_one_lets_it_span() {
    let of = |node: &str| if node == "n0" { "x" } else { "y" };
    let build = || {
        let mut cache = cluster(&[
            ("n0", gpus("n0", 2, |_| "x".into())),
            ("n1", gpus("n1", 2, |_| "y".into())),
        ]);
        let job = free_gang("span", 4, 1).apply(&mut cache);
        (cache, job)
    };
    let (mut cache, job) = build();
    let r = cycle_at(&mut cache, Some(affinity_conf("hard").as_str()), 0);
    assert_eq!(bound(&r, &job), 0);
    let msg = condition_message(&r, &job).unwrap_or_default();
    assert!(msg.contains(CLIQUE), "{msg}");
    let (mut cache, job) = build();
    let r = cycle_at(&mut cache, Some(affinity_conf("soft").as_str()), 0);
    assert_eq!(bound(&r, &job), 4, "{:?}", condition_message(&r, &job));
    assert_eq!(cliques_of(&r, |n, _| of(n).to_string()).len(), 2);
}

#[test]
fn gpu_affinity_device_arguments_are_checked() {
    let bad = affinity_conf("hard").replace(CLIQUE, "clique");
    let err = checked_conf(&bad, "conf").unwrap_err().to_string();
    assert!(err.contains("gpu-affinity.deviceAttribute"), "{err}");
    let bad = affinity_conf("sometimes");
    let err = checked_conf(&bad, "conf").unwrap_err().to_string();
    assert!(err.contains("expected hard or soft"), "{err}");
}
