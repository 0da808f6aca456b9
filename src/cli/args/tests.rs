use super::*;
use crate::cli;

fn args(line: &[&str]) -> Vec<OsString> {
    std::iter::once("rust-batch")
        .chain(line.iter().copied())
        .map(OsString::from)
        .collect()
}

/// Parses as `main` does: Go's spellings normalized, `run` implied by flags alone.
fn parse_line(line: &[&str]) -> Result<Cli, clap::Error> {
    let commands = ["simulate", "check-config", "run", "explain", "crds"];
    let (args, _) = cli::imply_run(go_values::normalize_args(args(line)), &commands);
    parse(&args)
}

fn run_args(line: &[&str]) -> RunArgs {
    match parse_line(line)
        .unwrap_or_else(|e| panic!("{line:?}: {e}"))
        .command
    {
        Command::Run(a) => *a,
        _ => panic!("{line:?}: not run"),
    }
}

fn refused(line: &[&str]) -> clap::Error {
    match parse_line(line) {
        Ok(_) => panic!("{line:?} parsed"),
        Err(e) => e,
    }
}

#[test]
fn the_command_is_well_formed() {
    Cli::command().debug_assert();
}

#[test]
fn existing_spellings_keep_their_meaning() {
    let a = run_args(&[
        "run",
        "--scheduler-conf=/etc/rust-batch/volcano-scheduler.conf",
        "--scheduler-name=rust-batch",
        "--scheduler-name",
        "volcano",
        "--http-address=0.0.0.0:8080",
        "--leader-elect",
        "--leader-elect-lease-name=rb",
        "--leader-elect-namespace",
        "leases",
        "--leader-elect-lease-duration=20s",
        "--leader-elect-renew-deadline=12s",
        "--pod-scheduled-events",
        "--schedule-period",
        "500ms",
        "--short-gang-timeout=2s",
        "--volume-binding-timeout=10m",
        "--bind-concurrency=8",
    ]);
    assert_eq!(a.scheduler_names, ["rust-batch", "volcano"]);
    assert_eq!(
        a.scheduler_conf.as_deref(),
        Some(std::path::Path::new(
            "/etc/rust-batch/volcano-scheduler.conf"
        ))
    );
    assert_eq!(
        a.http_address,
        HttpAddress::At("0.0.0.0:8080".parse().unwrap())
    );
    assert!(a.leader.leader_elect);
    assert_eq!(a.leader.leader_elect_lease_name, "rb");
    assert_eq!(a.leader.leader_elect_namespace.as_deref(), Some("leases"));
    assert_eq!(
        a.leader.leader_elect_lease_duration,
        Duration::from_secs(20)
    );
    assert_eq!(
        a.leader.leader_elect_renew_deadline,
        Duration::from_secs(12)
    );
    assert!(a.pod_scheduled_events);
    assert_eq!(a.schedule_period, Duration::from_millis(500));
    assert_eq!(a.short_gang_timeout, Duration::from_secs(2));
    assert_eq!(a.volume_binding_timeout, Duration::from_secs(600));
    assert_eq!(a.bind_concurrency, 8);
    assert!(!a.strict.on);
    assert!(a.peers.given.is_empty());

    let a = run_args(&["run", "--http-address", "off"]);
    assert_eq!(a.http_address, HttpAddress::Off);
    let a = run_args(&["run"]);
    assert_eq!(a.scheduler_names, ["rust-batch"]);
    assert!(!a.leader.leader_elect);
    assert!(!a.pod_scheduled_events);
    assert_eq!(a.schedule_period, Duration::from_secs(1));
}

#[test]
fn go_style_booleans() {
    for (flag, want) in [
        ("--leader-elect", true),
        ("--leader-elect=true", true),
        ("--leader-elect=false", false),
        ("--leader-elect=False", false),
        ("--leader-elect=0", false),
        ("--leader-elect=1", true),
        ("--leader-elect=t", true),
    ] {
        assert_eq!(run_args(&["run", flag]).leader.leader_elect, want, "{flag}");
    }
    assert!(!run_args(&["run", "--pod-scheduled-events=false"]).pod_scheduled_events);
    assert!(run_args(&["run", "--enable-healthz=true"]).enable_healthz);
    // As pflag: a boolean's value needs `=`; a word after it is an argument (refused).
    refused(&["run", "--leader-elect", "false"]);
    refused(&["run", "--leader-elect=maybe"]);
}

