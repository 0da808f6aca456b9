//! Scenarios that start from a snapshot (`simulate --from-cluster`): pods running at t=0
//! pinned to named nodes, other schedulers' pods as node usage, gangs ordered by their
//! creation before t=0 — and scenario files written out read back equal.

use std::collections::BTreeMap;
use std::path::Path;

use proptest::prelude::*;
use rust_batch_engine::model::resource::CPU;
use rust_batch_engine::model::TaskStatus;
use rust_batch_engine::sim::{Scenario, Simulation};

const MINUTE: i64 = 60_000;

fn round_trip(s: &Scenario, file: &str) {
    let text = s.to_yaml().unwrap_or_else(|e| panic!("{file}: {e}"));
    let back = Scenario::parse(&text, file).unwrap_or_else(|e| panic!("{file}: {e}\n{text}"));
    assert_eq!(&back, s, "{file} written:\n{text}");
}

#[test]
fn every_bundled_scenario_written_out_reads_back_equal() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/scenarios");
    let mut files = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        let s = Scenario::load(&path).unwrap();
        round_trip(&s, &path.display().to_string());
        files += 1;
    }
    assert!(files >= 20, "{files} bundled scenarios");
}

/// Two 8-CPU nodes full until 10m (gang a, running since before t=0 in the snapshot);
/// b, c and d wait, created in that order.
const CONTINUED: &str = r#"
name: continued
nodeGroups:
- {name: n, count: 2, allocatable: {cpu: 8}}
jobs:
- {name: a, tasks: [{role: w, replicas: 2, requests: {cpu: 8}, runtime: 10m, estimate: 10m}]}
- {name: b, submitAt: 1m, tasks: [{role: w, requests: {cpu: 8}, runtime: 5m, estimate: 5m}]}
- {name: c, submitAt: 2m, tasks: [{role: w, replicas: 2, requests: {cpu: 8}, runtime: 5m, estimate: 5m}]}
- {name: d, submitAt: 3m, tasks: [{role: w, requests: {cpu: 4}, runtime: 2m, estimate: 2m}]}
"#;

fn starts(report: &rust_batch_engine::sim::Report) -> BTreeMap<String, Option<i64>> {
    report
        .jobs
        .iter()
        .map(|j| (j.name.clone(), j.started))
        .collect()
}

#[test]
fn a_snapshot_of_a_simulation_continues_it_exactly_when_estimates_are_exact() {
    let scenario = Scenario::parse(CONTINUED, "continued.yaml").unwrap();
    let mut original = Simulation::new(scenario, "continued.yaml").unwrap();
    original.run_until(4 * MINUTE, &mut |_| {});
    // The last moment something happened (d's submission): where the simulation stands.
    let t = original.now();
    assert_eq!(t, 3 * MINUTE);
    let captured = original.capture("snapshot at 3m");
    assert!(captured.skipped.is_empty(), "{:?}", captured.skipped);
    let snap = captured.scenario;
    round_trip(&snap, "snapshot.yaml");
    let a = snap.jobs.iter().find(|j| j.name == "a").unwrap();
    assert_eq!(a.tasks[0].running.len(), 2);
    assert!(a.tasks[0].running.iter().all(|r| r.elapsed.0 == t));
    let order: Vec<&str> = snap.jobs.iter().map(|j| j.name.as_str()).collect();
    assert_eq!(order, ["a", "b", "c", "d"], "creation order");

    let full = original.run(&mut |_| {});
    let mut continued = Simulation::new(snap, "snapshot.yaml").unwrap();
    let next = continued.run(&mut |_| {});
    assert!(next.invariants_hold(), "{:?}", next.invariants);
    let (before, after) = (starts(&full), starts(&next));
    for gang in ["default/b", "default/c", "default/d"] {
        assert_eq!(
            after[gang],
            before[gang].map(|start| start - t),
            "{gang}: the original's start, on the snapshot's clock"
        );
    }
    assert_eq!(after["default/b"], Some(7 * MINUTE));
    assert_eq!(after["default/d"], Some(7 * MINUTE), "backfilled beside b");
    assert_eq!(after["default/c"], Some(12 * MINUTE));
    assert_eq!(after["default/a"], Some(-t), "started before t=0");
    let a = next.jobs.iter().find(|j| j.name == "default/a").unwrap();
    assert_eq!(a.wait, None, "it did not wait in this run");
}

