//! What the benchmarks against the peers (benches/peers.rs) and at scale (benches/scale.rs)
//! share: a control plane of their own (tests/cluster/up.sh, torn down with down.sh) or the
//! ambient one (KUBECONFIG, for the smoke tests under `cargo test`), kwok nodes, gangs of
//! pods, a watch that records when each pod was bound, the processes under test with their
//! peak RSS and CPU, the machine's load, and the invariants every run checks.
#![allow(dead_code)] // each bench uses its own subset

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{stream, StreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{watcher, WatchStreamExt};
use kube::Client;
use serde_json::json;
use tokio::sync::Semaphore;

use crate::common;

/// Creations in flight (nodes, PodGroups, pods), as benches/kwok.rs.
pub const CREATE_CONCURRENCY: usize = 32;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Where the benches keep the logs of the processes they ran.
pub fn log_dir() -> PathBuf {
    let dir = repo().join("target/bench-logs");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A control plane: one of our own (up.sh in a new state dir; down.sh --purge when dropped,
/// the state dir kept if the bench panicked) or the ambient one of with-cluster.sh.
pub struct Cluster {
    pub dir: PathBuf,
    pub kubeconfig: PathBuf,
    pub client: Client,
    owned: bool,
}

impl Cluster {
    /// The cluster KUBECONFIG points at (with-cluster.sh, tests/run.sh).
    pub async fn ambient() -> Cluster {
        let client = common::client().await;
        Cluster {
            dir: std::env::var("RB_CLUSTER_DIR").unwrap_or_default().into(),
            kubeconfig: std::env::var("KUBECONFIG").unwrap().into(),
            client,
            owned: false,
        }
    }

    /// A fresh control plane (etcd, kube-apiserver, kwok; no controller-manager: nothing
    /// here needs volumes). The API server does not taint new nodes not-ready
    /// (TaintNodesByCondition off): no node-lifecycle controller runs to lift the taint, and
    /// lifting it ourselves would cost one write per node. `RB_APISERVER_ARGS` etc. of the
    /// caller still apply. Its state (etcd's data above all) is kept where `state_root`
    /// says.
    pub async fn fresh(label: &str) -> Cluster {
        let dir = state_root().join(format!(
            "rb-bench-{label}-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let apiserver_args = format!(
            "{} --disable-admission-plugins=TaintNodesByCondition",
            std::env::var("RB_APISERVER_ARGS").unwrap_or_default()
        );
        let t = Instant::now();
        let out = Command::new(repo().join("tests/cluster/up.sh"))
            .arg(&dir)
            .env_remove("RB_CLUSTER_DIR")
            .env_remove("KUBECONFIG")
            .env("RB_NO_CONTROLLERS", "1")
            .env("RB_APISERVER_ARGS", apiserver_args)
            .stderr(Stdio::inherit())
            .output()
            .expect("tests/cluster/up.sh runs");
        assert!(
            out.status.success(),
            "tests/cluster/up.sh {} failed",
            dir.display()
        );
        eprintln!(
            "[bench] fresh control plane in {} ({:.1}s)",
            dir.display(),
            t.elapsed().as_secs_f64()
        );
        let kubeconfig = dir.join("kubeconfig");
        let file = kube::config::Kubeconfig::read_from(&kubeconfig).expect("kubeconfig reads");
        let config = kube::Config::from_custom_kubeconfig(file, &Default::default())
            .await
            .expect("kubeconfig loads");
        let client = rust_batch::kube::client::build(config).expect("client");
        Cluster {
            dir,
            kubeconfig,
            client,
            owned: true,
        }
    }

    /// The pid of a control-plane process (`APISERVER_PID`, `ETCD_PID`, `KWOK_PID`).
    pub fn pid(&self, var: &str) -> Option<u32> {
        let env = std::fs::read_to_string(self.dir.join("env")).ok()?;
        env.lines()
            .rev()
            .find_map(|l| l.strip_prefix(&format!("{var}=")))?
            .parse()
            .ok()
    }

    /// CPU seconds the API server and etcd have used so far.
    pub fn control_plane_cpu(&self) -> f64 {
        ["APISERVER_PID", "ETCD_PID"]
            .iter()
            .filter_map(|v| self.pid(v))
            .map(|pid| usage(pid).cpu_s)
            .sum()
    }

    /// Requests the API server has answered so far by verb and resource (e.g. `POST
    /// pods/binding`, `WATCH pods`), from its own /metrics (`apiserver_request_total`):
    /// what a contender costs the API server, whoever sent it.
    pub async fn api_requests(&self) -> std::collections::BTreeMap<String, f64> {
        let req = axum::http::Request::get("/metrics").body(vec![]).unwrap();
        let body = self
            .client
            .request_text(req)
            .await
            .expect("the API server's /metrics");
        let mut by_kind = std::collections::BTreeMap::new();
        for line in body
            .lines()
            .filter(|l| l.starts_with("apiserver_request_total{"))
        {
            let label = |name: &str| {
                line.split(&format!("{name}=\""))
                    .nth(1)
                    .and_then(|r| r.split('"').next())
                    .unwrap_or("")
            };
            let (resource, sub) = (label("resource"), label("subresource"));
            let kind = match sub {
                "" => format!("{} {resource}", label("verb")),
                _ => format!("{} {resource}/{sub}", label("verb")),
            };
            let n: f64 = line
                .rsplit(' ')
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0.0);
            *by_kind.entry(kind).or_default() += n;
        }
        by_kind
    }

    /// Waits until kwok has looked at the pods of every node it took on: for each new node it
    /// lists the pods bound to it (a LIST with a spec.nodeName field selector), one node at a
    /// time (`podsOnNodeSyncParallelism: 1`), and goes on doing so after the nodes are Ready.
    /// At 5,000 nodes that queue outlasted node readiness by about 6 s, and each of its
    /// lists cost the API server more as a run's pods grew (10–13% of its CPU during a bulk
    /// run): whichever contender ran while it drained was measured against kwok. Settled
    /// means no pod LIST for QUIET; at most `limit`. Returns how long it waited.
    pub async fn settle_kwok(&self, limit: Duration) -> Duration {
        const QUIET: Duration = Duration::from_secs(2);
        let lists = |by_kind: &std::collections::BTreeMap<String, f64>| {
            by_kind.get("LIST pods").copied().unwrap_or(0.0)
        };
        let t = Instant::now();
        let mut last = lists(&self.api_requests().await);
        let mut quiet_since = Instant::now();
        while t.elapsed() < limit {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let now = lists(&self.api_requests().await);
            if now != last {
                last = now;
                quiet_since = Instant::now();
            } else if quiet_since.elapsed() >= QUIET {
                break;
            }
        }
        t.elapsed()
    }

    /// A CPU profile of the API server over the next `seconds` (Go's pprof, served at
    /// /debug/pprof/profile: `--profiling` is kube-apiserver's default), written to `to`: where
    /// a contender's requests and watches cost the API server, for `go tool pprof -top`.
    pub fn profile_api_server(&self, seconds: u64, to: PathBuf) -> tokio::task::JoinHandle<()> {
        let client = self.client.clone();
        tokio::spawn(async move {
            let req = axum::http::Request::get(format!("/debug/pprof/profile?seconds={seconds}"))
                .body(vec![])
                .unwrap();
            match client.request_stream(req).await {
                Ok(mut body) => {
                    use futures::AsyncReadExt;
                    let mut bytes = vec![];
                    if let Err(e) = body.read_to_end(&mut bytes).await {
                        eprintln!("[bench] the API server's profile: {e}");
                    } else if let Err(e) = std::fs::write(&to, bytes) {
                        eprintln!("[bench] writing {}: {e}", to.display());
                    } else {
                        eprintln!("[bench] the API server's CPU profile: {}", to.display());
                    }
                }
                Err(e) => eprintln!("[bench] the API server's profile: {e}"),
            }
        })
    }
}

/// `after - before` per kind, kinds that did not change left out.
pub fn requests_between(
    before: &std::collections::BTreeMap<String, f64>,
    after: &std::collections::BTreeMap<String, f64>,
) -> Vec<(String, f64)> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, d)| *d > 0.0)
        .collect()
}

