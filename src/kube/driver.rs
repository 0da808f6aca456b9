//! The live driver: one watch per kind feeds the engine cache, a loop runs a scheduling
//! cycle every period and soon after relevant changes, and the results are applied to the
//! API server — binds (bounded concurrency), PodGroup status (only what changed) and events.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Debug;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ::kube::api::{Api, Patch, PatchParams, PostParams};
use ::kube::runtime::watcher::{self, Event};
use ::kube::runtime::WatchStreamExt;
use ::kube::{Client, Resource, ResourceExt};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, ObjectReference, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use serde::de::DeserializeOwned;
use tokio::sync::{Notify, Semaphore};
use tracing::{debug, info, warn};

use super::budgets;
use super::convert::{
    node_to_spec, pod_gang, pod_group_name, pod_to_update_with_warnings, GangDecl,
    QUEUE_NAME_ANNOTATION,
};
use super::coscheduling::{
    cosched_status_patch, cosched_to_job, key_of_group, Dialect, GroupObject, SigsPodGroup,
    XK8sPodGroup,
};
use super::crd::{PodGroup, Queue};
use super::groups::{
    pod_group_to_job, queue_problems, queue_status_patch, queue_to_info, status_patch, GroupStatus,
};
use super::metrics::Metrics;
use crate::cache::Cache;
use crate::conf::SchedulerConf;
use crate::framework::{ConditionKind, GangReason, Scheduler, SessionResult};
use crate::model::{GangOrigin, JobSpec, QueueInfo, TaskStatus};

pub struct DriverOptions {
    pub scheduler_names: Vec<String>,
    pub schedule_period: Duration,
    pub conf: SchedulerConf,
    /// The file `conf` came from: reloaded when it changes. A bad new file is logged and the
    /// running configuration stays.
    pub conf_path: Option<std::path::PathBuf>,
    pub bind_concurrency: usize,
    /// Where to serve /metrics, /healthz and /readyz (None: nowhere).
    pub http_address: Option<std::net::SocketAddr>,
}

/// A gang's last verdict: its condition and why each pending pod waits (task uid, reason).
pub(super) type Verdict = (
    Option<crate::framework::JobCondition>,
    Vec<(Arc<str>, String)>,
);

/// What the watches know, behind one short-held lock.
#[derive(Default)]
pub(super) struct State {
    pub(super) cache: Cache,
    names: Vec<String>,
    priority_classes: HashMap<String, i32>,
    /// Real PodGroups by `namespace/name`, as last seen, per kind (see `Dialect` for which
    /// defines a gang named by several).
    pub(super) pod_groups: HashMap<String, PodGroup>,
    pub(super) x_k8s_groups: HashMap<String, XK8sPodGroup>,
    pub(super) sigs_groups: HashMap<String, SigsPodGroup>,
    /// The last cycle's verdict per gang: its condition and why each pending pod waits.
    pub(super) verdicts: HashMap<String, Verdict>,
    /// Gangs made up for pods of ours that name no group (Volcano's shadow PodGroups).
    pub(super) implicit: HashMap<String, HashSet<String>>,
    /// Pods we sent a bind for, until the watch shows them bound (or the bind fails).
    assumed: HashMap<String, Arc<str>>,
    /// Pods we sent an eviction for, until the watch shows them going (or it is refused):
    /// an update in between must not make a victim look running again, or the next cycle
    /// would evict for the same preemptor twice.
    evicting: HashSet<String>,
    /// uid -> (namespace, name, job key) of every pod we track.
    pods: HashMap<String, (String, String, Option<String>)>,
    nodes: HashSet<String>,
    /// Queues by name, as last seen.
    queues: HashMap<String, Queue>,
    /// Pods of other schedulers that name a group, by group key: a PodGroup whose pods all
    /// belong to another scheduler is not ours to write.
    foreign_members: HashMap<String, HashSet<String>>,
    /// Last message sent per pod, so events are not repeated every cycle.
    reported: HashMap<String, String>,
    /// Kinds whose first list is complete.
    synced: HashSet<String>,
    /// Events to send: (object reference, type, reason, message).
    outbox: Vec<(ObjectReference, EventType, String, String)>,
    /// PodDisruptionBudgets by `namespace/name`, as last seen.
    budgets: HashMap<String, PodDisruptionBudget>,
    /// uid -> (namespace, labels) of our pods: what budgets select them by.
    labels: HashMap<String, (String, BTreeMap<String, String>)>,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn pod_ref(ns: &str, name: &str, uid: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        namespace: Some(ns.into()),
        name: Some(name.into()),
        uid: Some(uid.into()),
        ..Default::default()
    }
}

impl State {
    fn ours(&self, pod: &Pod) -> bool {
        let name = pod
            .spec
            .as_ref()
            .and_then(|s| s.scheduler_name.as_deref())
            .unwrap_or("default-scheduler");
        self.names.iter().any(|n| n == name)
    }

    fn report(&mut self, r: ObjectReference, kind: EventType, reason: &str, message: String) {
        let key = format!("{}/{}", r.uid.clone().unwrap_or_default(), reason);
        if self.reported.get(&key) == Some(&message) {
            return;
        }
        self.reported.insert(key, message.clone());
        self.outbox.push((r, kind, reason.to_string(), message));
    }