#[test]
fn other_pods_hold_their_nodes_for_the_whole_run() {
    let text = r#"
name: other
nodeGroups:
- {name: n, count: 2, names: [alpha, beta], allocatable: {cpu: 8}}
otherPods:
- {name: kube-system/dns, node: alpha, requests: {cpu: 6}}
jobs:
- {name: g, tasks: [{role: w, replicas: 2, requests: {cpu: 4}, runtime: 1m}]}
"#;
    let s = Scenario::parse(text, "other.yaml").unwrap();
    round_trip(&s, "other.yaml");
    let mut sim = Simulation::new(s, "other.yaml").unwrap();
    let report = sim.run(&mut |_| {});
    assert!(report.invariants_hold(), "{:?}", report.invariants);
    let pods = sim.job_pods("g");
    assert!(pods.iter().all(|p| p.node.as_deref() == Some("beta")));
    assert!(pods.iter().all(|p| p.status == TaskStatus::Succeeded));
}

#[test]
fn pinned_pods_are_checked_against_the_nodes_and_the_job() {
    let msg = |text: &str| Scenario::parse(text, "s.yaml").unwrap_err().to_string();
    let base =
        "name: t\nnodeGroups:\n- {name: n, count: 2, names: [a, b], allocatable: {cpu: 4}}\n";
    let m = msg(&format!(
        "{base}jobs:\n- {{name: j, tasks: [{{role: w, running: [{{node: z}}]}}]}}\n"
    ));
    assert!(
        m.contains("s.yaml: jobs[0].tasks[0].running[0].node: no node \"z\" at t=0"),
        "{m}"
    );
    let m = msg(&format!(
        "{base}jobs:\n- {{name: j, tasks: [{{role: w, running: [{{node: a}}, {{node: b}}]}}]}}\n"
    ));
    assert!(
        m.contains("jobs[0].tasks[0].running: 2 pods running for 1 replicas"),
        "{m}"
    );
    let m = msg(&format!(
        "{base}jobs:\n- {{name: j, submitAt: 1m, tasks: [{{role: w, running: [{{node: a}}]}}]}}\n"
    ));
    assert!(
        m.contains("only a job submitted at t=0, not repeated, has pods running at t=0"),
        "{m}"
    );
    let m =
        msg("name: t\nnodeGroups:\n- {name: n, count: 1, names: [a, b], allocatable: {cpu: 4}}\n");
    assert!(
        m.contains("nodeGroups[0].names: 2 names for a count of 1"),
        "{m}"
    );
    let m = msg("name: t\nnodeGroups:\n- {name: n, count: 1, names: [a], allocatable: {cpu: 4}}\n- {name: m, count: 1, names: [a], allocatable: {cpu: 4}}\n");
    assert!(
        m.contains("nodeGroups[1].names: node \"a\" is also a node of nodeGroups[0]"),
        "{m}"
    );
    let m = msg(&format!(
        "{base}otherPods:\n- {{name: ns/p, node: q, requests: {{cpu: 1}}}}\n"
    ));
    assert!(m.contains("otherPods[0].node: no node \"q\" at t=0"), "{m}");
}

#[test]
fn nodes_added_later_skip_the_names_the_group_gave() {
    let text = r#"
name: names
nodeGroups:
- {name: n, count: 2, names: [n-2, x], allocatable: {cpu: 4}}
events:
- {at: 1m, addNodes: {group: n, count: 2}}
jobs:
- {name: g, tasks: [{role: w, replicas: 4, requests: {cpu: 4}, runtime: 10m}]}
"#;
    let mut sim = Simulation::new(Scenario::parse(text, "n.yaml").unwrap(), "n.yaml").unwrap();
    sim.run(&mut |_| {});
    let mut nodes: Vec<String> = sim
        .job_pods("g")
        .iter()
        .filter_map(|p| p.node.as_deref().map(String::from))
        .collect();
    nodes.sort();
    assert_eq!(nodes, ["n-2", "n-3", "n-4", "x"]);
}

