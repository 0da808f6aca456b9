//! The checked-in CRDs match the Rust types, and the types and schemas take upstream Volcano
//! objects as they are.

use std::path::Path;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};
use kube::core::crd::v1::CustomResourceExt;
use rust_batch::kube::dialects::crds::{crd_files, crd_yaml, write_crds};
use rust_batch::kube::dialects::volcano::api::{
    NetworkTopologyMode, PodGroup, PodGroupConditionType, PodGroupPhase, Queue, QueueState,
};
use rust_batch::kube::dialects::volcano::HyperNode;
use serde_json::json;

const CRDS_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/crds");

/// With `UPDATE_CRDS=1` this rewrites `crds/` first, as `rust-batch crds --write crds` does.
#[test]
fn checked_in_crds_are_up_to_date() {
    if std::env::var_os("UPDATE_CRDS").is_some() {
        write_crds(Path::new(CRDS_DIR)).expect("writing crds/");
    }
    let expected = crd_files();
    for (name, contents) in &expected {
        let path = Path::new(CRDS_DIR).join(name);
        let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            on_disk == *contents,
            "{} is stale or missing: run `cargo run -- crds --write crds` \
             (or `UPDATE_CRDS=1 cargo test --test crds`) and commit the result",
            path.display()
        );
    }
    let mut stray: Vec<String> = ["", "optional"]
        .iter()
        .flat_map(|sub| {
            std::fs::read_dir(Path::new(CRDS_DIR).join(sub))
                .expect("crds/ and crds/optional exist")
                .map(move |entry| {
                    let name = entry.unwrap().file_name().to_string_lossy().into_owned();
                    if sub.is_empty() {
                        name
                    } else {
                        format!("{sub}/{name}")
                    }
                })
        })
        .filter(|name| name.ends_with(".yaml") && !expected.iter().any(|(n, _)| n == name))
        .collect();
    stray.sort();
    assert!(
        stray.is_empty(),
        "crds/ holds files no type generates: {stray:?}; delete them or add their types"
    );
}

#[test]
fn crd_yaml_holds_every_crd_and_is_deterministic() {
    let yaml = crd_yaml();
    assert_eq!(yaml, crd_yaml());
    let docs: Vec<CustomResourceDefinition> = rust_batch::yaml::from_str_multiple(&yaml).unwrap();
    let names: Vec<_> = docs
        .iter()
        .map(|d| d.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "podgroups.scheduling.volcano.sh",
            "queues.scheduling.volcano.sh",
            "podgroups.scheduling.x-k8s.io",
            "podgroups.scheduling.sigs.k8s.io",
            "hypernodes.topology.volcano.sh",
        ]
    );
}

/// A PodGroup as training-operator creates it and Volcano's scheduler then updates it, plus
/// fields we do not model: one in spec, one in status, one inside a condition.
const UPSTREAM_PODGROUP: &str = r#"
apiVersion: scheduling.volcano.sh/v1beta1
kind: PodGroup
metadata:
  name: pytorch-mnist
  namespace: team-a
  uid: 5b0c2a6e-3f7d-4c1e-9a55-0d3e1c2b7f10
  resourceVersion: "48213"
  creationTimestamp: "2025-03-04T10:00:00Z"
  ownerReferences:
  - apiVersion: kubeflow.org/v1
    kind: PyTorchJob
    name: pytorch-mnist
    uid: 1f2e3d4c-5b6a-4789-8a7b-6c5d4e3f2a1b
    controller: true
    blockOwnerDeletion: true
spec:
  minMember: 3
  minTaskMember:
    master: 1
    worker: 2
  queue: research
  priorityClassName: high-priority
  minResources:
    cpu: "12"
    memory: 48Gi
    nvidia.com/gpu: 3
  networkTopology:
    mode: hard
    highestTierAllowed: 2
  subGroupPolicy:
  - name: worker
    subGroupSize: 2
    labelSelector:
      matchLabels:
        training.kubeflow.org/replica-type: worker
    matchLabelKeys: [training.kubeflow.org/job-name]
  futureKnob: {enabled: true}
status:
  phase: Running
  running: 3
  succeeded: 0
  conditions:
  - type: Scheduled
    status: "True"
    transitionID: 0f6c3b52-7d4e-4a3b-9c1d-2e5f6a7b8c9d
    lastTransitionTime: "2025-03-04T10:00:05Z"
    reason: tasks in gang are ready to be scheduled
    message: ""
    observedGeneration: 4
  futureCounter: 7
"#;

