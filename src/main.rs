mod cli;

use std::ffi::OsString;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::CommandFactory;

use cli::args::{master_url, parse, Cli, ClusterArgs, Command, Output, RunArgs};
use cli::explain::explain;
use cli::go_values;
use cli::logging::{self, FilterSource, LogFormat};
use rust_batch::conf::SchedulerConf;
use rust_batch::framework::Scheduler;
use rust_batch::sim::{plot, Scenario, Simulation, DEFAULT_SCENARIO};
use rust_batch::REGISTRY;

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
        tracing::info!(
            "flags but no command: running `run` as vc-scheduler would (for the scheduler \
             name volcano unless --scheduler-name is given)"
        );
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
            predict_start,
            from_cluster,
            write_scenario,
            cluster,
        } => {
            let (mut sc, file) = match &scenario {
                _ if from_cluster => {
                    let conf_text = scheduler_conf
                        .as_deref()
                        .map(|p| {
                            std::fs::read_to_string(p)
                                .with_context(|| format!("reading {}", p.display()))
                        })
                        .transpose()?;
                    let sc = cluster_scenario(cluster, conf_text)?;
                    let file = write_scenario
                        .as_ref()
                        .map_or("<cluster snapshot>".to_string(), |p| {
                            p.display().to_string()
                        });
                    (sc, file)
                }
                Some(path) => (Scenario::load(path)?, path.display().to_string()),
                None => (
                    Scenario::parse(DEFAULT_SCENARIO, "<bundled default scenario>")?,
                    "<bundled default scenario>".to_string(),
                ),
            };
            if let Some(s) = seed {
                sc.seed = s;
            }
            sc.predict_start |= predict_start;
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
            if let Some(path) = &write_scenario {
                let text = sc.to_yaml().map_err(anyhow::Error::msg)?;
                std::fs::write(path, text)
                    .with_context(|| format!("writing the scenario to {}", path.display()))?;
                eprintln!("scenario written to {}", path.display());
            }
            simulate(sc, &file, output, plot_file, max_jobs)
        }
    }
}

/// The scenario of the cluster `cluster` reaches, as it is now (see
/// `kube::cluster_snapshot`); what it leaves out is listed on stderr.
fn cluster_scenario(cluster: ClusterArgs, config: Option<String>) -> anyhow::Result<Scenario> {
    let ClusterArgs {
        kubeconfig,
        context,
        master,
        scheduler_names,
    } = cluster;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let now = rust_batch::kube::driver::now_ms();
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(now.max(0) as u64);
    let at = humantime::format_rfc3339_seconds(at).to_string();
    let captured = runtime.block_on(async {
        let client = kube_client(kubeconfig.as_deref(), context, master.as_deref()).await?;
        let opts = rust_batch::kube::cluster_snapshot::SnapshotOptions {
            scheduler_names,
            capture: rust_batch::sim::capture::CaptureOptions {
                now,
                name: format!("cluster snapshot {at}"),
                description: format!(
                    "Taken by `rust-batch simulate --from-cluster` at {at} (t=0). Pods \
                     running then are pinned to their nodes; their runtime is their \
                     estimate (else their queue's default), counted from their start."
                ),
                config,
            },
        };
        rust_batch::kube::cluster_snapshot::take(&client, opts)
            .await
            .context("taking a snapshot of the cluster")
    })?;
    for s in &captured.skipped {
        eprintln!("skipped: {}: {}", s.object, s.reason);
    }
    for n in &captured.notes {
        eprintln!("note: {n}");
    }
    let sc = captured.scenario;
    eprintln!(
        "snapshot: nodes {}, queues {}, gangs {}, other pods {}, skipped {}",
        sc.node_groups.iter().map(|g| g.count).sum::<u32>(),
        sc.queues.len(),
        sc.jobs.len(),
        sc.other_pods.len(),
        captured.skipped.len()
    );
    // What is written must load: checked as `simulate FILE` will read it.
    let text = sc.to_yaml().map_err(anyhow::Error::msg)?;
    Scenario::parse(&text, "<cluster snapshot>")
        .context("the snapshot does not make a valid scenario (a bug: please report it)")
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
        predict_start,
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
            let address = listener.local_addr().unwrap_or(address);
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
            predict_start,
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

/// Prints a table, each line cut to the terminal's width when stdout is one (a table of
/// thousands of gangs with long reasons would wrap into noise); in full otherwise.
fn print_capped(table: &str) {
    let term = console::Term::stdout();
    match term.is_term().then(|| term.size_checked()).flatten() {
        Some((_, width)) => {
            for line in table.lines() {
                println!("{}", console::truncate_str(line, usize::from(width), "…"));
            }
        }
        None => print!("{table}"),
    }
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
        Output::Table => print_capped(&report.to_table(max_jobs)),
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
