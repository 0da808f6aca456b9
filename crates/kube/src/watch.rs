//! One watch task per kind: it lists, then watches, and feeds the index — apply, delete,
//! and on every (re)list forget what the list no longer has. While a kind is being listed
//! (at start, and again whenever the watch lost its place: an expired resourceVersion, a
//! restarted API server) the index's readiness says so and no cycle runs. Failures back off
//! exponentially with jitter, capped low so that a returning API server is relisted within
//! seconds; the log says so once per cause and interval.

use std::collections::HashSet;
use std::fmt::Debug;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use ::kube::api::{Api, ListParams, WatchEvent, WatchParams};
use ::kube::core::{ListMeta, Status};
use ::kube::runtime::watcher::{self, Event};
use ::kube::Resource;
use futures::stream::BoxStream;
use futures::StreamExt;
use serde::de::DeserializeOwned;
use tokio::sync::Notify;
use tracing::{info, trace};

use super::in_flight::InFlight;
use super::proto::{self, ProtoListed};
use super::readiness::Readiness;
use super::retry::{backoff, cause_of, delay, warn_limited, Gate, UNREACHABLE};

/// How soon a cycle should see a change a watch applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wake {
    /// Nothing a cycle reads changed, or nothing can come of it before more changes do:
    /// the periodic cycle sees it.
    No,
    /// The engine's view changed, but nothing waits on it to be placed: cycles gather such
    /// changes (at most one per BURST_CYCLE_SPACING while they keep coming).
    Soon,
    /// Something may be placed now (a gang's last member, a node): a cycle at once, or as
    /// soon as the spacing of a burst allows (`pacing`).
    Now,
}

/// What watches feed: the stores of every kind (the index), with the readiness of each
/// kind's list. Watches know nothing else of it: each kind's `Feed` says how an object goes
/// in.
pub trait Store: Send + 'static {
    /// Which kinds are listed.
    fn readiness(&mut self) -> &mut Readiness;
    /// Binds assumed in the cache that the watches do not show yet (see
    /// `InFlight::count_unseen`).
    fn binds_unseen(&self) -> usize;
}

/// Locks a store. A poisoned lock means a watch handler panicked mid-update; the store is
/// still valid (every update is a sequence of complete steps), so carry on.
pub fn lock<T: ?Sized>(store: &Mutex<T>) -> MutexGuard<'_, T> {
    store.lock().unwrap_or_else(|e| e.into_inner())
}

/// How a watch feeds the store `T` (the index).
pub struct Feed<K, T: ?Sized> {
    /// The kind's name in the index's readiness (and the log).
    pub kind: &'static str,
    /// A CRD that may be missing, and what is off without it (a gang dialect, the HyperNode
    /// topology): off, without holding up cycles, until the CRD is installed. None: a kind
    /// scheduling cannot do without.
    pub optional: Option<&'static str>,
    /// Applies an object; returns how soon a cycle should see the change.
    pub apply: fn(&mut T, &K) -> Wake,
    pub delete: fn(&mut T, &str),
    /// Every key the index holds for this kind (what a relist may have to forget).
    pub known: fn(&T) -> Vec<String>,
}

// Plain data (names and function pointers) whatever K is: a supervised watch starts again
// with the same feed.
impl<K, T: ?Sized> Clone for Feed<K, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<K, T: ?Sized> Copy for Feed<K, T> {}

/// Where every watch delivers: the index, the cycle's wake-up, the write gate (told when
/// the API server answers again), and how lists are read.
pub struct Sink<T: ?Sized> {
    pub index: Arc<Mutex<T>>,
    pub wake: Arc<Notify>,
    /// The cycle's wake-up for changes that can wait for the next spaced cycle
    /// (`Wake::Soon`).
    pub wake_soon: Arc<Notify>,
    pub gate: Arc<Gate>,
    /// Objects per list page; None lists in one request. One request is served from the
    /// API server's watch cache (consistent reads from the cache, on by default since
    /// Kubernetes 1.31), while every page after the first of a paged list is read from
    /// etcd: restarting on 55,000 pods, the pods' list took 3.9–4.8 s in one request and
    /// 8.5–13 s in pages of 500, and a restart waits for it before its first cycle. Paging
    /// bounds what a list holds at once: peak RSS was 0.87–1.0 GiB unpaged, 230 MiB in
    /// pages of 500 (the JSON, ~3 KB a pod, and the decoded page). A streaming list
    /// (WatchList, off by default in 1.33) held 215 MiB but took 6.2 s.
    pub list_page_size: Option<u32>,
    /// Told when the watch shows binds (see `InFlight::count_unseen`).
    pub in_flight: Arc<InFlight>,
}

