//! gang: a job is valid only when enough of its pods exist, ready only when at least
//! minMember (and minTaskMember per role) of them are placed, and a victim gang is never
//! left below its minimum.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::conf::{ArgError, Arguments, NoArguments};
use crate::framework::{vote, ClusterState, GangReason, Invalid, Plugin, Session, Vote};
use crate::model::subgroup::{subgroup_of, subgroups_broken, subgroups_invalid};
use crate::model::{JobId, JobInfo, MatchPolicy, TaskRef, TaskStatus};

pub struct Gang;

/// Takes no arguments.
pub fn build(args: &Arguments) -> Result<Box<dyn Plugin>, ArgError> {
    args.parse::<NoArguments>()?;
    Ok(Box::new(Gang))
}

/// Per-role shortfalls: roles whose count (by `pred`) is below their minTaskMember.
fn roles_short(job: &JobInfo, pred: impl Fn(TaskStatus) -> bool) -> Vec<(String, u32, u32)> {
    if job.min_task_member.is_empty() {
        return Vec::new();
    }
    let have = job.by_role(pred);
    job.min_task_member
        .iter()
        .filter_map(|(role, min)| {
            let n = have.get(&**role).copied().unwrap_or(0);
            (n < *min).then(|| (role.to_string(), n, *min))
        })
        .collect()
}

pub fn job_valid(job: &JobInfo) -> Option<Invalid> {
    let valid = job.valid_count();
    if let Some(total) = job.policy.total_number.filter(|t| valid < *t) {
        return Some(short_of(job, valid, total, "total-number"));
    }
    if satisfied_once(job) {
        // Replacement pods of a gang that already ran do not wait for siblings.
        return None;
    }
    if valid < job.min_member {
        return Some(short_of(job, valid, job.min_member, "minMember"));
    }
    let short = roles_short(job, TaskStatus::is_valid);
    if !short.is_empty() {
        let mut parts: Vec<String> = short
            .iter()
            .map(|(r, n, m)| format!("role {r} has {n} pods, minTaskMember is {m}"))
            .collect();
        if !job.held_back.is_empty() {
            parts.push(job.held_back.describe());
        }
        return Some(Invalid {
            reason: GangReason::NotEnoughTasks,
            message: format!("gang not valid: {}", parts.join(", ")),
        });
    }
    if let Some(why) = subgroups_invalid(&job.subgroups, job.tasks()) {
        let n = job.tasks().len();
        return Some(Invalid {
            reason: GangReason::NotEnoughTasks,
            message: format!("{n}/{n} tasks in gang unschedulable: {why}"),
        });
    }
    None
}

/// Why a gang with `valid` candidates, fewer than the `need` its `rule` asks, is not
/// valid: too few pods exist (it is still forming), or enough exist but some are held back
/// by the driver (gated, refused), which the message counts per gate and reason.
fn short_of(job: &JobInfo, valid: u32, need: u32, rule: &str) -> Invalid {
    let held = &job.held_back;
    let n = job.tasks().len() as u32 + held.pods();
    let exist = valid + held.pods();
    if exist < need || held.is_empty() {
        let mut message = format!(
            "{n}/{n} tasks in gang unschedulable: only {exist} pods exist, {rule} is {need}"
        );
        if !held.is_empty() {
            message = format!("{message}; {}", held.describe());
        }
        return Invalid {
            reason: GangReason::NotEnoughTasks,
            message,
        };
    }
    // A refusal outlasts a gate: say the reason that needs the user's action.
    let reason = if held.refused.is_empty() {
        GangReason::SchedulingGated
    } else {
        GangReason::Unsupported
    };
    Invalid {
        reason,
        message: format!(
            "{n}/{n} tasks in gang unschedulable: {}; {rule} is {need}",
            held.describe()
        ),
    }
}

/// A OnceSatisfied gang that was ready before: its further members schedule one by one.
fn satisfied_once(job: &JobInfo) -> bool {
    job.policy.match_policy == MatchPolicy::OnceSatisfied && job.runtime.once_satisfied
}

/// Members counting toward the minimum under the gang's match policy: placed ones, plus
/// (except for OnlyWaiting) those already bound, running or done.
fn counted(job: &JobInfo) -> u32 {
    match job.policy.match_policy {
        MatchPolicy::OnlyWaiting => job.count(TaskStatus::Allocated),
        MatchPolicy::WaitingAndRunning | MatchPolicy::OnceSatisfied => job.ready_count(),
    }
}

