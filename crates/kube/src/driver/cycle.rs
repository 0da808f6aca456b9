//! A scheduling cycle's decision, synchronous: from the index, through the engine, to a
//! `CyclePlan` of binds, evictions, claim patches and device commits; the verdicts, pods'
//! PodScheduled conditions and events it makes are recorded in the index, which the status
//! writer and the event publisher read. No I/O here: what is to be sent goes out through
//! `Writers` (the binder and the claim writers in the driver, fakes in the unit tests), so
//! the cycle is tested without a runtime or a cluster (`cycle_tests.rs`). The async shell
//! (`Cycles::run` in `mod.rs`) only paces cycles, calls `Decider::decide`, and hands the
//! plan to the writers.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tracing::{debug, info, warn};

use crate::events::{pod_ref, EventType};
use crate::framework::{
    Bind, Blocker, ConditionKind, Eviction, GangReason, JobCondition, Scheduler, SessionResult,
};
use crate::in_flight::InFlight;
use crate::index::dra_commits::{self, GangCommit};
use crate::index::{lock, Index};
use crate::leadership::Leadership;
use crate::metrics::{CycleTimer, Metrics};
use crate::model::PodGroupPhase;
use crate::pacing::CyclePacer;
use crate::provision::{CalledOff, ClaimPatch, VOLUME_BINDING_FAILED};
use crate::recovery::Release;

/// Where a cycle's writes go: each call hands its writes on and returns at once (the
/// writers run on their own). The binder and the claim writers in the driver; fakes that
/// record in the unit tests.
pub trait Writers {
    /// Binds and evictions, already assumed in the cache.
    fn send_now(&self, binds: Vec<Bind>, evictions: Vec<Eviction>);
    /// Claims' selected-node annotations, set or cleared. A claim that cannot be annotated
    /// calls its gang off at the next cycle.
    fn patch_claims(&self, patches: Vec<ClaimPatch>);
    /// Each gang's DRA claim allocations, written before its binds (see `dra_commit`).
    fn commit_devices(&self, commits: Vec<GangCommit>);
}

/// What a cycle decided, for the writers. The verdicts, pods' conditions and events it
/// made are in the index already (see the module's comment).
#[derive(Default)]
pub struct CyclePlan {
    /// Whole gangs' binds, assumed in the cache.
    pub binds: Vec<Bind>,
    /// Victims of preempt and reclaim, assumed in the cache.
    pub evictions: Vec<Eviction>,
    /// Selected-node annotations of WaitForFirstConsumer claims (their gangs' binds wait
    /// for the claims to be provisioned).
    pub claim_patches: Vec<ClaimPatch>,
    /// Gangs whose DRA claims are written before their binds.
    pub device_commits: Vec<GangCommit>,
}

/// The scheduling loop's decision and what it keeps between cycles.
pub struct Decider {
    pub scheduler: Scheduler,
    /// Gangs marked as recovering in the cache, to unmark once they are whole again.
    recovering: HashSet<String>,
    first_cycle: bool,
    /// When the next cycle may start (see `pacing`).
    pub pacer: CyclePacer,
    /// The wall clock in ms (`clock::now_ms`; tests fix it).
    pub clock: fn() -> i64,
}

impl Decider {
    pub fn new(scheduler: Scheduler, now: Instant) -> Self {
        Decider {
            scheduler,
            recovering: HashSet::new(),
            first_cycle: true,
            pacer: CyclePacer::new(now),
            clock: crate::clock::now_ms,
        }
    }

