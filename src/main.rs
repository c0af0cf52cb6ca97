//! The `gssp` command line.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use gssp::checkpoint::{check_resume_overrides, Resume};
use gssp::comm::{Collectives, Comm, FatalOnAll};
use gssp::config::modes::Roles;
use gssp::config::Config;
use gssp::telemetry::{stderr_line, RunDir};

#[derive(Parser)]
#[command(
    name = "gssp",
    version,
    about = "Grouping Stale Synchronous Parallel training over MPI"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Train a model as the config says; distributed modes run under mpirun/srun.
    Train {
        /// TOML config file (see configs/example.toml).
        #[arg(long, required_unless_present = "resume")]
        config: Option<PathBuf>,
        /// Continue the run in this directory from its newest checkpoint, with its config
        /// (`--set` may change run.epochs, run.time_budget_s and logging only) and the same
        /// number of ranks.
        #[arg(long, value_name = "RUN_DIR", conflicts_with_all = ["config", "out"])]
        resume: Option<PathBuf>,
        /// Override a config key, e.g. --set run.epochs=2 --set data.dir=/scratch/mnist.
        #[arg(long = "set", value_name = "KEY=VALUE")]
        overrides: Vec<String>,
        /// Run directory (default: runs/<run.name>).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Train on a simulated clock in this process instead of under mpirun: every rank's
        /// real arithmetic, its time from the emulated cluster (docs/scaling.md); the run
        /// directory's times are simulated seconds.
        #[arg(long, conflicts_with = "resume")]
        simulate: bool,
        /// --simulate: the run's ranks, servers and workers (default: the workers of
        /// `[heterogeneity]` and the mode's servers).
        #[arg(long, requires = "simulate")]
        ranks: Option<usize>,
        /// --simulate: microseconds between the starts of workers released at one moment
        /// (an oversubscribed node's queue for its cores; 0 on a cluster).
        #[arg(long, requires = "simulate", default_value_t = 0.0)]
        burst_us: f64,
    },
    /// Write the training-set indices of every batch a single-process run of the config
    /// trains on, one batch a line, so that another framework can train on the same
    /// sequence (scripts/pytorch_reference.py --batches).
    Batches {
        /// TOML config file.
        #[arg(long)]
        config: PathBuf,
        /// Override a config key, e.g. --set run.seed=2.
        #[arg(long = "set", value_name = "KEY=VALUE")]
        overrides: Vec<String>,
        /// Epochs of batches to write (default: the config's run.epochs).
        #[arg(long)]
        epochs: Option<f64>,
        /// The file to write (default: standard output).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Evaluate an exported model (a run's model.safetensors) on the config's test set, in
    /// this process (no MPI).
    Eval {
        /// The safetensors file (`<run directory>/model.safetensors`).
        #[arg(long)]
        model: PathBuf,
        /// The config it was trained with (`<run directory>/config.toml`): model, width,
        /// dataset and test set.
        #[arg(long)]
        config: PathBuf,
        /// Override a config key, e.g. --set data.dir=/scratch/mnist.
        #[arg(long = "set", value_name = "KEY=VALUE")]
        overrides: Vec<String>,
        /// Print the result as one JSON object instead of a sentence.
        #[arg(long)]
        json: bool,
    },
    /// Compare finished runs: report.md with a table and PNG/SVG plots.
    Report {
        /// Run directories (each with summary.json, eval.csv, rank-*.csv; layout.json for
        /// distributed modes).
        #[arg(required = true, value_name = "RUN_DIR")]
        runs: Vec<PathBuf>,
        /// Where report.md and the plots go.
        #[arg(long, default_value = "runs/report")]
        out: PathBuf,
        /// Run the speed-up column is against, by name (the directory's name; default: the
        /// first run).
        #[arg(long)]
        baseline: Option<String>,
        /// Worker-timeline window, START:END in seconds (default: 2 s mid-run).
        #[arg(long, value_name = "START:END", value_parser = gssp::tools::report::parse_window)]
        window: Option<(f64, f64)>,
        /// Time at which the "accuracy at budget" column is read, seconds (default: the
        /// shortest run's wall time).
        #[arg(long)]
        budget_s: Option<f64>,
        /// Also write each run's whole timeline as trace-RUN.json (Chrome trace-event
        /// format: open it in https://ui.perfetto.dev or chrome://tracing).
        #[arg(long)]
        trace: bool,
    },
    /// Predict every sync mode's timing on a cluster of any size (a discrete-event
    /// simulation; no MPI): images/s, waits, staleness, server load and bytes, and the gssp
    /// group count to use.
    Plan {
        /// TOML config: model, batch, compression, [cluster] figures and, unless
        /// --speeds or --tiers say otherwise, [heterogeneity] speeds.
        #[arg(long)]
        config: PathBuf,
        /// Seconds per iteration of each worker (comma-separated), instead of the config's
        /// tiers.
        #[arg(long, value_delimiter = ',', conflicts_with = "tiers")]
        speeds: Option<Vec<f64>>,
        /// Speed tiers FACTOR:WORKERS,... in units of --unit-s, e.g. 1:250,2:250,3:250,4:250.
        #[arg(long, value_parser = gssp::tools::plan::workers::Tiers::parse)]
        tiers: Option<gssp::tools::plan::workers::Tiers>,
        /// Total workers: the tiers scaled to it in the same proportions.
        #[arg(long)]
        workers: Option<usize>,
        /// A 1x worker's seconds per iteration (default: heterogeneity.unit_s).
        #[arg(long)]
        unit_s: Option<f64>,
        /// Model parameters (default: the config's model, built without data).
        #[arg(long)]
        params: Option<usize>,
        /// gssp is simulated with 1..=N groups (default: sync.gssp.max_groups).
        #[arg(long, conflicts_with = "groups")]
        max_groups: Option<usize>,
        /// gssp is simulated with these group counts instead, e.g. 1,4,16,64.
        #[arg(long, value_delimiter = ',')]
        groups: Vec<usize>,
        /// ssp's staleness bound (default: the config's sync.ssp.staleness).
        #[arg(long)]
        ssp_staleness: Option<usize>,
        /// Simulated seconds (default: 100 iterations of the slowest worker).
        #[arg(long)]
        seconds: Option<f64>,
        /// Print the plan as JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Override a config key, e.g. --set compression.ratio=0.01.
        #[arg(long = "set", value_name = "KEY=VALUE")]
        overrides: Vec<String>,
    },
    /// Where the ranks of a config's job sit (cluster.nodes, cluster.distribution) and what
    /// each does there, with the sbatch/srun/mpirun options that place them so.
    Placement {
        /// TOML config file.
        #[arg(long)]
        config: PathBuf,
        /// The job's world size (default: the config's `# ranks: N` line).
        #[arg(long)]
        ranks: Option<usize>,
        /// What to print: the table, or one value for a script.
        #[arg(long, value_enum, default_value = "table")]
        print: gssp::tools::placement::Print,
        /// Override a config key, e.g. --set cluster.nodes=32.
        #[arg(long = "set", value_name = "KEY=VALUE")]
        overrides: Vec<String>,
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
        /// seq2seq: the Multi30k folder (train.de, train.en); default ../shared/data/multi30k.
        #[arg(long)]
        data: Option<PathBuf>,
        /// seq2seq: write the pair indices of each timed batch here, one line per batch, for
        /// `scripts/pytorch_reference.py --model seq2seq --batches FILE`.
        #[arg(long)]
        batches_out: Option<PathBuf>,
        /// `cpu`, or `cuda`: the CUDA backend on this node's GPU (lenet5, resnet18, vgg19
        /// and seq2seq at width 1; `--threads` does not apply).
        #[arg(long, default_value = "cpu")]
        device: String,
        /// CPU 3x3 convolutions: `mixed` (Winograd F(4x4,3x3) on planes of 8 rows and more,
        /// F(2x2,3x3) below: the default), `f2` (F(2x2,3x3) on every plane), `f4`
        /// (F(4x4,3x3) on every plane where it multiplies less) or `off` (im2col and GEMM),
        /// to compare.
        #[arg(long, default_value = "mixed")]
        winograd: String,
    },
    /// A parameter server's time per push (check, SGD step, reply) against the memory
    /// traffic a push must cause at this machine's copy bandwidth.
    Push {
        #[arg(long, default_value = "resnet18")]
        model: String,
        /// Model width (1: the paper's ResNet-18, 11,173,962 parameters).
        #[arg(long, default_value_t = 1.0)]
        width: f64,
        /// The server's threads (`run.threads`).
        #[arg(long, default_value_t = 1)]
        threads: usize,
        /// Seconds to measure for.
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
        /// Also a whole push between two ranks (run under `mpirun -n 2`).
        #[arg(long)]
        mpi: bool,
    },
    /// Exact top-k selection against one pass summing the same array.
    Topk {
        #[arg(long, default_value_t = 11_200_000)]
        n: usize,
        #[arg(long, default_value_t = 0.01)]
        ratio: f64,
        #[arg(long, default_value_t = 11)]
        reps: usize,
        /// `cpu` (against one summing pass), or `cuda` (on the GPU, against a
        /// device-to-device copy of the same array).
        #[arg(long, default_value = "cpu")]
        device: String,
    },
    /// The baselines of one config, each its own mpirun job, in one table.
    Modes {
        #[arg(long)]
        config: PathBuf,
        /// Workers (bsp/asp/ssp add one server rank; allreduce has none).
        #[arg(long, default_value_t = 8)]
        workers: usize,
        #[arg(long, value_delimiter = ',', default_value = "bsp,asp,ssp,allreduce")]
        modes: Vec<String>,
        #[arg(long = "set", value_name = "KEY=VALUE")]
        overrides: Vec<String>,
        #[arg(long, default_value = "runs/bench-modes")]
        out: PathBuf,
    },
    /// `bench paper` at several cluster sizes, one config each, in one table (scale.json,
    /// scale.md).
    Scale {
        /// Configs, one per size (default: configs/scale_lenet5_mnist_{8,16,32,64}.toml).
        configs: Vec<PathBuf>,
        /// Training time of each mode, seconds.
        #[arg(long, default_value_t = 60.0)]
        budget_s: f64,
        /// Run every mode once per seed (comma-separated) and report medians; default: once,
        /// with each config's seed.
        #[arg(long, value_delimiter = ',')]
        seeds: Vec<u64>,
        /// Run only these variants (comma-separated, as `bench paper --modes`); default: all.
        #[arg(long, value_delimiter = ',')]
        modes: Vec<String>,
        /// The variants to run: each a name and its --set overrides (TOML `[[variant]]`).
        #[arg(long, default_value = gssp::tools::bench::variants::DEFAULT_FILE)]
        variants: PathBuf,
        #[arg(long = "set", value_name = "KEY=VALUE")]
        overrides: Vec<String>,
        /// Run nothing: rebuild the table and plot from each size's `bench.json` in --out.
        #[arg(long)]
        report_only: bool,
        /// Run nothing: pool each size's `bench.json` from this earlier --out directory
        /// (repeatable; their seeds are combined) into the table and plot in --out.
        #[arg(long, value_name = "DIR")]
        from: Vec<PathBuf>,
        #[arg(long, default_value = "runs/bench-scale")]
        out: PathBuf,
        #[command(flatten)]
        clock: ClockArgs,
    },
    /// A figure of the docs drawn again from `bench paper` / `bench scale` tables (their
    /// `bench.json`); runs nothing.
    Plot(gssp::tools::bench::plot::Options),
    /// `gssp plan`'s simulator against finished runs: each run's measured worker speeds and
    /// server time per push in, its images/s and wait fraction predicted and compared.
    Plan {
        /// Run directories (config.toml, summary.json, layout.json, rank CSVs).
        #[arg(required = true, value_name = "RUN_DIR")]
        runs: Vec<PathBuf>,
        /// The measuring machine's per-message latency, microseconds.
        #[arg(long, default_value_t = 1.0)]
        latency_us: f64,
        /// The measuring machine's link bandwidth, Gbit/s.
        #[arg(long, default_value_t = 80.0)]
        bandwidth_gbps: f64,
        /// The measuring machine's spacing of the starts of workers released at once,
        /// microseconds (0 where every rank has its own cores).
        #[arg(long, default_value_t = 0.0)]
        burst_us: f64,
        /// Also write the runs' inputs and measured figures to this JSON fixture.
        #[arg(long)]
        save: Option<PathBuf>,
    },
    /// Runs every config as its header says and checks it reaches its own target accuracy.
    Configs {
        /// Configs to check (default: every configs/*.toml).
        configs: Vec<PathBuf>,
        #[arg(long, default_value = "runs/bench-configs")]
        out: PathBuf,
    },
    /// The paper's LeNet-5/MNIST experiment: 16 workers in four speed tiers, every mode.
    Paper {
        #[arg(long, default_value = "configs/paper_lenet5_mnist.toml")]
        config: PathBuf,
        /// Training time of each mode, seconds.
        #[arg(long, default_value_t = 75.0)]
        budget_s: f64,
        /// Run every mode once per seed (comma-separated) and report medians; default: once,
        /// with the config's seed.
        #[arg(long, value_delimiter = ',')]
        seeds: Vec<u64>,
        /// Run only these variants (comma-separated, e.g. asp,gssp-gdtopk); default: all.
        #[arg(long, value_delimiter = ',')]
        modes: Vec<String>,
        /// The variants to run: each a name and its --set overrides (TOML `[[variant]]`).
        #[arg(long, default_value = gssp::tools::bench::variants::DEFAULT_FILE)]
        variants: PathBuf,
        #[arg(long = "set", value_name = "KEY=VALUE")]
        overrides: Vec<String>,
        #[arg(long, default_value = "runs/bench-paper")]
        out: PathBuf,
        #[command(flatten)]
        clock: ClockArgs,
    },
}

