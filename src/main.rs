use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};

use rust_batch::conf::SchedulerConf;
use rust_batch::sim::{plot, Scenario, Simulation, DEFAULT_SCENARIO};

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
        /// Also write an SVG plot (utilization, queue shares, job timeline) to FILE.
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
        /// Binds in flight at once.
        #[arg(long, default_value_t = 16)]
        bind_concurrency: usize,
        /// Address for /metrics, /healthz and /readyz, or "off".
        #[arg(long, default_value = "0.0.0.0:8080")]
        http_address: String,
    },
    /// Print the CustomResourceDefinitions rust-batch uses (Volcano's PodGroup and Queue),
    /// or write them into a directory.
    Crds {
        #[arg(long, value_name = "DIR")]
        write: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,kube=warn")),
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
        Command::Crds { write: None } => {
            print!("{}", rust_batch::kube::crd::crd_yaml());
            Ok(ExitCode::SUCCESS)
        }
        Command::Crds { write: Some(dir) } => {
            rust_batch::kube::crd::write_crds(&dir)
                .with_context(|| format!("writing CRDs into {}", dir.display()))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Run {
            scheduler_names,
            scheduler_conf,
            schedule_period,
            bind_concurrency,
            http_address,
        } => {
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
            for w in &conf.warnings {
                tracing::warn!("{}: {w}", conf.source);
            }
            let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
            runtime.block_on(async {
                let client = kube::Client::try_default().await.context("loading the kubeconfig")?;
                let opts = rust_batch::kube::driver::DriverOptions {
                    scheduler_names,
                    schedule_period,
                    conf,
                    conf_path: scheduler_conf,
                    bind_concurrency,
                    http_address,
                };
                tokio::select! {
                    r = rust_batch::kube::driver::run(client, opts) => r.map_err(anyhow::Error::from),
                    _ = tokio::signal::ctrl_c() => Ok(()),
                }
            })?;
            Ok(ExitCode::SUCCESS)
        }
        Command::CheckConfig { file } => {
            let conf = SchedulerConf::load(&file)?;
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
                SchedulerConf::parse(&text, &path.display().to_string())?;
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