#[test]
fn klog_verbosity_spellings() {
    for line in [
        &["-v=3", "run"][..],
        &["-v", "3", "run"],
        &["-v3", "run"],
        &["--v=3", "run"],
        &["--v", "3", "run"],
        &["run", "-v=3"],
        &["run", "--v=3"],
    ] {
        let cli = parse_line(line).unwrap_or_else(|e| panic!("{line:?}: {e}"));
        assert_eq!(cli.log.verbosity, Some(3), "{line:?}");
    }
    refused(&["run", "-v=loud"]);
    refused(&["run", "-v=-1"]);
}

#[test]
fn log_flags() {
    let cli = parse_line(&["--log-level=debug", "run", "--log-format=json"]).unwrap();
    assert_eq!(cli.log.log_level.as_deref(), Some("debug"));
    assert_eq!(cli.log.log_format, LogFormat::Json);
    let cli = parse_line(&["run", "--logging-format=json"]).unwrap();
    assert_eq!(cli.log.log_format, LogFormat::Json);
    let cli = parse_line(&["check-config", "f", "--log-level", "info,kube=debug"]).unwrap();
    assert_eq!(cli.log.log_level.as_deref(), Some("info,kube=debug"));
    assert_eq!(
        parse_line(&["crds"]).unwrap().log.log_format,
        LogFormat::Text
    );
    refused(&["run", "--log-format=xml"]);
}

#[test]
fn volcano_spellings_map_to_rust_batch_flags() {
    let a = run_args(&[
        "run",
        "--listen-address=:8081",
        "--healthz-address=:11251",
        "--enable-healthz=true",
        "--leader-elect=false",
        "--leader-elect-resource-name=vc",
        "--leader-elect-resource-namespace=volcano-system",
        "--leader-elect-resource-lock=leases",
        "--master=https://10.0.0.1:6443",
        "--kubeconfig=/kc",
    ]);
    assert_eq!(
        a.http_address,
        HttpAddress::At("0.0.0.0:8081".parse().unwrap())
    );
    assert_eq!(a.healthz_address, Some("0.0.0.0:11251".parse().unwrap()));
    assert!(a.enable_healthz);
    assert!(!a.leader.leader_elect);
    assert_eq!(a.leader.leader_elect_lease_name, "vc");
    assert_eq!(
        a.leader.leader_elect_namespace.as_deref(),
        Some("volcano-system")
    );
    assert_eq!(a.master.as_deref(), Some("https://10.0.0.1:6443"));
    assert_eq!(a.kubeconfig.as_deref(), Some(std::path::Path::new("/kc")));
    let a = run_args(&["run", "--lock-object-namespace=ns"]);
    assert_eq!(a.leader.leader_elect_namespace.as_deref(), Some("ns"));
    // Only a Lease can be the lock.
    refused(&["run", "--leader-elect-resource-lock=endpoints"]);
    // One name for one setting.
    refused(&["run", "--listen-address=:1", "--http-address=:2"]);
}

#[test]
fn volcano_chart_arguments_run_without_a_command() {
    // Volcano v1.15.1's installer/helm/chart/volcano/templates/scheduler.yaml, every
    // option on, given to rust-batch's image (whose entrypoint is the binary).
    let a = run_args(&[
        "--logtostderr",
        "--scheduler-conf=/volcano.scheduler/volcano-scheduler.conf",
        "--scheduler-name=volcano",
        "--enable-healthz=true",
        "--enable-metrics=true",
        "--enable-pprof=true",
        "--leader-elect=true",
        "--leader-elect-resource-namespace=volcano-system",
        "--kube-api-qps=2000",
        "--kube-api-burst=2000",
        "--schedule-period=1s",
        "--node-worker-threads=20",
        "--percentage-nodes-to-find=0",
        "--plugins-dir=/plugins",
        "--feature-gates=PodDisruptionBudgetsSupport=true",
        "--ignored-provisioners=rancher.io/local-path",
        "--scheduler-sharding-mode=none",
        "-v=3",
    ]);
    assert_eq!(a.scheduler_names, ["volcano"]);
    assert!(a.leader.leader_elect && a.enable_healthz);
    let warnings = a.peers.warnings().join("\n");
    for named in [
        "--enable-pprof=true: ignored",
        "--kube-api-qps=2000: ignored: rust-batch does not cap its requests per second",
        "--kube-api-burst=2000: ignored",
        "--node-worker-threads=20: ignored",
        "--plugins-dir=/plugins: ignored",
        "--feature-gates=PodDisruptionBudgetsSupport=true: ignored",
        "--ignored-provisioners=rancher.io/local-path: ignored",
    ] {
        assert!(warnings.contains(named), "{named} in:\n{warnings}");
    }
    // What rust-batch does anyway is not warned about.
    for quiet in [
        "logtostderr",
        "enable-metrics",
        "percentage-nodes-to-find",
        "sharding",
    ] {
        assert!(!warnings.contains(quiet), "{quiet} in:\n{warnings}");
    }
    assert_eq!(a.peers.refusal(), None);
}

