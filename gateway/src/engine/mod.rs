//! The turn engine ([`Turns`]: sessions, turns, the queue, cancel, restart recovery) and the
//! gateway's composition ([`Gateway`]: every job built once, the sandbox started, all
//! stopped). The Companion boundary's area traits are answered over the composition
//! (`areas/`, one file per area; `routes/` for MCP, learn mode and providers).
//!
//! Each loaded session has one `SessionState` behind a mutex that is never held across an
//! await: state changes, their journal writes and their events happen together under it, so
//! the order clients see is the order things happened.

mod agent_commands;
pub mod areas;
mod coalesce;
mod compaction;
mod conversation;
pub mod egress;
mod execute;
pub mod ext;
mod lifecycle;
mod meta;
pub mod presentation;
mod queue;
mod recovery;
pub mod routes;
mod run_ctx;
pub mod runner;
mod session_life;
pub mod sessions;
pub mod shutdown;
mod slash;
mod storage;
mod tool_call;
mod turn_machine;
mod turn_tools;
mod views;
pub mod workspace;

use crate::bus::Bus;
use crate::config::Config;
use crate::configuration::Configuration;
use crate::extensions::{ExtensionHost, HostConfig};
use crate::home::Home;
use crate::human_input;
use crate::records::turn::Turn;
use crate::store::rows::{self, SessionRow};
use crate::store::Store;
use parking_lot::Mutex;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, AtomicU64};
use std::sync::Arc;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
pub use turn_machine::SessionState;

/// The largest turn request the advertised attachment caps allow: 8 files of 25 MiB, base64
/// encoded (4/3), plus 1 MiB for the rest of the body.
pub const MAX_TURN_BODY_BYTES: usize = 8 * 26_214_400 / 3 * 4 + (1 << 20);

pub fn now_ms() -> i64 {
    vis_companion_api::sse::now_ms()
}

#[derive(Default)]
pub struct Counters {
    pub turns_total: AtomicU64,
    pub turns_failed: AtomicU64,
    pub executing: AtomicI64,
    pub duration_ms: AtomicU64,
    pub tokens_in: AtomicU64,
    pub tokens_out: AtomicU64,
}

/// The turn engine: the loaded sessions and their turns (submit, run, land, queue, cancel,
/// recovery, storage faults, session life and metadata), with a handle to every job a turn
/// uses. Built by [`Gateway::new`]; its methods are spread over this folder by job.
pub struct Turns {
    store: Store,
    bus: Arc<Bus>,
    default_root: PathBuf,
    /// The configuration, the provider router and the saved providers (shared by handle
    /// with the Companion settings).
    configuration: Arc<Configuration>,
    /// The Python extension host (workers, catalog, hooks, filters).
    extensions: ExtensionHost,
    /// The slash commands: the table, the palette and running one (`slash/`).
    slash: slash::SlashCommands,
    /// What a model turn gets to call (`turn_tools.rs`).
    turn_tools: turn_tools::TurnTools,
    /// The loaded sessions and the turn order.
    sessions: Arc<sessions::Sessions>,
    permits: Arc<Semaphore>,
    concurrency: usize,
    counters: Counters,
    /// The stop request and the stopping state.
    shutdown: shutdown::Shutdown,
    /// The egress proxy and child runner, once started.
    sandbox: std::sync::OnceLock<Arc<crate::sandbox::Sandbox>>,
    /// Pending `vis.ask` forms, live views, secrets and extension shells.
    human_input: Arc<human_input::HumanInput>,
    /// The running tool call of each session and what its extension last presented.
    presentations: Arc<presentation::Presentations>,
    /// The model's Python sandbox runtime of each session (`python_execution`).
    model_sandboxes: Arc<crate::model_sandbox::Sandboxes>,
    /// MCP servers: the phone's list and each session's connections.
    mcp: Arc<crate::mcp::Mcp>,
    /// Turns stopped because their events could not be stored (`storage.rs`).
    storage: storage::StorageWatch,
    /// The Companion jobs (the turn reads the model to run on from their settings).
    companion: Arc<crate::companion::Companion>,
    /// Where each session works: trunk or one of its drafts (`workspace/`).
    workspaces: Arc<workspace::Workspaces>,
}

