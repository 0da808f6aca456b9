//! Every gang-dialect adapter fed random labels, annotations and PodGroup fields: it never
//! panics, an accepted gang is well-formed, and a rejection names the object and the field.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::Pod;
use proptest::prelude::*;
use rust_batch::kube::convert::pod_to_update;
use rust_batch::kube::dialects::coscheduling::{cosched_to_job, SigsPodGroup, XK8sPodGroup};
use rust_batch::kube::dialects::pod_gang;
use rust_batch::kube::dialects::volcano::pod_group_to_job;
use rust_batch::kube::dialects::volcano::PodGroup;
use serde_json::{json, Value};

/// Every key a pod may declare its gang with, in any dialect.
const KEYS: &[&str] = &[
    "scheduling.k8s.io/group-name",
    "scheduling.k8s.io/group-min-member",
    "scheduling.volcano.sh/group-name",
    "scheduling.volcano.sh/queue-name",
    "volcano.sh/task-spec",
    "scheduling.x-k8s.io/pod-group",
    "pod-group.scheduling.sigs.k8s.io/name",
    "pod-group.scheduling.sigs.k8s.io",
    "pod-group.scheduling.sigs.k8s.io/min-available",
    "gang.scheduling.koordinator.sh/name",
    "gang.scheduling.koordinator.sh/min-available",
    "gang.scheduling.koordinator.sh/total-number",
    "gang.scheduling.koordinator.sh/mode",
    "gang.scheduling.koordinator.sh/groups",
    "gang.scheduling.koordinator.sh/waiting-time",
    "gang.scheduling.koordinator.sh/match-policy",
    "rust-batch.io/runtime",
];

/// Plausible and hostile values: names, numbers, durations, JSON, junk.
fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z][a-z0-9-]{0,12}",
        "-?[0-9]{1,12}",
        "[0-9]{1,3}(ms|s|m|h)",
        "[0-9]\\.[0-9](s|h)",
        Just("Strict".to_string()),
        Just("NonStrict".to_string()),
        Just("once-satisfied".to_string()),
        Just("only-waiting".to_string()),
        Just(r#"["default/a","default/b"]"#.to_string()),
        "\\[\"[a-z/]{0,10}\"(,\"[A-Za-z/_]{0,10}\")?\\]?",
        "\\PC{0,20}",
        Just(String::new()),
        Just("99999999999999999999".to_string()),
    ]
}

fn meta_map() -> impl Strategy<Value = BTreeMap<String, String>> {
    proptest::collection::btree_map(
        proptest::sample::select(KEYS).prop_map(String::from),
        value(),
        0..8,
    )
}

fn quantity() -> impl Strategy<Value = String> {
    prop_oneof![
        "[0-9]{1,6}(m|Mi|Gi|k)?",
        "-[0-9]{1,3}",
        "\\PC{0,8}",
        Just("1e400".to_string())
    ]
}

fn well_formed_gang(pod: &Pod) {
    match pod_gang(pod) {
        Ok(Some(decl)) => {
            assert!(!decl.name.is_empty());
            assert!(decl.name.len() <= 253);
            let group = &decl.policy.group;
            if !group.is_empty() {
                assert!(group.contains(&format!("ns/{}", decl.name)), "{group:?}");
                assert!(
                    group.windows(2).all(|w| w[0] < w[1]),
                    "sorted, unique: {group:?}"
                );
            }
            if let (Some(min), Some(total)) = (decl.implicit_min, decl.policy.total_number) {
                assert!(min <= total, "min {min} > total {total} accepted");
            }
        }
        Ok(None) => {}
        Err(e) => {
            let text = e.to_string();
            assert!(text.starts_with("pod ns/p: "), "{text}");
            assert!(!e.field.is_empty() && !e.message.is_empty(), "{text}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn pod_adapters_never_panic(labels in meta_map(), annotations in meta_map(), cpu in quantity()) {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u", "labels": labels, "annotations": annotations},
            "spec": {"schedulerName": "rust-batch", "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}
        })).unwrap();
        well_formed_gang(&pod);
        let _ = pod_to_update(&pod, Some("ns/g".into()));
    }

    #[test]
    fn pod_group_adapters_never_panic(
        annotations in meta_map(),
        min in proptest::option::of(any::<i32>()),
        timeout in proptest::option::of(any::<i32>()),
        role_min in any::<i32>(),
        cpu in quantity(),
        phase in "[A-Za-z]{0,12}",
    ) {
        let meta = json!({"name": "g", "namespace": "ns", "annotations": annotations});
        let volcano: PodGroup = serde_json::from_value(json!({
            "metadata": meta,
            "spec": {"minMember": min, "minTaskMember": {"worker": role_min}, "minResources": {"cpu": cpu}},
            "status": {"phase": phase}
        })).unwrap();
        match pod_group_to_job(&volcano, &HashMap::new()) {
            Ok(spec) => prop_assert!(min.unwrap_or(1) >= 0 && role_min >= 0 && spec.uid == "ns/g"),
            Err(e) => prop_assert!(e.to_string().starts_with("podgroup ns/g: spec."), "{}", e),
        }
        let cosched = json!({
            "metadata": meta,
            "spec": {"minMember": min, "scheduleTimeoutSeconds": timeout, "minResources": {"cpu": cpu}},
            "status": {"phase": phase}
        });
        let x: XK8sPodGroup = serde_json::from_value(cosched.clone()).unwrap();
        let sigs: SigsPodGroup = serde_json::from_value(cosched).unwrap();
        for (result, object) in [
            (cosched_to_job(&x), "scheduling.x-k8s.io podgroup ns/g: "),
            (cosched_to_job(&sigs), "scheduling.sigs.k8s.io podgroup ns/g: "),
        ] {
            match result {
                Ok(spec) => {
                    prop_assert!(spec.policy.wait_timeout.unwrap_or(0) >= 0);
                    if let Some(total) = spec.policy.total_number {
                        prop_assert!(spec.min_member <= total);
                    }
                }
                Err(e) => prop_assert!(e.to_string().starts_with(object), "{}", e),
            }
        }
    }
}

#[test]
fn values_from_the_wild_are_read_or_rejected_cleanly() {
    // A few inputs that broke other parsers: overflowing numbers, unicode, nested JSON.
    for v in [
        "18446744073709551616",
        "٣",
        "[[\"a/b\"]]",
        "{\"a\":1}",
        "1h1h",
        "0s",
    ] {
        let annotations: Value = KEYS.iter().map(|k| (k.to_string(), json!(v))).collect();
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "annotations": annotations},
            "spec": {"containers": []}
        }))
        .unwrap();
        well_formed_gang(&pod);
    }
}
