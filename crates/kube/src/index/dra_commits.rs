//! The gangs whose DRA claims are being written before their binds (see `dra_commit`, the
//! writer): which writes a gang's binds need, the allocations counted as taken while they
//! are written, and a gang called off when a write fails. Index-side bookkeeping: the cycle
//! splits its binds here, and the writer's answers come back here (`view::Answers`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use ::kube::ResourceExt;
use k8s_openapi::api::resource::v1::ResourceClaimConsumerReference;

use super::dra_watch::DraObjects;
use super::Index;
use crate::dra::claim_allocation;
use crate::event_feed::{pod_ref, EventType};
use crate::framework::Bind;
use crate::model::devices::ClaimAllocation;
use crate::retry::{delay, warn_limited};

/// The event reason when a gang's claims could not be written.
pub const DEVICE_ALLOCATION_FAILED: &str = "FailedDeviceAllocation";

/// Back-off of a gang whose commit failed, growing with failures in a row.
const BACKOFF_MIN: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(60);

/// One claim's write for a gang.
#[derive(Clone, Debug, PartialEq)]
pub struct ClaimWrite {
    /// `namespace/name`.
    pub key: String,
    /// The allocation to write; None: the claim is allocated already and only gains
    /// consumers.
    pub allocation: Option<Arc<ClaimAllocation>>,
    /// The claim as last seen: its version and finalizers (None: not seen).
    pub resource_version: Option<String>,
    pub finalizers: Vec<String>,
    /// Its consumers as last seen.
    pub reserved_before: Vec<ResourceClaimConsumerReference>,
    /// The gang's pods to add to its consumers: (name, uid).
    pub pods: Vec<(String, String)>,
}

/// A gang's binds waiting for its claims' writes.
#[derive(Debug)]
pub struct GangCommit {
    pub gang: Arc<str>,
    pub binds: Vec<Bind>,
    pub writes: Vec<ClaimWrite>,
}

/// The writes a gang's binds need: per claim, the allocation the cycle chose if the claim
/// has none yet, and the pods it is not reserved for yet. Errs when a claim was allocated
/// otherwise since the cycle decided (its pods would go where its devices are not).
pub fn writes_for(dra: &DraObjects, binds: &[Bind]) -> Result<Vec<ClaimWrite>, String> {
    let mut writes: Vec<ClaimWrite> = Vec::new();
    let mut at: HashMap<&str, usize> = HashMap::new();
    for b in binds {
        for c in b.claims.iter() {
            let Some(alloc) = &c.allocation else {
                continue;
            };
            let stored = dra.claims.get(&*c.name);
            if let Some(now) =
                stored.filter(|s| s.status.as_ref().is_some_and(|st| st.allocation.is_some()))
            {
                if claim_allocation(now).as_ref() != Some(&**alloc) {
                    return Err(format!(
                        "resourceclaim {} was allocated elsewhere in the meantime",
                        c.name
                    ));
                }
            }
            let status = stored.and_then(|s| s.status.as_ref());
            let reserved = status
                .and_then(|s| s.reserved_for.clone())
                .unwrap_or_default();
            if reserved.iter().any(|r| r.uid == *b.task) {
                continue;
            }
            let i = *at.entry(&*c.name).or_insert_with(|| {
                let allocated = status.is_some_and(|s| s.allocation.is_some());
                writes.push(ClaimWrite {
                    key: c.name.to_string(),
                    allocation: (!allocated).then(|| alloc.clone()),
                    resource_version: stored.and_then(|s| s.metadata.resource_version.clone()),
                    finalizers: stored.map(|s| s.finalizers().to_vec()).unwrap_or_default(),
                    reserved_before: reserved,
                    pods: Vec::new(),
                });
                writes.len() - 1
            });
            writes[i]
                .pods
                .push((b.name.to_string(), b.task.to_string()));
        }
    }
    Ok(writes)
}

/// Counts the allocations a cycle's binds carry (and the API does not record yet) as
/// allocated from the moment the binds are assumed, while their gang waits for anything
/// before its claims are written (its WaitForFirstConsumer volumes): no cycle meanwhile
/// hands the same devices out again.
pub fn reserve_devices(ix: &mut Index, binds: &[Bind]) {
    let mut reserved = Vec::new();
    for b in binds {
        for c in b.claims.iter() {
            let Some(a) = &c.allocation else {
                continue;
            };
            let allocated = ix.dra.claims.get(&*c.name).is_some_and(|claim| {
                claim
                    .status
                    .as_ref()
                    .is_some_and(|s| s.allocation.is_some())
            });
            if !allocated && !ix.dra.committing.contains_key(&*c.name) {
                ix.dra.committing.insert(c.name.to_string(), a.clone());
                reserved.push(c.name.to_string());
            }
        }
    }
    for key in reserved {
        ix.refresh_claim_pods(&key);
    }
}