impl<T: ?Sized> Clone for Sink<T> {
    fn clone(&self) -> Self {
        Sink {
            index: self.index.clone(),
            wake: self.wake.clone(),
            wake_soon: self.wake_soon.clone(),
            gate: self.gate.clone(),
            list_page_size: self.list_page_size,
            in_flight: self.in_flight.clone(),
        }
    }
}

impl<T: ?Sized> Sink<T> {
    /// The same sink, delivering to `index` (the same store seen through another type).
    pub fn to<U: ?Sized>(&self, index: Arc<Mutex<U>>) -> Sink<U> {
        Sink {
            index,
            wake: self.wake.clone(),
            wake_soon: self.wake_soon.clone(),
            gate: self.gate.clone(),
            list_page_size: self.list_page_size,
            in_flight: self.in_flight.clone(),
        }
    }
}

/// Delays between watch retries: short, so a returning API server costs seconds.
const WATCH_MIN_DELAY: Duration = Duration::from_millis(200);
const WATCH_MAX_DELAY: Duration = Duration::from_secs(3);

/// Retries after a 429: every 25 ms for half a second (a CRD's storage is ready within
/// it; the retry costs the server a refusal), then backing off like other failures. The
/// log says so only after BUSY_QUIET_RETRIES.
fn busy_delays() -> impl Iterator<Item = Duration> {
    std::iter::repeat_n(Duration::from_millis(25), 20)
        .chain(backoff(Duration::from_millis(50), WATCH_MAX_DELAY))
}
const BUSY_QUIET_RETRIES: u32 = 20;

/// Runs one watch until the process ends (kube's watcher: lists and watches in JSON).
pub async fn watch<K, T: Store + ?Sized>(api: Api<K>, sink: Sink<T>, feed: Feed<K, T>)
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default,
{
    let config = watcher::Config {
        page_size: sink.list_page_size,
        ..watcher::Config::default()
    };
    follow(watcher::watcher(api, config).boxed(), sink, feed).await
}

/// Runs one watch until the process ends, its lists read in protobuf (see `proto`): what
/// a restart on many pods waits for. Its watches are JSON, as `watch`'s.
pub async fn watch_listing_protobuf<K, T: Store + ?Sized>(
    api: Api<K>,
    sink: Sink<T>,
    feed: Feed<K, T>,
) where
    K: Resource + ProtoListed + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default,
{
    let page_size = sink.list_page_size;
    let events = futures::stream::unfold(Listing::Empty, move |state| {
        let api = api.clone();
        async move { Some(state.step(&api, page_size).await) }
    });
    follow(events.boxed(), sink, feed).await
}

/// Where a protobuf-listing watch is: kube's watcher's states, with our list.
enum Listing<K> {
    /// Nothing listed: the next step says a list starts.
    Empty,
    /// Reading the list (page after page when paged): the objects of the page being read
    /// are handed out batch by batch as they are decoded, while the rest arrives.
    Page {
        continue_token: Option<String>,
        objects: std::vec::IntoIter<K>,
        resource_version: Option<String>,
        reading: Option<PageRead<K>>,
        /// Asked of the server before the list's first page (`proto::format_for`), kept for
        /// its other pages.
        format: Option<proto::Format>,
    },
    /// Listed; the next step starts a watch from its version.
    Listed(String),
    Watching(String, BoxStream<'static, ::kube::Result<WatchEvent<K>>>),
}

/// A page being listed by its own task (dropped with the watch, which ends the task): its
/// decoded batches, then the page's metadata.
struct PageRead<K> {
    batches: tokio::sync::mpsc::UnboundedReceiver<Vec<K>>,
    task: tokio::task::JoinSet<::kube::Result<ListMeta>>,
}

impl<K: Resource + ProtoListed + Clone + DeserializeOwned + Send + 'static> PageRead<K> {
    fn start(api: &Api<K>, lp: ListParams, format: proto::Format) -> Self {
        let (sender, batches) = tokio::sync::mpsc::unbounded_channel();
        let client = api.clone().into_client();
        let url = api.resource_url().to_string();
        let mut task = tokio::task::JoinSet::new();
        task.spawn(async move {
            proto::list_in_batches::<K>(&client, &url, &lp, format, |batch| {
                // The receiver is gone only with the watch, which no longer wants them.
                let _ = sender.send(batch);
            })
            .await
        });
        PageRead { batches, task }
    }