/// Where fresh control planes keep their state: RB_BENCH_STATE_DIR, else /dev/shm where it
/// exists, else the temp dir. In memory because the bench measures schedulers, not the
/// host's disk: with etcd's data on this project's VM disk (whose page cache the host keeps
/// near empty), runs one after another alternated fast and slow by a third whoever ran, the
/// API server and etcd spending 205–227 CPU s on 50,000 pods in one run and 276–308 in the
/// next; in /dev/shm four rounds ran steady (the null binder 292–354 pods/s) and
/// rust-batch's ratio to it in each round stayed within 0.93–1.10 (0.72–1.49 on disk).
/// A control plane with 55,000 pods holds about 0.45 GiB there, removed with it (a failed
/// run's is kept to look into, in memory until `tests/cluster/down.sh DIR --purge`). A
/// /dev/shm with less than SHM_NEEDED free (a container's is 64 MiB by default) is passed
/// over for the temp dir.
fn state_root() -> PathBuf {
    if let Some(dir) = std::env::var_os("RB_BENCH_STATE_DIR") {
        return PathBuf::from(dir);
    }
    let shm = Path::new("/dev/shm");
    if free_bytes(shm).is_some_and(|free| free >= SHM_NEEDED) {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// Free space a control plane's state may need in /dev/shm (the 50,000-pod runs held 0.45 GiB).
const SHM_NEEDED: u64 = 4 << 30;

/// Bytes free for an unprivileged writer on the filesystem of `dir`, if it can be asked.
fn free_bytes(dir: &Path) -> Option<u64> {
    let stat = rustix::fs::statvfs(dir).ok()?;
    Some(stat.f_bavail.saturating_mul(stat.f_frsize))
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        if std::env::var_os("RB_BENCH_KEEP").is_some() {
            eprintln!(
                "[bench] RB_BENCH_KEEP: the control plane keeps running; KUBECONFIG={} ; stop it with tests/cluster/down.sh {}",
                self.kubeconfig.display(),
                self.dir.display()
            );
            return;
        }
        let mut down = Command::new(repo().join("tests/cluster/down.sh"));
        down.arg(&self.dir);
        if !std::thread::panicking() {
            down.arg("--purge");
        }
        match down.stderr(Stdio::inherit()).status() {
            Ok(s) if s.success() => {}
            _ => eprintln!("[bench] down.sh {} failed", self.dir.display()),
        }
    }
}

/// What /proc says of a process: peak resident memory (VmHWM) and CPU seconds (user +
/// system; USER_HZ is 100 on Linux).
#[derive(Clone, Copy, Debug, Default)]
pub struct Usage {
    pub peak_rss_mib: u64,
    pub cpu_s: f64,
}

pub fn usage(pid: u32) -> Usage {
    let peak_rss_mib = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb / 1024);
    let cpu_s = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            // Fields after "pid (comm) ": state is field 3; utime 14, stime 15.
            let rest: Vec<&str> = s.rsplit_once(')')?.1.split_whitespace().collect();
            let ticks = rest.get(11)?.parse::<u64>().ok()? + rest.get(12)?.parse::<u64>().ok()?;
            Some(ticks as f64 / 100.0)
        })
        .unwrap_or(0.0);
    Usage {
        peak_rss_mib,
        cpu_s,
    }
}

