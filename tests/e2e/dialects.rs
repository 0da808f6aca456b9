//! End-to-end on a real control plane: every way of declaring a gang. S1 through
//! scheduler-plugins' PodGroup, the legacy (ACK/Koordinator) PodGroup and kube-batch
//! annotations; S3 and S4 through Koordinator annotations; Strict and NonStrict gangs
//! competing; a waiting-time expiry; bad annotations; and the shapes operators create
//! (training-operator in Volcano and scheduler-plugins mode, MPI-operator-like jobs with
//! `schedulerName: volcano`). The two invariants are checked on every poll. Without a cluster this test fails; it never skips.

use std::time::Duration;

use crate::common::*;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, PostParams};
use kube::Client;
use rust_batch::kube::dialects::coscheduling::{GroupObject, SigsPodGroup, XK8sPodGroup};
use rust_batch::kube::dialects::volcano::PodGroup;
use serde_json::{json, Value};

const KOORD: &str = "gang.scheduling.koordinator.sh";

async fn start(name: &str, extra_names: &[&str]) -> (Scheduler, u16) {
    let extra: Vec<&str> = extra_names
        .iter()
        .flat_map(|n| ["--scheduler-name", *n])
        .collect();
    start_ready_scheduler(name, &extra).await
}

async fn gang_info(port: u16, ns: &str, name: &str) -> Option<Value> {
    let (code, body) = http_get(
        port,
        &format!("/apis/v1/plugins/Coscheduling/gang/{ns}/{name}"),
    )
    .await?;
    (code == 200).then(|| serde_json::from_str(&body).unwrap())
}

/// Polls for `secs` seconds that no pod of `ns` is bound (and the invariants hold).
async fn stays_unbound(client: &Client, ns: &str, secs: u64) {
    for _ in 0..secs * 2 {
        let pods = check_invariants(client, ns).await;
        let bound: Vec<&String> = pods
            .iter()
            .filter(|(_, p)| node_of(p).is_some())
            .map(|(n, _)| n)
            .collect();
        assert!(bound.is_empty(), "{ns}: bound too early: {bound:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn all_running(client: &Client, ns: &str, n: usize, what: &str) {
    wait_for(Duration::from_secs(45), what, || async {
        let pods = check_invariants(client, ns).await;
        (pods.len() == n && pods.values().all(|p| phase(p) == "Running")).then_some(())
    })
    .await;
}

async fn create<K>(client: &Client, ns: &str, object: Value)
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope>
        + Clone
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let obj: K = serde_json::from_value(object).unwrap();
    Api::<K>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &obj)
        .await
        .expect("object created");
}

/// The dialects S1 runs through here (Volcano PodGroups in volcano_all_or_nothing,
/// ACK labels in driver_robustness).
#[derive(Clone, Copy, Debug)]
enum Dialect {
    XK8s,
    Sigs,
    KubeBatch,
}

