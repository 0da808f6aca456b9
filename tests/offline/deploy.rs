//! deploy/ manifests (the Helm chart's render, deploy/rust-batch.yaml) are valid Kubernetes
//! objects, grant what the driver calls and nothing by wildcard, run under PodSecurity
//! "restricted", and the scheduler configuration they ship loads.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule, Role};
use rust_batch::conf::SchedulerConf;

fn documents() -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/rust-batch.yaml"
    ))
    .unwrap();
    rust_batch::yaml::from_str_multiple::<serde_json::Value>(&text)
        .expect("valid YAML document")
        .into_iter()
        .collect()
}

fn of_kind<T: serde::de::DeserializeOwned>(kind: &str) -> T {
    let doc = documents()
        .into_iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind}"));
    serde_json::from_value(doc).unwrap_or_else(|e| panic!("{kind} does not parse: {e}"))
}

#[test]
fn manifests_parse_and_the_shipped_config_loads() {
    let cm: ConfigMap = of_kind("ConfigMap");
    let conf = cm.data.unwrap()["volcano-scheduler.conf"].clone();
    let loaded = SchedulerConf::parse(&conf, "deploy ConfigMap").unwrap();
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);

    let deployment: Deployment = of_kind("Deployment");
    let spec = deployment.spec;
    assert_eq!(spec.replicas, Some(2), "a leader and a warm standby");
    let container = spec.template.spec.unwrap().containers[0].clone();
    let args = container.args.clone().unwrap();
    assert!(args.contains(&"--scheduler-name=volcano".to_string()));
    assert!(args.contains(&"--leader-elect".to_string()));
    let env = container.env.unwrap_or_default();
    assert!(
        env.iter().any(|e| e.name == "POD_NAMESPACE"
            && e.value_from
                .as_ref()
                .and_then(|v| v.field_ref.as_ref())
                .map(|f| f.field_path.as_str())
                == Some("metadata.namespace")),
        "the lease's namespace comes from the downward API"
    );
    let lease_role: Role = of_kind("Role");
    assert_eq!(
        lease_role.metadata.namespace.as_deref(),
        Some("rust-batch-system")
    );
    // What kube-lease-manager calls (and the holder's read-back of its renewals).
    for verb in ["get", "create", "patch"] {
        assert!(
            lease_role.rules.iter().flatten().any(|r| r
                .resources
                .iter()
                .flatten()
                .any(|x| x == "leases")
                && r.verbs.iter().any(|v| v == verb)),
            "leases {verb}"
        );
    }

    let role: ClusterRole = of_kind("ClusterRole");
    let can = |resource: &str, verb: &str| {
        role.rules.iter().flatten().any(|r| {
            r.resources.iter().flatten().any(|x| x == resource) && r.verbs.iter().any(|v| v == verb)
        })
    };
    assert!(can("pods/binding", "create"), "binder needs pods/binding");
    assert!(
        can("podgroups", "patch"),
        "status writer needs podgroups patch"
    );
    assert!(can("events", "create"), "events need create");
    assert!(can("nodes", "watch") && can("pods", "watch") && can("queues", "watch"));
    assert!(can("pods/eviction", "create"), "preempt and reclaim evict");
    assert!(
        can("pods/status", "patch"),
        "pending pods get PodScheduled=False"
    );
    assert!(
        can("poddisruptionbudgets", "watch"),
        "victims are chosen within disruption budgets"
    );
    assert!(
        can("hypernodes", "list") && can("hypernodes", "watch"),
        "topology-aware placement reads Volcano HyperNodes"
    );
    for (resource, verb) in [
        ("persistentvolumeclaims", "watch"),
        ("persistentvolumeclaims", "patch"),
        ("persistentvolumes", "watch"),
        ("storageclasses", "watch"),
    ] {
        assert!(
            can(resource, verb),
            "pods' volumes: {resource} {verb} (selected-node goes on claims)"
        );
    }
}

fn no_wildcard(kind: &str, rules: &[PolicyRule]) {
    for rule in rules {
        let named = rule
            .api_groups
            .iter()
            .flatten()
            .chain(rule.resources.iter().flatten())
            .chain(rule.verbs.iter())
            .chain(rule.resource_names.iter().flatten());
        for name in named {
            assert!(!name.contains('*'), "{kind} rule {rule:?} has a wildcard");
        }
        assert!(
            rule.non_resource_urls.is_none(),
            "{kind} grants non-resource URLs"
        );
    }
}