/// The machine: 1-minute load average now, and the CPU counters to measure how busy all
/// cores were between two readings.
#[derive(Clone, Copy, Debug)]
pub struct MachineCpu {
    busy: u64,
    /// Time the hypervisor gave this machine's cores to someone else: a run with much of it
    /// ran on a slower machine than its neighbours (rounds disagree by a third on a VM).
    stolen: u64,
    total: u64,
}

pub fn machine_cpu() -> MachineCpu {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let fields: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    let total: u64 = fields.iter().take(8).sum();
    // idle + iowait
    let idle = fields.get(3).copied().unwrap_or(0) + fields.get(4).copied().unwrap_or(0);
    MachineCpu {
        busy: total - idle,
        stolen: fields.get(7).copied().unwrap_or(0),
        total,
    }
}

/// Cores busy on average between `from` and `to` (e.g. 1.8 of 2).
pub fn cores_busy(from: MachineCpu, to: MachineCpu) -> f64 {
    cores_of(from, to, to.busy.saturating_sub(from.busy))
}

/// Cores' time stolen by the hypervisor on average between `from` and `to` (e.g. 0.1 of 2).
pub fn cores_stolen(from: MachineCpu, to: MachineCpu) -> f64 {
    cores_of(from, to, to.stolen.saturating_sub(from.stolen))
}

/// `ticks` of CPU time between `from` and `to`, as cores on average.
fn cores_of(from: MachineCpu, to: MachineCpu, ticks: u64) -> f64 {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let total = to.total.saturating_sub(from.total).max(1) as f64;
    cores * ticks as f64 / total
}

pub fn load1() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0)
}

/// A process under test (a scheduler): killed when dropped, its stderr in a log file.
pub struct Proc {
    pub name: String,
    child: Child,
    pub started: Instant,
    pub log: PathBuf,
}

impl Proc {
    pub fn spawn(name: &str, cmd: &mut Command, log: PathBuf) -> Proc {
        let file = std::fs::File::create(&log).expect("log file");
        let started = Instant::now();
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::from(file.try_clone().unwrap()))
            .stderr(Stdio::from(file))
            .spawn()
            .unwrap_or_else(|e| panic!("{name} starts: {e}"));
        Proc {
            name: name.to_string(),
            child,
            started,
            log,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Peak RSS and CPU so far (read before stopping it).
    pub fn usage(&self) -> Usage {
        usage(self.child.id())
    }

    /// Panics, naming the log, if the process has exited.
    pub fn assert_running(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!(
                "{} exited ({status}); log: {}",
                self.name,
                self.log.display()
            );
        }
    }

    /// SIGTERM, then SIGKILL after 10 s.
    pub fn stop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        for _ in 0..100 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `n` kwok nodes `{prefix}-n{i}` in `pool` (32 cpu, 128Gi, 110 pods, as benches/kwok.rs),
/// created `CREATE_CONCURRENCY` at a time; returns once every one is Ready and untainted.
pub async fn create_nodes(client: &Client, prefix: &str, pool: &str, n: usize) -> Vec<String> {
    let api = Api::<Node>::all(client.clone());
    let names: Vec<String> = (0..n).map(|i| format!("{prefix}-n{i}")).collect();
    stream::iter(names.clone())
        .for_each_concurrent(CREATE_CONCURRENCY, |name| {
            let api = api.clone();
            async move {
                let alloc = json!({"cpu": "32", "memory": "128Gi", "pods": "110"});
                let node: Node = serde_json::from_value(json!({
                    "metadata": {"name": name, "annotations": {"kwok.x-k8s.io/node": "fake"},
                                 "labels": {"pool": pool, "type": "kwok", "kubernetes.io/hostname": name}},
                    "status": {"allocatable": alloc.clone(), "capacity": alloc}
                }))
                .unwrap();
                api.create(&PostParams::default(), &node)
                    .await
                    .expect("node created");
            }
        })
        .await;
    let selector = ListParams::default().labels(&format!("pool={pool}"));
    let timeout = Duration::from_secs(120) + Duration::from_millis(40 * n as u64);
    let tainted: Vec<String> = common::wait_for(timeout, "every node Ready", || async {
        let nodes = api.list(&selector).await.ok()?.items;
        let ready = nodes
            .iter()
            .filter(|n| {
                n.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            })
            .count();
        (ready == n).then(|| {
            nodes
                .iter()
                .filter(|n| {
                    n.spec
                        .as_ref()
                        .and_then(|s| s.taints.as_ref())
                        .is_some_and(|t| !t.is_empty())
                })
                .filter_map(|n| n.metadata.name.clone())
                .collect()
        })
    })
    .await;
    // The not-ready taint the API server puts on new nodes (on a cluster that has
    // TaintNodesByCondition on): lifted, as the node-lifecycle controller would.
    stream::iter(tainted)
        .for_each_concurrent(CREATE_CONCURRENCY, |name| {
            let api = api.clone();
            async move {
                api.patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"taints": []}})),
                )
                .await
                .expect("taints cleared");
            }
        })
        .await;
    names
}

