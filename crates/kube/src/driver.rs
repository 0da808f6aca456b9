//! The live driver wires the parts: one watch task per kind feeds the index (`watch`,
//! `index`); a loop runs a scheduling cycle every period and soon after relevant changes —
//! but only while every kind's list is complete — and hands the result to the binder
//! (`binder`), the status writer (`status`) and the event publisher (`events`). All API
//! writes pass one gate (`retry::Gate`), so an API server that stops answering is probed,
//! not hammered.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ::kube::api::{Api, PostParams};
use ::kube::Client;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::resource::v1::{
    DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::storage::v1::StorageClass;
use tokio::sync::Notify;
use tracing::{debug, info, warn};

use super::bind_limit::{BindLimit, LimitController};
use super::binder::{Binder, InFlight};
use super::dialects::volcano::api::DEFAULT_QUEUE;
use super::dialects::volcano::{HyperNode, Queue};
use super::dialects::workload::Workload;
use super::dialects::KINDS;
use super::dra_commit;
use super::events::{pod_ref, EventType, Events};
use super::index::{lock, Index, Wake};
use super::leader::{ElectionConfig, LeaderError, Leadership};
use super::lean::Lean;
use super::metrics::{CycleTimer, Metrics};
use super::pacing::CyclePacer;
use super::provision::{patch_claim, CalledOff, ClaimPatch, VOLUME_BINDING_FAILED};
use super::recovery::{Release, ShortGangPolicy};
use super::retry::{backoff, warn_limited, Failure, Gate};
use super::status::StatusWriter;
use super::supervise::Watches;
use super::watch::{watch, watch_listing_protobuf, Feed, Sink};
use crate::conf::SchedulerConf;
use crate::framework::{
    Blocker, ConditionKind, Eviction, GangReason, JobCondition, Scheduler, SessionResult,
};
use crate::model::{PodGroupPhase, QueueInfo, ROOT_QUEUE};

pub struct DriverOptions {
    pub scheduler_names: Vec<String>,
    pub schedule_period: Duration,
    /// Objects per page when a watch lists (None: one list; see `watch::Sink`).
    pub list_page_size: Option<u32>,
    pub conf: SchedulerConf,
    /// The file `conf` came from: reloaded when it changes. A bad new file is logged and the
    /// running configuration stays.
    pub conf_path: Option<std::path::PathBuf>,
    /// Binds and evictions in flight at first; the limit then adapts up to
    /// `max_bind_concurrency` (see `bind_limit`).
    pub bind_concurrency: usize,
    pub max_bind_concurrency: usize,
    /// A Scheduled event on each pod at its bind, besides the PodGroup's once per gang.
    pub pod_scheduled_events: bool,
    /// Predict each waiting gang's start time (`Scheduler::predict_starts`).
    pub predict_start: bool,
    /// Where to serve /metrics, /healthz and /readyz (None: nowhere).
    pub http_address: Option<std::net::SocketAddr>,
    /// How long a gang a refused bind left short may wait for its missing members.
    pub short_gang_timeout: Duration,
    /// What happens to it then.
    pub short_gang_policy: ShortGangPolicy,
    /// How long a committed gang waits for its WaitForFirstConsumer claims to be bound.
    pub volume_binding_timeout: Duration,
    /// Leader election (None: this process is the only scheduler).
    pub leader_election: Option<ElectionConfig>,
}

/// How often the queue gauges are recomputed while cycles run.
const QUEUE_GAUGES_EVERY: Duration = Duration::from_secs(1);

/// The floor of the adaptive bind limit: an overloaded API server still gets a few binds.
const MIN_BIND_CONCURRENCY: usize = 4;

pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Runs the scheduler until `shutdown` completes (SIGTERM): then it stops writing, lets
/// the binds in flight finish (a few seconds at most) and releases the leader lease, so a
/// standby takes over at once. Returns an error if the lease is lost otherwise.
pub async fn run(
    client: Client,
    opts: DriverOptions,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), super::KubeError> {
    let mut scheduler =
        Scheduler::new(opts.conf.clone(), &crate::REGISTRY).map_err(super::KubeError::Config)?;
    if opts.predict_start {
        scheduler.predict_starts(Some(Default::default()));
    }
    let metrics = Metrics::new().map_err(|e| super::KubeError::Metrics(e.to_string()))?;
    let leadership = match &opts.leader_election {
        Some(_) => Leadership::elected(Some(metrics.leader.clone())),
        None => {
            metrics.leader.set(1);
            Leadership::always()
        }
    };
    let instance = std::env::var("POD_NAME").unwrap_or_else(|_| "rust-batch".into());
    let gate = Arc::new(Gate::new(leadership.clone()));
    let in_flight = Arc::new(InFlight::default());
    let mut index = Index::new(opts.scheduler_names.clone());
    index.events = Events::start(
        client.clone(),
        instance,
        metrics.clone(),
        gate.clone(),
        in_flight.clone(),
        leadership.clone(),
    );
    index.watch_lag = Some(metrics.watch_lag.clone());
    index.watched = Some(metrics.volcano.task_stage("Watched"));
    index.recovery.timeout = opts.short_gang_timeout;
    index.recovery.policy = opts.short_gang_policy;
    index.provisioning.timeout = opts.volume_binding_timeout;
    let index = Arc::new(Mutex::new(index));
    let wake = Arc::new(Notify::new());
    let wake_soon = Arc::new(Notify::new());
    if let Some(addr) = opts.http_address {
        let m = metrics.clone();
        let routes = super::debug::routes(index.clone());
        tokio::spawn(async move {
            if let Err(e) = super::metrics::serve(addr, m, routes).await {
                warn!(address = %addr, error = %e, "cannot serve /metrics, /healthz, /readyz");
            }
        });
    }
    // Queue default stands in memory from the start, as the object we create (weight 1,
    // reclaimable, open): the Queue watch replaces it with the API server's (ours, or one an
    // admin made), so the first cycle need not wait for our create to come back — the API
    // server answers the first write of a CRD installed a moment ago only after ~2 s.
    lock(&index)
        .cache
        .apply_queue(QueueInfo::new(DEFAULT_QUEUE, 1));
    {
        // A write like any other: only the leader creates it (it usually exists: an earlier
        // leader made it).
        let (client, metrics, gate) = (client.clone(), metrics.clone(), gate.clone());
        tokio::spawn(async move {
            ensure_volcano_queues(&client, &metrics, &gate).await;
        });
    }
    spawn_watches(
        &client,
        &Sink {
            index: index.clone(),
            wake: wake.clone(),
            wake_soon: wake_soon.clone(),
            gate: gate.clone(),
            list_page_size: opts.list_page_size,
            in_flight: in_flight.clone(),
        },
    );
    let election = opts
        .leader_election
        .clone()
        .map(|cfg| super::leader::start(client.clone(), cfg, leadership.clone()));

    let writer = StatusWriter::default();
    tokio::spawn(writer.clone().run(
        client.clone(),
        index.clone(),
        gate.clone(),
        metrics.clone(),
        in_flight.clone(),
    ));
    let binder = Binder {
        client: client.clone(),
        index: index.clone(),
        wake: wake.clone(),
        metrics: metrics.clone(),
        gate: gate.clone(),
        limit: Arc::new(BindLimit::new(LimitController::new(
            opts.bind_concurrency,
            MIN_BIND_CONCURRENCY.min(opts.bind_concurrency),
            opts.max_bind_concurrency.max(opts.bind_concurrency),
        ))),
        refused: Default::default(),
        in_flight,
        fence: opts.leader_election.as_ref().map(|c| {
            Arc::new(super::binder::fence_annotations(
                &c.namespace,
                &c.lease_name,
                &c.identity,
            ))
        }),
        pod_scheduled_events: opts.pod_scheduled_events,
    };
    metrics.bind_limit.set(binder.limit.limit() as i64);
    info!(names = ?opts.scheduler_names, period = ?opts.schedule_period, "rust-batch scheduling");
    let cycles = Cycles {
        scheduler,
        conf_version: opts.conf_path.as_deref().and_then(file_version),
        opts: &opts,
        index: &index,
        wake: &wake,
        wake_soon: &wake_soon,
        metrics: &metrics,
        leadership: &leadership,
        writer: &writer,
        binder: &binder,
    };
    let outcome = tokio::select! {
        r = cycles.run() => r,
        _ = shutdown => Ok(()),
    };
    if let Some(election) = election {
        // Stop writing first: once the lease is free a standby may bind at once.
        let holding = election.step_down();
        if holding && !binder.drained(Duration::from_secs(5)).await {
            warn!("binds still in flight after 5 s; releasing the lease anyway");
        }
        // A lease lost is not ours to release; a standby holds none.
        if holding && outcome.is_ok() {
            election.release().await;
        }
    }
    outcome
}

/// The scheduling loop and what it works with.
struct Cycles<'a> {
    scheduler: Scheduler,
    conf_version: Option<(SystemTime, u64)>,
    opts: &'a DriverOptions,
    index: &'a Arc<Mutex<Index>>,
    wake: &'a Arc<Notify>,
    wake_soon: &'a Arc<Notify>,
    metrics: &'a Arc<Metrics>,
    leadership: &'a Arc<Leadership>,
    writer: &'a StatusWriter,
    binder: &'a Binder,
}

