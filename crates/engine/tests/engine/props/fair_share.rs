//! Fair share over time leaves decisions alone unless it is configured: on random worlds,
//! queues carrying a recorded usage (as a restarted scheduler reads it back) decide nothing
//! differently from the same world without it when no plugin has `usageHalfLife`; and with
//! the argument but no usage yet, the first cycle decides exactly what it does without.

use std::collections::BTreeMap;

use proptest::prelude::*;
use rust_batch_engine::cache::Cache;
use rust_batch_engine::framework::SessionResult;
use rust_batch_engine::model::{QueueInfo, QueueUsage};
use rust_batch_engine::testkit;

use super::model::build;
use super::world::{world, CONFS};

const HOUR: i64 = 3_600_000;

/// Every queue of `cache` with a recorded usage of `amounts[i % len]` cpus and GPUs.
fn with_recorded_usage(cache: &mut Cache, amounts: &[(f64, f64)]) {
    let queues: Vec<QueueInfo> = cache.state().queues().cloned().collect();
    for (i, mut q) in queues.into_iter().enumerate() {
        let (cpu, gpu) = amounts[i % amounts.len()];
        q.recorded_usage = Some(QueueUsage {
            at: 0,
            amounts: BTreeMap::from([
                ("cpu".to_string(), cpu),
                ("nvidia.com/gpu".to_string(), gpu),
            ]),
        });
        cache.apply_queue(q);
    }
}

fn same_decisions(a: &SessionResult, b: &SessionResult) -> Result<(), TestCaseError> {
    prop_assert_eq!(&a.binds, &b.binds);
    prop_assert_eq!(&a.evictions, &b.evictions);
    prop_assert_eq!(&a.job_updates, &b.job_updates);
    Ok(())
}

/// The configuration with `usageHalfLife` on its queue plugin, if it has one.
fn with_half_life(conf: &str) -> Option<String> {
    ["proportion", "capacity"].iter().find_map(|p| {
        let line = format!("  - name: {p}\n");
        conf.contains(&line).then(|| {
            conf.replacen(
                &line,
                &format!("{line}    arguments: {{usageHalfLife: 1h}}\n"),
                1,
            )
        })
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn without_the_option_a_recorded_usage_changes_no_decision(
        w in world(),
        amounts in prop::collection::vec((0.0f64..64.0, 0.0f64..8.0), 1..4),
    ) {
        let (mut plain, _) = build(&w);
        let (mut used, _) = build(&w);
        with_recorded_usage(&mut used, &amounts);
        let scheduler = testkit::scheduler(CONFS[w.conf]);
        let other = testkit::scheduler(CONFS[w.conf]);
        prop_assert!(scheduler.queue_usage().is_none());
        for round in 0..w.cycles as i64 {
            let a = scheduler.run_cycle(plain.snapshot(), round * HOUR);
            let b = other.run_cycle(used.snapshot(), round * HOUR);
            same_decisions(&a, &b)?;
            prop_assert_eq!(a.wake_at, b.wake_at);
            testkit::apply_result(&mut plain, &a);
            testkit::apply_result(&mut used, &b);
        }
    }

    #[test]
    fn with_the_option_and_no_usage_yet_the_first_cycle_is_unchanged(w in world()) {
        let Some(conf) = CONFS[w.conf] else { return Ok(()) };
        let Some(with) = with_half_life(conf) else { return Ok(()) };
        let (cache, _) = build(&w);
        let on = testkit::scheduler(Some(with.as_str())).run_cycle(cache.snapshot(), 0);
        let off = testkit::scheduler(Some(conf)).run_cycle(cache.snapshot(), 0);
        same_decisions(&on, &off)?;
    }
}