pub fn job_ready(job: &JobInfo) -> bool {
    satisfied_once(job)
        || (counted(job) >= job.min_member
            && roles_short(job, TaskStatus::is_ready).is_empty()
            && subgroups_broken(&job.subgroups, job.tasks(), TaskStatus::is_ready, |s| {
                s == TaskStatus::Allocated
            })
            .is_none())
}

fn occupied(s: TaskStatus) -> bool {
    s.is_ready() || s == TaskStatus::Pipelined
}

pub fn job_pipelined(job: &JobInfo) -> bool {
    satisfied_once(job)
        || (counted(job) + job.count(TaskStatus::Pipelined) >= job.min_member
            && roles_short(job, occupied).is_empty()
            && subgroups_broken(&job.subgroups, job.tasks(), occupied, |s| {
                matches!(s, TaskStatus::Allocated | TaskStatus::Pipelined)
            })
            .is_none())
}

/// What a victim gang can lose and still run: its members beyond minMember, and per role
/// with a minTaskMember, its members beyond that.
struct Spare {
    total: i64,
    roles: BTreeMap<Arc<str>, i64>,
}

impl Spare {
    fn of(job: &JobInfo) -> Self {
        let total = i64::from(job.ready_count()) - i64::from(job.min_member);
        if job.min_task_member.is_empty() {
            // No role minimums: skip counting tasks per role (a map built per victim gang
            // for every vote preempt and reclaim ask).
            return Spare {
                total,
                roles: BTreeMap::new(),
            };
        }
        let have = job.by_role(TaskStatus::is_ready);
        Spare {
            total,
            roles: job
                .min_task_member
                .iter()
                .map(|(role, min)| {
                    let n = have.get(&**role).copied().unwrap_or(0);
                    (role.clone(), i64::from(n) - i64::from(*min))
                })
                .collect(),
        }
    }

    /// Takes one member of `role` if the gang keeps its minimums without it.
    fn take(&mut self, job: &JobInfo, role: &str) -> bool {
        let role_ok = self.roles.get(role).is_none_or(|s| *s > 0);
        if !role_ok || (job.min_member > 1 && self.total <= 0) {
            return false;
        }
        self.total -= 1;
        if let Some(s) = self.roles.get_mut(role) {
            *s -= 1;
        }
        true
    }

    /// Whether what was taken still leaves every minimum met.
    fn kept(&self, job: &JobInfo) -> bool {
        (job.min_member <= 1 || self.total >= 0) && self.roles.values().all(|s| *s >= 0)
    }
}

/// Victims the gang rule allows: from each victim gang, at most the tasks it has beyond
/// its minMember (any of them if minMember is 1) and beyond each role's minTaskMember.
pub fn gang_victims(state: &ClusterState, candidates: &[TaskRef]) -> Vec<TaskRef> {
    let mut spare: BTreeMap<_, Spare> = BTreeMap::new();
    let mut out = Vec::with_capacity(candidates.len());
    for &c in candidates {
        let job = state.job(c.job);
        // One member alone would leave its subgroup part-placed: subgroups go whole, in
        // sets (`gang_set_allowed`).
        if !job.subgroups.is_empty() && subgroup_of(&job.subgroups, &state.task(c).labels).is_some()
        {
            continue;
        }
        let left = spare.entry(c.job).or_insert_with(|| Spare::of(job));
        if left.take(job, &state.task(c).role) {
            out.push(c);
        }
    }
    out
}

/// Whether evicting `set` together leaves every victim gang either with its minimums met
/// (minMember, and minTaskMember per role) or with nothing placed at all (the gang goes
/// whole: every member counted toward its readiness is in the set).
pub fn gang_set_allowed(state: &ClusterState, set: &[TaskRef]) -> bool {
    let mut taken: BTreeMap<_, (u32, Spare)> = BTreeMap::new();
    for &c in set {
        let job = state.job(c.job);
        let (n, spare) = taken.entry(c.job).or_insert_with(|| (0, Spare::of(job)));
        *n += 1;
        spare.total -= 1;
        if let Some(s) = spare.roles.get_mut(&*state.task(c).role) {
            *s -= 1;
        }
    }
    taken.into_iter().all(|(id, (n, spare))| {
        let job = state.job(id);
        job.ready_count().saturating_sub(n) == 0
            || (spare.kept(job) && subgroups_kept(job, id, set))
    })
}