#[test]
fn upstream_podgroup_round_trips_without_loss() {
    let original: serde_json::Value = rust_batch::yaml::from_str(UPSTREAM_PODGROUP).unwrap();
    let pg: PodGroup = serde_json::from_value(original.clone()).unwrap();

    assert_eq!(pg.metadata.namespace.as_deref(), Some("team-a"));
    assert_eq!(pg.spec.min_member, Some(3));
    let min_task_member = pg.spec.min_task_member.as_ref().unwrap();
    assert_eq!(min_task_member["worker"], 2);
    assert_eq!(pg.spec.queue.as_deref(), Some("research"));
    let min_resources = pg.spec.min_resources.as_ref().unwrap();
    assert_eq!(min_resources["nvidia.com/gpu"].0, "3");
    assert_eq!(min_resources["memory"].0, "48Gi");
    let topology = pg.spec.network_topology.as_ref().unwrap();
    assert_eq!(topology.mode, Some(NetworkTopologyMode::Hard));
    assert_eq!(topology.highest_tier_allowed, Some(2));
    assert_eq!(pg.spec.extra["futureKnob"], json!({"enabled": true}));

    let status = pg.status.as_ref().unwrap();
    assert_eq!(status.phase, Some(PodGroupPhase::Running));
    assert_eq!(status.running, Some(3));
    let condition = &status.conditions.as_ref().unwrap()[0];
    assert_eq!(condition.type_, Some(PodGroupConditionType::Scheduled));
    assert_eq!(condition.status.as_deref(), Some("True"));
    assert_eq!(condition.extra["observedGeneration"], 4);

    // Writing it back gives the same object (the quantity written as an integer comes back
    // as a string, which is how the API server returns it to Go clients too).
    let mut expected = original;
    expected["spec"]["minResources"]["nvidia.com/gpu"] = json!("3");
    assert_eq!(serde_json::to_value(&pg).unwrap(), expected);
}

#[test]
fn upstream_queue_round_trips_without_loss() {
    let original = json!({
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": "research"},
        "spec": {
            "weight": 4,
            "reclaimable": false,
            "parent": "root",
            "capability": {"cpu": "64", "nvidia.com/gpu": "8"},
            "deserved": {"cpu": "32"},
            "guarantee": {"resource": {"cpu": "8"}},
            "affinity": {"nodeGroupAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": ["ng1"]}},
            "extendClusters": [{"name": "east", "weight": 1, "capacity": {"cpu": "100"}}],
            "priority": 10,
            "dequeueStrategy": "traverse",
            "state": "Open"
        },
        "status": {
            "state": "Closing",
            "pending": 1,
            "running": 2,
            "reservation": {"nodes": ["n1"], "resource": {"cpu": "4"}},
            "allocated": {"cpu": "12"}
        }
    });
    let q: Queue = serde_json::from_value(original.clone()).unwrap();
    assert_eq!(q.spec.weight, Some(4));
    assert_eq!(q.spec.parent.as_deref(), Some("root"));
    assert_eq!(q.spec.extra["state"], "Open");
    let status = q.status.as_ref().unwrap();
    assert_eq!(status.state, Some(QueueState::Closing));
    assert_eq!(status.allocated["cpu"].0, "12");
    assert_eq!(serde_json::to_value(&q).unwrap(), original);
}

fn version_schema(crd: &CustomResourceDefinition) -> &JSONSchemaProps {
    crd.spec.versions[0]
        .schema
        .as_ref()
        .unwrap()
        .open_api_v3_schema
        .as_ref()
        .unwrap()
}

/// Every object schema with properties under `schema`, with its path.
fn objects<'a>(
    path: String,
    schema: &'a JSONSchemaProps,
    out: &mut Vec<(String, &'a JSONSchemaProps)>,
) {
    if schema.properties.is_some() {
        out.push((path.clone(), schema));
    }
    for (name, property) in schema.properties.iter().flatten() {
        objects(format!("{path}.{name}"), property, out);
    }
    match &schema.items {
        Some(JSONSchemaPropsOrArray::Schema(item)) => objects(format!("{path}[]"), item, out),
        Some(JSONSchemaPropsOrArray::Schemas(items)) => {
            for item in items {
                objects(format!("{path}[]"), item, out);
            }
        }
        None => {}
    }
}

#[test]
fn every_object_in_spec_and_status_keeps_unknown_fields() {
    for crd in [PodGroup::crd(), Queue::crd(), HyperNode::crd()] {
        let root = version_schema(&crd);
        let props = root.properties.as_ref().unwrap();
        for part in ["spec", "status"] {
            let mut found = Vec::new();
            objects(part.to_string(), &props[part], &mut found);
            assert!(
                found.iter().any(|(path, _)| path == part),
                "{part} has properties"
            );
            for (path, schema) in found {
                assert_eq!(
                    schema.x_kubernetes_preserve_unknown_fields,
                    Some(true),
                    "{}: {path} would prune unknown fields",
                    crd.spec.names.kind
                );
            }
        }
        assert!(root.required.is_none(), "no top-level field is required");
    }
}