impl Cycles<'_> {
    /// Runs cycles while this replica leads; returns only if the lease is lost.
    async fn run(mut self) -> Result<(), super::KubeError> {
        let (opts, index, wake, metrics, writer, binder) = (
            self.opts,
            self.index,
            self.wake,
            self.metrics,
            self.writer,
            self.binder,
        );
        let mut leader_changes = self.leadership.subscribe();
        // Gangs marked as recovering in the cache, to unmark once they are whole again.
        let mut recovering: HashSet<String> = HashSet::new();
        let mut first_cycle = true;
        let mut pacer = CyclePacer::new(Instant::now());
        let mut gauges_at: Option<Instant> = None;
        let mut usage_recorded_at: Option<Instant> = None;
        loop {
            if let Some(path) = &opts.conf_path {
                reload_if_changed(path, &mut self.conf_version, &mut self.scheduler);
            }
            tokio::select! {
                _ = tokio::time::sleep(opts.schedule_period) => {}
                _ = wake.notified() => {
                    // Idle, decide at once: the change may complete a gang, and a fixed
                    // debounce would be most of its latency. In a burst, cycles are
                    // spaced so its changes land together (see `pacing`).
                    tokio::time::sleep_until(pacer.earliest().into()).await;
                }
                _ = self.wake_soon.notified() => {
                    // Changes nothing waits on (pods running, finishing): gathered for
                    // BURST_CYCLE_SPACING, unless something urgent comes meanwhile.
                    tokio::select! {
                        _ = tokio::time::sleep_until(pacer.gathered().into()) => {}
                        _ = wake.notified() => {
                            tokio::time::sleep_until(pacer.earliest().into()).await;
                        }
                    }
                }
                // A new leader starts its cycles at once.
                _ = leader_changes.changed() => {}
            }
            let started = Instant::now();
            if let Some(why) = self.leadership.lost() {
                return Err(LeaderError::Lost(why).into());
            }
            let (snapshot, snapshot_took, releases, provisioned, clear) = {
                let mut ix = lock(index);
                let ready = ix.readiness.complete();
                metrics
                    .ready
                    .store(ready, std::sync::atomic::Ordering::Relaxed);
                if !ready {
                    // Deciding on a partial list would hand out room that pods not listed yet
                    // already hold.
                    debug!(waiting_for = ?ix.readiness.waiting_for(), "no cycle until every list is in");
                    continue;
                }
                if !self.leadership.is_leader() {
                    // A standby keeps its cache warm and decides nothing.
                    continue;
                }
                ix.report_missing_groups(now_ms());
                ix.report_workload_refs();
                let before = ix.cache.snapshot();
                ix.report_topology_problems(&before);
                let releases = ix.recovery.review(&before, now_ms());
                let now_short: HashSet<String> = ix.recovery.gangs().map(String::from).collect();
                for gang in recovering.difference(&now_short) {
                    ix.cache.set_gang_recovering(gang, false);
                }
                for gang in &now_short {
                    ix.cache.set_gang_recovering(gang, true);
                }
                recovering = now_short;
                let evictions = release_evictions(&mut ix, &releases);
                // The released members are on their way out before this cycle decides.
                binder.assume(&mut ix, &[], &evictions);
                // Gangs whose claims are provisioned bind now; gangs whose claims were not
                // give their room back before this cycle decides.
                for uid in ix.provisioning.backoffs_over(now_ms()) {
                    ix.refresh_volume_pod(&uid);
                }
                let ixr = &mut *ix;
                let review = ixr
                    .provisioning
                    .review(&ixr.volume_objects, &ixr.cache, now_ms());
                let clear = call_off(binder, &mut ix, review.called_off);
                metrics.volcano.observe_pre_bound(
                    &ix.cache,
                    &review.ready,
                    &review.waited,
                    now_ms(),
                );
                // Pods whose gang's device commit failed are candidates again once their
                // back-off is over; provisioned gangs with DRA claims write them first.
                ix.end_device_backoffs(now_ms());
                let (provisioned, commits) = dra_commit::split(&mut ix, review.ready);
                binder.recount_unseen(&ix);
                let taking = Instant::now();
                let snapshot = ix.cache.snapshot();
                (
                    snapshot,
                    taking.elapsed(),
                    evictions,
                    (provisioned, commits),
                    clear,
                )
            };
            let (provisioned, commits) = provisioned;
            send_claim_patches(binder, clear);
            commit_devices(binder, commits);
            if !provisioned.is_empty() {
                binder.send(provisioned, Vec::new()).await;
            }
            if !releases.is_empty() {
                metrics
                    .victims
                    .with_label_values(&["release"])
                    .inc_by(releases.len() as u64);
                binder.send(Vec::new(), releases).await;
            }
            let (nodes, jobs) = (snapshot.node_count(), snapshot.job_count());
            let mut timer = CycleTimer::start(metrics, snapshot_took);
            let now = now_ms();
            let result =
                off_the_io_threads(|| self.scheduler.run_cycle_traced(snapshot, now, &mut timer));
            let took = timer.finish();
            // Only a cycle that decides spaces the next: the lists' wake-ups at start
            // must not delay the first cycle.
            pacer.ran(started, started.elapsed());
            let stuck: Vec<_> = result
                .job_updates
                .iter()
                .filter(|u| {
                    u.condition
                        .as_ref()
                        .is_some_and(|c| c.kind == ConditionKind::Unschedulable)
                })
                .collect();
            let unschedulable = stuck.len();
            metrics.unschedulable_gangs.set(unschedulable as i64);
            metrics.placement_search(&result.placement_search);
            let unschedulable_pods: usize = stuck.iter().map(|u| u.task_reasons.len()).sum();
            metrics
                .volcano
                .schedule_attempts
                .with_label_values(&["unschedulable"])
                .inc_by(unschedulable_pods as u64);
            if first_cycle {
                // With the lists' log lines, what a (re)start costs before its first bind.
                first_cycle = false;
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
            let (binds, patches, commits) = {
                let mut ix = lock(index);
                binder.assume(&mut ix, &binds, &evictions);
                dra_commit::reserve_devices(&mut ix, &binds);
                metrics.volcano.observe_assumed(&ix.cache, &binds, now_ms());
                // Gangs with WaitForFirstConsumer claims bind once those are provisioned.
                let ixr = &mut *ix;
                let (binds, patches, conflicts) =
                    ixr.provisioning.hold(&ixr.cache, binds, now_ms());
                call_off(binder, &mut ix, conflicts);
                // Gangs with DRA claims to write bind once every claim is written.
                let (binds, commits) = dra_commit::split(&mut ix, binds);
                binder.recount_unseen(&ix);
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
                (binds, patches, commits)
            };
            send_claim_patches(binder, patches);
            commit_devices(binder, commits);
            binder.send(binds, evictions).await;
            // The binds are on their way before what only reports on this cycle: status
            // patches (written after the binds anyway) and the queue gauges. Their tasks
            // were only spawned, onto this worker's queue: yielding lets them write their
            // requests first, instead of after the bookkeeping below (which holds the index
            // their node check reads) — traced on an idle cluster, a gang's last bind left
            // up to 5 ms after its first.
            tokio::task::yield_now().await;
            let (seen, previous_look) = {
                let mut ix = lock(index);
                let previous_look = writer.mark_touched(&mut ix, now_ms());
                metrics.status_backlog.set(writer.backlog() as i64);
                (ix.cache.snapshot(), previous_look)
            };
            drop(previous_look);
            // At most once per QUEUE_GAUGES_EVERY (they read the kept per-queue sums now, but
            // a gauge per queue and resource is still a few hundred label lookups): the
            // periodic cycle brings them up to date once changes stop.
            if gauges_at.is_none_or(|at| at.elapsed() >= QUEUE_GAUGES_EVERY) {
                gauges_at = Some(Instant::now());
                metrics.volcano.observe_queues(&seen, self.scheduler.conf());
                metrics.volcano.observe_jobs(&seen, self.scheduler.conf());
                let usage = self.scheduler.queue_usage();
                metrics.queue_usages(usage.as_ref());
                // Fair share over time survives a restart through the Queue objects.
                if let Some(usage) = usage {
                    if usage_recorded_at.is_none_or(|at| at.elapsed() >= crate::usage::RECORD_EVERY)
                    {
                        usage_recorded_at = Some(Instant::now());
                        tokio::spawn(crate::usage::record(
                            binder.client.clone(),
                            binder.gate.clone(),
                            binder.metrics.clone(),
                            usage,
                        ));
                    }
                }
            }
        }
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
fn call_off(binder: &Binder, ix: &mut Index, called_off: Vec<CalledOff>) -> Vec<ClaimPatch> {
    if called_off.is_empty() {
        return Vec::new();
    }
    let mut clear = Vec::new();
    for c in called_off {
        warn!(gang = %c.gang, "{}", c.message);
        // Its pods back off (their volume rules say why, so the gang's condition names
        // the claim), or the gang would take the same room again at once.
        let why = ix.provisioning.back_off(&c, now_ms());
        dra_commit::release_devices(ix, &c.binds);
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
    binder.recount_unseen(ix);
    clear
}

/// Writes each gang's DRA claims, in a task of its own per gang, which binds the gang once
/// they are all written (see `dra_commit`).
fn commit_devices(binder: &Binder, commits: Vec<dra_commit::GangCommit>) {
    for c in commits {
        tokio::spawn(dra_commit::commit(binder.clone(), c));
    }
}

/// Sets or clears claims' selected-node annotations, each in a task of its own. A claim
/// that cannot be annotated calls its gang off at the next cycle.
fn send_claim_patches(binder: &Binder, patches: Vec<ClaimPatch>) {
    for patch in patches {
        let (client, gate, index, wake, metrics) = (
            binder.client.clone(),
            binder.gate.clone(),
            binder.index.clone(),
            binder.wake.clone(),
            binder.metrics.clone(),
        );
        tokio::spawn(async move {
            let Err(why) = patch_claim(&client, &gate, &metrics, &patch).await else {
                return;
            };
            if patch.node.is_some() {
                lock(&index).provisioning.fail(&patch.gang, why);
                wake.notify_one();
            } else {
                warn_limited("cannot clear a claim's selected node", &why);
            }
        });
    }
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

/// Runs a cycle without holding up the API connections: the runtime hands this thread's
/// work to another while it decides (`block_in_place`), so watches are read and binds
/// answered during a long cycle even with one I/O thread (`--io-threads`). A runtime on
/// the current thread only (a test's) runs it in place.
fn off_the_io_threads<T>(cycle: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(cycle),
        _ => cycle(),
    }
}

/// What is off while an optional PodGroup or Queue CRD is missing.
const DIALECT: &str = "this gang dialect";
/// What is off while resource.k8s.io/v1 is not served (or not readable).
const DRA: &str = "DRA devices (pods with resourceClaims wait)";

/// Starts every watch under one supervisor (`supervise.rs`): a watch that ends or panics is
/// logged, its kind counts as not listed, and it starts again after a back-off.
fn spawn_watches(client: &Client, sink: &Sink) {
    let mut watches = Watches::default();
    // Pods and nodes are read without their managedFields (see `lean`) and listed in
    // protobuf (see `proto`): the two long lists a (re)start waits for.
    supervised(
        &mut watches,
        watch_listing_protobuf,
        Api::<Lean<Pod>>::all(client.clone()),
        sink,
        Feed {
            kind: "Pod",
            optional: None,
            apply: |ix, pod| ix.apply_pod(&pod.0),
            delete: Index::delete_pod,
            known: Index::pod_keys,
        },
    );
    supervised(
        &mut watches,
        watch_listing_protobuf,
        Api::<Lean<Node>>::all(client.clone()),
        sink,
        Feed {
            kind: "Node",
            optional: None,
            apply: |ix, node| ix.apply_node(&node.0),
            delete: Index::delete_node,
            known: Index::node_keys,
        },
    );
    // Every PodGroup kind (dialects::KINDS), each off while the API server lacks it.
    for kind in KINDS {
        (kind.watch)(&mut watches, client, sink);
    }
    supervised(
        &mut watches,
        watch,
        Api::<Queue>::all(client.clone()),
        sink,
        Feed {
            kind: "Queue",
            optional: Some(DIALECT),
            apply: |ix, o| ix.apply_queue(o),
            delete: Index::delete_queue,
            known: Index::queue_keys,
        },
    );
    // Volcano's network topology: without the CRD, HyperNode-based placement is off and
    // everything else is scheduled as before.
    supervised(
        &mut watches,
        watch,
        Api::<HyperNode>::all(client.clone()),
        sink,
        Feed {
            kind: "topology.volcano.sh HyperNode",
            optional: Some("network topology from HyperNodes"),
            apply: |ix, o| {
                ix.apply_hypernode(o);
                Wake::Now
            },
            delete: Index::delete_hypernode,
            known: Index::hypernode_keys,
        },
    );
    // Kubernetes' Workloads: what native PodGroups' workloadRef names (explain, events).
    // Served with scheduling.k8s.io/v1beta1; off where it is not.
    supervised(
        &mut watches,
        watch,
        Api::<Workload>::all(client.clone()),
        sink,
        Feed {
            kind: "scheduling.k8s.io Workload",
            optional: Some(
                "the Workloads native PodGroups name (scheduling.k8s.io/v1beta1 is not served)",
            ),
            apply: Index::apply_workload,
            delete: Index::delete_workload,
            known: Index::workload_keys,
        },
    );
    supervised(
        &mut watches,
        watch,
        Api::<PodDisruptionBudget>::all(client.clone()),
        sink,
        Feed {
            kind: "PodDisruptionBudget",
            optional: None,
            apply: |ix, o| {
                ix.apply_budget(o);
                Wake::Now
            },
            delete: Index::delete_budget,
            known: Index::budget_keys,
        },
    );
    // Namespace labels, for pod affinity terms that select namespaces by them.
    supervised(
        &mut watches,
        watch,
        Api::<Namespace>::all(client.clone()),
        sink,
        Feed {
            kind: "Namespace",
            optional: None,
            apply: |ix, o| {
                ix.apply_namespace(o);
                Wake::Now
            },
            delete: Index::delete_namespace,
            known: Index::namespace_keys,
        },
    );
    // Claims, volumes and classes: what pods' volumes ask of their nodes, and when a
    // gang's WaitForFirstConsumer claims are bound.
    supervised(
        &mut watches,
        watch,
        Api::<PersistentVolumeClaim>::all(client.clone()),
        sink,
        Feed {
            kind: "PersistentVolumeClaim",
            optional: None,
            apply: |ix, o| {
                ix.apply_claim(o);
                Wake::Now
            },
            delete: Index::delete_claim,
            known: Index::claim_keys,
        },
    );
    supervised(
        &mut watches,
        watch,
        Api::<PersistentVolume>::all(client.clone()),
        sink,
        Feed {
            kind: "PersistentVolume",
            optional: None,
            apply: |ix, o| {
                ix.apply_volume(o);
                Wake::Now
            },
            delete: Index::delete_volume,
            known: Index::volume_keys,
        },
    );
    supervised(
        &mut watches,
        watch,
        Api::<StorageClass>::all(client.clone()),
        sink,
        Feed {
            kind: "StorageClass",
            optional: None,
            apply: |ix, o| {
                ix.apply_class(o);
                Wake::Now
            },
            delete: Index::delete_class,
            known: Index::class_keys,
        },
    );
    // Dynamic Resource Allocation (resource.k8s.io/v1): devices of nodes, classes that
    // select them, pods' claims and the templates claims are made from. Without the API
    // (or the permission to read it) pods with claims wait, naming their missing claims.
    supervised(
        &mut watches,
        watch,
        Api::<DeviceClass>::all(client.clone()),
        sink,
        Feed {
            kind: "resource.k8s.io DeviceClass",
            optional: Some(DRA),
            apply: Index::apply_device_class,
            delete: Index::delete_device_class,
            known: Index::device_class_keys,
        },
    );
    supervised(
        &mut watches,
        watch,
        Api::<ResourceSlice>::all(client.clone()),
        sink,
        Feed {
            kind: "resource.k8s.io ResourceSlice",
            optional: Some(DRA),
            apply: Index::apply_resource_slice,
            delete: Index::delete_resource_slice,
            known: Index::resource_slice_keys,
        },
    );
    supervised(
        &mut watches,
        watch,
        Api::<ResourceClaim>::all(client.clone()),
        sink,
        Feed {
            kind: "resource.k8s.io ResourceClaim",
            optional: Some(DRA),
            apply: Index::apply_resource_claim,
            delete: Index::delete_resource_claim,
            known: Index::resource_claim_keys,
        },
    );
    supervised(
        &mut watches,
        watch,
        Api::<ResourceClaimTemplate>::all(client.clone()),
        sink,
        Feed {
            kind: "resource.k8s.io ResourceClaimTemplate",
            optional: Some(DRA),
            apply: Index::apply_claim_template,
            delete: Index::delete_claim_template,
            known: Index::claim_template_keys,
        },
    );
    supervised(
        &mut watches,
        watch,
        Api::<PriorityClass>::all(client.clone()),
        sink,
        Feed {
            kind: "PriorityClass",
            optional: None,
            apply: |ix, o| {
                ix.apply_priority_class(o);
                Wake::Now
            },
            delete: Index::delete_priority_class,
            known: Index::priority_class_keys,
        },
    );
    let index = sink.index.clone();
    tokio::spawn(watches.supervise(move |kind| lock(&index).readiness.expect(kind)));
}

/// Adds the watch `run(api, sink, feed)` (a `watch` function) to `watches`.
fn supervised<K, F, Fut>(watches: &mut Watches, run: F, api: Api<K>, sink: &Sink, feed: Feed<K>)
where
    K: Clone + Send + Sync + 'static,
    F: Fn(Api<K>, Sink, Feed<K>) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let sink = sink.clone();
    watches.add(feed.kind, move || run(api.clone(), sink.clone(), feed));
}

/// What identifies a version of the config file: its modification time and size (a
/// ConfigMap update swaps a symlink, which changes both).
fn file_version(path: &std::path::Path) -> Option<(SystemTime, u64)> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len()))
}

