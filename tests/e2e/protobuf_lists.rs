//! End-to-end on a real control plane: pods listed in protobuf — how the scheduler lists
//! pods, the long list a restart waits for (`kube::proto`) — are field for field the pods
//! their JSON gives: a pod using most of a pod spec (what the scheduler reads and much it
//! does not: empty strings, zeros and falses JSON leaves out and pointer fields that keep
//! them), a bare one, and one bound to a kwok node whose status kwok fills in; listed
//! whole and in pages. Nodes likewise (listed in protobuf too): a node using most of a node
//! spec and a plain one, their status filled in by kwok.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common::*;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, PostParams};
use rust_batch::kube::lean::Lean;
use rust_batch::kube::proto;
use serde_json::{json, Value};

const NS: &str = "e2e-protobuf";

fn rich_pod() -> Value {
    json!({
        "metadata": {"name": "rich", "labels": {"app": "x", "empty": ""}, "annotations": {"a": "b"}},
        "spec": {
            "schedulerName": "e2e-protobuf-nobody",
            "terminationGracePeriodSeconds": 0,
            "automountServiceAccountToken": false,
            "enableServiceLinks": false,
            "hostname": "h",
            "subdomain": "s",
            "nodeSelector": {"pool": NS},
            "schedulingGates": [{"name": "example.com/gate"}],
            // 1.37 (GenericWorkload; an older API server drops it): newer than k8s-pb's protos.
            "schedulingGroup": {"podGroupName": "trainers"},
            "readinessGates": [{"conditionType": "example.com/ready"}],
            "dnsPolicy": "None",
            "dnsConfig": {"nameservers": ["1.1.1.1"], "searches": ["a.b"],
                          "options": [{"name": "ndots", "value": "2"}, {"name": "edns0"}]},
            "hostAliases": [{"ip": "10.0.0.1", "hostnames": ["x"]}],
            "securityContext": {
                "runAsUser": 0, "runAsNonRoot": false, "fsGroup": 0, "supplementalGroups": [0, 5],
                "sysctls": [{"name": "net.ipv4.ip_local_port_range", "value": "1024 65000"}],
                "seccompProfile": {"type": "Localhost", "localhostProfile": "p.json"}
            },
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "pool", "operator": "In", "values": [NS]}]}
                    ]},
                    "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": {
                        "matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["x"]}]
                    }}]
                },
                "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                    "labelSelector": {"matchExpressions": [{"key": "app", "operator": "Exists"}]},
                    "topologyKey": "zone", "namespaceSelector": {}
                }]},
                "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
                    "weight": 5,
                    "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "x"}},
                                        "topologyKey": "kubernetes.io/hostname", "namespaces": ["a"]}
                }]}
            },
            "tolerations": [
                {"key": "k", "operator": "Equal", "value": "v", "effect": "NoExecute", "tolerationSeconds": 0},
                {"operator": "Exists"}
            ],
            "topologySpreadConstraints": [{
                "maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": "x"}}, "minDomains": 2,
                "nodeAffinityPolicy": "Honor", "nodeTaintsPolicy": "Ignore"
            }],
            "initContainers": [{"name": "sidecar", "image": "busybox", "restartPolicy": "Always",
                                "resources": {"requests": {"cpu": "100m"}}}],
            "containers": [{
                "name": "main", "image": "busybox", "command": ["sh"], "args": ["-c", "true"],
                "workingDir": "/w", "imagePullPolicy": "IfNotPresent",
                "terminationMessagePolicy": "FallbackToLogsOnError", "stdin": false, "tty": false,
                "ports": [
                    {"containerPort": 80, "hostPort": 8080, "protocol": "TCP", "name": "http"},
                    {"containerPort": 53, "protocol": "UDP"}
                ],
                "env": [
                    {"name": "A", "value": ""},
                    {"name": "B", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "C", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu", "divisor": "1m"}}},
                    {"name": "D", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k", "optional": false}}}
                ],
                "envFrom": [{"prefix": "P_", "secretRef": {"name": "s", "optional": true}}],
                "resources": {
                    "requests": {"cpu": "1500m", "memory": "1Gi", "nvidia.com/gpu": "1"},
                    "limits": {"cpu": "2", "memory": "1Gi", "nvidia.com/gpu": "1"}
                },
                "resizePolicy": [{"resourceName": "cpu", "restartPolicy": "NotRequired"}],
                "volumeMounts": [
                    {"name": "data", "mountPath": "/data", "readOnly": true, "subPath": "x"},
                    {"name": "scratch", "mountPath": "/s"}
                ],
                "livenessProbe": {"httpGet": {"path": "/h", "port": "http", "httpHeaders": [{"name": "X", "value": "y"}]},
                                  "initialDelaySeconds": 0, "periodSeconds": 10},
                "readinessProbe": {"tcpSocket": {"port": 80}},
                "startupProbe": {"exec": {"command": ["true"]}, "failureThreshold": 30},
                "lifecycle": {"postStart": {"exec": {"command": ["true"]}}},
                "securityContext": {"privileged": false, "capabilities": {"add": ["NET_ADMIN"], "drop": ["ALL"]},
                                    "readOnlyRootFilesystem": true, "runAsUser": 1000, "allowPrivilegeEscalation": false}
            }],
            "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": "c", "readOnly": true}},
                {"name": "scratch", "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}},
                {"name": "eph", "ephemeral": {"volumeClaimTemplate": {
                    "metadata": {"labels": {"a": "b"}},
                    "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "",
                             "resources": {"requests": {"storage": "1Gi"}}}
                }}},
                {"name": "cfg", "configMap": {"name": "cm", "items": [{"key": "k", "path": "p", "mode": 256}],
                                              "defaultMode": 420, "optional": true}},
                {"name": "proj", "projected": {"sources": [
                    {"configMap": {"name": "cm", "items": [{"key": "k", "path": "k"}]}},
                    {"downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}}
                ]}},
                {"name": "hp", "hostPath": {"path": "/tmp", "type": ""}}
            ]
        }
    })
}

