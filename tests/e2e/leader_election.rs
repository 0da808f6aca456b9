//! Leader election on the real control plane: replicas of `rust-batch run --leader-elect`
//! (as the shipped ServiceAccount), one leader binding gangs while a warm standby decides
//! nothing. The leader is killed with SIGKILL in the middle of a backlog (twice), stopped
//! with SIGTERM (which releases the lease), and frozen with SIGSTOP past its lease (resumed,
//! it must write nothing and exit); each time another replica takes over
//! and binds the rest (each round's gangs are created one member short, then completed all
//! at once, so the leader dies with most of a round's binds still to do). Checked from what the API server says: no pod ever changes node
//! (bound twice), no pod has two successful binds (Scheduled events), no replica binds
//! while another leads (and the API server refuses a bind under the lease by a replica that
//! does not hold it: deploy/'s fence policy), no partial gang and no over-committed node
//! once settled. Prints
//! each failover time: the leader stopped → the new leader's first bind.
//!
//! `RB_LEADER_GANGS=400` (2,000 pods per round) for the size; the default is 40
//! gangs of 5 per round.

use std::collections::{BTreeMap, HashMap};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use crate::common::*;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::watcher;
use serde_json::json;

const NS: &str = "e2e-leader";
const POOL: &str = "e2e-leader";
const SCHEDULER: &str = "rb-leader";
const LEASE: &str = "rb-e2e-leader";
const GANG_SIZE: usize = 5;

/// Lease duration and renew deadline, seconds: short by default (3 s, 2 s);
/// `RB_LEADER_LEASE=15,10` measures the shipped setting.
fn lease() -> (u64, u64) {
    std::env::var("RB_LEADER_LEASE")
        .ok()
        .and_then(|v| {
            let (d, r) = v.split_once(',')?;
            Some((d.trim().parse().ok()?, r.trim().parse().ok()?))
        })
        .unwrap_or((3, 2))
}

struct Replica {
    instance: String,
    port: u16,
    process: Scheduler,
}

fn replica(instance: &str) -> Replica {
    let port = free_port();
    let log = std::env::temp_dir().join(format!("rb-{instance}.log"));
    let child = Command::new(env!("CARGO_BIN_EXE_rust-batch"))
        .args([
            "run",
            "--scheduler-name",
            SCHEDULER,
            "--schedule-period",
            "500ms",
            "--http-address",
            &format!("127.0.0.1:{port}"),
            "--leader-elect",
            "--leader-elect-lease-name",
            LEASE,
            "--leader-elect-namespace",
            "rust-batch-system",
            "--leader-elect-lease-duration",
            &format!("{}s", lease().0),
            "--leader-elect-renew-deadline",
            &format!("{}s", lease().1),
            // Each bind's event names the replica that made it (reportingInstance).
            "--pod-scheduled-events",
        ])
        .env("KUBECONFIG", scheduler_kubeconfig())
        // Events name the replica that bound (reportingInstance).
        .env("POD_NAME", instance)
        .env(
            "RUST_LOG",
            "info,kube=warn,kube_client=error,kube_client::client::builder=off",
        )
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(&log).unwrap()))
        .spawn()
        .expect("rust-batch starts");
    eprintln!("started {instance} (log {})", log.display());
    Replica {
        instance: instance.into(),
        port,
        process: Scheduler(child),
    }
}

/// What a replica's /readyz says: Some(true) leader, Some(false) ready standby.
async fn role(port: u16) -> Option<bool> {
    let (code, body) = http_get(port, "/readyz").await?;
    match (code, body.trim()) {
        (200, "ok: leader") => Some(true),
        (200, "ok: standby") => Some(false),
        _ => None,
    }
}

async fn leader_metric(port: u16) -> Option<String> {
    let (_, body) = http_get(port, "/metrics").await?;
    body.lines()
        .find(|l| l.starts_with("rust_batch_leader "))
        .map(|l| l.trim_start_matches("rust_batch_leader ").to_string())
}