fn reload_if_changed(
    path: &std::path::Path,
    version: &mut Option<(SystemTime, u64)>,
    scheduler: &mut Scheduler,
) {
    let now = file_version(path);
    if now == *version {
        return;
    }
    *version = now;
    // --strict-config holds for the new file as for the first.
    let strict = scheduler.conf().strict;
    match SchedulerConf::load(path)
        .and_then(|c| Scheduler::new(c.with_strict(strict), &crate::REGISTRY))
    {
        Ok(mut s) => {
            s.predict_starts(scheduler.predicting().cloned());
            s.keep_usage_from(scheduler);
            for w in &s.conf().warnings {
                warn!("{}: {w}", path.display());
            }
            info!(file = %path.display(), actions = ?s.conf().actions, "configuration reloaded");
            *scheduler = s;
        }
        Err(e) => warn!(error = %e, "new configuration rejected; keeping the running one"),
    }
}

/// Creates queues root and default unless they exist, as Volcano's scheduler does
/// (`newDefaultAndRootQueue`, pkg/scheduler/cache/cache.go, v1.15.1: root not reclaimable,
/// default reclaimable, both weight 1): Volcano's queue controller makes `root` the parent
/// of every queue and expects it to exist. Tries again while the API server cannot be
/// reached or fails, so a scheduler started during an outage still creates them once the
/// API server answers (the cache holds a stand-in default meanwhile, see `run`).
async fn ensure_volcano_queues(client: &Client, metrics: &Metrics, gate: &Gate) {
    for (name, reclaimable) in [(ROOT_QUEUE, false), (DEFAULT_QUEUE, true)] {
        ensure_queue(client, metrics, gate, name, reclaimable).await;
    }
}

