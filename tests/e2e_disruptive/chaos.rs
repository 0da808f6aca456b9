//! Chaos on the real control plane: the scheduler, the API server and etcd are killed with
//! SIGKILL at random moments and restarted, watches are forced to relist, binds are refused,
//! and thousands of PodGroups are deleted at once. At every poll no node may hold more than
//! its allocatable (counting every scheduler's pods) and no pod may move from one node to
//! another (bound twice); once things settle, no gang may be between 0 and its minimum
//! bound.
//!
//! In the disruptive test binary, one scenario at a time (they stop the API server everyone
//! uses), each in its own namespace and node pool. The test command runs a reduced size; the
//! full size: `RB_CHAOS=full tests/cluster/with-cluster.sh cargo test --test e2e_disruptive chaos:: -- --nocapture`
//! (`RB_CHAOS_SEED=N` replays a run; every run prints its seed).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::*;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::Client;
use rust_batch::kube::dialects::volcano::PodGroup;
use serde_json::json;

fn full() -> bool {
    std::env::var("RB_CHAOS").as_deref() == Ok("full")
}

/// A small deterministic generator (xorshift), so a printed seed replays a run.
struct Dice(u64);

impl Dice {
    fn new(what: &str) -> Self {
        let seed = std::env::var("RB_CHAOS_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as u64
            });
        println!("chaos {what}: seed {seed} (RB_CHAOS_SEED={seed} replays it)");
        Dice(seed | 1)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

/// Watches what the API server reports: over-commit and pods moving between nodes at every
/// poll, partial gangs once settled.
struct Watchdog {
    client: Client,
    ns: String,
    seen: HashMap<String, String>,
    polls: usize,
}

impl Watchdog {
    fn new(client: &Client, ns: &str) -> Self {
        Watchdog {
            client: client.clone(),
            ns: ns.into(),
            seen: HashMap::new(),
            polls: 0,
        }
    }