/// Which clock a bench trains its jobs on.
#[derive(Debug, Clone, clap::Args)]
struct ClockArgs {
    /// Train every job on the simulated clock, one process each, instead of under mpirun
    /// (`gssp train --simulate`): the same configs, variants, seeds and budget, times in
    /// simulated seconds.
    #[arg(long)]
    simulate: bool,
    /// --simulate: microseconds between the starts of workers released at one moment, as
    /// `gssp train --burst-us`.
    #[arg(long, requires = "simulate", default_value_t = 0.0)]
    burst_us: f64,
    /// --simulate: how many jobs train at once (default: one a core). A simulated job's
    /// times do not depend on what runs beside it, and each takes one core.
    #[arg(long, requires = "simulate")]
    jobs: Option<usize>,
}

impl ClockArgs {
    fn clock(&self) -> gssp::tools::bench::jobs::Clock {
        match self.simulate {
            true => gssp::tools::bench::jobs::Clock::Simulated {
                burst_s: self.burst_us * 1e-6,
                jobs: self
                    .jobs
                    .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())),
            },
            false => gssp::tools::bench::jobs::Clock::Wall,
        }
    }
}

/// Exit code for bad input (config, data, command line), as clap uses.
const EXIT_USAGE: u8 = 2;

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    gssp::compute::backend::cpu::blas_core::reexec_with_better_kernels();
    let cli = Cli::parse();
    match cli.command {
        Command::Train {
            config,
            resume,
            overrides,
            out,
            simulate,
            ranks,
            burst_us,
        } => match (simulate, config) {
            (true, Some(config)) => train_simulated(&config, &overrides, out, (ranks, burst_us)),
            (_, config) => train(config.as_deref(), resume.as_deref(), &overrides, out),
        },
        Command::Batches {
            config,
            overrides,
            epochs,
            out,
        } => batches(&config, &overrides, epochs, out.as_deref()),
        Command::Eval {
            model,
            config,
            overrides,
            json,
        } => eval(&model, &config, &overrides, json),
        Command::Report {
            runs,
            out,
            baseline,
            window,
            budget_s,
            trace,
        } => report(
            gssp::tools::report::run(&gssp::tools::report::Options {
                runs,
                out,
                baseline,
                window,
                budget_s,
                trace,
            })
            .map(|p| println!("report: {}", p.display())),
        ),
        Command::Bench { which } => report(bench(which)),
        Command::Plan {
            config,
            speeds,
            tiers,
            workers,
            unit_s,
            params,
            max_groups,
            groups,
            ssp_staleness,
            seconds,
            json,
            overrides,
        } => report(plan(
            &config,
            &overrides,
            gssp::tools::plan::workers::SpeedSource {
                speeds,
                tiers: tiers.map(|t| t.0),
                workers,
                unit_s,
            },
            (
                params,
                (!groups.is_empty())
                    .then_some(groups)
                    .or(max_groups.map(|m| (1..=m).collect())),
                ssp_staleness,
                seconds,
            ),
            json,
        )),
        Command::Placement {
            config,
            ranks,
            print,
            overrides,
        } => report(placement(&config, &overrides, ranks, print)),
    }
}

