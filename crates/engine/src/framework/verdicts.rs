//! Gang verdicts: why a gang was not committed this session, what it says about it (its
//! PodGroup phase, condition and per-task reasons), its waiting time and backoff, and the
//! placements a NonStrict gang keeps until the next session.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use super::fit::{gang_message, TaskUnfit};
use super::outcome::{Blocker, ConditionKind, GangReason, JobCondition, JobUpdate};
use super::session::Session;
use super::votes::Invalid;
use crate::model::resource::format_amount;
use crate::model::{
    GangMode, GangRuntime, Hold, JobId, JobInfo, PodGroupPhase, Resource, TaskRef, TaskStatus,
};
use crate::snapshot::{ClusterState, JobSet};

/// Why a gang was not committed in this session.
#[derive(Clone, Debug, Default)]
pub(super) struct GangUnfit {
    tasks: BTreeMap<u32, TaskUnfit>,
    invalid: Option<Invalid>,
    note: Option<String>,
}

/// What a session has found out about its gangs so far.
#[derive(Default)]
pub(super) struct GangVerdicts {
    unschedulable: BTreeMap<JobId, GangUnfit>,
    scheduled: BTreeSet<JobId>,
    /// The phase of each gang whose phase the session changed, as the session opened.
    pub(super) original_phase: HashMap<JobId, PodGroupPhase>,
    /// Gangs whose waiting time ran out this session, with their new runtime.
    expired: HashMap<JobId, GangRuntime>,
    /// The placements each gang held when the session opened.
    held_at_open: HashMap<JobId, Vec<Hold>>,
}

impl GangVerdicts {
    /// Notes the placements gangs hold as the session opens, to report only changes.
    pub(super) fn new(state: &ClusterState) -> Self {
        GangVerdicts {
            held_at_open: state
                .tally()
                .holding()
                .iter()
                .map(|id| (id, held_placements(state.job(id))))
                .filter(|(_, holds)| !holds.is_empty())
                .collect(),
            ..Default::default()
        }
    }

    /// The gangs this session decided or found something about.
    pub(super) fn decided(&self) -> JobSet {
        let mut ids = JobSet::default();
        let keys = (self.unschedulable.keys().chain(&self.scheduled))
            .chain(self.original_phase.keys())
            .chain(self.expired.keys())
            .chain(self.held_at_open.keys());
        for &id in keys {
            ids.set(id, true);
        }
        ids
    }
}

impl Session {
    /// What the session decided about one gang, if anything changed.
    pub(super) fn job_update(&self, id: JobId) -> Option<JobUpdate> {
        let job = self.state.job(id);
        let original = self
            .verdicts
            .original_phase
            .get(&id)
            .copied()
            .unwrap_or(job.phase);
        let phase = job.phase_from_members();
        let condition = if self.verdicts.scheduled.contains(&id) {
            Some(JobCondition::scheduled(job))
        } else {
            self.verdicts
                .unschedulable
                .get(&id)
                .map(|u| self.unschedulable_condition(id, u))
        };
        let task_reasons = self
            .verdicts
            .unschedulable
            .get(&id)
            .map(|u| self.task_reasons(id, u))
            .unwrap_or_default();
        let blocked_by = match self.verdicts.unschedulable.get(&id) {
            Some(u) if !self.verdicts.scheduled.contains(&id) => self.blocker(id, u),
            _ => None,
        };
        let phase_change = (phase != original).then_some(phase);
        let runtime = self.next_runtime(id);
        let runtime = (runtime != job.runtime).then_some(runtime);
        let holds = self.holds(id);
        // The reservation a gang that still waits holds (its message says so in words).
        let reservation = self
            .reservation()
            .filter(|r| r.job == id && self.verdicts.unschedulable.contains_key(&id))
            .map(|r| self.reserved_nodes(r));
        let changed =
            phase_change.is_some() || condition.is_some() || runtime.is_some() || holds.is_some();
        changed.then(|| JobUpdate {
            job: job.uid.clone(),
            phase: phase_change,
            condition,
            task_reasons,
            blocked_by,
            runtime,
            holds,
            reservation,
        })
    }

    /// What keeps an unschedulable gang waiting: its queue (or admission) when that alone
    /// would stop it whatever nodes were added, otherwise the nodes.
    fn blocker(&self, id: JobId, u: &GangUnfit) -> Option<Blocker> {
        let job = self.state.job(id);
        match u.invalid.as_ref().map(|i| i.reason) {
            Some(GangReason::NotEnoughTasks) => return Some(Blocker::Forming),
            Some(GangReason::SchedulingGated) => return Some(Blocker::Gated),
            Some(GangReason::Unsupported) => return Some(Blocker::Refused),
            Some(_) => return None,
            None => {}
        }
        let enqueue = self.conf().actions.iter().any(|a| a == "enqueue");
        if enqueue && job.phase == PodGroupPhase::Pending {
            return Some(Blocker::Admission);
        }
        let Some(queue) = self.queue(&job.queue) else {
            return Some(Blocker::Queue);
        };
        if self.queue_blocked(queue).is_some() || self.overused(queue) {
            return Some(Blocker::Queue);
        }
        // Every task that found no place was turned away by its queue (the capability),
        // as recorded when it was tried (its statement is undone by now).
        let over_capability = !u.tasks.is_empty() && u.tasks.values().all(|t| t.by_queue);
        Some(if over_capability {
            Blocker::Queue
        } else {
            Blocker::Capacity
        })
    }

