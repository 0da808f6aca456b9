use super::pb::api::core::v1 as pb;
use super::*;
use k8s_openapi::api::core::v1::Pod;

/// A whole list, its bytes fed `chunk` at a time (as the network hands them over).
fn decode_chunked<K: ProtoListed>(body: &[u8], chunk: usize) -> Result<ObjectList<K>, ProtoError> {
    let mut splitter = ListSplitter::default();
    let mut raw = Vec::new();
    for part in body.chunks(chunk) {
        splitter.feed(part, |item| raw.push(item))?;
    }
    let metadata = splitter.finish()?;
    Ok(ObjectList {
        types: TypeMeta::default(),
        metadata,
        items: decode_items(raw)?,
    })
}

fn decode_list<K: ProtoListed>(body: &[u8]) -> Result<ObjectList<K>, ProtoError> {
    decode_chunked(body, body.len().max(1))
}

/// `msg` as the API server sends it: `k8s\0`, then a runtime.Unknown holding it.
pub(crate) fn envelope(kind: &str, msg: &impl Message) -> Vec<u8> {
    let unknown = k8s_pb::apimachinery::pkg::runtime::Unknown {
        type_meta: Some(k8s_pb::apimachinery::pkg::runtime::TypeMeta {
            api_version: Some("v1".into()),
            kind: Some(kind.into()),
        }),
        raw: Some(msg.encode_to_vec()),
        content_type: Some(PROTOBUF.into()),
        ..Default::default()
    };
    [b"k8s\0".as_slice(), &unknown.encode_to_vec()].concat()
}

/// A pod as Go's protobuf encoding writes it: every non-pointer field, zero or not.
fn pb_pod(name: &str) -> pb::Pod {
    let ports = vec![pb::ContainerPort {
        container_port: Some(53),
        host_port: Some(0),
        protocol: Some("UDP".into()),
        name: Some(String::new()),
        host_ip: Some(String::new()),
    }];
    pb::Pod {
        metadata: Some(pb_meta::ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            generate_name: Some(String::new()),
            resource_version: Some("7".into()),
            creation_timestamp: Some(pb_meta::Time {
                seconds: Some(1_700_000_000),
                nanos: Some(123),
            }),
            deletion_timestamp: None,
            labels: [("app".to_string(), String::new())].into(),
            ..Default::default()
        }),
        spec: Some(pb::PodSpec {
            node_name: Some(String::new()),
            priority: Some(0),
            host_network: Some(false),
            containers: vec![pb::Container {
                name: Some("c".into()),
                ports,
                resources: Some(pb::ResourceRequirements {
                    requests: [(
                        "cpu".to_string(),
                        k8s_pb::apimachinery::pkg::api::resource::Quantity {
                            string: Some("1500m".into()),
                        },
                    )]
                    .into(),
                    ..Default::default()
                }),
                readiness_probe: Some(pb::Probe {
                    handler: Some(pb::ProbeHandler {
                        tcp_socket: Some(pb::TcpSocketAction {
                            port: Some(k8s_pb::apimachinery::pkg::util::intstr::IntOrString {
                                r#type: Some(1),
                                int_val: Some(0),
                                str_val: Some("http".into()),
                            }),
                            host: Some(String::new()),
                        }),
                        ..Default::default()
                    }),
                    period_seconds: Some(0),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            volumes: vec![pb::Volume {
                name: Some("hp".into()),
                volume_source: Some(pb::VolumeSource {
                    host_path: Some(pb::HostPathVolumeSource {
                        path: Some("/tmp".into()),
                        r#type: Some(String::new()),
                    }),
                    ..Default::default()
                }),
            }],
            ..Default::default()
        }),
        status: Some(pb::PodStatus {
            start_time: Some(pb_meta::Time {
                seconds: Some(0),
                nanos: Some(0),
            }),
            ..Default::default()
        }),
    }
}

#[test]
fn a_protobuf_list_converts_to_what_the_same_pods_json_decodes_to() {
    let list = pb::PodList {
        metadata: Some(pb_meta::ListMeta {
            resource_version: Some("42".into()),
            r#continue: Some(String::new()),
            ..Default::default()
        }),
        items: vec![pb_pod("a"), pb_pod("b")],
    };
    let body = envelope("PodList", &list);
    let decoded = decode_list::<Lean<Pod>>(&body).expect("decodes");
    for chunk in 1..body.len() {
        let streamed = decode_chunked::<Lean<Pod>>(&body, chunk).expect("decodes");
        assert_eq!(
            (&streamed.metadata, &streamed.items),
            (&decoded.metadata, &decoded.items),
            "read {chunk} bytes at a time"
        );
    }
    assert_eq!(decoded.metadata.resource_version.as_deref(), Some("42"));
    assert_eq!(
        decoded.metadata.continue_, None,
        "an empty token is no token"
    );
    // The JSON Go writes for the same pod: zero non-pointer fields left out
    // (`omitempty`), pointer fields kept even when zero or empty, times in seconds.
    let json: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "a", "namespace": "ns", "resourceVersion": "7",
                     "creationTimestamp": "2023-11-14T22:13:20Z", "labels": {"app": ""}},
        "spec": {
            "priority": 0,
            "containers": [{
                "name": "c",
                "ports": [{"containerPort": 53, "protocol": "UDP"}],
                "resources": {"requests": {"cpu": "1500m"}},
                "readinessProbe": {"tcpSocket": {"port": "http"}}
            }],
            "volumes": [{"name": "hp", "hostPath": {"path": "/tmp", "type": ""}}]
        },
        "status": {}
    }))
    .unwrap();
    let names: Vec<_> = decoded
        .items
        .iter()
        .map(|p| p.0.metadata.name.clone())
        .collect();
    assert_eq!(names, [Some("a".to_string()), Some("b".to_string())]);
    assert_eq!(decoded.items[0].0, json);
}

