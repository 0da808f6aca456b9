//! allocate: for each queue (QueueOrder, skipping overused ones), each admitted gang (JobOrder)
//! and each pending task (TaskOrder): find nodes that pass every predicate, score them,
//! place the task on the best one (allocate against idle resources, pipeline against
//! releasing ones). The gang's statement is committed only if the gang is ready, kept in the
//! session if it is pipelined, and discarded otherwise — nothing partial is ever bound.

use crate::conf::{ArgError, Arguments};
use crate::framework::fit::TaskUnfit;
use crate::framework::{Action, Session, Statement};
use crate::model::{JobId, NodeId, PodGroupPhase, TaskRef, TaskStatus};

pub struct Allocate {
    /// Stop looking for feasible nodes after this many (at least), to bound the work per
    /// task on large clusters (kube-scheduler's percentageOfNodesToScore idea).
    pub min_nodes_to_find: usize,
    /// ...or this percentage of the cluster, whichever is larger.
    pub percentage_of_nodes_to_find: u32,
}

pub fn build(args: &Arguments) -> Result<Box<dyn Action>, ArgError> {
    let min_nodes_to_find = args.get_weight("minNodesToFind")?.unwrap_or(100) as usize;
    let percentage_of_nodes_to_find = args.get_weight("percentageOfNodesToFind")?.unwrap_or(5);
    if percentage_of_nodes_to_find > 100 {
        return Err(ArgError {
            key: format!("{}.percentageOfNodesToFind", args.path),
            message: format!("must be 0..=100, got {percentage_of_nodes_to_find}"),
        });
    }
    Ok(Box::new(Allocate {
        min_nodes_to_find: min_nodes_to_find.max(1),
        percentage_of_nodes_to_find,
    }))
}

impl Allocate {
    fn nodes_to_find(&self, nodes: usize) -> usize {
        (nodes * self.percentage_of_nodes_to_find as usize / 100).max(self.min_nodes_to_find)
    }
}

/// Whether a gang may be allocated: admitted (or no enqueue step configured), valid, with
/// pending tasks.
fn wants_allocation(ssn: &mut Session, id: JobId, enqueue_configured: bool) -> bool {
    let job = ssn.job(id);
    if job.pending_count() == 0 {
        return false;
    }
    if enqueue_configured && job.phase == PodGroupPhase::Pending {
        return false;
    }
    if let Some(invalid) = ssn.job_valid(id) {
        ssn.record_job_invalid(id, invalid);
        return false;
    }
    true
}

/// The highest-scoring node among `nodes` (first one wins ties).
pub fn best_node(ssn: &Session, task: TaskRef, nodes: &[NodeId]) -> NodeId {
    let mut best = nodes[0];
    let mut best_score = f64::NEG_INFINITY;
    for &n in nodes {
        let score = ssn.node_score(task, n);
        if score > best_score {
            best = n;
            best_score = score;
        }
    }
    best
}

/// Tries to place `tasks` of one gang within `stmt`. Once the gang can no longer reach
/// its minimum, the remaining tasks are only checked, to say why they do not fit.
pub fn place_gang(stmt: &mut Statement, tasks: &[TaskRef], want_nodes: usize) {
    let Some(first) = tasks.first() else {
        return;
    };
    let job = first.job;
    let queue = stmt.job(job).queue.clone();
    let min = stmt.job(job).min_member as usize;
    let already = stmt.job(job).ready_count() as usize;
    let mut placed = 0usize;
    let mut failed = 0usize;
    for (i, &task) in tasks.iter().enumerate() {
        let placeable = already + placed + (tasks.len() - i) >= min;
        if let Some(q) = stmt.queue(&queue) {
            if !stmt.allocatable(q, task) {
                let why = format!("queue {queue:?} would exceed its capability");
                stmt.record_task_unfit(task, TaskUnfit::other(why));
                failed += 1;
                continue;
            }
        }
        match stmt.feasible_nodes(task, want_nodes) {
            Err(unfit) => {
                stmt.record_task_unfit(task, unfit);
                failed += 1;
            }
            Ok(nodes) if placeable || failed == 0 => {
                let node = best_node(stmt, task, &nodes);
                let req = &stmt.task(task).resreq;
                if stmt.node(node).fits_idle(req) {
                    stmt.allocate(task, node);
                } else {
                    stmt.pipeline(task, node);
                }
                placed += 1;
            }
            Ok(_) => {}
        }
    }
}

impl Action for Allocate {
    fn name(&self) -> &'static str {
        "allocate"
    }

    fn execute(&self, ssn: &mut Session) {
        let enqueue_configured = ssn.conf().actions.iter().any(|a| a == "enqueue");
        let want_nodes = self.nodes_to_find(ssn.state().node_slots());
        let mut groups = ssn.jobs_by_queue(|s, id| {
            // job_valid records a reason, which needs &mut; check the cheap parts first.
            let job = s.job(id);
            job.pending_count() > 0 && !(enqueue_configured && job.phase == PodGroupPhase::Pending)
        });
        for jobs in groups.values_mut() {
            jobs.reverse();
        }
        while let Some(queue) =
            ssn.next_queue(groups.iter().filter(|(_, j)| !j.is_empty()).map(|(q, _)| q))
        {
            let overused = ssn.queue(&queue).is_some_and(|q| ssn.overused(q));
            let Some(jobs) = groups.get_mut(&queue) else {
                break;
            };
            if overused {
                for id in jobs.drain(..) {
                    ssn.record_job_note(
                        id,
                        format!("queue {queue:?} is using its whole deserved share"),
                    );
                }
                continue;
            }
            let Some(id) = jobs.pop() else {
                continue;
            };
            if !wants_allocation(ssn, id, enqueue_configured) {
                continue;
            }
            let tasks = ssn.tasks_in(id, TaskStatus::Pending);
            let mut stmt = Statement::new(ssn);
            place_gang(&mut stmt, &tasks, want_nodes);
            if stmt.job_ready(id) {
                stmt.commit();
            } else if stmt.job_pipelined(id) {
                stmt.keep();
            } else {
                if let Some(shortage) = stmt.describe_shortage(id) {
                    stmt.record_job_note(id, shortage);
                }
                stmt.discard();
            }
        }
    }
}