    /// One cycle's decision, or None when no cycle may run: a kind's list is not in
    /// (deciding on a partial list would hand out room that pods not listed yet already
    /// hold) or this replica does not lead (a standby keeps its cache warm and decides
    /// nothing). Before the engine runs, the gangs a refused bind left short past their
    /// time are released and the gangs whose claims are provisioned are sent (through
    /// `writers`); then the engine runs on a snapshot with the index unlocked, so watches
    /// go on meanwhile; then its binds and evictions are assumed in the cache, held for
    /// claims to provision or DRA claims to write, and its verdicts recorded.
    pub fn decide(
        &mut self,
        index: &Mutex<Index>,
        leadership: &Leadership,
        metrics: &Metrics,
        in_flight: &InFlight,
        writers: &dyn Writers,
        started: Instant,
    ) -> Option<CyclePlan> {
        let now_ms = self.clock;
        let (snapshot, snapshot_took, releases, provisioned, commits, clear) = {
            let mut ix = lock(index);
            let ready = ix.readiness.complete();
            metrics
                .ready
                .store(ready, std::sync::atomic::Ordering::Relaxed);
            if !ready {
                debug!(waiting_for = ?ix.readiness.waiting_for(), "no cycle until every list is in");
                return None;
            }
            if !leadership.is_leader() {
                return None;
            }
            ix.report_missing_groups(now_ms());
            ix.report_workload_refs();
            let before = ix.cache.snapshot();
            ix.report_topology_problems(&before);
            let releases = ix.recovery.review(&before, now_ms());
            let now_short: HashSet<String> = ix.recovery.gangs().map(String::from).collect();
            for gang in self.recovering.difference(&now_short) {
                ix.cache.set_gang_recovering(gang, false);
            }
            for gang in &now_short {
                ix.cache.set_gang_recovering(gang, true);
            }
            self.recovering = now_short;
            let evictions = release_evictions(&mut ix, &releases);
            // The released members are on their way out before this cycle decides.
            assume(&mut ix, in_flight, &[], &evictions);
            // Gangs whose claims are provisioned bind now; gangs whose claims were not
            // give their room back before this cycle decides.
            for uid in ix.provisioning.backoffs_over(now_ms()) {
                ix.refresh_volume_pod(&uid);
            }
            let ixr = &mut *ix;
            let review = ixr
                .provisioning
                .review(&ixr.volume_objects, &ixr.cache, now_ms());
            let clear = call_off(in_flight, &mut ix, review.called_off, now_ms());
            metrics
                .volcano
                .observe_pre_bound(&ix.cache, &review.ready, &review.waited, now_ms());
            // Pods whose gang's device commit failed are candidates again once their
            // back-off is over; provisioned gangs with DRA claims write them first.
            ix.end_device_backoffs(now_ms());
            let (provisioned, commits) = dra_commits::split(&mut ix, review.ready);
            in_flight.count_unseen(&ix.cache);
            let taking = Instant::now();
            let snapshot = ix.cache.snapshot();
            (
                snapshot,
                taking.elapsed(),
                evictions,
                provisioned,
                commits,
                clear,
            )
        };
        writers.patch_claims(clear);
        writers.commit_devices(commits);
        if !provisioned.is_empty() {
            writers.send_now(provisioned, Vec::new());
        }
        if !releases.is_empty() {
            metrics
                .victims
                .with_label_values(&["release"])
                .inc_by(releases.len() as u64);
            writers.send_now(Vec::new(), releases);
        }
        let (nodes, jobs) = (snapshot.node_count(), snapshot.job_count());
        let mut timer = CycleTimer::start(metrics, snapshot_took);
        let now = now_ms();
        let scheduler = &mut self.scheduler;
        let result = off_the_io_threads(|| scheduler.run_cycle_traced(snapshot, now, &mut timer));
        let took = timer.finish();
        // Only a cycle that decides spaces the next: the lists' wake-ups at start must not
        // delay the first cycle.
        self.pacer.ran(started, started.elapsed());
        let stuck: Vec<_> = result
            .job_updates
            .iter()
            .filter(|u| {
                u.condition
                    .as_ref()
                    .is_some_and(|c| c.kind == ConditionKind::Unschedulable)
            })
            .collect();
        metrics.unschedulable_gangs.set(stuck.len() as i64);
        metrics.placement_search(&result.placement_search);
        let unschedulable_pods: usize = stuck.iter().map(|u| u.task_reasons.len()).sum();
        metrics
            .volcano
            .schedule_attempts
            .with_label_values(&["unschedulable"])
            .inc_by(unschedulable_pods as u64);
        if self.first_cycle {
            // With the lists' log lines, what a (re)start costs before its first bind.
            self.first_cycle = false;
            info!(
                nodes,
                jobs,
                binds = result.binds.len(),
                ?took,
                "first cycle"
            );
        } else {
            debug!(
                nodes,
                jobs,
                binds = result.binds.len(),
                updates = result.job_updates.len(),
                took = ?started.elapsed(),
                "cycle"
            );
        }
        let SessionResult {
            binds,
            evictions,
            job_updates,
            predictions,
            ..
        } = result;
        let mut ix = lock(index);
        assume(&mut ix, in_flight, &binds, &evictions);
        dra_commits::reserve_devices(&mut ix, &binds);
        metrics.volcano.observe_assumed(&ix.cache, &binds, now_ms());
        // Gangs with WaitForFirstConsumer claims bind once those are provisioned.
        let ixr = &mut *ix;
        let (binds, claim_patches, conflicts) = ixr.provisioning.hold(&ixr.cache, binds, now_ms());
        call_off(in_flight, &mut ix, conflicts, now_ms());
        // Gangs with DRA claims to write bind once every claim is written.
        let (binds, device_commits) = dra_commits::split(&mut ix, binds);
        in_flight.count_unseen(&ix.cache);
        metrics
            .volcano
            .observe_pre_bound(&ix.cache, &binds, &[], now_ms());
        if self.scheduler.predicting().is_some() {
            metrics.predicted_starts(&predictions);
            ix.predicted_at = now;
            ix.predictions = predictions
                .into_iter()
                .map(|(uid, p)| (uid.to_string(), p))
                .collect();
        }
        record_verdicts(&mut ix, &job_updates);
        count_victims(&ix, metrics, &evictions);
        Some(CyclePlan {
            binds,
            evictions,
            claim_patches,
            device_commits,
        })
    }
}

