//! Fair share over time (issue 40): `usageHalfLife` on proportion weighs each queue's
//! deserved share by its decayed usage, on capacity the order queues borrow idle room in;
//! S14 in the simulator (a queue that ran alone for 10 h gets less than half once another
//! queue arrives, then the shares converge); and the configuration check.

use std::collections::BTreeMap;

use rust_batch_engine::cache::Cache;
use rust_batch_engine::model::{PodGroupPhase, QueueInfo, QueueUsage};
use rust_batch_engine::sim::{Scenario, Simulation};
use rust_batch_engine::testkit::*;

const HOUR: i64 = 3_600_000;

fn proportion_conf(half_life: Option<&str>) -> String {
    let args = half_life
        .map(|h| format!("    arguments: {{usageHalfLife: {h}}}\n"))
        .unwrap_or_default();
    format!(
        "actions: \"allocate\"\ntiers:\n- plugins:\n  - name: priority\n  - name: gang\n- plugins:\n  \
         - name: predicates\n  - name: proportion\n{args}"
    )
}

fn capacity_conf(half_life: Option<&str>) -> String {
    proportion_conf(half_life).replace("name: proportion", "name: capacity")
}

/// One node of `cpus` CPUs; queues a and b (weight 1; `deserved` cpus each under
/// capacity), queue a having used `a_used` CPUs on average (as recorded before a restart,
/// at time 0); each queue with `gangs` waiting one-CPU gangs.
fn two_queues(cpus: usize, a_used: Option<f64>, deserved: Option<&str>, gangs: usize) -> Cache {
    let mut cache = cache_with_default_queue();
    for name in ["a", "b"] {
        let mut q = QueueInfo::new(name, 1);
        if let Some(d) = deserved {
            q.deserved = Some(res(&[("cpu", d)]));
        }
        if name == "a" {
            q.recorded_usage = a_used.map(|cpu| QueueUsage {
                at: 0,
                amounts: BTreeMap::from([("cpu".to_string(), cpu)]),
            });
        }
        cache.apply_queue(q);
    }
    add_nodes(&mut cache, "n", 1, &[("cpu", cpus.to_string().as_str())]);
    for name in ["a", "b"] {
        for i in 0..gangs {
            Gang::new(&format!("{name}-{i:02}"), 1)
                .queue(name)
                .created(i as i64)
                .phase(PodGroupPhase::Inqueue)
                .tasks("", 1, &[("cpu", "1")])
                .apply(&mut cache);
        }
    }
    cache
}

fn binds_per_queue(result: &rust_batch_engine::framework::SessionResult) -> (usize, usize) {
    let binds = binds_by_job(result);
    let count = |q: &str| {
        binds
            .iter()
            .filter(|(j, _)| j.starts_with(&format!("default/{q}-")))
            .map(|(_, b)| b.len())
            .sum()
    };
    (count("a"), count("b"))
}

#[test]
fn proportion_gives_a_queue_that_used_everything_a_smaller_share() {
    // Queue a held all 10 CPUs (its usage 10, b's none): a's factor is 2^-(1/(1/2)) = 1/4,
    // b's 1, so a deserves 10 × 0.25/1.25 = 2 CPUs and b 8.
    let cache = two_queues(10, Some(10.0), None, 10);
    let conf = proportion_conf(Some("1h"));
    let with = scheduler(Some(conf.as_str())).run_cycle(cache.snapshot(), 0);
    assert_eq!(binds_per_queue(&with), (2, 8));
    // Without the argument the recorded usage counts for nothing: half each.
    let without = run_cycle(&cache, Some(proportion_conf(None).as_str()));
    assert_eq!(binds_per_queue(&without), (5, 5));
    // Two half-lives later a's usage is a quarter (2.5 of 10): u = 1, still all the usage
    // there is, so the shares are the same; the decay shows once b uses something.
    let later = scheduler(Some(conf.as_str())).run_cycle(cache.snapshot(), 2 * HOUR);
    assert_eq!(binds_per_queue(&later), (2, 8));
}

#[test]
fn proportion_with_no_usage_yet_is_the_plain_water_filling() {
    let cache = two_queues(10, None, None, 10);
    let with = scheduler(Some(proportion_conf(Some("1h")).as_str())).run_cycle(cache.snapshot(), 0);
    let without = run_cycle(&cache, Some(proportion_conf(None).as_str()));
    assert_eq!(binds_per_queue(&with), (5, 5));
    assert_eq!(with.binds, without.binds);
    assert_eq!(with.job_updates, without.job_updates);
}

