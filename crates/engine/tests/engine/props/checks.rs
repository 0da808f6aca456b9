//! The properties checked after every cycle, against the model.

use std::collections::BTreeMap;
use std::sync::Arc;

use proptest::prelude::*;
use rust_batch_engine::cache::Cache;
use rust_batch_engine::framework::{ConditionKind, Scheduler, Session, SessionResult};
use rust_batch_engine::model::{Resource, TaskStatus};
use rust_batch_engine::testkit;

use super::model::*;
use super::world::*;

/// Checks one cycle's result against the model, then applies it to model and cache.
pub(crate) fn check_cycle(
    w: &World,
    cache: &mut Cache,
    model: &mut Model,
    result: &SessionResult,
) -> Result<(), TestCaseError> {
    let conf = CONFS[w.conf];
    let mut new_binds: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for b in &result.binds {
        let pod = model
            .pods
            .get(&*b.task)
            .ok_or_else(|| TestCaseError::fail(format!("bind of unknown pod {}", b.task)))?;
        prop_assert_eq!(
            pod.status,
            TaskStatus::Pending,
            "bind of a pod not pending: {:?}",
            b
        );
        prop_assert_eq!(pod.job.as_deref(), Some(&*b.job));
        let node = model
            .nodes
            .get(&*b.node)
            .ok_or_else(|| TestCaseError::fail(format!("bind to unknown node {}", b.node)))?;
        prop_assert!(
            node.ready && !node.unschedulable,
            "bind to a node that takes no pods: {:?}",
            b
        );
        if let Some(z) = pod.zone {
            prop_assert_eq!(z, node.zone, "selector violated: {:?}", b);
        }
        prop_assert!(!node.tainted || pod.tolerate, "untolerated taint: {:?}", b);
        new_binds
            .entry(b.job.to_string())
            .or_default()
            .push((b.task.to_string(), pod.role.clone()));
    }

    // (a) no partial gang.
    for (job, binds) in &new_binds {
        let jm = &model.jobs[job];
        let mut by_role: BTreeMap<String, u32> = BTreeMap::new();
        let mut total = 0;
        for p in model.pods.values() {
            if p.job.as_deref() == Some(job.as_str())
                && matches!(
                    p.status,
                    TaskStatus::Bound | TaskStatus::Running | TaskStatus::Succeeded
                )
            {
                total += 1;
                *by_role.entry(p.role.clone()).or_default() += 1;
            }
        }
        for (_, role) in binds {
            total += 1;
            *by_role.entry(role.clone()).or_default() += 1;
        }
        prop_assert!(
            total >= jm.min_member,
            "partial gang {}: {} placed, minMember {}; binds {:?}",
            job,
            total,
            jm.min_member,
            binds
        );
        // (a') only whole subgroups: a subgroup that gets a pod has all its size placed.
        if let Some((size, members)) = &jm.subgroups {
            let mut placed: BTreeMap<usize, u32> = BTreeMap::new();
            // Churn between cycles deletes pods: a gone member counts for nothing.
            for (uid, group) in members {
                let Some(p) = model.pods.get(uid) else {
                    continue;
                };
                let now = binds.iter().any(|(t, _)| t == uid);
                if now || matches!(p.status, TaskStatus::Bound | TaskStatus::Running) {
                    *placed.entry(*group).or_default() += 1;
                }
            }
            for (task, _) in binds {
                if let Some(group) = members.get(task) {
                    prop_assert!(
                        placed[group] >= *size,
                        "partial subgroup {} of {}: {} placed, size {}",
                        group,
                        job,
                        placed[group],
                        size
                    );
                }
            }
        }
        for (role, min) in &jm.min_role {
            let have = by_role.get(role).copied().unwrap_or(0);
            prop_assert!(
                have >= *min,
                "partial role {} of {}: {} placed, minTaskMember {}",
                role,
                job,
                have,
                min
            );
        }
    }

    // Apply binds to the model and the cache.
    for b in &result.binds {
        let pod = model.pods.get_mut(&*b.task).unwrap();
        pod.status = TaskStatus::Running;
        pod.node = Some(b.node.to_string());
    }
    testkit::apply_result(cache, result);

    // (b) no node over-committed, summed from the model.
    for (name, n) in &model.nodes {
        let mut sum = Resource::new();
        for p in model.pods.values() {
            if holds_node(p.status) && p.node.as_deref() == Some(name.as_str()) {
                sum.add(&p.request);
            }
        }
        let allocatable = node_allocatable(n);
        prop_assert!(
            sum.fits(&allocatable),
            "node {} over-committed: pods request {} ({} pods), allocatable {} ({} pods)",
            name,
            sum,
            sum.pods,
            allocatable,
            allocatable.pods
        );
    }

    // No queue beyond its capability, its children's pods included (every configuration
    // with proportion or capacity).
    if conf.is_none_or(|c| c.contains("proportion") || c.contains("capacity")) {
        for (queue, cap) in &model.capability {
            let within = |q: &String| q == queue || model.parent.get(q) == Some(queue);
            let used: i64 = model
                .pods
                .values()
                .filter(|p| {
                    matches!(p.status, TaskStatus::Bound | TaskStatus::Running)
                        && p.job.as_ref().is_some_and(|j| within(&model.jobs[j].queue))
                })
                .map(|p| p.request.milli_cpu)
                .sum();
            prop_assert!(
                used <= *cap,
                "queue {} uses {}m cpu, capability {}m",
                queue,
                used,
                cap
            );
        }
    }

    // (c) every committed gang was ready: the plugins say so on the cluster with the binds,
    // and the session reported it Scheduled.
    let ssn = testkit::open_session(cache, conf);
    for job in new_binds.keys() {
        let id = ssn.state().job_by_uid(job).unwrap();
        prop_assert!(ssn.job_ready(id), "gang {} committed but not ready", job);
        let scheduled = result.job_updates.iter().any(|u| {
            &*u.job == job.as_str()
                && u.condition
                    .as_ref()
                    .is_some_and(|c| c.kind == ConditionKind::Scheduled)
        });
        prop_assert!(
            scheduled,
            "gang {} bound without a Scheduled condition",
            job
        );
    }
    Ok(())
}