/// A scenario whose every replica runs at t=0, on nodes of `cpus` CPUs each: (node, CPUs)
/// per running pod, each gang one task.
fn pinned_scenario(cpus: &[u32], gangs: &[Vec<(usize, u32)>], others: &[(usize, u32)]) -> String {
    let names: Vec<String> = (0..cpus.len()).map(|i| format!("node-{i}")).collect();
    let mut text = String::from("name: pinned\nnodeGroups:\n");
    for (i, c) in cpus.iter().enumerate() {
        text += &format!(
            "- {{name: g{i}, count: 1, names: [{}], allocatable: {{cpu: {c}}}}}\n",
            names[i]
        );
    }
    if !others.is_empty() {
        text += "otherPods:\n";
        for (k, (n, c)) in others.iter().enumerate() {
            text += &format!(
                "- {{name: ns/o{k}, node: {}, requests: {{cpu: {c}}}}}\n",
                names[*n]
            );
        }
    }
    text += "jobs:\n";
    for (j, pods) in gangs.iter().enumerate() {
        for (k, (n, c)) in pods.iter().enumerate() {
            // One task per pod: each its own request.
            if k == 0 {
                text += &format!("- name: j{j}\n  tasks:\n");
            }
            text += &format!(
                "  - {{role: r{k}, requests: {{cpu: {c}}}, runtime: 1h, running: [{{node: {}, elapsed: {k}m}}]}}\n",
                names[*n]
            );
        }
    }
    text
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Pods pinned at t=0 hold exactly their requests on their nodes, in the engine's view
    /// as in the simulator's own table, and a written scenario reads back equal.
    #[test]
    fn pinned_pods_reproduce_their_usage(
        cpus in prop::collection::vec(1u32..16, 1..5),
        gangs in prop::collection::vec(prop::collection::vec((0usize..8, 1u32..4), 1..4), 1..5),
        others in prop::collection::vec((0usize..8, 1u32..4), 0..4),
    ) {
        let n = cpus.len();
        let gangs: Vec<Vec<(usize, u32)>> =
            gangs.into_iter().map(|g| g.into_iter().map(|(i, c)| (i % n, c)).collect()).collect();
        let others: Vec<(usize, u32)> = others.into_iter().map(|(i, c)| (i % n, c)).collect();
        let text = pinned_scenario(&cpus, &gangs, &others);
        let s = Scenario::parse(&text, "p.yaml").unwrap();
        round_trip(&s, "p.yaml");
        let mut sim = Simulation::new(s, "p.yaml").unwrap();
        sim.run_until(0, &mut |_| {});
        let mut want = vec![0i64; n];
        for (i, c) in gangs.iter().flatten().chain(&others) {
            want[*i] += i64::from(*c) * 1000;
        }
        let captured = sim.capture("again");
        let groups = &captured.scenario.node_groups;
        // The engine's view: what a snapshot of it finds on each node.
        let mut held = vec![0i64; n];
        for j in &captured.scenario.jobs {
            for t in &j.tasks {
                for r in &t.running {
                    let i: usize = r.node.trim_start_matches("node-").parse().unwrap();
                    held[i] += t.requests.0.get(CPU);
                }
            }
        }
        for o in &captured.scenario.other_pods {
            let i: usize = o.node.trim_start_matches("node-").parse().unwrap();
            held[i] += o.requests.0.get(CPU);
        }
        prop_assert_eq!(&held, &want);
        prop_assert_eq!(groups.iter().map(|g| g.count).sum::<u32>() as usize, n);
        // The simulator's own table: every pinned pod running on its node.
        let mut table = vec![0i64; n];
        for p in sim.pods() {
            prop_assert_eq!(p.status, TaskStatus::Running);
            let i: usize = p.node.as_deref().unwrap().trim_start_matches("node-").parse().unwrap();
            table[i] += p.request.get(CPU);
        }
        for (i, c) in &others {
            table[*i] += i64::from(*c) * 1000;
        }
        prop_assert_eq!(&table, &want);
    }
}

/// Two nodes of 8 GPUs in cliques of 4: gang a (3 pods of a clique each, 10m) runs from
/// t=0; b (2 pods of a clique each) waits from 1m for a to end; c (2 pods sharing one claim
/// of one GPU) starts at 2m on the clique left free.
const DRA_RUN: &str = r#"
name: dra-run
deviceClasses:
- {name: gpu, selectors: ['device.driver == "gpu.example.com"']}
nodeGroups:
- name: dgx
  count: 2
  allocatable: {cpu: 64}
  devices:
  - {driver: gpu.example.com, count: 8, attributes: {model: h100}, capacity: {memory: 80Gi}, groups: {attribute: clique, size: 4}}
jobs:
- name: a
  tasks:
  - role: w
    replicas: 3
    requests: {cpu: 1}
    runtime: 10m
    estimate: 10m
    claims:
    - name: gpus
      requests: [{name: gpu, deviceClassName: gpu, count: 4}]
      constraints: [{matchAttribute: gpu.example.com/clique}]