    fn apply_pod(&mut self, pod: &Pod) {
        let uid = pod.uid().unwrap_or_default();
        let ns = pod.namespace().unwrap_or_default();
        let name = pod.name_any();
        let ours = self.ours(pod);
        let job = if ours {
            match pod_gang(pod) {
                Ok(decl) => Some(self.gang_for(pod, decl)),
                Err(e) => {
                    self.cache.delete_pod(&uid);
                    self.report(
                        pod_ref(&ns, &name, &uid),
                        EventType::Warning,
                        "FailedScheduling",
                        format!("cannot schedule: {e}"),
                    );
                    return;
                }
            }
        } else {
            if let Some(group) = pod_group_name(pod) {
                self.foreign_members
                    .entry(format!("{ns}/{group}"))
                    .or_default()
                    .insert(uid.clone());
            }
            None
        };
        match pod_to_update_with_warnings(pod, job.clone()) {
            Ok((mut update, warnings)) => {
                if ours {
                    for w in warnings {
                        self.report(
                            pod_ref(&ns, &name, &uid),
                            EventType::Warning,
                            "BadRuntimeEstimate",
                            w.to_string(),
                        );
                    }
                }
                if self.evicting.contains(&uid) {
                    if matches!(update.task.status, TaskStatus::Running | TaskStatus::Bound) {
                        update.task.status = TaskStatus::Releasing;
                    } else {
                        self.evicting.remove(&uid);
                    }
                }
                if update.task.node.is_some() {
                    self.assumed.remove(&uid);
                } else if let Some(node) = self.assumed.get(&uid) {
                    // Our bind is in flight; the watch has not caught up yet.
                    update.task.status = TaskStatus::Binding;
                    update.task.node = Some(node.clone());
                }
                self.pods
                    .insert(uid.clone(), (ns.clone(), name.clone(), job.clone()));
                if ours {
                    let labels = pod.labels().clone();
                    update.task.budgets = self.budgets_covering(&ns, &labels);
                    self.labels.insert(uid.clone(), (ns.clone(), labels));
                }
                if ours && update.task.status == TaskStatus::Pending {
                    if let Some(key) = &job {
                        if !self.implicit.contains_key(key) && !self.has_group_object(key) {
                            let group = key.split_once('/').map(|x| x.1).unwrap_or(key).to_string();
                            self.report(
                                pod_ref(&ns, &name, &uid),
                                EventType::Warning,
                                "FailedScheduling",
                                format!("PodGroup {group} does not exist in namespace {ns}; the pod waits for it"),
                            );
                        }
                    }
                }
                self.cache.apply_pod(update);
            }
            Err(e) => {
                self.cache.delete_pod(&uid);
                if ours {
                    self.report(
                        pod_ref(&ns, &name, &uid),
                        EventType::Warning,
                        "FailedScheduling",
                        format!("cannot schedule: {e}"),
                    );
                }
            }
        }
    }