/// Evictions only hit allowed victims: a preemptor's victims are in its own queue and of
/// strictly lower priority; a reclaimer's are in other queues; no victim gang is left with
/// fewer than minMember pods placed (or finished) unless none are left; no disruption
/// budget loses more pods than it allows, and no pod under several budgets goes. Then the
/// victims terminate and are recreated (Pending), in the cache and in the model.
pub(crate) fn check_evictions(
    cache: &mut Cache,
    model: &mut Model,
    result: &SessionResult,
) -> Result<(), TestCaseError> {
    let mut victims_by_job: BTreeMap<String, usize> = BTreeMap::new();
    let mut by_budget: BTreeMap<&str, u32> = BTreeMap::new();
    for e in &result.evictions {
        let pod = model
            .pods
            .get(&*e.task)
            .ok_or_else(|| TestCaseError::fail(format!("eviction of unknown pod {}", e.task)))?;
        prop_assert!(
            matches!(pod.status, TaskStatus::Running | TaskStatus::Bound),
            "evicted a pod that was not placed: {:?}",
            e
        );
        let preemptor = e
            .preemptor
            .as_deref()
            .ok_or_else(|| TestCaseError::fail(format!("eviction without a preemptor: {e:?}")))?;
        let (victim, by) = (&model.jobs[&*e.job], &model.jobs[preemptor]);
        if e.reason.starts_with("preempted") {
            prop_assert_eq!(&victim.queue, &by.queue, "preempt crossed queues: {:?}", e);
            prop_assert!(
                victim.priority < by.priority,
                "victim priority {} not below preemptor {}: {:?}",
                victim.priority,
                by.priority,
                e
            );
            // Job uids are "namespace/name".
            let reason = format!(
                "preempted by {preemptor} (priority {} > {})",
                by.priority, victim.priority
            );
            prop_assert_eq!(&e.reason, &reason);
        } else {
            prop_assert_ne!(&victim.queue, &by.queue, "reclaim within a queue: {:?}", e);
            let reason = format!(
                "reclaimed for {preemptor} of queue {} (queue {} is above its deserved share)",
                by.queue, victim.queue
            );
            prop_assert_eq!(&e.reason, &reason);
        }
        *victims_by_job.entry(e.job.to_string()).or_insert(0) += 1;
        prop_assert!(
            pod.budgets.len() <= 1,
            "evicted {} under several disruption budgets {:?}",
            e.task,
            pod.budgets
        );
        for b in &pod.budgets {
            *by_budget.entry(b).or_insert(0) += 1;
        }
    }
    for (budget, evicted) in by_budget {
        prop_assert!(
            evicted <= model.budgets[budget],
            "{} pods evicted under budget {} allowing {}",
            evicted,
            budget,
            model.budgets[budget]
        );
    }
    for (job, evicted) in victims_by_job {
        let placed = model
            .pods
            .values()
            .filter(|p| {
                p.job.as_deref() == Some(job.as_str())
                    && matches!(p.status, TaskStatus::Running | TaskStatus::Bound)
            })
            .count();
        // Pods of the gang bound by this same cycle count too (and so do finished ones, as
        // for JobReady).
        let new_binds = result.binds.iter().filter(|b| *b.job == *job).count();
        let done = model
            .pods
            .values()
            .filter(|p| p.job.as_deref() == Some(job.as_str()) && p.status == TaskStatus::Succeeded)
            .count();
        // Evicted whole means no live member left (finished ones stay finished); otherwise
        // the live and finished members still reach minMember, as JobReady counts them.
        let live = placed + new_binds - evicted;
        let left = if live == 0 { 0 } else { live + done };
        let min = model.jobs[&job].min_member as usize;
        let pods: Vec<_> = model
            .pods
            .iter()
            .filter(|(_, p)| p.job.as_deref() == Some(job.as_str()))
            .map(|(n, p)| (n.clone(), p.status))
            .collect();
        let evictions: Vec<_> = result.evictions.iter().filter(|e| *e.job == *job).collect();
        prop_assert!(
            left == 0 || left >= min,
            "victim gang {} left with {} of minMember {} (pods {:?}, evictions {:?})",
            job,
            left,
            min,
            pods,
            evictions
        );
    }
    for e in &result.evictions {
        let pod = model.pods.get_mut(&*e.task).unwrap();
        pod.status = TaskStatus::Pending;
        pod.node = None;
        cache.set_pod_status(&e.task, TaskStatus::Pending, None);
    }
    Ok(())
}

