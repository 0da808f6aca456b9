//! EASY backfill's reservation: the head-of-line gang that allocate could not place gets
//! the nodes and the time ("shadow time") at which, by the running pods' runtime
//! estimates, its pending pods will fit. Later gangs are then left to the backfill action,
//! which places them only where they do not delay that reservation.
//!
//! The reservation lives for one session (it is recomputed every cycle from the estimates,
//! so it needs no state across cycles) and is only ever made when the `backfill` action is
//! configured (with `reservation` not turned off): otherwise nothing would place the gangs
//! allocate leaves behind. Without runtime estimates nothing is known to end, so no
//! reservation can be made and scheduling is exactly as without one.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use super::outcome::ReservedNodes;
use super::session::Session;
use crate::conf::Flag;
use crate::model::{JobId, NodeId, NodeInfo, NodeTask, Resource, TaskStatus, Timestamp};

/// Where and when the head-of-line gang will fit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reservation {
    pub job: JobId,
    /// The shadow time: by the estimates, the gang's pods fit from then on.
    pub at: Timestamp,
    /// The nodes its pods would get then, in id order.
    pub nodes: Vec<NodeId>,
}

/// A session's reservation bookkeeping.
#[derive(Clone, Debug, Default)]
pub(crate) struct ReservationState {
    /// A reservation was attempted this session (for the first gang allocate could not
    /// place); there is at most one, as in EASY backfill.
    tried: bool,
    reservation: Option<Reservation>,
    /// Gangs allocate left to backfill because a reservation was in force, in the order
    /// allocate reached them.
    deferred: Vec<JobId>,
    /// The releases the reservation was computed from. Tasks placed later in the session
    /// are not among them, so checks against this list count them as never ending: safe
    /// for the reservation, and computed once rather than per backfilled gang.
    releases: Vec<Release>,
}

/// A running (or just placed) task that frees its node at `end`, by its estimate.
#[derive(Clone, Debug)]
pub(super) struct Release {
    pub(super) end: Timestamp,
    pub(super) node: NodeId,
    pub(super) uid: Arc<str>,
}

/// `Session::place_pending`'s answers for one template: per static candidate (in id order),
/// its score where the pod fits; and the nodes changed since they were asked.
struct TemplateScores {
    scores: Vec<Option<f64>>,
    changed: Vec<NodeId>,
}

impl Session {
    /// Whether reservations are made this session: the backfill action is configured and
    /// its `reservation` argument is not false.
    pub fn reservations_enabled(&self) -> bool {
        let conf = self.conf();
        conf.actions.iter().any(|a| a == "backfill")
            && conf
                .configurations
                .get("backfill")
                .and_then(|args| args.get::<Flag>("reservation").ok().flatten())
                != Some(Flag(false))
    }

    /// The reservation in force this session, if any.
    pub fn reservation(&self) -> Option<&Reservation> {
        self.reservations.reservation.as_ref()
    }

    /// Tries to reserve for `job`, the first gang this session could not place (later calls
    /// do nothing): succeeds when its pending pods fit once running pods end by their
    /// estimates. Call it after the gang's statement was discarded.
    pub fn reserve(&mut self, job: JobId) -> Option<&Reservation> {
        if self.reservations.tried || !self.reservations_enabled() {
            return None;
        }
        self.reservations.tried = true;
        let releases = self.releases();
        let reservation = self.find_reservation(job, &releases)?;
        self.reservations.reservation = Some(reservation);
        self.reservations.releases = releases;
        self.reservations.reservation.as_ref()
    }

    /// Whether allocate must leave `job` to backfill: a reservation for another gang is in
    /// force. Records the gang for backfill if so.
    pub fn defer_to_backfill(&mut self, job: JobId) -> bool {
        match &self.reservations.reservation {
            Some(r) if r.job != job => {
                self.reservations.deferred.push(job);
                true
            }
            _ => false,
        }
    }

    /// The gangs allocate left to backfill, in allocate's order (emptied).
    pub fn take_deferred(&mut self) -> Vec<JobId> {
        std::mem::take(&mut self.reservations.deferred)
    }

