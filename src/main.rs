//! gssp command line.

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "gssp", version, about = "GSSP training with GDTopK over MPI")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Internal checks run under mpirun by the integration tests.
    #[command(hide = true)]
    Selftest {
        #[command(subcommand)]
        what: gssp::comm::selftest::SelftestCommand,
    },
}

fn main() {
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Selftest { what } => gssp::comm::selftest::main(&what),
    };
    std::process::exit(code);
}