    /// The gang key of a pod of ours. Gangs declared on the pods alone (kube-batch's
    /// group-min-member, ACK labels) and pods with no gang (a gang of one, as Volcano's shadow
    /// PodGroups) are made up here; a PodGroup object of the same name takes precedence.
    fn gang_for(&mut self, pod: &Pod, decl: Option<GangDecl>) -> String {
        let uid = pod.uid().unwrap_or_default();
        let ns = pod.namespace().unwrap_or_default();
        let (name, min, policy, origin) = match decl {
            Some(d) => match d.implicit_min {
                Some(min) => (d.name, min, d.policy, GangOrigin::Declared),
                None => return format!("{ns}/{}", d.name),
            },
            None => (
                format!("podgroup-{uid}"),
                1,
                Default::default(),
                GangOrigin::SinglePod,
            ),
        };
        let key = format!("{ns}/{name}");
        if !self.has_group_object(&key) {
            let queue = pod
                .annotations()
                .get(QUEUE_NAME_ANNOTATION)
                .cloned()
                .unwrap_or_else(|| "default".into());
            let created = pod
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.as_millisecond())
                .unwrap_or(0);
            // The gang keeps its phase and its earliest creation time as members come and go.
            let existing = self
                .cache
                .state()
                .job_by_uid(&key)
                .map(|id| self.cache.state().job(id));
            let spec = JobSpec {
                uid: key.clone(),
                namespace: ns.clone(),
                name,
                queue,
                min_member: min,
                priority: pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0),
                created: existing.map_or(created, |j| j.created.min(created)),
                phase: existing.map(|j| j.phase).unwrap_or_default(),
                policy,
                origin,
                ..Default::default()
            };
            self.cache.apply_job(spec);
        }
        self.implicit.entry(key.clone()).or_default().insert(uid);
        key
    }

    fn delete_pod(&mut self, uid: &str) {
        self.cache.delete_pod(uid);
        for members in self.foreign_members.values_mut() {
            members.remove(uid);
        }
        self.foreign_members.retain(|_, m| !m.is_empty());
        self.assumed.remove(uid);
        self.evicting.remove(uid);
        self.labels.remove(uid);
        if let Some((_, _, Some(job))) = self.pods.remove(uid) {
            if let Some(members) = self.implicit.get_mut(&job) {
                members.remove(uid);
                if members.is_empty() {
                    self.implicit.remove(&job);
                    if !self.has_group_object(&job) {
                        self.cache.delete_job(&job);
                    }
                }
            }
        }
    }

    /// The budgets (`namespace/name`, sorted) that cover a pod of `ns` with `labels`.
    fn budgets_covering(&self, ns: &str, labels: &BTreeMap<String, String>) -> Vec<Arc<str>> {
        let mut covering: Vec<Arc<str>> = self
            .budgets
            .iter()
            .filter(|(_, b)| b.namespace().as_deref() == Some(ns) && budgets::covers(b, labels))
            .map(|(key, _)| Arc::from(key.as_str()))
            .collect();
        covering.sort_unstable();
        covering
    }

    /// A budget appeared, changed or went: the engine learns what it allows, and our pods
    /// of its namespace which budgets cover them now.
    fn refresh_budgets(&mut self, ns: &str) {
        let pods: Vec<(String, Vec<Arc<str>>)> = self
            .labels
            .iter()
            .filter(|(_, (pod_ns, _))| pod_ns == ns)
            .map(|(uid, (_, labels))| (uid.clone(), self.budgets_covering(ns, labels)))
            .collect();
        for (uid, covering) in pods {
            self.cache.set_pod_budgets(&uid, covering);
        }
    }

    fn apply_budget(&mut self, pdb: &PodDisruptionBudget) {
        let ns = pdb.namespace().unwrap_or_default();
        let key = format!("{ns}/{}", pdb.name_any());
        self.cache
            .apply_budget(&key, budgets::disruptions_allowed(pdb));
        self.budgets.insert(key, pdb.clone());
        self.refresh_budgets(&ns);
    }

    fn delete_budget(&mut self, key: &str) {
        self.cache.delete_budget(key);
        if self.budgets.remove(key).is_some() {
            let ns = key.split_once('/').map(|(ns, _)| ns).unwrap_or_default();
            self.refresh_budgets(ns);
        }
    }

    /// Events on queues whose parent is missing or loops, or whose guarantee exceeds
    /// their capability (reported once per distinct problem).
    fn report_queue_problems(&mut self) {
        for (name, problem) in queue_problems(self.queues.values()) {
            if let Some(q) = self.queues.get(&name) {
                let r = q.object_ref(&());
                self.report(r, EventType::Warning, "InvalidQueue", problem);
            }
        }
    }

    /// Which kind of object defines the gang `key`, if any: Volcano's PodGroup, then
    /// scheduler-plugins', then the legacy one.
    pub(super) fn group_dialect(&self, key: &str) -> Option<Dialect> {
        if self.pod_groups.contains_key(key) {
            Some(Dialect::Volcano)
        } else if self.x_k8s_groups.contains_key(key) {
            Some(Dialect::XK8sPodGroup)
        } else if self.sigs_groups.contains_key(key) {
            Some(Dialect::SigsPodGroup)
        } else {
            None
        }
    }

    fn has_group_object(&self, key: &str) -> bool {
        self.group_dialect(key).is_some()
    }

    /// The object that defines the gang `key`, for events.
    fn group_ref(&self, key: &str) -> Option<ObjectReference> {
        match self.group_dialect(key)? {
            Dialect::Volcano => self.pod_groups.get(key).map(|g| g.object_ref(&())),
            Dialect::XK8sPodGroup => self.x_k8s_groups.get(key).map(|g| g.object_ref(&())),
            Dialect::SigsPodGroup => self.sigs_groups.get(key).map(|g| g.object_ref(&())),
        }
    }

    /// Makes the engine's gang `key` what its defining object says (or an event on that
    /// object says why it cannot).
    fn refresh_group(&mut self, key: &str) {
        let converted = match self.group_dialect(key) {
            None => return,
            Some(Dialect::Volcano) => {
                pod_group_to_job(&self.pod_groups[key], &self.priority_classes)
            }
            Some(Dialect::XK8sPodGroup) => cosched_to_job(&self.x_k8s_groups[key]),
            Some(Dialect::SigsPodGroup) => cosched_to_job(&self.sigs_groups[key]),
        };
        match converted {
            Ok(spec) => self.cache.apply_job(spec),
            Err(e) => {
                self.cache.delete_job(key);
                if let Some(r) = self.group_ref(key) {
                    self.report(r, EventType::Warning, "Invalid", e.to_string());
                }
            }
        }
    }

    fn apply_pod_group(&mut self, pg: &PodGroup) {
        let key = key_of_group(pg);
        self.pod_groups.insert(key.clone(), pg.clone());
        self.refresh_group(&key);
    }

    fn apply_cosched_group<G: StoredGroup>(&mut self, pg: &G) {
        let key = key_of_group(pg);
        G::stored_mut(self).insert(key.clone(), pg.clone());
        self.refresh_group(&key);
    }

    /// Status patches for the coscheduling PodGroups of kind `G` that define their gang.
    fn cosched_patches<G: StoredGroup>(
        &self,
        snapshot: &crate::framework::ClusterState,
        now: i64,
    ) -> Vec<(Dialect, String, serde_json::Value)> {
        G::stored(self)
            .iter()
            .filter(|(key, _)| self.group_dialect(key) == Some(G::DIALECT))
            .filter_map(|(key, pg)| {
                let id = snapshot.job_by_uid(key)?;
                let patch = cosched_status_patch(pg, snapshot.job(id), now)?;
                Some((G::DIALECT, key.clone(), patch))
            })
            .collect()
    }

    /// A PodGroup object of one kind is gone: another kind of the same name takes over, or
    /// the gang goes and its pods say so.
    fn delete_group(&mut self, dialect: Dialect, key: &str) {
        match dialect {
            Dialect::Volcano => self.pod_groups.remove(key).is_some(),
            Dialect::XK8sPodGroup => self.x_k8s_groups.remove(key).is_some(),
            Dialect::SigsPodGroup => self.sigs_groups.remove(key).is_some(),
        };
        if self.has_group_object(key) {
            self.refresh_group(key);
        } else {
            self.delete_pod_group(key);
        }
    }

    fn delete_pod_group(&mut self, key: &str) {
        self.cache.delete_job(key);
        let members: Vec<(String, String, String)> = self
            .pods
            .iter()
            .filter(|(_, (_, _, j))| j.as_deref() == Some(key))
            .map(|(uid, (ns, name, _))| (uid.clone(), ns.clone(), name.clone()))
            .collect();
        for (uid, ns, name) in members {
            self.report(
                pod_ref(&ns, &name, &uid),
                EventType::Warning,
                "FailedScheduling",
                format!("PodGroup {key} was deleted; the pod stays Pending until its group exists again"),
            );
        }
    }
}