/// How a run's gangs are declared, the same gangs either way.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Dialect {
    /// A Volcano PodGroup per gang (minMember = the gang's size, queue `default`), each pod
    /// naming it by the annotation `scheduling.k8s.io/group-name`.
    Volcano,
    /// Kubernetes' own gang API (1.35+): a `scheduling.k8s.io/v1beta1` PodGroup per gang
    /// (`schedulingPolicy.gang.minCount` = the gang's size), each pod joining it by
    /// `spec.schedulingGroup.podGroupName`.
    Upstream,
    /// A Volcano Job (`batch.volcano.sh/v1alpha1`) per gang, one task `w` of the gang's size
    /// (minAvailable = the size), written as Volcano's mutating webhook leaves it: Volcano's
    /// vc-controller-manager makes its PodGroup, and its pods `{job}-w-{i}` once the
    /// scheduler's enqueue lets the PodGroup out of Pending.
    VcJob,
}

/// The gangs of a run: `gangs` gangs `gang-{g}` of `gang_size` pods (`gang-{g}-{i}`; a
/// vcjob's `gang-{g}-w-{i}`), each pod 100m cpu / 128Mi, on the nodes of `pool`, for
/// `scheduler`, declared in `dialect`.
#[derive(Clone)]
pub struct Workload {
    pub ns: String,
    pub pool: String,
    pub scheduler: String,
    pub gangs: std::ops::Range<usize>,
    pub gang_size: usize,
    pub dialect: Dialect,
}

/// scheduling.k8s.io/v1beta1 PodGroup (Kubernetes 1.37's native gang), served where the API
/// server has its GenericWorkload gate on (tests/cluster/up.sh turns it on).
pub fn upstream_pod_group_resource() -> kube::discovery::ApiResource {
    kube::discovery::ApiResource {
        group: "scheduling.k8s.io".into(),
        version: "v1beta1".into(),
        api_version: "scheduling.k8s.io/v1beta1".into(),
        kind: "PodGroup".into(),
        plural: "podgroups".into(),
    }
}

/// batch.volcano.sh/v1alpha1 Job (a vcjob).
pub fn vcjob_resource() -> kube::discovery::ApiResource {
    kube::discovery::ApiResource {
        group: "batch.volcano.sh".into(),
        version: "v1alpha1".into(),
        api_version: "batch.volcano.sh/v1alpha1".into(),
        kind: "Job".into(),
        plural: "jobs".into(),
    }
}

impl Workload {
    pub fn pods(&self) -> usize {
        self.gangs.len() * self.gang_size
    }

    /// The name of member `i` of the gang `group`.
    pub fn member(&self, group: &str, i: usize) -> String {
        match self.dialect {
            Dialect::VcJob => format!("{group}-w-{i}"),
            Dialect::Volcano | Dialect::Upstream => format!("{group}-{i}"),
        }
    }

