//! Scheduling gates at the gang level, a pod whose DRA resource claim does not exist, and
//! membership of a Kubernetes PodGroup, on the real control plane (DRA itself: the dra module).
//! Each test has its own namespace, node pool and scheduler (running with deploy/'s RBAC).

use std::time::{Duration, Instant};

use crate::common::*;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::json;

/// Creates pod `name` of gang `group` with the usual spec, `extra` merged over it.
async fn pod(
    client: &Client,
    (ns, scheduler): (&str, &str),
    name: &str,
    group: &str,
    extra: serde_json::Value,
) -> Pod {
    let mut p = json!({
        "metadata": {"name": name, "namespace": ns,
                     "annotations": {"scheduling.k8s.io/group-name": group}},
        "spec": {
            "schedulerName": scheduler,
            "nodeSelector": {"pool": ns},
            "containers": [{"name": "main", "image": "busybox",
                            "resources": {"requests": {"cpu": "1"}}}]
        }
    });
    for (k, v) in extra.as_object().into_iter().flatten() {
        p["spec"][k] = v.clone();
    }
    let p: Pod = serde_json::from_value(p).unwrap();
    Api::<Pod>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &p)
        .await
        .expect("pod created")
}

async fn get(client: &Client, ns: &str, name: &str) -> Pod {
    Api::<Pod>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .expect("pod read")
}

/// The pod's PodScheduled condition: (status, reason, message).
fn pod_scheduled(p: &Pod) -> Option<(String, String, String)> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "PodScheduled")
        .map(|c| {
            (
                c.status.clone(),
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default(),
            )
        })
}

