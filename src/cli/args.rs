//! The command line: its commands and flags (clap derive). What they do is in main.rs.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{ArgAction, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};

use super::go_values::{self, HttpAddress};
use super::logging::LogFormat;
use super::peer_flags::PeerFlags;

/// rust-batch: a gang-aware batch scheduler for Kubernetes (Volcano-compatible).
///
/// Flags take Go's spellings too, as Volcano's and kube-scheduler's manifests write them:
/// `--flag=false`, `--log_dir`, `-v=3`, `:8080`. Given flags but no command, rust-batch runs
/// `run`, as vc-scheduler would.
#[derive(Parser)]
#[command(version, propagate_version = true, about)]
pub struct Cli {
    #[command(flatten)]
    pub log: LogArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// How rust-batch logs (to stderr), for every command.
#[derive(clap::Args)]
pub struct LogArgs {
    /// rust-batch's log level (error, warn, info, debug, trace, off), or a filter as RUST_LOG
    /// takes it (`info,rust_batch::kube=debug`). Wins over -v and RUST_LOG.
    #[arg(long, global = true, value_name = "LEVEL|FILTER")]
    pub log_level: Option<String>,
    /// Verbosity as klog's -v=N in Volcano's and kube-scheduler's manifests: up to 3 info,
    /// 4–5 debug, 6–7 debug for the libraries too (the API client's requests), 8 and more
    /// trace. Wins over RUST_LOG.
    #[arg(short = 'v', long = "v", global = true, value_name = "N")]
    pub verbosity: Option<u8>,
    /// Log lines as text or as JSON objects (kube-scheduler's --logging-format too). Text is
    /// coloured only on a terminal, and never with NO_COLOR set.
    #[arg(
        long,
        global = true,
        value_enum,
        default_value = "text",
        visible_alias = "logging-format"
    )]
    pub log_format: LogFormat,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum Output {
    Table,
    Json,
}

#[derive(Subcommand)]
pub enum Command {
    /// Run a scenario in the simulator (virtual clock, same engine as the live scheduler).
    /// Without SCENARIO, runs the bundled default (S1 + S2 + a mixed workload).
    Simulate {
        /// Scenario file (YAML). See examples/scenarios/.
        scenario: Option<PathBuf>,
        /// Report format.
        #[arg(long, value_enum, default_value = "table")]
        output: Output,
        /// Also write an SVG plot (utilization, queue shares, gang spread, job timeline) to FILE.
        #[arg(long, value_name = "FILE")]
        plot: Option<PathBuf>,
        /// Override the scenario's seed.
        #[arg(long)]
        seed: Option<u64>,
        /// Override the scenario's scheduler configuration with a Volcano-format file (or
        /// Volcano's ConfigMap holding one).
        #[arg(long, value_name = "FILE")]
        scheduler_conf: Option<PathBuf>,
        #[command(flatten)]
        strict: StrictConfig,
        /// Rows of the job table (the JSON report always has every job).
        #[arg(long, default_value_t = 40)]
        max_jobs: usize,
        /// Predict each waiting gang's start time and report how well the predictions held
        /// (the scenario's `predictStart: true` does the same).
        #[arg(long)]
        predict_start: bool,
        /// Take the scenario from a live cluster (read only: one list of each kind): its
        /// nodes, queues, running and pending gangs and the pods of other schedulers, and
        /// simulate what happens next from now (t=0). See docs/src/scenarios.md.
        #[arg(long, conflicts_with = "scenario")]
        from_cluster: bool,
        /// Also write the scenario to FILE (editable YAML; run it again with `simulate FILE`).
        #[arg(long, value_name = "FILE")]
        write_scenario: Option<PathBuf>,
        #[command(flatten)]
        cluster: ClusterArgs,
    },
    /// Validate a scheduler configuration file (Volcano's volcano-scheduler.conf format, or
    /// Volcano's ConfigMap holding one) and print its warnings.
    CheckConfig {
        file: PathBuf,
        #[command(flatten)]
        strict: StrictConfig,
    },
    /// Schedule pods on a Kubernetes cluster (kubeconfig from $KUBECONFIG, ~/.kube/config,
    /// or the in-cluster service account).
    Run(Box<RunArgs>),
    /// Explain a gang from the live scheduler: its members, their states, and exactly why
    /// each pending member does not fit (resource and shortfall, selector, taint).
    Explain {
        /// The gang, as NAMESPACE/NAME (a PodGroup, or the name pods declare in labels).
        gang: String,
        /// The scheduler's HTTP address (its --http-address).
        #[arg(long, default_value = "http://127.0.0.1:8080")]
        server: String,
    },
    /// Print the CustomResourceDefinitions rust-batch uses (Volcano's PodGroup and Queue),
    /// or write them into a directory.
    Crds {
        #[arg(long, value_name = "DIR")]
        write: Option<PathBuf>,
    },
}

