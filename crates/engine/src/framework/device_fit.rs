//! Whether a pod's ResourceClaims can be allocated on a node, and the allocation placing it
//! there makes. Checked by the framework on every placement, like room for its requests
//! (`fit::resource_fit`): a device handed out twice is never a matter of configuration.
//!
//! A claim already allocated (in the API, or by a pod of this session that shares it) pins
//! the pod to that node; the others get devices from what the node has free, in one search
//! over all of the pod's claims (`model::devices::allocate`).

use std::sync::Arc;

use super::fit::Unfit;
use crate::model::devices::allocate::{
    allocate_claims_from, allocate_claims_in, attribute, ClaimDevices,
};
use crate::model::devices::{
    AllocatedDevice, AttrValue, ClaimAllocation, DeviceMismatch, GangDeviceRule, NodeDevices,
    TaskClaim,
};
use crate::model::{NodeInfo, TaskInfo};
use crate::snapshot::ClusterState;

/// Room for the task's claims on the node, now or once the node's releasing pods are gone
/// and their claims deallocated (as `fit::resource_fit` counts resources being released);
/// the action decides whether to allocate or pipeline (`fits_now`).
/// `rules`: what plugins ask of the devices of the task's whole gang (`Votes::device_rules`).
pub fn device_fit(
    state: &ClusterState,
    t: &TaskInfo,
    node: &NodeInfo,
    rules: &[GangDeviceRule],
) -> Result<(), Unfit> {
    if t.claims.is_empty() {
        return Ok(());
    }
    claims_on(state, &t.claims, node, true, rules)
        .map(|_| ())
        .map_err(Unfit::Devices)
}

/// Whether the task fits the node now: its requests in what is idle and its claims in
/// devices no claim holds (a victim's devices are not free while its pod is being
/// released: its claim stays allocated until the pod is gone). Otherwise a task that fits
/// only once releases are through is pipelined, never bound.
pub fn fits_now(
    state: &ClusterState,
    t: &TaskInfo,
    node: &NodeInfo,
    rules: &[GangDeviceRule],
) -> bool {
    node.fits_idle(&t.resreq)
        && (t.claims.is_empty() || claims_on(state, &t.claims, node, false, rules).is_ok())
}

/// The task's claims as they would be on `node`: each with its allocation there (None:
/// nothing changes, every claim was allocated already). Errs when they cannot all be
/// allocated there. `future`: devices held only by claims of pods being released count
/// as free (for a pod pipelined behind those releases).
pub fn claims_on(
    state: &ClusterState,
    claims: &[TaskClaim],
    node: &NodeInfo,
    future: bool,
    rules: &[GangDeviceRule],
) -> Result<Option<Arc<[TaskClaim]>>, DeviceMismatch> {
    if let Some(why) = claims.iter().find_map(|c| c.blocked.as_ref()) {
        return Err(DeviceMismatch::Blocked(why.clone()));
    }
    let mut known: Vec<Option<Arc<ClaimAllocation>>> = Vec::with_capacity(claims.len());
    let mut to_allocate = Vec::new();
    for c in claims {
        let alloc = c.allocation.clone().or_else(|| {
            c.shared
                .then(|| state.claims_placed().get(&c.name).map(|(a, _)| a.clone()))
                .flatten()
        });
        match alloc {
            Some(a) if a.node != node.name => return Err(DeviceMismatch::ClaimElsewhere),
            Some(a) => known.push(Some(a)),
            None => {
                known.push(None);
                to_allocate.push(c);
            }
        }
    }
    if to_allocate.is_empty() {
        let unchanged = claims
            .iter()
            .zip(&known)
            .all(|(c, k)| c.allocation.as_ref() == k.as_ref());
        if unchanged {
            return Ok(None);
        }
    }
    let mut fresh = Vec::new().into_iter();
    if !to_allocate.is_empty() {
        let Some(inv) = node.devices.as_deref() else {
            return Err(DeviceMismatch::Unavailable);
        };
        let mut free = node.free_devices(future);
        let reaches_shared = inv.shared.iter().any(|s| *s);
        if reaches_shared {
            // A network-attached device another node's pods hold is not free here either.
            let tally = state.tally();
            for (i, f) in free.iter_mut().enumerate() {
                if *f && inv.is_shared(i as u32) && tally.shared_held(&inv.devices[i].key()) > 0 {
                    *f = false;
                }
            }
        }
        let found = if rules.is_empty() {
            allocate_claims_from(state.device_classes(), inv, free, &to_allocate)
        } else {
            allocate_with_rules(state, inv, free, &to_allocate, rules)
        };
        let found = match found {
            Err(DeviceMismatch::Unavailable) if reaches_shared => Err(DeviceMismatch::Contended),
            other => other,
        }?;
        fresh = found
            .into_iter()
            .map(|devices| {
                let devices = devices
                    .into_iter()
                    .map(|(request, i)| {
                        let d = &inv.devices[i as usize];
                        AllocatedDevice {
                            request,
                            driver: d.driver.clone(),
                            pool: d.pool.clone(),
                            device: d.name.clone(),
                        }
                    })
                    .collect();
                Arc::new(ClaimAllocation {
                    node: node.name.clone(),
                    devices,
                })
            })
            .collect::<Vec<_>>()
            .into_iter();
    }
    let placed: Vec<TaskClaim> = claims
        .iter()
        .zip(known)
        .map(|(c, k)| TaskClaim {
            allocation: k.or_else(|| fresh.next()),
            ..c.clone()
        })
        .collect();
    Ok(Some(placed.into()))
}