/// Whether evicting the members of `set` that belong to `job` leaves each subgroup it
/// touches whole or empty, and each policy with its minimum of whole subgroups.
fn subgroups_kept(job: &JobInfo, id: JobId, set: &[TaskRef]) -> bool {
    if job.subgroups.is_empty() {
        return true;
    }
    let taken: std::collections::BTreeSet<u32> = set
        .iter()
        .filter(|t| t.job == id)
        .map(|t| t.index)
        .collect();
    // Per subgroup: members left placed, and whether the set takes any of it.
    let mut left: BTreeMap<_, (u32, bool)> = BTreeMap::new();
    for (i, t) in job.tasks().iter().enumerate() {
        let Some(key) = subgroup_of(&job.subgroups, &t.labels) else {
            continue;
        };
        let entry = left.entry(key).or_default();
        if taken.contains(&(i as u32)) {
            entry.1 = true;
        } else if t.status.is_ready() {
            entry.0 += 1;
        }
    }
    let mut whole = vec![0u32; job.subgroups.len()];
    for (key, (n, touched)) in &left {
        let size = job.subgroups[key.policy].size;
        if *n >= size {
            whole[key.policy] += 1;
        } else if *touched && *n > 0 {
            return false;
        }
    }
    job.subgroups
        .iter()
        .zip(whole)
        .all(|(p, n)| n >= p.min_groups)
}