/// The gateway: the composition of its jobs. It builds each once ([`Gateway::new`]), starts
/// the sandbox and stops them; the Companion boundary's areas are answered by the jobs it
/// holds (`areas/`, `routes/`, `workspace/area.rs`). It has no other behaviour.
pub struct Gateway {
    /// The turn engine.
    turns: Arc<Turns>,
    store: Store,
    bus: Arc<Bus>,
    default_root: PathBuf,
    configuration: Arc<Configuration>,
    extensions: ExtensionHost,
    sessions: Arc<sessions::Sessions>,
    human_input: Arc<human_input::HumanInput>,
    mcp: Arc<crate::mcp::Mcp>,
    /// The Companion app's areas beyond the core flow, one object each (`companion/`).
    companion: Arc<crate::companion::Companion>,
    workspaces: Arc<workspace::Workspaces>,
    /// Learn mode: proposals, the review and `vis.yml` edits, mode switches (L1).
    learn: Arc<crate::learn::Learn>,
    /// The stored egress decisions of each session.
    egress: egress::EgressLog,
}

pub type Shared = Arc<Mutex<SessionState>>;

impl Gateway {
    pub async fn new(
        store: Store,
        home: Home,
        default_root: PathBuf,
        config: Config,
        concurrency: usize,
        retain: i64,
        commits: Option<vis_store::CommitSink>,
    ) -> anyhow::Result<Arc<Gateway>> {
        let configuration = Arc::new(Configuration::new(home.dir.clone(), config)?);
        let max_ord = store.with(rows::max_turn_ord).await?;
        let bus = Arc::new(Bus::with_commits(store.clone(), retain, commits));
        let mut host_cfg = HostConfig::new(home.dir.clone());
        let (home_dir, fallback_root) = (home.dir.clone(), default_root.clone());
        host_cfg.environment = Arc::new(move |project: Option<&std::path::Path>| {
            crate::config::load(&home_dir, project.unwrap_or(&fallback_root))
                .map(|c| c.environment)
                .unwrap_or_default()
        });
        let sessions = Arc::new(sessions::Sessions::new(
            store.clone(),
            bus.clone(),
            max_ord + 1,
        ));
        // The host serves its ask/live/shell doors through `human_input`.
        let human_input = human_input::HumanInput::new(
            bus.clone(),
            Some(human_input::ShellContext {
                default_root: default_root.clone(),
                configuration: configuration.clone(),
                sessions: sessions.clone(),
            }),
        );
        let presentations = Arc::new(presentation::Presentations::default());
        let extensions = ExtensionHost::new(
            host_cfg,
            Arc::new(ext::SqliteState(store.clone())),
            Arc::new(ext::BusEvents {
                bus: bus.clone(),
                presentations: presentations.clone(),
            }),
            human_input.clone(),
        );
        let home_dir_for_mcp = home.dir.clone();
        let companion = Arc::new(crate::companion::Companion::new(
            store.clone(),
            sessions.clone(),
            configuration.clone(),
        ));
        let egress = egress::EgressLog::new(store.clone());
        let learn = Arc::new(crate::learn::Learn::new(
            store.clone(),
            Arc::new(routes::learn::ConfigurationProjects(configuration.clone())),
        ));
        let model_sandboxes: Arc<crate::model_sandbox::Sandboxes> = Arc::default();
        let workspaces = Arc::new(workspace::Workspaces::new(workspace::WorkspaceDeps {
            drafts: Arc::new(crate::drafts::service::Drafts::open(store.clone(), &home.dir).await?),
            sessions: sessions.clone(),
            bus: bus.clone(),
            extensions: extensions.clone(),
            model_sandboxes: model_sandboxes.clone(),
            configuration: configuration.clone(),
            human_input: human_input.clone(),
        }));
        let mcp = Arc::new(crate::mcp::Mcp::new(
            home_dir_for_mcp,
            crate::model_sandbox::builtins::docs()
                .into_iter()
                .map(|d| d.name)
                .collect(),
        ));
        let turn_tools = turn_tools::TurnTools::new(
            extensions.clone(),
            workspaces.clone(),
            model_sandboxes.clone(),
            mcp.clone(),
            bus.clone(),
            home.dir.clone(),
        );
        let slash = slash::SlashCommands::new(
            sessions.clone(),
            bus.clone(),
            extensions.clone(),
            workspaces.clone(),
            configuration.clone(),
            learn.clone(),
            human_input.clone(),
        );
        let turns = Arc::new(Turns {
            store: store.clone(),
            bus: bus.clone(),
            default_root: default_root.clone(),
            configuration: configuration.clone(),
            extensions: extensions.clone(),
            slash,
            turn_tools,
            sessions: sessions.clone(),
            permits: Arc::new(Semaphore::new(concurrency)),
            concurrency,
            counters: Counters::default(),
            shutdown: shutdown::Shutdown::default(),
            sandbox: std::sync::OnceLock::new(),
            human_input: human_input.clone(),
            presentations,
            model_sandboxes,
            mcp: mcp.clone(),
            storage: Default::default(),
            companion: companion.clone(),
            workspaces: workspaces.clone(),
        });
        turns.watch_storage();
        Ok(Arc::new(Gateway {
            turns,
            store,
            bus,
            default_root,
            configuration,
            extensions,
            sessions,
            human_input,
            mcp,
            companion,
            workspaces,
            learn,
            egress,
        }))
    }