    /// The invariants that must hold at every moment; returns this namespace's pods.
    async fn poll(&mut self) -> BTreeMap<String, Pod> {
        self.polls += 1;
        let pods = loop {
            // The API server may be down on purpose: poll again once it answers.
            match Api::<Pod>::all(self.client.clone())
                .list(&ListParams::default())
                .await
            {
                Ok(l) => break l.items,
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        };
        assert_not_over_committed(&self.client, &pods).await;
        for p in &pods {
            let (Some(uid), Some(node)) = (p.metadata.uid.clone(), node_of(p)) else {
                continue;
            };
            if let Some(before) = self.seen.insert(uid, node.clone()) {
                assert_eq!(
                    before,
                    node,
                    "pod {} bound twice: first to {before}, then to {node}",
                    p.metadata.name.clone().unwrap_or_default()
                );
            }
        }
        pods.into_iter()
            .filter(|p| p.metadata.namespace.as_deref() == Some(self.ns.as_str()))
            .map(|p| (p.metadata.name.clone().unwrap(), p))
            .collect()
    }

    /// Polls until `done` holds for this namespace's pods, then checks that no gang stays
    /// partly bound. Returns how long it took.
    async fn settle(
        &mut self,
        timeout: Duration,
        what: &str,
        done: impl Fn(&BTreeMap<String, Pod>) -> bool,
    ) -> Duration {
        let start = Instant::now();
        loop {
            let pods = self.poll().await;
            if done(&pods) {
                break;
            }
            assert!(
                start.elapsed() < timeout,
                "timed out after {timeout:?} waiting for {what}"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        let took = start.elapsed();
        // A gang seen partly bound may have binds in flight: it must be whole (or empty)
        // within a few seconds.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let partial = partial_gangs(&self.client, &self.ns).await;
            if partial.is_empty() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "gangs of {} left partly bound: {partial:?}",
                self.ns
            );
            self.poll().await;
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        took
    }
}

async fn setup(ns: &str, pool: &str, nodes: usize, shape: serde_json::Value) -> Client {
    let client = client().await;
    install_crds(&client).await;
    namespace(&client, ns).await;
    fake_nodes(&client, pool, 1..=nodes, pool, &shape).await;
    client
}

fn log_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("{name}-{}.log", std::process::id()))
}

fn lines(path: &PathBuf) -> usize {
    std::fs::read_to_string(path)
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

/// Sum of a counter over all its label sets, from the scheduler's /metrics.
/// Fails if the scheduler does not export it (an older build): a missing counter must not
/// read as zero writes.
async fn counter(port: u16, name: &str) -> f64 {
    let (_, body) = http_get(port, "/metrics")
        .await
        .expect("the scheduler serves /metrics");
    let values: Vec<f64> = body
        .lines()
        .filter(|l| l.starts_with(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .collect();
    let family = name.split('{').next().unwrap_or(name);
    assert!(
        !values.is_empty() || body.contains(&format!("# TYPE {family} ")),
        "the scheduler exports no {family}"
    );
    values.iter().sum()
}

fn restart(process: &str, down: Duration) -> String {
    let dir = std::env::var("RB_CLUSTER_DIR").expect("RB_CLUSTER_DIR (run tests/run.sh)");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/cluster/restart.sh");
    let out = Command::new(script)
        .args([&dir, process, &down.as_secs_f64().to_string()])
        .output()
        .expect("restart.sh runs");
    assert!(
        out.status.success(),
        "restart.sh {process} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A PodGroup `group` (minimum `size`) and its `size` pods of 1 cpu, `{group}-{i}`.
async fn one_cpu_gang(place: &Place<'_>, group: &str, size: usize) {
    pod_group(place.client, place.ns, group, size as i32).await;
    for i in 0..size {
        place
            .pod(
                group,
                &format!("{group}-{i}"),
                "main",
                json!({"cpu": "1"}),
                None,
            )
            .await;
    }
}

fn all_bound(prefix: &'static str, n: usize) -> impl Fn(&BTreeMap<String, Pod>) -> bool {
    move |pods| {
        pods.iter()
            .filter(|(name, p)| name.starts_with(prefix) && node_of(p).is_some())
            .count()
            >= n
    }
}

/// Gangs of `size` pods (min `size`) of 1–3 cpu named `{prefix}{g}`, finishing after
/// `runtime`.
async fn gangs(
    place: &Place<'_>,
    prefix: &str,
    count: usize,
    size: usize,
    runtime: &str,
    dice: &mut Dice,
) {
    for g in 0..count {
        let group = format!("{prefix}{g}");
        pod_group(place.client, place.ns, &group, size as i32).await;
        let cpu = 1 + dice.below(3);
        for i in 0..size {
            place
                .pod(
                    &group,
                    &format!("{group}-{i}"),
                    "main",
                    json!({"cpu": cpu.to_string()}),
                    Some(runtime),
                )
                .await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_killed_at_random_moments_never_over_commits_or_half_binds() {
    let _one = crate::ONE_AT_A_TIME.lock().await;
    let (ns, pool, name) = ("chaos-kill", "chaos-kill", "rb-chaos-kill");
    let (rounds, per_round) = if full() { (10, 12) } else { (4, 6) };
    let client = setup(ns, pool, 6, json!({"cpu": "8", "memory": "32Gi"})).await;
    let place = Place {
        client: &client,
        ns,
        pool,
        scheduler: name,
    };
    let mut dice = Dice::new("scheduler kill -9");
    let mut dog = Watchdog::new(&client, ns);
    let mut total = 0;
    for round in 0..rounds {
        // Killed before, during or after this round's pods are created.
        let moment = dice.below(3);
        let scheduler = start_scheduler(name);
        if moment == 0 {
            tokio::time::sleep(Duration::from_millis(dice.below(800))).await;
            drop(scheduler);
            gangs(&place, &format!("r{round}g"), per_round, 4, "3s", &mut dice).await;
        } else {
            let kill_after = Duration::from_millis(100 + dice.below(1500));
            let prefix = format!("r{round}g");
            let create = gangs(&place, &prefix, per_round, 4, "3s", &mut dice);
            let kill = async {
                tokio::time::sleep(kill_after).await;
                drop(scheduler);
            };
            if moment == 1 {
                tokio::join!(create, kill);
            } else {
                create.await;
                kill.await;
            }
        }
        total += per_round * 4;
        println!(
            "round {round}: killed {}",
            ["before", "during", "after"][moment as usize]
        );
        dog.poll().await;
    }
    // The last scheduler runs everything to the end (pods finish after 3 s each).
    let _last = start_scheduler(name);
    let took = dog
        .settle(
            Duration::from_secs(240),
            "every gang to run and finish",
            |pods| pods.values().filter(|p| phase(p) == "Succeeded").count() >= total,
        )
        .await;
    // Status only moves forward: every gang ran, so none may still say Unschedulable.
    let stale = wait_for(
        Duration::from_secs(30),
        "PodGroup status caught up",
        || async {
            let groups = Api::<PodGroup>::namespaced(client.clone(), ns)
                .list(&ListParams::default())
                .await
                .ok()?
                .items;
            let stale: Vec<String> = groups
                .iter()
                .filter(|g| {
                    let s = g.status.as_ref();
                    let unschedulable = s.and_then(|s| s.conditions.as_ref()).is_some_and(|cs| {
                        cs.iter().any(|c| {
                            c.type_.as_ref().map(|t| t.as_str()) == Some("Unschedulable")
                                && c.status.as_deref() == Some("True")
                        })
                    });
                    let done = s.and_then(|s| s.succeeded).unwrap_or(0) >= 4;
                    unschedulable || !done
                })
                .filter_map(|g| g.metadata.name.clone())
                .collect();
            stale.is_empty().then_some(stale)
        },
    )
    .await;
    assert!(stale.is_empty());
    // Every PodGroup was created before its pods: no restarted scheduler may tell a pod its
    // group does not exist (it must read the groups before judging).
    let events = Api::<k8s_openapi::api::events::v1::Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    let missing: Vec<String> = events
        .iter()
        .filter_map(|e| e.note.clone())
        .filter(|n| n.contains("does not exist"))
        .collect();
    assert!(
        missing.is_empty(),
        "pods told their existing PodGroup is missing: {missing:?}"
    );
    println!(
        "chaos table: scheduler kill -9 | {rounds} rounds | {total} pods | over-commit 0, bound twice 0, partial 0, stale status 0, false 'does not exist' 0 | all done {took:.1?} after the last restart | {} polls",
        dog.polls
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_killed_during_evictions_leaves_no_victim_gang_half_evicted() {
    let _one = crate::ONE_AT_A_TIME.lock().await;
    let (ns, pool, name) = ("chaos-evict", "chaos-evict", "rb-chaos-evict");
    let client = setup(ns, pool, 2, json!({"cpu": "4", "memory": "8Gi"})).await;
    for (n, v) in [("chaos-low", 1), ("chaos-high", 1000)] {
        let _ = kube::Api::<k8s_openapi::api::scheduling::v1::PriorityClass>::all(client.clone())
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": n}, "value": v})).unwrap(),
            )
            .await;
    }
    let conf = std::env::temp_dir().join(format!("chaos-evict-{}.conf", std::process::id()));
    std::fs::write(
        &conf,
        "actions: \"enqueue, allocate, preempt\"\ntiers:\n- plugins:\n  - name: priority\n  - name: gang\n  - name: conformance\n- plugins:\n  - name: predicates\n  - name: proportion\n  - name: nodeorder\n",
    )
    .unwrap();
    let conf_arg = conf.to_string_lossy().to_string();
    let args = ["--http-address", "off", "--scheduler-conf", &conf_arg];
    let mut dice = Dice::new("kill -9 during evictions");
    let mut dog = Watchdog::new(&client, ns);
    let scheduler = start_scheduler_with(name, &args);
    let place = Place {
        client: &client,
        ns,
        pool,
        scheduler: name,
    };
    // Two low-priority gangs of 4 × 1 cpu (min 2) fill both nodes.
    for g in ["low-a", "low-b"] {
        prioritized_gang(&place, g, 2, 4, "chaos-low").await;
    }
    dog.settle(
        Duration::from_secs(60),
        "the low gangs bound",
        all_bound("low-", 8),
    )
    .await;
    // A high-priority gang of 4 × 1 cpu needs evictions; the scheduler dies mid-way.
    prioritized_gang(&place, "high", 4, 4, "chaos-high").await;
    // Preemption starts within a cycle (~20 ms after the last pod): kill while its
    // evictions are out.
    tokio::time::sleep(Duration::from_millis(10 + dice.below(150))).await;
    drop(scheduler);
    dog.poll().await;
    let _again = start_scheduler_with(name, &args);
    let took = dog
        .settle(
            Duration::from_secs(90),
            "the high gang bound",
            all_bound("high-", 4),
        )
        .await;
    println!("chaos table: kill -9 during evictions | 1 round | over-commit 0, bound twice 0, partial 0 | high gang bound {took:.1?} after the restart");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_server_and_etcd_killed_and_a_forced_relist_cost_seconds_not_a_storm() {
    let _one = crate::ONE_AT_A_TIME.lock().await;
    let (ns, pool, name) = ("chaos-api", "chaos-api", "rb-chaos-api");
    let outage = Duration::from_secs(if full() { 60 } else { 12 });
    let client = setup(ns, pool, 4, json!({"cpu": "8", "memory": "32Gi"})).await;
    let place = Place {
        client: &client,
        ns,
        pool,
        scheduler: name,
    };
    let port = free_port();
    let log = log_path(name);
    let port_arg = format!("127.0.0.1:{port}");
    let _scheduler = start_scheduler_logged(name, &["--http-address", &port_arg], &log);
    let mut dog = Watchdog::new(&client, ns);
    let mut dice = Dice::new("control-plane kill -9");
    gangs(&place, "before", 2, 4, "600s", &mut dice).await;
    dog.settle(
        Duration::from_secs(60),
        "gangs bound before the outage",
        all_bound("before", 8),
    )
    .await;

    // 1. The API server dies with work in flight: a gang is created just before.
    one_cpu_gang(&place, "during", 4).await;
    let (lines0, writes0) = (
        lines(&log),
        counter(port, "rust_batch_api_writes_total").await,
    );
    let said = restart("kube-apiserver", outage);
    let (lines1, writes1) = (
        lines(&log),
        counter(port, "rust_batch_api_writes_total").await,
    );
    let took = dog
        .settle(
            Duration::from_secs(60),
            "the gang created before the outage bound",
            all_bound("during-", 4),
        )
        .await;
    println!(
        "chaos table: kube-apiserver kill -9, {outage:?} down ({said}) | log lines during the outage: {} | API writes tried during it: {} | gang bound {took:.1?} after it answered",
        lines1 - lines0,
        writes1 - writes0
    );
    assert!(
        lines1 - lines0 <= 60 + outage.as_secs() as usize,
        "the log stays quiet during an outage: {} lines in {outage:?}",
        lines1 - lines0
    );
    assert!(
        writes1 - writes0 <= 30.0,
        "API writes during an outage are probes, not a storm: {}",
        writes1 - writes0
    );
    assert!(
        took < Duration::from_secs(20),
        "scheduling resumed in {took:?}"
    );

    // 2. etcd dies and comes back: the API server reconnects, so does the scheduler.
    let said = restart("etcd", Duration::from_secs(3));
    one_cpu_gang(&place, "after-etcd", 2).await;
    let took = dog
        .settle(
            Duration::from_secs(60),
            "a gang after the etcd restart",
            all_bound("after-etcd-", 2),
        )
        .await;
    println!("chaos table: etcd kill -9, 3s down ({said}) | gang bound {took:.1?} after creation");

    // 3. A forced relist: etcd compacted, then the API server restarted, so every watch
    //    resumes from a compacted resourceVersion (410 Expired) and lists again. Objects
    //    deleted meanwhile must be forgotten, created ones seen.
    compact_etcd().await;
    let said = restart("kube-apiserver", Duration::from_secs(1));
    let relist = Instant::now();
    one_cpu_gang(&place, "after-relist", 2).await;
    let took = dog
        .settle(
            Duration::from_secs(60),
            "a gang after the relist",
            all_bound("after-relist-", 2),
        )
        .await;
    println!(
        "chaos table: etcd compaction + kube-apiserver restart (410, relist) ({said}) | gang bound {:.1?} after the restart",
        relist.elapsed().max(took)
    );
    let stderr = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        !stderr.contains("panicked"),
        "the scheduler did not panic:\n{stderr}"
    );
}

/// A PodGroup `group` (minimum `min`) of priority class `class` and its `size` pods of 1 cpu.
async fn prioritized_gang(place: &Place<'_>, group: &str, min: i32, size: usize, class: &str) {
    let (client, ns, pool, scheduler) = (place.client, place.ns, place.pool, place.scheduler);
    let pg: PodGroup = serde_json::from_value(json!({
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
        "metadata": {"name": group, "namespace": ns},
        "spec": {"minMember": min, "priorityClassName": class}
    }))
    .unwrap();
    Api::<PodGroup>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &pg)
        .await
        .unwrap();
    for i in 0..size {
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": format!("{group}-{i}"), "namespace": ns,
                         "annotations": {"scheduling.k8s.io/group-name": group}},
            "spec": {"schedulerName": scheduler, "priorityClassName": class, "nodeSelector": {"pool": pool},
                     "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}]}
        }))
        .unwrap();
        Api::<Pod>::namespaced(client.clone(), ns)
            .create(&PostParams::default(), &p)
            .await
            .unwrap();
    }
}

/// Compacts etcd at its current revision (its JSON gateway: POST /v3/kv/range, then
/// /v3/kv/compaction).
async fn compact_etcd() {
    let url = std::env::var("RB_ETCD_URL").expect("RB_ETCD_URL (run tests/run.sh)");
    let port: u16 = url.rsplit(':').next().unwrap().parse().unwrap();
    let range = http_post(port, "/v3/kv/range", r#"{"key":"Lw==","limit":1}"#).await;
    let revision: serde_json::Value = serde_json::from_str(&range).expect("etcd answers JSON");
    let rev = revision["header"]["revision"]
        .as_str()
        .map(String::from)
        .or_else(|| {
            revision["header"]["revision"]
                .as_i64()
                .map(|r| r.to_string())
        })
        .expect("a revision");
    let out = http_post(
        port,
        "/v3/kv/compaction",
        &format!(r#"{{"revision":"{rev}","physical":true}}"#),
    )
    .await;
    assert!(!out.contains("\"error\""), "compaction failed: {out}");
}

async fn http_post(port: u16, path: &str, body: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("etcd listens");
    let request = format!(
        "POST {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_bind_leaves_no_gang_short_its_members_are_released_with_a_reason() {
    let _one = crate::ONE_AT_A_TIME.lock().await;
    let (ns, pool, name) = ("chaos-refused", "chaos-refused", "rb-chaos-refused");
    let client = setup(ns, pool, 2, json!({"cpu": "4", "memory": "8Gi"})).await;
    // The API server refuses to bind any pod named refused-* (a CEL admission policy on
    // pods/binding; no webhook server needed).
    let policy = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "chaos-refuse-binds"},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["CREATE"], "resources": ["pods/binding"]}]},
            "validations": [{"expression": "!object.metadata.name.startsWith('refused-')",
                             "message": "binds of refused-* pods are denied by chaos-refuse-binds"}]
        }
    });
    let binding = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": "chaos-refuse-binds"},
        "spec": {"policyName": "chaos-refuse-binds", "validationActions": ["Deny"],
                 "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}}}
    });
    apply_json(&client, "validatingadmissionpolicies", &policy).await;
    apply_json(&client, "validatingadmissionpolicybindings", &binding).await;
    // The policy takes a moment to be enforced: wait until a probe bind is refused.
    let place = Place {
        client: &client,
        ns,
        pool,
        scheduler: name,
    };
    let mut probes = 0;
    wait_for(
        Duration::from_secs(30),
        "the admission policy enforced",
        || {
            probes += 1;
            let probe = format!("refused-probe-{probes}");
            let (client, place) = (client.clone(), &place);
            async move {
                place
                    .raw_pod(&probe, json!({}), json!({}), json!({"cpu": "100m"}))
                    .await;
                let body = json!({"apiVersion": "v1", "kind": "Binding",
                "metadata": {"name": &probe},
                "target": {"apiVersion": "v1", "kind": "Node", "name": format!("{pool}-n1")}});
                let pods = Api::<Pod>::namespaced(client, ns);
                let r = pods
                    .create_subresource::<_, serde_json::Value>(
                        "binding",
                        &probe,
                        &PostParams::default(),
                        &body,
                    )
                    .await;
                pods.delete(&probe, &DeleteParams::default()).await.unwrap();
                r.err()
                    .filter(|e| e.to_string().contains("denied by chaos-refuse-binds"))
                    .map(drop)
            }
        },
    )
    .await;

    let port = free_port();
    let port_arg = format!("127.0.0.1:{port}");
    let _scheduler = start_scheduler_with(
        name,
        &["--http-address", &port_arg, "--short-gang-timeout", "4s"],
    );
    let mut dog = Watchdog::new(&client, ns);
    // Gang g: two pods bind, the third's bind is refused every time.
    pod_group(&client, ns, "g", 3).await;
    for p in ["ok-0", "ok-1", "refused-2"] {
        place.pod("g", p, "main", json!({"cpu": "1"}), None).await;
    }
    // A whole gang beside it is untouched.
    pod_group(&client, ns, "fine", 2).await;
    for p in ["fine-0", "fine-1"] {
        place
            .pod("fine", p, "main", json!({"cpu": "1"}), None)
            .await;
    }
    let started = Instant::now();
    // The bound members of g are released (evicted, so deleted: bare pods) once it stayed
    // short for 4 s, and its PodGroup says which member and why.
    let took = dog
        .settle(
            Duration::from_secs(60),
            "gang g's bound members released",
            |pods| {
                !pods.contains_key("ok-0")
                    && !pods.contains_key("ok-1")
                    && all_bound("fine-", 2)(pods)
            },
        )
        .await;
    assert!(
        took >= Duration::from_secs(3),
        "kept at least the timeout: {took:?}"
    );
    let events = Api::<k8s_openapi::api::events::v1::Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    let released = events.iter().find(|e| {
        e.reason.as_deref() == Some("GangBindFailed")
            && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("g")
    });
    let note = released.and_then(|e| e.note.clone()).unwrap_or_default();
    assert!(
        note.contains(&format!("{ns}/refused-2")) && note.contains("denied by chaos-refuse-binds"),
        "the gang's event names the member and the reason: {note:?}"
    );
    let condition = wait_for(
        Duration::from_secs(20),
        "the condition names the refusal",
        || async {
            condition_message(&client, ns, "g")
                .await
                .filter(|m| m.contains("refused-2"))
        },
    )
    .await;
    println!(
        "chaos table: bind refused by admission policy | 1 gang short | released after {:.1?} | condition: {condition}",
        started.elapsed()
    );
    for (kind, plural) in [
        (
            "ValidatingAdmissionPolicyBinding",
            "validatingadmissionpolicybindings",
        ),
        ("ValidatingAdmissionPolicy", "validatingadmissionpolicies"),
    ] {
        let _ = admission_api(&client, kind, plural)
            .delete("chaos-refuse-binds", &DeleteParams::default())
            .await;
    }
}

/// admissionregistration.k8s.io/v1 objects of `kind` (`plural`).
fn admission_api(client: &Client, kind: &str, plural: &str) -> Api<kube::api::DynamicObject> {
    use kube::api::{ApiResource, GroupVersionKind};
    let gvk = GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind);
    Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(&gvk, plural),
    )
}