/// What 1.36 and 1.37 added to a pod (k8s-pb 0.9.0's 1.35 protos lack it, and prost
/// would skip it without a word): kept, as its JSON gives it.
#[test]
fn fields_newer_than_k8s_pb_survive_a_protobuf_list() {
    let mut pod = pb_pod("a");
    let spec = pod.spec.as_mut().unwrap();
    spec.scheduling_group = Some(pb::PodSchedulingGroup {
        pod_group_name: Some("trainers".into()),
    });
    spec.eviction_responders = vec![pb::EvictionResponder {
        name: Some("example.com/drain".into()),
        priority: Some(10000),
    }];
    spec.containers[0].volume_mounts = vec![pb::VolumeMount {
        name: Some("hp".into()),
        mount_path: Some("/hp".into()),
        bind_mount_options: vec!["rbind".into()],
        ..Default::default()
    }];
    pod.status
        .as_mut()
        .unwrap()
        .node_allocatable_resource_claim_statuses = vec![pb::NodeAllocatableResourceClaimStatus {
        resource_claim_name: Some("claim".into()),
        containers: vec!["c".into()],
        ..Default::default()
    }];
    let body = envelope(
        "PodList",
        &pb::PodList {
            metadata: None,
            items: vec![pod],
        },
    );
    let decoded = decode_list::<Lean<Pod>>(&body).expect("decodes");
    let spec = decoded.items[0].0.spec.as_ref().unwrap();
    assert_eq!(
        spec.scheduling_group
            .as_ref()
            .unwrap()
            .pod_group_name
            .as_deref(),
        Some("trainers")
    );
    let json: Pod = serde_json::from_value(serde_json::json!({
            "spec": {"containers": [], "evictionResponders": [{"name": "example.com/drain", "priority": 10000}]},
            "status": {"nodeAllocatableResourceClaimStatuses": [{"resourceClaimName": "claim", "containers": ["c"]}]}
        }))
        .unwrap();
    assert_eq!(
        spec.eviction_responders,
        json.spec.as_ref().unwrap().eviction_responders
    );
    assert_eq!(
        spec.containers[0].volume_mounts.as_ref().unwrap()[0].bind_mount_options,
        Some(vec!["rbind".to_string()])
    );
    assert_eq!(
        decoded.items[0]
            .0
            .status
            .as_ref()
            .unwrap()
            .node_allocatable_resource_claim_statuses,
        json.status
            .unwrap()
            .node_allocatable_resource_claim_statuses
    );
}

