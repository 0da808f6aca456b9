//! A gang's device allocations written before its binds, as kube-scheduler's DRA plugin
//! writes them at PreBind: each claim the cycle allocated gets kube-scheduler's
//! delete-protection finalizer, then `status.allocation` and `status.reservedFor` (the
//! gang's pods that use it); a claim allocated already only gains the pods in
//! `reservedFor`. Only when every write of the gang went through are its pods bound.
//!
//! If any write fails, the gang is called off: the writes this attempt made are rolled back
//! (allocation and reservations cleared, or the reservations as they were), the pods'
//! bind assumptions are dropped, and the gang backs off with an event naming the claim and
//! the error. So no pod is bound without its devices and no unbound gang keeps devices.
//! A claim already allocated and reserved for the pod (written before a restart, or by a
//! write whose answer was lost) needs no write: it is read back from the claim's status.
//!
//! Writes carry the claim's resourceVersion: a claim someone else allocated meanwhile
//! fails the write (409) instead of being overwritten.

use std::time::Duration;

use ::kube::api::{Api, Patch, PatchParams};
use ::kube::ResourceExt;
use k8s_openapi::api::resource::v1::ResourceClaim;
use serde_json::{json, Value};
use tracing::debug;

use super::binder::Binder;
use super::dra::allocation_patch;
use super::index::dra_commits::{ClaimWrite, GangCommit};
use super::retry::{cause_of, delay, warn_limited, Failure};

/// kube-scheduler's finalizer on claims it allocated: the resource-claim controller clears
/// the allocation of a claim carrying it once no pod uses the claim any more.
pub const DELETE_PROTECTION: &str = "resource.kubernetes.io/delete-protection";

/// Writes a gang's claims, then binds its pods; or, if a write fails, rolls back the
/// writes made and calls the gang off.
pub async fn commit(binder: Binder, c: GangCommit) {
    let answers = futures::future::join_all(c.writes.iter().map(|w| write_claim(&binder, w))).await;
    let mut done = Vec::new();
    let mut failed = Vec::new();
    for (w, answer) in c.writes.iter().zip(answers) {
        match answer {
            Ok(claim) => done.push((w, claim)),
            Err(why) => failed.push(why),
        }
    }
    if failed.is_empty() {
        binder.index.answer(|ix| {
            for (_, claim) in &done {
                ix.resource_claim(claim);
            }
            ix.devices_written(&c.gang);
        });
        debug!(gang = %c.gang, claims = c.writes.len(), "claims allocated; binding");
        binder.send(c.binds, Vec::new()).await;
        return;
    }
    let rolled_back =
        futures::future::join_all(done.iter().map(|(w, _)| roll_back(&binder, w))).await;
    let why = failed.join("; ");
    binder.index.answer(|ix| {
        for claim in rolled_back.into_iter().flatten() {
            ix.resource_claim(&claim);
        }
        ix.devices_called_off(&c, &why, crate::clock::now_ms());
        binder.recount_unseen(ix);
    });
    binder.wake.notify_one();
}

/// The consumer reference of a pod.
fn consumer(name: &str, uid: &str) -> Value {
    json!({"resource": "pods", "name": name, "uid": uid})
}

/// The status patch of a write: the allocation (if any) and the consumers before plus the
/// gang's pods, with the claim's version.
pub fn status_patch(w: &ClaimWrite, resource_version: Option<&str>) -> Value {
    let mut reserved: Vec<Value> = w
        .reserved_before
        .iter()
        .map(|r| serde_json::to_value(r).unwrap_or(Value::Null))
        .collect();
    reserved.extend(w.pods.iter().map(|(name, uid)| consumer(name, uid)));
    let mut body = match (&w.allocation, w.pods.first()) {
        (Some(a), Some((name, uid))) => allocation_patch(a, name, uid),
        _ => json!({"status": {}}),
    };
    body["status"]["reservedFor"] = Value::Array(reserved);
    body["metadata"] = json!({ "resourceVersion": resource_version });
    body
}

