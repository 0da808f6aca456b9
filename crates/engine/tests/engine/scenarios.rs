//! The bundled scenario files (examples/scenarios: docs/src/scenarios.md: S1, S2, S4, S4b, S5, S5b, S6,
//! S7, S8, S9, S10 and S11, and the default) in the simulator, asserting exactly what the scenarios say, plus
//! the report formats and determinism of the bundled default.

use std::collections::BTreeSet;
use std::path::Path;

use rust_batch_engine::model::resource::GPU;
use rust_batch_engine::model::TaskStatus;
use rust_batch_engine::sim::{Scenario, Simulation, DEFAULT_SCENARIO};

fn load(file: &str) -> Simulation {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/scenarios")
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
    let svg = rust_batch_engine::sim::plot::render(&report);
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains("default/job1"));
}

#[test]
fn s6_priority_preemption_within_a_queue() {
    let mut sim = load("s6-priority-preemption.yaml");
    sim.run_until(59 * SECOND, &mut |_| {});
    let running = |sim: &Simulation, job: &str| {
        sim.job_pods(job)
            .iter()
            .filter(|p| p.status == TaskStatus::Running)
            .count()
    };
    for j in ["low-0", "low-1", "low-2", "bystander"] {
        assert_eq!(
            running(&sim, j),
            4,
            "{j} fills the cluster before the urgent gang arrives"
        );
    }
    // Step through the preemption: victims keep their minMember, the other queue is untouched.
    let mut t = MINUTE;
    while t <= 3 * MINUTE {
        sim.run_until(t, &mut |_| {});
        for j in ["low-0", "low-1", "low-2"] {
            let holding = sim
                .job_pods(j)
                .iter()
                .filter(|p| matches!(p.status, TaskStatus::Running | TaskStatus::Releasing))
                .count();
            assert!(
                holding >= 2,
                "victim gang {j} left below its minMember at t={t}: {holding}"
            );
        }
        let bystander = sim.job_pods("bystander");
        assert!(
            bystander.iter().all(|p| p.status == TaskStatus::Running),
            "a pod of another queue was touched at t={t}"
        );
        t += SECOND;
    }
    assert_eq!(
        running(&sim, "urgent"),
        4,
        "the urgent gang runs after the evictions"
    );
    let report = sim.report();
    assert!(report.summary.evictions >= 4, "{:?}", report.summary);
    assert!(report.invariants_hold(), "{:?}", report.invariants);
}

#[test]
fn s5_queue_shares_converge_to_weights() {
    let mut sim = load("s5-queue-shares.yaml");
    let report = sim.run(&mut |_| {});
    assert!(report.invariants_hold(), "{:?}", report.invariants);
    let share =
        |s: &rust_batch_engine::sim::report::Sample, q: &str| s.queue_share[q]["cpu"] * 32.0;
    for s in &report.samples {
        assert!(
            share(s, "q-a") <= 16.0 + 1e-9,
            "q-a above its capability at t={}: {}",
            s.t,
            share(s, "q-a")
        );
    }
    // Once q-a's head start has run out (its first gangs finish within ~2.5m) and while both
    // queues still have work waiting, q-a holds 8 cpu and q-b 24, within one gang (4 cpu).
    let steady: Vec<_> = report
        .samples
        .iter()
        .filter(|s| s.t >= 4 * MINUTE && s.t <= 9 * MINUTE)
        .collect();
    assert!(!steady.is_empty());
    for s in steady {
        let (a, b) = (share(s, "q-a"), share(s, "q-b"));
        assert!((4.0..=12.0).contains(&a), "q-a holds {a} cpu at t={}", s.t);
        assert!((20.0..=28.0).contains(&b), "q-b holds {b} cpu at t={}", s.t);
    }
    // The human report shows the shares over time: 13 rows, converged after the start.
    let table = report.to_table(5);
    let shares = report.shares_over_time(12);
    assert!(table.contains(&shares), "{table}");
    let lines: Vec<&str> = shares.lines().collect();
    assert_eq!(
        lines[1].split_whitespace().collect::<Vec<_>>(),
        ["TIME", "q-a", "cpu", "q-b", "cpu"]
    );
    assert_eq!(lines.len(), 2 + 13, "{shares}");
    for row in &lines[4..8] {
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cells[1..], ["25.0%", "75.0%"], "{shares}");
    }
}