/// At most this many groups of devices (one value per rule) are tried for a pod whose gang
/// has no device yet: the largest first, which leave the most room for its siblings.
const GROUPS_TRIED: usize = 8;

/// Devices for `claims` that keep the gang's device rules: each device has every rule's
/// attribute with the gang's value (or, before the gang has one, one value for all of the
/// pod's devices, largest group of free devices first). Soft rules are dropped, hard ones
/// kept, when they cannot all be kept.
fn allocate_with_rules(
    state: &ClusterState,
    inv: &NodeDevices,
    free: Vec<bool>,
    claims: &[&TaskClaim],
    rules: &[GangDeviceRule],
) -> Result<Vec<ClaimDevices>, DeviceMismatch> {
    let catalog = state.device_classes();
    let hard: Vec<&GangDeviceRule> = rules.iter().filter(|r| r.hard).collect();
    let stages: Vec<Vec<&GangDeviceRule>> = if hard.len() == rules.len() {
        vec![hard]
    } else {
        vec![rules.iter().collect(), hard]
    };
    let mut failure = DeviceMismatch::Unavailable;
    for stage in stages {
        if stage.is_empty() {
            return allocate_claims_from(catalog, inv, free, claims);
        }
        // Free devices by the values they have for the stage's rules, keeping the values
        // the gang has already.
        let mut groups: Vec<(Vec<&AttrValue>, Vec<u32>)> = Vec::new();
        'devices: for (i, d) in inv.devices.iter().enumerate() {
            if !free.get(i).copied().unwrap_or(true) {
                continue;
            }
            let mut key = Vec::with_capacity(stage.len());
            for r in &stage {
                match (attribute(d, &r.attribute), &r.value) {
                    (Some(v), Some(want)) if v != want => continue 'devices,
                    (Some(v), _) => key.push(v),
                    (None, _) => continue 'devices,
                }
            }
            match groups.iter_mut().find(|(k, _)| *k == key) {
                Some((_, members)) => members.push(i as u32),
                None => groups.push((key, vec![i as u32])),
            }
        }
        groups.sort_by_key(|g| std::cmp::Reverse(g.1.len()));
        for (_, members) in groups.into_iter().take(GROUPS_TRIED) {
            let mut only = vec![false; inv.devices.len()];
            for i in members {
                only[i as usize] = true;
            }
            match allocate_claims_in(catalog, inv, free.clone(), Some(&only), claims) {
                Ok(found) => return Ok(found),
                Err(DeviceMismatch::Unavailable) => {}
                Err(other) => return Err(other),
            }
        }
        if let Some(r) = stage.iter().find(|r| r.hard) {
            failure = DeviceMismatch::GangAttribute {
                attribute: r.attribute.clone(),
                value: r.value.clone(),
            };
        }
    }
    Err(failure)
}