    /// The gang's runtime for the next session: its waiting clock starts when it first
    /// fails with all members present and stops when it is scheduled.
    fn next_runtime(&self, id: JobId) -> GangRuntime {
        if let Some(rt) = self.verdicts.expired.get(&id) {
            return rt.clone();
        }
        let job = self.state.job(id);
        let mut rt = job.runtime.clone();
        if self.verdicts.scheduled.contains(&id) || job.started_enough() {
            rt.mark_started();
        } else if let Some(u) = self.verdicts.unschedulable.get(&id) {
            if u.invalid.is_none() && rt.waiting_since.is_none() {
                rt.waiting_since = Some(self.now);
            }
        }
        rt
    }

    /// The placements a NonStrict gang keeps for the next session, if they changed.
    fn holds(&self, id: JobId) -> Option<Vec<Hold>> {
        let job = self.state.job(id);
        let keep = job.policy.mode == GangMode::NonStrict
            && !self.verdicts.scheduled.contains(&id)
            && !self.verdicts.expired.contains_key(&id);
        let holds = if keep {
            held_placements(job)
        } else {
            Vec::new()
        };
        let before = self
            .verdicts
            .held_at_open
            .get(&id)
            .map_or(&[][..], Vec::as_slice);
        (holds != before).then_some(holds)
    }

    /// Ends a gang's wait: its held placements are released, it is not tried again before
    /// an exponential backoff (5 s doubling, at most 5 min) has passed, and it says so.
    pub fn expire_gang(&mut self, id: JobId) {
        let mut held = self.tasks_in(id, TaskStatus::Allocated);
        held.extend(self.tasks_in(id, TaskStatus::Pipelined));
        for &task in &held {
            self.unallocate_task(task, (TaskStatus::Pending, None));
        }
        let mut rt = self.state.job(id).runtime.clone();
        rt.expiries += 1;
        rt.waiting_since = None;
        rt.backoff_until = self.now + backoff(rt.expiries);
        let invalid = waiting_time_expired(self.state.job(id), rt.expiries, Some(held.len()));
        self.record_job_invalid(id, invalid);
        self.verdicts.expired.insert(id, rt);
    }

    /// Whether a gang's waiting time has run out (checked before it is tried).
    pub fn gang_expired(&self, id: JobId) -> bool {
        let job = self.state.job(id);
        match (job.policy.wait_timeout, job.runtime.waiting_since) {
            (Some(limit), Some(since)) => self.now - since >= limit,
            _ => false,
        }
    }

    /// Whether a gang is backing off after its waiting time ran out; says so if it is.
    pub fn gang_backing_off(&mut self, id: JobId) -> bool {
        let job = self.state.job(id);
        if self.now >= job.runtime.backoff_until || job.runtime.expiries == 0 {
            return false;
        }
        let invalid = waiting_time_expired(job, job.runtime.expiries, None);
        self.record_job_invalid(id, invalid);
        true
    }

    fn unschedulable_condition(&self, id: JobId, u: &GangUnfit) -> JobCondition {
        let job = self.state.job(id);
        if let Some(invalid) = &u.invalid {
            return JobCondition {
                kind: ConditionKind::Unschedulable,
                reason: invalid.reason,
                message: invalid.message.clone(),
            };
        }
        if u.tasks.is_empty() {
            return JobCondition {
                kind: ConditionKind::Unschedulable,
                reason: GangReason::NotEnoughResources,
                message: u.note.clone().unwrap_or_else(|| "gang not ready".into()),
            };
        }
        let mut message = gang_message(job.tasks().len(), u.tasks.values(), None);
        if let Some(note) = &u.note {
            message.push_str("; ");
            message.push_str(note);
        }
        JobCondition {
            kind: ConditionKind::Unschedulable,
            reason: GangReason::NotEnoughResources,
            message,
        }
    }

    /// "gang is short of 4 nvidia.com/gpu": per insufficient resource, what the unplaced
    /// tasks need beyond what is free on every node they could use (room in a pool their
    /// selectors or taints keep them from is none of theirs).
    fn shortage(&self, job: &JobInfo, u: &GangUnfit) -> Option<String> {
        let mut need = Resource::new();
        let mut keys = Vec::new();
        for index in u.tasks.keys() {
            let t = job.task(*index);
            need.add(&t.resreq);
            keys.push(t.placement_key);
        }
        let usable = self.usable_free(&keys);
        let cluster = self.cluster_free();
        let free = usable.as_ref().unwrap_or(cluster);
        let mut parts = Vec::new();
        for (name, amount) in need.dimensions() {
            if name == crate::model::resource::PODS {
                continue;
            }
            let short = amount - free.get(name).max(0);
            if short > 0
                && u.tasks
                    .values()
                    .any(|t| t.reason.contains(&*format!("Insufficient {name}")))
            {
                parts.push(format!("{} {name}", format_amount(name, short)));
            }
        }
        (!parts.is_empty()).then(|| format!("gang is short of {}", parts.join(", ")))
    }