    /// Whether the reservation still holds with `job`'s tentative placements (its tasks
    /// Allocated in this session) in force: the gang ends by the shadow time, or uses no
    /// reserved node, or the reserved gang still fits at the shadow time with it there (on
    /// the same or other nodes; the reservation then moves to those). True when no
    /// reservation is in force. Call it right before committing the gang: on true, its
    /// estimated ends are taken into account for the gangs checked after it.
    pub fn keeps_reservation(&mut self, job: JobId) -> bool {
        let Some(r) = self.reservations.reservation.clone() else {
            return true;
        };
        if job == r.job {
            return true;
        }
        let j = self.job(job);
        let placed: Vec<(Option<Timestamp>, Option<NodeId>, Arc<str>)> = j
            .tasks()
            .iter()
            .filter(|t| t.status == TaskStatus::Allocated)
            .map(|t| {
                (
                    self.task_end(j, t),
                    t.node.as_deref().and_then(|n| self.state().node_by_name(n)),
                    t.uid.clone(),
                )
            })
            .collect();
        let ends_in_time = placed
            .iter()
            .all(|(end, ..)| end.is_some_and(|e| e <= r.at));
        let off_reserved = placed
            .iter()
            .all(|(_, n, _)| n.is_none_or(|n| r.nodes.binary_search(&n).is_err()));
        let keeps = ends_in_time || off_reserved || {
            let releases = std::mem::take(&mut self.reservations.releases);
            let fit = self.fit_at(r.job, r.at, &releases);
            self.reservations.releases = releases;
            match fit {
                Some(nodes) => {
                    if let Some(res) = self.reservations.reservation.as_mut() {
                        res.nodes = nodes;
                    }
                    true
                }
                None => false,
            }
        };
        if keeps {
            let releases = &mut self.reservations.releases;
            for (end, node, uid) in placed {
                if let (Some(end), Some(node)) = (end, node) {
                    releases.push(Release { end, node, uid });
                }
            }
            releases.sort_by(|a, b| (a.end, a.node, &a.uid).cmp(&(b.end, b.node, &b.uid)));
        }
        keeps
    }

    /// Running and just-placed tasks with an estimate, by estimated end (then node, uid).
    pub(super) fn releases(&self) -> Vec<Release> {
        let mut out = Vec::new();
        let holding = [
            TaskStatus::Allocated,
            TaskStatus::Binding,
            TaskStatus::Bound,
            TaskStatus::Running,
        ];
        for (_, job) in self.state().jobs() {
            // Most gangs of a long run have finished or not started: their counts say so
            // without reading their tasks.
            if holding.iter().all(|s| job.count(*s) == 0) {
                continue;
            }
            for t in job.tasks() {
                if !matches!(
                    t.status,
                    TaskStatus::Allocated
                        | TaskStatus::Binding
                        | TaskStatus::Bound
                        | TaskStatus::Running
                ) {
                    continue;
                }
                let (Some(end), Some(node)) = (
                    self.task_end(job, t),
                    t.node.as_deref().and_then(|n| self.state().node_by_name(n)),
                ) else {
                    continue;
                };
                out.push(Release {
                    end,
                    node,
                    uid: t.uid.clone(),
                });
            }
        }
        out.sort_by(|a, b| (a.end, a.node, &a.uid).cmp(&(b.end, b.node, &b.uid)));
        out
    }

    /// The earliest estimated end at which `job`'s pending pods fit, and where.
    fn find_reservation(&mut self, job: JobId, releases: &[Release]) -> Option<Reservation> {
        let pending = self.tasks_in(job, TaskStatus::Pending);
        if pending.is_empty() {
            return None;
        }
        // A gang held back by its queue's capability, not by nodes, has nothing to reserve.
        let queue = self.job(job).queue.clone();
        if let Some(q) = self.queue(&queue) {
            if pending.iter().any(|t| !self.allocatable(q, *t)) {
                return None;
            }
        }
        if releases.is_empty() {
            return None;
        }
        // Cheap necessary condition before a placement attempt: the gang's total request
        // fits in what the cluster has free by then.
        let mut need = Resource::new();
        for t in &pending {
            need.add(&self.task(*t).resreq);
        }
        let mut free = self.cluster_free().clone();
        let mut i = 0;
        while i < releases.len() {
            let at = releases[i].end;
            while i < releases.len() && releases[i].end == at {
                let r = &releases[i];
                let node = self.node(r.node);
                if node.schedulable() {
                    if let Some(t) = node.tasks.get(&r.uid) {
                        free.add(&t.resreq);
                    }
                }
                i += 1;
            }
            if !need.without_pods().fits(&free) {
                continue;
            }
            if let Some(nodes) = self.fit_at(job, at, releases) {
                return Some(Reservation { job, at, nodes });
            }
        }
        None
    }

    /// Places `job`'s pending pods on the cluster as it will be at `at` (every task whose
    /// estimated end is at or before `at` gone), greedily in task order on the best-scoring
    /// node that passes every predicate. The nodes used, if enough pods fit for the gang
    /// to be ready (minMember and every role's minimum).
    fn fit_at(&mut self, job: JobId, at: Timestamp, releases: &[Release]) -> Option<Vec<NodeId>> {
        let mut future: BTreeMap<NodeId, NodeInfo> = BTreeMap::new();
        for r in releases.iter().take_while(|r| r.end <= at) {
            future
                .entry(r.node)
                .or_insert_with(|| self.node(r.node).clone())
                .remove_task(&r.uid);
        }
        let placed = self.place_pending(job, &BTreeMap::new(), &mut future)?;
        let used: BTreeSet<NodeId> = placed.into_iter().map(|(n, _)| n).collect();
        Some(used.into_iter().collect())
    }

