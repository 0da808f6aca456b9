//! End-to-end robustness of the live driver on the real control plane: other schedulers'
//! pods, deleted PodGroups, restarts, bad input. Each test runs its own `rust-batch`
//! process under its own scheduler name, in its own namespace and node pool.

use std::time::Duration;

use crate::common::*;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams};
use kube::Client;
use rust_batch::kube::dialects::volcano::PodGroup;
use serde_json::json;

async fn setup(ns: &str) -> Client {
    let client = client().await;
    install_crds(&client).await;
    namespace(&client, ns).await;
    client
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_schedulers_pods_are_never_touched_and_their_capacity_is_respected() {
    let (ns, pool, name) = ("e2e-foreign", "e2e-foreign", "rb-foreign");
    let client = setup(ns).await;
    fake_node(
        &client,
        "foreign-n1",
        pool,
        json!({"cpu": "4", "memory": "8Gi"}),
    )
    .await;
    let _scheduler = start_scheduler(name);
    foreign_pod(&client, ns, "theirs-pending", None, "1").await;
    foreign_pod(&client, ns, "theirs-bound", Some("foreign-n1"), "3").await;
    let place = Place {
        client: &client,
        ns,
        pool,
        scheduler: name,
    };
    pod_group(&client, ns, "ours", 1).await;
    place
        .pod("ours", "ours-0", "main", json!({"cpu": "2"}), None)
        .await;

    // 3 of 4 CPUs are taken by the other scheduler's pod: ours must wait, and say why.
    let message = wait_for(
        Duration::from_secs(30),
        "Insufficient cpu condition",
        || async {
            check_invariants(&client, ns).await;
            condition_message(&client, ns, "ours")
                .await
                .filter(|m| m.contains("Insufficient cpu"))
        },
    )
    .await;
    assert!(
        message.contains("1/1 tasks in gang unschedulable"),
        "{message}"
    );
    let pods = check_invariants(&client, ns).await;
    assert_eq!(node_of(&pods["ours-0"]), None);

    // The other scheduler's pod goes away: ours binds.
    Api::<Pod>::namespaced(client.clone(), ns)
        .delete("theirs-bound", &DeleteParams::default())
        .await
        .unwrap();
    wait_for(
        Duration::from_secs(30),
        "our pod bound once the capacity is free",
        || async {
            let pods = check_invariants(&client, ns).await;
            node_of(&pods["ours-0"]).map(|_| ())
        },
    )
    .await;
    let pods = check_invariants(&client, ns).await;
    assert_eq!(
        node_of(&pods["theirs-pending"]),
        None,
        "a pod of another scheduler is never bound by us"
    );
    assert!(
        pod_events(&client, ns, "theirs-pending").await.is_empty(),
        "nor does it get our events"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_pod_group_leaves_its_pods_pending_with_an_event() {
    let (ns, pool, name) = ("e2e-delete", "e2e-delete", "rb-delete");
    let client = setup(ns).await;
    fake_node(
        &client,
        "delete-n1",
        pool,
        json!({"cpu": "2", "memory": "8Gi"}),
    )
    .await;
    let mut scheduler = start_scheduler(name);
    let place = Place {
        client: &client,
        ns,
        pool,
        scheduler: name,
    };
    pod_group(&client, ns, "big", 2).await;
    place
        .pod("big", "big-0", "main", json!({"cpu": "2"}), None)
        .await;
    place
        .pod("big", "big-1", "main", json!({"cpu": "2"}), None)
        .await;
    wait_for(
        Duration::from_secs(30),
        "gang reported unschedulable",
        || async {
            condition_message(&client, ns, "big")
                .await
                .filter(|m| m.contains("Insufficient cpu"))
        },
    )
    .await;
    Api::<PodGroup>::namespaced(client.clone(), ns)
        .delete("big", &DeleteParams::default())
        .await
        .unwrap();
    wait_for(
        Duration::from_secs(30),
        "an event saying the group is gone",
        || async {
            let events = pod_events(&client, ns, "big-0").await;
            events
                .iter()
                .any(|(reason, note)| reason == "FailedScheduling" && note.contains("was deleted"))
                .then_some(())
        },
    )
    .await;
    // Its pods stay pending, and the scheduler keeps serving others.
    pod_group(&client, ns, "small", 1).await;
    place
        .pod("small", "small-0", "main", json!({"cpu": "1"}), None)
        .await;
    wait_for(
        Duration::from_secs(30),
        "another gang still schedules",
        || async {
            let pods = check_invariants(&client, ns).await;
            node_of(&pods["small-0"]).map(|_| ())
        },
    )
    .await;
    let pods = check_invariants(&client, ns).await;
    assert_eq!(node_of(&pods["big-0"]), None);
    assert_eq!(node_of(&pods["big-1"]), None);
    assert!(
        scheduler.0.try_wait().unwrap().is_none(),
        "rust-batch did not crash"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_mid_run_completes_gangs_without_duplicate_binds() {
    let (ns, pool, name) = ("e2e-restart", "e2e-restart", "rb-restart");
    let client = setup(ns).await;
    let shape = json!({"cpu": "4", "memory": "8Gi"});
    fake_nodes(&client, "restart", 1..=2, pool, &shape).await;
    let place = Place {
        client: &client,
        ns,
        pool,
        scheduler: name,
    };
    // Per-pod Scheduled events count each pod's successful binds.
    let first = start_scheduler_with(name, &["--http-address", "off", "--pod-scheduled-events"]);
    pod_group(&client, ns, "a", 2).await;
    for i in 0..2 {
        place
            .pod("a", &format!("a-{i}"), "main", json!({"cpu": "2"}), None)
            .await;
    }
    let before = wait_for(Duration::from_secs(30), "gang a bound", || async {
        let pods = check_invariants(&client, ns).await;
        ["a-0", "a-1"]
            .iter()
            .map(|p| pods.get(*p).and_then(node_of))
            .collect::<Option<Vec<_>>>()
    })
    .await;
    drop(first); // killed mid-run
    pod_group(&client, ns, "b", 2).await;
    for i in 0..2 {
        place
            .pod("b", &format!("b-{i}"), "main", json!({"cpu": "2"}), None)
            .await;
    }
    let _second = start_scheduler_with(name, &["--http-address", "off", "--pod-scheduled-events"]);
    wait_for(
        Duration::from_secs(30),
        "gang b bound by the restarted scheduler",
        || async {
            let pods = check_invariants(&client, ns).await;
            ["b-0", "b-1"]
                .iter()
                .all(|p| pods.get(*p).and_then(node_of).is_some())
                .then_some(())
        },
    )
    .await;
    let pods = check_invariants(&client, ns).await;
    let after: Vec<String> = ["a-0", "a-1"]
        .iter()
        .filter_map(|p| node_of(&pods[*p]))
        .collect();
    assert_eq!(before, after, "gang a was not moved or rebound");
    for p in ["a-0", "a-1", "b-0", "b-1"] {
        let scheduled = pod_events(&client, ns, p)
            .await
            .into_iter()
            .filter(|(r, _)| r == "Scheduled")
            .count();
        assert_eq!(scheduled, 1, "{p} bound exactly once");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_reported_and_everyone_else_keeps_scheduling() {
    let (ns, pool, name) = ("e2e-bad", "e2e-bad", "rb-bad");
    let client = setup(ns).await;
    fake_node(
        &client,
        "bad-n1",
        pool,
        json!({"cpu": "8", "memory": "16Gi"}),
    )
    .await;
    let _scheduler = start_scheduler(name);
    let place = Place {
        client: &client,
        ns,
        pool,
        scheduler: name,
    };
    // minMember larger than the pods that exist.
    pod_group(&client, ns, "too-big", 3).await;
    place
        .pod("too-big", "too-big-0", "main", json!({"cpu": "1"}), None)
        .await;
    place
        .pod("too-big", "too-big-1", "main", json!({"cpu": "1"}), None)
        .await;
    // A PodGroup naming a queue that does not exist.
    pod_group_in(&client, ns, "lost", 1, "nope").await;
    place
        .pod("lost", "lost-0", "main", json!({"cpu": "1"}), None)
        .await;
    // A pod whose group does not exist.
    place
        .pod("ghost", "ghost-0", "main", json!({"cpu": "1"}), None)
        .await;
    // And a good gang, which must schedule regardless.
    pod_group(&client, ns, "fine", 1).await;
    place
        .pod("fine", "fine-0", "main", json!({"cpu": "1"}), None)
        .await;

    wait_for(Duration::from_secs(30), "the good gang binds", || async {
        let pods = check_invariants(&client, ns).await;
        node_of(&pods["fine-0"]).map(|_| ())
    })
    .await;
    let too_big = wait_for(
        Duration::from_secs(30),
        "NotEnoughTasks condition",
        || async { condition_message(&client, ns, "too-big").await },
    )
    .await;
    assert!(
        too_big.contains("only 2 pods exist, minMember is 3"),
        "{too_big}"
    );
    let lost = wait_for(
        Duration::from_secs(30),
        "missing-queue condition",
        || async { condition_message(&client, ns, "lost").await },
    )
    .await;
    assert!(lost.contains("queue \"nope\" does not exist"), "{lost}");
    wait_for(Duration::from_secs(30), "missing-group event", || async {
        let events = pod_events(&client, ns, "ghost-0").await;
        events
            .iter()
            .any(|(_, note)| note.contains("PodGroup ghost does not exist"))
            .then_some(())
    })
    .await;
    let pods = check_invariants(&client, ns).await;
    for p in ["too-big-0", "too-big-1", "lost-0", "ghost-0"] {
        assert_eq!(node_of(&pods[p]), None, "{p} stays Pending");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_server_unreachable_at_start_is_retried_not_fatal() {
    // Needs no cluster: a kubeconfig pointing at a port nobody listens on.
    let dir = std::env::temp_dir().join(format!("rb-down-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1', insecure-skip-tls-verify: true}}]\n\
         users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n",
    )
    .unwrap();
    let log = dir.join("stderr");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_rust-batch"))
        .args(["run", "--http-address", "off"])
        .env("KUBECONFIG", &kubeconfig)
        .env("RUST_LOG", "info,kube=warn,kube_client=error")
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let alive = child.try_wait().unwrap().is_none();
    let _ = child.kill();
    let _ = child.wait();
    let stderr = std::fs::read_to_string(&log).unwrap();
    assert!(
        alive,
        "rust-batch exited while the API server was down:\n{stderr}"
    );
    assert!(
        stderr.contains("retrying with back-off"),
        "a clear log line says it retries:\n{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_new_config_is_rejected_and_a_good_one_reloaded() {
    let (ns, pool, name) = ("e2e-reload", "e2e-reload", "rb-reload");
    let client = setup(ns).await;
    fake_node(
        &client,
        "reload-n1",
        pool,
        json!({"cpu": "4", "memory": "8Gi"}),
    )
    .await;
    let dir = std::env::temp_dir().join(format!("rb-reload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let conf = dir.join("volcano-scheduler.conf");
    std::fs::write(&conf, rust_batch::conf::DEFAULT_CONF).unwrap();
    let log = dir.join("stderr");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_rust-batch"))
        .args([
            "run",
            "--http-address",
            "off",
            "--schedule-period",
            "200ms",
            "--scheduler-name",
            name,
        ])
        .arg("--scheduler-conf")
        .arg(&conf)
        .env("RUST_LOG", "info,kube=warn,kube_client=error")
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let logged = |text: &'static str| {
        let log = log.clone();
        async move {
            std::fs::read_to_string(&log)
                .ok()
                .filter(|l| l.contains(text))
                .map(|_| ())
        }
    };
    wait_for(Duration::from_secs(30), "scheduler up", || {
        logged("rust-batch scheduling")
    })
    .await;

    std::fs::write(&conf, "actions: \"allocate, teleport\"\ntiers: []\n").unwrap();
    wait_for(Duration::from_secs(30), "the bad file rejected", || {
        logged("keeping the running one")
    })
    .await;
    let place = Place {
        client: &client,
        ns,
        pool,
        scheduler: name,
    };
    pod_group(&client, ns, "g", 1).await;
    place
        .pod("g", "g-0", "main", json!({"cpu": "1"}), None)
        .await;
    wait_for(
        Duration::from_secs(30),
        "still scheduling with the old configuration",
        || async { node_of(&check_invariants(&client, ns).await["g-0"]).map(|_| ()) },
    )
    .await;

    std::fs::write(
        &conf,
        "actions: \"enqueue, allocate\"\ntiers:\n- plugins: [{name: gang}, {name: predicates}]\n",
    )
    .unwrap();
    wait_for(Duration::from_secs(30), "the good file reloaded", || {
        logged("configuration reloaded")
    })
    .await;
    let _ = child.kill();
    let _ = child.wait();
    let stderr = std::fs::read_to_string(&log).unwrap();
    assert!(
        stderr.contains("unknown action \"teleport\""),
        "the rejection names the problem:\n{stderr}"
    );
}

/// S1 exactly as docs/src/scenarios.md declares it: ACK labels, no PodGroup object.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s1_through_ack_labels_is_all_or_nothing() {
    let (ns, pool, name) = ("e2e-ack", "e2e-ack", "rb-ack");
    let client = setup(ns).await;
    let gpu_node = json!({"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "2"});
    fake_nodes(&client, "ack", 1..=2, pool, &gpu_node).await;
    let _scheduler = start_scheduler(name);
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    let roles = [("ps-0", json!({"cpu": "1"}))]
        .into_iter()
        .chain((0..4).map(|i| {
            (
                ["worker-0", "worker-1", "worker-2", "worker-3"][i],
                json!({"nvidia.com/gpu": "2"}),
            )
        }));
    for (pod_name, requests) in roles {
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": pod_name, "namespace": ns, "labels": {
                "pod-group.scheduling.sigs.k8s.io/name": "tf-smoke-gpu",
                "pod-group.scheduling.sigs.k8s.io/min-available": "5"
            }},
            "spec": {
                "schedulerName": name,
                "nodeSelector": {"pool": pool},
                "containers": [{"name": "tf", "image": "busybox", "resources": {"requests": requests.clone(), "limits": requests}}]
            }
        }))
        .unwrap();
        pods.create(&kube::api::PostParams::default(), &p)
            .await
            .unwrap();
    }
    wait_for(
        Duration::from_secs(30),
        "a FailedScheduling event naming the GPU shortage",
        || async {
            check_invariants(&client, ns).await;
            let events = pod_events(&client, ns, "worker-3").await;
            events
                .iter()
                .any(|(r, note)| {
                    r == "FailedScheduling" && note.contains("gang is short of 4 nvidia.com/gpu")
                })
                .then_some(())
        },
    )
    .await;
    let now = check_invariants(&client, ns).await;
    assert!(
        now.values().all(|p| node_of(p).is_none()),
        "nothing bound, not even the PS"
    );
    fake_nodes(&client, "ack", 3..=4, pool, &gpu_node).await;
    let bound = wait_for(Duration::from_secs(30), "all five bound", || async {
        let pods = check_invariants(&client, ns).await;
        pods.values().all(|p| node_of(p).is_some()).then_some(pods)
    })
    .await;
    assert_eq!(
        distinct_nodes(&bound, "worker"),
        4,
        "every worker on a node with 2 free GPUs of its own"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubeconfig_and_context_flags_choose_the_cluster() {
    let (ns, pool, name) = ("e2e-kubeconfig", "e2e-kubeconfig", "rb-kubeconfig");
    let client = setup(ns).await;
    fake_node(
        &client,
        "kubeconfig-n1",
        pool,
        json!({"cpu": "4", "memory": "8Gi"}),
    )
    .await;
    // The file's current context points nowhere; --context picks the real one. $KUBECONFIG
    // names a file that does not exist, so only --kubeconfig can be what connects.
    let mut config: serde_json::Value =
        rust_batch::yaml::from_str(&std::fs::read_to_string(scheduler_kubeconfig()).unwrap())
            .unwrap();
    let real = config["contexts"][0]["context"].clone();
    config["clusters"].as_array_mut().unwrap().push(
        rust_batch::yaml::from_str("{name: nowhere, cluster: {server: 'https://127.0.0.1:1'}}")
            .unwrap(),
    );
    config["contexts"] =
        rust_batch::yaml::from_str("[{name: wrong, context: {cluster: nowhere, user: x}}]")
            .unwrap();
    let mut right = serde_json::Map::new();
    right.insert("name".into(), "right".into());
    right.insert("context".into(), real);
    config["contexts"]
        .as_array_mut()
        .unwrap()
        .push(right.into());
    config["current-context"] = "wrong".into();
    let path = std::env::temp_dir().join(format!("rb-contexts-{}.kubeconfig", std::process::id()));
    std::fs::write(&path, rust_batch::yaml::to_string(&config).unwrap()).unwrap();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_rust-batch"))
        .args(["run", "--scheduler-name", name, "--http-address", "off"])
        .args(["--kubeconfig", path.to_str().unwrap(), "--context", "right"])
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .env("RUST_LOG", "info,kube=warn")
        .spawn()
        .expect("rust-batch starts");
    let _scheduler = Scheduler(child);
    pod_group(&client, ns, "g", 2).await;
    let place = Place {
        client: &client,
        ns,
        pool,
        scheduler: name,
    };
    for i in 0..2 {
        place
            .pod("g", &format!("g-{i}"), "main", json!({"cpu": "1"}), None)
            .await;
    }
    wait_for(
        Duration::from_secs(30),
        "the gang bound through --kubeconfig/--context",
        || async {
            let pods = check_invariants(&client, ns).await;
            ["g-0", "g-1"]
                .iter()
                .all(|p| pods.get(*p).and_then(node_of).is_some())
                .then_some(())
        },
    )
    .await;
}
