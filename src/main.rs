mod cli;

use std::ffi::OsString;
use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{ArgAction, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};

use cli::go_values::{self, HttpAddress};
use cli::logging::{self, FilterSource, LogFormat};
use cli::peer_flags::PeerFlags;
use rust_batch::conf::SchedulerConf;
use rust_batch::framework::Scheduler;
use rust_batch::sim::{plot, Scenario, Simulation, DEFAULT_SCENARIO};
use rust_batch::REGISTRY;

/// rust-batch: a gang-aware batch scheduler for Kubernetes (Volcano-compatible).
///
/// Flags take Go's spellings too, as Volcano's and kube-scheduler's manifests write them:
/// `--flag=false`, `--log_dir`, `-v=3`, `:8080`. Given flags but no command, rust-batch runs
/// `run`, as vc-scheduler would.
#[derive(Parser)]
#[command(version, propagate_version = true, about)]
struct Cli {
    #[command(flatten)]
    log: LogArgs,
    #[command(subcommand)]
    command: Command,
}

/// How rust-batch logs (to stderr), for every command.
#[derive(clap::Args)]
struct LogArgs {
    /// rust-batch's log level (error, warn, info, debug, trace, off), or a filter as RUST_LOG
    /// takes it (`info,rust_batch::kube=debug`). Wins over -v and RUST_LOG.
    #[arg(long, global = true, value_name = "LEVEL|FILTER")]
    log_level: Option<String>,
    /// Verbosity as klog's -v=N in Volcano's and kube-scheduler's manifests: up to 3 info,
    /// 4–5 debug, 6–7 debug for the libraries too (the API client's requests), 8 and more
    /// trace. Wins over RUST_LOG.
    #[arg(short = 'v', long = "v", global = true, value_name = "N")]
    verbosity: Option<u8>,
    /// Log lines as text or as JSON objects (kube-scheduler's --logging-format too). Text is
    /// coloured only on a terminal, and never with NO_COLOR set.
    #[arg(
        long,
        global = true,
        value_enum,
        default_value = "text",
        visible_alias = "logging-format"
    )]
    log_format: LogFormat,
}

#[derive(Clone, Copy, ValueEnum)]
enum Output {
    Table,
    Json,
}

#[derive(Subcommand)]
enum Command {
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

/// `--strict-config` of the commands that read a scheduler configuration.
#[derive(clap::Args)]
struct StrictConfig {
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
    on: bool,
}

#[derive(clap::Args)]
struct RunArgs {
    /// Pods whose spec.schedulerName is one of these are ours (repeatable; operators
    /// that hard-code `volcano` need it listed).
    #[arg(long = "scheduler-name", default_value = "rust-batch")]
    scheduler_names: Vec<String>,
    /// Scheduler configuration (Volcano format, or Volcano's ConfigMap holding one);
    /// Volcano's default if absent. Reloaded when the file changes.
    #[arg(long, value_name = "FILE")]
    scheduler_conf: Option<PathBuf>,
    #[command(flatten)]
    strict: StrictConfig,
    /// How often to run a cycle when nothing changes (cycles also run soon after changes).
    #[arg(long, default_value = "1s", value_parser = go_values::parse_duration)]
    schedule_period: Duration,
    /// Binds and evictions in flight at first; the limit then adapts to the API
    /// server (grows while more in flight get more binds answered per second, shrinks on
    /// 429s, 5xx or latency past a second).
    #[arg(long, default_value_t = 64)]
    bind_concurrency: usize,
    /// The most binds and evictions in flight the adaptive limit may reach (equal to
    /// --bind-concurrency: a fixed limit).
    #[arg(long, default_value_t = 256)]
    max_bind_concurrency: usize,
    /// Objects per page when listing (at start, and after a watch lost its place); 0
    /// lists each kind in one request, which the API server answers from its watch
    /// cache (Kubernetes 1.31 and later): 2–3x faster at 50,000 pods than pages, whose
    /// continuations are read from etcd. Set 500 on older API servers, or to bound the
    /// memory a list of a very large cluster takes at once (about 2.7 KB per pod).
    #[arg(long, default_value_t = 0)]
    list_page_size: u32,
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
    pod_scheduled_events: bool,
    /// Address for /metrics, /healthz and /readyz (HOST:PORT, or :PORT for every
    /// interface), or "off". --listen-address is Volcano's name for it.
    #[arg(
        long,
        visible_alias = "listen-address",
        value_name = "ADDRESS",
        default_value = "0.0.0.0:8080",
        value_parser = HttpAddress::parse
    )]
    http_address: HttpAddress,
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
    enable_healthz: bool,
    /// Where --enable-healthz serves /healthz (HOST:PORT, or :PORT for every interface;
    /// default :11251, Volcano's).
    #[arg(long, value_name = "ADDRESS", value_parser = go_values::parse_listen_address)]
    healthz_address: Option<SocketAddr>,
    /// The kubeconfig to use (default: $KUBECONFIG, ~/.kube/config, or the in-cluster
    /// service account), as kube-scheduler's and kubectl's --kubeconfig.
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: its current context).
    #[arg(long, value_name = "NAME")]
    context: Option<String>,
    /// The API server's URL, over the kubeconfig's (as Volcano's and kube-scheduler's
    /// --master); https:// is assumed without a scheme.
    #[arg(long, value_name = "URL")]
    master: Option<String>,
    /// How long a gang that a refused bind left with fewer members bound than its
    /// minimum may wait for the rest (they are placed before any other gang's).
    #[arg(long, default_value = "30s", value_parser = go_values::parse_duration)]
    short_gang_timeout: Duration,
    /// What then happens to its bound members: released through the eviction API, or
    /// kept.
    #[arg(long, value_enum, default_value = "release")]
    short_gang_policy: rust_batch::kube::recovery::ShortGangPolicy,
    /// How long a committed gang waits for its WaitForFirstConsumer claims to be
    /// provisioned and bound before it is called off (kube-scheduler's VolumeBinding
    /// bindTimeoutSeconds).
    #[arg(long, default_value = "10m", value_parser = go_values::parse_duration)]
    volume_binding_timeout: Duration,
    /// Threads that serve the API connections (watches, binds, status writes). One
    /// keeps up with 50,000 pods; more mostly wake each other to share the work, CPU a
    /// shared host then lacks (measured beside the API server on 2 cores: 15–20% less
    /// CPU for rust-batch with one). The scheduling cycle runs off these threads, and
    /// lists decode on every core, whatever this is.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    io_threads: u16,
    #[command(flatten)]
    leader: LeaderElectArgs,
    // Last: its help heading would otherwise cover the flags after it.
    #[command(flatten)]
    peers: PeerFlags,
}