/// Binds the shipped fence policy (deploy/'s `rust-batch-leader-fence`) to this test's
/// lease, as deploy/ binds it to `rust-batch`, and waits until the API server enforces it:
/// a bind made under the lease by a replica that does not hold it is refused.
async fn fence_this_lease(client: &kube::Client) {
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
    let gvk = GroupVersionKind::gvk(
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingAdmissionPolicyBinding",
    );
    let api: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(&gvk, "validatingadmissionpolicybindings"),
    );
    let binding = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": "rb-e2e-leader-fence"},
        "spec": {
            "policyName": "rust-batch-leader-fence",
            "validationActions": ["Deny"],
            "paramRef": {"name": LEASE, "namespace": "rust-batch-system",
                         "parameterNotFoundAction": "Allow"}
        }
    });
    api.patch(
        "rb-e2e-leader-fence",
        &PatchParams::apply("rust-batch-e2e").force(),
        &Patch::Apply(&binding),
    )
    .await
    .expect("the fence binding applies");
    // Pods no scheduler of this test owns, bound by hand under the lease as a replica that
    // does not lead: allowed until the binding takes effect, refused from then on.
    let pods = Api::<Pod>::namespaced(client.clone(), NS);
    let mut probes = 0;
    let refused = wait_for(Duration::from_secs(30), "the fence enforced", || {
        probes += 1;
        let (pods, name) = (pods.clone(), format!("fence-probe-{probes}"));
        async move {
            let probe: Pod = serde_json::from_value(json!({
                "metadata": {"name": &name, "namespace": NS},
                "spec": {"schedulerName": "nobody", "containers": [{"name": "c", "image": "busybox"}]}
            }))
            .unwrap();
            pods.create(&PostParams::default(), &probe).await.unwrap();
            let body = json!({"apiVersion": "v1", "kind": "Binding",
                "metadata": {"name": &name, "annotations": rust_batch::kube::binder::fence_annotations(
                    "rust-batch-system", LEASE, "a-replica-that-does-not-lead")},
                "target": {"apiVersion": "v1", "kind": "Node", "name": "leader-n1"}});
            let r = pods
                .create_subresource::<_, serde_json::Value>(
                    "binding",
                    &name,
                    &PostParams::default(),
                    &body,
                )
                .await;
            pods.delete(&name, &Default::default()).await.unwrap();
            r.err()
                .map(|e| e.to_string())
                .filter(|e| e.contains("no longer holds lease"))
        }
    })
    .await;
    eprintln!("fence enforced after {probes} probe(s): {refused}");
}

/// Waits until exactly one replica leads and every other one is a ready standby; fails
/// if two ever say they lead. Returns the leader's index.
async fn one_leader(replicas: &[Replica]) -> usize {
    wait_for(
        Duration::from_secs(60),
        "one leader and ready standbys",
        || async {
            let mut roles = Vec::new();
            for r in replicas {
                roles.push(role(r.port).await);
            }
            let leaders: Vec<usize> = (0..roles.len())
                .filter(|i| roles[*i] == Some(true))
                .collect();
            assert!(leaders.len() <= 1, "two replicas lead at once: {roles:?}");
            (leaders.len() == 1 && roles.iter().all(|r| r.is_some())).then(|| leaders[0])
        },
    )
    .await
}

/// Per pod: the node it was seen bound to, and every other node it was later seen on.
#[derive(Default)]
struct Binds {
    node: HashMap<String, String>,
    /// When the watch first showed each pod bound.
    seen: HashMap<String, SystemTime>,
    twice: Vec<String>,
}

fn watch_binds(client: &kube::Client) -> Arc<Mutex<Binds>> {
    let binds = Arc::new(Mutex::new(Binds::default()));
    let seen = binds.clone();
    let api = Api::<Pod>::namespaced(client.clone(), NS);
    tokio::spawn(async move {
        let mut stream = watcher(api, watcher::Config::default()).boxed();
        while let Ok(Some(event)) = stream.try_next().await {
            let pods: Vec<Pod> = match event {
                watcher::Event::Apply(p) | watcher::Event::InitApply(p) => vec![p],
                _ => continue,
            };
            let mut b = seen.lock().unwrap();
            for p in pods {
                let (Some(name), Some(node)) = (p.metadata.name.clone(), node_of(&p)) else {
                    continue;
                };
                match b.node.get(&name) {
                    Some(n) if *n != node => {
                        let line = format!("{name}: {n} then {node}");
                        b.twice.push(line);
                    }
                    Some(_) => {}
                    None => {
                        b.seen.insert(name.clone(), SystemTime::now());
                        b.node.insert(name, node);
                    }
                }
            }
        }
    });
    binds
}