    /// The next batch of objects, or the page's metadata once every batch was taken.
    async fn next(&mut self) -> Result<Vec<K>, ::kube::Result<ListMeta>> {
        if let Some(batch) = self.batches.recv().await {
            return Ok(batch);
        }
        // The sender went with the task: it has ended.
        Err(match self.task.join_next().await {
            Some(Ok(listed)) => listed,
            Some(Err(e)) => Err(::kube::Error::Api(
                Status::failure(&format!("listing failed: {e}"), "InternalError").boxed(),
            )),
            None => Err(::kube::Error::Api(
                Status::failure("listing ended twice", "InternalError").boxed(),
            )),
        })
    }
}

/// The server ends a watch after this long, and a watch silent (no bookmark either) for a
/// little longer is taken for dead.
const WATCH_TIMEOUT_SECS: u32 = 290;
const WATCH_IDLE_LIMIT: Duration = Duration::from_secs(WATCH_TIMEOUT_SECS as u64 + 30);

impl<K> Listing<K>
where
    K: Resource + ProtoListed + Clone + DeserializeOwned + Debug + Send + 'static,
{
    async fn step(self, api: &Api<K>, page_size: Option<u32>) -> (watcher::Result<Event<K>>, Self) {
        let mut state = self;
        loop {
            state = match state {
                Listing::Empty => {
                    let page = Listing::Page {
                        continue_token: None,
                        objects: Vec::new().into_iter(),
                        resource_version: None,
                        reading: None,
                        format: None,
                    };
                    return (Ok(Event::Init), page);
                }
                Listing::Page {
                    mut continue_token,
                    mut objects,
                    mut resource_version,
                    reading,
                    mut format,
                } => {
                    if let Some(next) = objects.next() {
                        let page = Listing::Page {
                            continue_token,
                            objects,
                            resource_version,
                            reading,
                            format,
                        };
                        return (Ok(Event::InitApply(next)), page);
                    }
                    let reading = match reading {
                        Some(mut read) => match read.next().await {
                            Ok(batch) => {
                                objects = batch.into_iter();
                                Some(read)
                            }
                            Err(Ok(meta)) => {
                                if meta.resource_version.is_none() && meta.continue_.is_none() {
                                    return (
                                        Err(watcher::Error::NoResourceVersion),
                                        Listing::Empty,
                                    );
                                }
                                continue_token = meta.continue_;
                                resource_version = meta.resource_version;
                                None
                            }
                            Err(Err(e)) => {
                                return (Err(watcher::Error::InitialListFailed(e)), Listing::Empty)
                            }
                        },
                        None => {
                            if let (None, Some(rv)) = (&continue_token, &resource_version) {
                                return (Ok(Event::InitDone), Listing::Listed(rv.clone()));
                            }
                            let lp = ListParams {
                                limit: page_size,
                                continue_token: continue_token.take(),
                                ..ListParams::default()
                            };
                            let f = match format {
                                Some(f) => f,
                                None => proto::format_for(&api.clone().into_client()).await,
                            };
                            format = Some(f);
                            Some(PageRead::start(api, lp, f))
                        }
                    };
                    Listing::Page {
                        continue_token,
                        objects,
                        resource_version,
                        reading,
                        format,
                    }
                }
                Listing::Listed(rv) => {
                    let mut wp = WatchParams::default().timeout(WATCH_TIMEOUT_SECS);
                    wp.bookmarks = true;
                    match api.watch(&wp, &rv).await {
                        Ok(stream) => Listing::Watching(rv, stream.boxed()),
                        Err(e) => {
                            // Refused as too old (410): list again, or it would be asked
                            // for the same version forever.
                            let gone = matches!(&e, ::kube::Error::Api(s) if s.code == 410);
                            let next = if gone {
                                Listing::Empty
                            } else {
                                Listing::Listed(rv)
                            };
                            return (Err(watcher::Error::WatchStartFailed(e)), next);
                        }
                    }
                }
                Listing::Watching(rv, mut stream) => {
                    let next = tokio::time::timeout(WATCH_IDLE_LIMIT, stream.next()).await;
                    match next {
                        Ok(Some(Ok(WatchEvent::Added(obj) | WatchEvent::Modified(obj)))) => {
                            let rv = obj.meta().resource_version.clone().unwrap_or(rv);
                            return (Ok(Event::Apply(obj)), Listing::Watching(rv, stream));
                        }
                        Ok(Some(Ok(WatchEvent::Deleted(obj)))) => {
                            let rv = obj.meta().resource_version.clone().unwrap_or(rv);
                            return (Ok(Event::Delete(obj)), Listing::Watching(rv, stream));
                        }
                        Ok(Some(Ok(WatchEvent::Bookmark(bm)))) => {
                            Listing::Watching(bm.metadata.resource_version, stream)
                        }
                        Ok(Some(Ok(WatchEvent::Error(status)))) => {
                            // 410 Gone: the version expired, list again.
                            let next = if status.code == 410 {
                                Listing::Empty
                            } else {
                                Listing::Watching(rv, stream)
                            };
                            return (Err(watcher::Error::WatchError(status)), next);
                        }
                        Ok(Some(Err(e))) => {
                            return (
                                Err(watcher::Error::WatchFailed(e)),
                                Listing::Watching(rv, stream),
                            );
                        }
                        // Ended by the server, or silent too long: watch again from here.
                        Ok(None) | Err(_) => Listing::Listed(rv),
                    }
                }
            };
        }
    }
}

