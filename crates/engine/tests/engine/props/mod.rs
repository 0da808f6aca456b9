//! Property tests of the engine on random clusters and workloads.
//!
//! Random nodes (sizes, GPUs, zones, taints, cordoned or not-ready nodes, pods of other
//! schedulers) and random gangs (roles with minTaskMember, minMember ≤ tasks, priorities,
//! queues with weights and capabilities, BestEffort pods, node selectors, tolerations) run
//! through several cycles; between cycles binds are applied as Running, some pods finish and
//! some are evicted and recreated. After every cycle, checked against a model kept by the
//! test itself (never against the engine's own accounting):
//!
//! (a) no partial gang: for every gang with binds, its pods already Bound/Running/Succeeded
//!     plus the new binds reach minMember, and minTaskMember for every role;
//! (b) no node over-committed: the requests of the pods on a node fit its allocatable in
//!     every dimension;
//! (c) every committed gang was JobReady: a fresh session over the cluster with the binds
//!     applied finds it ready, and the session reported it Scheduled;
//! plus: binds only go to pending pods, on ready schedulable nodes that pass the pod's
//! selector and taints, and a queue's capability is never exceeded.
//!
//! (d) Statement discard (and drop without commit) restores the session exactly: same
//!     fingerprint, and the cycle run afterwards decides exactly what a fresh session does.
//! (e) Evictions (worlds where preempt and reclaim have work): a preemptor's victims are in
//!     its queue and of strictly lower priority, a reclaimer's in other queues, no victim
//!     gang is left below minMember, no PodDisruptionBudget loses more pods than it allows
//!     (a pod under several never goes), and reclaim takes only from queues above their deserved
//!     share and never leaves one below it. Shares are the queue plugin's definition
//!     (water-filling, or explicit deserved); what a queue holds is what it held as the
//!     cycle began less what was evicted since, summed by the test from the session just
//!     before and just after `reclaim` (pods placed in the same cycle, not running yet, do
//!     not make a queue's running pods fair game).
//!
//! Layout: `world.rs` generates the random clusters and workloads, `model.rs` is the test's
//! own model of the cluster (and the churn between cycles), `checks.rs` the properties
//! checked after each cycle; this file runs worlds through cycles.

mod checks;
mod fair_share;
mod model;
mod world;

use std::cell::RefCell;
use std::sync::Arc;

use proptest::prelude::*;
use proptest::test_runner::{FileFailurePersistence, TestRunner};
use rust_batch_engine::framework::Statement;
use rust_batch_engine::model::{TaskRef, TaskStatus};
use rust_batch_engine::testkit;

use checks::*;
use model::*;
use world::*;

/// How often a world exercised the eviction properties.
#[derive(Default)]
struct Exercised {
    preempted: usize,
    reclaimed_queues: usize,
}

