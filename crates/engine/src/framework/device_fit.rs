//! Whether a pod's ResourceClaims can be allocated on a node, and the allocation placing it
//! there makes. Checked by the framework on every placement, like room for its requests
//! (`fit::resource_fit`): a device handed out twice is never a matter of configuration.
//!
//! A claim already allocated (in the API, or by a pod of this session that shares it) pins
//! the pod to that node; the others get devices from what the node has free, in one search
//! over all of the pod's claims (`model::devices::allocate`).

use std::sync::Arc;

use super::fit::Unfit;
use crate::model::devices::allocate::allocate_claims;
use crate::model::devices::{AllocatedDevice, ClaimAllocation, DeviceMismatch, TaskClaim};
use crate::model::{NodeInfo, TaskInfo};
use crate::snapshot::ClusterState;

/// Room for the task's claims on the node.
pub fn device_fit(state: &ClusterState, t: &TaskInfo, node: &NodeInfo) -> Result<(), Unfit> {
    if t.claims.is_empty() {
        return Ok(());
    }
    claims_on(state, &t.claims, node)
        .map(|_| ())
        .map_err(Unfit::Devices)
}

/// The task's claims as they would be on `node`: each with its allocation there (None:
/// nothing changes, every claim was allocated already). Errs when they cannot all be
/// allocated there.
pub fn claims_on(
    state: &ClusterState,
    claims: &[TaskClaim],
    node: &NodeInfo,
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
        let found = allocate_claims(
            state.device_classes(),
            inv,
            &node.device_holds,
            &to_allocate,
        )?;
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