#[test]
fn s4_gang_group_binds_nothing_with_room_for_three_then_all_four_together() {
    let mut sim = load("s4-gang-group.yaml");
    sim.run_until(MINUTE - SECOND, &mut |_| {});
    for job in ["gang-a", "gang-b"] {
        assert_eq!(
            statuses(&sim, job),
            vec![TaskStatus::Pending; 2],
            "{job}: gang-a alone would fit, but not the group"
        );
    }
    let message = sim
        .job("gang-a")
        .unwrap()
        .message
        .clone()
        .unwrap_or_default()
        + &sim
            .job("gang-b")
            .unwrap()
            .message
            .clone()
            .unwrap_or_default();
    assert!(message.contains("gang group not ready"), "{message}");
    // The fourth slot arrives at 1m: all four bind in that cycle.
    sim.run_until(MINUTE, &mut |_| {});
    for job in ["gang-a", "gang-b"] {
        assert_eq!(statuses(&sim, job), vec![TaskStatus::Running; 2], "{job}");
    }
    let report = sim.run(&mut |_| {});
    assert!(report.invariants_hold(), "{:?}", report.invariants);
    assert_eq!(report.summary.completed, 2);
}

#[test]
fn s4b_a_non_strict_gang_holds_until_its_waiting_time_then_releases_and_retries() {
    let mut sim = load("s4b-waiting-time.yaml");
    sim.run_until(29 * SECOND, &mut |_| {});
    // Two of four members hold the only node; the small job cannot use it.
    assert_eq!(sim.held_pods("big"), 2);
    assert_eq!(
        statuses(&sim, "big"),
        vec![TaskStatus::Pending; 4],
        "none bound"
    );
    assert_eq!(statuses(&sim, "small"), vec![TaskStatus::Pending]);
    // At 30s the waiting time runs out: holds released, the small job runs at once.
    sim.run_until(30 * SECOND, &mut |_| {});
    assert_eq!(statuses(&sim, "small"), vec![TaskStatus::Running]);
    assert_eq!(sim.held_pods("big"), 0);
    let message = sim.job("big").unwrap().message.clone().unwrap_or_default();
    assert!(message.contains("retrying after a backoff"), "{message}");
    // Capacity for the whole gang arrives at 5m: it binds whole within a backoff (≤ 5m).
    let report = sim.run(&mut |_| {});
    assert!(report.invariants_hold(), "{:?}", report.invariants);
    let big = report
        .jobs
        .iter()
        .find(|j| j.name == "default/big")
        .unwrap();
    let started = big.started.expect("the big gang runs in the end");
    assert!(
        (5 * MINUTE..=10 * MINUTE).contains(&started),
        "started at {started} ms"
    );
    assert_eq!(report.summary.completed, 2);
}

