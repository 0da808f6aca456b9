//! Every watch the driver runs, one per kind, under one supervisor: what each kind's
//! objects do to the index (`Feed`), and which kinds may be missing.

use std::sync::{Arc, Mutex};

use ::kube::api::Api;
use ::kube::Client;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::resource::v1::{
    DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::storage::v1::StorageClass;

use crate::dialects::kind::GroupTarget;
use crate::dialects::volcano::{HyperNode, Queue};
use crate::dialects::workload::Workload;
use crate::dialects::KINDS;
use crate::index::{lock, Index, Wake};
use crate::lean::Lean;
use crate::supervise::Watches;
use crate::watch::{watch, watch_listing_protobuf, Feed, Sink};

/// What is off while an optional PodGroup or Queue CRD is missing.
const DIALECT: &str = "this gang dialect";
/// What is off while resource.k8s.io/v1 is not served (or not readable).
const DRA: &str = "DRA devices (pods with resourceClaims wait)";

/// Starts every watch under one supervisor (`supervise.rs`): a watch that ends or panics is
/// logged, its kind counts as not listed, and it starts again after a back-off.
pub(super) fn spawn_watches(client: &Client, sink: &Sink<Index>) {
    let mut watches = Watches::default();
    // Pods and nodes are read without their managedFields (see `lean`) and listed in
    // protobuf (see `proto`): the two long lists a (re)start waits for.
    supervised(
        &mut watches,
        watch_listing_protobuf,
        Api::<Lean<Pod>>::all(client.clone()),
        sink,
        Feed {
            kind: "Pod",
            optional: None,
            apply: |ix, pod| ix.apply_pod(&pod.0),
            delete: Index::delete_pod,
            known: Index::pod_keys,
        },
    );
    supervised(
        &mut watches,
        watch_listing_protobuf,
        Api::<Lean<Node>>::all(client.clone()),
        sink,
        Feed {
            kind: "Node",
            optional: None,
            apply: |ix, node| ix.apply_node(&node.0),
            delete: Index::delete_node,
            known: Index::node_keys,
        },
    );
    // Every PodGroup kind (dialects::KINDS), each off while the API server lacks it.
    let groups: Arc<Mutex<dyn GroupTarget>> = sink.index.clone();
    let groups = sink.to(groups);
    for kind in KINDS {
        (kind.watch)(&mut watches, client, &groups);
    }
    supervised(
        &mut watches,
        watch,
        Api::<Queue>::all(client.clone()),
        sink,
        Feed {
            kind: "Queue",
            optional: Some(DIALECT),
            apply: |ix, o| ix.apply_queue(o),
            delete: Index::delete_queue,
            known: Index::queue_keys,
        },
    );
    // Volcano's network topology: without the CRD, HyperNode-based placement is off and
    // everything else is scheduled as before.
    supervised(
        &mut watches,
        watch,
        Api::<HyperNode>::all(client.clone()),
        sink,
        Feed {
            kind: "topology.volcano.sh HyperNode",
            optional: Some("network topology from HyperNodes"),
            apply: |ix, o| {
                ix.apply_hypernode(o);
                Wake::Now
            },
            delete: Index::delete_hypernode,
            known: Index::hypernode_keys,
        },
    );
    // Kubernetes' Workloads: what native PodGroups' workloadRef names (explain, events).
    // Served with scheduling.k8s.io/v1beta1; off where it is not.
    supervised(
        &mut watches,
        watch,
        Api::<Workload>::all(client.clone()),
        sink,
        Feed {
            kind: "scheduling.k8s.io Workload",
            optional: Some(
                "the Workloads native PodGroups name (scheduling.k8s.io/v1beta1 is not served)",
            ),
            apply: Index::apply_workload,
            delete: Index::delete_workload,
            known: Index::workload_keys,
        },
    );
    supervised(
        &mut watches,
        watch,
        Api::<PodDisruptionBudget>::all(client.clone()),
        sink,
        Feed {
            kind: "PodDisruptionBudget",
            optional: None,
            apply: |ix, o| {
                ix.apply_budget(o);
                Wake::Now
            },
            delete: Index::delete_budget,
            known: Index::budget_keys,
        },
    );
    // Namespace labels, for pod affinity terms that select namespaces by them.
    supervised(
        &mut watches,
        watch,
        Api::<Namespace>::all(client.clone()),
        sink,
        Feed {
            kind: "Namespace",
            optional: None,
            apply: |ix, o| {
                ix.apply_namespace(o);
                Wake::Now
            },
            delete: Index::delete_namespace,
            known: Index::namespace_keys,
        },
    );
    // Claims, volumes and classes: what pods' volumes ask of their nodes, and when a
    // gang's WaitForFirstConsumer claims are bound.
    supervised(
        &mut watches,
        watch,
        Api::<PersistentVolumeClaim>::all(client.clone()),
        sink,
        Feed {
            kind: "PersistentVolumeClaim",
            optional: None,
            apply: |ix, o| {
                ix.apply_claim(o);
                Wake::Now
            },
            delete: Index::delete_claim,
            known: Index::claim_keys,
        },
    );
    supervised(
        &mut watches,
        watch,
        Api::<PersistentVolume>::all(client.clone()),
        sink,
        Feed {
            kind: "PersistentVolume",
            optional: None,
            apply: |ix, o| {
                ix.apply_volume(o);
                Wake::Now
            },
            delete: Index::delete_volume,
            known: Index::volume_keys,
        },
    );
    supervised(
        &mut watches,
        watch,
        Api::<StorageClass>::all(client.clone()),
        sink,
        Feed {
            kind: "StorageClass",
            optional: None,
            apply: |ix, o| {
                ix.apply_class(o);
                Wake::Now
            },
            delete: Index::delete_class,
            known: Index::class_keys,
        },
    );
    // Dynamic Resource Allocation (resource.k8s.io/v1): devices of nodes, classes that
    // select them, pods' claims and the templates claims are made from. Without the API
    // (or the permission to read it) pods with claims wait, naming their missing claims.
    supervised(
        &mut watches,
        watch,
        Api::<DeviceClass>::all(client.clone()),
        sink,
        Feed {
            kind: "resource.k8s.io DeviceClass",
            optional: Some(DRA),
            apply: Index::apply_device_class,
            delete: Index::delete_device_class,
            known: Index::device_class_keys,
        },
    );
    supervised(
        &mut watches,
        watch,
        Api::<ResourceSlice>::all(client.clone()),
        sink,
        Feed {
            kind: "resource.k8s.io ResourceSlice",
            optional: Some(DRA),
            apply: Index::apply_resource_slice,
            delete: Index::delete_resource_slice,
            known: Index::resource_slice_keys,
        },
    );
    supervised(
        &mut watches,
        watch,
        Api::<ResourceClaim>::all(client.clone()),
        sink,
        Feed {
            kind: "resource.k8s.io ResourceClaim",
            optional: Some(DRA),
            apply: Index::apply_resource_claim,
            delete: Index::delete_resource_claim,
            known: Index::resource_claim_keys,
        },
    );
    supervised(
        &mut watches,
        watch,
        Api::<ResourceClaimTemplate>::all(client.clone()),
        sink,
        Feed {
            kind: "resource.k8s.io ResourceClaimTemplate",
            optional: Some(DRA),
            apply: Index::apply_claim_template,
            delete: Index::delete_claim_template,
            known: Index::claim_template_keys,
        },
    );
    supervised(
        &mut watches,
        watch,
        Api::<PriorityClass>::all(client.clone()),
        sink,
        Feed {
            kind: "PriorityClass",
            optional: None,
            apply: |ix, o| {
                ix.apply_priority_class(o);
                Wake::Now
            },
            delete: Index::delete_priority_class,
            known: Index::priority_class_keys,
        },
    );
    let index = sink.index.clone();
    tokio::spawn(watches.supervise(move |kind| lock(&index).readiness.expect(kind)));
}

/// Adds the watch `run(api, sink, feed)` (a `watch` function) to `watches`.
fn supervised<K, F, Fut>(
    watches: &mut Watches,
    run: F,
    api: Api<K>,
    sink: &Sink<Index>,
    feed: Feed<K, Index>,
) where
    K: Clone + Send + Sync + 'static,
    F: Fn(Api<K>, Sink<Index>, Feed<K, Index>) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let sink = sink.clone();
    watches.add(feed.kind, move || run(api.clone(), sink.clone(), feed));
}
