//! A statement: tentative changes for one gang, committed only when the gang is ready and
//! otherwise undone exactly, in reverse order. Dropping an open statement discards it, so an
//! early return can never leave half a gang placed.

use std::ops::{Deref, DerefMut};

use super::session::Session;
use crate::model::{JobId, NodeId, TaskRef, TaskStatus};

#[derive(Clone, Debug)]
enum Op {
    Allocate {
        task: TaskRef,
        prev: (TaskStatus, Option<NodeId>),
    },
    Pipeline {
        task: TaskRef,
        prev: (TaskStatus, Option<NodeId>),
    },
    Evict {
        task: TaskRef,
        prev: TaskStatus,
        preemptor: Option<JobId>,
        reason: String,
    },
}

pub struct Statement<'s> {
    ssn: &'s mut Session,
    ops: Vec<Op>,
}

impl Deref for Statement<'_> {
    type Target = Session;
    fn deref(&self) -> &Session {
        self.ssn
    }
}

impl DerefMut for Statement<'_> {
    fn deref_mut(&mut self) -> &mut Session {
        self.ssn
    }
}

impl<'s> Statement<'s> {
    pub fn new(ssn: &'s mut Session) -> Self {
        Statement {
            ssn,
            ops: Vec::new(),
        }
    }

    /// Places a pending task on a node against idle resources.
    pub fn allocate(&mut self, task: TaskRef, node: NodeId) {
        let prev = self.ssn.allocate_task(task, node, TaskStatus::Allocated);
        self.ops.push(Op::Allocate { task, prev });
    }

    /// Places a pending task on a node against resources still being released.
    pub fn pipeline(&mut self, task: TaskRef, node: NodeId) {
        let prev = self.ssn.allocate_task(task, node, TaskStatus::Pipelined);
        self.ops.push(Op::Pipeline { task, prev });
    }

    /// Marks a running task for eviction; its resources become releasing.
    pub fn evict(&mut self, task: TaskRef, reason: impl Into<String>) {
        self.evict_for(task, None, reason);
    }

    /// Evicts a task to make room for `preemptor` (reported with the eviction).
    pub fn evict_for(
        &mut self,
        task: TaskRef,
        preemptor: Option<JobId>,
        reason: impl Into<String>,
    ) {
        let prev = self.ssn.evict_task(task);
        self.ops.push(Op::Evict {
            task,
            prev,
            preemptor,
            reason: reason.into(),
        });
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Tasks allocated or pipelined by this statement.
    pub fn placed(&self) -> impl Iterator<Item = TaskRef> + '_ {
        self.ops.iter().filter_map(|op| match op {
            Op::Allocate { task, .. } | Op::Pipeline { task, .. } => Some(*task),
            Op::Evict { .. } => None,
        })
    }

    /// Makes the changes real: allocated tasks are bound, evictions are sent. Pipelined
    /// tasks stay pipelined in the session (they bind in a later cycle, once the resources
    /// they wait for are free). Records the gang as scheduled.
    pub fn commit(mut self) {
        let ops = std::mem::take(&mut self.ops);
        let mut jobs = Vec::new();
        for op in ops {
            match op {
                Op::Allocate { task, .. } => {
                    self.ssn.dispatch_bind(task);
                    jobs.push(task.job);
                }
                Op::Pipeline { task, .. } => jobs.push(task.job),
                Op::Evict {
                    task,
                    preemptor,
                    reason,
                    ..
                } => self.ssn.dispatch_evict(task, preemptor, &reason),
            }
        }
        jobs.sort();
        jobs.dedup();
        for j in jobs {
            // Placements a NonStrict gang held from earlier sessions bind with the rest.
            if self.ssn.job(j).count(TaskStatus::Allocated) > 0 && self.ssn.job_ready(j) {
                self.ssn.bind_held(j);
            }
            self.ssn.record_scheduled(j);
        }
    }

    /// Keeps the tentative changes in the session without binding anything (a gang that is
    /// pipelined but not yet ready holds its place for the rest of this session only).
    pub fn keep(mut self) {
        self.ops.clear();
    }

    /// Undoes every change in reverse order.
    pub fn discard(mut self) {
        self.undo();
    }

    /// Tasks evicted by this statement since `mark`, in order.
    pub fn evicted_since(&self, mark: usize) -> Vec<TaskRef> {
        self.ops
            .get(mark..)
            .unwrap_or(&[])
            .iter()
            .filter_map(|op| match op {
                Op::Evict { task, .. } => Some(*task),
                _ => None,
            })
            .collect()
    }

    /// A point to roll back to: how many changes the statement holds.
    pub fn mark(&self) -> usize {
        self.ops.len()
    }

    /// Undoes, in reverse order, every change made since `mark`.
    pub fn rollback_to(&mut self, mark: usize) {
        while self.ops.len() > mark {
            self.undo_last();
        }
    }

    fn undo(&mut self) {
        self.rollback_to(0);
    }

    fn undo_last(&mut self) {
        if let Some(op) = self.ops.pop() {
            match op {
                Op::Allocate { task, prev } | Op::Pipeline { task, prev } => {
                    self.ssn.unallocate_task(task, prev)
                }
                Op::Evict { task, prev, .. } => self.ssn.unevict_task(task, prev),
            }
        }
    }
}

impl Drop for Statement<'_> {
    fn drop(&mut self) {
        self.undo();
    }
}
