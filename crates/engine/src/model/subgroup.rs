//! Subgroup gangs (Volcano 1.14+ `PodGroup.spec.subGroupPolicy`): a policy selects some of
//! a gang's pods (label selector) and splits them into subgroups by the values of its match
//! labels (pods with equal values form one subgroup, e.g. one LeaderWorkerSet replica or
//! one data-parallel replica kept in one rack). A subgroup binds only whole — `size` of
//! its pods placed together — and the gang is ready only when at least `min_groups`
//! subgroups of each policy are whole, besides its own minMember.
//!
//! Membership follows Volcano's `getOrCreateSubJob` (pkg/scheduler/api/job_info.go,
//! v1.15.1): a pod joins the first policy whose selector matches it and whose every match
//! key it carries with a non-empty value; a pod no policy takes is in no subgroup and only
//! the gang's own rules apply to it.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::pod_rules::{LabelSelector, Labels};
use super::topology::TopologyRequest;
use super::{TaskInfo, TaskStatus};

/// One `subGroupPolicy` entry.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct SubGroupPolicy {
    /// The policy's name (for messages; Volcano keys its subgroups by it).
    pub name: Arc<str>,
    /// `subGroupSize`: pods in each subgroup; a subgroup binds only with this many placed.
    pub size: u32,
    /// `minSubGroups`: whole subgroups of this policy the gang needs to be ready.
    pub min_groups: u32,
    /// `labelSelector`: the pods the policy takes (None: every pod).
    pub selector: Option<LabelSelector>,
    /// `matchLabelKeys`: pods with equal values of these labels form one subgroup.
    pub match_label_keys: Vec<String>,
    /// `networkTopology`: each subgroup of this policy inside one domain of its own (hard:
    /// must, soft: preferably); different subgroups may use different domains.
    pub topology: Option<TopologyRequest>,
}

impl SubGroupPolicy {
    /// The values of the match keys that place a pod with `labels` in a subgroup of this
    /// policy, or None when the policy does not take the pod.
    fn values_of(&self, labels: &Labels) -> Option<Vec<String>> {
        if self.selector.as_ref().is_some_and(|s| !s.matches(labels)) {
            return None;
        }
        self.match_label_keys
            .iter()
            .map(|k| labels.get(k).filter(|v| !v.is_empty()).cloned())
            .collect()
    }
}

/// A subgroup of a gang: its policy's index and its match labels' values.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SubGroupKey {
    pub policy: usize,
    pub values: Vec<String>,
}

impl SubGroupKey {
    /// "policy workers, group (replica=1)" for messages.
    pub fn describe(&self, policies: &[SubGroupPolicy]) -> String {
        let name = policies.get(self.policy).map_or("?", |p| &*p.name);
        if self.values.is_empty() {
            format!("subgroup of policy {name:?}")
        } else {
            format!("subgroup {} of policy {name:?}", self.values.join(","))
        }
    }
}

/// The subgroup a pod with `labels` joins: the first policy that takes it.
pub fn subgroup_of(policies: &[SubGroupPolicy], labels: &Labels) -> Option<SubGroupKey> {
    policies.iter().enumerate().find_map(|(policy, p)| {
        Some(SubGroupKey {
            policy,
            values: p.values_of(labels)?,
        })
    })
}

/// Members of one subgroup by what the question counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SubGroupCount {
    /// Members the question counts as placed.
    pub placed: u32,
    /// Of those, members placed in this session (not bound yet).
    pub new: u32,
    /// Members that exist and can still run (`TaskStatus::is_valid`).
    pub valid: u32,
}

/// Counts every subgroup's members: `placed` by `counted`, `new` by `fresh`.
pub fn count_subgroups(
    policies: &[SubGroupPolicy],
    tasks: &[TaskInfo],
    counted: impl Fn(TaskStatus) -> bool,
    fresh: impl Fn(TaskStatus) -> bool,
) -> BTreeMap<SubGroupKey, SubGroupCount> {
    let mut out: BTreeMap<SubGroupKey, SubGroupCount> = BTreeMap::new();
    for t in tasks {
        let Some(key) = subgroup_of(policies, &t.labels) else {
            continue;
        };
        let c = out.entry(key).or_default();
        c.placed += u32::from(counted(t.status));
        c.new += u32::from(counted(t.status) && fresh(t.status));
        c.valid += u32::from(t.status.is_valid());
    }
    out
}

/// Why the placements counted by `counted` break a subgroup rule, if they do: a subgroup
/// that got members this session (by `fresh`) but is not whole, or a policy with fewer
/// whole subgroups than its minimum.
pub fn subgroups_broken(
    policies: &[SubGroupPolicy],
    tasks: &[TaskInfo],
    counted: impl Fn(TaskStatus) -> bool,
    fresh: impl Fn(TaskStatus) -> bool,
) -> Option<String> {
    if policies.is_empty() {
        return None;
    }
    let counts = count_subgroups(policies, tasks, counted, fresh);
    let mut whole = vec![0u32; policies.len()];
    for (key, c) in &counts {
        let size = policies[key.policy].size;
        if c.placed >= size {
            whole[key.policy] += 1;
        } else if c.new > 0 {
            return Some(format!(
                "{} would have {}/{size} pods placed (only whole subgroups bind)",
                key.describe(policies),
                c.placed
            ));
        }
    }
    policies
        .iter()
        .zip(&whole)
        .find(|(p, n)| **n < p.min_groups)
        .map(|(p, n)| {
            format!(
                "subGroupPolicy {:?}: {n} whole subgroups of {} pods, minSubGroups is {}",
                p.name, p.size, p.min_groups
            )
        })
}

