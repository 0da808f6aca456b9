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
mod tests;