/// S1 (1 PS + 4 workers × 2 GPUs on 2 nodes × 2 GPUs: nothing binds; 2 more nodes: all
/// bind) with the gang declared in one dialect.
async fn s1_via(client: &Client, port: u16, scheduler: &str, dialect: Dialect) {
    let tag = format!("{dialect:?}").to_lowercase();
    let ns = format!("e2e-s1-{tag}");
    let gpu_node = json!({"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "2"});
    let place = place_with(client, &ns, scheduler, 2, gpu_node.clone()).await;
    // The PodGroup object, if the dialect has one: minMember 5, as the pods' gang.
    let object = |group: &str| {
        json!({
            "apiVersion": format!("{group}/v1alpha1"), "kind": "PodGroup",
            "metadata": {"name": "tf-smoke-gpu", "namespace": ns},
            "spec": {"minMember": 5}
        })
    };
    let (labels, annotations, dialect_name) = match dialect {
        Dialect::XK8s => {
            create::<XK8sPodGroup>(client, &ns, object("scheduling.x-k8s.io")).await;
            let labels = json!({"scheduling.x-k8s.io/pod-group": "tf-smoke-gpu"});
            (labels, json!({}), "scheduling.x-k8s.io")
        }
        Dialect::Sigs => {
            create::<SigsPodGroup>(client, &ns, object("scheduling.sigs.k8s.io")).await;
            let labels = json!({"pod-group.scheduling.sigs.k8s.io": "tf-smoke-gpu"});
            (labels, json!({}), "scheduling.sigs.k8s.io")
        }
        // kube-batch: the annotations alone make the gang, no object.
        Dialect::KubeBatch => (
            json!({}),
            json!({"scheduling.k8s.io/group-name": "tf-smoke-gpu",
                   "scheduling.k8s.io/group-min-member": "5"}),
            "annotations",
        ),
    };
    let pods = std::iter::once(("ps-0".to_string(), json!({"cpu": "1"})))
        .chain((0..4).map(|i| (format!("worker-{i}"), json!({"nvidia.com/gpu": "2"}))));
    for (name, request) in pods {
        let (l, a) = (labels.clone(), annotations.clone());
        place.raw_pod(&name, l, a, request).await;
    }
    let gang = wait_for(
        Duration::from_secs(30),
        "S1 gang says it is short of GPUs",
        || async {
            check_invariants(client, &ns).await;
            gang_info(port, &ns, "tf-smoke-gpu").await.filter(|g| {
                g["pending"]
                    .to_string()
                    .contains("Insufficient nvidia.com/gpu")
            })
        },
    )
    .await;
    assert_eq!(gang["minRequiredNumber"], 5, "{gang}");
    assert_eq!(gang["dialect"], dialect_name, "{gang}");
    stays_unbound(client, &ns, 2).await;
    fake_nodes(client, &ns, 3..=4, &ns, &gpu_node).await;
    all_running(client, &ns, 5, "S1 gang bound whole").await;
    let pods = check_invariants(client, &ns).await;
    assert_eq!(distinct_nodes(&pods, "worker"), 4);
    // The object's own status (through its status subresource) follows.
    let phase_of = || async {
        match dialect {
            Dialect::XK8s => status_of::<XK8sPodGroup>(client, &ns).await,
            Dialect::Sigs => status_of::<SigsPodGroup>(client, &ns).await,
            Dialect::KubeBatch => Some((Some("Running".to_string()), Some(5))),
        }
    };
    wait_for(
        Duration::from_secs(30),
        "PodGroup status Running, 5 running",
        || async { (phase_of().await? == (Some("Running".to_string()), Some(5))).then_some(()) },
    )
    .await;
}

/// Phase and running count in the status of the coscheduling PodGroup `tf-smoke-gpu`.
async fn status_of<K>(client: &Client, ns: &str) -> Option<(Option<String>, Option<i32>)>
where
    K: GroupObject
        + kube::Resource<Scope = kube::core::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let group = Api::<K>::namespaced(client.clone(), ns)
        .get("tf-smoke-gpu")
        .await
        .ok()?;
    let status = group.cosched_status()?;
    Some((status.phase.clone(), status.running))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s1_through_scheduler_plugins_legacy_and_kube_batch_dialects() {
    let client = client().await;
    install_crds(&client).await;
    let (_scheduler, port) = start("rust-batch-s1-dialects", &[]).await;
    let name = "rust-batch-s1-dialects";
    tokio::join!(
        s1_via(&client, port, name, Dialect::XK8s),
        s1_via(&client, port, name, Dialect::Sigs),
        s1_via(&client, port, name, Dialect::KubeBatch),
    );
}

fn koord(pairs: &[(&str, &str)]) -> Value {
    let mut m = serde_json::Map::new();
    for (k, v) in pairs {
        let key = if k.contains('/') {
            k.to_string()
        } else {
            format!("{KOORD}/{k}")
        };
        m.insert(key, Value::String(v.to_string()));
    }
    Value::Object(m)
}

/// S3: a Koordinator gang of 2 waits with one pod, binds with two; the debug endpoint
/// reports it.
async fn s3(client: &Client, port: u16, scheduler: &str) {
    let ns = "e2e-s3";
    let place = place_with(
        client,
        ns,
        scheduler,
        1,
        json!({"cpu": "4", "memory": "8Gi"}),
    )
    .await;
    let small = json!({"cpu": "40m", "memory": "40Mi"});
    let ann = koord(&[("name", "gang-example"), ("min-available", "2")]);
    place
        .raw_pod("pod-example1", json!({}), ann.clone(), small.clone())
        .await;
    wait_for(Duration::from_secs(30), "S3 gang known", || async {
        gang_info(port, ns, "gang-example").await
    })
    .await;
    stays_unbound(client, ns, 2).await;
    place.raw_pod("pod-example2", json!({}), ann, small).await;
    all_running(client, ns, 2, "S3 both bound").await;
    let gang = wait_for(
        Duration::from_secs(10),
        "debug API sees both bound",
        || async {
            gang_info(port, ns, "gang-example")
                .await
                .filter(|g| g["boundChildren"].as_array().is_some_and(|b| b.len() == 2))
        },
    )
    .await;
    assert_eq!(gang["minRequiredNumber"], 2, "{gang}");
    assert_eq!(gang["mode"], "Strict", "{gang}");
    assert_eq!(gang["gangFrom"], "GangFromPodAnnotation", "{gang}");
}

/// S4: two gangs of one GangGroup, room for 3 of their 4 pods: none binds; one more slot:
/// all 4 bind.
async fn s4(client: &Client, scheduler: &str) {
    let ns = "e2e-s4";
    let slot = json!({"cpu": "1", "memory": "4Gi"});
    let place = place_with(client, ns, scheduler, 3, slot.clone()).await;
    let groups = r#"["e2e-s4/gang-a","e2e-s4/gang-b"]"#;
    for gang in ["gang-a", "gang-b"] {
        let ann = koord(&[("name", gang), ("min-available", "2"), ("groups", groups)]);
        for i in 0..2 {
            place
                .raw_pod(
                    &format!("{gang}-{i}"),
                    json!({}),
                    ann.clone(),
                    json!({"cpu": "1"}),
                )
                .await;
        }
    }
    stays_unbound(client, ns, 4).await;
    fake_nodes(client, ns, 4..=4, ns, &slot).await;
    all_running(client, ns, 4, "S4 all four bound together").await;
}

/// A Strict and a NonStrict gang want the same 4 cpus, each all of them: one runs, then the
/// other, never a deadlock, never a partial gang.
async fn strict_and_non_strict(client: &Client, scheduler: &str) {
    let ns = "e2e-modes";
    let place = place_with(
        client,
        ns,
        scheduler,
        2,
        json!({"cpu": "2", "memory": "8Gi"}),
    )
    .await;
    for (gang, mode) in [("strict", "Strict"), ("loose", "NonStrict")] {
        let ann = koord(&[
            ("name", gang),
            ("min-available", "4"),
            ("mode", mode),
            ("waiting-time", "20s"),
            ("rust-batch.io/runtime", "4s"),
        ]);
        for i in 0..4 {
            place
                .raw_pod(
                    &format!("{gang}-{i}"),
                    json!({}),
                    ann.clone(),
                    json!({"cpu": "1"}),
                )
                .await;
        }
    }
    wait_for(
        Duration::from_secs(60),
        "both gangs ran to completion",
        || async {
            let pods = check_invariants(client, ns).await;
            (pods.len() == 8 && pods.values().all(|p| phase(p) == "Succeeded")).then_some(())
        },
    )
    .await;
}

/// A NonStrict gang that cannot fit holds what it can for its waiting time, then says so
/// on its pods (WaitingTimeExpired), releases it, and backs off; nothing binds.
async fn waiting_time_expiry(client: &Client, port: u16, scheduler: &str) {
    let ns = "e2e-expiry";
    let place = place_with(
        client,
        ns,
        scheduler,
        1,
        json!({"cpu": "2", "memory": "8Gi"}),
    )
    .await;
    let ann = koord(&[
        ("name", "big"),
        ("min-available", "4"),
        ("mode", "NonStrict"),
        ("waiting-time", "3s"),
    ]);
    for i in 0..4 {
        place
            .raw_pod(
                &format!("big-{i}"),
                json!({}),
                ann.clone(),
                json!({"cpu": "1"}),
            )
            .await;
    }
    let held = wait_for(
        Duration::from_secs(20),
        "the gang holds two placements",
        || async {
            gang_info(port, ns, "big").await.filter(|g| {
                g["waitingForBindChildren"]
                    .as_array()
                    .is_some_and(|w| w.len() == 2)
            })
        },
    )
    .await;
    assert_eq!(held["mode"], "NonStrict", "{held}");
    assert_eq!(held["waitTime"], "3s", "{held}");
    let text = explain(port, "e2e-expiry/big");
    assert!(text.contains("mode NonStrict"), "{text}");
    assert!(text.contains("waiting time 3s"), "{text}");
    let note = wait_for(
        Duration::from_secs(30),
        "a WaitingTimeExpired event",
        || async {
            check_invariants(client, ns).await;
            pod_events(client, ns, "big-0")
                .await
                .into_iter()
                .map(|(_, note)| note)
                .find(|n| n.contains("gang waited 3s without every member fitting"))
        },
    )
    .await;
    assert!(note.contains("retrying after a backoff"), "{note}");
    let pods = check_invariants(client, ns).await;
    assert!(pods.values().all(|p| node_of(p).is_none()));
}

/// Bad Koordinator annotations: an event on the pod with the exact problem, the pod stays
/// Pending, and a good gang next to them schedules.
async fn bad_input(client: &Client, scheduler: &str) {
    let ns = "e2e-koord-bad";
    let place = place_with(
        client,
        ns,
        scheduler,
        1,
        json!({"cpu": "8", "memory": "8Gi"}),
    )
    .await;
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "bad-groups",
            koord(&[("name", "g1"), ("min-available", "1"), ("groups", "[oops")]),
            "is not a JSON list",
        ),
        (
            "bad-duration",
            koord(&[
                ("name", "g2"),
                ("min-available", "1"),
                ("waiting-time", "ten minutes"),
            ]),
            "\"ten minutes\" is not a duration",
        ),
        (
            "bad-name",
            koord(&[("name", "Bad_Name"), ("min-available", "1")]),
            "\"Bad_Name\" is not a DNS subdomain",
        ),
        (
            "bad-min",
            koord(&[("name", "g3"), ("min-available", "two")]),
            "\"two\" is not a whole number",
        ),
        (
            "min-over-total",
            koord(&[
                ("name", "g4"),
                ("min-available", "3"),
                ("total-number", "2"),
            ]),
            "min-available 3 is larger than total-number 2",
        ),
        (
            "ghost-group",
            koord(&[
                ("name", "g5"),
                ("min-available", "1"),
                ("groups", r#"["e2e-koord-bad/ghost"]"#),
            ]),
            "gang group member e2e-koord-bad/ghost does not exist",
        ),
    ];
    for (name, ann, _) in &cases {
        place
            .raw_pod(name, json!({}), ann.clone(), json!({"cpu": "100m"}))
            .await;
    }
    place
        .raw_pod(
            "good",
            json!({}),
            koord(&[("name", "fine"), ("min-available", "1")]),
            json!({"cpu": "100m"}),
        )
        .await;
    wait_for(Duration::from_secs(30), "the good pod runs", || async {
        let pods = check_invariants(client, ns).await;
        pods.get("good")
            .filter(|p| phase(p) == "Running")
            .map(|_| ())
    })
    .await;
    for (name, _, problem) in &cases {
        wait_for(
            Duration::from_secs(30),
            &format!("event on {name}: {problem}"),
            || async {
                pod_events(client, ns, name)
                    .await
                    .iter()
                    .any(|(reason, note)| reason == "FailedScheduling" && note.contains(problem))
                    .then_some(())
            },
        )
        .await;
    }
    let pods = check_invariants(client, ns).await;
    for (name, _, _) in &cases {
        assert!(node_of(&pods[*name]).is_none(), "{name} must stay Pending");
    }
}

/// A Koordinator scenario's own scheduler (`rust-batch-koord-<scenario>`): each scenario is
/// its own test, in its own namespace and node pool, so a failure names it.
async fn koord_scheduler(scenario: &str) -> (Client, Scheduler, u16, String) {
    let client = client().await;
    install_crds(&client).await;
    let name = format!("rust-batch-koord-{scenario}");
    let (scheduler, port) = start(&name, &[]).await;
    (client, scheduler, port, name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn koordinator_s3_gang_binds_once_min_available_pods_exist() {
    let (client, _scheduler, port, name) = koord_scheduler("s3").await;
    s3(&client, port, &name).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn koordinator_s4_gang_group_binds_all_gangs_together() {
    let (client, _scheduler, _port, name) = koord_scheduler("s4").await;
    s4(&client, &name).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn koordinator_strict_and_non_strict_gangs_compete() {
    let (client, _scheduler, _port, name) = koord_scheduler("modes").await;
    strict_and_non_strict(&client, &name).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn koordinator_waiting_time_expiry_releases_and_retries() {
    let (client, _scheduler, port, name) = koord_scheduler("expiry").await;
    waiting_time_expiry(&client, port, &name).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn koordinator_bad_annotations_are_reported() {
    let (client, _scheduler, _port, name) = koord_scheduler("bad-input").await;
    bad_input(&client, &name).await;
}

/// A namespace of its own with two 4-cpu nodes, for one operator's job.
async fn operator_place<'a>(client: &'a Client, ns: &'a str, scheduler: &'a str) -> Place<'a> {
    place_with(
        client,
        ns,
        scheduler,
        2,
        json!({"cpu": "4", "memory": "16Gi"}),
    )
    .await
}

/// A namespace of its own with `nodes` nodes of one shape in a pool of the same name.
async fn place_with<'a>(
    client: &'a Client,
    ns: &'a str,
    scheduler: &'a str,
    nodes: usize,
    shape: Value,
) -> Place<'a> {
    namespace(client, ns).await;
    fake_nodes(client, ns, 1..=nodes, ns, &shape).await;
    Place {
        client,
        ns,
        pool: ns,
        scheduler,
    }
}

/// The Volcano PodGroup an operator creates.
async fn volcano_pod_group(client: &Client, ns: &str, name: &str, spec: Value) {
    let object = json!({
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
        "metadata": {"name": name, "namespace": ns}, "spec": spec
    });
    create::<PodGroup>(client, ns, object).await;
}

/// training-operator, Volcano mode: the PodGroup first (minMember, minResources, queue,
/// priorityClassName); the pods only once the PodGroup has left Pending, annotated with
/// group-name and task-spec.
async fn training_operator_volcano_mode(client: &Client) {
    let ns = "e2e-op-volcano";
    let place = operator_place(client, ns, "volcano").await;
    let spec = json!({"minMember": 3, "queue": "default", "priorityClassName": "e2e-training-high",
                      "minResources": {"cpu": "3", "memory": "3Gi"}});
    volcano_pod_group(client, ns, "pytorch-mnist", spec).await;
    wait_for(
        Duration::from_secs(30),
        "PodGroup admitted (left Pending) with no pods yet",
        || async {
            let pg = Api::<PodGroup>::namespaced(client.clone(), ns)
                .get("pytorch-mnist")
                .await
                .ok()?;
            let phase = pg.status?.phase?;
            (phase.as_str() != "Pending").then_some(())
        },
    )
    .await;
    let request = json!({"cpu": "1", "memory": "1Gi"});
    for (name, role) in [
        ("master-0", "master"),
        ("worker-0", "worker"),
        ("worker-1", "worker"),
    ] {
        let pod = format!("pytorch-mnist-{name}");
        place
            .pod("pytorch-mnist", &pod, role, request.clone(), None)
            .await;
    }
    all_running(client, ns, 3, "training-operator job bound whole").await;
}

/// MPI operator / KubeRay / Spark operator shape: the operator's PodGroup and pods created
/// together, `schedulerName: volcano` hard-coded, served by rust-batch answering to both.
async fn volcano_scheduler_name(client: &Client) {
    let ns = "e2e-op-mpi";
    let place = operator_place(client, ns, "volcano").await;
    let spec = json!({"minMember": 3, "minResources": {"cpu": "3"}});
    volcano_pod_group(client, ns, "pi", spec).await;
    for (name, role) in [
        ("launcher", "launcher"),
        ("worker-0", "worker"),
        ("worker-1", "worker"),
    ] {
        let pod = format!("pi-{name}");
        place.pod("pi", &pod, role, json!({"cpu": "1"}), None).await;
    }
    all_running(client, ns, 3, "MPI-shaped job bound whole").await;
}

/// training-operator, scheduler-plugins mode: an x-k8s.io PodGroup and pods labelled with
/// it, `schedulerName` rust-batch's own.
async fn training_operator_scheduler_plugins_mode(client: &Client, scheduler: &str) {
    let ns = "e2e-op-sp";
    let place = operator_place(client, ns, scheduler).await;
    create::<XK8sPodGroup>(
        client,
        ns,
        json!({
            "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": "tfjob-dist", "namespace": ns},
            "spec": {"minMember": 3, "minResources": {"cpu": "3"}, "scheduleTimeoutSeconds": 60}
        }),
    )
    .await;
    for name in [
        "tfjob-dist-ps-0",
        "tfjob-dist-worker-0",
        "tfjob-dist-worker-1",
    ] {
        place
            .raw_pod(
                name,
                json!({"scheduling.x-k8s.io/pod-group": "tfjob-dist"}),
                json!({}),
                json!({"cpu": "1"}),
            )
            .await;
    }
    all_running(client, ns, 3, "scheduler-plugins-mode job bound whole").await;
}

// It holds `volcano_name_lock` (a std Mutex) for its whole run, across awaits: it
// serialises whole tests (each on its own runtime), which is its purpose.
#[allow(clippy::await_holding_lock)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_flows_volcano_and_scheduler_plugins_modes() {
    // It answers to "volcano" too, as the operators' tests' schedulers do: one at a time,
    // so that no two schedulers race for a pod.
    let _volcano = crate::common::operators::volcano_name_lock();
    let client = client().await;
    install_crds(&client).await;
    let pc: PriorityClass = serde_json::from_value(json!({
        "metadata": {"name": "e2e-training-high"}, "value": 1000
    }))
    .unwrap();
    Api::<PriorityClass>::all(client.clone())
        .create(&PostParams::default(), &pc)
        .await
        .expect("priority class created");
    let name = "rust-batch-ops";
    let (_scheduler, _port) = start(name, &["volcano"]).await;
    tokio::join!(
        training_operator_volcano_mode(&client),
        volcano_scheduler_name(&client),
        training_operator_scheduler_plugins_mode(&client, name),
    );
}

/// Volcano subgroup gangs (`subGroupPolicy`, LeaderWorkerSet-style): two replicas of four
/// pods on room for six. Only whole subgroups bind: one replica binds (minSubGroups 1),
/// never the other's half; with room for both, the second binds whole too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volcano_subgroups_bind_only_whole() {
    let client = client().await;
    install_crds(&client).await;
    let name = "rust-batch-subgroups";
    let (_scheduler, _port) = start(name, &[]).await;
    let ns = "e2e-subgroups";
    let place = place_with(&client, ns, name, 6, json!({"cpu": "1", "memory": "4Gi"})).await;
    let spec = json!({"minMember": 4, "subGroupPolicy": [{
        "name": "replica", "subGroupSize": 4, "minSubGroups": 1,
        "labelSelector": {"matchLabels": {"app": "lws"}},
        "matchLabelKeys": ["leaderworkerset.sigs.k8s.io/group-index"]}]});
    volcano_pod_group(&client, ns, "lws", spec).await;
    for replica in 0..2 {
        for i in 0..4 {
            place
                .raw_pod(
                    &format!("lws-{replica}-{i}"),
                    json!({"app": "lws", "leaderworkerset.sigs.k8s.io/group-index": replica.to_string()}),
                    json!({"scheduling.k8s.io/group-name": "lws"}),
                    json!({"cpu": "1"}),
                )
                .await;
        }
    }
    let bound_per_replica = |pods: &std::collections::BTreeMap<String, Pod>| {
        let mut per = [0usize; 2];
        for (name, p) in pods {
            if node_of(p).is_some() {
                per[usize::from(name.starts_with("lws-1"))] += 1;
            }
        }
        per
    };
    let per = wait_for(
        Duration::from_secs(30),
        "one replica bound whole",
        || async {
            let per = bound_per_replica(&check_invariants(&client, ns).await);
            (per.iter().sum::<usize>() >= 4).then_some(per)
        },
    )
    .await;
    assert!(
        per == [4, 0] || per == [0, 4],
        "whole replicas only: {per:?}"
    );
    // Room for 2 more pods is not room for the other replica: it stays unbound.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        bound_per_replica(&check_invariants(&client, ns).await),
        per,
        "never half a replica"
    );
    fake_nodes(
        &client,
        ns,
        7..=8,
        ns,
        &json!({"cpu": "1", "memory": "4Gi"}),
    )
    .await;
    wait_for(
        Duration::from_secs(30),
        "the second replica bound whole",
        || async {
            let per = bound_per_replica(&check_invariants(&client, ns).await);
            (per == [4, 4]).then_some(())
        },
    )
    .await;
}