#[test]
fn quantities_are_int_or_string() {
    let crd = PodGroup::crd();
    let spec = &version_schema(&crd).properties.as_ref().unwrap()["spec"];
    let min_resources = &spec.properties.as_ref().unwrap()["minResources"];
    let Some(JSONSchemaPropsOrBool::Schema(quantity)) = &min_resources.additional_properties else {
        panic!("minResources is a map: {min_resources:?}");
    };
    assert_eq!(quantity.x_kubernetes_int_or_string, Some(true));
}

#[test]
fn subresources_scope_and_names_match_upstream() {
    let pg = PodGroup::crd();
    assert_eq!(pg.spec.scope, "Namespaced");
    assert!(
        pg.spec.versions[0]
            .subresources
            .as_ref()
            .and_then(|s| s.status.as_ref())
            .is_none(),
        "PodGroup must not have a status subresource: Volcano's clients write status with updates"
    );
    assert_eq!(
        pg.spec.names.short_names.as_deref(),
        Some(&["pg".to_string(), "podgroup-v1beta1".to_string()][..])
    );
    let columns: Vec<_> = pg.spec.versions[0]
        .additional_printer_columns
        .iter()
        .flatten()
        .map(|c| (c.name.as_str(), c.json_path.as_str()))
        .collect();
    assert_eq!(
        columns,
        [
            ("STATUS", ".status.phase"),
            ("minMember", ".spec.minMember"),
            ("RUNNINGS", ".status.running"),
            ("AGE", ".metadata.creationTimestamp"),
            ("QUEUE", ".spec.queue"),
        ]
    );

    let q = Queue::crd();
    assert_eq!(q.spec.scope, "Cluster");
    assert!(q.spec.versions[0]
        .subresources
        .as_ref()
        .and_then(|s| s.status.as_ref())
        .is_some());
    assert_eq!(
        q.spec.names.short_names.as_deref(),
        Some(&["q".to_string(), "queue-v1beta1".to_string()][..])
    );
    let columns: Vec<_> = q.spec.versions[0]
        .additional_printer_columns
        .iter()
        .flatten()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(columns, ["PARENT", "AGE"]);
}

/// Upstream's HyperNode schema, minus what would keep the scheduler from reporting bad
/// members itself: the member type is any string, the selector has no CEL rules.
#[test]
fn hypernode_crd_matches_upstream_but_lets_bad_members_through() {
    let hn = HyperNode::crd();
    assert_eq!(
        hn.metadata.name.as_deref(),
        Some("hypernodes.topology.volcano.sh")
    );
    assert_eq!(hn.spec.group, "topology.volcano.sh");
    assert_eq!(hn.spec.versions[0].name, "v1alpha1");
    assert_eq!(hn.spec.scope, "Cluster");
    assert_eq!(hn.spec.names.plural, "hypernodes");
    assert_eq!(
        hn.spec.names.short_names.as_deref(),
        Some(&["hn".to_string()][..])
    );
    let props = version_schema(&hn).properties.as_ref().unwrap();
    let spec = &props["spec"];
    assert_eq!(spec.required.as_deref(), Some(&["tier".to_string()][..]));
    let spec_props = spec.properties.as_ref().unwrap();
    assert_eq!(spec_props["tier"].type_.as_deref(), Some("integer"));
    assert_eq!(spec_props["tierName"].type_.as_deref(), Some("string"));
    let Some(JSONSchemaPropsOrArray::Schema(member)) = &spec_props["members"].items else {
        panic!("members is a list");
    };
    let member = member.properties.as_ref().unwrap();
    assert_eq!(member["type"].type_.as_deref(), Some("string"));
    assert!(
        member["type"].enum_.is_none(),
        "no enum: an unknown type is reported, not refused"
    );
    let selector = &member["selector"];
    assert!(selector.x_kubernetes_validations.is_none());
    let selector = selector.properties.as_ref().unwrap();
    for (field, inner) in [
        ("exactMatch", "name"),
        ("regexMatch", "pattern"),
        ("labelMatch", "matchLabels"),
    ] {
        assert!(
            selector[field]
                .properties
                .as_ref()
                .unwrap()
                .contains_key(inner),
            "selector.{field}.{inner}"
        );
    }
    let status = props["status"].properties.as_ref().unwrap();
    assert!(status.contains_key("conditions") && status.contains_key("nodeCount"));
    assert!(hn.spec.versions[0]
        .subresources
        .as_ref()
        .and_then(|s| s.status.as_ref())
        .is_some());
}

