//! The Helm chart deploy/helm/rust-batch: `helm lint` passes, deploy/rust-batch.yaml is its
//! render (as crds/ is the CRD types'), and its values do what values.yaml says. helm is
//! built from Go modules by tests/cluster/build-helm.sh (cached by version). No cluster:
//! tests/e2e/helm.rs applies the render to the API server.

use crate::common;

use std::process::Command;

const CHART: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/helm/rust-batch");

fn helm_binary() -> String {
    let out = Command::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/cluster/build-helm.sh"
    ))
    .output()
    .expect("tests/cluster/build-helm.sh runs");
    assert!(
        out.status.success(),
        "building helm failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix("HELM="))
        .next_back()
        .expect("build-helm.sh prints HELM=")
        .to_string()
}

/// helm with `args`: Ok(stdout) or Err(stderr).
fn helm(args: &[&str]) -> Result<String, String> {
    let out = Command::new(helm_binary())
        .args(args)
        .output()
        .expect("helm runs");
    if out.status.success() {
        Ok(String::from_utf8(out.stdout).unwrap())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// The chart rendered (release `rust-batch` in rust-batch-system) with `sets`.
fn render(sets: &[&str]) -> Vec<serde_json::Value> {
    let mut args = vec![
        "template",
        "rust-batch",
        CHART,
        "--namespace",
        "rust-batch-system",
    ];
    for s in sets {
        args.extend(["--set", s]);
    }
    let text = helm(&args).unwrap_or_else(|e| panic!("helm template {sets:?}: {e}"));
    rust_batch::yaml::from_str_multiple::<serde_json::Value>(&text)
        .expect("valid YAML")
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

fn kinds(docs: &[serde_json::Value]) -> Vec<String> {
    docs.iter()
        .map(|d| d["kind"].as_str().unwrap().to_string())
        .collect()
}

fn find<'a>(docs: &'a [serde_json::Value], kind: &str) -> &'a serde_json::Value {
    docs.iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} in {:?}", kinds(docs)))
}

fn args(docs: &[serde_json::Value]) -> Vec<String> {
    serde_json::from_value(
        find(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"].clone(),
    )
    .unwrap()
}

#[test]
fn deploy_rust_batch_yaml_is_the_charts_render() {
    let file = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/rust-batch.yaml"
    ))
    .unwrap();
    assert!(
        file == common::rendered_manifests(),
        "deploy/rust-batch.yaml is stale: regenerate it with `deploy/render.sh > deploy/rust-batch.yaml`"
    );
}

#[test]
fn helm_lint_passes_with_default_and_optional_values() {
    helm(&["lint", "--strict", CHART]).unwrap_or_else(|e| panic!("helm lint: {e}"));
    helm(&[
        "lint",
        "--strict",
        CHART,
        "--set",
        "metrics.serviceMonitor.enabled=true,podDisruptionBudget.enabled=false",
        "--set",
        "replicas=1,leaderElection.enabled=false,logLevel=debug",
    ])
    .unwrap_or_else(|e| panic!("helm lint with options: {e}"));
}