/// A coscheduling PodGroup kind and where the state keeps its objects.
trait StoredGroup: GroupObject + ResourceExt + Clone {
    fn stored(st: &State) -> &HashMap<String, Self>;
    fn stored_mut(st: &mut State) -> &mut HashMap<String, Self>;
}

impl StoredGroup for XK8sPodGroup {
    fn stored(st: &State) -> &HashMap<String, Self> {
        &st.x_k8s_groups
    }
    fn stored_mut(st: &mut State) -> &mut HashMap<String, Self> {
        &mut st.x_k8s_groups
    }
}

impl StoredGroup for SigsPodGroup {
    fn stored(st: &State) -> &HashMap<String, Self> {
        &st.sigs_groups
    }
    fn stored_mut(st: &mut State) -> &mut HashMap<String, Self> {
        &mut st.sigs_groups
    }
}

/// Locks the state. A poisoned lock means a watch handler panicked mid-update; the state is
/// still a valid cache (every update is a sequence of complete steps), so carry on.
pub(super) fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

/// One watch: apply, delete, and on a (re)list, forget what the list no longer has. It
/// starts once the kind exists (see `until_installed`).
/// Objects are keyed by uid for pods, `namespace/name` for other namespaced kinds, and
/// name for cluster-scoped ones.
async fn watch<K, A, D, L>(
    api: Api<K>,
    state: Arc<Mutex<State>>,
    wake: Arc<Notify>,
    apply: A,
    delete: D,
    known: L,
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default,
    A: Fn(&mut State, &K) + Send + 'static,
    D: Fn(&mut State, &str) + Send + 'static,
    L: Fn(&State) -> Vec<String> + Send + 'static,
{
    until_installed(&api).await;
    let mut stream = watcher::watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut listed: HashSet<String> = HashSet::new();
    // A failing watch retries with backoff; say so once per distinct error, not per retry.
    let mut last_error: Option<String> = None;
    while let Some(event) = stream.next().await {
        if event.is_ok() {
            last_error = None;
        }
        match event {
            Ok(Event::Init) => listed.clear(),
            Ok(Event::InitApply(obj)) => {
                apply(&mut lock(&state), &obj);
                listed.insert(key_of(&obj));
            }
            Ok(Event::InitDone) => {
                let mut s = lock(&state);
                s.synced
                    .insert(K::kind(&K::DynamicType::default()).to_string());
                for key in known(&s) {
                    if !listed.contains(&key) {
                        delete(&mut s, &key);
                    }
                }
                drop(s);
                wake.notify_one();
            }
            Ok(Event::Apply(obj)) => {
                apply(&mut lock(&state), &obj);
                wake.notify_one();
            }
            Ok(Event::Delete(obj)) => {
                delete(&mut lock(&state), &key_of(&obj));
                wake.notify_one();
            }
            Err(e) => {
                let text = e.to_string();
                if last_error.as_deref() != Some(text.as_str()) {
                    warn!(error = %text, kind = %K::kind(&K::DynamicType::default()), "watch failed; retrying with backoff");
                    last_error = Some(text);
                }
            }
        }
    }
}

/// How often a dialect whose CRD is missing looks for it again.
const CRD_POLL: Duration = Duration::from_secs(10);

/// Returns once the kind can be listed. A kind whose CRD is missing turns its dialect off
/// with one log line, and on by itself when the CRD appears (core kinds return at once).
async fn until_installed<K>(api: &Api<K>)
where
    K: Resource + Clone + DeserializeOwned + Debug,
    K::DynamicType: Default,
{
    let dt = K::DynamicType::default();
    let what = format!("{}/{} {}", K::group(&dt), K::version(&dt), K::kind(&dt));
    let mut said_missing = false;
    loop {
        match api.list(&::kube::api::ListParams::default().limit(1)).await {
            Ok(_) => break,
            Err(::kube::Error::Api(e)) if e.code == 404 => {
                if !said_missing {
                    info!(kind = %what, "CRD not installed: this gang dialect is off until it is");
                    said_missing = true;
                }
            }
            // Unreachable API server and the like: the watch's own backoff handles those.
            Err(e) => {
                debug!(kind = %what, error = %e, "cannot list yet");
                break;
            }
        }
        tokio::time::sleep(CRD_POLL).await;
    }
    if said_missing {
        info!(kind = %what, "CRD installed: this gang dialect is on");
    }
}

fn key_of<K: Resource>(obj: &K) -> String
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

/// Runs the scheduler until the process is stopped.
pub async fn run(client: Client, opts: DriverOptions) -> Result<(), super::KubeError> {
    let mut scheduler =
        Scheduler::new(opts.conf, &crate::REGISTRY).map_err(super::KubeError::Config)?;
    let mut conf_version = opts.conf_path.as_deref().and_then(file_version);
    let metrics = Metrics::new().map_err(|e| super::KubeError::Metrics(e.to_string()))?;
    let state = Arc::new(Mutex::new(State {
        names: opts.scheduler_names.clone(),
        ..Default::default()
    }));
    let wake = Arc::new(Notify::new());
    if let Some(addr) = opts.http_address {
        let m = metrics.clone();
        let routes = super::debug::routes(state.clone());
        tokio::spawn(async move {
            if let Err(e) = super::metrics::serve(addr, m, routes).await {
                warn!(address = %addr, error = %e, "cannot serve /metrics, /healthz, /readyz");
            }
        });
    }
    ensure_default_queue(&client, &state).await;

    let s = state.clone();
    let w = wake.clone();
    tokio::spawn(watch(
        Api::<Pod>::all(client.clone()),
        s,
        w,
        |st: &mut State, p: &Pod| st.apply_pod(p),
        |st: &mut State, uid: &str| st.delete_pod(uid),
        |st: &State| st.pods.keys().cloned().collect(),
    ));
    tokio::spawn(watch(
        Api::<Node>::all(client.clone()),
        state.clone(),
        wake.clone(),
        |st: &mut State, n: &Node| match node_to_spec(n) {
            Ok(spec) => {
                st.nodes.insert(spec.name.clone());
                st.cache.apply_node(spec);
            }
            Err(e) => warn!(error = %e, "node ignored"),
        },
        |st: &mut State, name: &str| {
            st.nodes.remove(name);
            st.cache.delete_node(name);
        },
        |st: &State| st.nodes.iter().cloned().collect(),
    ));
    tokio::spawn(watch(
        Api::<PodGroup>::all(client.clone()),
        state.clone(),
        wake.clone(),
        |st: &mut State, pg: &PodGroup| st.apply_pod_group(pg),
        |st: &mut State, key: &str| st.delete_group(Dialect::Volcano, key),
        |st: &State| st.pod_groups.keys().cloned().collect(),
    ));
    tokio::spawn(watch(
        Api::<XK8sPodGroup>::all(client.clone()),
        state.clone(),
        wake.clone(),
        |st: &mut State, pg: &XK8sPodGroup| st.apply_cosched_group(pg),
        |st: &mut State, key: &str| st.delete_group(Dialect::XK8sPodGroup, key),
        |st: &State| XK8sPodGroup::stored(st).keys().cloned().collect(),
    ));
    tokio::spawn(watch(
        Api::<SigsPodGroup>::all(client.clone()),
        state.clone(),
        wake.clone(),
        |st: &mut State, pg: &SigsPodGroup| st.apply_cosched_group(pg),
        |st: &mut State, key: &str| st.delete_group(Dialect::SigsPodGroup, key),
        |st: &State| SigsPodGroup::stored(st).keys().cloned().collect(),
    ));
    tokio::spawn(watch(
        Api::<Queue>::all(client.clone()),
        state.clone(),
        wake.clone(),
        |st: &mut State, q: &Queue| match queue_to_info(q) {
            Ok(info) => {
                st.queues.insert(info.name.to_string(), q.clone());
                st.cache.apply_queue(info);
                st.report_queue_problems();
            }
            Err(e) => {
                st.queues.insert(q.name_any(), q.clone());
                let r = q.object_ref(&());
                st.report(r, EventType::Warning, "InvalidQueue", e.to_string());
            }
        },
        |st: &mut State, name: &str| {
            st.queues.remove(name);
            st.cache.delete_queue(name);
        },
        |st: &State| st.queues.keys().cloned().collect(),
    ));
    tokio::spawn(watch(
        Api::<PodDisruptionBudget>::all(client.clone()),
        state.clone(),
        wake.clone(),
        |st: &mut State, pdb: &PodDisruptionBudget| st.apply_budget(pdb),
        |st: &mut State, key: &str| st.delete_budget(key),
        |st: &State| st.budgets.keys().cloned().collect(),
    ));
    tokio::spawn(watch(
        Api::<PriorityClass>::all(client.clone()),
        state.clone(),
        wake.clone(),
        |st: &mut State, pc: &PriorityClass| {
            let name = pc.name_any();
            st.priority_classes.insert(name.clone(), pc.value);
            // PodGroups that named this class before it was seen get its value now.
            let waiting: Vec<PodGroup> = st
                .pod_groups
                .values()
                .filter(|g| g.spec.priority_class_name.as_deref() == Some(name.as_str()))
                .cloned()
                .collect();
            for g in &waiting {
                st.apply_pod_group(g);
            }
        },
        |st: &mut State, name: &str| {
            st.priority_classes.remove(name);
        },
        |st: &State| st.priority_classes.keys().cloned().collect(),
    ));

    let recorder = EventSink {
        client: client.clone(),
        instance: std::env::var("POD_NAME").unwrap_or_else(|_| "rust-batch".into()),
    };
    let binds = Arc::new(Semaphore::new(opts.bind_concurrency.max(1)));
    let writes = Arc::new(tokio::sync::Mutex::new(()));
    info!(names = ?opts.scheduler_names, period = ?opts.schedule_period, "rust-batch scheduling");
    loop {
        if let Some(path) = &opts.conf_path {
            reload_if_changed(path, &mut conf_version, &mut scheduler);
        }
        tokio::select! {
            _ = tokio::time::sleep(opts.schedule_period) => {}
            _ = wake.notified() => {
                // Let a burst of changes (a gang's pods arriving) land before deciding.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        let snapshot = {
            let s = lock(&state);
            let ready = s.synced.contains("Pod") && s.synced.contains("Node");
            metrics
                .ready
                .store(ready, std::sync::atomic::Ordering::Relaxed);
            s.cache.snapshot()
        };
        let (nodes, jobs) = (snapshot.nodes().count(), snapshot.jobs().count());
        let cycle_start = Instant::now();
        let mut action_start = Instant::now();
        let mut observe = |action: &'static str, starting: bool, _: &crate::framework::Session| {
            if starting {
                action_start = Instant::now();
            } else {
                metrics
                    .action_latency
                    .with_label_values(&[action])
                    .observe(action_start.elapsed().as_secs_f64());
            }
        };
        let result = scheduler.run_cycle_observed(snapshot, now_ms(), &mut observe);
        metrics
            .cycle_latency
            .observe(cycle_start.elapsed().as_secs_f64());
        let unschedulable = result
            .job_updates
            .iter()
            .filter(|u| {
                u.condition
                    .as_ref()
                    .is_some_and(|c| c.kind == ConditionKind::Unschedulable)
            })
            .count();
        metrics.unschedulable_gangs.set(unschedulable as i64);
        debug!(
            nodes,
            jobs,
            binds = result.binds.len(),
            updates = result.job_updates.len(),
            "cycle"
        );
        let ctx = Applier {
            client: &client,
            state: &state,
            wake: &wake,
            events: &recorder,
            binds: &binds,
            metrics: &metrics,
            writes: &writes,
        };
        ctx.apply(result).await;
    }
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
    match SchedulerConf::load(path).and_then(|c| Scheduler::new(c, &crate::REGISTRY)) {
        Ok(s) => {
            for w in &s.conf().warnings {
                warn!("{}: {w}", path.display());
            }
            info!(file = %path.display(), actions = ?s.conf().actions, "configuration reloaded");
            *scheduler = s;
        }
        Err(e) => warn!(error = %e, "new configuration rejected; keeping the running one"),
    }
}

async fn ensure_default_queue(client: &Client, state: &Arc<Mutex<State>>) {
    let api = Api::<Queue>::all(client.clone());
    let queue: Queue = match serde_json::from_value(serde_json::json!({
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": "default"},
        "spec": {"weight": 1, "reclaimable": true}
    })) {
        Ok(q) => q,
        Err(e) => {
            warn!(error = %e, "cannot build the default queue");
            return;
        }
    };
    match api.create(&PostParams::default(), &queue).await {
        Ok(_) => info!("created queue default"),
        Err(kube::Error::Api(e)) if e.code == 409 => debug!("queue default exists"),
        Err(e) => {
            // Without the Queue CRD nothing could be scheduled; keep an in-memory default.
            warn!(error = %e, "cannot create queue default; using an in-memory default queue");
            lock(state).cache.apply_queue(QueueInfo::new("default", 1));
        }
    }
}

/// What applying a cycle's result needs.
struct Applier<'a> {
    client: &'a Client,
    state: &'a Arc<Mutex<State>>,
    wake: &'a Arc<Notify>,
    events: &'a EventSink,
    binds: &'a Arc<Semaphore>,
    metrics: &'a Arc<Metrics>,
    /// Held while one cycle's status writes and events go out, so batches stay in order.
    writes: &'a Arc<tokio::sync::Mutex<()>>,
}