/// How `simulate --from-cluster` reaches the cluster, as `run` does.
#[derive(clap::Args)]
pub struct ClusterArgs {
    /// With --from-cluster: the kubeconfig to use (default: $KUBECONFIG, ~/.kube/config,
    /// or the in-cluster service account).
    #[arg(long, value_name = "FILE", requires = "from_cluster")]
    pub kubeconfig: Option<PathBuf>,
    /// With --from-cluster: the kubeconfig context to use (default: its current context).
    #[arg(long, value_name = "NAME", requires = "from_cluster")]
    pub context: Option<String>,
    /// With --from-cluster: the API server's URL, over the kubeconfig's.
    #[arg(long, value_name = "URL", requires = "from_cluster")]
    pub master: Option<String>,
    /// With --from-cluster: pods whose spec.schedulerName is one of these are rust-batch's
    /// (as `run --scheduler-name`); other pods running are their nodes' usage.
    #[arg(
        long = "scheduler-name",
        default_value = "rust-batch",
        requires = "from_cluster"
    )]
    pub scheduler_names: Vec<String>,
}

/// `--strict-config` of the commands that read a scheduler configuration.
#[derive(clap::Args)]
pub struct StrictConfig {
    /// Refuse a configuration naming a Volcano plugin or action rust-batch does not have
    /// (without it, each is skipped with a warning saying what is lost).
    #[arg(
        long = "strict-config",
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        default_value = "false",
        action = ArgAction::Set,
        value_parser = go_values::parse_bool
    )]
    pub on: bool,
}

#[derive(clap::Args)]
pub struct RunArgs {
    /// Pods whose spec.schedulerName is one of these are ours (repeatable; operators
    /// that hard-code `volcano` need it listed).
    #[arg(long = "scheduler-name", default_value = "rust-batch")]
    pub scheduler_names: Vec<String>,
    /// Scheduler configuration (Volcano format, or Volcano's ConfigMap holding one);
    /// Volcano's default if absent. Reloaded when the file changes.
    #[arg(long, value_name = "FILE")]
    pub scheduler_conf: Option<PathBuf>,
    #[command(flatten)]
    pub strict: StrictConfig,
    /// How often to run a cycle when nothing changes (cycles also run soon after changes).
    #[arg(long, default_value = "1s", value_parser = go_values::parse_duration)]
    pub schedule_period: Duration,
    /// Binds and evictions in flight at first; the limit then adapts to the API
    /// server (grows while more in flight get more binds answered per second, shrinks on
    /// 429s, 5xx or latency past a second).
    #[arg(long, default_value_t = 64)]
    pub bind_concurrency: usize,
    /// The most binds and evictions in flight the adaptive limit may reach (equal to
    /// --bind-concurrency: a fixed limit).
    #[arg(long, default_value_t = 256)]
    pub max_bind_concurrency: usize,
    /// Objects per page when listing (at start, and after a watch lost its place); 0
    /// lists each kind in one request, which the API server answers from its watch
    /// cache (Kubernetes 1.31 and later): 2–3x faster at 50,000 pods than pages, whose
    /// continuations are read from etcd. Set 500 on older API servers, or to bound the
    /// memory a list of a very large cluster takes at once (about 2.7 KB per pod).
    #[arg(long, default_value_t = 0)]
    pub list_page_size: u32,
    /// Also send each pod a Scheduled event when it is bound, as kube-scheduler does
    /// (one more API write per pod; by default the PodGroup's Scheduled event says it
    /// once per gang, and failures are always told per pod).
    #[arg(
        long,
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        default_value = "false",
        action = ArgAction::Set,
        value_parser = go_values::parse_bool
    )]
    pub pod_scheduled_events: bool,
    /// Predict each waiting gang's start time from the runtime estimates (pod annotation
    /// rust-batch.io/runtime-estimate, activeDeadlineSeconds, or the queue's
    /// rust-batch.io/default-runtime-estimate): in its PodGroup's condition message, the
    /// annotation rust-batch.io/predicted-start and the metric
    /// rust_batch_gang_predicted_start_seconds.
    #[arg(
        long,
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        default_value = "false",
        action = ArgAction::Set,
        value_parser = go_values::parse_bool
    )]
    pub predict_start: bool,
    /// Address for /metrics, /healthz and /readyz (HOST:PORT, or :PORT for every
    /// interface), or "off". --listen-address is Volcano's name for it.
    #[arg(
        long,
        visible_alias = "listen-address",
        value_name = "ADDRESS",
        default_value = "0.0.0.0:8080",
        value_parser = HttpAddress::parse
    )]
    pub http_address: HttpAddress,
    /// Also serve /healthz on --healthz-address (Volcano's liveness probe port).
    #[arg(
        long,
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        default_value = "false",
        action = ArgAction::Set,
        value_parser = go_values::parse_bool
    )]
    pub enable_healthz: bool,
    /// Where --enable-healthz serves /healthz (HOST:PORT, or :PORT for every interface;
    /// default :11251, Volcano's).
    #[arg(long, value_name = "ADDRESS", value_parser = go_values::parse_listen_address)]
    pub healthz_address: Option<SocketAddr>,
    /// The kubeconfig to use (default: $KUBECONFIG, ~/.kube/config, or the in-cluster
    /// service account), as kube-scheduler's and kubectl's --kubeconfig.
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: its current context).
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
    /// The API server's URL, over the kubeconfig's (as Volcano's and kube-scheduler's
    /// --master); https:// is assumed without a scheme.
    #[arg(long, value_name = "URL")]
    pub master: Option<String>,
    /// How long a gang that a refused bind left with fewer members bound than its
    /// minimum may wait for the rest (they are placed before any other gang's).
    #[arg(long, default_value = "30s", value_parser = go_values::parse_duration)]
    pub short_gang_timeout: Duration,
    /// What then happens to its bound members: released through the eviction API, or
    /// kept.
    #[arg(long, value_enum, default_value = "release")]
    pub short_gang_policy: rust_batch::kube::recovery::ShortGangPolicy,
    /// How long a committed gang waits for its WaitForFirstConsumer claims to be
    /// provisioned and bound before it is called off (kube-scheduler's VolumeBinding
    /// bindTimeoutSeconds).
    #[arg(long, default_value = "10m", value_parser = go_values::parse_duration)]
    pub volume_binding_timeout: Duration,
    /// Threads that serve the API connections (watches, binds, status writes). One
    /// keeps up with 50,000 pods; more mostly wake each other to share the work, CPU a
    /// shared host then lacks (measured beside the API server on 2 cores: 15–20% less
    /// CPU for rust-batch with one). The scheduling cycle runs off these threads, and
    /// lists decode on every core, whatever this is.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    pub io_threads: u16,
    #[command(flatten)]
    pub leader: LeaderElectArgs,
    // Last: its help heading would otherwise cover the flags after it.
    #[command(flatten)]
    pub peers: PeerFlags,
}