/// `gssp placement`: `config`'s job on `ranks` ranks (default: its `# ranks: N`), printed.
fn placement(
    config: &Path,
    overrides: &[String],
    ranks: Option<usize>,
    print: gssp::tools::placement::Print,
) -> anyhow::Result<()> {
    let cfg = Config::load(config, overrides)?;
    cfg.validate()?;
    let world = match ranks {
        Some(0) => anyhow::bail!("--ranks must be at least 1"),
        Some(n) => n,
        None => {
            let text = std::fs::read_to_string(config)
                .with_context(|| format!("reading {}", config.display()))?;
            gssp::tools::bench::configs::declared_ranks(&text)
                .map_err(|e| anyhow::anyhow!("{}: {e}", config.display()))?
                .unwrap_or(1)
        }
    };
    let text = gssp::tools::placement::describe(&cfg, world, print)
        .map_err(|e| anyhow::anyhow!("{}: {e}", config.display()))?;
    // A closed pipe (`| head`) ends the output, not the program with a panic.
    let _ = writeln!(std::io::stdout().lock(), "{}", text.trim_end());
    Ok(())
}

/// The config of a run, and the checkpoint it resumes from (`--resume`): the run's config
/// as the checkpoint recorded it, with the allowed overrides.
fn train_config(
    config: Option<&Path>,
    resume: Option<&Path>,
    overrides: &[String],
) -> anyhow::Result<(Config, Option<Resume>)> {
    let Some(run_dir) = resume else {
        let path = config.ok_or_else(|| anyhow::anyhow!("--config or --resume is required"))?;
        return Ok((Config::load(path, overrides)?, None));
    };
    check_resume_overrides(overrides).map_err(anyhow::Error::msg)?;
    let resume = Resume::open(run_dir)?;
    let cfg = Config::from_str_with_overrides(
        &resume.manifest.config,
        &resume.manifest_path().display().to_string(),
        overrides,
    )?;
    Ok((cfg, Some(resume)))
}