/// Marks binds and evictions in the cache before anything is sent, so that the next cycle
/// (and the status written for this one) sees them; the writes waiting for binds to be
/// seen count them.
pub fn assume(ix: &mut Index, in_flight: &InFlight, binds: &[Bind], evictions: &[Eviction]) {
    for b in binds {
        ix.cache
            .assume(&b.task, crate::cache::Assumption::Bind(b.node.clone()));
    }
    for e in evictions {
        ix.cache.assume(&e.task, crate::cache::Assumption::Evict);
    }
    in_flight.count_unseen(&ix.cache);
}

/// Runs a cycle without holding up the API connections: the runtime hands this thread's
/// work to another while it decides (`block_in_place`), so watches are read and binds
/// answered during a long cycle even with one I/O thread (`--io-threads`). A runtime on
/// the current thread only (a test's), or none (the unit tests'), runs it in place.
fn off_the_io_threads<T>(cycle: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(cycle),
        _ => cycle(),
    }
}

/// Counts a cycle's victims: preempt (the preemptor's queue is the victim's) or reclaim
/// (another queue's), and Volcano's preemption gauges.
fn count_victims(ix: &Index, metrics: &Metrics, evictions: &[Eviction]) {
    let state = ix.cache.state();
    let queue_of = |job: &str| state.job_by_uid(job).map(|id| state.job(id).queue.clone());
    let (mut preempt, mut reclaim) = (0u64, 0u64);
    let mut preemptors = HashSet::new();
    for e in evictions {
        let Some(preemptor) = &e.preemptor else {
            continue;
        };
        if queue_of(preemptor) == queue_of(&e.job) {
            preempt += 1;
            preemptors.insert(preemptor.clone());
        } else {
            reclaim += 1;
        }
    }
    metrics
        .victims
        .with_label_values(&["preempt"])
        .inc_by(preempt);
    metrics
        .victims
        .with_label_values(&["reclaim"])
        .inc_by(reclaim);
    metrics.volcano.preemption_victims.set(preempt as i64);
    metrics
        .volcano
        .preemption_attempts
        .inc_by(preemptors.len() as u64);
}

