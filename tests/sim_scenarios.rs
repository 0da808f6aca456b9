//! SCENARIOS.md S1 and S2 in the simulator, asserting exactly what the scenarios say.

use std::collections::BTreeSet;
use std::path::Path;

use rust_batch::model::resource::GPU;
use rust_batch::model::TaskStatus;
use rust_batch::sim::{Scenario, Simulation, DEFAULT_SCENARIO};

fn load(file: &str) -> Simulation {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/scenarios")
        .join(file);
    let scenario = Scenario::load(&path).expect("scenario parses");
    Simulation::new(scenario, file).expect("scenario builds")
}

fn statuses(sim: &Simulation, job: &str) -> Vec<TaskStatus> {
    sim.job_pods(job).iter().map(|p| p.status).collect()
}

const SECOND: i64 = 1000;
const MINUTE: i64 = 60 * SECOND;

#[test]
fn s1_tfjob_is_all_or_nothing_and_binds_whole_when_nodes_arrive() {
    let mut sim = load("s1-tfjob-all-or-nothing.yaml");
    sim.run_until(2 * MINUTE - SECOND, &mut |_| {});
    // 2 nodes × 2 GPUs, 4 workers × 2 GPUs: nothing may bind, not even the PS.
    assert_eq!(statuses(&sim, "tf-smoke-gpu"), vec![TaskStatus::Pending; 5]);
    let message = sim
        .job("tf-smoke-gpu")
        .unwrap()
        .message
        .clone()
        .expect("gang reports why");
    assert!(
        message.contains("2/5 tasks in gang unschedulable"),
        "{message}"
    );
    assert!(
        message.contains("Insufficient nvidia.com/gpu (need 2, best node has 0 free)"),
        "{message}"
    );
    assert!(
        message.contains("gang is short of 4 nvidia.com/gpu"),
        "{message}"
    );

    // Two more nodes arrive at 2m: the whole gang binds in the first cycle after.
    sim.run_until(2 * MINUTE, &mut |_| {});
    assert_eq!(statuses(&sim, "tf-smoke-gpu"), vec![TaskStatus::Running; 5]);
    let workers: Vec<_> = sim
        .job_pods("tf-smoke-gpu")
        .into_iter()
        .filter(|p| &*p.role == "worker")
        .collect();
    let nodes: BTreeSet<_> = workers.iter().map(|p| p.node.clone().unwrap()).collect();
    assert_eq!(nodes.len(), 4, "every worker has a node of its own");
    for n in &nodes {
        assert_eq!(
            sim.node_allocatable(n).unwrap().scalar(GPU),
            2000,
            "each worker's node had 2 free GPUs"
        );
    }
    let report = sim.run(&mut |_| {});
    assert!(report.invariants_hold(), "{:?}", report.invariants);
    assert_eq!(report.summary.completed, 1);
}

#[test]
fn s2_second_gang_waits_whole_then_binds_whole() {
    let mut sim = load("s2-two-gangs-one-fits.yaml");
    sim.run_until(10 * SECOND, &mut |_| {});
    assert_eq!(statuses(&sim, "job1"), vec![TaskStatus::Running; 4]);
    assert_eq!(
        statuses(&sim, "job2"),
        vec![TaskStatus::Pending; 3],
        "no PS, no worker of job2 bound"
    );
    sim.run_until(5 * MINUTE - SECOND, &mut |_| {});
    assert_eq!(statuses(&sim, "job2"), vec![TaskStatus::Pending; 3]);
    let message = sim
        .job("job2")
        .unwrap()
        .message
        .clone()
        .expect("job2 says why it waits");
    assert!(message.contains("Insufficient nvidia.com/gpu"), "{message}");
    // job1 finishes at 5m: job2 binds whole in that cycle.
    sim.run_until(5 * MINUTE, &mut |_| {});
    assert!(statuses(&sim, "job1")
        .iter()
        .all(|s| *s == TaskStatus::Succeeded));
    assert_eq!(statuses(&sim, "job2"), vec![TaskStatus::Running; 3]);
    let report = sim.run(&mut |_| {});
    assert!(report.invariants_hold(), "{:?}", report.invariants);
    assert_eq!(report.summary.completed, 2);
}

#[test]
fn bundled_default_runs_clean_and_is_deterministic() {
    let run = || {
        let scenario = Scenario::parse(DEFAULT_SCENARIO, "default").unwrap();
        Simulation::new(scenario, "default")
            .unwrap()
            .run(&mut |_| {})
    };
    let a = run();
    assert!(a.invariants_hold(), "{:?}", a.invariants);
    assert_eq!(
        a.summary.never_started, 0,
        "every job of the default scenario runs"
    );
    let b = run();
    assert_eq!(a, b, "same scenario and seed, same report");
    // S1 and S2 behave inside the bundled scenario as on their own.
    let job = |name: &str| a.jobs.iter().find(|j| j.name == name).unwrap().clone();
    assert_eq!(job("default/tf-smoke-gpu").started, Some(2 * MINUTE));
    assert_eq!(job("default/job2").started, Some(5 * MINUTE));
}

#[test]
fn report_formats_render() {
    let mut sim = load("s2-two-gangs-one-fits.yaml");
    let report = sim.run(&mut |_| {});
    let table = report.to_table(10);
    assert!(table.contains("default/job2"), "{table}");
    assert!(
        table.contains("partial gangs bound = 0, over-committed nodes = 0 (OK)"),
        "{table}"
    );
    let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
    assert_eq!(json["invariants"]["partial_gangs"], 0);
    assert_eq!(json["jobs"].as_array().unwrap().len(), 2);
    let svg = rust_batch::sim::plot::render(&report);
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains("default/job1"));
}