/// Volcano v1.15.1 as the Go module proxy serves it (the proxy refuses to list versions
/// above v1.10.0 but serves this one by name): its installer holds the CRDs users install.
fn volcano_module_dir() -> std::path::PathBuf {
    const MODULE: &str = "volcano.sh/volcano@v1.15.1";
    let out = std::process::Command::new("go")
        .args(["mod", "download", "-json", MODULE])
        .current_dir(std::env::temp_dir())
        .output()
        .expect("running go (the test command installs Go)");
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    let dir = info["Dir"].as_str().unwrap_or_else(|| {
        panic!(
            "go mod download {MODULE} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    std::path::PathBuf::from(dir)
}

/// The v1beta1 schema of one of Volcano's CRDs, as JSON.
fn volcano_crd_schema(file: &str) -> serde_json::Value {
    let path = volcano_module_dir()
        .join("installer/helm/chart/volcano/crd/bases")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let crd: serde_json::Value = rust_batch::yaml::from_str(&text).unwrap();
    let version = crd["spec"]["versions"]
        .as_array()
        .and_then(|v| v.iter().find(|v| v["name"] == "v1beta1"))
        .expect("a v1beta1 version");
    version["schema"]["openAPIV3Schema"].clone()
}

/// Every field path of `schema` (`spec.a.b`, `[]` into list items), and whether it is a
/// leaf (no fields of its own).
fn field_paths(schema: &serde_json::Value, prefix: &str, out: &mut Vec<(String, bool)>) {
    if let Some(props) = schema["properties"].as_object() {
        for (name, sub) in props {
            let path = if prefix.is_empty() {
                name.clone()
            } else {
                format!("{prefix}.{name}")
            };
            let leaf = sub["properties"].is_null() && sub["items"]["properties"].is_null();
            out.push((path.clone(), leaf));
            field_paths(sub, &path, out);
        }
    }
    if schema["items"].is_object() {
        field_paths(&schema["items"], &format!("{prefix}[]"), out);
    }
}

/// Whether our CRD keeps `path` (the API server prunes what a structural schema does not
/// name): the field is in the schema, or an object above it keeps unknown fields or is a map.
fn kept_by(schema: &serde_json::Value, path: &str) -> bool {
    let mut node = schema;
    for step in path.split('.') {
        if node["x-kubernetes-preserve-unknown-fields"] == true
            || node["additionalProperties"].is_object()
        {
            return true;
        }
        let (name, items) = match step.strip_suffix("[]") {
            Some(name) => (name, true),
            None => (step, false),
        };
        node = &node["properties"][name];
        if node.is_null() {
            return false;
        }
        if items {
            node = &node["items"];
        }
    }
    true
}

#[test]
fn every_volcano_podgroup_and_queue_field_is_decided_and_kept() {
    use rust_batch::kube::dialects::volcano::fields::{decision, POD_GROUP_FIELDS, QUEUE_FIELDS};
    for (file, table, ours) in [
        (
            "scheduling.volcano.sh_podgroups.yaml",
            POD_GROUP_FIELDS,
            PodGroup::crd(),
        ),
        (
            "scheduling.volcano.sh_queues.yaml",
            QUEUE_FIELDS,
            Queue::crd(),
        ),
    ] {
        let mut paths = Vec::new();
        field_paths(&volcano_crd_schema(file), "", &mut paths);
        let fields: Vec<&(String, bool)> = paths
            .iter()
            .filter(|(p, _)| p.starts_with("spec.") || p.starts_with("status."))
            .collect();
        assert!(fields.len() > 10, "{file}: read no fields: {paths:?}");
        let undecided: Vec<&str> = fields
            .iter()
            .filter(|(p, leaf)| *leaf && decision(table, p).is_none())
            .map(|(p, _)| p.as_str())
            .collect();
        assert!(
            undecided.is_empty(),
            "{file}: Volcano fields neither modelled, refused nor irrelevant: {undecided:?} \
             (decide each in crates/kube/src/dialects/volcano/fields.rs)"
        );
        let stale: Vec<&str> = table
            .iter()
            .map(|(f, _)| *f)
            .filter(|f| !fields.iter().any(|(p, _)| p == f))
            .collect();
        assert!(stale.is_empty(), "{file}: Volcano has no fields {stale:?}");
        let ours = serde_json::to_value(version_schema(&ours)).unwrap();
        let pruned: Vec<&str> = fields
            .iter()
            .filter(|(p, leaf)| *leaf && !kept_by(&ours, p))
            .map(|(p, _)| p.as_str())
            .collect();
        assert!(
            pruned.is_empty(),
            "{file}: our CRD would let the API server drop {pruned:?}"
        );
    }
}