/// Leader election flags of `run`, named as kube-scheduler's (and Volcano's, which are
/// kube-scheduler's).
#[derive(clap::Args)]
pub struct LeaderElectArgs {
    /// Run as one of several replicas: only the holder of a Lease schedules and writes;
    /// the others keep their caches warm and take over when it goes. (Off by default;
    /// Volcano's is on.)
    #[arg(
        long,
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        default_value = "false",
        action = ArgAction::Set,
        value_parser = go_values::parse_bool
    )]
    pub leader_elect: bool,
    /// The Lease's name.
    #[arg(
        long,
        visible_alias = "leader-elect-resource-name",
        default_value = "rust-batch",
        value_name = "NAME"
    )]
    pub leader_elect_lease_name: String,
    /// The Lease's namespace (default: $POD_NAMESPACE, else rust-batch-system).
    /// --lock-object-namespace is Volcano's deprecated name for it.
    #[arg(
        long,
        visible_alias = "leader-elect-resource-namespace",
        alias = "lock-object-namespace",
        value_name = "NAMESPACE"
    )]
    pub leader_elect_namespace: Option<String>,
    /// How long a standby waits after the leader's last renewal before taking over
    /// (whole seconds).
    #[arg(long, default_value = "15s", value_parser = go_values::parse_duration)]
    pub leader_elect_lease_duration: Duration,
    /// How long the leader may go without renewing before it stops writing (and exits);
    /// shorter than the lease duration, so it stops before anyone else may start.
    #[arg(long, default_value = "10s", value_parser = go_values::parse_duration)]
    pub leader_elect_renew_deadline: Duration,
    /// The kind of lock: a Lease, the only kind Kubernetes still has.
    #[arg(long, value_name = "KIND", value_parser = ["leases"])]
    pub leader_elect_resource_lock: Option<String>,
}

impl LeaderElectArgs {
    pub fn config(self) -> anyhow::Result<Option<rust_batch::kube::leader::ElectionConfig>> {
        if !self.leader_elect {
            return Ok(None);
        }
        let namespace = self
            .leader_elect_namespace
            .or_else(|| {
                std::env::var("POD_NAMESPACE")
                    .ok()
                    .filter(|n| !n.is_empty())
            })
            .unwrap_or_else(|| "rust-batch-system".into());
        Ok(Some(rust_batch::kube::leader::ElectionConfig::new(
            self.leader_elect_lease_name,
            namespace,
            self.leader_elect_lease_duration,
            self.leader_elect_renew_deadline,
            rust_batch::kube::leader::identity(),
        )?))
    }
}

/// `--master` as a URL; https:// when it names no scheme (a bare HOST:PORT).
pub fn master_url(master: &str) -> anyhow::Result<http::Uri> {
    let url = if master.contains("://") {
        master.to_string()
    } else {
        format!("https://{master}")
    };
    url.parse()
        .with_context(|| format!("--master {master:?} is not a URL"))
}

pub fn parse(args: &[OsString]) -> Result<Cli, clap::Error> {
    let matches = Cli::command().try_get_matches_from(args)?;
    Cli::from_arg_matches(&matches)
}

#[cfg(test)]
mod tests {
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
            warnings
                .contains("--authentication-kubeconfig=/etc/kubernetes/scheduler.conf: ignored"),
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
        let doc = include_str!("../../docs/src/volcano-flags.md");
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
}