/// Leader election flags of `run`, named as kube-scheduler's (and Volcano's, which are
/// kube-scheduler's).
#[derive(clap::Args)]
struct LeaderElectArgs {
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
    leader_elect: bool,
    /// The Lease's name.
    #[arg(
        long,
        visible_alias = "leader-elect-resource-name",
        default_value = "rust-batch",
        value_name = "NAME"
    )]
    leader_elect_lease_name: String,
    /// The Lease's namespace (default: $POD_NAMESPACE, else rust-batch-system).
    /// --lock-object-namespace is Volcano's deprecated name for it.
    #[arg(
        long,
        visible_alias = "leader-elect-resource-namespace",
        alias = "lock-object-namespace",
        value_name = "NAMESPACE"
    )]
    leader_elect_namespace: Option<String>,
    /// How long a standby waits after the leader's last renewal before taking over
    /// (whole seconds).
    #[arg(long, default_value = "15s", value_parser = go_values::parse_duration)]
    leader_elect_lease_duration: Duration,
    /// How long the leader may go without renewing before it stops writing (and exits);
    /// shorter than the lease duration, so it stops before anyone else may start.
    #[arg(long, default_value = "10s", value_parser = go_values::parse_duration)]
    leader_elect_renew_deadline: Duration,
    /// The kind of lock: a Lease, the only kind Kubernetes still has.
    #[arg(long, value_name = "KIND", value_parser = ["leases"])]
    leader_elect_resource_lock: Option<String>,
}

impl LeaderElectArgs {
    fn config(self) -> anyhow::Result<Option<rust_batch::kube::leader::ElectionConfig>> {
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

/// Completes on SIGINT or SIGTERM (what a kubelet sends to stop a pod).
async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await
            }
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
    tracing::info!("shutting down");
}

/// `--master` as a URL; https:// when it names no scheme (a bare HOST:PORT).
fn master_url(master: &str) -> anyhow::Result<http::Uri> {
    let url = if master.contains("://") {
        master.to_string()
    } else {
        format!("https://{master}")
    };
    url.parse()
        .with_context(|| format!("--master {master:?} is not a URL"))
}