/// Evictions for the bound members of gangs whose recovery ran out, with a condition and
/// an event on the gang naming the member whose bind was refused.
fn release_evictions(ix: &mut Index, releases: &[Release]) -> Vec<Eviction> {
    let mut evictions = Vec::new();
    for r in releases {
        warn!(gang = %r.gang, "{}", r.message);
        ix.recovery.note(&r.gang, &r.message);
        if let Some(obj) = ix.group_ref(&r.gang) {
            ix.events
                .report(obj, EventType::Warning, "GangBindFailed", r.message.clone());
        }
        for uid in &r.binding {
            ix.cache.drop_assumption(uid);
        }
        for uid in &r.members {
            let Some(p) = ix.cache.pod(uid) else {
                continue;
            };
            evictions.push(Eviction {
                job: Arc::from(r.gang.as_str()),
                task: uid.clone(),
                namespace: p.task.namespace.clone(),
                name: p.task.name.clone(),
                node: p.task.node.clone(),
                preemptor: None,
                reason: r.message.clone(),
            });
        }
    }
    evictions
}

/// Gangs whose claims could not be provisioned give their room back: the assumptions of
/// their held binds are dropped, their pods back off, and an event on the gang and each
/// pod (and the gang's condition, while it backs off) say why. Returns the annotations to
/// clear.
fn call_off(
    in_flight: &InFlight,
    ix: &mut Index,
    called_off: Vec<CalledOff>,
    now_ms: i64,
) -> Vec<ClaimPatch> {
    if called_off.is_empty() {
        return Vec::new();
    }
    let mut clear = Vec::new();
    for c in called_off {
        warn!(gang = %c.gang, "{}", c.message);
        // Its pods back off (their volume rules say why, so the gang's condition names
        // the claim), or the gang would take the same room again at once.
        let why = ix.provisioning.back_off(&c, now_ms);
        dra_commits::release_devices(ix, &c.binds);
        for b in &c.binds {
            ix.cache.drop_assumption(&b.task);
            ix.refresh_volume_pod(&b.task);
            let r = pod_ref(&b.namespace, &b.name, &b.task);
            ix.events
                .report(r, EventType::Warning, VOLUME_BINDING_FAILED, why.clone());
        }
        if let Some(obj) = ix.group_ref(&c.gang) {
            ix.events
                .report(obj, EventType::Warning, VOLUME_BINDING_FAILED, why);
        }
        clear.extend(c.clear);
    }
    // Their binds' assumptions are gone: writes waiting for the binds to be seen may go.
    in_flight.count_unseen(&ix.cache);
    clear
}

/// The reason of the one event a PodGroup gets while its gang has fewer pods than its
/// minimum (the pods' PodScheduled reason too).
pub const FORMING_EVENT: &str = "GangIncomplete";

/// The PodScheduled message of a forming gang's pods (its condition has the counts).
pub const FORMING_MESSAGE: &str =
    "waiting for the rest of its gang: fewer of its pods exist than it needs";

/// The PodScheduled message of the pods of a gang waiting for members held back: the gates
/// and reasons, not the counts (which would rewrite every member as each gate is lifted).
fn held_message(ix: &Index, gang: &str) -> String {
    let s = ix.cache.state();
    let Some(job) = s.job_by_uid(gang).map(|id| s.job(id)) else {
        return "waiting for members of its gang held back".to_string();
    };
    format!(
        "waiting for members of its gang that are {}",
        job.held_back.reasons()
    )
}