/// `gssp train --simulate`: the config's run on the simulated clock, in this process.
fn train_simulated(
    config: &Path,
    overrides: &[String],
    out: Option<PathBuf>,
    (ranks, burst_us): (Option<usize>, f64),
) -> ExitCode {
    let result = (|| -> anyhow::Result<()> {
        let cfg = Config::load(config, overrides)?;
        let ranks = match ranks {
            Some(r) => r,
            None => {
                gssp::tools::bench::variants::configured_workers(config, overrides)?
                    + cfg.num_servers()
            }
        };
        let opts = gssp::tools::simulate::Options {
            ranks,
            burst_s: burst_us * 1e-6,
        };
        if let Some(why) = gssp::tools::simulate::refusal(&cfg, &opts) {
            anyhow::bail!("--simulate: {why}");
        }
        cfg.validate_for_world(ranks)?;
        let dir = out.unwrap_or_else(|| PathBuf::from("runs").join(&cfg.run.name));
        let run = RunDir::create(&dir)?;
        run.write_text("config.toml", &cfg.to_toml_string())?;
        let s = gssp::tools::simulate::train(&cfg, &run, &opts)?;
        println!(
            "{} (simulated clock); run directory {}",
            headline(&s),
            dir.display()
        );
        Ok(())
    })();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            stderr_line(&format!("error: {e:#}"));
            ExitCode::from(EXIT_USAGE)
        }
    }
}