/// Our pods that hold their nodes, by uid.
pub(crate) fn placed(ssn: &Session) -> std::collections::HashSet<String> {
    ssn.state()
        .jobs()
        .flat_map(|(_, job)| job.tasks())
        .filter(|t| t.status.is_allocated())
        .map(|t| t.uid.to_string())
        .collect()
}

/// What each queue holds of what it held when the session opened (`at_open`): pods placed
/// or pipelined in the same cycle do not make a queue's running pods fair game.
pub(crate) fn held_by_queue(
    ssn: &Session,
    at_open: &std::collections::HashSet<String>,
) -> BTreeMap<String, Resource> {
    let mut held: BTreeMap<String, Resource> = BTreeMap::new();
    for (_, job) in ssn.state().jobs() {
        for t in job.tasks() {
            if t.status.is_allocated() && at_open.contains(&*t.uid) {
                held.entry(job.queue.to_string())
                    .or_default()
                    .add(&t.resreq.without_pods());
            }
        }
    }
    held
}

pub(crate) fn releasing(ssn: &Session) -> BTreeMap<String, String> {
    ssn.state()
        .jobs()
        .flat_map(|(_, job)| {
            job.tasks()
                .iter()
                .filter(|t| t.status == TaskStatus::Releasing)
                .map(move |t| (t.uid.to_string(), job.queue.to_string()))
        })
        .collect()
}

/// Each queue's deserved share by the configured queue plugin, and the dimensions that
/// share speaks for (capacity's names only those set; proportion's covers everything).
pub(crate) fn deserved_by_queue(
    ssn: &Session,
    conf: Option<&str>,
) -> BTreeMap<String, (Resource, bool)> {
    let (state, tree) = (ssn.state(), ssn.queue_tree());
    if conf.is_some_and(|c| c.contains("capacity")) {
        rust_batch_engine::plugins::capacity::session_attrs(state, tree)
            .into_iter()
            .map(|(q, a)| (q.to_string(), (a.deserved, true)))
            .collect()
    } else {
        rust_batch_engine::plugins::proportion::queue_shares(state, tree)
            .into_iter()
            .map(|(q, s)| (q.to_string(), (s.deserved, false)))
            .collect()
    }
}