async fn apply_json(client: &Client, plural: &str, obj: &serde_json::Value) {
    let kind = obj["kind"].as_str().unwrap();
    let name = obj["metadata"]["name"].as_str().unwrap();
    admission_api(client, kind, plural)
        .patch(
            name,
            &PatchParams::apply("rust-batch-chaos").force(),
            &Patch::Apply(obj),
        )
        .await
        .unwrap_or_else(|e| panic!("{kind} applies: {e}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_thousands_of_pod_groups_leaves_the_status_writer_quiet_within_seconds() {
    let _one = crate::ONE_AT_A_TIME.lock().await;
    let (ns, pool, name) = ("chaos-delete", "chaos-delete", "rb-chaos-delete");
    let count = if full() { 2000 } else { 300 };
    let client = setup(ns, pool, 1, json!({"cpu": "4", "memory": "8Gi"})).await;
    let port = free_port();
    let log = log_path(name);
    let port_arg = format!("127.0.0.1:{port}");
    let scheduler = start_scheduler_logged(name, &["--http-address", &port_arg], &log);
    let api = Api::<PodGroup>::namespaced(client.clone(), ns);
    for i in 0..count {
        pod_group(&client, ns, &format!("pg-{i}"), 1).await;
    }
    // Each is admitted (Pending → Inqueue): one status write apiece, then quiet.
    wait_for(
        Duration::from_secs(120),
        "every PodGroup admitted",
        || async {
            let l = api.list(&ListParams::default()).await.ok()?;
            let inqueue = l
                .items
                .iter()
                .filter(|g| {
                    g.status
                        .as_ref()
                        .and_then(|s| s.phase.as_ref())
                        .is_some_and(|p| p.as_str() == "Inqueue")
                })
                .count();
            (inqueue == count).then_some(())
        },
    )
    .await;
    let writes_before = counter(port, "rust_batch_api_writes_total{kind=\"podgroup status\"").await;
    api.delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .expect("PodGroups deleted");
    let deleted = Instant::now();
    // Quiet: no status write for 3 s in a row, within 15 s of the deletion.
    let mut last = counter(port, "rust_batch_api_writes_total{kind=\"podgroup status\"").await;
    let mut quiet_since = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = counter(port, "rust_batch_api_writes_total{kind=\"podgroup status\"").await;
        if now != last {
            last = now;
            quiet_since = Instant::now();
        }
        if quiet_since.elapsed() >= Duration::from_secs(3) {
            break;
        }
        assert!(
            deleted.elapsed() < Duration::from_secs(15),
            "the status writer still writes 15 s after the deletion ({} writes since)",
            now - writes_before
        );
    }
    let quiet_after = quiet_since.duration_since(deleted);
    let writes_after = last - writes_before;
    let stderr = std::fs::read_to_string(&log).unwrap_or_default();
    let not_found = stderr.matches("404").count() + stderr.matches("not found").count();
    let rss = rss_mib(scheduler.0.id());
    println!(
        "chaos table: {count} PodGroups deleted | status writes after the deletion: {writes_after} | quiet {quiet_after:.1?} after it | 'not found' log lines: {not_found} | scheduler RSS {rss} MiB"
    );
    assert!(not_found <= 5, "no stream of 'not found' lines:\n{stderr}");
    assert!(
        writes_after <= count as f64 / 10.0,
        "at most a few writes raced the deletion: {writes_after}"
    );
    // Events still flow: a pod of ours with no group is told so.
    let place = Place {
        client: &client,
        ns,
        pool,
        scheduler: name,
    };
    place
        .pod("nowhere", "lost-0", "main", json!({"cpu": "1"}), None)
        .await;
    wait_for(
        Duration::from_secs(30),
        "an event for new bad input",
        || async {
            pod_events(&client, ns, "lost-0")
                .await
                .iter()
                .any(|(_, note)| note.contains("does not exist"))
                .then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gated_member_holds_its_gang_back_until_the_gate_is_lifted() {
    let _one = crate::ONE_AT_A_TIME.lock().await;
    let (ns, pool, name) = ("chaos-gate", "chaos-gate", "rb-chaos-gate");
    let client = setup(ns, pool, 1, json!({"cpu": "4", "memory": "8Gi"})).await;
    let _scheduler = start_scheduler(name);
    let mut dog = Watchdog::new(&client, ns);
    pod_group(&client, ns, "g", 2).await;
    let place = Place {
        client: &client,
        ns,
        pool,
        scheduler: name,
    };
    place
        .pod("g", "g-0", "main", json!({"cpu": "1"}), None)
        .await;
    let gated: Pod = serde_json::from_value(json!({
        "metadata": {"name": "g-1", "namespace": ns, "annotations": {"scheduling.k8s.io/group-name": "g"}},
        "spec": {"schedulerName": name, "nodeSelector": {"pool": pool},
                 "schedulingGates": [{"name": "example.com/quota"}],
                 "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}]}
    }))
    .unwrap();
    Api::<Pod>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &gated)
        .await
        .unwrap();
    wait_for(Duration::from_secs(20), "the gated pod told so", || async {
        pod_events(&client, ns, "g-1")
            .await
            .iter()
            .any(|(r, n)| r == "SchedulingGated" && n.contains("example.com/quota"))
            .then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let pods = dog.poll().await;
    assert_eq!(
        node_of(&pods["g-0"]),
        None,
        "nothing of the gang binds while a member is gated"
    );
    Api::<Pod>::namespaced(client.clone(), ns)
        .patch(
            "g-1",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"schedulingGates": null}})),
        )
        .await
        .unwrap();
    dog.settle(
        Duration::from_secs(30),
        "the gang bound once the gate is lifted",
        all_bound("g-", 2),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_deleted_between_decision_and_bind_leaves_no_gang_half_bound() {
    let _one = crate::ONE_AT_A_TIME.lock().await;
    let (ns, pool, name) = ("chaos-node", "chaos-node", "rb-chaos-node");
    let rounds = if full() { 20 } else { 6 };
    let client = setup(ns, pool, 0, json!({})).await;
    let _scheduler = start_scheduler_with(
        name,
        &["--http-address", "off", "--short-gang-timeout", "3s"],
    );
    let place = Place {
        client: &client,
        ns,
        pool,
        scheduler: name,
    };
    let mut dice = Dice::new("node deleted mid-bind");
    let mut dog = Watchdog::new(&client, ns);
    let nodes = Api::<k8s_openapi::api::core::v1::Node>::all(client.clone());
    for round in 0..rounds {
        // One node that holds exactly this round's gang of 2; it goes as the gang is placed.
        let node = format!("{pool}-r{round}");
        fake_node(&client, &node, pool, json!({"cpu": "2", "memory": "4Gi"})).await;
        let group = format!("g{round}");
        pod_group(&client, ns, &group, 2).await;
        for i in 0..2 {
            place
                .pod(
                    &group,
                    &format!("{group}-{i}"),
                    "main",
                    json!({"cpu": "1"}),
                    None,
                )
                .await;
        }
        // The scheduler decides within tens of milliseconds of the last pod.
        tokio::time::sleep(Duration::from_millis(dice.below(60))).await;
        nodes.delete(&node, &DeleteParams::default()).await.unwrap();
        dog.poll().await;
    }
    // Pods bound to a node that is gone still count as bound: each gang must be whole or
    // have nothing bound once the recovery timeout has passed.
    tokio::time::sleep(Duration::from_secs(5)).await;
    dog.settle(Duration::from_secs(30), "the rounds to settle", |_| true)
        .await;
    let pods = dog.poll().await;
    let bound = pods.values().filter(|p| node_of(p).is_some()).count();
    println!(
        "chaos table: node deleted between decision and bind | {rounds} rounds | {bound} of {} pods bound (to a node since deleted), partial 0",
        rounds * 2
    );
}