    /// The gang a pod of this workload belongs to, by its name.
    pub fn gang_of<'a>(&self, pod: &'a str) -> Option<&'a str> {
        let (group, i) = pod.rsplit_once('-')?;
        i.parse::<usize>().ok()?;
        match self.dialect {
            Dialect::VcJob => group.strip_suffix("-w"),
            Dialect::Volcano | Dialect::Upstream => Some(group),
        }
    }

    fn resources() -> serde_json::Value {
        json!({"requests": {"cpu": "100m", "memory": "128Mi"}})
    }

    fn pod(&self, group: &str, name: &str) -> Pod {
        let mut pod = json!({
            "metadata": {"name": name, "namespace": self.ns},
            "spec": {
                "schedulerName": self.scheduler,
                "nodeSelector": {"pool": self.pool},
                "containers": [{"name": "c", "image": "busybox", "resources": Self::resources()}]
            }
        });
        match self.dialect {
            Dialect::Upstream => {
                pod["spec"]["schedulingGroup"] = json!({"podGroupName": group});
            }
            _ => {
                pod["metadata"]["annotations"] = json!({"scheduling.k8s.io/group-name": group});
            }
        }
        serde_json::from_value(pod).unwrap()
    }

    /// A vcjob of one task `w` for gang `group`.
    fn vcjob(&self, group: &str) -> kube::api::DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": group, "namespace": self.ns},
            "spec": {
                "schedulerName": self.scheduler, "queue": "default",
                "minAvailable": self.gang_size, "maxRetry": 3,
                "tasks": [{
                    "name": "w", "replicas": self.gang_size, "minAvailable": self.gang_size,
                    "maxRetry": 3,
                    "template": {"spec": {
                        "restartPolicy": "Never",
                        "nodeSelector": {"pool": self.pool},
                        "containers": [{"name": "c", "image": "busybox", "resources": Self::resources()}]
                    }}
                }]
            }
        }))
        .unwrap()
    }

    /// A PodGroup per gang in the workload's dialect (none for vcjobs: the controller makes
    /// them), created `CREATE_CONCURRENCY` at a time. The schedulers that do not read a
    /// dialect ignore its PodGroups (the null binder's workload has them too, so every API
    /// server holds the same objects).
    pub async fn create_pod_groups(&self, client: &Client) {
        use rust_batch::kube::dialects::volcano::PodGroup;
        let volcano = Api::<PodGroup>::namespaced(client.clone(), &self.ns);
        let upstream = Api::<kube::api::DynamicObject>::namespaced_with(
            client.clone(),
            &self.ns,
            &upstream_pod_group_resource(),
        );
        if self.dialect == Dialect::VcJob {
            return;
        }
        stream::iter(self.gangs.clone())
            .for_each_concurrent(CREATE_CONCURRENCY, |g| {
                let (volcano, upstream) = (volcano.clone(), upstream.clone());
                async move {
                    let name = format!("gang-{g}");
                    if self.dialect == Dialect::Upstream {
                        let pg: kube::api::DynamicObject = serde_json::from_value(json!({
                            "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
                            "metadata": {"name": name, "namespace": self.ns},
                            "spec": {"schedulingPolicy": {"gang": {"minCount": self.gang_size}}}
                        }))
                        .unwrap();
                        upstream
                            .create(&PostParams::default(), &pg)
                            .await
                            .expect("scheduling.k8s.io PodGroup created");
                    } else {
                        let pg: PodGroup = serde_json::from_value(json!({
                            "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
                            "metadata": {"name": name, "namespace": self.ns},
                            "spec": {"minMember": self.gang_size, "queue": "default"}
                        }))
                        .unwrap();
                        volcano
                            .create(&PostParams::default(), &pg)
                            .await
                            .expect("podgroup created");
                    }
                }
            })
            .await;
    }

    /// Creates every pod, gang by gang, `CREATE_CONCURRENCY` in flight (vcjobs: every
    /// vcjob, as many in flight); returns when each gang's last pod (its vcjob) was created.
    pub async fn create_pods(&self, client: &Client) -> HashMap<String, Instant> {
        let created: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
        let note = |created: &Mutex<HashMap<String, Instant>>, group: String| {
            let now = Instant::now();
            let mut c = created.lock().unwrap();
            let last = c.entry(group).or_insert(now);
            *last = (*last).max(now);
        };
        if self.dialect == Dialect::VcJob {
            let api = Api::<kube::api::DynamicObject>::namespaced_with(
                client.clone(),
                &self.ns,
                &vcjob_resource(),
            );
            stream::iter(self.gangs.clone())
                .for_each_concurrent(CREATE_CONCURRENCY, |g| {
                    let (api, created) = (api.clone(), created.clone());
                    async move {
                        let group = format!("gang-{g}");
                        api.create(&PostParams::default(), &self.vcjob(&group))
                            .await
                            .expect("vcjob created");
                        note(&created, group);
                    }
                })
                .await;
            return Arc::try_unwrap(created).unwrap().into_inner().unwrap();
        }
        let api = Api::<Pod>::namespaced(client.clone(), &self.ns);
        let work: Vec<(String, String)> = self
            .gangs
            .clone()
            .flat_map(|g| {
                (0..self.gang_size).map(move |i| (format!("gang-{g}"), format!("gang-{g}-{i}")))
            })
            .collect();
        stream::iter(work)
            .for_each_concurrent(CREATE_CONCURRENCY, |(group, name)| {
                let api = api.clone();
                let created = created.clone();
                async move {
                    api.create(&PostParams::default(), &self.pod(&group, &name))
                        .await
                        .expect("pod created");
                    note(&created, group);
                }
            })
            .await;
        Arc::try_unwrap(created).unwrap().into_inner().unwrap()
    }
}

/// When each pod of a namespace was first seen bound (and to which node), from a watch;
/// `rebound` counts pods later seen on another node (must stay 0).
#[derive(Default)]
pub struct Binds {
    pub first: HashMap<String, (Instant, String)>,
    pub rebound: usize,
}

pub type BindLog = Arc<Mutex<Binds>>;

/// Starts watching `ns`; returns once the watch has listed what exists.
pub async fn observe_binds(client: &Client, ns: &str) -> (BindLog, tokio::task::JoinHandle<()>) {
    let log: BindLog = Arc::default();
    let l = log.clone();
    let api = Api::<Pod>::namespaced(client.clone(), ns);
    let (synced_tx, synced_rx) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let mut synced = Some(synced_tx);
        let mut events = watcher::watcher(api, watcher::Config::default())
            // Errors back off (and yield): a watch that fails at once again and again must
            // not spin, nor keep the runtime from shutting down.
            .default_backoff()
            .boxed();
        while let Some(ev) = events.next().await {
            let Ok(ev) = ev else { continue };
            let p = match ev {
                watcher::Event::Apply(p) | watcher::Event::InitApply(p) => p,
                watcher::Event::InitDone => {
                    if let Some(tx) = synced.take() {
                        let _ = tx.send(());
                    }
                    continue;
                }
                _ => continue,
            };
            let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.clone()) else {
                continue;
            };
            let name = p.metadata.name.clone().unwrap_or_default();
            let mut b = l.lock().unwrap();
            match b.first.get(&name) {
                Some((_, first)) if *first != node => b.rebound += 1,
                Some(_) => {}
                None => {
                    b.first.insert(name, (Instant::now(), node));
                }
            }
        }
    });
    let _ = tokio::time::timeout(Duration::from_secs(120), synced_rx).await;
    (log, task)
}