/// What a cycle decided about gangs: their verdicts (for status, events and the debug
/// API), phases, runtimes and holds.
fn record_verdicts(ix: &mut Index, updates: &[crate::framework::JobUpdate]) {
    for u in updates {
        if let Some(phase) = u.phase {
            ix.cache.set_job_phase(&u.job, phase);
        }
        // A gang that starts running without this cycle placing it (binds an earlier
        // instance sent before it died, landing now) is scheduled: an Unschedulable verdict
        // from before is stale.
        let started = matches!(u.phase, Some(PodGroupPhase::Running)) && u.condition.is_none();
        let scheduled = started
            .then(|| {
                let s = ix.cache.state();
                s.job_by_uid(&u.job)
                    .map(|id| JobCondition::scheduled(s.job(id)))
            })
            .flatten();
        let Some(c) = u.condition.as_ref().or(scheduled.as_ref()) else {
            continue;
        };
        // The predicted start (with --predict-start) ends a waiting gang's message.
        let predicted = ix
            .predictions
            .get(&*u.job)
            .filter(|_| c.kind == ConditionKind::Unschedulable);
        let c = match predicted {
            Some(p) => &JobCondition {
                message: format!("{}; {}", c.message, p.stated(ix.predicted_at)),
                ..c.clone()
            },
            None => c,
        };
        let c = match ix.recovery.noted(&u.job, c.kind) {
            Some(note) => JobCondition {
                message: format!("{}; {note}", c.message),
                ..c.clone()
            },
            None => c.clone(),
        };
        // Scheduled, but its binds wait for its claims: say so, or its pods look stuck.
        let c = match ix.provisioning.waiting_claims(&u.job) {
            Some(claims) if c.kind == ConditionKind::Scheduled => JobCondition {
                message: format!(
                    "{}; binds wait for its WaitForFirstConsumer claims to be provisioned: {claims}",
                    c.message
                ),
                ..c
            },
            _ => c,
        };
        ix.record_verdict(&u.job, (Some(c.clone()), u.task_reasons.clone()));
        // Each pending pod's PodScheduled=False condition: `Unschedulable` (what cluster
        // autoscalers act on) only when more nodes would help; written on change only.
        if let (ConditionKind::Unschedulable, Some(blocker)) = (c.kind, u.blocked_by) {
            // A forming gang's message counts its pods, which would rewrite every member
            // as each sibling arrives: its pods get a message that stays put.
            let message = match blocker {
                Blocker::Forming => FORMING_MESSAGE.to_string(),
                // Likewise the counts of held members: the gates and reasons stay put.
                Blocker::Gated | Blocker::Refused => held_message(ix, &u.job),
                _ => c.message.clone(),
            };
            for (uid, _) in &u.task_reasons {
                ix.want_pod_condition(uid, blocker.pod_reason(), &message);
            }
        }
        // The PodGroup gets an event when its verdict changes (deduplicated); a gang
        // still forming (NotEnoughTasks) only updates its condition: an event per pod per
        // arriving sibling would flood the API server.
        let forming = c.reason == GangReason::NotEnoughTasks;
        if forming {
            // One event on the PodGroup while its gang forms, in words that stay put (its
            // condition counts the pods): a minimum larger than the pods that ever come is
            // said once, not at each arriving sibling.
            let min = {
                let s = ix.cache.state();
                s.job_by_uid(&u.job).map(|id| s.job(id).min_member)
            };
            if let (Some(r), Some(min)) = (ix.group_ref(&u.job), min) {
                let message = format!(
                    "waiting for its pods: fewer exist than its minimum of {min} (its \
                     condition counts them)"
                );
                ix.events
                    .report(r, EventType::Normal, FORMING_EVENT, message);
            }
            continue;
        }
        if let Some(r) = ix.group_ref(&u.job) {
            let (kind, reason) = match (c.kind, c.reason) {
                (ConditionKind::Scheduled, _) => (EventType::Normal, "Scheduled"),
                // Gates are how admission controllers (Kueue) work: nothing is wrong.
                (_, GangReason::SchedulingGated) => (EventType::Normal, "SchedulingGated"),
                (ConditionKind::Unschedulable, _) => (EventType::Warning, "Unschedulable"),
            };
            ix.events.report(r, kind, reason, c.message.clone());
        }
        // Members held back were told why on their own; their waiting siblings are told
        // by their condition, not by an event per sibling per change of the counts.
        let held = matches!(
            c.reason,
            GangReason::SchedulingGated | GangReason::Unsupported
        );
        if c.kind == ConditionKind::Unschedulable && !held {
            for (uid, why) in &u.task_reasons {
                let Some(p) = ix.cache.pod(uid) else {
                    continue;
                };
                let r = pod_ref(&p.task.namespace, &p.task.name, uid);
                let message = format!("{}; this pod: {why}", c.message);
                ix.events
                    .report(r, EventType::Warning, "FailedScheduling", message);
            }
        }
    }
    // Gang runtimes (waiting clocks, backoffs) and NonStrict holds live in the cache: the
    // API server never sees a hold, only the bind once the whole gang fits.
    ix.cache.apply_gang_updates(updates);
}

#[cfg(test)]
mod tests;
