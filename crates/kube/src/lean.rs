//! Pods and nodes as the watches read them: without `metadata.managedFields`.
//!
//! managedFields are the API server's bookkeeping for server-side apply, and nothing here
//! reads them. They are 40% of a running kwok pod's JSON, and decoded they are most of its
//! memory: every `{}` of `fieldsV1` becomes a map of its own. Lists at start-up decode a
//! page's objects all at once, so a scheduler restarting on 55,000 pods held 1.6 GiB while
//! the list was in (unpaged) where the index itself needs 240 MiB. serde skips a field the
//! target type does not name without building it, so decoding into `Lean<K>` never
//! allocates them.

use std::borrow::Cow;
use std::collections::BTreeMap;

use ::kube::Resource;
use k8s_openapi::api::core::v1::{Node, NodeSpec, NodeStatus, Pod, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use serde::{Deserialize, Deserializer};

/// A `K` decoded without its managedFields (everything else as `K` decodes it).
#[derive(Clone, Debug, PartialEq)]
pub struct Lean<K>(pub K);

/// ObjectMeta but managedFields.
#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Meta {
    annotations: Option<BTreeMap<String, String>>,
    creation_timestamp: Option<Time>,
    deletion_grace_period_seconds: Option<i64>,
    deletion_timestamp: Option<Time>,
    finalizers: Option<Vec<String>>,
    generate_name: Option<String>,
    generation: Option<i64>,
    labels: Option<BTreeMap<String, String>>,
    name: Option<String>,
    namespace: Option<String>,
    owner_references: Option<Vec<OwnerReference>>,
    resource_version: Option<String>,
    self_link: Option<String>,
    uid: Option<String>,
}

impl From<Meta> for ObjectMeta {
    fn from(m: Meta) -> ObjectMeta {
        ObjectMeta {
            annotations: m.annotations,
            creation_timestamp: m.creation_timestamp,
            deletion_grace_period_seconds: m.deletion_grace_period_seconds,
            deletion_timestamp: m.deletion_timestamp,
            finalizers: m.finalizers,
            generate_name: m.generate_name,
            generation: m.generation,
            labels: m.labels,
            managed_fields: None,
            name: m.name,
            namespace: m.namespace,
            owner_references: m.owner_references,
            resource_version: m.resource_version,
            self_link: m.self_link,
            uid: m.uid,
        }
    }
}

/// The shape Pod and Node share: metadata, spec, status.
#[derive(Deserialize)]
struct Body<S, T> {
    #[serde(default)]
    metadata: Meta,
    spec: Option<S>,
    status: Option<T>,
}

impl<'de> Deserialize<'de> for Lean<Pod> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let b = Body::<PodSpec, PodStatus>::deserialize(d)?;
        Ok(Lean(Pod {
            metadata: b.metadata.into(),
            spec: b.spec,
            status: b.status,
        }))
    }
}

impl<'de> Deserialize<'de> for Lean<Node> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let b = Body::<NodeSpec, NodeStatus>::deserialize(d)?;
        Ok(Lean(Node {
            metadata: b.metadata.into(),
            spec: b.spec,
            status: b.status,
        }))
    }
}

/// The API calls of `Lean<K>` are `K`'s.
impl<K: Resource<DynamicType = ()>> Resource for Lean<K> {
    type DynamicType = ();
    type Scope = K::Scope;

    fn kind(dt: &()) -> Cow<'_, str> {
        K::kind(dt)
    }

    fn group(dt: &()) -> Cow<'_, str> {
        K::group(dt)
    }

    fn version(dt: &()) -> Cow<'_, str> {
        K::version(dt)
    }

    fn api_version(dt: &()) -> Cow<'_, str> {
        K::api_version(dt)
    }

    fn plural(dt: &()) -> Cow<'_, str> {
        K::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        self.0.meta()
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        self.0.meta_mut()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A pod as the API server sends it, managedFields and all.
    fn pod_json() -> serde_json::Value {
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "gang-0-0", "namespace": "scale", "uid": "73d4",
                "resourceVersion": "65431", "generation": 1,
                "creationTimestamp": "2026-11-25T23:54:22Z",
                "deletionTimestamp": "2026-11-25T23:59:22Z",
                "deletionGracePeriodSeconds": 30,
                "generateName": "gang-0-", "finalizers": ["f"],
                "labels": {"app": "x"},
                "annotations": {"scheduling.k8s.io/group-name": "gang-0"},
                "ownerReferences": [{"apiVersion": "v1", "kind": "Job", "name": "j", "uid": "u", "controller": true}],
                "managedFields": [{"manager": "kwok", "operation": "Update", "apiVersion": "v1",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:phase": {}}}, "subresource": "status"}]
            },
            "spec": {
                "containers": [{"name": "c", "image": "busybox",
                    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}],
                "nodeName": "n1", "schedulerName": "rust-batch", "priority": 7
            },
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        })
    }

    #[test]
    fn a_lean_pod_is_the_pod_without_its_managed_fields() {
        let mut full: Pod = serde_json::from_value(pod_json()).unwrap();
        assert!(full.metadata.managed_fields.is_some());
        full.metadata.managed_fields = None;
        let lean: Lean<Pod> = serde_json::from_value(pod_json()).unwrap();
        assert_eq!(lean.0, full, "every other field decodes as Pod decodes it");
    }

    #[test]
    fn a_lean_node_is_the_node_without_its_managed_fields() {
        let node = json!({
            "metadata": {"name": "n1", "labels": {"pool": "a"},
                "managedFields": [{"manager": "kwok", "fieldsV1": {"f:status": {}}}]},
            "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]},
            "status": {"allocatable": {"cpu": "32", "pods": "110"}}
        });
        let mut full: Node = serde_json::from_value(node.clone()).unwrap();
        full.metadata.managed_fields = None;
        let lean: Lean<Node> = serde_json::from_value(node).unwrap();
        assert_eq!(lean.0, full);
    }

    #[test]
    fn api_paths_are_the_wrapped_kinds() {
        assert_eq!(Lean::<Pod>::kind(&()), "Pod");
        assert_eq!(
            Lean::<Pod>::url_path(&(), Some("ns")),
            Pod::url_path(&(), Some("ns"))
        );
        assert_eq!(Lean::<Node>::url_path(&(), None), Node::url_path(&(), None));
    }
}