impl Applier<'_> {
    /// Binds (async, bounded), PodGroup status patches and events of one cycle.
    async fn apply(&self, result: SessionResult) {
        let Applier {
            client,
            state,
            wake,
            events: recorder,
            binds,
            metrics,
            writes,
        } = *self;
        let mut patches = Vec::new();
        let mut queue_patches = Vec::new();
        let mut cosched_patches = Vec::new();
        let outbox;
        {
            let mut s = lock(state);
            for b in &result.binds {
                s.assumed.insert(b.task.to_string(), b.node.clone());
                s.cache
                    .set_pod_status(&b.task, TaskStatus::Binding, Some(b.node.clone()));
            }
            // A victim keeps its node's resources until it is gone: releasing, not free.
            for e in &result.evictions {
                let node = s.cache.pod(&e.task).and_then(|p| p.task.node.clone());
                s.cache.set_pod_status(&e.task, TaskStatus::Releasing, node);
                s.evicting.insert(e.task.to_string());
            }
            for u in &result.job_updates {
                if u.condition.is_some() {
                    s.verdicts.insert(
                        u.job.to_string(),
                        (u.condition.clone(), u.task_reasons.clone()),
                    );
                }
                if let Some(phase) = u.phase {
                    s.cache.set_job_phase(&u.job, phase);
                }
                if let Some(c) = &u.condition {
                    // The PodGroup gets an event when its verdict changes (deduplicated); a gang
                    // still forming (NotEnoughTasks) only updates its condition.
                    let forming = c.reason == GangReason::NotEnoughTasks;
                    if let Some(r) = s.group_ref(&u.job).filter(|_| !forming) {
                        let (kind, reason) = match c.kind {
                            ConditionKind::Scheduled => (EventType::Normal, "Scheduled"),
                            ConditionKind::Unschedulable => (EventType::Warning, "Unschedulable"),
                        };
                        s.report(r, kind, reason, c.message.clone());
                    }
                    // A gang still forming (NotEnoughTasks) says so on its PodGroup only:
                    // an event per pod per arriving sibling would flood the API server.
                    if c.kind == ConditionKind::Unschedulable && !forming {
                        for (uid, why) in &u.task_reasons {
                            if let Some((ns, name, _)) = s.pods.get(&**uid).cloned() {
                                let message = format!("{}; this pod: {why}", c.message);
                                s.report(
                                    pod_ref(&ns, &name, uid),
                                    EventType::Warning,
                                    "FailedScheduling",
                                    message,
                                );
                            }
                        }
                    }
                }
            }
            // Gang runtimes (waiting clocks, backoffs) and NonStrict holds live in the cache:
            // the API server never sees a hold, only the bind once the whole gang fits.
            s.cache.apply_gang_updates(&result.job_updates);
            // PodGroup status: phase, counts and conditions, written only when they differ.
            let conditions: HashMap<&str, _> = result
                .job_updates
                .iter()
                .filter_map(|u| u.condition.as_ref().map(|c| (&*u.job, c)))
                .collect();
            let snapshot = s.cache.snapshot();
            for (key, pg) in &s.pod_groups {
                let Some(id) = snapshot.job_by_uid(key) else {
                    continue;
                };
                let job = snapshot.job(id);
                if job.tasks().is_empty() && s.foreign_members.contains_key(key) {
                    continue; // another scheduler's gang
                }
                let desired = GroupStatus::of(job, conditions.get(key.as_str()).copied());
                if let Some(patch) = status_patch(pg, &desired, now_ms()) {
                    patches.push((pg.namespace().unwrap_or_default(), pg.name_any(), patch));
                }
            }
            // scheduler-plugins' and the legacy PodGroups: their own phases, through their
            // status subresource, when they define the gang.
            cosched_patches.extend(s.cosched_patches::<XK8sPodGroup>(&snapshot, now_ms()));
            cosched_patches.extend(s.cosched_patches::<SigsPodGroup>(&snapshot, now_ms()));
            let mut by_queue: HashMap<&str, Vec<&crate::model::JobInfo>> = HashMap::new();
            for (_, j) in snapshot.jobs() {
                by_queue.entry(&j.queue).or_default().push(j);
            }
            for (name, q) in &s.queues {
                let jobs = by_queue.get(name.as_str()).into_iter().flatten().copied();
                if let Some(patch) = queue_status_patch(q, jobs) {
                    queue_patches.push((name.clone(), patch));
                }
            }
            outbox = std::mem::take(&mut s.outbox);
        }
        for e in result.evictions {
            let client = client.clone();
            let recorder = recorder.clone();
            let wake = wake.clone();
            let state = state.clone();
            tokio::spawn(async move {
                let api = Api::<Pod>::namespaced(client, &e.namespace);
                let r = pod_ref(&e.namespace, &e.name, &e.task);
                // The eviction API honours PodDisruptionBudgets; a refusal leaves the pod
                // running and the preemptor waiting for the next cycle.
                match api
                    .evict(&e.name, &::kube::api::EvictParams::default())
                    .await
                {
                    Ok(_) => {
                        publish(
                            &recorder,
                            &r,
                            EventType::Normal,
                            "Preempted",
                            e.reason.clone(),
                        )
                        .await
                    }
                    Err(err) => {
                        warn!(pod = %e.name, error = %err, "eviction refused");
                        {
                            let mut s = lock(&state);
                            s.evicting.remove(&*e.task);
                            if s.cache
                                .pod(&e.task)
                                .is_some_and(|p| p.task.status == TaskStatus::Releasing)
                            {
                                s.cache.set_pod_status(
                                    &e.task,
                                    TaskStatus::Running,
                                    e.node.clone(),
                                );
                            }
                        }
                        publish(
                            &recorder,
                            &r,
                            EventType::Warning,
                            "EvictionFailed",
                            format!("{}: {err}", e.reason),
                        )
                        .await;
                        wake.notify_one();
                    }
                }
            });
        }
        for b in result.binds {
            let permit = binds.clone().acquire_owned().await;
            let client = client.clone();
            let state = state.clone();
            let wake = wake.clone();
            let recorder = recorder.clone();
            let metrics = metrics.clone();
            tokio::spawn(async move {
                let api = Api::<Pod>::namespaced(client, &b.namespace);
                let body = serde_json::json!({
                    "apiVersion": "v1",
                    "kind": "Binding",
                    "metadata": {"name": &*b.name, "namespace": &*b.namespace},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": &*b.node}
                });
                let r = pod_ref(&b.namespace, &b.name, &b.task);
                let bound = api
                    .create_subresource::<_, serde_json::Value>(
                        "binding",
                        &b.name,
                        &PostParams::default(),
                        &body,
                    )
                    .await;
                // The permit bounds binds in flight; the event below is not a bind.
                drop(permit);
                match bound {
                    Ok(_) => {
                        debug!(pod = %b.name, node = %b.node, "bound");
                        metrics.pods_bound.inc();
                        let created = lock(&state).cache.pod(&b.task).map(|p| p.task.created);
                        if let Some(created) = created.filter(|c| *c > 0) {
                            metrics
                                .e2e_latency
                                .observe((now_ms() - created).max(0) as f64 / 1000.0);
                        }
                        publish(
                            &recorder,
                            &r,
                            EventType::Normal,
                            "Scheduled",
                            format!(
                                "Successfully assigned {}/{} to {}",
                                b.namespace, b.name, b.node
                            ),
                        )
                        .await;
                    }
                    Err(e) => {
                        warn!(pod = %b.name, node = %b.node, error = %e, "bind failed; the task goes back to pending");
                        metrics.bind_failures.inc();
                        {
                            let mut s = lock(&state);
                            s.assumed.remove(&*b.task);
                            if s.cache
                                .pod(&b.task)
                                .is_some_and(|p| p.task.status == TaskStatus::Binding)
                            {
                                s.cache.set_pod_status(&b.task, TaskStatus::Pending, None);
                            }
                        }
                        publish(
                            &recorder,
                            &r,
                            EventType::Warning,
                            "FailedScheduling",
                            format!("binding to {} failed: {e}", b.node),
                        )
                        .await;
                        wake.notify_one();
                    }
                }
            });
        }
        // Status and events go out in order, one batch per cycle, without holding up the
        // next cycle (binds above are already on their way).
        let client = client.clone();
        let recorder = recorder.clone();
        let turn = writes.clone();
        tokio::spawn(async move {
            let _turn = turn.lock().await;
            for (ns, name, patch) in patches {
                debug!(podgroup = %format!("{ns}/{name}"), %patch, "status update");
                let api = Api::<PodGroup>::namespaced(client.clone(), &ns);
                if let Err(e) = api
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    warn!(podgroup = %format!("{ns}/{name}"), error = %e, "status update failed");
                }
            }
            for (dialect, key, patch) in cosched_patches {
                let (ns, name) = key.split_once('/').unwrap_or(("", &key));
                let pp = PatchParams::default();
                let written = match dialect {
                    Dialect::XK8sPodGroup => Api::<XK8sPodGroup>::namespaced(client.clone(), ns)
                        .patch_status(name, &pp, &Patch::Merge(&patch))
                        .await
                        .map(drop),
                    _ => Api::<SigsPodGroup>::namespaced(client.clone(), ns)
                        .patch_status(name, &pp, &Patch::Merge(&patch))
                        .await
                        .map(drop),
                };
                if let Err(e) = written {
                    warn!(podgroup = %key, group = dialect.api_group(), error = %e, "status update failed");
                }
            }
            for (name, patch) in queue_patches {
                let api = Api::<Queue>::all(client.clone());
                if let Err(e) = api
                    .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    warn!(queue = %name, error = %e, "queue status update failed");
                }
            }
            for (r, kind, reason, message) in outbox {
                publish(&recorder, &r, kind, &reason, message).await;
            }
        });
    }
}