/// When a pod or a Volcano PodGroup of a namespace last changed (a watch on each).
pub struct Changes {
    /// The last change seen, and how many of the watches have listed what exists (before
    /// that, quiet means nothing: a list of 50,000 pods takes seconds).
    last: Arc<Mutex<(Instant, usize)>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Changes {
    /// Watches the pods and Volcano PodGroups of `ns`, and the objects of `also` (the
    /// workload's own kind: scheduling.k8s.io PodGroups, vcjobs) if given.
    pub fn watch(client: &Client, ns: &str, also: Option<kube::discovery::ApiResource>) -> Changes {
        use rust_batch::kube::dialects::volcano::PodGroup;
        let last = Arc::new(Mutex::new((Instant::now(), 0)));
        fn note<K>(api: Api<K>, last: Arc<Mutex<(Instant, usize)>>) -> tokio::task::JoinHandle<()>
        where
            K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
            K: Send + 'static,
        {
            tokio::spawn(async move {
                let mut events = watcher::watcher(api, watcher::Config::default())
                    .default_backoff()
                    .boxed();
                let mut listed = false;
                while let Some(ev) = events.next().await {
                    match ev {
                        Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_)) => {
                            last.lock().unwrap().0 = Instant::now();
                        }
                        Ok(watcher::Event::InitDone) if !listed => {
                            listed = true;
                            let mut l = last.lock().unwrap();
                            *l = (Instant::now(), l.1 + 1);
                        }
                        _ => {}
                    }
                }
            })
        }
        let mut tasks = vec![
            note(Api::<Pod>::namespaced(client.clone(), ns), last.clone()),
            note(
                Api::<PodGroup>::namespaced(client.clone(), ns),
                last.clone(),
            ),
        ];
        if let Some(resource) = also {
            let api =
                Api::<kube::api::DynamicObject>::namespaced_with(client.clone(), ns, &resource);
            tasks.push(note(api, last.clone()));
        }
        Changes { last, tasks }
    }

    /// Waits until both watches listed and nothing changed for `quiet` since (at most
    /// `limit`); how long it waited.
    pub async fn settled(&self, quiet: Duration, limit: Duration) -> Duration {
        let start = Instant::now();
        loop {
            let (last, listed) = *self.last.lock().unwrap();
            let since = last.elapsed();
            if (listed == self.tasks.len() && since >= quiet) || start.elapsed() >= limit {
                return start.elapsed();
            }
            tokio::time::sleep(quiet.saturating_sub(since).max(Duration::from_millis(50))).await;
        }
    }
}

impl Drop for Changes {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Waits until `total` pods are seen bound or `timeout` passes; false on timeout.
pub async fn wait_bound(log: &BindLog, total: usize, timeout: Duration) -> bool {
    let start = Instant::now();
    loop {
        if log.lock().unwrap().first.len() >= total {
            return true;
        }
        if start.elapsed() > timeout {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Binds every pending pod of `ns` round-robin over `nodes` with `concurrency` binds in
/// flight, deciding nothing: the API server's ceiling. With `whole_gangs` it holds each
/// pod until its gang (the Volcano PodGroup its `scheduling.k8s.io/group-name` names) has
/// `minMember` pods pending, then binds them together — what any binder that keeps the gang
/// invariant must wait for, and nothing more: a gang scheduler's floor. Abort the handle to
/// stop it.
pub fn null_binder(
    client: &Client,
    ns: &str,
    nodes: Vec<String>,
    concurrency: usize,
    whole_gangs: bool,
) -> tokio::task::JoinHandle<()> {
    use rust_batch::kube::dialects::volcano::PodGroup;
    enum Seen {
        Pod(Box<Pod>),
        Group(String, usize),
    }
    let api = Api::<Pod>::namespaced(client.clone(), ns);
    let limit = Arc::new(Semaphore::new(concurrency));
    // Each bind's answer time, to set beside a scheduler's trace (idle gang latency).
    let trace_binds = std::env::var_os("RB_BENCH_BIND_TRACE").is_some();
    let pods = watcher::watcher(api.clone(), watcher::Config::default())
        .default_backoff()
        .filter_map(|ev| async move {
            match ev {
                Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => {
                    Some(Seen::Pod(Box::new(p)))
                }
                _ => None,
            }
        });
    let groups = if whole_gangs {
        let api = Api::<PodGroup>::namespaced(client.clone(), ns);
        watcher::watcher(api, watcher::Config::default())
            .default_backoff()
            .filter_map(|ev| async move {
                match ev {
                    Ok(watcher::Event::Apply(g) | watcher::Event::InitApply(g)) => {
                        Some(Seen::Group(
                            g.metadata.name.unwrap_or_default(),
                            g.spec.min_member.unwrap_or(1).max(1) as usize,
                        ))
                    }
                    _ => None,
                }
            })
            .boxed()
    } else {
        stream::empty().boxed()
    };
    tokio::spawn(async move {
        let mut next = 0usize;
        let mut seen = HashSet::new();
        // Whole gangs: pods held per gang, each gang's minMember, gangs already bound
        // (a member beyond minMember binds at once).
        let mut held: HashMap<String, Vec<String>> = HashMap::new();
        let mut min_member: HashMap<String, usize> = HashMap::new();
        let mut released = HashSet::new();
        let mut events = stream::select(pods.boxed(), groups);
        while let Some(ev) = events.next().await {
            let ready: Vec<String> = match ev {
                Seen::Pod(p) => {
                    let name = p.metadata.name.clone().unwrap_or_default();
                    if p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()
                        || !seen.insert(name.clone())
                    {
                        continue;
                    }
                    let group = p
                        .metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get("scheduling.k8s.io/group-name"));
                    match group {
                        Some(g) if whole_gangs && !released.contains(g) => {
                            held.entry(g.clone()).or_default().push(name);
                            take_whole(&mut held, &min_member, &mut released, g)
                        }
                        _ => vec![name],
                    }
                }
                Seen::Group(g, min) => {
                    min_member.insert(g.clone(), min);
                    take_whole(&mut held, &min_member, &mut released, &g)
                }
            };
            for name in ready {
                let node = nodes[next % nodes.len()].clone();
                next += 1;
                let permit = limit.clone().acquire_owned().await.unwrap();
                tokio::spawn(null_bind(api.clone(), name, node, permit, trace_binds));
            }
        }
    })
}

/// One bind of the null binder, holding `permit` until answered (answers are not checked:
/// the bench's invariants are).
async fn null_bind(
    api: Api<Pod>,
    name: String,
    node: String,
    permit: tokio::sync::OwnedSemaphorePermit,
    trace: bool,
) {
    let _permit = permit;
    let body = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
                      "target": {"apiVersion": "v1", "kind": "Node", "name": node}});
    let sent = Instant::now();
    let _ = api
        .create_subresource::<_, serde_json::Value>("binding", &name, &PostParams::default(), &body)
        .await;
    if trace {
        eprintln!(
            "[null binder] {} bind {name} answered in {:.1} ms",
            humantime::format_rfc3339_micros(std::time::SystemTime::now()),
            sent.elapsed().as_secs_f64() * 1000.0
        );
    }
}

/// The pods held for gang `g` once it has its minMember pending (then `g` is released),
/// else none.
fn take_whole(
    held: &mut HashMap<String, Vec<String>>,
    min_member: &HashMap<String, usize>,
    released: &mut HashSet<String>,
    g: &str,
) -> Vec<String> {
    let (Some(min), Some(pods)) = (min_member.get(g), held.get(g)) else {
        return vec![];
    };
    if pods.len() < *min {
        return vec![];
    }
    released.insert(g.to_string());
    held.remove(g).unwrap_or_default()
}

/// The invariants every run checks, from what the API server holds: no gang bound partly,
/// no node over-committed, no pod seen on two nodes. Panics otherwise.
pub async fn check_invariants(client: &Client, ns: &str, log: &BindLog) {
    let partial = common::partial_gangs(client, ns).await;
    if !partial.is_empty() {
        // Binds of one gang land one by one: what is still partial after a while is real.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let again = common::partial_gangs(client, ns).await;
        let still: Vec<_> = again
            .iter()
            .filter(|(g, _, _)| partial.iter().any(|(p, _, _)| p == g))
            .collect();
        assert!(still.is_empty(), "gangs bound partially: {still:?}");
    }
    let pods = Api::<Pod>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    common::assert_not_over_committed(client, &pods).await;
    let rebound = log.lock().unwrap().rebound;
    assert_eq!(
        rebound, 0,
        "{rebound} pods were seen bound to a second node"
    );
}

/// What a run left that no gang scheduler may: gangs bound in part, nodes holding more
/// than their allocatable, pods seen bound to a second node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Violations {
    pub partial_gangs: usize,
    pub over_committed_nodes: usize,
    pub double_binds: usize,
}