/// Loads and checks the config (and the checkpoint it resumes from) on every rank, each
/// for itself, so that all fail together where any does; rank 0 prints. Then runs the
/// configured mode.
fn train(
    config: Option<&Path>,
    resume: Option<&Path>,
    overrides: &[String],
    out: Option<PathBuf>,
) -> ExitCode {
    let comm = match Comm::init() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    comm.install_panic_abort();
    let rank = comm.rank();
    let loaded = train_config(config, resume, overrides).and_then(|(mut c, mut r)| {
        match r.as_mut() {
            // How the run fits this world is checkpoint policy (gssp::checkpoint::fit).
            Some(r) => r
                .fit_to_world(&mut c, comm.size())
                .map_err(anyhow::Error::msg)?,
            None => c.validate_for_world(comm.size())?,
        }
        Ok((c, r))
    });
    // Every rank reads the config and the checkpoint for itself: on nodes that do not all
    // see the same files, some may fail where others do not, and all must stop together.
    let (cfg, resume) = match comm.fatal_on_all(loaded.map_err(|e| format!("{e:#}"))) {
        Ok(c) => c,
        Err(f) => {
            report_fatal(&f, rank, comm.size());
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let dir = match (resume.as_ref(), out) {
        (Some(r), _) => r.run_dir.clone(),
        (None, Some(out)) => out,
        (None, None) => PathBuf::from("runs").join(&cfg.run.name),
    };
    let result = (|| -> anyhow::Result<()> {
        let run = open_run_dir(&dir, resume.as_ref(), rank)?;
        if rank == 0 {
            run.write_text("config.toml", &cfg.to_toml_string())?;
        }
        let summary = if cfg.sync.strategy().roles() == Roles::Single {
            Some(gssp::runtime::single::run_single(
                &cfg,
                &run,
                resume.as_ref(),
            )?)
        } else {
            gssp::runtime::run::run(&comm, &cfg, &run, resume.as_ref())?
        };
        if let Some(s) = summary {
            println!("{}; run directory {}", headline(&s), dir.display());
        }
        Ok(())
    })();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.downcast_ref::<FatalOnAll>().is_some() => {
            if let Some(f) = e.downcast_ref::<FatalOnAll>() {
                report_fatal(f, rank, comm.size());
            }
            ExitCode::from(EXIT_USAGE)
        }
        Err(e) => {
            stderr_line(&format!("error: rank {rank}: {e:#}"));
            if comm.size() > 1 {
                // Other ranks may be blocked waiting for this one: end the whole job.
                comm.abort(EXIT_USAGE as i32);
            }
            ExitCode::from(EXIT_USAGE)
        }
    }
}

/// The run directory `dir`: a new one, or the one a run resumes from (its logs cut to the
/// checkpoint's clock).
fn open_run_dir(dir: &Path, resume: Option<&Resume>, rank: usize) -> anyhow::Result<RunDir> {
    let Some(r) = resume else {
        return RunDir::create(dir);
    };
    if rank == 0 {
        log::info!(
            "resuming {} from checkpoint {} (training clock {:.1} s, epoch {:.3})",
            dir.display(),
            r.dir.display(),
            r.manifest.time_s,
            r.manifest.epoch
        );
    }
    RunDir::resume(dir, r.manifest.time_s)
}

/// The one line a finished run prints: mode, model, data, quality, epochs, time, speed.
fn headline(s: &gssp::telemetry::Summary) -> String {
    let (quality, unit) = match (s.final_test_perplexity, s.final_bleu) {
        (Some(p), Some(b)) => (format!("test perplexity {p:.2}, BLEU {b:.2}"), "sentences"),
        _ => (
            format!("test accuracy {:.2}%", 100.0 * s.final_test_accuracy),
            "images",
        ),
    };
    format!(
        "{} {} on {}: {quality} after {:.2} epochs, {:.1} s, {:.0} {unit}/s",
        s.mode, s.model, s.dataset, s.epochs, s.wall_s, s.images_per_s
    )
}

/// Prints an error every rank knows of ([`FatalOnAll`]): the ranks that failed say why,
/// each naming itself, or rank 0 alone when all `size` ranks failed alike; then every rank
/// exits without aborting the job.
fn report_fatal(f: &FatalOnAll, rank: usize, size: usize) {
    let all_failed = f.failed_ranks as usize == size;
    match (&f.local, all_failed) {
        (Some(m), true) if rank == 0 => stderr_line(&format!("error: {m}")),
        (Some(m), false) => stderr_line(&format!("error: rank {rank}: {m}")),
        _ => {}
    }
}

/// `gssp eval`: one process, no MPI initialisation (like `report`), so it runs without
/// mpirun on a machine that only has the file, the config and the test set.
fn batches(
    config: &Path,
    overrides: &[String],
    epochs: Option<f64>,
    out: Option<&Path>,
) -> ExitCode {
    let cfg = match Config::load(config, overrides).and_then(|c| c.validate().map(|_| c)) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let epochs = epochs.unwrap_or(cfg.run.epochs);
    if !(epochs.is_finite() && epochs > 0.0) {
        eprintln!("error: --epochs: must be > 0 (or run.epochs > 0 in the config), got {epochs}");
        return ExitCode::from(EXIT_USAGE);
    }
    report((|| -> anyhow::Result<()> {
        let corpus = gssp::compute::workload::Corpus::load(&cfg.data, cfg.run.seed)?;
        let order = gssp::compute::workload::step::batch_order(&cfg, &corpus, epochs)?;
        let mut text = String::new();
        for batch in &order {
            let line: Vec<String> = batch.iter().map(|i| i.to_string()).collect();
            text.push_str(&line.join(" "));
            text.push('\n');
        }
        match out {
            Some(path) => std::fs::write(path, text)
                .with_context(|| format!("--out {}: cannot write", path.display()))?,
            None => print!("{text}"),
        }
        Ok(())
    })())
}

fn eval(model: &Path, config: &Path, overrides: &[String], json: bool) -> ExitCode {
    let cfg = match Config::load(config, overrides).and_then(|c| c.validate().map(|_| c)) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    report((|| -> anyhow::Result<()> {
        let r = gssp::runtime::single::evaluate_exported(&cfg, model)?;
        if json {
            println!("{}", serde_json::to_string(&r)?);
        } else {
            let quality = match r.test_perplexity {
                Some(p) => format!(
                    "test perplexity {p:.2}, BLEU {:.2}, next-token accuracy {:.2}% ({} sentence pairs)",
                    r.bleu.unwrap_or(f64::NAN),
                    100.0 * r.test_accuracy,
                    r.test_samples
                ),
                None => format!(
                    "test accuracy {:.2}% ({} images)",
                    100.0 * r.test_accuracy,
                    r.test_samples
                ),
            };
            println!(
                "{} {} on {}: {quality}, test loss {:.4}",
                r.model_file, r.model, r.dataset, r.test_loss
            );
        }
        Ok(())
    })())
}

#[cfg(feature = "cuda")]
fn gpu_step(model: &str, batch: usize, seconds: f64, data: Option<&Path>) -> anyhow::Result<()> {
    if model == "seq2seq" {
        let data = data.unwrap_or(Path::new(gssp::tools::bench::step::DEFAULT_MULTI30K));
        gssp::tools::bench::gpu::seq2seq_step(data, batch, seconds).map(|_| ())
    } else {
        gssp::tools::bench::gpu::image_step(model, batch, seconds).map(|_| ())
    }
}

#[cfg(feature = "cuda")]
fn gpu_topk(n: usize, ratio: f64, reps: usize) -> anyhow::Result<()> {
    gssp::tools::bench::gpu::topk(n, ratio, reps).map(|_| ())
}

#[cfg(not(feature = "cuda"))]
fn gpu_step(_: &str, _: usize, _: f64, _: Option<&Path>) -> anyhow::Result<()> {
    anyhow::bail!(
        "--device cuda: this build has no CUDA support (built without the `cuda` feature)"
    )
}

#[cfg(not(feature = "cuda"))]
fn gpu_topk(_: usize, _: f64, _: usize) -> anyhow::Result<()> {
    anyhow::bail!(
        "--device cuda: this build has no CUDA support (built without the `cuda` feature)"
    )
}

/// `bench step --winograd`: which algorithm the CPU's 3x3 convolutions use.
fn set_cpu_convolutions(choice: &str) -> anyhow::Result<()> {
    use gssp::compute::backend::cpu::{set_winograd, set_winograd_tilings, WinogradTilings};
    let (winograd, tilings) = match choice {
        "mixed" => (true, WinogradTilings::Mixed),
        "f2" => (true, WinogradTilings::Two),
        "f4" => (true, WinogradTilings::Four),
        "off" => (false, WinogradTilings::Mixed),
        other => anyhow::bail!("--winograd: must be mixed, f2, f4 or off, got {other}"),
    };
    set_winograd(winograd);
    set_winograd_tilings(tilings);
    Ok(())
}

fn bench(which: BenchCommand) -> anyhow::Result<()> {
    use gssp::tools::bench;
    match which {
        BenchCommand::Step {
            model,
            batch,
            threads,
            seconds,
            data,
            batches_out,
            device,
            winograd,
        } => match device.as_str() {
            "cpu" => {
                set_cpu_convolutions(&winograd)?;
                bench::step(
                    &model,
                    batch,
                    threads,
                    seconds,
                    data.as_deref(),
                    batches_out.as_deref(),
                )
                .map(|_| ())
            }
            "cuda" => gpu_step(&model, batch, seconds, data.as_deref()),
            other => anyhow::bail!("--device: must be cpu or cuda, got {other}"),
        },
        BenchCommand::Push {
            model,
            width,
            threads,
            seconds,
            mpi,
        } => {
            let params = bench::push::model_params(&model, width)?;
            if mpi {
                return bench::push_mpi::run(params, threads, seconds);
            }
            let figures = bench::push::measure(params, threads, seconds)?;
            bench::push::print(&figures);
            Ok(())
        }
        BenchCommand::Topk {
            n,
            ratio,
            reps,
            device,
        } => match device.as_str() {
            "cpu" => bench::topk(n, ratio, reps).map(|_| ()),
            "cuda" => gpu_topk(n, ratio, reps),
            other => anyhow::bail!("--device: must be cpu or cuda, got {other}"),
        },
        BenchCommand::Modes {
            config,
            workers,
            modes,
            overrides,
            out,
        } => bench::jobs::modes(&config, workers, &modes, &overrides, &out).map(|_| ()),
        BenchCommand::Configs { configs, out } => {
            let configs = if configs.is_empty() {
                shipped_configs()?
            } else {
                configs
            };
            bench::configs::check_all(&configs, &out).map(|_| ())
        }
        BenchCommand::Paper {
            config,
            budget_s,
            seeds,
            modes,
            variants,
            overrides,
            out,
            clock,
        } => {
            let what = (config.as_path(), variants.as_path());
            let budget = (budget_s, clock.clock());
            bench::jobs::paper(what, budget, (&seeds, &modes), &overrides, &out).map(|_| ())
        }
        BenchCommand::Plot(opts) => {
            for line in bench::plot::plot(&opts)? {
                println!("{line}");
            }
            Ok(())
        }
        BenchCommand::Plan {
            runs,
            latency_us,
            bandwidth_gbps,
            burst_us,
            save,
        } => {
            let machine = gssp::tools::plan::measured::Machine {
                latency_s: latency_us * 1e-6,
                bytes_per_s: bandwidth_gbps * 1e9 / 8.0,
                burst_s: burst_us * 1e-6,
            };
            validate_plan(&runs, machine, save.as_deref())
        }
        BenchCommand::Scale {
            configs,
            budget_s,
            seeds,
            modes,
            variants,
            overrides,
            report_only,
            from,
            out,
            clock,
        } => {
            let configs = if configs.is_empty() {
                bench::scale::default_configs()
            } else {
                configs
            };
            let from = if report_only && from.is_empty() {
                vec![out.clone()]
            } else {
                from
            };
            let what = (seeds.as_slice(), modes.as_slice(), from.as_slice());
            let inputs = (configs.as_slice(), variants.as_path());
            let budget = (budget_s, clock.clock());
            bench::scale::scale(inputs, budget, what, &overrides, &out).map(|_| ())
        }
    }
}

/// `gssp plan`: the workload and cost model of `config`, every mode simulated.
fn plan(
    config: &Path,
    overrides: &[String],
    source: gssp::tools::plan::workers::SpeedSource,
    (params, group_counts, ssp_staleness, seconds): (
        Option<usize>,
        Option<Vec<usize>>,
        Option<usize>,
        Option<f64>,
    ),
    json: bool,
) -> anyhow::Result<()> {
    use anyhow::anyhow;
    use gssp::tools::plan::{PlanOptions, Workload};
    let cfg = Config::load(config, overrides)?;
    let work = Workload::from_config(&cfg, &source).map_err(|e| anyhow!(e))?;
    let params = match params {
        Some(p) => p,
        None => gssp::tools::plan::model_params(&cfg).map_err(|e| anyhow!(e))?,
    };
    if let Some(s) = seconds.filter(|s| !(s.is_finite() && *s > 0.0)) {
        anyhow::bail!("--seconds must be a positive number, got {s}");
    }
    let opts = PlanOptions {
        ssp_staleness: ssp_staleness.unwrap_or(cfg.sync.ssp.staleness),
        gssp_staleness: cfg.sync.gssp.staleness,
        local_steps: cfg.sync.localsgd.local_steps,
        async_local_steps: cfg.sync.async_localsgd.local_steps,
        gssp_local_steps: match cfg.sync.gssp.takes_local_steps() {
            true => (cfg.sync.gssp.local_steps, cfg.sync.gssp.dynamic_local_steps),
            false => (gssp::tools::plan::GSSP_LOCAL_STEPS_SHOWN, true),
        },
        group_counts: group_counts.unwrap_or_else(|| (1..=cfg.sync.gssp.max_groups).collect()),
        horizon_s: seconds,
        seed: cfg.run.seed,
        balance_bounds: cfg.sync.balance.balanced_bounds(cfg.optim.batch_size),
        shards: cfg.sync.shards.count().filter(|&s| s > 1),
    };
    let cost = gssp::protocol::costmodel::CostModel::new(&cfg, params);
    let plan = gssp::tools::plan::plan(&work, &cost, &opts)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&plan)?);
    } else {
        print!("{}", gssp::tools::plan::render(&plan));
    }
    Ok(())
}