/// Issue 5's starvation test: a 32-GPU gang (4 × 8 GPU on 4 × 8-GPU nodes) arrives behind
/// a full cluster of 1-GPU jobs and a stream of more 1-GPU jobs, all with runtime estimates.
#[test]
fn s7_backfill_reservation_bounds_the_wait_of_a_large_gang_behind_a_stream() {
    let file = "s7-backfill-starvation.yaml";
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/scenarios")
        .join(file);
    let scenario = Scenario::load(&path).expect("scenario parses");
    let big = scenario.jobs.iter().find(|j| j.name == "big").unwrap();
    let big_submit = big.submit_at.0;
    // The bound, from the scenario: every job running when the gang arrives was submitted
    // before it, and ends by its estimate (the estimates here are upper bounds of the true
    // runtimes); the gang then starts at the next cycle.
    let longest_estimate = scenario
        .jobs
        .iter()
        .filter(|j| j.name != "big" && j.submit_at.0 <= big_submit)
        .map(|j| j.estimate.expect("the filling jobs carry estimates").0)
        .max()
        .unwrap();
    let bound = longest_estimate + scenario.schedule_period.0;
    let stream_ends = scenario
        .jobs
        .iter()
        .filter_map(|j| {
            Some(j.submit_at.0 + j.repeat.as_ref()?.every.0 * i64::from(j.repeat.as_ref()?.count))
        })
        .max()
        .unwrap();
    assert!(
        scenario.config.is_none(),
        "runs the default configuration, which has backfill"
    );
    assert!(rust_batch_engine::conf::SchedulerConf::default_conf()
        .actions
        .iter()
        .any(|a| a == "backfill"));

    let run = |scenario: Scenario| {
        let mut sim = Simulation::new(scenario, file).expect("scenario builds");
        let report = sim.run(&mut |_| {});
        assert!(report.invariants_hold(), "{:?}", report.invariants);
        assert_eq!(
            report.summary.never_started, 0,
            "everything runs eventually"
        );
        report
    };
    let job = |r: &rust_batch_engine::sim::Report, name: &str| {
        r.jobs.iter().find(|j| j.name == name).unwrap().clone()
    };

    // With backfill and its reservation (the default configuration).
    let mut sim = Simulation::new(scenario.clone(), file).unwrap();
    sim.run_until(big_submit + 2 * SECOND, &mut |_| {});
    let waiting = sim.job("big").unwrap().message.clone().unwrap();
    assert!(
        waiting.contains("reserved: nodes gpu-1,gpu-2,gpu-3,gpu-4 from"),
        "the reservation is visible: {waiting}"
    );
    let easy = sim.run(&mut |_| {});
    assert!(easy.invariants_hold(), "{:?}", easy.invariants);
    let easy_big = job(&easy, "default/big");
    let wait = easy_big.wait.expect("the gang starts");
    assert!(
        wait <= bound,
        "wait {wait} ms exceeds the running jobs' estimates ({bound} ms)"
    );
    assert!(easy_big
        .reservation
        .as_deref()
        .is_some_and(|r| r.starts_with("reserved: nodes gpu-1,gpu-2,gpu-3,gpu-4")));
    // The gangs that waited for the gang's reservation mention it in their message, but it
    // is not theirs to report.
    let big_reservation = easy_big.reservation.as_deref().unwrap();
    let borrowed: Vec<&str> = easy
        .jobs
        .iter()
        .filter(|j| j.name != "default/big")
        .filter(|j| {
            j.reservation
                .as_deref()
                .is_some_and(|r| r.starts_with(big_reservation))
        })
        .map(|j| j.name.as_str())
        .collect();
    assert!(borrowed.is_empty(), "{borrowed:?}");
    assert!(
        easy.to_table(1)
            .contains("reservations (backfill):\n  default/big: reserved: nodes"),
        "{}",
        easy.to_table(1)
    );
    // Backfill did place stream jobs while the gang waited (short ones ending in time).
    let backfilled = easy
        .jobs
        .iter()
        .filter(|j| j.submitted > big_submit)
        .filter(|j| j.started.is_some_and(|s| s < easy_big.started.unwrap()))
        .count();
    assert!(backfilled > 0, "no job was backfilled during the wait");

    // Greedy filling: no backfill action, so no reservation. The stream takes every freed
    // GPU and the gang waits until the stream dries up.
    let mut greedy_scenario = scenario.clone();
    greedy_scenario.config = Some(
        rust_batch_engine::conf::DEFAULT_CONF
            .replace("enqueue, allocate, backfill", "enqueue, allocate"),
    );
    let greedy = run(greedy_scenario);
    let greedy_big = job(&greedy, "default/big");
    assert!(
        greedy_big.started.unwrap() >= stream_ends,
        "greedy: the gang starts at {:?}, before the stream ends at {stream_ends}",
        greedy_big.started
    );
    assert!(greedy_big.wait.unwrap() > 3 * bound);

    // Reservation impossible (no estimates at all): exactly the greedy schedule.
    let mut blind = scenario.clone();
    for j in &mut blind.jobs {
        j.estimate = None;
    }
    let blind = run(blind);
    let starts = |r: &rust_batch_engine::sim::Report| {
        r.jobs
            .iter()
            .map(|j| (j.name.clone(), j.started))
            .collect::<Vec<_>>()
    };
    assert_eq!(starts(&blind), starts(&greedy));

    // Utilization stays within 10% of greedy filling.
    let gpu = |r: &rust_batch_engine::sim::Report| r.summary.mean_utilization[GPU];
    assert!(
        gpu(&easy) >= 0.9 * gpu(&greedy),
        "GPU utilization {} vs greedy {}",
        gpu(&easy),
        gpu(&greedy)
    );
}