/// Runs a world's cycles, checking every property after each.
fn run_world(w: &World) -> Result<Exercised, TestCaseError> {
    let (mut cache, mut model) = build(w);
    let scheduler = testkit::scheduler(CONFS[w.conf]);
    let mut rng = Rng(w.seed | 1);
    if w.warm_up && model.capability.is_empty() {
        let greedy = World {
            conf: GREEDY,
            ..w.clone()
        };
        let result = testkit::scheduler(CONFS[GREEDY]).run_cycle(cache.snapshot(), 0);
        check_cycle(&greedy, &mut cache, &mut model, &result)?;
    }
    let mut exercised = Exercised::default();
    for round in 0..w.cycles {
        let (result, reclaimed_queues) =
            cycle_checking_reclaim(w, &scheduler, &cache, round as i64)?;
        exercised.reclaimed_queues += reclaimed_queues;
        exercised.preempted += result
            .evictions
            .iter()
            .filter(|e| e.reason.starts_with("preempted"))
            .count();
        check_evictions(&mut cache, &mut model, &result)?;
        check_cycle(w, &mut cache, &mut model, &result)?;
        churn(&mut cache, &mut model, &mut rng, round);
    }
    Ok(exercised)
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 64,
        // Seeds of past failures live next to this file, in mod.proptest-regressions. The
        // default (SourceParallel) would look for them under tests/proptest-regressions/,
        // since the test's folder has a main.rs.
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
            "proptest-regressions",
        ))),
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn cycles_never_bind_partial_gangs_or_overcommit_nodes(w in world()) {
        run_world(&w)?;
    }


    #[test]
    fn statement_discard_restores_the_session_exactly(
        w in world(),
        ops in prop::collection::vec((0u8..3, any::<usize>(), any::<usize>()), 1..=16),
        drop_instead in any::<bool>(),
    ) {
        let (mut cache, mut model) = build(&w);
        // Get some pods running (and some releasing) so evictions have targets.
        let scheduler = testkit::scheduler(CONFS[w.conf]);
        let first = scheduler.run_cycle(cache.snapshot(), 0);
        testkit::apply_result(&mut cache, &first);
        for b in &first.binds {
            model.pods.get_mut(&*b.task).unwrap().status = TaskStatus::Running;
        }
        churn(&mut cache, &mut model, &mut Rng(w.seed | 1), 0);

        let conf = Arc::new(testkit::conf(CONFS[w.conf]));
        let mut ssn = scheduler.open_session(cache.snapshot(), 1);
        let before = ssn.fingerprint();
        {
            let mut stmt = Statement::new(&mut ssn);
            for (kind, a, b) in &ops {
                let state = stmt.state();
                let tasks: Vec<TaskRef> = state
                    .jobs()
                    .flat_map(|(id, j)| {
                        (0..j.tasks().len() as u32).map(move |index| TaskRef { job: id, index })
                    })
                    .collect();
                let pending: Vec<TaskRef> = tasks
                    .iter()
                    .copied()
                    .filter(|t| state.task(*t).status == TaskStatus::Pending)
                    .collect();
                let placed: Vec<TaskRef> = tasks
                    .iter()
                    .copied()
                    .filter(|t| {
                        let t = state.task(*t);
                        t.node.is_some()
                            && matches!(
                                t.status,
                                TaskStatus::Allocated
                                    | TaskStatus::Binding
                                    | TaskStatus::Bound
                                    | TaskStatus::Running
                            )
                    })
                    .collect();
                let nodes = stmt.node_ids();
                match kind {
                    0 | 1 if !pending.is_empty() => {
                        let task = pending[a % pending.len()];
                        let node = nodes[b % nodes.len()];
                        if *kind == 0 {
                            stmt.allocate(task, node);
                        } else {
                            stmt.pipeline(task, node);
                        }
                    }
                    2 if !placed.is_empty() => {
                        stmt.evict(placed[a % placed.len()], "test");
                    }
                    _ => {}
                }
            }
            if !drop_instead {
                stmt.discard();
            }
        }
        let after = ssn.fingerprint();
        if after != before {
            let node = before.0.iter().zip(&after.0).find(|(x, y)| x != y);
            let job = before.1.iter().zip(&after.1).find(|(x, y)| x != y);
            prop_assert!(false, "session changed by a discarded statement: node {:?}, job {:?}", node, job);
        }

        // The plugins' own state was restored too: the cycle now decides exactly what a
        // fresh session decides.
        let actions: Vec<_> = conf
            .actions
            .iter()
            .map(|a| rust_batch_engine::REGISTRY.action(a).unwrap()(&conf.action_arguments(a)).unwrap())
            .collect();
        for a in &actions {
            a.execute(&mut ssn);
        }
        let after_discard = ssn.close();
        let fresh = scheduler.run_cycle(cache.snapshot(), 1);
        prop_assert_eq!(after_discard, fresh);
    }
}

/// Runs the eviction properties over `cases` worlds of `worlds`; they must not hold only
/// because nothing was evicted: preempt and reclaim both have to have happened.
fn check_evicting_worlds(worlds: impl Strategy<Value = World>, cases: u32) {
    let mut runner = TestRunner::new(ProptestConfig {
        cases,
        source_file: Some(file!()),
        ..config()
    });
    let total = RefCell::new(Exercised::default());
    runner
        .run(&worlds, |w| {
            let e = run_world(&w)?;
            let mut total = total.borrow_mut();
            total.preempted += e.preempted;
            total.reclaimed_queues += e.reclaimed_queues;
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
    let total = total.into_inner();
    assert!(
        total.preempted > 0 && total.reclaimed_queues > 0,
        "the worlds exercised too little: {} pods preempted, {} queues reclaimed from",
        total.preempted,
        total.reclaimed_queues
    );
    eprintln!(
        "evictions checked: {} pods preempted, {} queues reclaimed from",
        total.preempted, total.reclaimed_queues
    );
}

/// (e) over 512 worlds (evictions are rarer than binds, and rarer still since allocate
/// searches for a placement of a whole gang before leaving it to starve: with 256 worlds a
/// run without a single preemption or reclaim came up).
#[test]
fn evictions_respect_priorities_shares_and_gangs() {
    check_evicting_worlds(evicting_world(), 512);
}

/// (e) in crowded worlds.
#[test]
fn evictions_respect_priorities_shares_and_gangs_in_crowded_clusters() {
    check_evicting_worlds(crowded_world(), 256);
}