/// The patch that takes a write back: a claim this attempt allocated loses its allocation
/// and consumers; one that only gained consumers gets its consumers as they were.
pub fn rollback_patch(w: &ClaimWrite) -> Value {
    if w.allocation.is_some() {
        json!({"status": {"allocation": null, "reservedFor": null}})
    } else {
        json!({"status": {"reservedFor": w.reserved_before}})
    }
}

/// Sends one claim write, trying again while the API server does not answer (a few times);
/// the claim as answered, or why it failed.
async fn send<F, Fut>(
    binder: &Binder,
    what: &str,
    key: &str,
    call: F,
) -> Result<ResourceClaim, String>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<ResourceClaim, ::kube::Error>>,
{
    let mut attempt = 0;
    loop {
        binder.gate.pass().await;
        let started = tokio::time::Instant::now();
        let sent = call().await;
        binder.gate.record(&sent);
        binder
            .metrics
            .api_write_timed("resourceclaim", started.elapsed(), sent.as_ref().err());
        let err = match sent {
            Ok(claim) => return Ok(claim),
            Err(e) => e,
        };
        match Failure::of(&err) {
            Failure::Transient if attempt < 5 => {
                attempt += 1;
                warn_limited(
                    &format!("{what} not answered ({})", cause_of(&err)),
                    "retrying",
                );
                tokio::time::sleep(delay(
                    attempt,
                    Duration::from_millis(100),
                    Duration::from_secs(2),
                ))
                .await;
            }
            Failure::NotFound => return Err(format!("resourceclaim {key} not found")),
            // The API server's whole message: a 422 names the field it refuses.
            _ => {
                // The API server's own message (a 422 names the field it refuses), once:
                // the error's Display repeats it inside a dump of the whole Status.
                let why = match &err {
                    ::kube::Error::Api(status) => format!("{} ({})", status.message, status.code),
                    other => other.to_string(),
                };
                return Err(format!("{what} of resourceclaim {key}: {why}"));
            }
        }
    }
}

fn split_key(key: &str) -> (&str, &str) {
    key.split_once('/').unwrap_or(("", key))
}

/// Writes one claim: the finalizer if a fresh allocation needs it, then the status.
async fn write_claim(binder: &Binder, w: &ClaimWrite) -> Result<ResourceClaim, String> {
    let (ns, name) = split_key(&w.key);
    let api = Api::<ResourceClaim>::namespaced(binder.client.clone(), ns);
    let params = PatchParams::default();
    let mut version = w.resource_version.clone();
    if w.allocation.is_some() && !w.finalizers.iter().any(|f| f == DELETE_PROTECTION) {
        let mut finalizers = w.finalizers.clone();
        finalizers.push(DELETE_PROTECTION.to_string());
        let body = json!({"metadata": {"resourceVersion": version, "finalizers": finalizers}});
        let patch = Patch::Merge(&body);
        let answer = send(binder, "finalizer", &w.key, || {
            api.patch(name, &params, &patch)
        })
        .await?;
        version = answer.resource_version();
    }
    let body = status_patch(w, version.as_deref());
    let patch = Patch::Merge(&body);
    let what = if w.allocation.is_some() {
        "allocation"
    } else {
        "reservation"
    };
    send(binder, what, &w.key, || {
        api.patch_status(name, &params, &patch)
    })
    .await
}

