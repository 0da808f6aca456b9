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
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
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