/// Feeds the index from a watch's events until the process ends.
async fn follow<K, T: Store + ?Sized>(
    mut stream: BoxStream<'static, watcher::Result<Event<K>>>,
    sink: Sink<T>,
    feed: Feed<K, T>,
) where
    K: Resource + Clone + Debug + Send + Sync + 'static,
    K::DynamicType: Default,
{
    lock(&sink.index).readiness().expect(feed.kind);
    // The back-off is this loop's, not the stream's: a watch whose resourceVersion expired
    // (410) must list again at once — the API server answers, the list is what is missing —
    // while failures to reach it wait, growing to WATCH_MAX_DELAY.
    let mut delays = backoff(WATCH_MIN_DELAY, WATCH_MAX_DELAY);
    let Sink {
        index,
        wake,
        wake_soon,
        gate,
        in_flight,
        ..
    } = sink;
    let mut listed: HashSet<String> = HashSet::new();
    let mut listing_since = std::time::Instant::now();
    let mut failing = false;
    // The kind cannot be listed: its CRD is missing (404) or the scheduler may not read it
    // (403). Found by the watch's own list — no probe first, a round trip saved at start.
    let mut unlisted = Unlisted::default();
    let mut busy_waits = busy_delays();
    let mut busy_streak = 0u32;
    while let Some(event) = stream.next().await {
        if event.is_ok() && busy_streak > 0 {
            busy_streak = 0;
            busy_waits = busy_delays();
        }
        // Init starts a (re)list before any request goes out: only what the API server sent
        // says it answers again.
        let answered = matches!(&event, Ok(e) if !matches!(e, Event::Init));
        if answered && failing {
            failing = false;
            delays = backoff(WATCH_MIN_DELAY, WATCH_MAX_DELAY);
            info!(kind = feed.kind, "watch recovered");
            // The API server answers: writes waiting for the gate's next probe go now.
            gate.answered();
        }
        match event {
            Ok(Event::Init) => {
                listing_since = std::time::Instant::now();
                listed.clear();
                // An optional kind found missing stays off (cycles go on) while the watch
                // tries again; its first object below holds cycles until the list is in.
                if !unlisted.off(&feed) {
                    lock(&index).readiness().expect(feed.kind);
                }
            }
            Ok(Event::InitApply(obj)) => {
                let mut ix = lock(&index);
                unlisted.listable(&feed, ix.readiness());
                (feed.apply)(&mut ix, &obj);
                listed.insert(key_of(&obj));
            }
            Ok(Event::InitDone) => {
                let mut ix = lock(&index);
                unlisted.listable(&feed, ix.readiness());
                for key in (feed.known)(&ix) {
                    if !listed.contains(&key) {
                        (feed.delete)(&mut ix, &key);
                    }
                }
                ix.readiness().listed(feed.kind);
                in_flight.set_unseen(ix.binds_unseen());
                drop(ix);
                // How long a (re)list takes is what a restart costs before the first cycle.
                info!(
                    kind = feed.kind,
                    objects = listed.len(),
                    took = ?listing_since.elapsed(),
                    "listed"
                );
                if listed.len() >= LARGE_LIST {
                    return_freed_memory();
                }
                listed = HashSet::new();
                wake.notify_one();
            }
            Ok(Event::Apply(obj)) => {
                let mut ix = lock(&index);
                let soon = (feed.apply)(&mut ix, &obj);
                // A pod seen bound ends its assumption: writes waiting for that may go.
                in_flight.set_unseen(ix.binds_unseen());
                drop(ix);
                match soon {
                    Wake::Now => {
                        trace!(kind = feed.kind, object = %key_of(&obj), "a change wakes a cycle now");
                        wake.notify_one()
                    }
                    Wake::Soon => wake_soon.notify_one(),
                    Wake::No => {}
                }
            }
            Ok(Event::Delete(obj)) => {
                let mut ix = lock(&index);
                (feed.delete)(&mut ix, &key_of(&obj));
                in_flight.set_unseen(ix.binds_unseen());
                drop(ix);
                wake.notify_one();
            }
            Err(watcher::Error::InitialListFailed(::kube::Error::Api(e)))
                if e.code == 404 || e.code == 403 =>
            {
                let wait = unlisted.refused(&feed, e.code, lock(&index).readiness());
                wake.notify_one();
                tokio::time::sleep(wait).await;
            }
            Err(e) if status_of(&e) == Some(429) => {
                // The API server answers but will not serve this now: its storage for the
                // kind is (re)initializing (a CRD just installed, a restarted server: 429
                // until ready, typically tens of ms) or priority and fairness sheds load.
                // Retry soon, growing; say so only if it lasts.
                busy_streak += 1;
                if busy_streak > BUSY_QUIET_RETRIES {
                    warn_limited(
                        &format!("watch of {} refused ({})", feed.kind, short(&e)),
                        "the API server is busy; retrying with back-off",
                    );
                }
                tokio::time::sleep(busy_waits.next().unwrap_or(WATCH_MAX_DELAY)).await;
            }
            Err(e) => {
                failing = true;
                // Unreachable is one cause for every kind's watch: one line per interval
                // with a count, not one per kind.
                let cause = match status_of(&e) {
                    None if short(&e) == UNREACHABLE => format!("watches failed ({UNREACHABLE})"),
                    _ => format!("watch of {} failed ({})", feed.kind, short(&e)),
                };
                warn_limited(&cause, "retrying with back-off");
                if !expired(&e) {
                    tokio::time::sleep(delays.next().unwrap_or(WATCH_MAX_DELAY)).await;
                }
            }
        }
    }
}