#[test]
fn the_chart_matches_the_crate_version() {
    let chart: serde_json::Value = rust_batch::yaml::from_str(
        &std::fs::read_to_string(format!("{CHART}/Chart.yaml")).unwrap(),
    )
    .unwrap();
    assert_eq!(chart["appVersion"], env!("CARGO_PKG_VERSION"));
    let docs = render(&[]);
    let image = find(&docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["image"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(image, format!("rust-batch:{}", env!("CARGO_PKG_VERSION")));
}

#[test]
fn default_values_render_every_object_of_a_production_install() {
    let docs = render(&[]);
    let mut k = kinds(&docs);
    k.sort();
    assert_eq!(
        k,
        [
            "ClusterRole",
            "ClusterRoleBinding",
            "ConfigMap",
            "Deployment",
            "PodDisruptionBudget",
            "Role",
            "RoleBinding",
            "Service",
            "ServiceAccount",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
        ],
        "no Namespace (helm install --create-namespace), no ServiceMonitor (off by default)"
    );
    let a = args(&docs);
    for flag in [
        "--leader-elect",
        "--leader-elect-lease-name=rust-batch",
        "--leader-elect-lease-duration=15s",
        "--leader-elect-renew-deadline=10s",
        "--scheduler-name=rust-batch",
        "--scheduler-name=volcano",
    ] {
        assert!(a.contains(&flag.to_string()), "{flag} in {a:?}");
    }
    assert_eq!(find(&docs, "Deployment")["spec"]["replicas"], 2);
    let fence = find(&docs, "ValidatingAdmissionPolicyBinding");
    assert_eq!(fence["spec"]["paramRef"]["name"], "rust-batch");
    assert_eq!(fence["spec"]["paramRef"]["namespace"], "rust-batch-system");
    assert_eq!(
        find(&docs, "PodDisruptionBudget")["spec"]["maxUnavailable"],
        1
    );
}

#[test]
fn values_change_the_render() {
    let docs = render(&[
        "image.repository=registry.example/rust-batch,image.tag=v9",
        "schedulerNames={rust-batch}",
        "leaderElection.leaseName=rb,leaderElection.leaseNamespace=leases",
        "leaderElection.leaseDuration=20s,leaderElection.renewDeadline=12s",
        "metrics.serviceMonitor.enabled=true,metrics.port=9090",
        "extraArgs={--schedule-period=2s}",
        "resources.limits.memory=2Gi",
    ]);
    let deployment = find(&docs, "Deployment");
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], "registry.example/rust-batch:v9");
    assert_eq!(container["resources"]["limits"]["memory"], "2Gi");
    let a = args(&docs);
    assert!(!a.iter().any(|x| x == "--scheduler-name=volcano"), "{a:?}");
    for flag in [
        "--leader-elect-lease-name=rb",
        "--leader-elect-namespace=leases",
        "--leader-elect-lease-duration=20s",
        "--leader-elect-renew-deadline=12s",
        "--http-address=0.0.0.0:9090",
        "--schedule-period=2s",
    ] {
        assert!(a.contains(&flag.to_string()), "{flag} in {a:?}");
    }
    // The lease's Role and the fence follow the lease wherever it lives.
    assert_eq!(find(&docs, "Role")["metadata"]["namespace"], "leases");
    let fence = find(&docs, "ValidatingAdmissionPolicyBinding");
    assert_eq!(fence["spec"]["paramRef"]["name"], "rb");
    assert_eq!(fence["spec"]["paramRef"]["namespace"], "leases");
    let monitor = find(&docs, "ServiceMonitor");
    assert_eq!(monitor["spec"]["endpoints"][0]["path"], "/metrics");

    // A user's own configuration reaches the ConfigMap verbatim.
    let conf_docs = render(&["schedulerConf=actions: \"enqueue\\, allocate\""]);
    let conf = find(&conf_docs, "ConfigMap")["data"]["volcano-scheduler.conf"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(conf.trim(), "actions: \"enqueue, allocate\"");
}

#[test]
fn one_replica_may_run_without_leader_election_but_two_may_not() {
    let err = helm(&[
        "template",
        "rust-batch",
        CHART,
        "--set",
        "leaderElection.enabled=false",
    ])
    .expect_err("two replicas without a lease must not render");
    assert!(
        err.contains("replicas > 1 needs leaderElection.enabled"),
        "{err}"
    );

    let docs = render(&["leaderElection.enabled=false,replicas=1"]);
    let k = kinds(&docs);
    for absent in ["Role", "RoleBinding", "ValidatingAdmissionPolicy"] {
        assert!(!k.contains(&absent.to_string()), "{absent} in {k:?}");
    }
    assert!(!args(&docs).iter().any(|a| a.starts_with("--leader-elect")));
}

#[test]
fn a_misspelt_or_mistyped_value_is_refused_by_name() {
    for (set, named) in [
        ("replica=3", "'replica' not allowed"),
        (
            "leaderElection.leaseDuration=fifteen",
            "/leaderElection/leaseDuration",
        ),
        ("replicas=0", "/replicas"),
        ("image.pullPolicy=Sometimes", "/image/pullPolicy"),
        ("metrics.serviceMonitor.enable=true", "'enable' not allowed"),
    ] {
        let err = helm(&["template", "rust-batch", CHART, "--set", set])
            .expect_err(&format!("--set {set} must not render"));
        assert!(err.contains(named), "--set {set}: {err}");
    }
}