/// One cycle, checking what `reclaim` (if configured) took: from each queue it evicted
/// from, that queue was above its deserved share in some dimension before, and in every
/// dimension where it was above, it still holds at least its share after. Returns the
/// cycle's result and how many queues were reclaimed from.
pub(crate) fn cycle_checking_reclaim(
    w: &World,
    scheduler: &Scheduler,
    cache: &Cache,
    now: i64,
) -> Result<(SessionResult, usize), TestCaseError> {
    let conf = CONFS[w.conf];
    let mut at_open: Option<std::collections::HashSet<String>> = None;
    // What each queue held and which pods were already going, as reclaim starts.
    let mut before: Option<(BTreeMap<String, Resource>, BTreeMap<String, String>)> = None;
    let mut failures: Vec<String> = Vec::new();
    let (mut victims_seen, mut queues_checked) = (0, 0);
    let result =
        scheduler.run_cycle_observed(cache.snapshot(), now, &mut |action, starting, ssn| {
            let at_open = at_open.get_or_insert_with(|| placed(ssn));
            if action != "reclaim" {
                return;
            }
            if starting {
                before = Some((held_by_queue(ssn, at_open), releasing(ssn)));
                return;
            }
            let (held_before, releasing_before) = before.take().unwrap();
            let held_after = held_by_queue(ssn, at_open);
            let deserved = deserved_by_queue(ssn, conf);
            let mut victim_queues: BTreeMap<String, usize> = BTreeMap::new();
            for (uid, queue) in releasing(ssn) {
                if !releasing_before.contains_key(&uid) {
                    *victim_queues.entry(queue).or_default() += 1;
                }
            }
            victims_seen = victim_queues.values().sum::<usize>();
            queues_checked = victim_queues.len();
            let zero = Resource::new();
            for (queue, victims) in victim_queues {
                let had = held_before.get(&queue).unwrap_or(&zero);
                let has = held_after.get(&queue).unwrap_or(&zero);
                match deserved.get(&queue) {
                    Some((share, named_only)) => failures.extend(share_violations(
                        &queue,
                        victims,
                        had,
                        has,
                        share,
                        *named_only,
                    )),
                    None => failures.push(format!(
                        "reclaimed {victims} pods from queue {queue} with no share"
                    )),
                }
            }
        });
    prop_assert!(failures.is_empty(), "{}", failures.join("; "));
    let reclaimed = result
        .evictions
        .iter()
        .filter(|e| e.reason.starts_with("reclaimed"))
        .count();
    prop_assert_eq!(
        reclaimed,
        victims_seen,
        "the pods reclaim put in Releasing are the cycle's reclaim evictions"
    );
    Ok((result, queues_checked))
}

/// What is wrong with reclaim taking `victims` pods from `queue`, which held `had` before
/// and holds `has` after, of a deserved `share` (speaking for the dimensions it names only,
/// if `named_only`): it must have been above its share somewhere, and stay at or above it
/// wherever it was above.
pub(crate) fn share_violations(
    queue: &str,
    victims: usize,
    had: &Resource,
    has: &Resource,
    share: &Resource,
    named_only: bool,
) -> Vec<String> {
    let dims: Vec<Arc<str>> = if named_only {
        share.dimensions().map(|(n, _)| Arc::from(n)).collect()
    } else {
        had.names(share)
    };
    let above: Vec<&Arc<str>> = dims.iter().filter(|d| had.get(d) > share.get(d)).collect();
    if above.is_empty() {
        return vec![format!(
            "reclaimed {victims} pods from queue {queue}, which held {had} of a deserved {share}: not above its share"
        )];
    }
    above
        .into_iter()
        .filter(|d| has.get(d) < share.get(d))
        .map(|d| format!(
            "reclaim took queue {queue} below its deserved {d}: held {had}, holds {has}, deserves {share} ({victims} pods taken)"
        ))
        .collect()
}