/// Why the gang's pods can never satisfy its subgroup rules as they are: a policy with
/// fewer subgroups of at least `size` live pods than its minimum (its selector matches too
/// few pods, or its size does not divide them).
pub fn subgroups_invalid(policies: &[SubGroupPolicy], tasks: &[TaskInfo]) -> Option<String> {
    if policies.is_empty() {
        return None;
    }
    let counts = count_subgroups(policies, tasks, |_| false, |_| false);
    policies.iter().enumerate().find_map(|(i, p)| {
        let formed = counts
            .iter()
            .filter(|(k, c)| k.policy == i && c.valid >= p.size)
            .count() as u32;
        (formed < p.min_groups).then(|| {
            let selected: u32 = counts
                .iter()
                .filter(|(k, _)| k.policy == i)
                .map(|(_, c)| c.valid)
                .sum();
            format!(
                "subGroupPolicy {:?}: {formed} subgroups of {} pods can form from the {selected} pods it selects, minSubGroups is {}",
                p.name, p.size, p.min_groups
            )
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::pod_rules::LabelSelector;
    use crate::model::{Placement, Resource};

    fn task(i: usize, labels: &[(&str, &str)], status: TaskStatus) -> TaskInfo {
        let mut t = TaskInfo::new(
            format!("t{i}"),
            "ns",
            format!("t{i}"),
            "",
            Resource::new(),
            0,
            Arc::new(Placement::default()),
            0,
        );
        t.labels = Arc::new(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        t.status = status;
        t
    }

    fn policy(size: u32, min_groups: u32) -> SubGroupPolicy {
        SubGroupPolicy {
            name: "workers".into(),
            size,
            min_groups,
            selector: Some(LabelSelector {
                match_labels: [("role".to_string(), "worker".to_string())].into(),
                match_expressions: vec![],
            }),
            match_label_keys: vec!["replica".into()],
            topology: None,
        }
    }

    #[test]
    fn a_pod_joins_the_first_policy_that_selects_it_and_carries_its_keys() {
        let policies = [
            policy(2, 1),
            SubGroupPolicy {
                name: "rest".into(),
                size: 1,
                ..Default::default()
            },
        ];
        let of = |labels: &[(&str, &str)]| {
            let labels: Labels = labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            subgroup_of(&policies, &labels)
        };
        assert_eq!(
            of(&[("role", "worker"), ("replica", "1")]),
            Some(SubGroupKey {
                policy: 0,
                values: vec!["1".into()]
            })
        );
        // Selected but without the match key (or with it empty): not this policy's.
        assert_eq!(of(&[("role", "worker")]).map(|k| k.policy), Some(1));
        assert_eq!(
            of(&[("role", "worker"), ("replica", "")]).map(|k| k.policy),
            Some(1)
        );
        assert_eq!(of(&[("role", "ps")]).map(|k| k.policy), Some(1));
        assert_eq!(subgroup_of(&policies[..1], &Labels::new()), None);
    }

    #[test]
    fn only_whole_subgroups_and_at_least_min_groups_of_them() {
        use TaskStatus::*;
        let w = |i, r, s| task(i, &[("role", "worker"), ("replica", r)], s);
        let policies = [policy(2, 1)];
        let ready = TaskStatus::is_ready;
        let fresh = |s| s == Allocated;
        // Replica 0 whole, replica 1 untouched: fine.
        let tasks = [
            w(0, "0", Allocated),
            w(1, "0", Allocated),
            w(2, "1", Pending),
            w(3, "1", Pending),
        ];
        assert_eq!(subgroups_broken(&policies, &tasks, ready, fresh), None);
        // Replica 1 half placed this session: refused, named.
        let tasks = [
            w(0, "0", Allocated),
            w(1, "0", Allocated),
            w(2, "1", Allocated),
            w(3, "1", Pending),
        ];
        assert_eq!(
            subgroups_broken(&policies, &tasks, ready, fresh).as_deref(),
            Some("subgroup 1 of policy \"workers\" would have 1/2 pods placed (only whole subgroups bind)")
        );
        // A subgroup left half by a failure earlier is not this session's doing.
        let tasks = [
            w(0, "0", Running),
            w(1, "0", Running),
            w(2, "1", Running),
            w(3, "1", Failed),
        ];
        assert_eq!(subgroups_broken(&policies, &tasks, ready, fresh), None);
        // Too few whole subgroups.
        let policies = [policy(2, 2)];
        let tasks = [
            w(0, "0", Allocated),
            w(1, "0", Allocated),
            w(2, "1", Pending),
            w(3, "1", Pending),
        ];
        assert!(subgroups_broken(&policies, &tasks, ready, fresh)
            .is_some_and(|m| m.contains("1 whole subgroups of 2 pods, minSubGroups is 2")));
    }

    #[test]
    fn a_policy_whose_pods_cannot_form_its_minimum_is_named() {
        use TaskStatus::Pending;
        let w = |i, r| task(i, &[("role", "worker"), ("replica", r)], Pending);
        // 3 pods in replica 0, 1 in replica 1: size 2 forms only replica 0.
        let tasks = [w(0, "0"), w(1, "0"), w(2, "0"), w(3, "1")];
        assert_eq!(subgroups_invalid(&[policy(2, 1)], &tasks), None);
        assert_eq!(
            subgroups_invalid(&[policy(2, 2)], &tasks).as_deref(),
            Some("subGroupPolicy \"workers\": 1 subgroups of 2 pods can form from the 4 pods it selects, minSubGroups is 2")
        );
        // A selector that matches no pod.
        let ps = [task(0, &[("role", "ps")], Pending)];
        assert!(subgroups_invalid(&[policy(1, 1)], &ps)
            .is_some_and(|m| m.contains("from the 0 pods it selects")));
    }
}