#[test]
fn a_volcano_command_line_without_a_scheduler_name_takes_volcano_pods() {
    // Volcano's chart passes --scheduler-name only when its value sets one.
    let a = run_args(&["--scheduler-conf=/c", "--leader-elect=false"]);
    assert_eq!(a.scheduler_names, ["volcano"]);
    // `run` named: rust-batch's own default.
    assert_eq!(
        run_args(&["run", "--scheduler-conf=/c"]).scheduler_names,
        ["rust-batch"]
    );
}

#[test]
fn klog_flags_with_underscores() {
    let a = run_args(&[
        "run",
        "--log_dir=/var/log",
        "--alsologtostderr",
        "--skip_headers=false",
        "--stderrthreshold=INFO",
        "--log_file_max_size=10",
    ]);
    let warnings = a.peers.warnings().join("\n");
    assert!(
        warnings.contains("--log-dir=/var/log: ignored: klog's"),
        "{warnings}"
    );
    assert!(warnings.contains("--alsologtostderr=true"), "{warnings}");
    assert!(!warnings.contains("skip-headers"), "{warnings}");
    // Values are checked as klog checks them.
    refused(&["run", "--log_file_max_size=big"]);
}

#[test]
fn kube_scheduler_manifest_arguments() {
    // What a kubeadm static pod and the second-scheduler tutorial pass.
    let a = run_args(&[
        "run",
        "--authentication-kubeconfig=/etc/kubernetes/scheduler.conf",
        "--authorization-kubeconfig=/etc/kubernetes/scheduler.conf",
        "--bind-address=127.0.0.1",
        "--kubeconfig=/etc/kubernetes/scheduler.conf",
        "--leader-elect=false",
        "--secure-port=10259",
        "--profiling=false",
        "--v=2",
        "--logging-format=json",
    ]);
    assert!(!a.leader.leader_elect);
    let warnings = a.peers.warnings().join("\n");
    assert!(
        warnings.contains("--authentication-kubeconfig=/etc/kubernetes/scheduler.conf: ignored"),
        "{warnings}"
    );
    assert!(
        warnings.contains("--secure-port=10259: ignored"),
        "{warnings}"
    );
    assert!(!warnings.contains("profiling"), "{warnings}");
    refused(&["run", "--secure-port=tls"]);
}

#[test]
fn flags_that_would_move_pods_are_refused() {
    let a = run_args(&["run", "--config=/etc/kubernetes/sched.yaml"]);
    let why = a.peers.refusal().unwrap();
    assert!(
        why.starts_with("--config=/etc/kubernetes/sched.yaml is not supported"),
        "{why}"
    );
    let a = run_args(&["run", "--node-selector=volcano.sh/role:train"]);
    assert!(a.peers.refusal().unwrap().contains("outside the selection"));
    let a = run_args(&["run", "--scheduler-sharding-mode=hard"]);
    assert!(a.peers.refusal().is_some());
    let a = run_args(&["run", "--scheduler-sharding-mode=none"]);
    assert_eq!(a.peers.refusal(), None);
}

#[test]
fn unknown_flags_are_refused_and_listed() {
    let e = refused(&["run", "--no-such-flag"]);
    assert_eq!(e.kind(), clap::error::ErrorKind::UnknownArgument);
    let (own, peers) = cli::accepted_flags(Cli::command(), Some("run"));
    for f in [
        "--scheduler-conf",
        "--leader-elect",
        "--listen-address",
        "-v",
    ] {
        assert!(own.iter().any(|o| o == f), "{f}: {own:?}");
    }
    for f in ["--kube-api-qps", "--logtostderr", "--bind-address"] {
        assert!(peers.iter().any(|p| p == f), "{f}: {peers:?}");
    }
    // The peers' flags are `run`'s only.
    refused(&["check-config", "f", "--kube-api-qps=5"]);
}

#[test]
fn strict_config_on_every_command_that_reads_a_configuration() {
    assert!(run_args(&["run", "--strict-config"]).strict.on);
    match parse_line(&["check-config", "f", "--strict-config=true"])
        .unwrap()
        .command
    {
        Command::CheckConfig { strict, .. } => assert!(strict.on),
        _ => panic!("not check-config"),
    }
    match parse_line(&["simulate", "--strict-config"])
        .unwrap()
        .command
    {
        Command::Simulate { strict, .. } => assert!(strict.on),
        _ => panic!("not simulate"),
    }
}

