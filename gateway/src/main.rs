//! `vis-gateway`: the Vis gateway binary. See ARCHITECTURE.md.

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

mod agent;
mod bus;
mod cli;
mod cluster;
mod companion;
mod config;
mod configuration;
mod drafts;
mod engine;
mod extensions;
mod heap;
mod home;
mod human_input;
mod learn;
mod mcp;
mod metrics;
mod model_sandbox;
mod pairing;
mod provider_admin;
mod providers;
mod records;
mod sandbox;
mod start_env;
mod store;
mod tools;

#[derive(Parser)]
#[command(
    name = "vis-gateway",
    version,
    about = "The Vis gateway: Companion API, egress proxy and extension host"
)]
struct Cli {
    /// The Vis home (database, token, registry). Default: $VIS_HOME or ~/.vis
    #[arg(long, global = true, env = "VIS_HOME")]
    home: Option<PathBuf>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Start the gateway in the foreground.
    Start(cli::start::StartArgs),
    /// Show the running gateway of this home.
    Status,
    /// Stop the running gateway of this home.
    Stop,
    /// Print the pairing link and QR code of the running gateway.
    Pair(cli::client::PairArgs),
    /// Run a command as a sandbox child of a session of the running gateway.
    ///
    /// The command runs in the current directory when that is inside the session's workspace
    /// root, otherwise in the root. Without --session, a new session is made with --root (default:
    /// the current directory) as its workspace root.
    Exec(cli::client::ExecArgs),
    /// Run only the egress proxy, from a policy file.
    Proxy(cli::client::ProxyArgs),
    /// Python extensions of the running gateway.
    #[command(subcommand)]
    Extension(cli::client::ExtensionCmd),
    /// Move the store between files and engines (JSON lines), e.g. a home onto PostgreSQL.
    #[command(subcommand)]
    Store(cli::transfer::StoreCmd),
    /// Internal: an extension worker process (embedded CPython), driven by the gateway.
    #[command(hide = true)]
    Worker(extensions::worker::WorkerArgs),
}

fn main() -> ExitCode {
    let args = Cli::parse();
    let result = match args.cmd {
        Cmd::Start(a) => {
            // Before any thread: secrets leave the process's environment block.
            start_env::seal();
            cli::start::run(args.home, a)
        }
        Cmd::Status => cli::client::status(args.home),
        Cmd::Stop => cli::client::stop(args.home),
        Cmd::Pair(a) => cli::client::pair(args.home, a),
        Cmd::Exec(a) => cli::client::exec(args.home, a),
        Cmd::Proxy(a) => cli::client::proxy(a),
        Cmd::Extension(c) => cli::client::extension(args.home, c),
        Cmd::Store(c) => cli::transfer::run(args.home, c),
        Cmd::Worker(a) => extensions::worker::run(args.home, a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("vis-gateway: {e:#}");
            ExitCode::FAILURE
        }
    }
}