#[test]
fn rbac_is_least_privilege_without_wildcards() {
    let role: ClusterRole = of_kind("ClusterRole");
    no_wildcard("ClusterRole", role.rules.as_deref().unwrap_or_default());
    let lease_role: Role = of_kind("Role");
    no_wildcard("Role", lease_role.rules.as_deref().unwrap_or_default());
    let verbs_of = |resource: &str| -> Vec<String> {
        let mut v: Vec<String> = role
            .rules
            .iter()
            .flatten()
            .filter(|r| r.resources.iter().flatten().any(|x| x == resource))
            .flat_map(|r| r.verbs.clone())
            .collect();
        v.sort();
        v
    };
    // Nothing the scheduler never does: no update (every write is a patch or a create), no
    // write to nodes, and no delete but of pods (victims of preempt and reclaim, deleted
    // as kube-scheduler deletes them once a dry-run eviction said yes).
    for rule in role.rules.iter().flatten() {
        let only_pods = rule.resources.iter().flatten().all(|r| r == "pods");
        for verb in &rule.verbs {
            if verb == "delete" && only_pods {
                continue;
            }
            assert!(
                ![
                    "delete",
                    "deletecollection",
                    "update",
                    "escalate",
                    "bind",
                    "impersonate"
                ]
                .contains(&verb.as_str()),
                "ClusterRole grants {verb} on {:?}",
                rule.resources
            );
        }
    }
    // Kubernetes' own PodGroups: read, and only their status written.
    let native = |resource: &str| -> Vec<String> {
        let mut v: Vec<String> = role
            .rules
            .iter()
            .flatten()
            .filter(|r| {
                r.api_groups
                    .iter()
                    .flatten()
                    .any(|g| g == "scheduling.k8s.io")
            })
            .filter(|r| r.resources.iter().flatten().any(|x| x == resource))
            .flat_map(|r| r.verbs.clone())
            .collect();
        v.sort();
        v
    };
    assert_eq!(native("podgroups"), ["get", "list", "watch"]);
    assert_eq!(native("workloads"), ["get", "list", "watch"]);
    assert_eq!(native("podgroups/status"), ["patch"]);
    // DRA: read, and a gang's claims written (finalizer, then status) before its binds.
    for resource in ["deviceclasses", "resourceslices", "resourceclaimtemplates"] {
        assert_eq!(verbs_of(resource), ["get", "list", "watch"], "{resource}");
    }
    assert_eq!(
        verbs_of("resourceclaims"),
        ["get", "list", "patch", "watch"]
    );
    assert_eq!(verbs_of("resourceclaims/status"), ["patch"]);
    assert_eq!(verbs_of("nodes"), ["list", "watch"]);
    assert_eq!(verbs_of("pods"), ["delete", "get", "list", "watch"]);
    // Secrets and ConfigMaps are nobody's business here.
    assert!(verbs_of("secrets").is_empty() && verbs_of("configmaps").is_empty());
}

#[test]
fn the_deployment_meets_pod_security_restricted() {
    let deployment: Deployment = of_kind("Deployment");
    let pod = deployment.spec.template.spec.unwrap();
    let pod_sc = pod.security_context.expect("a pod securityContext");
    assert_eq!(pod_sc.run_as_non_root, Some(true));
    assert_eq!(pod_sc.run_as_user, Some(65532), "the image's non-root UID");
    assert_eq!(
        pod_sc.seccomp_profile.map(|p| p.type_).as_deref(),
        Some("RuntimeDefault")
    );
    let container = &pod.containers[0];
    let sc = container
        .security_context
        .clone()
        .expect("a container securityContext");
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(
        sc.capabilities.and_then(|c| c.drop),
        Some(vec!["ALL".to_string()])
    );
    assert!(
        pod.volumes
            .iter()
            .flatten()
            .all(|v| v.host_path.is_none() && v.empty_dir.is_none()),
        "the scheduler writes no file: no writable volume"
    );
}

/// The metric names the docs' metrics table (docs/src/metrics.md) documents.
fn documented_metrics() -> std::collections::BTreeSet<String> {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/src/metrics.md"))
            .unwrap();
    let start = readme
        .find("<!-- metrics")
        .expect("docs/src/metrics.md's metrics table");
    let end = readme[start..].find("<!-- /metrics -->").unwrap() + start;
    readme[start..end]
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .map(String::from)
        .collect()
}

#[test]
fn the_grafana_dashboard_queries_only_documented_metrics() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/grafana-dashboard.json"
    ))
    .unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    let documented = documented_metrics();
    let metric = regex::Regex::new(r"\b(?:rust_batch|volcano)_[a-z0-9_]+").unwrap();
    let mut used = std::collections::BTreeSet::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            let expr = target["expr"].as_str().expect("a PromQL expression");
            for m in metric.find_iter(expr) {
                let name = m.as_str();
                // Histograms are queried through their series.
                let base = ["_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|s| {
                        name.strip_suffix(s)
                            .filter(|b| documented.contains(*b) && !documented.contains(name))
                    })
                    .unwrap_or(name);
                assert!(
                    documented.contains(base),
                    "panel {:?} queries {name}, which docs/src/metrics.md does not document",
                    panel["title"]
                );
                used.insert(base.to_string());
            }
        }
    }
    for name in [
        "rust_batch_leader",
        "volcano_queue_deserved_milli_cpu",
        "volcano_schedule_attempts_total",
    ] {
        assert!(used.contains(name), "the dashboard shows {name}");
    }
}