#[test]
fn s5b_hierarchical_queues_never_exceed_a_parent_capability_and_converge_to_deserved() {
    let mut sim = load("s5b-capacity-hierarchy.yaml");
    let report = sim.run(&mut |_| {});
    assert!(report.invariants_hold(), "{:?}", report.invariants);
    let cpu = |s: &rust_batch_engine::sim::report::Sample, q: &str| {
        s.queue_share
            .get(q)
            .and_then(|r| r.get("cpu"))
            .copied()
            .unwrap_or(0.0)
            * 32.0
    };
    for s in &report.samples {
        let eng = cpu(s, "ml") + cpu(s, "web");
        assert!(
            eng <= 24.0 + 1e-9,
            "eng's children hold {eng} cpu at t={}",
            s.t
        );
    }
    // While every leaf has work waiting, each holds what it deserves within one gang.
    let steady: Vec<_> = report
        .samples
        .iter()
        .filter(|s| s.t >= 5 * MINUTE && s.t <= 9 * MINUTE)
        .collect();
    assert!(!steady.is_empty());
    for s in steady {
        let (ml, web, ops) = (cpu(s, "ml"), cpu(s, "web"), cpu(s, "ops"));
        assert!(
            (12.0..=20.0).contains(&ml),
            "ml holds {ml} cpu at t={}",
            s.t
        );
        assert!(
            (4.0..=12.0).contains(&web),
            "web holds {web} cpu at t={}",
            s.t
        );
        assert!(
            (4.0..=12.0).contains(&ops),
            "ops holds {ops} cpu at t={}",
            s.t
        );
    }
}