- name: b
  submitAt: 1m
  tasks:
  - role: w
    replicas: 2
    requests: {cpu: 1}
    runtime: 5m
    estimate: 5m
    claims:
    - name: gpus
      requests: [{name: gpu, deviceClassName: gpu, count: 4}]
      constraints: [{matchAttribute: gpu.example.com/clique}]
- name: c
  submitAt: 2m
  tasks:
  - role: w
    replicas: 2
    requests: {cpu: 1}
    runtime: 3m
    estimate: 3m
    claims:
    - {name: one, shared: true, requests: [{name: gpu, deviceClassName: gpu}]}
"#;

#[test]
fn a_snapshot_of_a_dra_simulation_keeps_devices_and_claims_and_continues_it() {
    let scenario = Scenario::parse(DRA_RUN, "dra-run.yaml").unwrap();
    let mut original = Simulation::new(scenario.clone(), "dra-run.yaml").unwrap();
    original.run_until(3 * MINUTE, &mut |_| {});
    let t = original.now();
    assert_eq!(
        t,
        2 * MINUTE + 1000,
        "the last thing that happened: c started"
    );
    let captured = original.capture("dra snapshot");
    assert!(captured.skipped.is_empty(), "{:?}", captured.skipped);
    let snap = captured.scenario;
    round_trip(&snap, "dra-snapshot.yaml");
    assert_eq!(snap.device_classes, scenario.device_classes);
    assert_eq!(snap.node_groups.len(), 1, "{:?}", snap.node_groups);
    assert_eq!(
        snap.node_groups[0].devices, scenario.node_groups[0].devices,
        "the devices as the scenario wrote them: model and memory kept, cliques per node"
    );
    for name in ["a", "b", "c"] {
        let job = snap.jobs.iter().find(|j| j.name == name).unwrap();
        let want = &scenario.jobs.iter().find(|j| j.name == name).unwrap().tasks[0];
        assert_eq!(
            job.tasks.len(),
            1,
            "{name}: one task, its pods' claims equal"
        );
        assert_eq!(job.tasks[0].claims, want.claims, "{name}");
    }
    let running = |name: &str| {
        let job = snap.jobs.iter().find(|j| j.name == name).unwrap();
        job.tasks[0].running.len()
    };
    assert_eq!((running("a"), running("b"), running("c")), (3, 0, 2));

    let full = original.run(&mut |_| {});
    let mut continued = Simulation::new(snap, "dra-snapshot.yaml").unwrap();
    let next = continued.run(&mut |_| {});
    assert!(next.invariants_hold(), "{:?}", next.invariants);
    assert!(next.setup_problems.is_empty(), "{:?}", next.setup_problems);
    let (before, after) = (starts(&full), starts(&next));
    assert_eq!(
        before["default/b"],
        Some(10 * MINUTE),
        "when a's devices come free"
    );
    assert_eq!(
        after["default/b"],
        Some(10 * MINUTE - t),
        "the original's start, on the snapshot's clock"
    );
    // The running pods hold their devices at t=0: one clique of one node is left, less
    // c's GPU, and b's pods each want a whole clique.
    let b = continued.job_pods("b");
    assert!(b.iter().all(|p| p.status == TaskStatus::Succeeded));
    let c = continued.job_pods("c");
    assert!(
        c.iter()
            .all(|p| p.node.is_some() && p.node == c[0].node && p.claims().len() == 1),
        "c's pods share their claim on one node"
    );
}

/// S11d's network-attached pool, snapshot while a1 and a2 hold both NICs and a3 waits:
/// the pool comes back as written (its nodes named by their rack label), the running pods
/// hold their NICs again at t=0, and a3 starts when a1 ends, as in the original.
#[test]
fn a_snapshot_keeps_a_network_attached_pool_and_who_holds_its_devices() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/scenarios/s11d-dra-network-pool.yaml");
    let mut scenario = Scenario::load(&path).unwrap();
    // Exact estimates: the snapshot's runtimes are what the scheduler expects.
    for t in scenario.jobs.iter_mut().flat_map(|j| j.tasks.iter_mut()) {
        t.estimate = t.runtime;
    }
    let mut original = Simulation::new(scenario.clone(), "s11d").unwrap();
    original.run_until(30_000, &mut |_| {});
    let t = original.now();
    let captured = original.capture("s11d at 30s");
    assert!(captured.skipped.is_empty(), "{:?}", captured.skipped);
    let snap = captured.scenario;
    round_trip(&snap, "s11d-snapshot.yaml");
    assert_eq!(snap.device_pools, scenario.device_pools);
    assert!(snap.node_groups.iter().all(|g| g.devices.is_empty()));
    let full = original.run(&mut |_| {});
    let mut continued = Simulation::new(snap, "s11d-snapshot.yaml").unwrap();
    let next = continued.run(&mut |_| {});
    assert!(next.invariants_hold(), "{:?}", next.invariants);
    assert!(next.setup_problems.is_empty(), "{:?}", next.setup_problems);
    let (before, after) = (starts(&full), starts(&next));
    assert_eq!(before["default/a3"], Some(MINUTE));
    assert_eq!(after["default/a3"], Some(MINUTE - t), "a1's NIC comes free");
    assert_eq!(after["default/b1"], None);
}

