//! Finding devices for a pod's claims on one node: every request of every claim gets its
//! devices (`exactly` with a count or `allocationMode: All`, or the first `firstAvailable`
//! alternative that can be satisfied), from devices no claim holds, that the request's
//! class and selectors select, keeping each claim's `matchAttribute` constraints. A
//! backtracking search like kube-scheduler's allocator, bounded in steps so that a hopeless
//! claim on a large node costs a known amount; deterministic (devices in inventory order).

use super::selectors::DeviceCatalog;
use super::{AllocationMode, AttrValue, Device, DeviceMismatch, NodeDevices, TaskClaim};

/// Steps (devices tried) one claim's search may take on one node before the node is
/// counted as unable to hold it.
const STEPS_PER_CLAIM: u32 = 20_000;

/// The devices chosen for one claim: the request each satisfies (`request` or
/// `request/subrequest`) and its index in the node's inventory.
pub type ClaimDevices = Vec<(String, u32)>;

/// Devices for each of `claims` on the node whose inventory is `inv`, where `held[i]` is
/// how many claims already hold device `i`. Claims are allocated one after another, so two
/// claims of one pod never share a device. The answer is in the order of `claims`.
pub fn allocate_claims(
    catalog: &DeviceCatalog,
    inv: &NodeDevices,
    held: &[u16],
    claims: &[&TaskClaim],
) -> Result<Vec<ClaimDevices>, DeviceMismatch> {
    if let Some(why) = &inv.problem {
        return Err(DeviceMismatch::Inventory(why.clone()));
    }
    let mut free: Vec<bool> = held.iter().map(|&h| h == 0).collect();
    free.resize(inv.devices.len(), true);
    let mut out = Vec::with_capacity(claims.len());
    for claim in claims {
        let chosen = ClaimSearch::new(catalog, inv, claim, &mut free)?.run()?;
        for (_, i) in &chosen {
            free[*i as usize] = false;
        }
        out.push(chosen);
    }
    Ok(out)
}

/// One request's candidate devices, resolved before the search: for each choice in order,
/// the devices its class and selectors select.
struct Choices {
    request: String,
    options: Vec<(String, AllocationMode, std::sync::Arc<[u32]>)>,
}

struct Constraint {
    /// Which requests (by index) it binds.
    applies: Vec<bool>,
    attribute: String,
    value: Option<AttrValue>,
}

struct ClaimSearch<'a> {
    inv: &'a NodeDevices,
    free: &'a mut Vec<bool>,
    requests: Vec<Choices>,
    constraints: Vec<Constraint>,
    steps: u32,
}

impl<'a> ClaimSearch<'a> {
    fn new(
        catalog: &DeviceCatalog,
        inv: &'a NodeDevices,
        claim: &TaskClaim,
        free: &'a mut Vec<bool>,
    ) -> Result<Self, DeviceMismatch> {
        if let Some(why) = &claim.blocked {
            return Err(DeviceMismatch::Blocked(why.clone()));
        }
        let mut requests = Vec::with_capacity(claim.spec.requests.len());
        for r in &claim.spec.requests {
            let mut options = Vec::with_capacity(r.choices.len());
            for c in &r.choices {
                let label = if c.name.is_empty() {
                    r.name.clone()
                } else {
                    format!("{}/{}", r.name, c.name)
                };
                let found = catalog.matching(c, inv).map_err(|e| {
                    let why = e.describe(&claim.name, &label);
                    if e.is_static() {
                        DeviceMismatch::Blocked(why)
                    } else {
                        DeviceMismatch::Runtime(why)
                    }
                })?;
                options.push((label, c.mode, found));
            }
            requests.push(Choices {
                request: r.name.clone(),
                options,
            });
        }
        let constraints = claim
            .spec
            .constraints
            .iter()
            .map(|c| Constraint {
                applies: requests
                    .iter()
                    .map(|r| {
                        c.requests.is_empty()
                            || c.requests.iter().any(|n| {
                                *n == r.request || r.options.iter().any(|(label, _, _)| label == n)
                            })
                    })
                    .collect(),
                attribute: c.attribute.clone(),
                value: None,
            })
            .collect();
        Ok(ClaimSearch {
            inv,
            free,
            requests,
            constraints,
            steps: 0,
        })
    }