#[test]
fn a_protobuf_node_list_converts_to_what_the_same_nodes_json_decodes_to() {
    use k8s_openapi::api::core::v1::Node;
    let quantity = |s: &str| k8s_pb::apimachinery::pkg::api::resource::Quantity {
        string: Some(s.into()),
    };
    let time = |seconds| pb_meta::Time {
        seconds: Some(seconds),
        nanos: Some(0),
    };
    // As Go's protobuf encoding writes a node: every non-pointer field, zero or not.
    let node = pb::Node {
        metadata: Some(pb_meta::ObjectMeta {
            name: Some("n1".into()),
            resource_version: Some("9".into()),
            labels: [("pool".to_string(), "a".to_string())].into(),
            ..Default::default()
        }),
        spec: Some(pb::NodeSpec {
            unschedulable: Some(false),
            pod_cidr: Some(String::new()),
            taints: vec![pb::Taint {
                key: Some("gpu".into()),
                value: Some(String::new()),
                effect: Some("NoSchedule".into()),
                time_added: None,
            }],
            ..Default::default()
        }),
        status: Some(pb::NodeStatus {
            allocatable: [("cpu".to_string(), quantity("32"))].into(),
            capacity: [("pods".to_string(), quantity("110"))].into(),
            conditions: vec![pb::NodeCondition {
                r#type: Some("Ready".into()),
                status: Some("True".into()),
                last_heartbeat_time: Some(time(0)),
                last_transition_time: Some(time(1_700_000_000)),
                reason: Some(String::new()),
                message: Some(String::new()),
            }],
            addresses: vec![pb::NodeAddress {
                r#type: Some("InternalIP".into()),
                address: Some("10.0.0.1".into()),
            }],
            ..Default::default()
        }),
    };
    let body = envelope(
        "NodeList",
        &pb::NodeList {
            metadata: Some(pb_meta::ListMeta {
                resource_version: Some("10".into()),
                ..Default::default()
            }),
            items: vec![node],
        },
    );
    let decoded = decode_list::<Lean<Node>>(&body).expect("decodes");
    assert_eq!(decoded.metadata.resource_version.as_deref(), Some("10"));
    // The JSON Go writes for it: zero non-pointer fields left out (`omitempty`), a zero
    // time as null.
    let json: Node = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "n1", "resourceVersion": "9", "labels": {"pool": "a"}},
        "spec": {"taints": [{"key": "gpu", "effect": "NoSchedule"}]},
        "status": {
            "allocatable": {"cpu": "32"},
            "capacity": {"pods": "110"},
            "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": null,
                            "lastTransitionTime": "2023-11-14T22:13:20Z"}],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]
        }
    }))
    .unwrap();
    assert_eq!(decoded.items.len(), 1);
    assert_eq!(decoded.items[0].0, json);
}

#[test]
fn malformed_protobuf_is_an_error_not_a_panic() {
    let good = envelope(
        "PodList",
        &pb::PodList {
            metadata: None,
            items: vec![pb_pod("a")],
        },
    );
    assert!(matches!(
        decode_list::<Lean<Pod>>(b"{\"kind\":\"PodList\"}"),
        Err(ProtoError::NoPrefix)
    ));
    // Cut anywhere it is refused, never a panic — but for a cut exactly where the
    // envelope's content type (after the list's bytes) starts: the list is whole.
    let list_end = good.len() - (2 + PROTOBUF.len());
    for cut in 0..good.len() {
        let decoded = decode_list::<Lean<Pod>>(&good[..cut]);
        assert_eq!(
            decoded.is_ok(),
            cut == list_end,
            "cut at {cut} of {}",
            good.len()
        );
        let streamed = decode_chunked::<Lean<Pod>>(&good[..cut], 3);
        assert_eq!(
            streamed.is_ok(),
            cut == list_end,
            "cut at {cut}, 3 bytes at a time"
        );
    }
    let mut wrong_wire = good.clone();
    wrong_wire.extend([0x0b]); // field 1, wire type 3 (a group)
    assert!(decode_list::<Lean<Pod>>(&wrong_wire).is_err());
}

#[test]
fn servers_newer_than_the_protos_are_listed_in_json() {
    use k8s_openapi::apimachinery::pkg::version::Info;
    let info = |git: &str, major: &str, minor: &str| Info {
        git_version: git.into(),
        major: major.into(),
        minor: minor.into(),
        ..Default::default()
    };
    assert_eq!(minor_version(&info("v1.37.2", "1", "37")), Some(37));
    assert_eq!(
        minor_version(&info("v1.33.13-eks-1a2b3c", "1", "33+")),
        Some(33)
    );
    assert_eq!(minor_version(&info("", "1", "38+")), Some(38));
    assert_eq!(minor_version(&info("v1.36.0-alpha.1", "", "")), Some(36));
    assert_eq!(minor_version(&info("v2.0.0", "2", "0")), None);
    assert_eq!(minor_version(&info("$Format:%H$", "", "")), None);
    assert_eq!(
        core_v1::KUBERNETES_MINOR,
        37,
        "the k8s-openapi feature's version"
    );
}

#[test]
fn a_refusal_in_protobuf_reads_as_the_status_json_would() {
    let status = pb_meta::Status {
        message: Some("pods is forbidden".into()),
        reason: Some("Forbidden".into()),
        code: Some(403),
        ..Default::default()
    };
    let s = error_status(&envelope("Status", &status)).expect("decodes");
    assert_eq!(s.message, "pods is forbidden");
    assert_eq!(s.reason, "Forbidden");
}
