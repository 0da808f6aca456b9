//! Finding devices for a pod's claims on one node: every request of every claim gets its
//! devices (`exactly` with a count or `allocationMode: All`, or the first `firstAvailable`
//! alternative that can be satisfied), from devices no claim holds, that the request's
//! class and selectors select, keeping each claim's `matchAttribute` constraints. A
//! backtracking search like kube-scheduler's allocator, bounded in steps so that a hopeless
//! claim on a large node costs a known amount; deterministic (devices in inventory order).

use std::collections::HashMap;

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
    let free: Vec<bool> = held.iter().map(|&h| h == 0).collect();
    allocate_claims_from(catalog, inv, free, claims)
}

/// `allocate_claims` given which devices are free (`free[i]`; devices past its end are).
pub fn allocate_claims_from(
    catalog: &DeviceCatalog,
    inv: &NodeDevices,
    free: Vec<bool>,
    claims: &[&TaskClaim],
) -> Result<Vec<ClaimDevices>, DeviceMismatch> {
    allocate_claims_in(catalog, inv, free, None, claims)
}

/// `allocate_claims_from`, taking only devices `allowed` marks (all when None). Devices
/// that are not free draw on their pools' counter sets (`NodeDevices::counters`); a device
/// is taken only while every counter it draws on has room, so overlapping partitions of
/// one physical device (MIG slices) are never allocated together.
pub fn allocate_claims_in(
    catalog: &DeviceCatalog,
    inv: &NodeDevices,
    mut free: Vec<bool>,
    allowed: Option<&[bool]>,
    claims: &[&TaskClaim],
) -> Result<Vec<ClaimDevices>, DeviceMismatch> {
    if let Some(why) = &inv.problem {
        return Err(DeviceMismatch::Inventory(why.clone()));
    }
    free.resize(inv.devices.len(), true);
    let mut counters = (!inv.counters.is_empty()).then(|| Counters::held(inv, &free));
    if let Some(allowed) = allowed {
        for (i, f) in free.iter_mut().enumerate() {
            *f = *f && allowed.get(i).copied().unwrap_or(false);
        }
    }
    let mut out = Vec::with_capacity(claims.len());
    for claim in claims {
        let chosen = ClaimSearch::new(catalog, inv, claim, &mut free, counters.as_mut())?.run()?;
        for (_, i) in &chosen {
            free[*i as usize] = false;
        }
        out.push(chosen);
    }
    Ok(out)
}

/// What the counter sets of a node's pools have drawn on them, by set and counter.
pub struct Counters {
    used: HashMap<(usize, String), i64>,
}

impl Counters {
    /// What the devices that are not `free` draw.
    fn held(inv: &NodeDevices, free: &[bool]) -> Self {
        let mut c = Counters {
            used: HashMap::new(),
        };
        for (i, d) in inv.devices.iter().enumerate() {
            if !free.get(i).copied().unwrap_or(true) {
                c.draw(inv, d, 1);
            }
        }
        c
    }

    fn set_of(inv: &NodeDevices, device: &Device, set: &str) -> Option<usize> {
        inv.counters.keys().position(|(driver, pool, name)| {
            *driver == device.driver && *pool == device.pool && name == set
        })
    }

    /// Whether taking `device` keeps every counter it draws on within its set's capacity;
    /// a draw on a set or counter the pool does not publish never fits.
    fn room(&self, inv: &NodeDevices, device: &Device) -> bool {
        device.consumes.iter().all(|draw| {
            let Some(set) = Self::set_of(inv, device, &draw.counter_set) else {
                return false;
            };
            let capacity = inv.counters.values().nth(set).expect("index of a key");
            draw.counters.iter().all(|(name, amount)| {
                let used = self.used.get(&(set, name.clone())).copied().unwrap_or(0);
                capacity.get(name).is_some_and(|cap| used + amount <= *cap)
            })
        })
    }