/// Nodes of `gpus[i]` GPUs (each its own group, named `node-i`), and pods running at t=0
/// on them, each claiming `k` GPUs: (node, k) per pod, each its own gang.
fn pinned_dra_scenario(gpus: &[u32], pods: &[(usize, u32)]) -> String {
    let mut text = String::from(
        "name: pinned-dra\ndeviceClasses:\n- {name: gpu, selectors: ['device.driver == \"gpu.example.com\"']}\nnodeGroups:\n",
    );
    for (i, g) in gpus.iter().enumerate() {
        text += &format!(
            "- {{name: g{i}, count: 1, names: [node-{i}], allocatable: {{cpu: 64}}, devices: [{{driver: gpu.example.com, count: {g}, attributes: {{model: h100}}}}]}}\n"
        );
    }
    text += "jobs:\n";
    for (j, (n, k)) in pods.iter().enumerate() {
        text += &format!(
            "- {{name: j{j}, tasks: [{{role: w, requests: {{cpu: 1}}, runtime: 1h, running: [{{node: node-{n}}}], claims: [{{name: gpus, requests: [{{name: gpu, deviceClassName: gpu, count: {k}}}]}}]}}]}}\n"
        );
    }
    text
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Pods running at t=0 with claims hold as many devices of their nodes as they claim,
    /// no device twice; a snapshot of that writes each node's devices back whole (those the
    /// captured pods hold included) and reads back equal.
    #[test]
    fn pinned_pods_hold_their_claims_devices_and_a_snapshot_keeps_them(
        gpus in prop::collection::vec(1u32..9, 1..4),
        pods in prop::collection::vec((0usize..4, 1u32..4), 1..6),
    ) {
        let n = gpus.len();
        // Only pods whose node has room for their claims: the cluster they were taken of.
        let mut left = gpus.clone();
        let pods: Vec<(usize, u32)> = pods
            .into_iter()
            .map(|(i, k)| (i % n, k))
            .filter(|(i, k)| {
                let fits = left[*i] >= *k;
                if fits {
                    left[*i] -= k;
                }
                fits
            })
            .collect();
        let text = pinned_dra_scenario(&gpus, &pods);
        let s = Scenario::parse(&text, "pd.yaml").unwrap();
        round_trip(&s, "pd.yaml");
        let mut sim = Simulation::new(s, "pd.yaml").unwrap();
        sim.run_until(0, &mut |_| {});
        prop_assert!(sim.report().setup_problems.is_empty(), "{:?}", sim.report().setup_problems);
        let mut held = std::collections::BTreeSet::new();
        for (p, (i, k)) in sim.pods().iter().zip(&pods) {
            let a = p.claims()[0].allocation.as_ref().expect("allocated at t=0");
            let node = format!("node-{i}");
            prop_assert_eq!(&*a.node, node.as_str());
            prop_assert_eq!(a.devices.len() as u32, *k);
            for d in &a.devices {
                prop_assert!(held.insert(d.key()), "{} held twice", d.key());
            }
        }
        let captured = sim.capture("again");
        round_trip(&captured.scenario, "again.yaml");
        prop_assert!(captured.skipped.is_empty(), "{:?}", captured.skipped);
        let mut written = vec![0u32; n];
        for g in &captured.scenario.node_groups {
            let count: u32 = g.devices.iter().map(|d| d.count).sum();
            for name in &g.names {
                let i: usize = name.trim_start_matches("node-").parse().unwrap();
                written[i] = count;
            }
        }
        prop_assert_eq!(written, gpus);
        let claimed: usize = captured.scenario.jobs.iter().map(|j| j.tasks[0].claims.len()).sum();
        prop_assert_eq!(claimed, pods.len());
    }
}