/// A client from `--kubeconfig`/`--context` if given, else the usual inference; `--master`
/// replaces the API server's URL (and stands alone when no kubeconfig is found).
async fn kube_client(
    kubeconfig: Option<&std::path::Path>,
    context: Option<String>,
    master: Option<&str>,
) -> anyhow::Result<kube::Client> {
    let master = master.map(master_url).transpose()?;
    let options = kube::config::KubeConfigOptions {
        context,
        ..Default::default()
    };
    let mut config = match kubeconfig {
        Some(path) => {
            let file = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading --kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(file, &options)
                .await
                .with_context(|| format!("loading --kubeconfig {}", path.display()))?
        }
        None if options.context.is_some() => kube::Config::from_kubeconfig(&options)
            .await
            .context("loading the kubeconfig context")?,
        None => match (kube::Config::infer().await, &master) {
            (Ok(config), _) => config,
            (Err(_), Some(url)) => kube::Config::new(url.clone()),
            (Err(e), None) => return Err(e).context("loading the kubeconfig"),
        },
    };
    if let Some(url) = master {
        config.cluster_url = url;
    }
    rust_batch::kube::client::build(config).context("building the Kubernetes client")
}

/// Serves /healthz ("ok" while the process runs, as the main HTTP address's) on Volcano's
/// separate health-check address.
async fn serve_healthz(listener: tokio::net::TcpListener) {
    let routes = axum::Router::new().route("/healthz", axum::routing::get(|| async { "ok" }));
    if let Err(e) = axum::serve(listener, routes).await {
        tracing::warn!(error = %e, "stopped serving --healthz-address");
    }
}

/// Volcano's default health-check address.
const VOLCANO_HEALTHZ_ADDRESS: &str = ":11251";

fn main() -> ExitCode {
    let commands: Vec<String> = Cli::command()
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .collect();
    let commands: Vec<&str> = commands.iter().map(String::as_str).collect();
    let (args, implied_run) =
        cli::imply_run(go_values::normalize_args(std::env::args_os()), &commands);
    let cli = match parse(&args) {
        Ok(cli) => cli,
        Err(e) => return refuse(e, &args, &commands),
    };
    let rust_log = std::env::var("RUST_LOG").ok();
    let (directives, source) = logging::filter_directives(
        cli.log.log_level.as_deref(),
        cli.log.verbosity,
        rust_log.as_deref(),
    );
    let filter = match logging::parse_filter(&directives, &source) {
        Ok(filter) => filter,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let format = cli.log.log_format;
    logging::init(format, filter);
    if let (FilterSource::Flag(flag), Some(env)) = (&source, &rust_log) {
        if !env.trim().is_empty() {
            tracing::info!("{flag} given: RUST_LOG={env:?} is not used");
        }
    }
    if implied_run {
        tracing::info!("flags but no command: running `run`, as vc-scheduler would");
    }
    match run(cli.command) {
        Ok(code) => code,
        Err(e) => {
            let report = cli::error_report(&e);
            match format {
                LogFormat::Text => eprintln!("error: {report}"),
                LogFormat::Json => tracing::error!(error = %report, "rust-batch stops"),
            }
            ExitCode::from(1)
        }
    }
}

fn parse(args: &[OsString]) -> Result<Cli, clap::Error> {
    let matches = Cli::command().try_get_matches_from(args)?;
    Cli::from_arg_matches(&matches)
}

/// Tells clap's error (help and version too); a flag no one has is refused with the list of
/// the flags the command accepts.
fn refuse(e: clap::Error, args: &[OsString], commands: &[&str]) -> ExitCode {
    let unknown = e.kind() == clap::error::ErrorKind::UnknownArgument;
    let _ = e.print();
    if unknown {
        let command = args
            .iter()
            .filter_map(|a| a.to_str())
            .find(|a| commands.contains(a));
        let (own, peers) = cli::accepted_flags(Cli::command(), command);
        let name = command
            .map(|c| format!("rust-batch {c}"))
            .unwrap_or("rust-batch".into());
        eprintln!("\n{name} accepts: {}", own.join(", "));
        if !peers.is_empty() {
            eprintln!(
                "and, from Volcano's and kube-scheduler's manifests (accepted, most with a \
                 warning that they are ignored): {}",
                peers.join(", ")
            );
        }
    }
    ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2))
}

fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Explain { gang, server } => explain(&gang, &server),
        Command::Crds { write: None } => {
            print!("{}", rust_batch::kube::dialects::crds::crd_yaml());
            Ok(ExitCode::SUCCESS)
        }
        Command::Crds { write: Some(dir) } => {
            rust_batch::kube::dialects::crds::write_crds(&dir)
                .with_context(|| format!("writing CRDs into {}", dir.display()))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Run(args) => run_scheduler(*args),
        Command::CheckConfig { file, strict } => {
            let conf = SchedulerConf::load(&file)?.with_strict(strict.on);
            let scheduler = Scheduler::new(conf, &REGISTRY)?;
            let conf = scheduler.conf();
            print!("{conf}");
            for w in &conf.warnings {
                println!("warning: {w}");
            }
            println!("{}: OK", file.display());
            Ok(ExitCode::SUCCESS)
        }
        Command::Simulate {
            scenario,
            output,
            plot: plot_file,
            seed,
            scheduler_conf,
            strict,
            max_jobs,
        } => {
            let (mut sc, file) = match &scenario {
                Some(path) => (Scenario::load(path)?, path.display().to_string()),
                None => (
                    Scenario::parse(DEFAULT_SCENARIO, "<bundled default scenario>")?,
                    "<bundled default scenario>".to_string(),
                ),
            };
            if let Some(s) = seed {
                sc.seed = s;
            }
            let conf = match scheduler_conf {
                Some(path) => {
                    let text = std::fs::read_to_string(&path)
                        .with_context(|| format!("reading {}", path.display()))?;
                    let conf = SchedulerConf::parse(&text, &path.display().to_string())?;
                    sc.config = Some(text);
                    conf
                }
                None => sc.scheduler_conf(&file)?,
            };
            // Checked here, so --strict-config and the warnings apply to the scenario's own
            // configuration as to a file given.
            let checked = Scheduler::new(conf.with_strict(strict.on), &REGISTRY)?;
            for w in &checked.conf().warnings {
                tracing::warn!("{}: {w}", checked.conf().source);
            }
            simulate(sc, &file, output, plot_file, max_jobs)
        }
    }
}

fn run_scheduler(args: RunArgs) -> anyhow::Result<ExitCode> {
    let RunArgs {
        scheduler_names,
        scheduler_conf,
        strict,
        schedule_period,
        bind_concurrency,
        max_bind_concurrency,
        list_page_size,
        pod_scheduled_events,
        http_address,
        enable_healthz,
        healthz_address,
        short_gang_timeout,
        short_gang_policy,
        volume_binding_timeout,
        kubeconfig,
        context,
        master,
        io_threads,
        leader,
        peers,
    } = args;
    if let Some(refusal) = peers.refusal() {
        anyhow::bail!(refusal);
    }
    for w in peers.warnings() {
        tracing::warn!("{w}");
    }
    let healthz_address = match (enable_healthz, healthz_address) {
        (true, address) => {
            let address = match address {
                Some(a) => a,
                None => go_values::parse_listen_address(VOLCANO_HEALTHZ_ADDRESS)
                    .map_err(anyhow::Error::msg)?,
            };
            // The main address serves /healthz already.
            (http_address.socket() != Some(address)).then_some(address)
        }
        (false, Some(address)) => {
            tracing::warn!(
                "--healthz-address={address}: not served without --enable-healthz=true (as in \
                 Volcano); /healthz is on --http-address"
            );
            None
        }
        (false, None) => None,
    };
    let leader_election = leader.config()?;
    let conf = match &scheduler_conf {
        Some(path) => SchedulerConf::load(path)?,
        None => SchedulerConf::default_conf(),
    };
    // Checked here, before connecting, so a bad file fails fast.
    let conf = Scheduler::new(conf.with_strict(strict.on), &REGISTRY)?
        .conf()
        .clone();
    for w in &conf.warnings {
        tracing::warn!("{}: {w}", conf.source);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(usize::from(io_threads))
        .thread_name("rust-batch-io")
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        if let Some(address) = healthz_address {
            let listener = tokio::net::TcpListener::bind(address)
                .await
                .with_context(|| format!("serving /healthz on --healthz-address {address}"))?;
            tracing::info!(%address, "serving /healthz (--enable-healthz)");
            tokio::spawn(serve_healthz(listener));
        }
        let client = kube_client(kubeconfig.as_deref(), context, master.as_deref()).await?;
        let opts = rust_batch::kube::driver::DriverOptions {
            scheduler_names,
            schedule_period,
            list_page_size: (list_page_size > 0).then_some(list_page_size),
            conf,
            conf_path: scheduler_conf,
            bind_concurrency,
            max_bind_concurrency,
            pod_scheduled_events,
            http_address: http_address.socket(),
            short_gang_timeout,
            short_gang_policy,
            volume_binding_timeout,
            leader_election,
        };
        rust_batch::kube::driver::run(client, opts, shutdown_signal())
            .await
            .map_err(anyhow::Error::from)
    })?;
    Ok(ExitCode::SUCCESS)
}