/// Takes one write back; the claim as answered, if the API server took it.
async fn roll_back(binder: &Binder, w: &ClaimWrite) -> Option<ResourceClaim> {
    let (ns, name) = split_key(&w.key);
    let api = Api::<ResourceClaim>::namespaced(binder.client.clone(), ns);
    let params = PatchParams::default();
    let body = rollback_patch(w);
    let patch = Patch::Merge(&body);
    match send(binder, "rollback", &w.key, || {
        api.patch_status(name, &params, &patch)
    })
    .await
    {
        Ok(claim) => Some(claim),
        Err(why) => {
            // The pods stay pending: the allocation left behind pins them to its node,
            // where they bind once their back-off ends (read back, not repeated).
            warn_limited("cannot roll back a claim's allocation", &why);
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::framework::Bind;
    use crate::index::dra_commits::{call_off, split, writes_for, DEVICE_ALLOCATION_FAILED};
    use crate::index::dra_watch::tests::{claim, class, ready_node, slice, template, template_pod};
    use crate::index::Index;
    use crate::model::devices::{AllocatedDevice, ClaimAllocation};

    fn alloc(node: &str, devices: &[&str]) -> Arc<ClaimAllocation> {
        Arc::new(ClaimAllocation {
            node: node.into(),
            devices: devices
                .iter()
                .map(|d| AllocatedDevice {
                    request: "gpu".into(),
                    driver: "gpu.example.com".into(),
                    pool: node.into(),
                    device: (*d).into(),
                })
                .collect(),
        })
    }

    fn bind_of(ix: &Index, uid: &str, a: &Arc<ClaimAllocation>) -> Bind {
        let p = ix.cache.pod(uid).unwrap();
        let claims: Vec<_> = p
            .task
            .claims
            .iter()
            .map(|c| {
                let mut c = c.clone();
                c.allocation = Some(a.clone());
                c
            })
            .collect();
        Bind {
            job: "ns/g".into(),
            task: uid.into(),
            namespace: "ns".into(),
            name: p.task.name.clone(),
            node: a.node.clone(),
            claims: claims.into(),
        }
    }

    /// Two pods of gang ns/g, each with its claim from the template, on a node with 8
    /// GPUs.
    fn cluster() -> Index {
        let mut ix = Index::new(vec!["rust-batch".into()]);
        ix.apply_node(&ready_node("n0", json!({})));
        ix.apply_device_class(&class());
        ix.apply_resource_slice(&slice("n0", 8));
        ix.apply_claim_template(&template());
        for p in ["a", "b"] {
            ix.apply_resource_claim(&claim(&format!("{p}-gpus"), Some(p), 2));
            ix.apply_pod(&template_pod(p, Some(&format!("{p}-gpus"))));
        }
        ix
    }

    /// PodGroup ns/g of two, admitted.
    fn inqueue_group() -> crate::dialects::volcano::PodGroup {
        serde_json::from_value(json!({
            "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
            "metadata": {"name": "g", "namespace": "ns", "resourceVersion": "1"},
            "spec": {"minMember": 2, "queue": "default"},
            "status": {"phase": "Inqueue"}
        }))
        .unwrap()
    }

    fn holds(ix: &Index) -> Vec<u16> {
        let s = ix.cache.state();
        s.node(s.node_by_name("n0").unwrap()).device_holds.clone()
    }

    #[test]
    fn a_gang_with_claims_to_write_waits_and_its_devices_are_held_meanwhile() {
        let mut ix = cluster();
        let binds = vec![
            bind_of(&ix, "a", &alloc("n0", &["gpu-0", "gpu-1"])),
            bind_of(&ix, "b", &alloc("n0", &["gpu-2", "gpu-3"])),
        ];
        for b in &binds {
            ix.cache
                .assume(&b.task, crate::cache::Assumption::Bind(b.node.clone()));
        }
        let (plain, commits) = split(&mut ix, binds);
        assert!(
            plain.is_empty(),
            "no pod binds before its claims are written"
        );
        assert_eq!(commits.len(), 1);
        let writes = &commits[0].writes;
        assert_eq!(writes.len(), 2);
        assert_eq!(writes[0].key, "ns/a-gpus");
        assert_eq!(writes[0].pods, vec![("a".to_string(), "a".to_string())]);
        assert_eq!(writes[0].resource_version.as_deref(), Some("5"));
        assert_eq!(
            holds(&ix)[..5],
            [1, 1, 1, 1, 0],
            "the allocations being written hold their devices"
        );
        // The write failed: everything is given back, the pods back off, told why.
        call_off(
            &mut ix,
            &commits[0],
            "resourceclaim ns/b-gpus: conflict",
            10_000,
        );
        assert_eq!(holds(&ix)[..5], [0, 0, 0, 0, 0]);
        assert!(ix.dra.committing.is_empty());
        for uid in ["a", "b"] {
            let p = ix.cache.pod(uid).unwrap();
            assert!(ix.cache.assumption(uid).is_none(), "no bind assumed");
            let why = p.task.claims[0].blocked.clone().unwrap();
            assert!(
                why.starts_with(
                    "devices could not be allocated: resourceclaim ns/b-gpus: conflict; \
                     the gang backs off for"
                ),
                "{why}"
            );
            assert_eq!(
                ix.events.last(uid, DEVICE_ALLOCATION_FAILED),
                Some(why.as_str())
            );
        }
        ix.end_device_backoffs(10_000 + 60_000);
        assert!(ix.cache.pod("a").unwrap().task.claims[0].blocked.is_none());
    }

    #[test]
    fn the_engine_places_a_gang_with_the_index_claims_and_its_writes_follow() {
        let mut ix = cluster();
        for q in ["root", "default"] {
            let queue: crate::dialects::volcano::Queue = serde_json::from_value(json!({
                "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
                "metadata": {"name": q, "resourceVersion": "1"},
                "spec": {"weight": 1},
                "status": {"state": "Open"}
            }))
            .unwrap();
            ix.apply_queue(&queue);
        }
        let group = inqueue_group();
        ix.apply_group(&group);
        let scheduler = crate::framework::Scheduler::new(
            crate::conf::SchedulerConf::default_conf(),
            &crate::REGISTRY,
        )
        .unwrap();
        let result = scheduler.run_cycle(ix.cache.snapshot(), 1_000);
        assert_eq!(result.binds.len(), 2, "the gang of two binds whole");
        let mut seen = std::collections::BTreeSet::new();
        for b in &result.binds {
            let a = b.claims[0].allocation.clone().expect("allocated");
            assert_eq!(&*a.node, "n0");
            assert_eq!(a.devices.len(), 2);
            let cliques: std::collections::BTreeSet<u32> = a
                .devices
                .iter()
                .map(|d| d.device.trim_start_matches("gpu-").parse::<u32>().unwrap() / 4)
                .collect();
            assert_eq!(cliques.len(), 1, "one clique (matchAttribute)");
            for d in &a.devices {
                assert!(seen.insert(d.device.clone()), "{} twice", d.device);
            }
        }
        for b in &result.binds {
            ix.cache
                .assume(&b.task, crate::cache::Assumption::Bind(b.node.clone()));
        }
        let (plain, commits) = split(&mut ix, result.binds);
        assert!(plain.is_empty());
        assert_eq!(commits.len(), 1);
        assert_eq!(commits[0].writes.len(), 2);
        assert_eq!(holds(&ix).iter().filter(|h| **h > 0).count(), 4);
        // Another gang's pod claiming five GPUs: while the writes are in flight only four
        // are free, so a cycle meanwhile does not hand the gang's devices out again.
        let mut five = claim("five", None, 5);
        five.spec
            .as_mut()
            .unwrap()
            .devices
            .as_mut()
            .unwrap()
            .constraints = None;
        ix.apply_resource_claim(&five);
        let mut other = group.clone();
        other.metadata.name = Some("h".into());
        other.spec.min_member = Some(1);
        ix.apply_group(&other);
        let mut c = template_pod("c", None);
        c.metadata.annotations =
            Some([("scheduling.k8s.io/group-name".to_string(), "h".to_string())].into());
        c.spec.as_mut().unwrap().resource_claims = Some(vec![serde_json::from_value(
            json!({"name": "s", "resourceClaimName": "five"}),
        )
        .unwrap()]);
        ix.apply_pod(&c);
        let meanwhile = scheduler.run_cycle(ix.cache.snapshot(), 2_000);
        assert!(meanwhile.binds.is_empty(), "{:?}", meanwhile.binds);
        // The writes failed: the devices are free again, and the other gang fits.
        call_off(&mut ix, &commits[0], "conflict", 2_000);
        let after = scheduler.run_cycle(ix.cache.snapshot(), 3_000);
        assert_eq!(after.binds.len(), 1);
        assert_eq!(&*after.binds[0].task, "c");
    }

    #[test]
    fn claims_already_allocated_and_reserved_are_read_back_not_written_again() {
        let mut ix = cluster();
        let a = alloc("n0", &["gpu-0", "gpu-1"]);
        // Written before a restart: allocated, reserved for pod a.
        let mut written = claim("a-gpus", Some("a"), 2);
        written.metadata.resource_version = Some("9".into());
        let w = ClaimWrite {
            key: "ns/a-gpus".into(),
            allocation: Some(a.clone()),
            resource_version: None,
            finalizers: Vec::new(),
            reserved_before: Vec::new(),
            pods: vec![("a".into(), "a".into())],
        };
        written.status =
            Some(serde_json::from_value(status_patch(&w, None)["status"].clone()).unwrap());
        ix.apply_resource_claim(&written);
        let claims = ix.cache.pod("a").unwrap().task.claims.clone();
        assert_eq!(
            claims[0].allocation.as_deref(),
            Some(&*a),
            "read back from the claim's status"
        );
        assert_eq!(holds(&ix)[..3], [1, 1, 0], "held by the inventory");
        let bind = bind_of(&ix, "a", &a);
        let (plain, commits) = split(&mut ix, vec![bind]);
        assert_eq!(plain.len(), 1, "nothing to write: bound at once");
        assert!(commits.is_empty());
    }

    #[test]
    fn a_shared_claim_is_written_once_with_every_pod_of_the_gang() {
        let mut ix = cluster();
        let shared = claim("shared", None, 1);
        ix.apply_resource_claim(&shared);
        for p in ["a", "b"] {
            let mut pod = template_pod(p, None);
            pod.spec.as_mut().unwrap().resource_claims = Some(vec![serde_json::from_value(
                json!({"name": "s", "resourceClaimName": "shared"}),
            )
            .unwrap()]);
            ix.apply_pod(&pod);
        }
        let a = alloc("n0", &["gpu-0"]);
        let binds = vec![bind_of(&ix, "a", &a), bind_of(&ix, "b", &a)];
        let writes = writes_for(&ix.dra, &binds).unwrap();
        assert_eq!(writes.len(), 1);
        assert_eq!(writes[0].pods.len(), 2);
        let patch = status_patch(&writes[0], Some("5"));
        assert_eq!(patch["status"]["reservedFor"].as_array().unwrap().len(), 2);
        assert_eq!(patch["metadata"]["resourceVersion"], "5");
        assert_eq!(
            patch["status"]["allocation"]["devices"]["results"][0]["device"],
            "gpu-0"
        );
        // Rolled back, the allocation and consumers are cleared.
        assert_eq!(
            rollback_patch(&writes[0]),
            json!({"status": {"allocation": null, "reservedFor": null}})
        );
    }

    #[test]
    fn a_gang_deleted_after_a_failed_commit_forgets_its_failures() {
        let mut ix = cluster();
        ix.apply_group(&inqueue_group());
        let binds = vec![
            bind_of(&ix, "a", &alloc("n0", &["gpu-0", "gpu-1"])),
            bind_of(&ix, "b", &alloc("n0", &["gpu-2", "gpu-3"])),
        ];
        let (_, commits) = split(&mut ix, binds);
        call_off(&mut ix, &commits[0], "conflict", 1_000);
        call_off(&mut ix, &commits[0], "conflict", 2_000);
        assert_eq!(ix.dra.attempts.get("ns/g"), Some(&2));
        ix.delete_group(crate::dialects::kind::Dialect::VOLCANO, "ns/g");
        assert!(ix.dra.attempts.is_empty(), "{:?}", ix.dra.attempts);
    }
}