impl Plugin for Gang {
    fn name(&self) -> &'static str {
        "gang"
    }

    fn on_session_open(&self, ssn: &mut Session) {
        ssn.add(vote::JobValid, Box::new(job_valid));
        ssn.add(vote::JobReady, Box::new(job_ready));
        ssn.add(
            vote::JobPipelined,
            Box::new(|j| {
                if job_pipelined(j) {
                    Vote::Permit
                } else {
                    Vote::Reject
                }
            }),
        );
        ssn.add(vote::JobStarving, Box::new(|j| !job_pipelined(j)));
        // Gangs not yet ready go first, so a started gang does not starve a waiting one.
        ssn.add(
            vote::JobOrder,
            Box::new(|l, r| job_ready(l).cmp(&job_ready(r))),
        );
        ssn.add(
            vote::Preemptable,
            Box::new(|s, _, c| Some(gang_victims(s, c))),
        );
        ssn.add(
            vote::Reclaimable,
            Box::new(|s, _, c| Some(gang_victims(s, c))),
        );
        // Proposed together, a victim gang may also go whole.
        ssn.add(
            vote::PreemptableSet,
            Box::new(|s, _, set| Some(gang_set_allowed(s, set))),
        );
        ssn.add(
            vote::ReclaimableSet,
            Box::new(|s, _, set| Some(gang_set_allowed(s, set))),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::{ConditionKind, Statement};
    use crate::model::PodGroupPhase;
    use crate::testkit::{self as kit, *};

    const GANG: &str = crate::conf_yaml!("enqueue, allocate"; ["gang", "predicates"]);

    fn job_of(cache: &crate::cache::Cache, uid: &str) -> JobInfo {
        let s = cache.snapshot();
        s.job(s.job_by_uid(uid).unwrap()).clone()
    }

    fn set(job: &mut JobInfo, statuses: &[TaskStatus]) {
        for (i, s) in statuses.iter().enumerate() {
            let node = (*s != TaskStatus::Pending).then(|| std::sync::Arc::from("n"));
            job.set_task_status(i as u32, *s, node);
        }
    }

    #[test]
    fn valid_needs_min_member_pods_and_min_task_member_per_role() {
        let mut cache = cache_with_default_queue();
        let few = kit::Gang::new("few", 3)
            .tasks("", 2, &[("cpu", "1")])
            .apply(&mut cache);
        let invalid = job_valid(&job_of(&cache, &few)).unwrap();
        assert_eq!(invalid.reason, GangReason::NotEnoughTasks);
        assert_eq!(
            invalid.message,
            "2/2 tasks in gang unschedulable: only 2 pods exist, minMember is 3"
        );
        let roles = kit::Gang::new("roles", 2)
            .min_role("ps", 1)
            .min_role("worker", 2)
            .tasks("worker", 1, &[("cpu", "1")])
            .tasks("ps", 1, &[("cpu", "1")])
            .apply(&mut cache);
        let invalid = job_valid(&job_of(&cache, &roles)).unwrap();
        assert_eq!(
            invalid.message,
            "gang not valid: role worker has 1 pods, minTaskMember is 2"
        );
        let ok = kit::Gang::new("ok", 2)
            .min_role("worker", 2)
            .tasks("worker", 2, &[("cpu", "1")])
            .apply(&mut cache);
        assert_eq!(job_valid(&job_of(&cache, &ok)), None);
        // Failed pods do not count.
        let mut job = job_of(&cache, &ok);
        job.set_task_status(0, TaskStatus::Failed, None);
        assert!(job_valid(&job).is_some());

        // The allocate action reports it and binds nothing.
        add_nodes(&mut cache, "n", 1, &[("cpu", "8")]);
        let result = run_cycle(&cache, Some(GANG));
        let update = result.job_updates.iter().find(|u| *u.job == *few).unwrap();
        let cond = update.condition.as_ref().unwrap();
        assert_eq!(cond.kind, ConditionKind::Unschedulable);
        assert_eq!(cond.reason, GangReason::NotEnoughTasks);
        assert!(!result
            .binds
            .iter()
            .any(|b| *b.job == *few || *b.job == *roles));
        assert_eq!(binds_by_job(&result).get(&ok).map(Vec::len), Some(2));
    }

    fn gated(gates: &[(&str, u32)], pods: u32) -> crate::model::HeldBack {
        crate::model::HeldBack {
            gated: gates.iter().map(|(g, n)| (g.to_string(), *n)).collect(),
            gated_pods: pods,
            ..Default::default()
        }
    }

    #[test]
    fn members_held_back_by_gates_or_refused_are_counted_per_gate_and_hold_the_gang() {
        let mut cache = cache_with_default_queue();
        add_nodes(&mut cache, "n", 1, &[("cpu", "8")]);
        let g = kit::Gang::new("g", 2)
            .tasks("", 1, &[("cpu", "1")])
            .apply(&mut cache);
        cache.set_held_back(&g, gated(&[("example.com/quota", 1)], 1));
        let invalid = job_valid(&job_of(&cache, &g)).unwrap();
        assert_eq!(invalid.reason, GangReason::SchedulingGated);
        assert_eq!(
            invalid.message,
            "2/2 tasks in gang unschedulable: 1 pod gated by example.com/quota; minMember is 2"
        );
        let result = run_cycle(&cache, Some(GANG));
        assert!(result.binds.is_empty(), "nothing of the gang binds");
        let update = result.job_updates.iter().find(|u| *u.job == *g).unwrap();
        assert_eq!(update.condition.as_ref().unwrap().message, invalid.message);
        assert_eq!(
            update.blocked_by,
            Some(crate::framework::Blocker::Gated),
            "no autoscaler is asked for nodes"
        );

        // A pod with two gates counts under each; a refusal outlasts a gate.
        let mut held = gated(&[("a.io/x", 2), ("b.io/y", 1)], 2);
        held.refused.insert(
            "spec.resourceClaims (DRA) are not supported by rust-batch".into(),
            1,
        );
        cache.set_held_back(&g, held);
        let invalid = job_valid(&job_of(&cache, &g)).unwrap();
        assert_eq!(invalid.reason, GangReason::Unsupported);
        assert_eq!(
            invalid.message,
            "4/4 tasks in gang unschedulable: 2 pods gated by a.io/x; 1 pod gated by b.io/y; \
             1 pod refused: spec.resourceClaims (DRA) are not supported by rust-batch; \
             minMember is 2"
        );

        // Too few pods even with the held ones: still forming, and the message says both.
        let few = kit::Gang::new("few", 3)
            .tasks("", 1, &[("cpu", "1")])
            .apply(&mut cache);
        cache.set_held_back(&few, gated(&[("example.com/quota", 1)], 1));
        let invalid = job_valid(&job_of(&cache, &few)).unwrap();
        assert_eq!(invalid.reason, GangReason::NotEnoughTasks);
        assert_eq!(
            invalid.message,
            "2/2 tasks in gang unschedulable: only 2 pods exist, minMember is 3; \
             1 pod gated by example.com/quota"
        );

        // Every member gated (Kueue gates them all): no pending task, still told why.
        let all = kit::Gang::new("all", 2).apply(&mut cache);
        cache.set_held_back(&all, gated(&[("kueue.x-k8s.io/admission", 2)], 2));
        let result = run_cycle(&cache, Some(GANG));
        let update = result.job_updates.iter().find(|u| *u.job == *all).unwrap();
        let cond = update.condition.as_ref().unwrap();
        assert_eq!(cond.reason, GangReason::SchedulingGated);
        assert_eq!(
            cond.message,
            "2/2 tasks in gang unschedulable: 2 pods gated by kueue.x-k8s.io/admission; \
             minMember is 2"
        );

        // A member held beyond the minimum does not hold the others back.
        cache.set_held_back(&g, Default::default());
        let spare = kit::Gang::new("spare", 1)
            .tasks("", 1, &[("cpu", "1")])
            .apply(&mut cache);
        cache.set_held_back(&spare, gated(&[("example.com/quota", 1)], 1));
        let result = run_cycle(&cache, Some(GANG));
        let bound = binds_by_job(&result);
        assert_eq!(bound.get(&g).map(Vec::len), None, "g is short of a member");
        assert_eq!(bound.get(&spare).map(Vec::len), Some(1));
    }

    #[test]
    fn a_held_back_gang_says_so_even_when_its_queue_has_its_share() {
        const SHARES: &str =
            crate::conf_yaml!("enqueue, allocate"; ["gang", "predicates", "proportion"]);
        let mut cache = cache_with_default_queue();
        add_nodes(&mut cache, "n", 1, &[("cpu", "4")]);
        kit::Gang::new("plain", 1)
            .phase(PodGroupPhase::Running)
            .tasks("", 1, &[("cpu", "1")])
            .running_on(&["n-00000"])
            .apply(&mut cache);
        let dra = kit::Gang::new("dra", 1).apply(&mut cache);
        let why = "spec.resourceClaims (DRA) is not supported by rust-batch";
        let mut held = crate::model::HeldBack::default();
        held.refused.insert(why.into(), 1);
        cache.set_held_back(&dra, held);
        let result = run_cycle(&cache, Some(SHARES));
        let update = result.job_updates.iter().find(|u| *u.job == *dra).unwrap();
        let cond = update.condition.as_ref().unwrap();
        assert_eq!(cond.reason, GangReason::Unsupported);
        assert_eq!(
            cond.message,
            format!("1/1 tasks in gang unschedulable: 1 pod refused: {why}; minMember is 1")
        );
        assert_eq!(update.blocked_by, Some(crate::framework::Blocker::Refused));
    }

    #[test]
    fn ready_and_pipelined_count_the_right_statuses() {
        let mut cache = cache_with_default_queue();
        let uid = kit::Gang::new("j", 3)
            .tasks("", 4, &[("cpu", "1")])
            .apply(&mut cache);
        let mut job = job_of(&cache, &uid);
        use TaskStatus::*;
        set(&mut job, &[Allocated, Bound, Pending, Pending]);
        assert!(!job_ready(&job) && !job_pipelined(&job));
        set(&mut job, &[Allocated, Bound, Pipelined, Pending]);
        assert!(!job_ready(&job), "pipelined tasks are not ready");
        assert!(job_pipelined(&job));
        set(&mut job, &[Allocated, Running, Succeeded, Pending]);
        assert!(job_ready(&job), "succeeded pods count, as in Volcano");
        set(&mut job, &[Binding, Running, Releasing, Pending]);
        assert!(!job_ready(&job), "releasing pods do not count");
    }

    #[test]
    fn min_task_member_is_required_per_role() {
        // minMember 2 would be met by the PS and one worker, but workers need 2.
        let mut cache = cache_with_default_queue();
        add_nodes(&mut cache, "n", 1, &[("cpu", "8"), ("nvidia.com/gpu", "1")]);
        let job = kit::Gang::new("tf", 2)
            .min_role("ps", 1)
            .min_role("worker", 2)
            .tasks("ps", 1, &[("cpu", "1")])
            .tasks("worker", 2, &[("nvidia.com/gpu", "1")])
            .apply(&mut cache);
        let mut info = job_of(&cache, &job);
        set(&mut info, &[TaskStatus::Allocated, TaskStatus::Allocated]);
        assert_eq!(info.ready_count(), 2);
        assert!(!job_ready(&info), "role worker has 1 of 2");
        assert!(!job_pipelined(&info));
        let result = run_cycle(&cache, Some(GANG));
        assert!(result.binds.is_empty(), "{:?}", result.binds);
        // With a second GPU the gang binds whole.
        add_nodes(&mut cache, "m", 1, &[("cpu", "8"), ("nvidia.com/gpu", "1")]);
        let result = run_cycle(&cache, Some(GANG));
        assert_eq!(binds_by_job(&result).get(&job).map(Vec::len), Some(3));
    }

    #[test]
    fn starving_and_job_order_put_waiting_gangs_first() {
        let mut cache = cache_with_default_queue();
        add_nodes(&mut cache, "n", 1, &[("cpu", "8")]);
        let started = kit::Gang::new("started", 1)
            .created(1)
            .phase(PodGroupPhase::Running)
            .tasks("", 2, &[("cpu", "1")])
            .running_on(&["n-00000"])
            .apply(&mut cache);
        let waiting = kit::Gang::new("waiting", 1)
            .created(2)
            .tasks("", 1, &[("cpu", "1")])
            .apply(&mut cache);
        let ssn = open_session(&cache, Some(GANG));
        let (s, w) = (
            ssn.state().job_by_uid(&started).unwrap(),
            ssn.state().job_by_uid(&waiting).unwrap(),
        );
        assert!(!ssn.job_starving(s));
        assert!(ssn.job_starving(w));
        assert_eq!(
            ssn.job_order(w, s),
            std::cmp::Ordering::Less,
            "a gang that is not ready goes before an older ready one"
        );
    }

    #[test]
    fn victims_never_take_a_role_below_its_min_task_member() {
        let mut cache = cache_with_default_queue();
        add_nodes(&mut cache, "n", 1, &[("cpu", "8")]);
        // minMember 2 of 5 leaves three spare, but the workers are at their minimum.
        let job = kit::Gang::new("roles", 2)
            .min_role("worker", 4)
            .tasks("ps", 1, &[("cpu", "1")])
            .tasks("worker", 4, &[("cpu", "1")])
            .running_on(&["n-00000"; 5])
            .apply(&mut cache);
        let conf = "actions: allocate\ntiers:\n- plugins:\n  - name: gang\n";
        let ssn = open_session(&cache, Some(conf));
        let state = ssn.state().clone();
        let id = state.job_by_uid(&job).unwrap();
        let all: Vec<_> = (0..5)
            .map(|index| crate::model::TaskRef { job: id, index })
            .collect();
        let role = |t: &crate::model::TaskRef| state.task(*t).role.to_string();
        let victims = gang_victims(&state, &all);
        assert_eq!(victims.iter().map(role).collect::<Vec<_>>(), ["ps"]);
        // Together: a worker with the ps breaks the role; the whole gang may go.
        let ps_and_worker: Vec<_> = all.iter().copied().filter(|t| t.index < 2).collect();
        assert!(!gang_set_allowed(&state, &ps_and_worker));
        assert!(gang_set_allowed(&state, &all));
    }

    #[test]
    fn victims_take_subgroups_whole_and_keep_min_sub_groups() {
        let mut cache = cache_with_default_queue();
        add_nodes(&mut cache, "n", 1, &[("cpu", "16")]);
        // Three replicas of 2 workers, running; minSubGroups 2; minMember 1.
        let mut gang = kit::Gang::new("lws", 1).subgroups("worker", 2, 2);
        for r in ["0", "1", "2"] {
            gang = gang
                .tasks("", 2, &[("cpu", "1")])
                .last_labelled(2, &[("role", "worker"), ("replica", r)]);
        }
        let job = gang.running_on(&["n-00000"; 6]).apply(&mut cache);
        let conf = "actions: allocate\ntiers:\n- plugins:\n  - name: gang\n";
        let ssn = open_session(&cache, Some(conf));
        let state = ssn.state().clone();
        let id = state.job_by_uid(&job).unwrap();
        let tasks = |indexes: &[u32]| -> Vec<crate::model::TaskRef> {
            indexes
                .iter()
                .map(|&index| crate::model::TaskRef { job: id, index })
                .collect()
        };
        assert!(
            gang_victims(&state, &tasks(&[0, 1, 2, 3, 4, 5])).is_empty(),
            "one member alone would leave its subgroup half"
        );
        assert!(
            gang_set_allowed(&state, &tasks(&[4, 5])),
            "replica 2 whole: 2 stay whole"
        );
        assert!(
            !gang_set_allowed(&state, &tasks(&[3, 4, 5])),
            "replica 1 left half"
        );
        assert!(
            !gang_set_allowed(&state, &tasks(&[2, 3, 4, 5])),
            "one whole subgroup left, minSubGroups is 2"
        );
        assert!(
            gang_set_allowed(&state, &tasks(&[0, 1, 2, 3, 4, 5])),
            "the whole gang"
        );
    }

    #[test]
    fn victims_never_take_a_gang_below_min_member() {
        let mut cache = cache_with_default_queue();
        add_nodes(&mut cache, "n", 1, &[("cpu", "8")]);
        let all = ["n-00000"; 4];
        kit::Gang::new("min2", 2)
            .tasks("", 4, &[("cpu", "1")])
            .running_on(&all)
            .apply(&mut cache);
        kit::Gang::new("min1", 1)
            .tasks("", 2, &[("cpu", "1")])
            .running_on(&all[..2])
            .apply(&mut cache);
        kit::Gang::new("exact", 2)
            .tasks("", 2, &[("cpu", "1")])
            .running_on(&all[..2])
            .apply(&mut cache);
        let preemptor = kit::Gang::new("hi", 1)
            .priority(100)
            .tasks("", 1, &[("cpu", "1")])
            .apply(&mut cache);
        let conf = "actions: allocate\ntiers:\n- plugins:\n  - name: gang\n";
        let ssn = open_session(&cache, Some(conf));
        let state = ssn.state().clone();
        let running: Vec<_> = ["min2", "min1", "exact"]
            .iter()
            .flat_map(|g| {
                let id = state.job_by_uid(&format!("default/{g}")).unwrap();
                (0..state.job(id).tasks().len() as u32)
                    .map(move |index| crate::model::TaskRef { job: id, index })
            })
            .collect();
        let p = task_ref(&state, &format!("{preemptor}-0")).unwrap();
        let victims = ssn.victims(crate::framework::VictimKind::Preempt, p, &running);
        let count = |g: &str| {
            let id = state.job_by_uid(&format!("default/{g}")).unwrap();
            victims.iter().filter(|v| v.job == id).count()
        };
        assert_eq!(count("min2"), 2, "4 running, min 2: 2 spare");
        assert_eq!(count("min1"), 2, "min 1: any");
        assert_eq!(count("exact"), 0, "at its minimum: none");
        assert_eq!(
            ssn.victims(crate::framework::VictimKind::Reclaim, p, &running),
            victims
        );
    }

    #[test]
    fn a_statement_for_a_gang_that_is_not_ready_is_discarded_exactly() {
        let mut cache = cache_with_default_queue();
        add_nodes(&mut cache, "n", 2, &[("cpu", "2")]);
        let job = kit::Gang::new("j", 3)
            .phase(PodGroupPhase::Inqueue)
            .tasks("", 3, &[("cpu", "2")])
            .apply(&mut cache);
        let mut ssn = open_session(&cache, Some(GANG));
        let before = ssn.fingerprint();
        let id = ssn.state().job_by_uid(&job).unwrap();
        let tasks = ssn.tasks_in(id, TaskStatus::Pending);
        let nodes = ssn.node_ids();
        {
            let mut stmt = Statement::new(&mut ssn);
            stmt.allocate(tasks[0], nodes[0]);
            stmt.allocate(tasks[1], nodes[1]);
            assert!(!stmt.job_ready(id));
            assert!(!stmt.job_pipelined(id));
            stmt.discard();
        }
        assert!(ssn.fingerprint() == before);
        assert!(ssn.close().binds.is_empty());
    }
}