fn simulate(
    sc: Scenario,
    file: &str,
    output: Output,
    plot_file: Option<PathBuf>,
    max_jobs: usize,
) -> anyhow::Result<ExitCode> {
    let max_time = sc.max_time.0;
    let mut sim = Simulation::new(sc, file)?;
    let bar = if std::io::stderr().is_terminal() {
        let bar = indicatif::ProgressBar::new((max_time / 1000).max(1) as u64);
        bar.set_style(
            indicatif::ProgressStyle::with_template("{bar:40} virtual {msg}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        Some(bar)
    } else {
        None
    };
    let report = sim.run(&mut |p| {
        if let Some(bar) = &bar {
            bar.set_position((p.now / 1000) as u64);
            bar.set_message(format!(
                "{}s, {}/{} jobs done",
                p.now / 1000,
                p.jobs_done,
                p.jobs_total
            ));
        }
    });
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    match output {
        Output::Table => print!("{}", report.to_table(max_jobs)),
        Output::Json => println!("{}", report.to_json()),
    }
    if let Some(path) = plot_file {
        std::fs::write(&path, plot::render(&report))
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("plot written to {}", path.display());
    }
    if report.invariants_hold() {
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!("error: scheduling invariants violated (see report)");
        Ok(ExitCode::from(3))
    }
}

/// GET a path from the scheduler's HTTP endpoint: (status, body). Plain HTTP/1.0 on the
/// loopback or cluster network; the debug API needs nothing more.
fn http_get(server: &str, path: &str) -> anyhow::Result<(u16, String)> {
    use std::io::{Read, Write};
    let hostport = server.trim_start_matches("http://").trim_end_matches('/');
    let mut stream = std::net::TcpStream::connect(hostport)
        .with_context(|| format!("cannot reach rust-batch at {server} (is `rust-batch run --http-address` serving there?)"))?;
    stream.set_read_timeout(Some(std::time::Duration::from_secs(10)))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {hostport}\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .with_context(|| format!("{server} did not answer HTTP"))?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((status, body))
}

fn explain(gang: &str, server: &str) -> anyhow::Result<ExitCode> {
    let Some((ns, name)) = gang.split_once('/') else {
        anyhow::bail!("{gang:?}: write the gang as NAMESPACE/NAME");
    };
    let (status, body) = http_get(
        server,
        &format!("/apis/v1/plugins/Coscheduling/gang/{ns}/{name}"),
    )?;
    let v: serde_json::Value =
        serde_json::from_str(&body).with_context(|| format!("unexpected answer: {body}"))?;
    if status != 200 {
        anyhow::bail!("{}", v["error"].as_str().unwrap_or(&body));
    }
    let list = |k: &str| v[k].as_array().map(|a| a.len()).unwrap_or(0);
    println!(
        "gang {} ({}, mode {}, queue {}, phase {}): {}/{} bound, minMember {}",
        v["name"].as_str().unwrap_or(gang),
        v["dialect"].as_str().unwrap_or("?"),
        v["mode"].as_str().unwrap_or("?"),
        v["queue"].as_str().unwrap_or("?"),
        v["phase"].as_str().unwrap_or("?"),
        list("boundChildren"),
        v["totalChildrenNum"],
        v["minRequiredNumber"]
    );
    if list("gangGroup") > 1 {
        let members: Vec<&str> = v["gangGroup"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|x| x.as_str())
            .collect();
        println!("gang group (binds only together): {}", members.join(", "));
    }
    if let Some(wait) = v["waitTime"].as_str() {
        let since = v["waitingSince"]
            .as_str()
            .map(|t| format!(", waiting since {t}"));
        let backoff = v["backoffUntil"]
            .as_str()
            .map(|t| format!(", backing off until {t}"));
        println!(
            "waiting time {wait}{}{}",
            since.unwrap_or_default(),
            backoff.unwrap_or_default()
        );
    }
    if let Some(c) = v["condition"].as_object() {
        println!(
            "{} ({}): {}",
            c["type"].as_str().unwrap_or(""),
            c["reason"].as_str().unwrap_or(""),
            c["message"].as_str().unwrap_or("")
        );
    }
    let bound: Vec<&str> = v["boundChildren"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|x| x.as_str())
        .collect();
    for child in v["children"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|x| x.as_str())
    {
        let why = v["pending"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["pod"] == child)
            .and_then(|p| p["reason"].as_str());
        let placed = v["waitingForBindChildren"]
            .as_array()
            .is_some_and(|w| w.iter().any(|x| x == child));
        match (bound.contains(&child), why) {
            (true, _) => println!("  {child}: bound"),
            (false, Some(why)) => println!("  {child}: pending: {why}"),
            (false, None) if placed => {
                println!("  {child}: placed, held until the whole gang fits (or binding)")
            }
            (false, None) => println!("  {child}: not yet considered"),
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