    fn task_reasons(&self, id: JobId, u: &GangUnfit) -> Vec<(Arc<str>, String)> {
        let job = self.state.job(id);
        job.tasks()
            .iter()
            .enumerate()
            .filter(|(_, t)| t.status == TaskStatus::Pending)
            .map(|(i, t)| {
                let why = match (&u.invalid, u.tasks.get(&(i as u32))) {
                    (Some(inv), _) => inv.message.clone(),
                    (None, Some(unfit)) => unfit.detail.clone(),
                    (None, None) => "waiting for the rest of its gang to fit".to_string(),
                };
                (t.uid.clone(), why)
            })
            .collect()
    }
    /// What the gang's unplaced tasks need beyond what is free in the whole cluster, per
    /// resource they were short of: "gang is short of 4 nvidia.com/gpu". Call it before
    /// discarding the gang's statement, while its tentative placements still count.
    pub fn describe_shortage(&self, job: JobId) -> Option<String> {
        let u = self.verdicts.unschedulable.get(&job)?;
        self.shortage(self.job(job), u)
    }

    /// Records why a task of a gang found no node this session.
    pub fn record_task_unfit(&mut self, task: TaskRef, unfit: TaskUnfit) {
        self.verdicts
            .unschedulable
            .entry(task.job)
            .or_default()
            .tasks
            .insert(task.index, unfit);
    }

    /// Records that a gang is not valid (e.g. too few pods exist).
    pub fn record_job_invalid(&mut self, job: JobId, invalid: Invalid) {
        self.verdicts.unschedulable.entry(job).or_default().invalid = Some(invalid);
    }

    /// Adds a note after any the gang's message already has (an action explaining why it
    /// could not help either).
    pub fn append_job_note(&mut self, job: JobId, note: impl Into<String>) {
        let note = note.into();
        let slot = &mut self.verdicts.unschedulable.entry(job).or_default().note;
        *slot = Some(match slot.take() {
            Some(before) => format!("{before}; {note}"),
            None => note,
        });
    }

    /// Adds a note to an unschedulable gang's message (e.g. "queue overused").
    pub fn record_job_note(&mut self, job: JobId, note: impl Into<String>) {
        self.verdicts.unschedulable.entry(job).or_default().note = Some(note.into());
    }

    /// The gang was committed: forget earlier failures in this session.
    pub(in crate::framework) fn record_scheduled(&mut self, job: JobId) {
        self.verdicts.unschedulable.remove(&job);
        self.verdicts.scheduled.insert(job);
    }
}

/// A gang's Allocated and Pipelined tasks (placed, not bound), as holds in task order.
fn held_placements(job: &JobInfo) -> Vec<Hold> {
    // Most gangs hold nothing: their counts say so without reading their tasks (the session
    // opens on every gang of the cluster).
    if job.count(TaskStatus::Allocated) + job.count(TaskStatus::Pipelined) == 0 {
        return Vec::new();
    }
    job.tasks()
        .iter()
        .filter(|t| matches!(t.status, TaskStatus::Allocated | TaskStatus::Pipelined))
        .filter_map(|t| {
            Some(Hold {
                task: t.uid.clone(),
                node: t.node.clone()?,
                status: t.status,
            })
        })
        .collect()
}

/// Backoff after the n-th waiting-time expiry in a row: 5 s doubling, at most 5 min.
fn backoff(expiries: u32) -> i64 {
    5_000i64
        .saturating_mul(1i64 << expiries.saturating_sub(1).min(6))
        .min(300_000)
}

/// "1m30s", "45s", "250ms".
fn format_duration(ms: i64) -> String {
    humantime::format_duration(std::time::Duration::from_millis(ms.max(0) as u64)).to_string()
}

/// The condition of a gang whose waiting time ran out `expiries` times in a row; `released`
/// is how many held placements this expiry gave back (None while it backs off).
fn waiting_time_expired(job: &JobInfo, expiries: u32, released: Option<usize>) -> Invalid {
    let released = released
        .map(|n| format!("{n} held placement(s) released; "))
        .unwrap_or_default();
    Invalid {
        reason: GangReason::WaitingTimeExpired,
        message: format!(
            "gang waited {} without every member fitting ({expiries} time(s) in a row); \
             {released}retrying after a backoff of {}",
            format_duration(job.policy.wait_timeout.unwrap_or(0)),
            format_duration(backoff(expiries)),
        ),
    }
}