/// A Volcano configuration's text without one plugin: its `- name:` line and the lines
/// indented below it.
fn without_plugin(conf: &str, plugin: &str) -> String {
    let mut out = String::new();
    let mut skip_deeper_than: Option<usize> = None;
    for line in conf.lines() {
        let indent = line.len() - line.trim_start().len();
        if let Some(level) = skip_deeper_than {
            if indent > level && !line.trim().is_empty() {
                continue;
            }
            skip_deeper_than = None;
        }
        if line.trim() == format!("- name: {plugin}") {
            skip_deeper_than = Some(indent);
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Issue 13's S8: 4 racks × 4 nodes × 8 GPUs of two GPU models under a stream of 8-, 16-
/// and 32-GPU gangs, with the default configuration (gpu-affinity's levels set to the rack
/// label) and with the same configuration without gpu-affinity.
#[test]
fn s8_gpu_affinity_keeps_gangs_on_one_gpu_model_and_more_of_them_in_one_rack() {
    use rust_batch_engine::conf::{SchedulerConf, DEFAULT_CONF};
    let file = "s8-topology.yaml";
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/scenarios")
        .join(file);
    let scenario = Scenario::load(&path).expect("scenario parses");
    let conf = scenario
        .config
        .clone()
        .expect("S8 carries its configuration");
    // The default configuration, only gpu-affinity's levels set to this cluster's label.
    let default_levels =
        "gpu-affinity.topologyLevels: nvidia.com/gpu.clique, topology.kubernetes.io/zone";
    assert!(DEFAULT_CONF.contains(default_levels), "{DEFAULT_CONF}");
    assert_eq!(
        conf,
        DEFAULT_CONF.replace(
            default_levels,
            "gpu-affinity.topologyLevels: example.com/rack"
        )
    );
    let mut plain = scenario.clone();
    plain.config = Some(without_plugin(&conf, "gpu-affinity"));
    let plain_conf = SchedulerConf::parse(plain.config.as_deref().unwrap(), "plain").unwrap();
    let mut expected = SchedulerConf::parse(&conf, "plain").unwrap();
    for t in &mut expected.tiers {
        t.plugins.retain(|p| p.name != "gpu-affinity");
    }
    assert_eq!(
        plain_conf.tiers, expected.tiers,
        "only gpu-affinity is gone"
    );

    let run = |scenario: Scenario| {
        let report = Simulation::new(scenario, file)
            .expect("scenario builds")
            .run(&mut |_| {});
        assert!(report.invariants_hold(), "{:?}", report.invariants);
        assert_eq!(report.summary.never_started, 0, "every gang runs");
        for j in &report.jobs {
            assert_eq!(j.spread.len(), 2, "{}: {:?}", j.name, j.spread);
            assert!(!j.gpu_models.is_empty(), "{}", j.name);
        }
        report
    };
    let affine = run(scenario);
    let plain = run(plain);

    // One GPU model per gang with gpu-affinity; without it, gangs do mix (so the check
    // above is not vacuous).
    for j in &affine.jobs {
        assert_eq!(
            j.gpu_models.len(),
            1,
            "{} ran on {:?}",
            j.name,
            j.gpu_models
        );
    }
    assert_eq!(affine.summary.mixed_gpu_model_gangs, 0);
    assert!(plain.summary.mixed_gpu_model_gangs > 0);

    // More multi-node gangs within one rack, and fewer racks per gang.
    let rack = |r: &rust_batch_engine::sim::Report| r.summary.topology[0].clone();
    let (a, p) = (rack(&affine), rack(&plain));
    assert_eq!(a.level, "example.com/rack");
    assert!(a.multi_node_gangs > 0 && p.multi_node_gangs > 0);
    assert!(
        a.share_within_one_domain.unwrap() > p.share_within_one_domain.unwrap(),
        "within one rack: {a:?} with gpu-affinity, {p:?} without"
    );
    assert!(a.mean_domains.unwrap() < p.mean_domains.unwrap());
    // The two GPU models are in different zones: one model means one zone.
    assert_eq!(
        affine.summary.topology[1].share_within_one_domain,
        Some(1.0)
    );
    // Keeping gangs together costs no GPU time here: utilization within 2 points.
    let gpu = |r: &rust_batch_engine::sim::Report| r.summary.mean_utilization[GPU];
    assert!((gpu(&affine) - gpu(&plain)).abs() < 0.02);
}

#[test]
fn s9_pod_rules_hold_in_the_simulator() {
    let mut sim = load("s9-pod-rules.yaml");
    sim.run_until(10 * SECOND, &mut |_| {});
    let zone = |node: &str| node.split('-').next().unwrap().to_string();
    let nodes = |sim: &Simulation, job: &str, role: &str| -> Vec<String> {
        sim.job_pods(job)
            .into_iter()
            .filter(|p| &*p.role == role && p.status == TaskStatus::Running)
            .map(|p| p.node.as_deref().unwrap().to_string())
            .collect()
    };
    let distinct = |v: &[String]| v.iter().collect::<BTreeSet<_>>().len();
    let mpi = nodes(&sim, "mpi", "worker");
    assert_eq!(
        (mpi.len(), distinct(&mpi)),
        (4, 4),
        "hostPort 2222 once per node: {mpi:?}"
    );
    let allreduce = nodes(&sim, "allreduce", "worker");
    assert_eq!(
        (allreduce.len(), distinct(&allreduce)),
        (6, 6),
        "{allreduce:?}"
    );
    let serve = nodes(&sim, "serve", "server");
    let in_z0 = serve.iter().filter(|n| zone(n) == "z0").count();
    assert_eq!((serve.len(), in_z0), (6, 3), "spread 3 per zone: {serve:?}");
    let cache = nodes(&sim, "cache", "cache");
    let reader = nodes(&sim, "reader", "reader");
    assert_eq!(reader.len(), 4);
    assert!(
        reader.iter().all(|n| zone(n) == zone(&cache[0])),
        "{reader:?} near {cache:?}"
    );
    assert!(
        nodes(&sim, "seven", "worker").is_empty(),
        "7 one-per-node pods, 6 nodes"
    );
    let message = sim.job("seven").unwrap().message.clone().unwrap();
    assert!(
        message.contains("node(s) didn't match pod anti-affinity rules"),
        "{message}"
    );
    let report = sim.run(&mut |_| {});
    assert!(report.invariants_hold(), "{:?}", report.invariants);
}

#[test]
fn s10_subgroups_bind_only_whole_and_the_rest_when_room_comes() {
    let mut sim = load("s10-subgroups.yaml");
    let running_per_group = |sim: &Simulation| {
        let mut per = [0usize; 2];
        for p in sim.job_pods("lws") {
            if p.status == TaskStatus::Running {
                // Pods are named {job}-{role}-{replica}; groupSize 4.
                let replica: usize = p.uid.rsplit('-').next().unwrap().parse().unwrap();
                let group = replica / 4;
                per[group] += 1;
            }
        }
        per
    };
    sim.run_until(MINUTE, &mut |_| {});
    let per = running_per_group(&sim);
    assert!(per == [4, 0] || per == [0, 4], "one whole replica: {per:?}");
    // Two more nodes at 2m: the other replica binds whole.
    sim.run_until(2 * MINUTE + 5 * SECOND, &mut |_| {});
    assert_eq!(running_per_group(&sim), [4, 4]);
    let report = sim.run(&mut |_| {});
    assert!(report.invariants_hold(), "{:?}", report.invariants);
}

#[test]
fn s11_dra_gangs_bind_whole_with_their_devices_in_one_clique() {
    let mut sim = load("s11-dra-devices.yaml");
    let message =
        |sim: &Simulation, job: &str| sim.job(job).unwrap().message.clone().unwrap_or_default();
    sim.run_until(10 * SECOND, &mut |_| {});
    assert_eq!(statuses(&sim, "wide"), vec![TaskStatus::Running; 2]);
    assert_eq!(statuses(&sim, "train"), vec![TaskStatus::Running; 4]);
    // Every pod's devices in one clique, no device twice (the simulator reports a device
    // held by two claims as a violation, checked at the end).
    for job in ["wide", "train"] {
        for p in sim.job_pods(job) {
            let a = p.claims()[0].allocation.clone().expect("allocated");
            assert_eq!(Some(&a.node), p.node.as_ref());
            let cliques: BTreeSet<String> = a
                .devices
                .iter()
                .map(|d| {
                    let i: u32 = d.device.rsplit('-').next().unwrap().parse().unwrap();
                    format!("{}-{}", a.node, i / 4)
                })
                .collect();
            assert_eq!(cliques.len(), 1, "{}: {:?}", p.uid, a.devices);
        }
    }
    assert_eq!(statuses(&sim, "six"), vec![TaskStatus::Pending]);
    assert!(
        message(&sim, "six").contains("cannot allocate all claims"),
        "{}",
        message(&sim, "six")
    );
    assert!(
        message(&sim, "bad-class").contains("request gpu: device class tpu does not exist"),
        "{}",
        message(&sim, "bad-class")
    );

    sim.run_until(2 * MINUTE - SECOND, &mut |_| {});
    assert_eq!(statuses(&sim, "late"), vec![TaskStatus::Pending; 4]);
    assert!(message(&sim, "late").contains("cannot allocate all claims"));
    sim.run_until(2 * MINUTE + SECOND, &mut |_| {});
    assert_eq!(statuses(&sim, "late"), vec![TaskStatus::Running; 4]);

    sim.run_until(3 * MINUTE + SECOND, &mut |_| {});
    let team = sim.job_pods("team");
    assert!(team.iter().all(|p| p.status == TaskStatus::Running));
    let allocations: BTreeSet<_> = team
        .iter()
        .map(|p| p.claims()[0].allocation.clone().unwrap())
        .collect::<Vec<_>>()
        .into_iter()
        .map(|a| (a.node.clone(), a.devices.clone()))
        .collect();
    assert_eq!(allocations.len(), 1, "one allocation of the shared claim");
    assert_eq!(team[0].node, team[1].node);

    let report = sim.run(&mut |_| {});
    assert!(report.invariants_hold(), "{:?}", report.invariants);
    assert_eq!(statuses(&sim, "six"), vec![TaskStatus::Pending]);
    assert_eq!(statuses(&sim, "bad-class"), vec![TaskStatus::Pending]);
}

/// S11b: a queue's capability in devices of a DeviceClass holds whatever the cluster has
/// free, and a preemptor waits for its victims' devices until their pods are gone (their
/// claims deallocated), never binding onto devices a releasing pod's claim still holds.
#[test]
fn s11b_device_quota_per_queue_and_preemption_that_waits_for_the_devices() {
    let mut sim = load("s11b-dra-queue-quota.yaml");
    let message =
        |sim: &Simulation, job: &str| sim.job(job).unwrap().message.clone().unwrap_or_default();
    sim.run_until(10 * SECOND, &mut |_| {});
    assert_eq!(statuses(&sim, "sweep-0"), vec![TaskStatus::Running]);
    assert_eq!(statuses(&sim, "low"), vec![TaskStatus::Running; 3]);
    // Research holds 4 GPUs, its capability: the second sweep is not even admitted.
    assert_eq!(statuses(&sim, "sweep-1"), vec![TaskStatus::Pending]);
    assert!(
        message(&sim, "sweep-1").contains("not admitted"),
        "{}",
        message(&sim, "sweep-1")
    );

    // urgent arrives at 1m: low goes whole (minMember 3 of 3), and urgent is pipelined
    // behind the 30 s eviction grace: not bound while low's claims hold the devices.
    sim.run_until(MINUTE + 20 * SECOND, &mut |_| {});
    assert_eq!(statuses(&sim, "urgent"), vec![TaskStatus::Pending]);
    assert!(statuses(&sim, "low")
        .iter()
        .all(|s| *s == TaskStatus::Releasing));
    sim.run_until(MINUTE + 40 * SECOND, &mut |_| {});
    assert_eq!(statuses(&sim, "urgent"), vec![TaskStatus::Running]);
    // Two cliques are free now (low needs three to come back), and research still gets
    // none of them: its capability, not the devices, holds the second sweep back.
    assert_eq!(statuses(&sim, "sweep-1"), vec![TaskStatus::Pending]);

    let report = sim.run(&mut |_| {});
    assert!(report.invariants_hold(), "{:?}", report.invariants);
}

/// S11c: gpu-affinity keeps a gang's DRA devices in one NVLink clique across nodes
/// (`deviceAttribute`, hard): a gang that fits only across cliques waits and says so, one
/// that fits in a clique binds whole inside it.
#[test]
fn s11c_gpu_affinity_keeps_a_gangs_devices_in_one_clique_across_nodes() {
    let mut sim = load("s11c-dra-gpu-affinity.yaml");
    let message =
        |sim: &Simulation, job: &str| sim.job(job).unwrap().message.clone().unwrap_or_default();
    sim.run_until(15 * SECOND, &mut |_| {});
    assert_eq!(statuses(&sim, "filler-a"), vec![TaskStatus::Running]);
    assert_eq!(statuses(&sim, "filler-b"), vec![TaskStatus::Running]);
    assert_eq!(statuses(&sim, "wide"), vec![TaskStatus::Pending; 4]);
    assert!(
        message(&sim, "wide").contains("gpu.example.com/clique"),
        "{}",
        message(&sim, "wide")
    );
    sim.run_until(25 * SECOND, &mut |_| {});
    assert_eq!(statuses(&sim, "train"), vec![TaskStatus::Running; 3]);
    let racks: BTreeSet<String> = sim
        .job_pods("train")
        .iter()
        .map(|p| {
            p.node
                .as_deref()
                .unwrap()
                .split('-')
                .nth(1)
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(racks.len(), 1, "train spans racks: {racks:?}");
    assert_eq!(statuses(&sim, "wide"), vec![TaskStatus::Pending; 4]);
    let report = sim.run(&mut |_| {});
    assert!(report.invariants_hold(), "{:?}", report.invariants);
}

/// S11d: a network-attached pool's devices reach every node of rack a and are allocated
/// once cluster-wide: two pods on (possibly) different nodes get different NICs, a third
/// waits until one is freed, and a pod of rack b never gets one.
#[test]
fn s11d_network_attached_devices_are_allocated_once_cluster_wide() {
    let mut sim = load("s11d-dra-network-pool.yaml");
    let message =
        |sim: &Simulation, job: &str| sim.job(job).unwrap().message.clone().unwrap_or_default();
    sim.run_until(10 * SECOND, &mut |_| {});
    assert_eq!(statuses(&sim, "a1"), vec![TaskStatus::Running]);
    assert_eq!(statuses(&sim, "a2"), vec![TaskStatus::Running]);
    let device = |sim: &Simulation, job: &str| {
        let p = &sim.job_pods(job)[0];
        let a = p.claims()[0].allocation.clone().expect("allocated");
        assert_eq!(Some(&a.node), p.node.as_ref());
        a.devices[0].key()
    };
    assert_ne!(device(&sim, "a1"), device(&sim, "a2"));
    // a1 and a2 take 6 of 8 cpus each: they run on two different nodes of rack a.
    assert_ne!(sim.job_pods("a1")[0].node, sim.job_pods("a2")[0].node);
    assert_eq!(statuses(&sim, "a3"), vec![TaskStatus::Pending]);
    assert!(
        message(&sim, "a3").contains("cannot allocate all claims"),
        "{}",
        message(&sim, "a3")
    );
    sim.run_until(MINUTE + 5 * SECOND, &mut |_| {});
    assert_eq!(statuses(&sim, "a3"), vec![TaskStatus::Running]);
    let report = sim.run(&mut |_| {});
    assert!(report.invariants_hold(), "{:?}", report.invariants);
    assert_eq!(statuses(&sim, "b1"), vec![TaskStatus::Pending]);
}

/// Subgroups in domains of their own: two replicas of two 3-cpu workers on two racks of two
/// 4-cpu nodes (one worker a node), each replica's policy hard within tier 1 (a rack). Each
/// replica binds inside one rack, the two in different racks; held to one rack for the
/// whole gang, it could not bind at all.
#[test]
fn subgroups_with_their_own_network_topology_bind_each_inside_one_rack() {
    const YAML: &str = r#"
name: subgroups in racks of their own
schedulePeriod: 1s
maxTime: 30m
nodeGroups:
- name: ra
  count: 2
  allocatable: {cpu: "4", memory: 16Gi}
  labels: {example.com/rack: r0}
- name: rb
  count: 2
  allocatable: {cpu: "4", memory: 16Gi}
  labels: {example.com/rack: r1}
hypernodes:
- name: rack-a
  tier: 1
  members: [{type: Node, selector: {labelMatch: {matchLabels: {example.com/rack: r0}}}}]
- name: rack-b
  tier: 1
  members: [{type: Node, selector: {labelMatch: {matchLabels: {example.com/rack: r1}}}}]
jobs:
- name: lws
  minMember: 4
  subGroupPolicy:
  - name: replica
    subGroupSize: 2
    minSubGroups: 2
    labelSelector: {matchLabels: {app: lws}}
    matchLabelKeys: [group-index]
    networkTopology: {mode: hard, highestTierAllowed: 1}
  tasks:
  - role: worker
    replicas: 4
    groupSize: 2
    labels: {app: lws}
    requests: {cpu: "3"}
    runtime: 10m
"#;
    let scenario = Scenario::parse(YAML, "subgroup-racks.yaml").expect("scenario parses");
    let mut sim = Simulation::new(scenario, "subgroup-racks.yaml").expect("scenario builds");
    sim.run_until(MINUTE, &mut |_| {});
    // Pods are named {job}-{role}-{replica}; groupSize 2. Nodes {group}-{i}: the group is
    // the rack.
    let mut racks: [BTreeSet<String>; 2] = Default::default();
    for p in sim.job_pods("lws") {
        assert_eq!(p.status, TaskStatus::Running, "{}", p.uid);
        let replica: usize = p.uid.rsplit('-').next().unwrap().parse().unwrap();
        let node = p.node.as_deref().unwrap();
        racks[replica / 2].insert(node.split('-').next().unwrap().to_string());
    }
    assert!(
        racks.iter().all(|r| r.len() == 1),
        "each replica in one rack: {racks:?}"
    );
    assert_ne!(racks[0], racks[1], "{racks:?}");
    let report = sim.run(&mut |_| {});
    assert!(report.invariants_hold(), "{:?}", report.invariants);
}