/// Gives back what `reserve_devices` counted for binds that will not be sent (their gang
/// was called off before its claims were written).
pub fn release_devices(ix: &mut Index, binds: &[Bind]) {
    let keys: std::collections::BTreeSet<String> = binds
        .iter()
        .flat_map(|b| b.claims.iter().map(|c| c.name.to_string()))
        .collect();
    for key in keys {
        if ix.dra.committing.remove(&key).is_some() {
            ix.refresh_claim_pods(&key);
        }
    }
}

/// Splits a cycle's binds (already assumed): gangs none of whose claims need a write bind
/// at once; the others wait for their writes (`commit`), the allocations being written
/// counted as allocated meanwhile, so that no cycle hands the same devices out again. A
/// gang one of whose claims was allocated otherwise meanwhile is called off at once (the
/// caller counts the binds assumed again).
pub fn split(ix: &mut Index, binds: Vec<Bind>) -> (Vec<Bind>, Vec<GangCommit>) {
    if binds.iter().all(|b| b.claims.is_empty()) {
        return (binds, Vec::new());
    }
    let mut order: Vec<Arc<str>> = Vec::new();
    let mut by_gang: HashMap<Arc<str>, Vec<Bind>> = HashMap::new();
    for b in binds {
        let gang = b.job.clone();
        by_gang
            .entry(gang.clone())
            .or_insert_with(|| {
                order.push(gang);
                Vec::new()
            })
            .push(b);
    }
    let mut plain = Vec::new();
    let mut commits = Vec::new();
    for gang in order {
        let binds = by_gang.remove(&gang).unwrap_or_default();
        let writes = match writes_for(&ix.dra, &binds) {
            Ok(writes) => writes,
            Err(why) => {
                let c = GangCommit {
                    gang,
                    binds,
                    writes: Vec::new(),
                };
                call_off(ix, &c, &why, crate::clock::now_ms());
                continue;
            }
        };
        if writes.is_empty() {
            plain.extend(binds);
            continue;
        }
        for w in &writes {
            if let Some(a) = &w.allocation {
                ix.dra.committing.insert(w.key.clone(), a.clone());
            }
        }
        commits.push(GangCommit {
            gang,
            binds,
            writes,
        });
    }
    // The pods using claims being written resolve them again, now allocated: their nodes
    // hold the devices while the writes are in flight.
    for c in &commits {
        for w in &c.writes {
            ix.refresh_claim_pods(&w.key);
        }
    }
    (plain, commits)
}

/// A gang whose claims could not all be written gives everything back: its binds'
/// assumptions, the allocations it was writing; its pods back off, told why.
pub fn call_off(ix: &mut Index, c: &GangCommit, why: &str, now_ms: i64) {
    let failures = ix.dra.attempts.entry(c.gang.to_string()).or_insert(0);
    let wait = delay(*failures, BACKOFF_MIN, BACKOFF_MAX);
    *failures += 1;
    let message = format!(
        "devices could not be allocated: {why}; the gang backs off for {:.1}s",
        wait.as_secs_f64()
    );
    warn_limited("gang called off", &format!("{}: {message}", c.gang));
    for w in &c.writes {
        ix.dra.committing.remove(&w.key);
    }
    let until = now_ms + wait.as_millis() as i64;
    for b in &c.binds {
        ix.cache.drop_assumption(&b.task);
        ix.dra
            .backoffs
            .insert(b.task.to_string(), (until, message.clone()));
        let r = pod_ref(&b.namespace, &b.name, &b.task);
        ix.events.report(
            r,
            EventType::Warning,
            DEVICE_ALLOCATION_FAILED,
            message.clone(),
        );
    }
    if let Some(obj) = ix.group_ref(&c.gang) {
        ix.events
            .report(obj, EventType::Warning, DEVICE_ALLOCATION_FAILED, message);
    }
    for b in &c.binds {
        ix.refresh_claims_pod(&b.task);
    }
    for w in &c.writes {
        ix.refresh_claim_pods(&w.key);
    }
}
