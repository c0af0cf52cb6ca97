//! The `gssp` command line.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use gssp::config::{Config, SyncMode};
use gssp::metrics::RunDir;

#[derive(Parser)]
#[command(name = "gssp", version, about = "Grouping Stale Synchronous Parallel training over MPI")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Train a model as the config says (run under mpirun for the distributed modes).
    Train {
        /// TOML config file (see configs/example.toml).
        #[arg(long)]
        config: PathBuf,
        /// Override a config key, e.g. --set run.epochs=2 --set data.dir=/scratch/mnist.
        #[arg(long = "set", value_name = "KEY=VALUE")]
        overrides: Vec<String>,
        /// Run directory (default: runs/<run.name>).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Benchmarks.
    Bench {
        #[command(subcommand)]
        which: BenchCommand,
    },
}

#[derive(Subcommand)]
enum BenchCommand {
    /// Images per second of one process's training step.
    Step {
        #[arg(long, default_value = "lenet5")]
        model: String,
        #[arg(long, default_value_t = 64)]
        batch: usize,
        #[arg(long, default_value_t = 1)]
        threads: usize,
        /// Seconds to measure for.
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
    },
}

/// Exit code for bad input (config, data, command line), as clap uses.
const EXIT_USAGE: u8 = 2;

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let cli = Cli::parse();
    match cli.command {
        Command::Train { config, overrides, out } => train(&config, &overrides, out),
        Command::Bench { which: BenchCommand::Step { model, batch, threads, seconds } } => {
            report(gssp::bench::step(&model, batch, threads, seconds).map(|_| ()))
        }
    }
}

fn train(config: &std::path::Path, overrides: &[String], out: Option<PathBuf>) -> ExitCode {
    let cfg = match Config::load(config, overrides).and_then(|c| c.validate_for_world(1).map(|_| c)) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    if cfg.sync.mode != SyncMode::Single {
        eprintln!("error: sync.mode: distributed modes need mpirun, got {:?}", cfg.sync.mode);
        return ExitCode::from(EXIT_USAGE);
    }
    let dir = out.unwrap_or_else(|| PathBuf::from("runs").join(&cfg.run.name));
    report((|| {
        let run = RunDir::create(&dir)?;
        run.write_text("config.toml", &cfg.to_toml_string())?;
        let s = gssp::train::run_single(&cfg, &run)?;
        println!(
            "{} on {}: test accuracy {:.2}% after {:.2} epochs, {:.1} s, {:.0} images/s; run directory {}",
            s.model,
            s.dataset,
            100.0 * s.final_test_accuracy,
            s.epochs,
            s.wall_s,
            s.images_per_s,
            dir.display()
        );
        Ok(())
    })())
}

fn report(r: anyhow::Result<()>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(EXIT_USAGE)
        }
    }
}