/// The reason of the PodGroup's Unschedulable condition, if it has one.
async fn condition_reason(client: &Client, ns: &str, name: &str) -> Option<String> {
    unschedulable_condition(client, ns, name).await?.reason
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_waits_whole_for_its_gated_member_and_binds_once_the_gate_is_removed() {
    const NS: &str = "e2e-gates";
    let client = client().await;
    install_crds(&client).await;
    namespace(&client, NS).await;
    fake_node(
        &client,
        "gates-n0",
        NS,
        json!({"cpu": "4", "memory": "8Gi"}),
    )
    .await;
    let port = free_port();
    let address = format!("127.0.0.1:{port}");
    let _s = start_scheduler_with("rb-gates", &["--http-address", &address]);
    let at = (NS, "rb-gates");
    pod_group(&client, NS, "g", 2).await;
    pod(&client, at, "g-0", "g", json!({})).await;
    let gated = pod(
        &client,
        at,
        "g-1",
        "g",
        json!({"schedulingGates": [{"name": "example.com/quota"}]}),
    )
    .await;
    // The API server itself says a gated pod waits, from its creation on.
    let (status, reason, _) = pod_scheduled(&gated).expect("the API server's condition");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "SchedulingGated")
    );

    let msg = wait_for(
        Duration::from_secs(30),
        "the gang names the gate",
        || async {
            condition_message(&client, NS, "g")
                .await
                .filter(|m| m.contains("gated"))
        },
    )
    .await;
    assert_eq!(
        msg,
        "2/2 tasks in gang unschedulable: 1 pod gated by example.com/quota; minMember is 2"
    );
    assert_eq!(
        condition_reason(&client, NS, "g").await.as_deref(),
        Some("SchedulingGated")
    );
    // Its waiting sibling tells autoscalers nothing they could fix with nodes.
    let sibling = wait_for(
        Duration::from_secs(30),
        "the sibling's PodScheduled condition",
        || async { pod_scheduled(&get(&client, NS, "g-0").await) },
    )
    .await;
    assert_eq!(
        sibling,
        (
            "False".to_string(),
            "SchedulingGated".to_string(),
            "waiting for members of its gang that are gated by example.com/quota".to_string()
        )
    );
    let (_, reason, _) = pod_scheduled(&get(&client, NS, "g-1").await).unwrap();
    assert_eq!(
        reason, "SchedulingGated",
        "the API server's condition stands"
    );
    assert!(
        pod_events(&client, NS, "g-1")
            .await
            .iter()
            .any(|(r, n)| r == "SchedulingGated" && n.contains("example.com/quota")),
        "the gated pod is told"
    );
    // `rust-batch explain` lists the gated member and why it waits.
    let text = explain(port, "e2e-gates/g");
    assert!(
        text.contains("e2e-gates/g-1: pending: gated by example.com/quota"),
        "{text}"
    );
    // A few cycles later: still nothing of the gang bound, and one event per change.
    tokio::time::sleep(Duration::from_secs(3)).await;
    for name in ["g-0", "g-1"] {
        assert_eq!(node_of(&get(&client, NS, name).await), None, "{name} bound");
    }
    let said = pod_events(&client, NS, "g-1").await;
    assert_eq!(
        said.iter().filter(|(r, _)| r == "SchedulingGated").count(),
        1,
        "{said:?}"
    );
    let said = pod_events(&client, NS, "g").await;
    let on_group: Vec<&(String, String)> = said
        .iter()
        .filter(|(r, _)| r == "SchedulingGated")
        .collect();
    assert_eq!(
        on_group,
        [&("SchedulingGated".to_string(), msg.clone())],
        "one Normal event on the PodGroup per change"
    );

    let lifted = Instant::now();
    Api::<Pod>::namespaced(client.clone(), NS)
        .patch(
            "g-1",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"schedulingGates": null}})),
        )
        .await
        .expect("gate removed");
    wait_for(Duration::from_secs(30), "the whole gang bound", || async {
        let a = node_of(&get(&client, NS, "g-0").await);
        let b = node_of(&get(&client, NS, "g-1").await);
        (a.is_some() && b.is_some()).then_some(())
    })
    .await;
    println!("gate removed → whole gang bound in {:?}", lifted.elapsed());
    assert!(
        lifted.elapsed() < Duration::from_secs(5),
        "promptly: {:?}",
        lifted.elapsed()
    );
    check_invariants(&client, NS).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_whose_resource_claim_does_not_exist_waits_naming_it_and_everyone_else_schedules() {
    const NS: &str = "e2e-dra";
    let client = client().await;
    install_crds(&client).await;
    namespace(&client, NS).await;
    fake_node(&client, "dra-n0", NS, json!({"cpu": "4", "memory": "8Gi"})).await;
    let _s = start_scheduler("rb-dra");
    let at = (NS, "rb-dra");
    pod_group(&client, NS, "dra", 1).await;
    pod_group(&client, NS, "plain", 1).await;
    let dra = pod(
        &client,
        at,
        "dra-0",
        "dra",
        json!({"resourceClaims": [{"name": "gpu", "resourceClaimName": "gpu-claim"}],
               "containers": [{"name": "main", "image": "busybox",
                               "resources": {"requests": {"cpu": "1"}, "claims": [{"name": "gpu"}]}}]}),
    )
    .await;
    // The API server drops the field unless DRA is on (tests/cluster/up.sh turns it on):
    // make sure the pod really carries it.
    let kept = get(&client, NS, "dra-0").await;
    assert_eq!(
        kept.spec
            .as_ref()
            .and_then(|s| s.resource_claims.as_ref())
            .map(Vec::len),
        Some(1),
        "the API server kept spec.resourceClaims: {:?}",
        dra.spec.as_ref().map(|s| &s.resource_claims)
    );
    pod(&client, at, "plain-0", "plain", json!({})).await;

    let why = "resourceclaim e2e-dra/gpu-claim not found";
    let msg = wait_for(Duration::from_secs(30), "the gang says why", || async {
        condition_message(&client, NS, "dra")
            .await
            .filter(|m| m.contains(why))
    })
    .await;
    assert!(msg.starts_with("1/1 tasks in gang unschedulable"), "{msg}");
    let condition = wait_for(
        Duration::from_secs(30),
        "the waiting pod's PodScheduled condition",
        || async {
            pod_scheduled(&get(&client, NS, "dra-0").await).filter(|(_, _, m)| m.contains(why))
        },
    )
    .await;
    assert_eq!(condition.0, "False");
    wait_for(Duration::from_secs(30), "the plain pod bound", || async {
        node_of(&get(&client, NS, "plain-0").await)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        node_of(&get(&client, NS, "dra-0").await),
        None,
        "never a silent placement"
    );
    check_invariants(&client, NS).await;
}

/// The API server's minor version (1.x).
async fn server_minor(client: &Client) -> u32 {
    let info = client.apiserver_version().await.expect("/version");
    let minor = info.minor.trim_end_matches('+');
    minor.parse().expect("a numeric minor version")
}

/// A pod joining a Kubernetes PodGroup (`spec.schedulingGroup`, scheduling.k8s.io) is
/// never placed as a lone pod — that could leave its gang half bound: while its PodGroup
/// does not exist it waits, saying so (the rest is in native_podgroup). An API server
/// older than 1.37 (or without the GenericWorkload gate) drops the field: the same pod is
/// then a plain lone pod and binds, nothing assumes the field exists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_of_a_native_pod_group_waits_rather_than_binding_alone() {
    const NS: &str = "e2e-native-gang";
    let client = client().await;
    install_crds(&client).await;
    namespace(&client, NS).await;
    fake_node(
        &client,
        "native-n0",
        NS,
        json!({"cpu": "4", "memory": "8Gi"}),
    )
    .await;
    let _s = start_scheduler("rb-native");
    let pods = Api::<Pod>::namespaced(client.clone(), NS);
    let lone = |name: &str, extra: serde_json::Value| {
        let mut p = json!({
            "metadata": {"name": name, "namespace": NS},
            "spec": {"schedulerName": "rb-native", "nodeSelector": {"pool": NS},
                     "containers": [{"name": "main", "image": "busybox",
                                     "resources": {"requests": {"cpu": "1"}}}]}
        });
        for (k, v) in extra.as_object().into_iter().flatten() {
            p["spec"][k] = v.clone();
        }
        serde_json::from_value::<Pod>(p).unwrap()
    };
    let member = lone(
        "member-0",
        json!({"schedulingGroup": {"podGroupName": "trainers"}}),
    );
    pods.create(&PostParams::default(), &member)
        .await
        .expect("pod created");
    pods.create(&PostParams::default(), &lone("plain-0", json!({})))
        .await
        .expect("pod created");
    let kept = get(&client, NS, "member-0")
        .await
        .spec
        .and_then(|s| s.scheduling_group);
    let minor = server_minor(&client).await;

    wait_for(Duration::from_secs(30), "the plain pod bound", || async {
        node_of(&get(&client, NS, "plain-0").await)
    })
    .await;
    if minor < 37 {
        // tests/cluster/up.sh turns GenericWorkload on from 1.37 only.
        assert_eq!(
            kept, None,
            "a {minor} API server drops spec.schedulingGroup"
        );
        wait_for(Duration::from_secs(30), "the pod bound alone", || async {
            node_of(&get(&client, NS, "member-0").await)
        })
        .await;
        check_invariants(&client, NS).await;
        return;
    }
    assert_eq!(
        kept.and_then(|g| g.pod_group_name).as_deref(),
        Some("trainers"),
        "the API server kept spec.schedulingGroup (GenericWorkload is on)"
    );
    let event = wait_for(
        Duration::from_secs(30),
        "the missing-group event",
        || async {
            pod_events(&client, NS, "member-0")
                .await
                .into_iter()
                .find(|(r, _)| r == "FailedScheduling")
        },
    )
    .await;
    assert_eq!(
        event.1,
        format!("PodGroup trainers does not exist in namespace {NS}; the pod waits for it")
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        node_of(&get(&client, NS, "member-0").await),
        None,
        "never placed as a lone pod"
    );
    check_invariants(&client, NS).await;
}