fn bare_pod(name: &str, node: Option<&str>) -> Value {
    json!({
        "metadata": {"name": name},
        "spec": {
            "schedulerName": "e2e-protobuf-nobody",
            "nodeName": node,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}]
        }
    })
}

/// Every leaf where `a` and `b` differ, as `path: a != b`.
fn differences(path: &str, a: &Value, b: &Value, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<_> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let null = Value::Null;
                differences(
                    &format!("{path}.{k}"),
                    x.get(k).unwrap_or(&null),
                    y.get(k).unwrap_or(&null),
                    out,
                );
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                differences(&format!("{path}[{i}]"), p, q, out);
            }
        }
        _ if a != b => out.push(format!("{path}: JSON {a} != protobuf {b}")),
        _ => {}
    }
}

fn by_name<K: kube::Resource>(objects: Vec<Lean<K>>) -> BTreeMap<String, K> {
    objects
        .into_iter()
        .map(|o| (o.0.meta().name.clone().unwrap_or_default(), o.0))
        .collect()
}

fn versions<K: kube::Resource>(objects: &BTreeMap<String, K>) -> Vec<Option<String>> {
    objects
        .values()
        .map(|o| o.meta().resource_version.clone())
        .collect()
}

/// `json` and `protobuf` hold the same objects, field for field.
fn assert_alike<K: serde::Serialize + PartialEq + std::fmt::Debug>(
    what: &str,
    json: &BTreeMap<String, K>,
    protobuf: &BTreeMap<String, K>,
) {
    assert_eq!(
        json.keys().collect::<Vec<_>>(),
        protobuf.keys().collect::<Vec<_>>(),
        "{what}: the same objects"
    );
    for (name, object) in json {
        let mut diff = Vec::new();
        differences(
            name,
            &serde_json::to_value(object).unwrap(),
            &serde_json::to_value(&protobuf[name]).unwrap(),
            &mut diff,
        );
        assert!(
            diff.is_empty(),
            "{what}: {name} listed in protobuf differs from its JSON:\n{}",
            diff.join("\n")
        );
        assert_eq!(object, &protobuf[name], "{what}: {name}");
    }
}

