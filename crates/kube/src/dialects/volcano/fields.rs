//! How rust-batch treats every field of Volcano's PodGroup and Queue (v1.15.1): modelled,
//! refused with a reason (the object says so, and nothing is placed against it), or
//! irrelevant to placement with why. `tests/offline/crds.rs` reads Volcano's own CRDs and fails on
//! a field this table does not decide, so a field Volcano adds is never ignored silently.
//!
//! A path names a field from the object's root (`spec.minMember`); `[]` steps into the
//! items of a list. A decision on a field covers everything below it.

/// What rust-batch does with a field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldDecision {
    /// Read (or, for status, written) with Volcano's meaning: how.
    Modelled(&'static str),
    /// Not honoured, and not broken either: the object is told, and what it asks is not
    /// placed against it.
    Refused(&'static str),
    /// Has no bearing on where pods go: why.
    Irrelevant(&'static str),
}

use FieldDecision::{Irrelevant, Modelled, Refused};

/// `scheduling.volcano.sh/v1beta1` PodGroup.
pub const POD_GROUP_FIELDS: &[(&str, FieldDecision)] = &[
    ("spec.minMember", Modelled("the gang's minimum: nothing binds below it")),
    ("spec.minTaskMember", Modelled("per-role minimums (pod annotation volcano.sh/task-spec)")),
    ("spec.queue", Modelled("the gang's queue (default: default)")),
    ("spec.priorityClassName", Modelled("the gang's priority, from its PriorityClass")),
    (
        "spec.minResources",
        Modelled("what enqueue admits against; quota-style keys (count/*, requests.*, limits.*) skipped as Volcano's NewResource does"),
    ),
    ("spec.networkTopology.mode", Modelled("hard: the gang waits for one domain; soft: fewest, narrowest domains")),
    ("spec.networkTopology.highestTierAllowed", Modelled("the widest HyperNode tier allowed")),
    ("spec.networkTopology.highestTierName", Modelled("a tier named by its HyperNodes' tierName")),
    ("spec.subGroupPolicy[].name", Modelled("names the policy in messages")),
    ("spec.subGroupPolicy[].subGroupSize", Modelled("a subgroup binds only with this many pods placed")),
    ("spec.subGroupPolicy[].minSubGroups", Modelled("whole subgroups the gang needs to be ready")),
    ("spec.subGroupPolicy[].labelSelector", Modelled("the pods the policy takes")),
    ("spec.subGroupPolicy[].matchLabelKeys", Modelled("pods with equal values form one subgroup")),
    (
        "spec.subGroupPolicy[].networkTopology",
        Modelled("applied to the whole gang when the gang has no networkTopology of its own (stricter than per subgroup: it may wait longer, never break the rule)"),
    ),
    ("status.phase", Modelled("written: Pending, Inqueue, Running, Completed")),
    ("status.conditions", Modelled("written: Scheduled / Unschedulable with the reason")),
    ("status.running", Modelled("written: members bound or running")),
    ("status.succeeded", Modelled("written: members that succeeded")),
    ("status.failed", Modelled("written: members that failed")),
];

/// `scheduling.volcano.sh/v1beta1` Queue.
pub const QUEUE_FIELDS: &[(&str, FieldDecision)] = &[
    ("spec.weight", Modelled("the queue's share (proportion)")),
    ("spec.capability", Modelled("the most the queue may use")),
    ("spec.reclaimable", Modelled("whether other queues may reclaim from it")),
    ("spec.guarantee.resource", Modelled("what the queue is always entitled to")),
    ("spec.deserved", Modelled("an explicit deserved share (capacity)")),
    ("spec.parent", Modelled("the queue hierarchy (root is created as Volcano does)")),
    ("spec.priority", Modelled("queues of higher priority go first")),
    (
        "spec.affinity.nodeGroupAffinity.requiredDuringSchedulingIgnoredDuringExecution",
        Refused("Volcano's nodegroup plugin: the queue takes no new work, and says so, rather than place pods outside their node groups"),
    ),
    (
        "spec.affinity.nodeGroupAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution",
        Refused("Volcano's nodegroup plugin: the queue takes no new work, and says so, rather than place pods inside excluded node groups"),
    ),
    (
        "spec.affinity.nodeGroupAffinity.preferredDuringSchedulingIgnoredDuringExecution",
        Irrelevant("a preference only (scoring in Volcano's nodegroup plugin): the queue is told it is not applied"),
    ),
    (
        "spec.affinity.nodeGroupAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution",
        Irrelevant("a preference only (scoring in Volcano's nodegroup plugin): the queue is told it is not applied"),
    ),
    ("spec.extendClusters", Irrelevant("multi-cluster dispatch (Volcano's global scheduler), not placement inside this cluster")),
    ("spec.type", Irrelevant("informational; Volcano's scheduler does not read it")),
    ("spec.dequeueStrategy", Irrelevant("Volcano 1.15's scheduler does not read it (no action or plugin refers to it)")),
    ("status.state", Modelled("read: Closed and Closing queues take no new work; written Open when unset")),
    ("status.pending", Modelled("written: PodGroups Pending")),
    ("status.inqueue", Modelled("written: PodGroups Inqueue")),
    ("status.running", Modelled("written: PodGroups Running")),
    ("status.unknown", Modelled("written: PodGroups Unknown")),
    ("status.completed", Modelled("written: PodGroups Completed")),
    ("status.allocated", Modelled("written: what the queue's pods hold")),
    ("status.reservation", Irrelevant("written by Volcano's reservation feature, which rust-batch does not have; never read")),
];

/// The decision covering `path` (the field itself or one above it), if any.
pub fn decision<'a>(
    table: &'a [(&'static str, FieldDecision)],
    path: &str,
) -> Option<&'a (&'static str, FieldDecision)> {
    table.iter().find(|(field, _)| {
        path == *field
            || path
                .strip_prefix(field)
                .is_some_and(|rest| rest.starts_with('.') || rest.starts_with("[]"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_decision_covers_the_fields_below_it_and_no_sibling() {
        let table = &[
            ("spec.a", Modelled("x")),
            ("spec.list[].b", Irrelevant("y")),
        ];
        assert!(decision(table, "spec.a").is_some());
        assert!(decision(table, "spec.a.deep").is_some());
        assert!(
            decision(table, "spec.ab").is_none(),
            "a prefix of the name only"
        );
        assert!(decision(table, "spec.list[].b.c").is_some());
        assert!(decision(table, "spec.list[].c").is_none());
    }

    #[test]
    fn every_decision_says_why() {
        for (field, d) in POD_GROUP_FIELDS.iter().chain(QUEUE_FIELDS) {
            let (Modelled(why) | Refused(why) | Irrelevant(why)) = d;
            assert!(!why.is_empty(), "{field}: say why");
        }
    }
}