    /// Starts the egress proxy (for the gateway's own `ports`, which children may always
    /// reach) with the extensions' network filters, and installs it: adds the `shell` tool
    /// and the `/sh` and `/net-probe` commands. Answers the proxy's port.
    pub async fn start_sandbox(&self, ports: Vec<u16>) -> anyhow::Result<u16> {
        let filters = Arc::new(ext::HostFilters(self.extensions.clone()));
        let sandbox = crate::sandbox::Sandbox::start(
            self.configuration.home(),
            self.bus.clone(),
            ports,
            filters,
        )
        .await?;
        let sandbox = Arc::new(sandbox);
        self.turns.turn_tools.install_sandbox(sandbox.clone());
        self.turns.slash.install_sandbox(sandbox.clone());
        self.configuration
            .attach_sandbox_routes(sandbox.routes.clone());
        self.learn.install_sandbox(sandbox.clone()).await;
        self.human_input.install_sandbox(sandbox.clone());
        let port = sandbox.port();
        let _ = self.turns.sandbox.set(sandbox);
        Ok(port)
    }

    /// Loads the global extensions (at start; a project's load on its first use).
    pub async fn load_extensions(&self) -> crate::extensions::ReloadReport {
        self.extensions.catalog().reload(None).await
    }

    /// Cancelled when a stop is requested (a signal, `POST /v1/shutdown`).
    pub fn stop_requested(&self) -> CancellationToken {
        self.turns.shutdown.requested()
    }

    /// Cancels every running turn and waits (bounded) for their terminals, then stops the
    /// Python runtimes and extension workers, flushes the store and stops handing events to
    /// the commit sink (every committed event has been handed to it by then).
    pub async fn shutdown(&self, wait: std::time::Duration) {
        self.turns.stop(wait).await;
        self.turns.model_sandboxes.stop_all();
        self.extensions.shutdown().await;
        self.store.flush().await;
        self.bus.stop_commits();
    }

    /// The turn engine, for the binary's start (recovery at start-up).
    /// Makes this gateway a node of `cluster` (docs/decisions.md, C4): streams of sessions
    /// homed elsewhere are fed from the shared journal and NATS, the lease is kept alive
    /// (the process stops when it is lost), and lost nodes' sessions are taken over.
    pub fn join_cluster(self: &Arc<Self>, cluster: &Arc<crate::cluster::Cluster>) {
        self.bus.set_relay(crate::bus::Relay {
            journal: cluster.journal().clone(),
            nats: cluster.nats().cloned(),
        });
        cluster.spawn_heartbeat(|why| {
            tracing::error!(
                why,
                "this node lost its lease: stopping, since another node owns its sessions now"
            );
            std::process::exit(3);
        });
        cluster.spawn_watch(Arc::new(Adopter(self.turns.clone())));
    }

    pub fn turns(&self) -> &Arc<Turns> {
        &self.turns
    }
}

impl Turns {
    /// Persists the session row (queued behind earlier writes).
    pub fn save_row(&self, row: &SessionRow) {
        let row = row.clone();
        self.store
            .queue("session", move |db| rows::put_session_alone(db, &row));
    }

    /// Persists a turn record.
    pub fn save_turn(&self, t: &Turn) {
        let (tid, sid, ord, status, key) = (
            t.tid.clone(),
            t.sid.clone(),
            t.ord,
            t.status.as_str(),
            t.idempotency_key.clone(),
        );
        let Ok(rec) = serde_json::to_string(t) else {
            return;
        };
        self.store.queue("turn", move |db| {
            rows::put_turn_alone(db, &tid, &sid, ord, status, key.as_deref(), rec)
        });
    }

    /// Cancels every running turn and waits (bounded) for their terminals.
    async fn stop(&self, wait: std::time::Duration) {
        self.shutdown.begin();
        for (_, s) in self.sessions.all() {
            if let Some(r) = &s.lock().running {
                r.cancel.cancel();
            }
        }
        let deadline = tokio::time::Instant::now() + wait;
        while self.sessions.running_count() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
}

/// Hands sessions taken over from a lost node to the turn engine.
struct Adopter(Arc<Turns>);

#[async_trait::async_trait]
impl crate::cluster::Adopt for Adopter {
    async fn adopt(&self, sids: Vec<String>) {
        self.0.adopt(&sids).await;
    }
}
