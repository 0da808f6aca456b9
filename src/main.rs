use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};

use rust_batch::conf::SchedulerConf;
use rust_batch::framework::Scheduler;
use rust_batch::sim::{plot, Scenario, Simulation, DEFAULT_SCENARIO};
use rust_batch::REGISTRY;

/// rust-batch: a gang-aware batch scheduler for Kubernetes (Volcano-compatible).
#[derive(Parser)]
#[command(version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
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
        /// Override the scenario's scheduler configuration with a Volcano-format file.
        #[arg(long, value_name = "FILE")]
        scheduler_conf: Option<PathBuf>,
        /// Rows of the job table (the JSON report always has every job).
        #[arg(long, default_value_t = 40)]
        max_jobs: usize,
    },
    /// Validate a scheduler configuration file (Volcano's volcano-scheduler.conf format).
    CheckConfig { file: PathBuf },
    /// Schedule pods on a Kubernetes cluster (kubeconfig from $KUBECONFIG, ~/.kube/config,
    /// or the in-cluster service account).
    Run {
        /// Pods whose spec.schedulerName is one of these are ours (repeatable; operators
        /// that hard-code `volcano` need it listed).
        #[arg(long = "scheduler-name", default_value = "rust-batch")]
        scheduler_names: Vec<String>,
        /// Scheduler configuration (Volcano format); Volcano's default if absent.
        #[arg(long, value_name = "FILE")]
        scheduler_conf: Option<PathBuf>,
        /// How often to run a cycle when nothing changes (cycles also run soon after changes).
        #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
        schedule_period: std::time::Duration,
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
        #[arg(long)]
        pod_scheduled_events: bool,
        /// Address for /metrics, /healthz and /readyz, or "off".
        #[arg(long, default_value = "0.0.0.0:8080")]
        http_address: String,
        /// The kubeconfig to use (default: $KUBECONFIG, ~/.kube/config, or the in-cluster
        /// service account), as kube-scheduler's and kubectl's --kubeconfig.
        #[arg(long, value_name = "FILE")]
        kubeconfig: Option<PathBuf>,
        /// The kubeconfig context to use (default: its current context).
        #[arg(long, value_name = "NAME")]
        context: Option<String>,
        /// How long a gang that a refused bind left with fewer members bound than its
        /// minimum may wait for the rest (they are placed before any other gang's).
        #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
        short_gang_timeout: std::time::Duration,
        /// What then happens to its bound members: released through the eviction API, or
        /// kept.
        #[arg(long, value_enum, default_value = "release")]
        short_gang_policy: rust_batch::kube::recovery::ShortGangPolicy,
        /// How long a committed gang waits for its WaitForFirstConsumer claims to be
        /// provisioned and bound before it is called off (kube-scheduler's VolumeBinding
        /// bindTimeoutSeconds).
        #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
        volume_binding_timeout: std::time::Duration,
        /// Threads that serve the API connections (watches, binds, status writes). One
        /// keeps up with 50,000 pods; more mostly wake each other to share the work, CPU a
        /// shared host then lacks (measured beside the API server on 2 cores: 15–20% less
        /// CPU for rust-batch with one). The scheduling cycle runs off these threads, and
        /// lists decode on every core, whatever this is.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
        io_threads: u16,
        #[command(flatten)]
        leader: LeaderElectArgs,
    },
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

/// Leader election flags of `run`, named as kube-scheduler's.
#[derive(clap::Args)]
struct LeaderElectArgs {
    /// Run as one of several replicas: only the holder of a Lease schedules and writes;
    /// the others keep their caches warm and take over when it goes.
    #[arg(long)]
    leader_elect: bool,
    /// The Lease's name.
    #[arg(long, default_value = "rust-batch", value_name = "NAME")]
    leader_elect_lease_name: String,
    /// The Lease's namespace (default: $POD_NAMESPACE, else rust-batch-system).
    #[arg(long, value_name = "NAMESPACE")]
    leader_elect_namespace: Option<String>,
    /// How long a standby waits after the leader's last renewal before taking over
    /// (whole seconds).
    #[arg(long, default_value = "15s", value_parser = humantime::parse_duration)]
    leader_elect_lease_duration: std::time::Duration,
    /// How long the leader may go without renewing before it stops writing (and exits);
    /// shorter than the lease duration, so it stops before anyone else may start.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    leader_elect_renew_deadline: std::time::Duration,
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

/// The default log filter. kube's client logs every failed request at error level; the
/// driver says the same once per cause and interval (`kube::retry::warn_limited`), so an
/// API server outage costs tens of lines, not one per request. kube's watcher logs a list
/// the API server refuses (403) at warn on every retry; the watch says it once per cause.
const LOG_FILTER: &str =
    "info,kube=warn,kube_client::client::builder=off,kube_runtime::watcher=error";

/// A client from `--kubeconfig`/`--context` if given, else the usual inference.
async fn kube_client(
    kubeconfig: Option<&std::path::Path>,
    context: Option<String>,
) -> anyhow::Result<kube::Client> {
    let options = kube::config::KubeConfigOptions {
        context,
        ..Default::default()
    };
    let config = match kubeconfig {
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
        None => kube::Config::infer()
            .await
            .context("loading the kubeconfig")?,
    };
    rust_batch::kube::client::build(config).context("building the Kubernetes client")
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(LOG_FILTER)),
        )
        .with_writer(std::io::stderr)
        .init();
    match run(Cli::parse()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
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
        Command::Run {
            scheduler_names,
            scheduler_conf,
            schedule_period,
            bind_concurrency,
            max_bind_concurrency,
            list_page_size,
            pod_scheduled_events,
            http_address,
            short_gang_timeout,
            short_gang_policy,
            volume_binding_timeout,
            kubeconfig,
            context,
            io_threads,
            leader,
        } => {
            let leader_election = leader.config()?;
            let http_address = match http_address.as_str() {
                "off" | "" => None,
                a => Some(a.parse().with_context(|| {
                    format!("--http-address {a:?} is not HOST:PORT or \"off\"")
                })?),
            };
            let conf = match &scheduler_conf {
                Some(path) => SchedulerConf::load(path)?,
                None => SchedulerConf::default_conf(),
            };
            // Checked here, before connecting, so a bad file fails fast.
            let conf = Scheduler::new(conf, &REGISTRY)?.conf().clone();
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
                let client = kube_client(kubeconfig.as_deref(), context).await?;
                let opts = rust_batch::kube::driver::DriverOptions {
                    scheduler_names,
                    schedule_period,
                    list_page_size: (list_page_size > 0).then_some(list_page_size),
                    conf,
                    conf_path: scheduler_conf,
                    bind_concurrency,
                    max_bind_concurrency,
                    pod_scheduled_events,
                    http_address,
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
        Command::CheckConfig { file } => {
            let scheduler = Scheduler::new(SchedulerConf::load(&file)?, &REGISTRY)?;
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
            if let Some(path) = scheduler_conf {
                let text = std::fs::read_to_string(&path)
                    .with_context(|| format!("reading {}", path.display()))?;
                Scheduler::new(
                    SchedulerConf::parse(&text, &path.display().to_string())?,
                    &REGISTRY,
                )?;
                sc.config = Some(text);
            }
            let max_time = sc.max_time.0;
            let mut sim = Simulation::new(sc, &file)?;
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
