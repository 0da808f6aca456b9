//! A snapshot of a live cluster as a simulator scenario (`rust-batch simulate
//! --from-cluster`): every kind the live driver reads that shapes scheduling is listed
//! once — a plain list, no watch, nothing written — and fed through the index's own apply
//! path, so gangs are grouped, dialects take precedence and PriorityClasses and queues
//! apply exactly as in `rust-batch run`. The engine's cache the index fills is then turned
//! into a scenario (`sim::capture`).
//!
//! Read only: the RBAC it needs is `list` on pods, nodes, priorityclasses, the PodGroup
//! kinds, queues, hypernodes and the DRA kinds (docs/src/scenarios.md). A kind whose CRD is missing or
//! that may not be listed is left out and said; pods and nodes must be listed.

use std::collections::HashMap;
use std::fmt::Debug;

use ::kube::api::{Api, ListParams};
use ::kube::{Client, Resource, ResourceExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::resource::v1::{
    DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use serde::de::DeserializeOwned;

use super::convert::{pod_to_update, unsupported_fields};
use super::dialects::coscheduling::{key_of_group, SigsPodGroup, XK8sPodGroup};
use super::dialects::kind::{Dialect, GangKind, KindContext};
use super::dialects::native::NativePodGroup;
use super::dialects::pod_gang;
use super::dialects::volcano::api::DEFAULT_QUEUE;
use super::dialects::volcano::{hypernode_to_spec, queue_to_info, HyperNode, PodGroup, Queue};
use super::index::Index;
use super::retry::cause_of;
use rust_batch_engine::sim::capture::{capture, CaptureOptions, Captured, Skipped};

/// Why no snapshot could be taken.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("cannot list {kind} from the API server: {cause}")]
    List {
        kind: &'static str,
        cause: String,
        #[source]
        source: ::kube::Error,
    },
}

/// The PodGroup kinds listed, in `dialects::KINDS` order (a test checks they are all).
pub const LISTED_GANG_KINDS: [Dialect; 4] = [
    <NativePodGroup as GangKind>::DIALECT,
    <PodGroup as GangKind>::DIALECT,
    <XK8sPodGroup as GangKind>::DIALECT,
    <SigsPodGroup as GangKind>::DIALECT,
];

/// What to take.
#[derive(Clone, Debug)]
pub struct SnapshotOptions {
    /// The scheduler names whose pods are rust-batch's (`run --scheduler-name`).
    pub scheduler_names: Vec<String>,
    pub capture: CaptureOptions,
}

/// Lists the cluster once and returns it as a scenario, with what was left out.
pub async fn take(client: &Client, opts: SnapshotOptions) -> Result<Captured, SnapshotError> {
    let mut ix = Index::new(opts.scheduler_names.clone());
    // As the driver: queue default stands until the Queue list brings its object.
    ix.cache
        .apply_queue(crate::model::QueueInfo::new(DEFAULT_QUEUE, 1));
    let mut skipped = Vec::new();
    // The order the index is least surprised by (each kind's apply handles any order, as
    // the live watches' lists arrive in any): what gangs read first, pods last.
    for pc in list::<PriorityClass>(client, "PriorityClass", &mut skipped).await? {
        ix.apply_priority_class(&pc);
    }
    for q in list::<Queue>(client, "scheduling.volcano.sh Queue", &mut skipped).await? {
        if let Err(e) = queue_to_info(&q) {
            skipped.push(Skipped {
                object: format!("Queue {}", q.name_any()),
                reason: e.to_string(),
            });
        }
        ix.apply_queue(&q);
    }
    for h in list::<HyperNode>(client, "topology.volcano.sh HyperNode", &mut skipped).await? {
        match hypernode_to_spec(&h) {
            Ok(_) => ix.apply_hypernode(&h),
            Err(e) => skipped.push(Skipped {
                object: format!("HyperNode {}", h.name_any()),
                reason: e.to_string(),
            }),
        }
    }
    let nodes = list_required::<Node>(client, "Node").await?;
    for n in &nodes {
        ix.apply_node(n);
    }
    dra(client, &mut ix, &mut skipped).await?;
    let mut group_keys = Vec::new();
    group_keys.extend(gangs::<NativePodGroup>(client, &mut ix, &mut skipped).await?);
    group_keys.extend(gangs::<PodGroup>(client, &mut ix, &mut skipped).await?);
    group_keys.extend(gangs::<XK8sPodGroup>(client, &mut ix, &mut skipped).await?);
    group_keys.extend(gangs::<SigsPodGroup>(client, &mut ix, &mut skipped).await?);
    let pods = list_required::<Pod>(client, "Pod").await?;
    for p in &pods {
        ix.apply_pod(p);
    }
    for (key, object, reason) in group_keys {
        if ix.cache.state().job_by_uid(&key).is_none() {
            skipped.push(Skipped { object, reason });
        }
    }
    for p in &pods {
        if let Some(reason) = left_out(&ix, &opts.scheduler_names, p) {
            skipped.push(Skipped {
                object: format!("pod {}/{}", p.namespace().unwrap_or_default(), p.name_any()),
                reason,
            });
        }
    }
    let mut captured = capture(&ix.cache, &opts.capture);
    skipped.append(&mut captured.skipped);
    captured.skipped = skipped;
    Ok(captured)
}

/// DRA (resource.k8s.io/v1), after the nodes (a network-attached pool reaches nodes by
/// their labels) and before the pods (whose claims it resolves): DeviceClasses, the
/// ResourceSlices publishing devices, the templates and claims pods use. A slice the
/// scheduler cannot read is skipped, with its reason.
async fn dra(
    client: &Client,
    ix: &mut Index,
    skipped: &mut Vec<Skipped>,
) -> Result<(), SnapshotError> {
    for c in list::<DeviceClass>(client, "resource.k8s.io DeviceClass", skipped).await? {
        ix.apply_device_class(&c);
    }
    for s in list::<ResourceSlice>(client, "resource.k8s.io ResourceSlice", skipped).await? {
        if let Err(why) = crate::dra::pool_devices(&s) {
            let object = format!("ResourceSlice {}", s.name_any());
            let reason = why
                .strip_prefix(&format!("{object}: "))
                .unwrap_or(&why)
                .to_string();
            skipped.push(Skipped { object, reason });
            continue;
        }
        ix.apply_resource_slice(&s);
    }
    let kind = "resource.k8s.io ResourceClaimTemplate";
    for t in list::<ResourceClaimTemplate>(client, kind, skipped).await? {
        ix.apply_claim_template(&t);
    }
    for c in list::<ResourceClaim>(client, "resource.k8s.io ResourceClaim", skipped).await? {
        ix.apply_resource_claim(&c);
    }
    Ok(())
}

/// Why a pod of ours that has not ended is not in the engine's cache (the index told it
/// so by an event on a live cluster), or None.
fn left_out(ix: &Index, names: &[String], pod: &Pod) -> Option<String> {
    let uid = pod.uid().unwrap_or_default();
    let scheduler = pod
        .spec
        .as_ref()
        .and_then(|s| s.scheduler_name.as_deref())
        .unwrap_or("default-scheduler");
    let ours = names.iter().any(|n| n == scheduler);
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if !ours || matches!(phase, Some("Succeeded" | "Failed")) || ix.cache.pod(&uid).is_some() {
        return None;
    }
    if let Err(e) = pod_gang(pod) {
        return Some(e.to_string());
    }
    if let Err(e) = pod_to_update(pod, None) {
        return Some(e.to_string());
    }
    let spec = pod.spec.as_ref()?;
    if let Some(why) = unsupported_fields(spec) {
        return Some(format!("{why}; the scheduler leaves it pending"));
    }
    let gates: Vec<&str> = spec
        .scheduling_gates
        .iter()
        .flatten()
        .map(|g| g.name.as_str())
        .collect();
    if !gates.is_empty() {
        return Some(format!(
            "gated by {}: not scheduled until the gates are removed",
            gates.join(", ")
        ));
    }
    Some("not in a gang the scheduler can use (see the pod's events)".into())
}

/// Lists kind `G` into the index; returns each object's key, name and, should the index
/// not make a gang of it, why.
async fn gangs<G: GangKind>(
    client: &Client,
    ix: &mut Index,
    skipped: &mut Vec<Skipped>,
) -> Result<Vec<(String, String, String)>, SnapshotError> {
    let mut keys = Vec::new();
    let no_classes = HashMap::new();
    for g in list::<G>(client, G::WATCH_NAME, skipped).await? {
        let key = key_of_group(&g);
        let reason = match g.to_job(&KindContext {
            priority_classes: &no_classes,
        }) {
            Err(e) => e.to_string(),
            Ok(_) => "not a gang the scheduler can use (see its events)".to_string(),
        };
        keys.push((key.clone(), format!("{} {key}", G::WATCH_NAME), reason));
        ix.apply_group(&g);
    }
    Ok(keys)
}

/// Every object of a kind, or none (said in `skipped`) when the API server does not serve
/// it (404) or may not tell (403).
async fn list<K>(
    client: &Client,
    kind: &'static str,
    skipped: &mut Vec<Skipped>,
) -> Result<Vec<K>, SnapshotError>
where
    K: Resource + Clone + DeserializeOwned + Debug,
    K::DynamicType: Default,
{
    match Api::<K>::all(client.clone())
        .list(&ListParams::default())
        .await
    {
        Ok(list) => Ok(list.items),
        Err(::kube::Error::Api(status)) if status.code == 404 || status.code == 403 => {
            skipped.push(Skipped {
                object: format!("every {kind}"),
                reason: if status.code == 404 {
                    "not served by the API server (CRD not installed)".into()
                } else {
                    "forbidden: the kubeconfig's user may not list them".into()
                },
            });
            Ok(Vec::new())
        }
        Err(source) => Err(SnapshotError::List {
            kind,
            cause: cause_of(&source),
            source,
        }),
    }
}

/// Every object of a kind the snapshot cannot do without.
async fn list_required<K>(client: &Client, kind: &'static str) -> Result<Vec<K>, SnapshotError>
where
    K: Resource + Clone + DeserializeOwned + Debug,
    K::DynamicType: Default,
{
    Api::<K>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .map_err(|source| SnapshotError::List {
            kind,
            cause: cause_of(&source),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rust_batch_engine::sim::Scenario;
    use serde_json::json;

    #[test]
    fn every_registered_gang_kind_is_listed() {
        let registered: Vec<Dialect> = crate::dialects::KINDS.iter().map(|k| k.dialect).collect();
        assert_eq!(registered, LISTED_GANG_KINDS.to_vec());
    }

    fn obj<T: DeserializeOwned>(v: serde_json::Value) -> T {
        serde_json::from_value(v).unwrap()
    }

    /// The index's own apply path, then the capture: gangs of two dialects, a running gang
    /// pinned with its elapsed time, another scheduler's pod as usage, creation order kept.
    #[test]
    fn listed_objects_become_a_scenario_that_loads() {
        let mut ix = Index::new(vec!["rust-batch".into()]);
        let now = 1_767_225_600_000i64; // 2026-01-01T00:00:00Z
        let at = |ms: i64| {
            let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms as u64);
            humantime::format_rfc3339_seconds(t).to_string()
        };
        for n in ["n1", "n2"] {
            ix.apply_node(&obj(json!({
                "metadata": {"name": n, "labels": {"kubernetes.io/hostname": n, "pool": "a"}},
                "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                           "conditions": [{"type": "Ready", "status": "True"}]}
            })));
        }
        ix.apply_group(&obj::<PodGroup>(json!({
            "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
            "metadata": {"name": "run", "namespace": "ns", "creationTimestamp": at(now - 600_000)},
            "spec": {"minMember": 1}
        })));
        let pod = |name: &str, group: &str, created: i64, node: Option<&str>, scheduler: &str| {
            let mut spec = json!({
                "schedulerName": scheduler,
                "containers": [{"name": "c", "resources": {"requests": {"cpu": "3"}}}]
            });
            if let Some(n) = node {
                spec["nodeName"] = n.into();
            }
            obj::<Pod>(json!({
                "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"),
                             "creationTimestamp": at(created),
                             "annotations": {"scheduling.k8s.io/group-name": group,
                                             "rust-batch.io/runtime-estimate": "20m"}},
                "spec": spec,
                "status": if node.is_some() {
                    json!({"phase": "Running", "startTime": at(now - 300_000)})
                } else {
                    json!({"phase": "Pending"})
                }
            }))
        };
        ix.apply_pod(&pod(
            "run-0",
            "run",
            now - 600_000,
            Some("n1"),
            "rust-batch",
        ));
        // A kube-batch gang declared on its pods alone, created after the next one.
        let mut late = pod("late-0", "late", now - 60_000, None, "rust-batch");
        late.metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert("scheduling.k8s.io/group-min-member".into(), "1".into());
        ix.apply_pod(&late);
        let mut early = pod("early-0", "early", now - 120_000, None, "rust-batch");
        early
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert("scheduling.k8s.io/group-min-member".into(), "1".into());
        ix.apply_pod(&early);
        ix.apply_pod(&pod(
            "web",
            "none",
            now - 600_000,
            Some("n2"),
            "default-scheduler",
        ));

        let captured = capture(
            &ix.cache,
            &CaptureOptions {
                now,
                name: "snap".into(),
                ..Default::default()
            },
        );
        let s = &captured.scenario;
        assert_eq!(s.node_groups.len(), 1, "{:?}", s.node_groups);
        assert_eq!(s.node_groups[0].names, ["n1", "n2"]);
        let names: Vec<&str> = s.jobs.iter().map(|j| j.name.as_str()).collect();
        assert_eq!(names, ["run", "early", "late"], "creation order");
        let run = &s.jobs[0].tasks[0];
        assert_eq!(run.running.len(), 1);
        assert_eq!(
            (run.running[0].node.as_str(), run.running[0].elapsed.0),
            ("n1", 300_000)
        );
        assert_eq!(run.runtime.map(|m| m.0), Some(1_200_000), "the estimate");
        assert_eq!(s.other_pods.len(), 1);
        assert_eq!(s.other_pods[0].node, "n2");
        let text = s.to_yaml().unwrap();
        let back = Scenario::parse(&text, "snap.yaml").unwrap();
        assert_eq!(&back, s, "{text}");
    }

    /// DRA through the index: the class, each node's devices as device sets (a device
    /// another claim holds left out), a pending gang's template claim and a running gang's
    /// allocated one as the tasks' claims, a gang whose claim cannot be resolved skipped;
    /// the scenario reads back equal and the pending gang starts at once.
    #[test]
    fn dra_objects_become_device_sets_and_claims() {
        use crate::index::dra_watch::tests::{
            claim, class, ready_node, slice, template, template_pod,
        };
        let mut ix = Index::new(vec!["rust-batch".into()]);
        for n in ["n1", "n2"] {
            ix.apply_node(&ready_node(n, json!({"kubernetes.io/hostname": n})));
        }
        ix.apply_device_class(&class());
        ix.apply_resource_slice(&slice("n1", 8));
        ix.apply_resource_slice(&slice("n2", 8));
        ix.apply_claim_template(&template());
        let allocated = |mut c: ResourceClaim, node: &str, devices: &[&str]| {
            let results: Vec<serde_json::Value> = devices
                .iter()
                .map(|d| json!({"request": "gpu", "driver": "gpu.example.com", "pool": node, "device": d}))
                .collect();
            c.status = Some(obj(json!({"allocation": {
                "devices": {"results": results},
                "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": [node]}]}]}
            }})));
            c
        };
        // No pod uses it: its device stays held for the whole simulation.
        ix.apply_resource_claim(&allocated(claim("theirs", None, 1), "n2", &["gpu-4"]));
        ix.apply_resource_claim(&claim("a-gpus", Some("a"), 2));
        ix.apply_resource_claim(&allocated(
            claim("r-gpus", Some("r"), 2),
            "n1",
            &["gpu-0", "gpu-1"],
        ));
        let in_gang = |mut p: Pod, gang: &str| {
            let a = p.metadata.annotations.as_mut().unwrap();
            a.insert("scheduling.k8s.io/group-name".into(), gang.into());
            a.insert("scheduling.k8s.io/group-min-member".into(), "1".into());
            p
        };
        ix.apply_pod(&in_gang(template_pod("a", Some("a-gpus")), "g"));
        let mut r = in_gang(template_pod("r", Some("r-gpus")), "rg");
        r.spec.as_mut().unwrap().node_name = Some("n1".into());
        r.status.as_mut().unwrap().phase = Some("Running".into());
        ix.apply_pod(&r);
        let mut x = in_gang(template_pod("x", None), "xg");
        x.spec.as_mut().unwrap().resource_claims.as_mut().unwrap()[0]
            .resource_claim_template_name = Some("missing".into());
        ix.apply_pod(&x);

        let captured = capture(
            &ix.cache,
            &CaptureOptions {
                now: 0,
                name: "dra".into(),
                ..Default::default()
            },
        );
        let s = &captured.scenario;
        assert_eq!(s.device_classes.len(), 1);
        assert_eq!(s.device_classes[0].name, "gpu");
        // Clique values other nodes have too are kept exactly: a device set per clique.
        let sets = |g: usize| -> Vec<(u32, serde_json::Value)> {
            s.node_groups[g]
                .devices
                .iter()
                .map(|d| (d.count, d.attributes["clique"].clone()))
                .collect()
        };
        assert_eq!(s.node_groups.len(), 2, "{:?}", s.node_groups);
        assert_eq!(s.node_groups[0].names, ["n1"]);
        assert_eq!(
            sets(0),
            [(4, json!("c0")), (4, json!("c1"))],
            "r's devices held again at t=0"
        );
        assert_eq!(
            sets(1),
            [(4, json!("c0")), (3, json!("c1"))],
            "gpu-4 stays held"
        );
        assert!(
            captured
                .notes
                .iter()
                .any(|n| n.starts_with("node n2: devices held by claims")),
            "{:?}",
            captured.notes
        );
        let job = |name: &str| s.jobs.iter().find(|j| j.name == name).unwrap();
        let claims = &job("g").tasks[0].claims;
        assert_eq!(claims.len(), 1);
        assert_eq!((claims[0].name.as_str(), claims[0].shared), ("gpus", false));
        assert_eq!(claims[0].requests[0].count, Some(2));
        assert_eq!(
            claims[0].constraints[0].match_attribute,
            "gpu.example.com/clique"
        );
        assert_eq!(job("rg").tasks[0].running[0].node, "n1");
        assert_eq!(
            job("rg").tasks[0].claims,
            *claims,
            "its claim, allocated again at t=0"
        );
        assert!(s.jobs.iter().all(|j| j.name != "xg"));
        assert!(
            captured.skipped.iter().any(|k| k
                .reason
                .contains("resourceclaimtemplate ns/missing not found")),
            "{:?}",
            captured.skipped
        );
        let text = s.to_yaml().unwrap();
        let back = Scenario::parse(&text, "dra.yaml").unwrap();
        assert_eq!(&back, s, "{text}");
        let mut sim = rust_batch_engine::sim::Simulation::new(back, "dra.yaml").unwrap();
        let report = sim.run(&mut |_| {});
        assert!(report.invariants_hold(), "{:?}", report.invariants);
        assert!(
            report.setup_problems.is_empty(),
            "{:?}",
            report.setup_problems
        );
        let g = report.jobs.iter().find(|j| j.name == "ns/g").unwrap();
        assert_eq!(g.started, Some(0), "two GPUs of one clique are free");
    }

    /// Devices whose attributes a device set cannot all say (a UUID and a PCI bus address
    /// unique to each device, an index every node has): split by the index, kept exactly;
    /// one unique attribute as the set's groups, the other left out and said. Equal nodes
    /// stay one group.
    #[test]
    fn device_attributes_a_device_set_cannot_say_are_noted_and_the_closest_kept() {
        use crate::index::dra_watch::tests::{class, ready_node};
        let mut ix = Index::new(vec!["rust-batch".into()]);
        ix.apply_device_class(&class());
        for n in ["n1", "n2"] {
            ix.apply_node(&ready_node(n, json!({"kubernetes.io/hostname": n})));
            let devices: Vec<serde_json::Value> = (0..4)
                .map(|i| {
                    json!({"name": format!("gpu-{i}"), "attributes": {
                        "uuid": {"string": format!("GPU-{n}-{i}")},
                        "pciBusID": {"string": format!("{n}:{i}")},
                        "index": {"int": i},
                        "productName": {"string": "H100"}}})
                })
                .collect();
            ix.apply_resource_slice(&obj(json!({
                "metadata": {"name": format!("{n}-gpus"), "resourceVersion": "1"},
                "spec": {"driver": "gpu.example.com", "nodeName": n,
                    "pool": {"name": n, "generation": 1, "resourceSliceCount": 1},
                    "devices": devices}
            })));
        }
        let captured = capture(&ix.cache, &CaptureOptions::default());
        let groups = &captured.scenario.node_groups;
        assert_eq!(groups.len(), 1, "{groups:?}");
        assert_eq!(groups[0].names, ["n1", "n2"]);
        let sets = &groups[0].devices;
        assert_eq!(sets.len(), 4, "one set per index: {sets:?}");
        for (i, set) in sets.iter().enumerate() {
            assert_eq!(set.count, 1);
            assert_eq!(set.attributes["index"], json!(i));
            assert_eq!(set.attributes["productName"], json!("H100"));
            let g = set.groups.as_ref().unwrap();
            assert_eq!((g.attribute.as_str(), g.size), ("pciBusID", 1));
        }
        let notes = captured.notes.join("\n");
        assert!(
            notes.contains("node n1, n2: attribute gpu.example.com/uuid of its gpu.example.com devices has values of the node's own"),
            "{notes}"
        );
    }
}