/// `gssp bench plan`: the simulator's predictions against measured runs.
/// Runs of one variant and size (seeds) are averaged before the comparison.
fn validate_plan(
    runs: &[PathBuf],
    machine: gssp::tools::plan::measured::Machine,
    save: Option<&Path>,
) -> anyhow::Result<()> {
    use gssp::tools::plan::measured::{check, MeasuredRun};
    let each = runs
        .iter()
        .map(|d| MeasuredRun::from_dir(d))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let measured = MeasuredRun::means(&each)?;
    println!(
        "| run | seeds | images/s measured | predicted | error | wait measured | predicted | error |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for run in &measured {
        let c = check(run, &machine);
        println!(
            "| {} | {} | {:.0} | {:.0} | {:.1}% | {:.3} | {:.3} | {:.1}% |",
            c.name,
            run.seeds,
            c.measured_images_per_s,
            c.predicted_images_per_s,
            100.0 * c.images_error(),
            c.measured_wait_fraction,
            c.predicted_wait_fraction,
            100.0 * c.wait_error()
        );
    }
    if let Some(path) = save {
        // Every seed's run, not the means: the test averages them as above, and the
        // spread between seeds stays on record.
        let fixture = serde_json::json!({ "machine": machine, "runs": each });
        std::fs::write(path, serde_json::to_string_pretty(&fixture)? + "\n")
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
        println!("fixture: {}", path.display());
    }
    Ok(())
}

/// Every `configs/*.toml` below the working directory, sorted.
fn shipped_configs() -> anyhow::Result<Vec<PathBuf>> {
    use anyhow::Context;
    let dir = Path::new("configs");
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| {
            format!(
                "cannot list {} (run from the repository root)",
                dir.display()
            )
        })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    Ok(files)
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