impl Violations {
    pub fn any(&self) -> bool {
        *self != Violations::default()
    }
}

impl std::fmt::Display for Violations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} / {} / {}",
            self.partial_gangs, self.over_committed_nodes, self.double_binds
        )
    }
}

/// The invariants of `check_invariants`, counted rather than asserted, for a contender
/// whose failures the table reports (a peer's): gangs are known by their pods' names in
/// `work` (whatever the dialect, one a scheduler may not read), a gang partial when some but
/// not all of its pods are on nodes (read again after 3 s: binds of one gang land one by
/// one).
pub async fn count_violations(client: &Client, work: &Workload, log: &BindLog) -> Violations {
    let partial = |pods: &[Pod]| -> HashSet<String> {
        let mut gangs: HashMap<&str, (usize, usize)> = HashMap::new();
        for p in pods {
            let Some(g) = p.metadata.name.as_deref().and_then(|n| work.gang_of(n)) else {
                continue;
            };
            let e = gangs.entry(g).or_default();
            e.0 += 1;
            if common::node_of(p).is_some() && p.metadata.deletion_timestamp.is_none() {
                e.1 += 1;
            }
        }
        gangs
            .into_iter()
            .filter(|(_, (all, bound))| *bound > 0 && bound < all)
            .map(|(g, _)| g.to_string())
            .collect()
    };
    let pods_of = || async {
        Api::<Pod>::namespaced(client.clone(), &work.ns)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
    };
    let mut partial_gangs = partial(&pods_of().await);
    if !partial_gangs.is_empty() {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let again = partial(&pods_of().await);
        partial_gangs.retain(|g| again.contains(g));
    }
    let pods = Api::<Pod>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    Violations {
        partial_gangs: partial_gangs.len(),
        over_committed_nodes: over_committed_nodes(client, &pods).await,
        double_binds: log.lock().unwrap().rebound,
    }
}

/// Nodes whose pods (not finished) ask for more than the node's allocatable.
async fn over_committed_nodes(client: &Client, pods: &[Pod]) -> usize {
    use rust_batch::kube::convert::{node_to_spec, pod_to_update};
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    let mut used: HashMap<String, rust_batch::model::Resource> = HashMap::new();
    for p in pods {
        let phase = common::phase(p);
        if let (Some(node), false) = (
            common::node_of(p),
            phase == "Succeeded" || phase == "Failed",
        ) {
            if let Ok(update) = pod_to_update(p, None) {
                used.entry(node).or_default().add(&update.task.resreq);
            }
        }
    }
    nodes
        .iter()
        .filter_map(|n| node_to_spec(n).ok())
        .filter(|spec| {
            used.get(&spec.name)
                .is_some_and(|u| !u.fits(&spec.allocatable))
        })
        .count()
}