/// A list this long decoded enough short-lived objects to be worth giving back.
const LARGE_LIST: usize = 10_000;

/// Gives the heap's free pages back to the OS. A list decodes all its objects at once,
/// spread over the runtime's threads; glibc keeps what they freed in per-thread arenas
/// (idle RSS 640–740 MiB after a restart on 55,000 pods, 600 MiB trimmed; the index
/// itself needs ~240 MiB, the rest is fragmentation). mimalloc reached 240 MiB
/// but spent 40% more CPU on the same list.
fn return_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks glibc's own arenas, under their locks.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The watch's resourceVersion is too old (410 Gone / Expired): the watcher lists again.
fn expired(e: &watcher::Error) -> bool {
    status_of(e) == Some(410)
}

/// The HTTP status the API server answered a failed list or watch with, if it answered.
fn status_of(e: &watcher::Error) -> Option<u16> {
    match e {
        watcher::Error::WatchError(status) => Some(status.code),
        watcher::Error::InitialListFailed(::kube::Error::Api(status))
        | watcher::Error::WatchFailed(::kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(::kube::Error::Api(status)) => Some(status.code),
        _ => None,
    }
}

fn short(e: &watcher::Error) -> String {
    match e {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => cause_of(e),
        watcher::Error::WatchError(status) => format!("{} {}", status.code, status.reason),
        other => other.to_string(),
    }
}

/// How often a dialect whose CRD is missing looks for it again.
const CRD_POLL: Duration = Duration::from_secs(10);

/// Why a kind cannot be listed, said once per cause. A CRD that is missing (404), or that
/// the scheduler may not read (403), turns an optional kind off — it does not hold up
/// cycles — with one log line, and on by itself once a list answers. A kind scheduling
/// cannot do without stays expected: no cycle runs until it can be listed. Other failures
/// (an unreachable API server) are the watch's to retry.
#[derive(Default)]
struct Unlisted {
    /// The status the last list was refused with, until a list answers.
    code: Option<u16>,
    refusals: u32,
}

impl Unlisted {
    /// The kind is known to be missing and optional: off, not holding up cycles.
    fn off<K, T: ?Sized>(&self, feed: &Feed<K, T>) -> bool {
        self.code.is_some() && feed.optional.is_some()
    }

    /// A list was refused with `code` (404 or 403); returns how long to wait before the
    /// next one.
    fn refused<K, T: ?Sized>(
        &mut self,
        feed: &Feed<K, T>,
        code: u16,
        readiness: &mut Readiness,
    ) -> Duration {
        if self.code != Some(code) {
            let what = if code == 404 {
                "CRD not installed"
            } else {
                "forbidden (check the ClusterRole)"
            };
            if let Some(off) = feed.optional {
                info!(
                    kind = feed.kind,
                    "{what}: {off} is off until it can be listed"
                );
            } else {
                warn_limited(
                    &format!("cannot list {}", feed.kind),
                    &format!("{what}; scheduling waits for it"),
                );
            }
            self.code = Some(code);
        }
        if feed.optional.is_some() {
            readiness.absent(feed.kind);
        }
        self.refusals += 1;
        if code == 404 {
            CRD_POLL
        } else {
            delay(
                self.refusals - 1,
                Duration::from_secs(1),
                Duration::from_secs(60),
            )
        }
    }

    /// A list answered: a kind that was off is on again, and its list is awaited.
    fn listable<K, T: ?Sized>(&mut self, feed: &Feed<K, T>, readiness: &mut Readiness) {
        let Some(code) = self.code.take() else {
            return;
        };
        self.refusals = 0;
        readiness.expect(feed.kind);
        if let (404, Some(on)) = (code, feed.optional) {
            info!(kind = feed.kind, "CRD installed: {on} is on");
        } else {
            info!(kind = feed.kind, "can be listed now: this kind is watched");
        }
    }
}

/// Objects are keyed by uid for pods, `namespace/name` for other namespaced kinds, and
/// name for cluster-scoped ones.
pub fn key_of<K: Resource>(obj: &K) -> String
where
    K::DynamicType: Default,
{
    let meta = obj.meta();
    let name = meta.name.clone().unwrap_or_default();
    if K::kind(&K::DynamicType::default()) == "Pod" {
        return meta.uid.clone().unwrap_or(name);
    }
    match &meta.namespace {
        Some(ns) => format!("{ns}/{name}"),
        None => name,
    }
}

#[cfg(test)]
mod tests;