#[test]
fn usage_is_kept_across_cycles_and_decays_with_the_half_life() {
    // b holds 8 CPUs; cycles of the same scheduler at 0 and one half-life later: b's usage
    // goes from none to half of 8.
    let mut cache = two_queues(10, None, None, 0);
    Gang::new("b-run", 1)
        .queue("b")
        .phase(PodGroupPhase::Running)
        .tasks("", 8, &[("cpu", "1")])
        .running_on(&["n-00000"; 8])
        .apply(&mut cache);
    let s = scheduler(Some(proportion_conf(Some("1h")).as_str()));
    s.run_cycle(cache.snapshot(), 0);
    let usage = s.queue_usage().unwrap();
    assert_eq!(usage.queue("b").unwrap().amounts.get("cpu"), None);
    s.run_cycle(cache.snapshot(), HOUR);
    let usage = s.queue_usage().unwrap();
    assert_eq!(usage.half_life(), HOUR);
    assert_eq!(usage.queue("b").unwrap().amounts["cpu"], 4.0);
    assert_eq!(usage.queue("b").unwrap().at, HOUR);
    assert!(!usage.queue("a").unwrap().any());
    // A scheduler without the argument keeps no usage.
    let off = scheduler(Some(proportion_conf(None).as_str()));
    off.run_cycle(cache.snapshot(), HOUR);
    assert!(off.queue_usage().is_none());
}

#[test]
fn usage_survives_a_restart_through_the_recorded_usage() {
    // A scheduler keeps b's 8 CPUs for an hour; a new one (a restart) handed the usage the
    // first recorded, as the live driver records it on each Queue and reads it back, goes
    // on from it: an hour later both have the same account.
    let mut cache = two_queues(10, None, None, 0);
    Gang::new("b-run", 1)
        .queue("b")
        .phase(PodGroupPhase::Running)
        .tasks("", 8, &[("cpu", "1")])
        .running_on(&["n-00000"; 8])
        .apply(&mut cache);
    let conf = proportion_conf(Some("1h"));
    let first = scheduler(Some(conf.as_str()));
    first.run_cycle(cache.snapshot(), 0);
    first.run_cycle(cache.snapshot(), HOUR);
    let recorded = first.queue_usage().unwrap();
    let queues: Vec<QueueInfo> = cache.state().queues().cloned().collect();
    for mut q in queues {
        q.recorded_usage = recorded.queue(&q.name).cloned();
        cache.apply_queue(q);
    }
    let restarted = scheduler(Some(conf.as_str()));
    restarted.run_cycle(cache.snapshot(), 2 * HOUR);
    first.run_cycle(cache.snapshot(), 2 * HOUR);
    assert_eq!(restarted.queue_usage(), first.queue_usage());
    assert_eq!(
        first.queue_usage().unwrap().queue("b").unwrap().amounts["cpu"],
        6.0
    );
}

#[test]
fn while_gangs_wait_the_engine_asks_to_look_again_as_usage_decays() {
    let cache = two_queues(1, Some(1.0), None, 3);
    let result =
        scheduler(Some(proportion_conf(Some("16m")).as_str())).run_cycle(cache.snapshot(), 0);
    assert_eq!(result.wake_at, Some(60_000), "a sixteenth of the half-life");
    let result = run_cycle(&cache, Some(proportion_conf(None).as_str()));
    assert_eq!(result.wake_at, None);
}

#[test]
fn capacity_lets_the_queue_that_used_less_borrow_first() {
    // Each queue deserves 4 of 9 CPUs; one CPU is idle beyond both. Without usage queue a
    // borrows it (equal shares, a's name first); with a having used a lot, b does.
    let cache = two_queues(9, None, Some("4"), 6);
    let without = run_cycle(&cache, Some(capacity_conf(None).as_str()));
    assert_eq!(binds_per_queue(&without), (5, 4));
    let cache = two_queues(9, Some(9.0), Some("4"), 6);
    let with = scheduler(Some(capacity_conf(Some("2h")).as_str())).run_cycle(cache.snapshot(), 0);
    assert_eq!(binds_per_queue(&with), (4, 5));
}

#[test]
fn a_half_life_of_zero_or_over_a_year_is_refused_naming_the_key() {
    for value in ["0s", "2years", "10s"] {
        let text = proportion_conf(Some(value));
        let err = checked_conf(&text, "scheduler.conf")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("tiers[1].plugins[1].arguments.usageHalfLife")
                && err.contains(&format!(
                    "a usage half-life must be at least 1m and at most 365d, got \"{value}\""
                )),
            "{err}"
        );
    }
    let err = checked_conf(&capacity_conf(Some("soon")), "scheduler.conf")
        .unwrap_err()
        .to_string();
    assert!(err.contains("usageHalfLife: expected a duration"), "{err}");
}

fn load(file: &str) -> Scenario {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/scenarios");
    Scenario::load(&dir.join(file)).unwrap()
}

