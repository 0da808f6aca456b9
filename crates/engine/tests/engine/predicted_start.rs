//! Predicted start times in the simulator (issue 40): the prediction made at submission and
//! at the head of a queue against the actual start, over S12 (a mixed workload, exact and
//! ±30% noisy runtimes) and every bundled scenario; and predicting changes no decision.

use std::path::Path;

use rust_batch_engine::sim::{Report, Scenario, Simulation};

fn scenario(file: &str) -> Scenario {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/scenarios")
        .join(file);
    Scenario::load(&path).expect("scenario parses")
}

fn run(sc: Scenario) -> Report {
    Simulation::new(sc, "test").unwrap().run(&mut |_| {})
}

#[test]
fn with_exact_runtimes_the_head_of_the_queue_is_predicted_within_ten_percent_of_its_wait() {
    let mut sc = scenario("s12-predicted-start.yaml");
    for j in &mut sc.jobs {
        j.runtime_jitter = 0.0;
    }
    let report = run(sc);
    assert!(report.invariants_hold(), "{:?}", report.invariants);
    let p = report.predictions.expect("predictStart is on");
    eprintln!("S12 exact runtimes: {p:?}");
    assert_eq!(p.unknown, 0, "every pod has an estimate");
    let head = &p.at_head;
    assert!(head.gangs >= 10, "{head:?}");
    assert!(head.median_rel_error.unwrap() <= 0.10, "{head:?}");
    // The head's prediction is its reservation, which exact estimates keep.
    assert_eq!(head.median_abs_error_ms, Some(0), "{head:?}");
}

#[test]
fn with_noisy_runtimes_the_error_distribution_is_reported_and_deterministic() {
    let a = run(scenario("s12-predicted-start.yaml"));
    let b = run(scenario("s12-predicted-start.yaml"));
    assert_eq!(a, b, "same seed, same report");
    assert!(a.invariants_hold(), "{:?}", a.invariants);
    let p = a.predictions.clone().unwrap();
    eprintln!("S12 ±30% runtimes: {p:?}");
    assert!(p.at_submission.gangs >= 40, "{p:?}");
    let (median, p90) = (
        p.at_submission.median_abs_error_ms.unwrap(),
        p.at_submission.p90_abs_error_ms.unwrap(),
    );
    assert!(median <= p90, "{p:?}");
    let table = a.to_table(0);
    assert!(
        table.contains("predicted start (") && table.contains("at queue head:"),
        "{table}"
    );
    let json: serde_json::Value = serde_json::from_str(&a.to_json()).unwrap();
    assert!(json["predictions"]["at_submission"]["median_abs_error_ms"].is_number());
    assert!(json["jobs"][0]["prediction"].is_object());
}

#[test]
fn predicting_changes_no_decision_and_no_report_without_the_option() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/scenarios");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|f| f.ends_with(".yaml"))
        .collect();
    files.sort();
    for file in files {
        let mut off = scenario(&file);
        off.predict_start = false;
        let mut on = off.clone();
        on.predict_start = true;
        let (off, on) = (run(off), run(on));
        assert!(off.predictions.is_none(), "{file}");
        assert!(!off.to_json().contains("\"prediction"), "{file}");
        assert!(on.predictions.is_some(), "{file}");
        let decisions = |r: &Report| {
            r.jobs
                .iter()
                .map(|j| {
                    (
                        j.name.clone(),
                        j.started,
                        j.finished,
                        j.nodes.clone(),
                        j.message.clone(),
                    )
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(decisions(&off), decisions(&on), "{file}");
        assert_eq!(off.summary, on.summary, "{file}");
    }
}