/// Whether an event reports something normal or a problem.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum EventType {
    Normal,
    Warning,
}

/// Writes events.k8s.io/v1 Events. Every event is its own object: kube's `Recorder` folds
/// events with the same reason into a series that keeps the first note, which would show a
/// stale gang message in `kubectl describe`. Repeats are suppressed by `State::report`.
#[derive(Clone)]
struct EventSink {
    client: Client,
    instance: String,
}

async fn publish(
    recorder: &EventSink,
    r: &ObjectReference,
    type_: EventType,
    reason: &str,
    note: String,
) {
    use k8s_openapi::api::events::v1::Event as ApiEvent;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
    let now = k8s_openapi::jiff::Timestamp::now();
    let ns = r
        .namespace
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "default".into());
    let base = r.name.clone().unwrap_or_else(|| "object".into());
    let event = ApiEvent {
        metadata: ObjectMeta {
            name: Some(format!("{base}.{:x}", now.as_nanosecond())),
            namespace: Some(ns.clone()),
            ..Default::default()
        },
        event_time: Some(MicroTime(now)),
        reporting_controller: Some("rust-batch".into()),
        reporting_instance: Some(recorder.instance.clone()),
        action: Some("Scheduling".into()),
        reason: Some(reason.into()),
        note: Some(note.chars().take(1000).collect()),
        type_: Some(match type_ {
            EventType::Normal => "Normal".into(),
            EventType::Warning => "Warning".into(),
        }),
        regarding: Some(r.clone()),
        ..Default::default()
    };
    if let Err(e) = Api::<ApiEvent>::namespaced(recorder.client.clone(), &ns)
        .create(&PostParams::default(), &event)
        .await
    {
        debug!(error = %e, "event not recorded");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object<K: DeserializeOwned>(api_version: &str, min: i32) -> K {
        serde_json::from_value(serde_json::json!({
            "apiVersion": api_version, "kind": "PodGroup",
            "metadata": {"name": "g", "namespace": "ns"},
            "spec": {"minMember": min}
        }))
        .unwrap()
    }

    fn min_member(st: &State) -> Option<u32> {
        let s = st.cache.state();
        s.job_by_uid("ns/g").map(|id| s.job(id).min_member)
    }

    #[test]
    fn podgroup_kinds_sharing_a_name_take_precedence_volcano_x_k8s_legacy() {
        let mut st = State::default();
        st.apply_cosched_group::<SigsPodGroup>(&object("scheduling.sigs.k8s.io/v1alpha1", 3));
        assert_eq!(min_member(&st), Some(3));
        st.apply_cosched_group::<XK8sPodGroup>(&object("scheduling.x-k8s.io/v1alpha1", 2));
        assert_eq!(min_member(&st), Some(2), "scheduler-plugins over legacy");
        st.apply_pod_group(&object("scheduling.volcano.sh/v1beta1", 1));
        assert_eq!(min_member(&st), Some(1), "Volcano over both");
        // A later update of a lower kind does not take over.
        st.apply_cosched_group::<SigsPodGroup>(&object("scheduling.sigs.k8s.io/v1alpha1", 5));
        assert_eq!(min_member(&st), Some(1));
        assert_eq!(st.group_dialect("ns/g"), Some(Dialect::Volcano));
        st.delete_group(Dialect::Volcano, "ns/g");
        assert_eq!(min_member(&st), Some(2), "the next kind takes over");
        st.delete_group(Dialect::XK8sPodGroup, "ns/g");
        assert_eq!(min_member(&st), Some(5));
        st.delete_group(Dialect::SigsPodGroup, "ns/g");
        assert_eq!(min_member(&st), None, "no object left: the gang is gone");
    }
}
