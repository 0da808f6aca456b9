//! Device rules (`deviceAttribute`, `deviceModelAttribute`): where a gang whose DRA devices
//! must share attribute values may go, and the values its placed devices already fix.

use super::*;

/// Where a gang whose devices must share attribute values (`device_rules`) may go: per
/// combination of values, the nodes with free devices that have it (now or once releases
/// are through), those that hold the gang's pending devices first, the tightest fit first
/// (large groups stay whole for large gangs), then the largest. Only the gang's values once
/// its devices have some.
pub(super) fn device_domains(
    state: &ClusterState,
    id: crate::model::JobId,
    usable: &[crate::framework::StaticNodes],
    rules: &[(String, bool)],
) -> Option<GangDomains> {
    let job = state.job(id);
    let with_claims = || job.tasks().iter().filter(|t| !t.claims.is_empty());
    if job.pending_count() == 0 || with_claims().count() < 2 {
        return None;
    }
    let need: i64 = with_claims()
        .filter(|t| t.status == TaskStatus::Pending)
        .map(|t| {
            t.device_charge
                .scalars
                .iter()
                .map(|(_, v)| v / 1000)
                .sum::<i64>()
        })
        .sum();
    let fixed: Vec<Option<AttrValue>> = match job
        .tasks()
        .iter()
        .find(|t| t.status == TaskStatus::Pending && !t.claims.is_empty())
    {
        Some(t) => gang_device_rules(state, id, &t.uid, rules)
            .into_iter()
            .map(|r| r.value)
            .collect(),
        None => return None,
    };
    // Per combination of values: free devices and the nodes that have some.
    let mut groups: Vec<(Vec<AttrValue>, i64, Vec<NodeId>)> = Vec::new();
    for (nid, node) in state.nodes() {
        let Some(inv) = node.devices.as_deref() else {
            continue;
        };
        if !node.schedulable() || inv.problem.is_some() || !usable.iter().any(|u| u.passes(nid)) {
            continue;
        }
        let free = node.free_devices(true);
        let mut here: Vec<(Vec<AttrValue>, i64)> = Vec::new();
        'devices: for (i, d) in inv.devices.iter().enumerate() {
            if !free[i] {
                continue;
            }
            let mut key = Vec::with_capacity(rules.len());
            for ((attr, _), want) in rules.iter().zip(&fixed) {
                match (attribute_of(d, attr), want) {
                    (Some(v), Some(w)) if v != w => continue 'devices,
                    (Some(v), _) => key.push(v.clone()),
                    (None, _) => continue 'devices,
                }
            }
            match here.iter_mut().find(|(k, _)| *k == key) {
                Some((_, n)) => *n += 1,
                None => here.push((key, 1)),
            }
        }
        for (key, n) in here {
            match groups.iter_mut().find(|(k, _, _)| *k == key) {
                Some((_, total, nodes)) => {
                    *total += n;
                    nodes.push(nid);
                }
                None => groups.push((key, n, vec![nid])),
            }
        }
    }
    let hard = rules.iter().any(|(_, h)| *h);
    let names: Vec<&str> = rules.iter().map(|(a, _)| a.as_str()).collect();
    let rule = format!(
        "gpu-affinity: the gang's devices share one value of {} ({})",
        names.join(" and "),
        if hard { "hard" } else { "soft" }
    );
    let largest = groups.iter().map(|(_, n, _)| *n).max().unwrap_or(0);
    let shortfall = (largest < need)
        .then(|| format!("the gang needs {need} devices, the largest group has {largest} free"));
    // Those that hold the gang, tightest first; then the rest, largest first.
    groups.sort_by(|a, b| {
        let (fa, fb) = (a.1 >= need, b.1 >= need);
        fb.cmp(&fa)
            .then(if fa { a.1.cmp(&b.1) } else { b.1.cmp(&a.1) })
    });
    let slots = state.node_slots();
    let options = groups
        .into_iter()
        .take(DOMAINS_PER_LEVEL)
        .map(|(key, _, nodes)| NodeSet {
            name: names
                .iter()
                .zip(&key)
                .map(|(a, v)| format!("{a}={}", v.describe()))
                .collect::<Vec<_>>()
                .join(","),
            rules: vec![NodeRule::new(None, Arc::new(nodes), slots)],
        })
        .collect();
    Some(GangDomains {
        options,
        hard,
        rule,
        shortfall,
        // A device rule is kept inside the claim search, victims included: preemption
        // is not held to node domains for it.
        allowed: Vec::new(),
    })
}

/// `rules` (attribute, hard) with the values the gang's devices already have: those of the
/// first allocated claim of another pod of the gang that has the attribute.
pub(super) fn gang_device_rules(
    state: &ClusterState,
    id: crate::model::JobId,
    uid: &str,
    rules: &[(String, bool)],
) -> Vec<GangDeviceRule> {
    let job = state.job(id);
    rules
        .iter()
        .map(|(attribute, hard)| {
            let value = job
                .tasks()
                .iter()
                .filter(|t| &*t.uid != uid)
                .flat_map(|t| t.claims.iter())
                .filter_map(|c| c.allocation.as_deref())
                .find_map(|a| {
                    let node = state.node(state.node_by_name(&a.node)?);
                    let inv = node.devices.as_deref()?;
                    a.devices.iter().find_map(|d| {
                        let i = inv.position(&d.key())?;
                        attribute_of(&inv.devices[i as usize], attribute).cloned()
                    })
                });
            GangDeviceRule {
                attribute: attribute.clone(),
                value,
                hard: *hard,
            }
        })
        .collect()
}
