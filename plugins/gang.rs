//! gang: a job is valid only when enough of its pods exist, ready only when at least
//! minMember (and minTaskMember per role) of them are placed, and a victim gang is never
//! left below its minimum.

use std::collections::BTreeMap;

use crate::conf::{ArgError, Arguments};
use crate::framework::{ClusterState, Invalid, Plugin, Session, Vote};
use crate::model::{JobInfo, TaskRef, TaskStatus};

pub struct Gang;

pub fn build(_: &Arguments) -> Result<Box<dyn Plugin>, ArgError> {
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
    if valid < job.min_member {
        return Some(Invalid {
            reason: "NotEnoughTasks".into(),
            message: format!(
                "{n}/{n} tasks in gang unschedulable: only {valid} pods exist, minMember is {}",
                job.min_member,
                n = job.tasks().len()
            ),
        });
    }
    let short = roles_short(job, TaskStatus::is_valid);
    if !short.is_empty() {
        let parts: Vec<String> = short
            .iter()
            .map(|(r, n, m)| format!("role {r} has {n} pods, minTaskMember is {m}"))
            .collect();
        return Some(Invalid {
            reason: "NotEnoughTasks".into(),
            message: format!("gang not valid: {}", parts.join(", ")),
        });
    }
    None
}

pub fn job_ready(job: &JobInfo) -> bool {
    job.ready_count() >= job.min_member && roles_short(job, TaskStatus::is_ready).is_empty()
}

fn occupied(s: TaskStatus) -> bool {
    s.is_ready() || s == TaskStatus::Pipelined
}

pub fn job_pipelined(job: &JobInfo) -> bool {
    job.ready_count() + job.count(TaskStatus::Pipelined) >= job.min_member
        && roles_short(job, occupied).is_empty()
}

/// Victims the gang rule allows: from each victim gang, at most the tasks it has beyond
/// its minMember (any of them if minMember is 1).
pub fn gang_victims(state: &ClusterState, candidates: &[TaskRef]) -> Vec<TaskRef> {
    let mut spare: BTreeMap<_, i64> = BTreeMap::new();
    let mut out = Vec::new();
    for &c in candidates {
        let job = state.job(c.job);
        let left = spare
            .entry(c.job)
            .or_insert_with(|| i64::from(job.ready_count()) - i64::from(job.min_member));
        if job.min_member <= 1 || *left > 0 {
            *left -= 1;
            out.push(c);
        }
    }
    out
}

impl Plugin for Gang {
    fn name(&self) -> &'static str {
        "gang"
    }

    fn on_session_open(&mut self, ssn: &mut Session) {
        ssn.add_job_valid_fn(self.name(), Box::new(job_valid));
        ssn.add_job_ready_fn(self.name(), Box::new(job_ready));
        ssn.add_job_pipelined_fn(
            self.name(),
            Box::new(|j| {
                if job_pipelined(j) {
                    Vote::Permit
                } else {
                    Vote::Reject
                }
            }),
        );
        ssn.add_job_starving_fn(self.name(), Box::new(|j| !job_pipelined(j)));
        // Gangs not yet ready go first, so a started gang does not starve a waiting one.
        ssn.add_job_order_fn(
            self.name(),
            Box::new(|l, r| job_ready(l).cmp(&job_ready(r))),
        );
        ssn.add_preemptable_fn(self.name(), Box::new(|s, _, c| Some(gang_victims(s, c))));
        ssn.add_reclaimable_fn(self.name(), Box::new(|s, _, c| Some(gang_victims(s, c))));
    }
}