/// Seconds from `since` to the first and to the last bind seen.
pub fn first_last(log: &BindLog, since: Instant) -> (Option<f64>, Option<f64>) {
    let b = log.lock().unwrap();
    let secs = |i: Instant| i.saturating_duration_since(since).as_secs_f64();
    (
        b.first.values().map(|(i, _)| *i).min().map(secs),
        b.first.values().map(|(i, _)| *i).max().map(secs),
    )
}

/// Each complete gang's latency (its last pod created — a vcjob's: the vcjob created — →
/// its last pod bound), sorted.
pub fn gang_latencies(
    log: &BindLog,
    created: &HashMap<String, Instant>,
    work: &Workload,
) -> Vec<f64> {
    let b = log.lock().unwrap();
    let mut latencies: Vec<f64> = created
        .iter()
        .filter_map(|(group, last_created)| {
            let whole = (0..work.gang_size)
                .map(|i| b.first.get(&work.member(group, i)).map(|(t, _)| *t))
                .collect::<Option<Vec<_>>>()?
                .into_iter()
                .max()?;
            Some(whole.saturating_duration_since(*last_created).as_secs_f64())
        })
        .collect();
    latencies.sort_by(f64::total_cmp);
    latencies
}

/// Where a bulk run's time went: when the last pod was created, and at each tenth of the
/// run how many pods were created but not yet bound (the scheduler's backlog: a null binder
/// keeps it near its limit; a gang scheduler holds an incomplete gang's pods back). Gangs'
/// pods are counted created at their gang's last create.
pub fn backlog_timeline(
    log: &BindLog,
    created: &HashMap<String, Instant>,
    gang_size: usize,
    since: Instant,
) -> String {
    let b = log.lock().unwrap();
    let secs = |i: Instant| i.saturating_duration_since(since).as_secs_f64();
    let mut created_at: Vec<f64> = created.values().map(|i| secs(*i)).collect();
    created_at.sort_by(f64::total_cmp);
    let mut bound_at: Vec<f64> = b.first.values().map(|(i, _)| secs(*i)).collect();
    bound_at.sort_by(f64::total_cmp);
    let end = bound_at.last().copied().unwrap_or(0.0);
    let count = |v: &[f64], t: f64| v.partition_point(|x| *x <= t);
    let steps: Vec<String> = (1..=10)
        .map(|k| {
            let t = end * k as f64 / 10.0;
            let waiting = (count(&created_at, t) * gang_size).saturating_sub(count(&bound_at, t));
            format!("{t:.1}s:{waiting}")
        })
        .collect();
    format!(
        "last gang created at {:.1} s, last bind at {end:.1} s; created but unbound (pods) at each tenth: {}",
        created_at.last().copied().unwrap_or(0.0),
        steps.join(" ")
    )
}

pub fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    (!sorted.is_empty()).then(|| sorted[((sorted.len() as f64 - 1.0) * p).round() as usize])
}

/// An env var parsed, or `default`.
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// The rust-batch binary of this build.
pub fn rust_batch_bin() -> String {
    std::env::var("RB_SCHEDULER_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_rust-batch").to_string())
}

/// `rust-batch run` answering to `name` against `kubeconfig`, metrics on `port`; its log
/// filter from RB_BENCH_RUST_LOG if set (e.g. `info,rust_batch::kube=debug` logs every
/// cycle and bind with its time).
pub fn rust_batch_command(name: &str, kubeconfig: &Path, port: u16, extra: &[&str]) -> Command {
    rust_batch_command_of(&rust_batch_bin(), name, kubeconfig, port, extra)
}

/// `rust_batch_command` of the binary `bin` (another build, for an A/B in one run).
pub fn rust_batch_command_of(
    bin: &str,
    name: &str,
    kubeconfig: &Path,
    port: u16,
    extra: &[&str],
) -> Command {
    let mut cmd = Command::new(bin);
    cmd.args(["run", "--scheduler-name", name, "--http-address"])
        .arg(format!("127.0.0.1:{port}"))
        .args(extra)
        .env("KUBECONFIG", kubeconfig)
        .env("POD_NAME", name)
        .env(
            "RUST_LOG",
            std::env::var("RB_BENCH_RUST_LOG").unwrap_or_else(|_| {
                "info,kube=warn,kube_client=error,kube_client::client::builder=off".into()
            }),
        );
    cmd
}

/// rust-batch's API writes by kind (from its /metrics `rust_batch_api_writes_total`).
pub async fn rust_batch_writes(port: u16) -> Vec<(String, f64)> {
    let body = common::http_get(port, "/metrics")
        .await
        .map(|(_, b)| b)
        .unwrap_or_default();
    let mut by_kind: std::collections::BTreeMap<String, f64> = Default::default();
    for line in body
        .lines()
        .filter(|l| l.starts_with("rust_batch_api_writes_total{"))
    {
        let kind = line
            .split("kind=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .unwrap_or("?")
            .to_string();
        let v: f64 = line
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        *by_kind.entry(kind).or_default() += v;
    }
    by_kind.into_iter().collect()
}