    /// Places `job`'s pending pods on the nodes as they will be (a node in `future`, else
    /// in `base`, else as it is now), greedily in task order on the best-scoring node that
    /// passes every predicate, adding them to `future`. What it placed, if enough pods fit
    /// for the gang to be ready (minMember and every role's minimum).
    pub(super) fn place_pending(
        &mut self,
        job: JobId,
        base: &BTreeMap<NodeId, NodeInfo>,
        future: &mut BTreeMap<NodeId, NodeInfo>,
    ) -> Option<Vec<(NodeId, crate::model::TaskRef)>> {
        let pending = self.tasks_in(job, TaskStatus::Pending);
        let j = self.job(job);
        let mut missing = j.min_member.saturating_sub(j.ready_count()) as i64;
        let ready_by_role = j.by_role(TaskStatus::is_ready);
        let mut role_missing: BTreeMap<Arc<str>, i64> = j
            .min_task_member
            .iter()
            .map(|(role, min)| {
                let have = ready_by_role.get(&**role).copied().unwrap_or(0);
                (role.clone(), *min as i64 - have as i64)
            })
            .collect();
        let job_uid = j.uid.clone();
        let mut placed = Vec::new();
        // Per template, each static candidate's score where the pod fits (predicates and
        // scores depend on the template and the node alone): only the node a pod was just
        // put on changes within this call, so only it is asked again, not every candidate
        // for every pod of a large gang.
        let mut answers: HashMap<u64, TemplateScores> = HashMap::new();
        for task in pending {
            if missing <= 0 && role_missing.values().all(|m| *m <= 0) {
                break;
            }
            let candidates = self.static_nodes(task);
            let t = self.task(task);
            let ask = |n: NodeId| {
                let node = future
                    .get(&n)
                    .or_else(|| base.get(&n))
                    .unwrap_or_else(|| self.node(n));
                if !node.fits_future_idle(&t.resreq)
                    || self.votes.predicate.all().any(|f| f(t, node).is_err())
                {
                    return None;
                }
                Some(self.votes.node_order.all().map(|f| f(t, node)).sum::<f64>())
            };
            let entry = answers.entry(t.template).or_insert_with(|| TemplateScores {
                scores: candidates.nodes().iter().map(|&n| ask(n)).collect(),
                changed: Vec::new(),
            });
            for n in entry.changed.drain(..) {
                if let Ok(pos) = candidates.nodes().binary_search(&n) {
                    entry.scores[pos] = ask(n);
                }
            }
            let mut best: Option<(NodeId, f64)> = None;
            for (&n, score) in candidates.nodes().iter().zip(&entry.scores) {
                let Some(score) = *score else { continue };
                if best.is_none_or(|(_, b)| score > b) {
                    best = Some((n, score));
                }
            }
            let Some((n, _)) = best else {
                continue;
            };
            for other in answers.values_mut() {
                other.changed.push(n);
            }
            let node = future
                .entry(n)
                .or_insert_with(|| base.get(&n).unwrap_or_else(|| self.node(n)).clone());
            node.add_task(
                t.uid.clone(),
                NodeTask {
                    status: TaskStatus::Allocated,
                    ..NodeTask::of(t, Some(job_uid.clone()))
                },
            );
            missing -= 1;
            if let Some(m) = role_missing.get_mut(&t.role) {
                *m -= 1;
            }
            placed.push((n, task));
        }
        (missing <= 0 && role_missing.values().all(|m| *m <= 0)).then_some(placed)
    }

    /// When a task is expected to free its node (see `TaskInfo::estimated_end`), its
    /// queue's default estimate standing in for a missing or unusable one of its own.
    pub fn task_end(
        &self,
        job: &crate::model::JobInfo,
        task: &crate::model::TaskInfo,
    ) -> Option<Timestamp> {
        let fallback = self
            .queue(&job.queue)
            .and_then(|q| q.default_runtime_estimate);
        task.estimated_end_or(self.now, fallback)
    }

    /// The reservation by node name, as a job update carries it.
    pub fn reserved_nodes(&self, r: &Reservation) -> ReservedNodes {
        ReservedNodes {
            nodes: r.nodes.iter().map(|n| self.node(*n).name.clone()).collect(),
            from: r.at,
        }
    }

    /// "reserved: nodes gpu-1,gpu-2 from 2026-01-01T10:25:00Z" (see `ReservedNodes`).
    pub fn describe_reservation(&self, r: &Reservation) -> String {
        self.reserved_nodes(r).to_string()
    }
}
