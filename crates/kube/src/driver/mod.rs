//! The live driver wires the parts: one watch task per kind feeds the index (`watch`,
//! `index`); a loop runs a scheduling cycle every period and soon after relevant changes —
//! but only while every kind's list is complete — and hands the result to the binder
//! (`binder`), the status writer (`status`) and the event publisher (`events`). All API
//! writes pass one gate (`retry::Gate`), so an API server that stops answering is probed,
//! not hammered.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use ::kube::Client;
use tokio::sync::Notify;
use tracing::{info, warn};

use super::bind_limit::{BindLimit, LimitController};
use super::binder::{Binder, InFlight};
use super::claim_writer::patch_claim;
use super::dialects::volcano::api::DEFAULT_QUEUE;
use super::dra_commit;
use super::index::dra_commits::GangCommit;
use super::index::{lock, Index, IndexView};
use super::leader::{ElectionConfig, LeaderError, Leadership};
use super::metrics::Metrics;
use super::provision::ClaimPatch;
use super::recovery::ShortGangPolicy;
use super::retry::{warn_limited, Gate};
use super::status::StatusWriter;
use super::watch::Sink;
use crate::conf::SchedulerConf;
use crate::framework::{Bind, Eviction, Scheduler};
use crate::model::QueueInfo;

mod cycle;
mod queues;
mod reload;
mod watches;

pub use cycle::{CyclePlan, Decider, Writers, FORMING_EVENT, FORMING_MESSAGE};
use queues::ensure_volcano_queues;
use reload::{file_version, reload_if_changed};
use watches::spawn_watches;

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

pub use crate::clock::now_ms;

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
    index.events = super::events::start(
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
        let routes = super::debug::routes(IndexView::new(index.clone()));
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
        IndexView::new(index.clone()),
        gate.clone(),
        metrics.clone(),
        in_flight.clone(),
    ));
    let binder = Binder {
        client: client.clone(),
        index: IndexView::new(index.clone()),
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
        decider: Decider::new(scheduler, Instant::now()),
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
    decider: Decider,
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
    /// Runs cycles while this replica leads; returns only if the lease is lost. The
    /// decision is `Decider::decide`'s; this loop paces cycles and hands the plan on.
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
        let mut gauges_at: Option<Instant> = None;
        let mut usage_recorded_at: Option<Instant> = None;
        loop {
            if let Some(path) = &opts.conf_path {
                reload_if_changed(path, &mut self.conf_version, &mut self.decider.scheduler);
            }
            let pacer = &self.decider.pacer;
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
            let Some(plan) = self.decider.decide(
                index,
                self.leadership,
                metrics,
                &binder.in_flight,
                binder,
                started,
            ) else {
                continue;
            };
            binder.patch_claims(plan.claim_patches);
            binder.commit_devices(plan.device_commits);
            binder.send(plan.binds, plan.evictions).await;
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
                let scheduler = &self.decider.scheduler;
                let usage = scheduler.queue_usage();
                metrics
                    .volcano
                    .observe_queues(&seen, scheduler.conf(), usage.as_ref());
                metrics.volcano.observe_jobs(&seen, scheduler.conf());
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

/// The binder and the claim writers, as a cycle's `Writers`: each write in a task of its
/// own.
impl Writers for Binder {
    fn send_now(&self, binds: Vec<Bind>, evictions: Vec<Eviction>) {
        let binder = self.clone();
        tokio::spawn(async move { binder.send(binds, evictions).await });
    }

    /// Writes each gang's DRA claims, in a task of its own per gang, which binds the gang
    /// once they are all written (see `dra_commit`).
    fn commit_devices(&self, commits: Vec<GangCommit>) {
        for c in commits {
            tokio::spawn(dra_commit::commit(self.clone(), c));
        }
    }

    /// Sets or clears claims' selected-node annotations, each in a task of its own. A claim
    /// that cannot be annotated calls its gang off at the next cycle.
    fn patch_claims(&self, patches: Vec<ClaimPatch>) {
        for patch in patches {
            let (client, gate, index, wake, metrics) = (
                self.client.clone(),
                self.gate.clone(),
                self.index.clone(),
                self.wake.clone(),
                self.metrics.clone(),
            );
            tokio::spawn(async move {
                let Err(why) = patch_claim(&client, &gate, &metrics, &patch).await else {
                    return;
                };
                if patch.node.is_some() {
                    index.answer(|ix| ix.claim_patch_failed(&patch.gang, why));
                    wake.notify_one();
                } else {
                    warn_limited("cannot clear a claim's selected node", &why);
                }
            });
        }
    }
}