/// What `url` lists in protobuf, page after page as `lp` asks (no limit: one list).
async fn protobuf_list<K>(client: &kube::Client, url: &str, lp: &ListParams) -> Vec<K>
where
    K: proto::ProtoListed + serde::de::DeserializeOwned + Clone + Send + 'static,
{
    let mut lp = lp.clone();
    let mut objects = Vec::new();
    loop {
        let page = proto::list::<K>(client, url, &lp)
            .await
            .expect("protobuf list");
        objects.extend(page.items);
        match page.metadata.continue_ {
            Some(token) => lp.continue_token = Some(token),
            None => return objects,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_listed_in_protobuf_are_the_pods_their_json_gives() {
    let client = client().await;
    assert_eq!(
        proto::format_for(&client).await,
        proto::Format::Protobuf,
        "a supported API server is listed in protobuf (else this compares JSON with JSON)"
    );
    namespace(&client, NS).await;
    let node = "e2e-protobuf-node";
    fake_node(&client, node, NS, json!({"cpu": "8", "memory": "16Gi"})).await;
    let api = Api::<Pod>::namespaced(client.clone(), NS);
    for pod in [
        rich_pod(),
        bare_pod("bare", None),
        bare_pod("bound", Some(node)),
    ] {
        let pod: Pod = serde_json::from_value(pod).expect("a pod");
        api.create(&PostParams::default(), &pod)
            .await
            .unwrap_or_else(|e| panic!("{:?} created: {e}", pod.metadata.name));
    }
    // kwok runs the bound pod: its status gets conditions, container states and times.
    wait_for(Duration::from_secs(60), "the bound pod running", || async {
        let p = api.get("bound").await.ok()?;
        (phase(&p) == "Running").then_some(())
    })
    .await;

    let json_api = Api::<Lean<Pod>>::namespaced(client.clone(), NS);
    for limit in [None, Some(1)] {
        // kwok may still be writing the bound pod's status: compare two lists that saw the
        // same version of every pod.
        let (json, protobuf) = wait_for(Duration::from_secs(30), "two lists alike", || async {
            let json = by_name(json_api.list(&ListParams::default()).await.ok()?.items);
            let lp = ListParams {
                limit,
                ..ListParams::default()
            };
            let url = format!("/api/v1/namespaces/{NS}/pods");
            let protobuf = by_name(protobuf_list::<Lean<Pod>>(&client, &url, &lp).await);
            (versions(&json) == versions(&protobuf)).then_some((json, protobuf))
        })
        .await;
        assert_eq!(
            json.keys().collect::<Vec<_>>(),
            ["bare", "bound", "rich"],
            "every pod listed"
        );
        assert!(
            json["bound"]
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .is_some(),
            "the bound pod has container statuses to compare"
        );
        assert_alike(&format!("pods (page size {limit:?})"), &json, &protobuf);
        let minor: u32 = client.apiserver_version().await.expect("/version").minor[..2]
            .parse()
            .expect("a minor version");
        // tests/cluster/up.sh turns GenericWorkload on from 1.37.
        let group = protobuf["rich"]
            .spec
            .as_ref()
            .and_then(|s| s.scheduling_group.as_ref());
        assert_eq!(
            group.and_then(|g| g.pod_group_name.as_deref()),
            (minor >= 37).then_some("trainers"),
            "spec.schedulingGroup read in protobuf"
        );
    }
}

const NODE_POOL: &str = "e2e-protobuf-nodes";

/// A kwok node using most of a node spec: taints (one with its time added), unschedulable,
/// pod CIDRs, a provider ID, labels and annotations.
fn rich_node() -> Value {
    json!({
        "metadata": {
            "name": "e2e-protobuf-rich-node",
            "labels": {"pool": NODE_POOL, "type": "kwok", "empty": ""},
            "annotations": {"kwok.x-k8s.io/node": "fake", "note": ""}
        },
        "spec": {
            "unschedulable": true,
            "podCIDR": "10.244.7.0/24",
            "podCIDRs": ["10.244.7.0/24"],
            "providerID": "kwok://e2e-protobuf-rich-node",
            "taints": [
                {"key": "gpu", "value": "", "effect": "NoSchedule"},
                {"key": "drain", "value": "yes", "effect": "NoExecute", "timeAdded": "2026-01-02T03:04:05Z"},
                {"key": "spot", "effect": "PreferNoSchedule"}
            ]
        },
        "status": {
            "allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"},
            "capacity": {"cpu": "8", "memory": "16Gi", "pods": "110"}
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_listed_in_protobuf_are_the_nodes_their_json_gives() {
    let client = client().await;
    fake_node(
        &client,
        "e2e-protobuf-plain-node",
        NODE_POOL,
        json!({"cpu": "4", "memory": "8Gi"}),
    )
    .await;
    let api = Api::<Node>::all(client.clone());
    let rich: Node = serde_json::from_value(rich_node()).expect("a node");
    api.create(&PostParams::default(), &rich)
        .await
        .expect("rich node created");
    // kwok fills in the node's status: conditions, addresses, system info, endpoints.
    wait_node_ready(&client, "e2e-protobuf-rich-node", Duration::from_secs(60)).await;

    let json_api = Api::<Lean<Node>>::all(client.clone());
    let selector = format!("pool={NODE_POOL}");
    for limit in [None, Some(1)] {
        let lp = ListParams::default().labels(&selector);
        // kwok may still be writing a node's status: compare two lists that saw the same
        // version of every node.
        let (json, protobuf) = wait_for(Duration::from_secs(30), "two lists alike", || async {
            let json = by_name(json_api.list(&lp).await.ok()?.items);
            let paged = ListParams {
                limit,
                ..lp.clone()
            };
            let protobuf =
                by_name(protobuf_list::<Lean<Node>>(&client, "/api/v1/nodes", &paged).await);
            (versions(&json) == versions(&protobuf)).then_some((json, protobuf))
        })
        .await;
        assert_eq!(
            json.keys().collect::<Vec<_>>(),
            ["e2e-protobuf-plain-node", "e2e-protobuf-rich-node"],
        );
        let rich = &json["e2e-protobuf-rich-node"];
        assert!(
            rich.status
                .as_ref()
                .and_then(|s| s.node_info.as_ref())
                .is_some(),
            "kwok filled in the node's status"
        );
        let taints: Vec<_> = rich
            .spec
            .iter()
            .flat_map(|s| s.taints.iter().flatten())
            .map(|t| t.key.as_str())
            .collect();
        for key in ["gpu", "drain", "spot"] {
            assert!(taints.contains(&key), "taint {key} kept: {taints:?}");
        }
        assert_alike(&format!("nodes (page size {limit:?})"), &json, &protobuf);
    }
}
