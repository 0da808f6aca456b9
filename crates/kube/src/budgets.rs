//! PodDisruptionBudgets (policy/v1) as the eviction API reads them: which pods a budget
//! covers and how many more of them it lets go. The engine never picks a victim the API
//! server would refuse to evict, so a victim gang is never left half evicted.

use std::collections::BTreeMap;

use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// How many more pods the budget lets go. Until the disruption controller has looked at
/// the budget's current generation the eviction API refuses every eviction it covers, and
/// so does this.
pub fn disruptions_allowed(pdb: &PodDisruptionBudget) -> u32 {
    let Some(status) = &pdb.status else {
        return 0;
    };
    let generation = pdb.metadata.generation.unwrap_or(0);
    if status.observed_generation.unwrap_or(0) < generation {
        return 0;
    }
    // Optional in the 1.37 schema (a zero is left out), required before: absent is 0.
    u32::try_from(status.disruptions_allowed.unwrap_or(0)).unwrap_or(0)
}

/// Whether the budget covers a pod of its namespace with these labels (policy/v1: a
/// missing selector covers no pod, an empty one every pod).
pub fn covers(pdb: &PodDisruptionBudget, labels: &BTreeMap<String, String>) -> bool {
    pdb.spec
        .as_ref()
        .and_then(|s| s.selector.as_ref())
        .is_some_and(|s| selector_matches(s, labels))
}

/// A label selector as the API server applies it; an operator it does not know matches
/// nothing (the API server would have rejected it).
fn selector_matches(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let by_labels = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    by_labels
        && selector.match_expressions.iter().flatten().all(|e| {
            let value = labels.get(&e.key);
            let listed = |v: &String| e.values.iter().flatten().any(|x| x == v);
            match e.operator.as_str() {
                "In" => value.is_some_and(listed),
                "NotIn" => !value.is_some_and(listed),
                "Exists" => value.is_some(),
                "DoesNotExist" => value.is_none(),
                _ => false,
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::labels;

    fn pdb(value: serde_json::Value) -> PodDisruptionBudget {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn selectors_cover_as_the_api_server_does() {
        let with = |selector: serde_json::Value| {
            pdb(serde_json::json!({"metadata": {"name": "p"}, "spec": {"selector": selector}}))
        };
        let pod = labels(&[("app", "train"), ("role", "worker")]);
        assert!(
            covers(&with(serde_json::json!({})), &pod),
            "empty selects all"
        );
        assert!(!covers(
            &pdb(serde_json::json!({"metadata": {"name": "p"}, "spec": {}})),
            &pod
        ));
        assert!(covers(
            &with(serde_json::json!({"matchLabels": {"app": "train"}})),
            &pod
        ));
        assert!(!covers(
            &with(serde_json::json!({"matchLabels": {"app": "serve"}})),
            &pod
        ));
        let expr = |op: &str, values: &[&str]| {
            with(
                serde_json::json!({"matchExpressions": [{"key": "role", "operator": op, "values": values}]}),
            )
        };
        assert!(covers(&expr("In", &["ps", "worker"]), &pod));
        assert!(!covers(&expr("NotIn", &["worker"]), &pod));
        assert!(covers(
            &expr("NotIn", &["worker"]),
            &labels(&[("app", "x")])
        ));
        assert!(covers(&expr("Exists", &[]), &pod));
        assert!(!covers(&expr("DoesNotExist", &[]), &pod));
        assert!(!covers(&expr("Sometimes", &[]), &pod));
    }

    #[test]
    fn only_an_observed_budget_allows_disruptions() {
        let budget = |generation: i64, status: serde_json::Value| {
            pdb(
                serde_json::json!({"metadata": {"name": "p", "generation": generation}, "spec": {}, "status": status}),
            )
        };
        let status = |observed: i64, allowed: i32| {
            serde_json::json!({"observedGeneration": observed, "disruptionsAllowed": allowed,
                               "currentHealthy": 3, "desiredHealthy": 1, "expectedPods": 3})
        };
        assert_eq!(disruptions_allowed(&budget(2, status(2, 2))), 2);
        assert_eq!(
            disruptions_allowed(&budget(3, status(2, 2))),
            0,
            "not observed yet"
        );
        assert_eq!(disruptions_allowed(&budget(1, status(1, -1))), 0);
        assert_eq!(
            disruptions_allowed(&pdb(serde_json::json!({"metadata": {"name": "p"}}))),
            0
        );
    }
}
