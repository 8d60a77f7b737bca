//! `store export` / `store import`: a whole store as JSON lines, to move a single node's
//! SQLite home onto PostgreSQL (or back). See the store's `transfer` module for the format.

use crate::home::Home;
use crate::store::{transfer, Store};
use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Subcommand)]
pub enum StoreCmd {
    /// Write every row of the store to a file (JSON lines).
    ///
    /// The home's SQLite store by default (its gateway must be stopped), or the PostgreSQL
    /// database of --database-url (stop its nodes for a consistent copy).
    Export {
        /// The file to write; it must not exist yet.
        #[arg(long)]
        out: PathBuf,
        #[command(flatten)]
        db: Target,
    },
    /// Read an export into an empty store.
    ///
    /// Into the PostgreSQL database of --database-url (its schema is brought up to date
    /// first), or into the home's SQLite store; either must hold no rows. All rows go in
    /// one transaction: a file that fails part way leaves the store empty.
    Import {
        /// The export to read.
        #[arg(long = "in")]
        input: PathBuf,
        #[command(flatten)]
        db: Target,
    },
}

/// Which store: the home's SQLite file, or PostgreSQL.
#[derive(Args)]
pub struct Target {
    /// A PostgreSQL URL (`postgres://user@host:5432/vis`) instead of the home's SQLite file.
    #[arg(long, env = "VIS_DATABASE_URL", value_parser = super::database::url)]
    database_url: Option<String>,
    /// The PostgreSQL schema (created if missing); default: the server's search path.
    #[arg(long, env = "VIS_DATABASE_SCHEMA", requires = "database_url", value_parser = super::database::schema)]
    database_schema: Option<String>,
}

pub fn run(home: Option<PathBuf>, cmd: StoreCmd) -> Result<ExitCode> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        match cmd {
            StoreCmd::Export { out, db } => export(home, out, db).await,
            StoreCmd::Import { input, db } => import(home, input, db).await,
        }
    })
}

/// Opens the chosen store; the home's lock is held for a SQLite one (no gateway may run on
/// it meanwhile). `must_exist`: a SQLite file that is not there is an error, not a new store.
async fn open(
    home: Option<PathBuf>,
    target: &Target,
    must_exist: bool,
) -> Result<(Store, Option<std::fs::File>)> {
    if let Some(url) = target.database_url.as_deref() {
        let home = Home::resolve(home)?;
        let store =
            super::database::open(Some(url), target.database_schema.as_deref(), &home, None)
                .await?;
        return Ok((store, None));
    }
    let home = Home::resolve(home)?;
    let path = home.db_path();
    if must_exist && !path.exists() {
        bail!("no store at {}: nothing to export", path.display());
    }
    let lock = home
        .lock()
        .context("stop the gateway of this home before moving its store")?;
    let store = super::database::open(None, None, &home, None).await?;
    Ok((store, Some(lock)))
}

async fn export(home: Option<PathBuf>, out: PathBuf, target: Target) -> Result<ExitCode> {
    if out.exists() {
        bail!("{} exists already: name a new file", out.display());
    }
    let (store, _lock) = open(home, &target, true).await?;
    // Written under a temporary name and renamed when whole, so a failed export leaves no
    // file that looks complete.
    let partial = out.with_extension("partial");
    let file = std::fs::File::create(&partial)
        .with_context(|| format!("cannot create {}", partial.display()))?;
    let counts = store
        .with(move |db| {
            let mut w = std::io::BufWriter::new(file);
            transfer::export(db, &mut w)
        })
        .await;
    let counts = match counts {
        Ok(c) => c,
        Err(e) => {
            let _ = std::fs::remove_file(&partial);
            return Err(e).context(format!("cannot export {}", store.location()));
        }
    };
    std::fs::rename(&partial, &out)
        .with_context(|| format!("cannot rename {} to {}", partial.display(), out.display()))?;
    println!(
        "exported {} from {} to {}",
        counts,
        store.location(),
        out.display()
    );
    Ok(ExitCode::SUCCESS)
}

async fn import(home: Option<PathBuf>, input: PathBuf, target: Target) -> Result<ExitCode> {
    let file =
        std::fs::File::open(&input).with_context(|| format!("cannot open {}", input.display()))?;
    let (store, _lock) = open(home, &target, false).await?;
    let counts = store
        .with(move |db| transfer::import(db, &mut std::io::BufReader::new(file)))
        .await
        .with_context(|| {
            format!(
                "cannot import {} into {}",
                input.display(),
                store.location()
            )
        })?;
    println!(
        "imported {} from {} into {}",
        counts,
        input.display(),
        store.location()
    );
    Ok(ExitCode::SUCCESS)
}