    fn run(mut self) -> Result<super::allocate::ClaimDevices, DeviceMismatch> {
        let mut out = Vec::new();
        if self.request(0, &mut out) {
            Ok(out)
        } else {
            Err(DeviceMismatch::Unavailable)
        }
    }

    fn request(&mut self, r: usize, out: &mut ClaimDevices) -> bool {
        if r == self.requests.len() {
            return true;
        }
        for o in 0..self.requests[r].options.len() {
            let (label, mode, cands) = self.requests[r].options[o].clone();
            let placed = match mode {
                AllocationMode::ExactCount(n) => self.pick(r, &label, &cands, 0, n, out),
                AllocationMode::All => self.take_all(r, &label, &cands, out),
            };
            if placed {
                return true;
            }
        }
        false
    }

    /// `left` more devices for request `r` from `cands[from..]`, then the later requests.
    fn pick(
        &mut self,
        r: usize,
        label: &str,
        cands: &[u32],
        from: usize,
        left: u32,
        out: &mut ClaimDevices,
    ) -> bool {
        if left == 0 {
            return self.request(r + 1, out);
        }
        for k in from..cands.len() {
            if cands.len() - k < left as usize || self.steps >= STEPS_PER_CLAIM {
                return false;
            }
            self.steps += 1;
            let dev = cands[k];
            if !self.free[dev as usize] {
                continue;
            }
            let Some(fixed) = self.accept(r, dev) else {
                continue;
            };
            self.free[dev as usize] = false;
            out.push((label.to_string(), dev));
            if self.pick(r, label, cands, k + 1, left - 1, out) {
                return true;
            }
            out.pop();
            self.free[dev as usize] = true;
            self.unfix(&fixed);
        }
        false
    }

    /// Every device the choice selects, all free, at least one (`allocationMode: All`).
    fn take_all(&mut self, r: usize, label: &str, cands: &[u32], out: &mut ClaimDevices) -> bool {
        if cands.is_empty() || cands.iter().any(|&d| !self.free[d as usize]) {
            return false;
        }
        let start = out.len();
        let mut fixed = Vec::new();
        for &dev in cands {
            self.steps += 1;
            match self.accept(r, dev) {
                Some(f) => fixed.extend(f),
                None => {
                    self.unfix(&fixed);
                    return false;
                }
            }
            self.free[dev as usize] = false;
            out.push((label.to_string(), dev));
        }
        if self.request(r + 1, out) {
            return true;
        }
        for (_, dev) in out.drain(start..) {
            self.free[dev as usize] = true;
        }
        self.unfix(&fixed);
        false
    }

    /// Whether device `dev` keeps every constraint on request `r`; the constraints it
    /// fixed a value for (to undo), if it does.
    fn accept(&mut self, r: usize, dev: u32) -> Option<Vec<usize>> {
        let device = &self.inv.devices[dev as usize];
        let mut fixed = Vec::new();
        for (i, c) in self.constraints.iter_mut().enumerate() {
            if !c.applies[r] {
                continue;
            }
            let value = attribute(device, &c.attribute);
            match (value, &c.value) {
                (None, _) => {}
                (Some(v), Some(want)) if v == want => continue,
                (Some(_), Some(_)) => {}
                (Some(v), None) => {
                    c.value = Some(v.clone());
                    fixed.push(i);
                    continue;
                }
            }
            for &j in &fixed {
                self.constraints[j].value = None;
            }
            return None;
        }
        Some(fixed)
    }

    fn unfix(&mut self, fixed: &[usize]) {
        for &i in fixed {
            self.constraints[i].value = None;
        }
    }
}

/// A device's attribute by its qualified name; an attribute of the device's own driver
/// may be published unqualified.
pub fn attribute<'d>(device: &'d Device, qualified: &str) -> Option<&'d AttrValue> {
    device.attributes.get(qualified).or_else(|| {
        let (domain, id) = qualified.rsplit_once('/')?;
        (domain == &*device.driver)
            .then(|| device.attributes.get(id))
            .flatten()
    })
}