async fn ensure_queue(
    client: &Client,
    metrics: &Metrics,
    gate: &Gate,
    name: &str,
    reclaimable: bool,
) {
    let api = Api::<Queue>::all(client.clone());
    let queue: Queue = match serde_json::from_value(serde_json::json!({
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": {"weight": 1, "reclaimable": reclaimable}
    })) {
        Ok(q) => q,
        Err(e) => {
            warn!(error = %e, queue = name, "cannot build the queue");
            return;
        }
    };
    let what = format!("cannot create queue {name}");
    // What scheduling does without the object: a stand-in default queue (see `run`);
    // without root, "root" as a parent means top-level.
    let fallback = if name == DEFAULT_QUEUE {
        "an in-memory default queue"
    } else {
        "queues under root are top-level"
    };
    for wait in backoff(Duration::from_secs(1), Duration::from_secs(60)) {
        // Only the leader writes; during an outage the gate holds every writer.
        gate.pass().await;
        let started = Instant::now();
        let created = api.create(&PostParams::default(), &queue).await;
        metrics.api_write_timed("queue", started.elapsed(), created.as_ref().err());
        gate.record(&created);
        match created {
            Ok(_) => info!("created queue {name}"),
            Err(kube::Error::Api(e)) if e.code == 409 => debug!("queue {name} exists"),
            Err(e) if Failure::of(&e) == Failure::Transient => {
                warn_limited(
                    &what,
                    &format!(
                        "{e}; trying again in {}, {fallback} meanwhile",
                        humantime::format_duration(Duration::from_secs(wait.as_secs().max(1)))
                    ),
                );
                tokio::time::sleep(wait).await;
                continue;
            }
            // Refused (no Queue CRD, no permission): nothing else could be scheduled
            // there either; the fallback stays.
            Err(e) => warn_limited(&what, &format!("{e}; {fallback}")),
        }
        return;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A configuration file the test rewrites, in its own directory.
    struct ConfFile(std::path::PathBuf);

    impl ConfFile {
        fn new(name: &str) -> Self {
            let dir = std::env::temp_dir().join(format!("rb-reload-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            ConfFile(dir.join("volcano-scheduler.conf"))
        }

        fn write(&self, text: &str) {
            std::fs::write(&self.0, text).unwrap();
        }
    }

    impl Drop for ConfFile {
        fn drop(&mut self) {
            if let Some(dir) = self.0.parent() {
                let _ = std::fs::remove_dir_all(dir);
            }
        }
    }

    // Each text has a different length: the file's version is its mtime and length, and
    // the mtime may not move between two writes of a fast test.
    const FIRST: &str = "actions: \"enqueue, allocate\"\ntiers:\n- plugins: [{name: gang}]\n";
    const SECOND: &str =
        "actions: \"enqueue, allocate, backfill\"\ntiers:\n- plugins: [{name: gang}]\n";
    const BAD: &str = "actions: \"enqueue, teleport\"\ntiers: []\n";
    const WITH_SLA: &str =
        "actions: \"allocate\"\ntiers:\n- plugins: [{name: gang}, {name: sla}, {name: drf}]\n";

    fn start(file: &ConfFile, strict: bool) -> (Scheduler, Option<(SystemTime, u64)>) {
        let conf = SchedulerConf::load(&file.0).unwrap().with_strict(strict);
        let scheduler = Scheduler::new(conf, &crate::REGISTRY).unwrap();
        (scheduler, file_version(&file.0))
    }

    #[test]
    fn a_bad_new_file_keeps_the_running_configuration() {
        let file = ConfFile::new("bad");
        file.write(FIRST);
        let (mut scheduler, mut version) = start(&file, false);
        file.write(BAD);
        reload_if_changed(&file.0, &mut version, &mut scheduler);
        assert_eq!(scheduler.conf().actions, ["enqueue", "allocate"]);
        file.write(SECOND);
        reload_if_changed(&file.0, &mut version, &mut scheduler);
        assert_eq!(
            scheduler.conf().actions,
            ["enqueue", "allocate", "backfill"]
        );
    }

    #[test]
    fn a_reload_skips_volcano_only_plugins_unless_strict() {
        let file = ConfFile::new("lenient");
        file.write(FIRST);
        let (mut scheduler, mut version) = start(&file, false);
        file.write(WITH_SLA);
        reload_if_changed(&file.0, &mut version, &mut scheduler);
        assert_eq!(scheduler.conf().actions, ["allocate"]);
        assert!(scheduler.conf().plugin("sla").is_none());
        assert!(scheduler.conf().warnings[0].contains("\"sla\" is a Volcano plugin"));

        let file = ConfFile::new("strict");
        file.write(FIRST);
        let (mut scheduler, mut version) = start(&file, true);
        file.write(WITH_SLA);
        reload_if_changed(&file.0, &mut version, &mut scheduler);
        assert_eq!(scheduler.conf().actions, ["enqueue", "allocate"], "kept");
        assert!(scheduler.conf().strict);
    }
}