    fn draw(&mut self, inv: &NodeDevices, device: &Device, sign: i64) {
        for draw in &device.consumes {
            let Some(set) = Self::set_of(inv, device, &draw.counter_set) else {
                continue;
            };
            for (name, amount) in &draw.counters {
                *self.used.entry((set, name.clone())).or_insert(0) += sign * amount;
            }
        }
    }
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
    counters: Option<&'a mut Counters>,
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
        counters: Option<&'a mut Counters>,
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
            counters,
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
            if !self.free[dev as usize] || !self.counters_allow(dev) {
                continue;
            }
            let Some(fixed) = self.accept(r, dev) else {
                continue;
            };
            self.take(dev, true);
            out.push((label.to_string(), dev));
            if self.pick(r, label, cands, k + 1, left - 1, out) {
                return true;
            }
            out.pop();
            self.take(dev, false);
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
        let undo = |s: &mut Self, out: &mut ClaimDevices, fixed: &[usize]| {
            let taken: Vec<u32> = out.drain(start..).map(|(_, d)| d).collect();
            for dev in taken {
                s.take(dev, false);
            }
            s.unfix(fixed);
        };
        for &dev in cands {
            self.steps += 1;
            if !self.counters_allow(dev) {
                undo(self, out, &fixed);
                return false;
            }
            match self.accept(r, dev) {
                Some(f) => fixed.extend(f),
                None => {
                    undo(self, out, &fixed);
                    return false;
                }
            }
            self.take(dev, true);
            out.push((label.to_string(), dev));
        }
        if self.request(r + 1, out) {
            return true;
        }
        undo(self, out, &fixed);
        false
    }

    /// Whether the device's counter draws fit what its pools' counter sets have left.
    fn counters_allow(&self, dev: u32) -> bool {
        match &self.counters {
            Some(c) => c.room(self.inv, &self.inv.devices[dev as usize]),
            None => self.inv.devices[dev as usize].consumes.is_empty(),
        }
    }

    /// Takes the device (or gives it back), with its counter draws.
    fn take(&mut self, dev: u32, taking: bool) {
        self.free[dev as usize] = !taking;
        if let Some(c) = self.counters.as_deref_mut() {
            c.draw(
                self.inv,
                &self.inv.devices[dev as usize],
                if taking { 1 } else { -1 },
            );
        }
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use super::*;
    use crate::model::devices::{ClaimSpec, DeviceChoice, DeviceRequest, MatchAttribute};

    fn device(name: &str, attrs: &[(&str, AttrValue)]) -> Device {
        Device {
            driver: "gpu.example.com".into(),
            pool: "p".into(),
            name: name.into(),
            attributes: attrs
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
            capacity: BTreeMap::from([("gpu.example.com/memory".into(), 80_000)]),
            consumes: Vec::new(),
        }
    }

    fn s(v: &str) -> AttrValue {
        AttrValue::String(v.into())
    }

    fn inventory() -> NodeDevices {
        let d = |n: &str, model: &str, clique: &str| {
            device(
                n,
                &[
                    ("gpu.example.com/model", s(model)),
                    ("clique", s(clique)),
                    (
                        "gpu.example.com/index",
                        AttrValue::Int(n[1..].parse().unwrap()),
                    ),
                ],
            )
        };
        NodeDevices::new(
            vec![
                d("g0", "a100", "x"),
                d("g1", "h100", "x"),
                d("g2", "h100", "y"),
                d("g3", "h100", "y"),
            ],
            &BTreeMap::new(),
        )
    }

    fn catalog() -> DeviceCatalog {
        DeviceCatalog::new(BTreeMap::from([
            (
                "gpu".into(),
                vec!["device.driver == \"gpu.example.com\"".into()],
            ),
            ("any".into(), vec![]),
        ]))
    }

    fn request(name: &str, count: u32, selectors: &[&str]) -> DeviceRequest {
        DeviceRequest {
            name: name.into(),
            choices: vec![DeviceChoice {
                name: String::new(),
                device_class_name: "gpu".into(),
                selectors: selectors.iter().map(|s| s.to_string()).collect(),
                mode: AllocationMode::ExactCount(count),
            }],
        }
    }

    fn claim(requests: Vec<DeviceRequest>, constraints: Vec<MatchAttribute>) -> TaskClaim {
        TaskClaim::new(
            "ns/c",
            ClaimSpec {
                requests,
                constraints,
            },
        )
    }

    fn names(inv: &NodeDevices, got: &ClaimDevices) -> Vec<String> {
        got.iter()
            .map(|(_, i)| inv.devices[*i as usize].name.to_string())
            .collect()
    }

    fn one(c: &TaskClaim, held: &[u16]) -> Result<Vec<String>, DeviceMismatch> {
        let inv = inventory();
        allocate_claims(&catalog(), &inv, held, &[c]).map(|mut v| names(&inv, &v.remove(0)))
    }

    #[test]
    fn selectors_read_attributes_by_domain_capacity_and_driver() {
        let by_model = claim(
            vec![request(
                "g",
                2,
                &[r#"device.attributes["gpu.example.com"].model == "h100""#],
            )],
            vec![],
        );
        assert_eq!(one(&by_model, &[0; 4]).unwrap(), ["g1", "g2"]);
        let by_index = claim(
            vec![request(
                "g",
                1,
                &[r#"device.attributes["gpu.example.com"].index > 2"#],
            )],
            vec![],
        );
        assert_eq!(one(&by_index, &[0; 4]).unwrap(), ["g3"]);
        let by_memory = claim(
            vec![request(
                "g",
                4,
                &[r#"device.capacity["gpu.example.com"].memory.isGreaterThan(quantity("79"))"#],
            )],
            vec![],
        );
        assert_eq!(one(&by_memory, &[0; 4]).unwrap().len(), 4);
        let none = claim(
            vec![request(
                "g",
                1,
                &[r#"device.capacity["gpu.example.com"].memory.compareTo(quantity("81")) >= 0"#],
            )],
            vec![],
        );
        assert_eq!(one(&none, &[0; 4]), Err(DeviceMismatch::Unavailable));
    }

    #[test]
    fn held_devices_are_skipped() {
        let two = claim(vec![request("g", 2, &[])], vec![]);
        assert_eq!(one(&two, &[1, 1, 0, 0]).unwrap(), ["g2", "g3"]);
        assert_eq!(one(&two, &[1, 1, 1, 0]), Err(DeviceMismatch::Unavailable));
    }

    #[test]
    fn match_attribute_backtracks_to_one_value_across_requests() {
        // g0 and g1 share clique x, but the claim wants three h100 in one clique: none.
        let three = claim(
            vec![request("g", 3, &[])],
            vec![MatchAttribute {
                requests: vec![],
                attribute: "gpu.example.com/clique".into(),
            }],
        );
        assert_eq!(one(&three, &[0; 4]), Err(DeviceMismatch::Unavailable));
        // Two requests bound by one constraint: after g0 (x) for "a", "b" must be g1 (x).
        let split = claim(
            vec![request("a", 1, &[]), request("b", 1, &[])],
            vec![MatchAttribute {
                requests: vec!["a".into(), "b".into()],
                attribute: "gpu.example.com/clique".into(),
            }],
        );
        assert_eq!(one(&split, &[0; 4]).unwrap(), ["g0", "g1"]);
        // With g1 held, "a" must move to clique y.
        assert_eq!(one(&split, &[0, 1, 0, 0]).unwrap(), ["g2", "g3"]);
        // A device without the attribute never satisfies the constraint.
        let missing = claim(
            vec![request("a", 1, &[])],
            vec![MatchAttribute {
                requests: vec![],
                attribute: "example.com/none".into(),
            }],
        );
        assert_eq!(one(&missing, &[0; 4]), Err(DeviceMismatch::Unavailable));
        // A constraint on other requests leaves this one free.
        let other = claim(
            vec![request("a", 2, &[])],
            vec![MatchAttribute {
                requests: vec!["b".into()],
                attribute: "example.com/none".into(),
            }],
        );
        assert_eq!(one(&other, &[0; 4]).unwrap(), ["g0", "g1"]);
    }

    #[test]
    fn claims_of_one_pod_never_share_a_device() {
        let inv = inventory();
        let a = claim(vec![request("g", 2, &[])], vec![]);
        let got = allocate_claims(&catalog(), &inv, &[0; 4], &[&a, &a]).unwrap();
        assert_eq!(names(&inv, &got[0]), ["g0", "g1"]);
        assert_eq!(names(&inv, &got[1]), ["g2", "g3"]);
        assert!(allocate_claims(&catalog(), &inv, &[0; 4], &[&a, &a, &a]).is_err());
    }

    #[test]
    fn selector_errors_name_their_origin_as_kube_scheduler_does() {
        let bad = claim(vec![request("g", 1, &["device.driver =="])], vec![]);
        let Err(DeviceMismatch::Blocked(why)) = one(&bad, &[0; 4]) else {
            panic!("a selector that does not compile blocks the claim")
        };
        assert!(
            why.starts_with("claim ns/c: selector #0: CEL compile error: "),
            "{why}"
        );
        let not_bool = claim(vec![request("g", 1, &["device.driver"])], vec![]);
        let Err(DeviceMismatch::Runtime(why)) = one(&not_bool, &[0; 4]) else {
            panic!("a selector that is not a bool fails at runtime")
        };
        assert!(
            why.starts_with("claim ns/c: selector #0: CEL runtime error: "),
            "{why}"
        );
        let mut no_class = request("g", 1, &[]);
        no_class.choices[0].device_class_name = "missing".into();
        let Err(DeviceMismatch::Blocked(why)) = one(&claim(vec![no_class], vec![]), &[0; 4]) else {
            panic!("a missing class blocks the claim")
        };
        assert_eq!(why, "request g: device class missing does not exist");
    }

    #[test]
    fn matching_is_worked_out_once_per_inventory() {
        let cat = catalog();
        let inv = Arc::new(inventory());
        let choice = &request(
            "g",
            1,
            &["device.attributes[\"gpu.example.com\"].model == \"a100\""],
        )
        .choices[0];
        let first = cat.matching(choice, &inv).unwrap();
        let again = cat.matching(choice, &inv).unwrap();
        assert!(
            Arc::ptr_eq(&first, &again),
            "the second answer is the memo's"
        );
        assert_eq!(&*first, &[0]);
    }

    #[test]
    fn partitions_of_one_gpu_never_overdraw_its_counters() {
        use crate::model::devices::{CounterDraw, CounterSet};
        // One GPU of 4 memory slices: two halves and the whole, as MIG publishes them.
        let part = |name: &str, slices: i64| Device {
            consumes: vec![CounterDraw {
                counter_set: "gpu-0".into(),
                counters: BTreeMap::from([("slices".to_string(), slices * 1000)]),
            }],
            ..device(name, &[])
        };
        let inv = NodeDevices::new(
            vec![part("half-0", 2), part("half-1", 2), part("whole", 4)],
            &BTreeMap::new(),
        )
        .with_counters(vec![CounterSet {
            driver: "gpu.example.com".into(),
            pool: "p".into(),
            name: "gpu-0".into(),
            counters: BTreeMap::from([("slices".to_string(), 4000)]),
        }]);
        let one = claim(vec![request("g", 1, &[])], vec![]);
        let two = claim(vec![request("g", 2, &[])], vec![]);
        // Both halves fit together; a half and the whole never do.
        let got = allocate_claims(&catalog(), &inv, &[0, 0, 0], &[&two]).unwrap();
        assert_eq!(names(&inv, &got[0]), ["half-0", "half-1"]);
        assert_eq!(
            allocate_claims(&catalog(), &inv, &[1, 0, 0], &[&one]).map(|g| names(&inv, &g[0])),
            Ok(vec!["half-1".to_string()])
        );
        // With half-0 held, the whole GPU draws 4 of the 2 slices left: unavailable.
        let only_whole = |held: &[u16]| {
            let free: Vec<bool> = held.iter().map(|h| *h == 0).collect();
            allocate_claims_in(&catalog(), &inv, free, Some(&[false, false, true]), &[&one])
        };
        assert_eq!(only_whole(&[1, 0, 0]), Err(DeviceMismatch::Unavailable));
        assert!(only_whole(&[0, 0, 0]).is_ok());
        // A draw on a set the pool does not publish never fits.
        let stray = NodeDevices::new(vec![part("stray", 1)], &BTreeMap::new());
        assert_eq!(
            allocate_claims(&catalog(), &stray, &[0], &[&one]),
            Err(DeviceMismatch::Unavailable)
        );
    }
}