/// The mean GPU share of `queue` over the samples in [from, to).
fn mean_share(
    report: &rust_batch_engine::sim::report::Report,
    queue: &str,
    from: i64,
    to: i64,
) -> f64 {
    let mut acc = 0.0;
    let mut span = 0;
    for (i, s) in report.samples.iter().enumerate() {
        let next = report.samples.get(i + 1).map(|n| n.t).unwrap_or(to);
        let (a, b) = (s.t.max(from), next.min(to));
        if b > a {
            let share = s
                .queue_share
                .get(queue)
                .and_then(|m| m.get("nvidia.com/gpu"));
            acc += share.copied().unwrap_or(0.0) * (b - a) as f64;
            span += b - a;
        }
    }
    acc / span.max(1) as f64
}

/// S14: queue a alone for 10 h, then a and b with equal backlogs and a 2 h half-life: b
/// gets more than half the cluster first, and the shares converge to equal as a's usage
/// decays; without the argument b gets about half from the start.
#[test]
fn s14_a_queue_that_ran_alone_gets_less_until_its_usage_decays() {
    let scenario = load("s14-fair-share-over-time.yaml");
    let mut plain = scenario.clone();
    plain.config = plain.config.map(|c| {
        c.lines()
            .filter(|l| !l.contains("usageHalfLife"))
            .map(|l| format!("{l}\n"))
            .collect()
    });
    assert_ne!(plain.config, scenario.config);
    let report = Simulation::new(scenario, "s14").unwrap().run(&mut |_| {});
    assert!(report.invariants_hold(), "{:?}", report.invariants);
    // The first hour b takes the room a's gangs free as they end; then it holds more than
    // half until the factors meet.
    let b_first = mean_share(&report, "b", 11 * HOUR, 13 * HOUR);
    let gap_late = (mean_share(&report, "a", 15 * HOUR, 20 * HOUR)
        - mean_share(&report, "b", 15 * HOUR, 20 * HOUR))
    .abs();
    assert!(
        mean_share(&report, "a", HOUR, 10 * HOUR) > 0.95,
        "a alone holds the cluster"
    );
    assert!(b_first > 0.55, "b first gets more than half: {b_first}");
    assert!(gap_late <= 0.125, "then the shares converge: {gap_late}");
    let plain = Simulation::new(plain, "s14-plain")
        .unwrap()
        .run(&mut |_| {});
    let b_plain = mean_share(&plain, "b", 11 * HOUR, 13 * HOUR);
    assert!(b_plain < b_first, "{b_plain} < {b_first}");
    assert!(
        (b_plain - 0.5).abs() <= 0.125,
        "without it b gets about half: {b_plain}"
    );
    // The table the docs show (docs/src/queues.md#fair-share-over-time).
    println!("{}", report.shares_over_time(20));
}

/// A scenario (`simulate --from-cluster` writes one) whose queue `a` used 8 CPUs on average
/// before t=0 (`pastUsage`), one 8-CPU node and eight one-CPU jobs waiting in each queue.
fn past_usage_scenario(past: &str, half_life: &str) -> String {
    let mut s = format!(
        "name: past\nconfig: |\n  {}\nnodeGroups:\n- {{name: n, count: 1, allocatable: {{cpu: 8}}}}\n\
         queues:\n- {{name: a{past}}}\n- {{name: b}}\njobs:\n",
        proportion_conf(Some(half_life)).replace('\n', "\n  ")
    );
    for q in ["a", "b"] {
        for i in 0..8 {
            s.push_str(&format!(
                "- {{name: {q}-{i}, queue: {q}, tasks: [{{role: w, requests: {{cpu: 1}}, runtime: 1h}}]}}\n"
            ));
        }
    }
    s
}

#[test]
fn a_scenarios_past_usage_starts_fair_share_where_the_cluster_is() {
    let started = |past: &str| {
        let scenario = Scenario::parse(&past_usage_scenario(past, "2h"), "past.yaml").unwrap();
        assert_eq!(
            Scenario::parse(&scenario.to_yaml().unwrap(), "again.yaml").unwrap(),
            scenario,
            "pastUsage written out reads back equal"
        );
        let report = Simulation::new(scenario, "past.yaml")
            .unwrap()
            .run(&mut |_| {});
        let at_zero = |q: &str| {
            let prefix = format!("default/{q}-");
            report
                .jobs
                .iter()
                .filter(|j| j.name.starts_with(&prefix) && j.started == Some(0))
                .count()
        };
        (at_zero("a"), at_zero("b"))
    };
    // No past: the node is split by the weights.
    assert_eq!(started(""), (4, 4));
    // a held the whole node before t=0: b gets more than half at once.
    let (a, b) = started(", pastUsage: {cpu: 8}");
    assert!(b > a && a + b == 8, "a {a}, b {b}");
}