/// Every event in the namespace: (reason and object, replica, time).
async fn all_events(client: &kube::Client) -> Vec<(String, String, SystemTime)> {
    Api::<Event>::namespaced(client.clone(), NS)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|e| {
            let what = format!(
                "{} {}",
                e.reason.clone().unwrap_or_default(),
                e.regarding.as_ref()?.name.clone()?
            );
            let at: SystemTime = e.event_time.as_ref()?.0.into();
            Some((what, e.reporting_instance.clone()?, at))
        })
        .collect()
}

/// The pods' Scheduled events (one per successful bind): (pod, replica, time).
async fn scheduled_events(client: &kube::Client) -> Vec<(String, String, SystemTime)> {
    Api::<Event>::namespaced(client.clone(), NS)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("Scheduled"))
        .filter_map(|e| {
            // Pods only: a PodGroup's Scheduled event says its gang runs, not a bind.
            let regarding = e.regarding.as_ref()?;
            if regarding.kind.as_deref() != Some("Pod") {
                return None;
            }
            let pod = regarding.name.clone()?;
            let instance = e.reporting_instance.clone()?;
            let at: SystemTime = e.event_time.as_ref()?.0.into();
            Some((pod, instance, at))
        })
        .collect()
}

/// Creates the round's gangs `gangs`: their PodGroups and all members but the last (the
/// gangs are incomplete: nothing binds), then, with `complete`, the last member of each, so
/// those gangs become a backlog of bindable gangs at once.
async fn create_round(
    client: kube::Client,
    round: usize,
    gangs: std::ops::Range<usize>,
    complete: bool,
) {
    let place = Place {
        client: &client,
        ns: NS,
        pool: POOL,
        scheduler: SCHEDULER,
    };
    let members = if complete {
        GANG_SIZE - 1..GANG_SIZE
    } else {
        0..GANG_SIZE - 1
    };
    let groups: Vec<String> = gangs.map(|g| format!("r{round}-g{g}")).collect();
    futures::stream::iter(groups.iter())
        .for_each_concurrent(8, |group| {
            let (place, client, members) = (&place, &client, members.clone());
            async move {
                if !complete {
                    pod_group(client, NS, group, GANG_SIZE as i32).await;
                }
                for i in members {
                    place
                        .pod(
                            group,
                            &format!("{group}-{i}"),
                            "worker",
                            json!({"cpu": "100m"}),
                            None,
                        )
                        .await;
                }
            }
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_standby_takes_over_without_ever_binding_twice() {
    let gangs: usize = std::env::var("RB_LEADER_GANGS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40);
    assert!(
        gangs >= 2,
        "RB_LEADER_GANGS: at least 2 (half bind before each stop, half after)"
    );
    // SIGSTOP: the leader is frozen past its lease (as by a long pause), the other replica
    // takes over, and the old one, resumed, must write nothing and exit.
    let rounds = ["SIGKILL", "SIGKILL", "SIGTERM", "SIGSTOP"];
    let total_pods = gangs * GANG_SIZE * rounds.len();
    let client = client().await;
    install_crds(&client).await;
    namespace(&client, NS).await;
    // 100m per pod, 8 cpu and 110 pods per node: room for every round's pods.
    let nodes = (total_pods / 70).max(4);
    fake_nodes(
        &client,
        "leader",
        1..=nodes,
        POOL,
        &json!({"cpu": "8", "memory": "64Gi"}),
    )
    .await;
    let binds = watch_binds(&client);
    let mut replicas = vec![replica("rb-le-0"), replica("rb-le-1")];
    one_leader(&replicas).await; // the lease exists: the fence has its parameter
    fence_this_lease(&client).await;
    let mut failovers = Vec::new();
    // Since when the current leader leads (for the first, since the test began).
    let mut led_since = SystemTime::now();

    for (round, how) in rounds.iter().enumerate() {
        let leader = one_leader(&replicas).await;
        let standby = 1 - leader;
        assert_eq!(
            leader_metric(replicas[leader].port).await.as_deref(),
            Some("1")
        );
        assert_eq!(
            leader_metric(replicas[standby].port).await.as_deref(),
            Some("0")
        );
        let prefix = format!("r{round}-");
        let round_pods = gangs * GANG_SIZE;
        create_round(client.clone(), round, 0..gangs, false).await;
        // Half the round's gangs complete before the leader stops, half after: the leader
        // stops mid-backlog, and a fast leader cannot bind the whole round before its stop
        // lands (the successor would have nothing to bind, and no bind to time).
        let half = gangs / 2;
        let creator = tokio::spawn(create_round(client.clone(), round, 0..half, true));
        // Mid-backlog: some of this round's gangs bound, most still to bind.
        let threshold = (round_pods / 6).clamp(1, half * GANG_SIZE);
        wait_for(
            Duration::from_secs(120),
            "the leader binding this round",
            || async {
                let b = binds.lock().unwrap();
                (b.node.keys().filter(|n| n.starts_with(&prefix)).count() >= threshold)
                    .then_some(())
            },
        )
        .await;
        let bound_before = binds
            .lock()
            .unwrap()
            .node
            .keys()
            .filter(|n| n.starts_with(&prefix))
            .count();
        let old = replicas.remove(leader);
        let stopped_at = SystemTime::now();
        let stop = Instant::now();
        let signal = |s: &str| {
            assert!(Command::new("kill")
                .args([s, &old.process.0.id().to_string()])
                .status()
                .unwrap()
                .success())
        };
        signal(match *how {
            "SIGKILL" => "-KILL",
            "SIGTERM" => "-TERM",
            _ => "-STOP",
        });
        let mut old = old;
        if *how != "SIGSTOP" {
            let status = tokio::task::block_in_place(|| old.process.0.wait()).unwrap();
            if *how == "SIGTERM" {
                assert!(
                    status.success(),
                    "{} exits cleanly on SIGTERM: {status}",
                    old.instance
                );
                eprintln!("{} exited {:?} after SIGTERM", old.instance, stop.elapsed());
            }
        }
        // The round's other half completes once the old leader cannot bind (killed,
        // exited, or frozen): work only its successor can do.
        let rest = tokio::spawn(create_round(client.clone(), round, half..gangs, true));
        // A fresh replica joins as the next standby.
        replicas.push(replica(&format!("rb-le-{}", round + 2)));
        if *how == "SIGSTOP" {
            // Frozen well past its lease: another replica leads meanwhile.
            tokio::time::sleep(Duration::from_secs(lease().0 * 2)).await;
            assert!(Command::new("kill")
                .args(["-CONT", &old.process.0.id().to_string()])
                .status()
                .unwrap()
                .success());
            let status = wait_for(
                Duration::from_secs(20),
                "the resumed old leader to exit",
                || {
                    let exited = old.process.0.try_wait().unwrap();
                    async move { exited }
                },
            )
            .await;
            assert!(
                !status.success(),
                "a replica that lost its lease exits with an error"
            );
            let log = std::fs::read_to_string(
                std::env::temp_dir().join(format!("rb-{}.log", old.instance)),
            )
            .unwrap();
            assert!(
                log.contains("lost the leader lease"),
                "{} says why it stopped",
                old.instance
            );
            // Calls it had on their way when frozen went out on resume: the API server's
            // fence refused each (how many depends on the moment it froze).
            let fenced = log
                .lines()
                .filter(|l| l.contains("rust-batch-leader-fence"))
                .count();
            eprintln!(
                "{} resumed after {} s frozen, wrote nothing ({fenced} late call(s) refused by \
                 the API server's fence), exited: {status}",
                old.instance,
                lease().0 * 2
            );
        }
        creator.await.unwrap();
        rest.await.unwrap();
        wait_for(
            Duration::from_secs(180),
            "every pod of the round bound by the new leader",
            || async {
                let b = binds.lock().unwrap();
                (b.node.keys().filter(|n| n.starts_with(&prefix)).count() == round_pods)
                    .then_some(())
            },
        )
        .await;
        check_invariants(&client, NS).await;
        // Who bound what, and when. Events are published from a queue after the binds:
        // wait for the new leader's.
        let (events, first) = wait_for(
            Duration::from_secs(120),
            "the new leader's Scheduled events",
            || async {
                let events = scheduled_events(&client).await;
                // The new leader's first bind: the earliest the watch saw a pod bound that
                // the new leader's Scheduled event claims (an event's own time is when it
                // left the queue, after the bind).
                let first = {
                    let b = binds.lock().unwrap();
                    events
                        .iter()
                        .filter(|(pod, who, _)| pod.starts_with(&prefix) && *who != old.instance)
                        .filter_map(|(pod, who, _)| Some((b.seen.get(pod).copied()?, who.clone())))
                        .min()
                }?;
                Some((events, first))
            },
        )
        .await;
        // Not a word from anyone else while it led: no bind, and no event of any kind (a
        // standby tells nobody anything).
        let by_others_before: Vec<_> = all_events(&client)
            .await
            .into_iter()
            .filter(|(_, who, at)| *who != old.instance && *at > led_since && *at < stopped_at)
            .collect();
        assert!(
            by_others_before.is_empty(),
            "another replica wrote while {} led: {by_others_before:?}",
            old.instance
        );
        let late: Vec<_> = events
            .iter()
            .filter(|(_, who, at)| *who == old.instance && *at > first.0)
            .collect();
        assert!(
            late.is_empty(),
            "{} bound after the new leader took over: {late:?}",
            old.instance
        );
        let failover = first.0.duration_since(stopped_at).unwrap_or_default();
        eprintln!(
            "round {round}: {how} of {} with {bound_before}/{round_pods} bound; {} took over, first bind after {failover:?}",
            old.instance, first.1
        );
        failovers.push((how.to_string(), failover));
        // The next leader's term, as far as anyone else is concerned, starts with its first
        // bind (until the old one has stepped down it may still write: SIGTERM takes a
        // moment to be handled).
        led_since = first.0;
    }

    {
        let b = binds.lock().unwrap();
        assert!(b.twice.is_empty(), "pods bound twice: {:?}", b.twice);
        let bound = b
            .node
            .keys()
            .filter(|n| !n.starts_with("fence-probe"))
            .count();
        assert_eq!(bound, total_pods, "every pod bound");
    }
    let mut per_pod: BTreeMap<String, usize> = BTreeMap::new();
    for (pod, _, _) in scheduled_events(&client).await {
        *per_pod.entry(pod).or_default() += 1;
    }
    let twice: Vec<_> = per_pod.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        twice.is_empty(),
        "pods with two successful binds: {twice:?}"
    );
    assert!(partial_gangs(&client, NS).await.is_empty());
    // Every bind was made under the lease (the fence could refuse it).
    let unfenced: Vec<String> = Api::<Pod>::namespaced(client.clone(), NS)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| node_of(p).is_some())
        .filter(|p| {
            !p.metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(rust_batch::kube::binder::LEADER_ANNOTATION))
        })
        .filter_map(|p| p.metadata.name)
        .collect();
    assert!(unfenced.is_empty(), "bound without the fence: {unfenced:?}");
    let (duration, deadline) = lease();
    eprintln!("failover times (lease {duration}s, renew deadline {deadline}s): {failovers:?}");
    for (how, t) in &failovers {
        // SIGKILL and SIGSTOP: the lease runs out first; SIGTERM releases it, and the
        // standby rereads the lease every renew interval (half the deadline).
        let limit = if how == "SIGTERM" {
            deadline / 2 + 4
        } else {
            duration + 7
        };
        assert!(*t < Duration::from_secs(limit), "{how} failover took {t:?}");
    }
}
