//! S5 on the real control plane: queues q-a (weight 1, capability 16 cpu) and q-b (weight 3)
//! on 8 nodes × 4 cpu, each submitting 1-cpu gangs of 4 as fast as they finish, always more
//! than the cluster holds; q-b starts later and takes back its share. Allocated cpu must
//! converge to 8 / 24 (± one gang) and q-a must never exceed its capability.
//!
//! Shares are of the whole cluster, so it runs alone, in the disruptive test binary (after the
//! e2e binary: test binaries run one after another), and cordons the nodes earlier tests left
//! behind.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::common::*;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::Client;
use rust_batch::kube::dialects::volcano::{PodGroup, Queue};
use serde_json::json;

const NS: &str = "e2e-s5";
const SCHEDULER: &str = "rb-s5";
const CONF: &str = "actions: \"enqueue, allocate, reclaim, backfill\"
tiers:
- plugins:
  - name: priority
  - name: gang
  - name: conformance
- plugins:
  - name: drf
  - name: predicates
  - name: proportion
  - name: nodeorder
";

/// One gang of 4 one-cpu pods that each run `runtime`.
async fn submit(client: &Client, queue: &str, n: usize) {
    let gang = format!("{queue}-g{n}");
    pod_group_in(client, NS, &gang, 4, queue).await;
    let place = Place {
        client,
        ns: NS,
        pool: NS,
        scheduler: SCHEDULER,
    };
    for i in 0..4 {
        let name = format!("{gang}-{i}");
        place
            .pod(&gang, &name, "worker", json!({"cpu": "1"}), Some("6s"))
            .await;
    }
}

/// Running cpu per queue, and gangs not finished per queue, from the pods.
fn tally(
    pods: &BTreeMap<String, k8s_openapi::api::core::v1::Pod>,
) -> (BTreeMap<String, usize>, BTreeMap<String, usize>) {
    let mut running: BTreeMap<String, usize> = BTreeMap::new();
    let mut open: BTreeMap<String, std::collections::BTreeSet<String>> = BTreeMap::new();
    for (name, p) in pods {
        let queue = name.split("-g").next().unwrap_or_default().to_string();
        let gang = name
            .rsplit_once('-')
            .map(|(g, _)| g.to_string())
            .unwrap_or_default();
        if phase(p) == "Running" && node_of(p).is_some() {
            *running.entry(queue.clone()).or_default() += 1;
        }
        if phase(p) != "Succeeded" {
            open.entry(queue).or_default().insert(gang);
        }
    }
    (
        running,
        open.into_iter().map(|(q, g)| (q, g.len())).collect(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s5_queue_shares_converge_to_weights_within_capability() {
    let _one = crate::ONE_AT_A_TIME.lock().await;
    let client = client().await;
    install_crds(&client).await;
    namespace(&client, NS).await;
    let nodes = Api::<Node>::all(client.clone());
    for n in nodes.list(&ListParams::default()).await.unwrap().items {
        let name = n.metadata.name.clone().unwrap();
        nodes
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"unschedulable": true}})),
            )
            .await
            .expect("earlier nodes cordoned");
    }
    let queues = Api::<Queue>::all(client.clone());
    for (name, spec) in [
        (
            "qa",
            json!({"weight": 1, "capability": {"cpu": "16"}, "reclaimable": true}),
        ),
        ("qb", json!({"weight": 3, "reclaimable": true})),
    ] {
        let q: Queue = serde_json::from_value(json!({
            "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
            "metadata": {"name": name}, "spec": spec
        }))
        .unwrap();
        queues
            .create(&PostParams::default(), &q)
            .await
            .expect("queue created");
    }
    let shape = json!({"cpu": "4", "memory": "16Gi"});
    fake_nodes(&client, "s5", 1..=8, NS, &shape).await;
    let conf = std::env::temp_dir().join(format!("rb-s5-{}.conf", std::process::id()));
    std::fs::write(&conf, CONF).unwrap();
    let _scheduler = start_scheduler_with(
        SCHEDULER,
        &[
            "--http-address",
            "off",
            "--scheduler-conf",
            conf.to_str().unwrap(),
        ],
    );

    // Each queue keeps 12 gangs unfinished: the 8 the cluster holds, and 4 more.
    let mut submitted: BTreeMap<&str, usize> = BTreeMap::new();
    let start = Instant::now();
    let mut late: Vec<(usize, usize)> = Vec::new();
    while start.elapsed() < Duration::from_secs(60) {
        let pods = check_invariants(&client, NS).await;
        let (running, open) = tally(&pods);
        let a = running.get("qa").copied().unwrap_or(0);
        let b = running.get("qb").copied().unwrap_or(0);
        assert!(a <= 16, "q-a runs {a} cpu, above its capability of 16");
        assert!(a + b <= 32);
        if start.elapsed() > Duration::from_secs(35) {
            late.push((a, b));
        }
        for queue in ["qa", "qb"] {
            // q-b starts 5 s after q-a, which meanwhile fills what its capability allows.
            if queue == "qb" && start.elapsed() < Duration::from_secs(5) {
                continue;
            }
            let open_now = open.get(queue).copied().unwrap_or(0);
            for _ in open_now..12 {
                let n = submitted.entry(queue).or_default();
                *n += 1;
                let n = *n;
                submit(&client, queue, n).await;
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(!late.is_empty());
    let mean = |f: fn(&(usize, usize)) -> usize| {
        late.iter().map(f).sum::<usize>() as f64 / late.len() as f64
    };
    let (a, b) = (mean(|s| s.0), mean(|s| s.1));
    eprintln!("S5 from 35 s on: q-a runs {a:.1} cpu, q-b {b:.1} cpu on average (deserved 8 / 24)");
    assert!(
        (4.0..=12.0).contains(&a),
        "q-a's mean cpu {a:.1} is not 8 ± 4 (samples {late:?})"
    );
    assert!(
        (20.0..=28.0).contains(&b),
        "q-b's mean cpu {b:.1} is not 24 ± 4 (samples {late:?})"
    );
    // Its PodGroups were admitted and ran in their queues.
    let groups = Api::<PodGroup>::namespaced(client.clone(), NS)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert!(groups.iter().any(|g| g.spec.queue.as_deref() == Some("qb")));
}