#[test]
fn master_urls() {
    assert_eq!(
        master_url("10.0.0.1:6443").unwrap().to_string(),
        "https://10.0.0.1:6443/"
    );
    assert_eq!(
        master_url("http://127.0.0.1:8080").unwrap().to_string(),
        "http://127.0.0.1:8080/"
    );
    assert!(master_url("http://[::1").is_err());
}

/// Every flag of Volcano v1.15.1's vc-scheduler but --help and --version (which exit),
/// with a value as its chart writes one: cmd/scheduler/app/options/options.go,
/// cmd/scheduler/main.go (--log-flush-frequency, --feature-gates, and leader election
/// from k8s.io/component-base config/options/leaderelectionconfig.go), and klog v2's
/// flags (klog.go's init, plus legacy_stderr_threshold_behavior that main.go sets).
const VOLCANO_FLAGS: &[&str] = &[
    "--master=https://10.0.0.1:6443",
    "--kubeconfig=/kc",
    "--ca-cert-file=/ca",
    "--tls-cert-file=/crt",
    "--tls-private-key-file=/key",
    "--lock-object-namespace=volcano-system",
    "--scheduler-name=volcano",
    "--scheduler-conf=/volcano.scheduler/volcano-scheduler.conf",
    "--schedule-period=1s",
    "--resync-period=0s",
    "--default-queue=default",
    "--listen-address=:8080",
    "--healthz-address=:11251",
    "--priority-class=true",
    "--kube-api-qps=2000",
    "--kube-api-burst=2000",
    "--minimum-feasible-nodes=100",
    "--minimum-percentage-nodes-to-find=5",
    "--percentage-nodes-to-find=0",
    "--plugins-dir=/plugins",
    "--csi-storage=false",
    "--enable-healthz=true",
    "--enable-metrics=true",
    "--enable-pprof=true",
    "--node-selector=volcano.sh/role:train",
    "--cache-dumper=true",
    "--cache-dump-dir=/tmp",
    "--node-worker-threads=20",
    "--gate-removal-worker-num=5",
    "--ignored-provisioners=rancher.io/local-path",
    "--resource-sync-timeout=60s",
    "--disable-default-scheduler-config=false",
    "--scheduler-sharding-mode=none",
    "--scheduler-sharding-name=volcano",
    "--log-flush-frequency=5s",
    "--feature-gates=SchedulingGatesQueueAdmission=true",
    "--leader-elect=true",
    "--leader-elect-lease-duration=15s",
    "--leader-elect-renew-deadline=10s",
    "--leader-elect-retry-period=2s",
    "--leader-elect-resource-lock=leases",
    "--leader-elect-resource-name=volcano",
    "--leader-elect-resource-namespace=volcano-system",
    "--log_dir=/var/log",
    "--log_file=/var/log/vc.log",
    "--log_file_max_size=1800",
    "--logtostderr",
    "--alsologtostderr=false",
    "-v=3",
    "--add_dir_header=false",
    "--skip_headers=false",
    "--one_output=false",
    "--skip_log_headers=false",
    "--stderrthreshold=INFO",
    "--vmodule=allocate=5",
    "--log_backtrace_at=allocate.go:100",
    "--legacy_stderr_threshold_behavior=false",
];

#[test]
fn every_volcano_flag_is_accepted_and_documented() {
    let doc = include_str!("../../../docs/src/volcano-flags.md");
    for flag in VOLCANO_FLAGS {
        parse_line(&[flag]).unwrap_or_else(|e| panic!("{flag}: {e}"));
        let name = flag.split('=').next().unwrap_or(flag).replace('_', "-");
        assert!(
            doc.contains(&format!("`{name}`")),
            "{name} is not in the docs"
        );
    }
    for name in ["--help", "--version"] {
        assert!(
            doc.contains(&format!("`{name}`")),
            "{name} is not in the docs"
        );
    }
    // The peer flags and the names `run` takes for the peers' sake are in it too.
    let (_, peers) = cli::accepted_flags(Cli::command(), Some("run"));
    for name in peers.iter().map(String::as_str).chain([
        "--logging-format",
        "--listen-address",
        "--leader-elect-resource-namespace",
    ]) {
        assert!(
            doc.contains(&format!("`{name}`")),
            "{name} is not in the docs"
        );
    }
}
