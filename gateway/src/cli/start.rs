//! `vis-gateway start`: the foreground daemon.

use crate::engine::Gateway;
use crate::home::{load_or_create_token, Home, Registry};
use crate::pairing;
use anyhow::{Context, Result};
use clap::Args;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use vis_companion_api::ApiConfig;

#[derive(Args, Debug, Clone)]
pub struct StartArgs {
    /// Address to bind. Any bind other than exactly 127.0.0.1 requires the token.
    #[arg(long)]
    pub host: Option<String>,
    /// Port to bind (0 = any free port; the registry file records the real one).
    #[arg(long, default_value_t = 7890)]
    pub port: u16,
    /// Require the token even on 127.0.0.1.
    #[arg(long)]
    pub require_token: bool,
    /// Token file (default: <home>/gateway.token).
    #[arg(long)]
    pub token_file: Option<PathBuf>,
    /// Print the pairing link and QR code (binds 0.0.0.0 unless --host is given).
    #[arg(long)]
    pub pair: bool,
    /// Log as JSON lines instead of human-readable text.
    #[arg(long)]
    pub log_json: bool,
    /// Default workspace root for new sessions (default: the current directory).
    #[arg(long)]
    pub root: Option<PathBuf>,
    /// Also publish every committed event on NATS JetStream at this URL (`nats://host:4222`,
    /// `tls://…`), on `<subject prefix>.<session id>`. The gateway does not start when the
    /// server cannot be reached.
    #[arg(long, env = "VIS_NATS_URL", value_parser = super::nats::url)]
    pub nats_url: Option<String>,
    /// The JetStream stream the events go to (created when missing: 24 h of events).
    #[arg(long, env = "VIS_NATS_STREAM", default_value = "VIS_EVENTS", value_parser = super::nats::stream_name)]
    pub nats_stream: String,
    /// Subject prefix of the published events.
    #[arg(long, env = "VIS_NATS_SUBJECT_PREFIX", default_value = "vis.events", value_parser = super::nats::subject_prefix)]
    pub nats_subject_prefix: String,
    /// Keep the store (sessions, turns, events, drafts, settings, …) in PostgreSQL at this
    /// URL (`postgres://user@host:5432/vis`) instead of the SQLite file under the home. The
    /// gateway does not start when the server cannot be reached.
    #[arg(long, env = "VIS_DATABASE_URL", value_parser = super::database::url)]
    pub database_url: Option<String>,
    /// The PostgreSQL schema the store's tables live in (created when missing; default
    /// `public`).
    #[arg(long, env = "VIS_DATABASE_SCHEMA", requires = "database_url", value_parser = super::database::schema)]
    pub database_schema: Option<String>,
    /// This node's id among the gateways sharing the database (default: the host name).
    #[arg(long, env = "VIS_NODE_ID", requires = "database_url", value_parser = super::cluster::node_id)]
    pub node_id: Option<String>,
    /// The URL the other nodes reach this one at (default: http://<host>:<port>, with the
    /// machine's name for a wildcard bind).
    #[arg(long, env = "VIS_ADVERTISE_URL", requires = "database_url", value_parser = super::cluster::advertise_url)]
    pub advertise_url: Option<String>,
    /// How long this node's lease lasts without a heartbeat, in milliseconds: a node silent
    /// that long is taken over (its sessions move to a live node).
    #[arg(long, env = "VIS_LEASE_TTL_MS", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1000..))]
    pub lease_ttl_ms: u64,
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse::<i64>().ok())
        .filter(|v| *v > 0)
        .map(|v| v as usize)
        .unwrap_or(default)
}

pub fn run(home: Option<PathBuf>, args: StartArgs) -> Result<ExitCode> {
    super::logging::init(args.log_json);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(serve(home, args))
}

/// Lifts the open-file soft limit to the hard limit: every SSE subscriber holds a socket.
fn raise_nofile() {
    // SAFETY: plain getrlimit/setrlimit on this process.
    unsafe {
        let mut r = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 && r.rlim_cur < r.rlim_max {
            r.rlim_cur = r.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
    }
}

async fn serve(home_flag: Option<PathBuf>, args: StartArgs) -> Result<ExitCode> {
    raise_nofile();
    // Checked while the rest starts; awaited before the gateway takes requests.
    let python = tokio::spawn(crate::model_sandbox::process::check_python(
        crate::model_sandbox::process::default_python(),
    ));
    let home = Home::resolve(home_flag)?;
    let _lock = home.lock()?;
    let host = args.host.clone().unwrap_or_else(|| {
        if args.pair {
            "0.0.0.0".into()
        } else {
            "127.0.0.1".into()
        }
    });
    let require_token = args.require_token || host != "127.0.0.1";
    let token_path = args
        .token_file
        .clone()
        .unwrap_or_else(|| home.default_token_path());
    let token = load_or_create_token(&token_path)?;
    let root = match &args.root {
        Some(r) => r.clone(),
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    let (h, r) = (home.dir.clone(), root.clone());
    let config = tokio::task::spawn_blocking(move || crate::config::load(&h, &r)).await??;
    python.await?.map_err(anyhow::Error::msg)?;
    let bind_host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let listener = TcpListener::bind((bind_host.as_str(), args.port))
        .await
        .with_context(|| format!("cannot bind {host}:{}", args.port))?;
    let addr: SocketAddr = listener.local_addr()?;
    let port = addr.port();
    // A specific non-loopback IP also gets a loopback listener so local clients find it.
    let extra =
        if !pairing::is_loopback_host(&bind_host) && bind_host != "0.0.0.0" && bind_host != "::" {
            TcpListener::bind(("127.0.0.1", port)).await.ok()
        } else {
            None
        };
    let publishing = super::nats::start_publishing(
        args.nats_url.as_deref(),
        &args.nats_stream,
        &args.nats_subject_prefix,
    )
    .await?;
    // On PostgreSQL this gateway is a node of a cluster: it registers (a lease) before its
    // store opens, so every event it writes is fenced with that lease (C4).
    let cluster = match args.database_url.as_deref() {
        Some(url) => {
            let pg = super::database::pg_options(url, args.database_schema.as_deref());
            let node = args
                .node_id
                .clone()
                .unwrap_or_else(super::cluster::host_name);
            let address = args
                .advertise_url
                .clone()
                .unwrap_or_else(|| super::cluster::default_address(&bind_host, port));
            let nats = publishing.as_ref().map(|(_, _, n)| n.clone());
            Some(super::cluster::join(&pg, &node, address, args.lease_ttl_ms, nats).await?)
        }
        None => None,
    };
    let store = super::database::open(
        args.database_url.as_deref(),
        args.database_schema.as_deref(),
        &home,
        cluster.as_ref().map(|c| c.writer()),
    )
    .await?;
    let gw = Gateway::new(
        store,
        home.clone(),
        root,
        config,
        env_usize("VIS_GATEWAY_MAX_CONCURRENT_TURNS", 50),
        env_usize("VIS_GATEWAY_EVENT_RING_MAX", 2000) as i64,
        publishing.as_ref().map(|(sink, _, _)| sink.clone()),
    )
    .await?;
    if let Some(c) = &cluster {
        gw.join_cluster(c);
    }
    let publisher = publishing.map(|(_, publisher, _)| publisher);
    let loaded = gw.load_extensions().await;
    for f in &loaded.failures {
        tracing::warn!(file = %f.file.display(), error = %f.error.message, "extension failed to load");
    }
    let recovered = gw.turns().recover().await?;
    if recovered > 0 {
        tracing::warn!(
            turns = recovered,
            "turns interrupted by the previous stop were marked failed"
        );
    }

    let proxy_port = gw.start_sandbox(vec![port]).await?;
    tracing::info!(port = proxy_port, "egress proxy listening on 127.0.0.1");
    let resumed = gw.turns().resume_backlogs().await?;
    if resumed > 0 {
        tracing::info!(
            sessions = resumed,
            "turns queued before the last stop resume in their order"
        );
    }
    let urls = pairing::urls(&bind_host, port);
    let url = urls
        .first()
        .cloned()
        .unwrap_or_else(|| format!("http://127.0.0.1:{port}"));
    let local_url = if bind_host == "0.0.0.0" || bind_host == "::" || extra.is_some() {
        format!("http://127.0.0.1:{port}")
    } else {
        url.clone()
    };
    let gateway_id = {
        use sha2::{Digest, Sha256};
        hex::encode(Sha256::digest(
            home.db_path().display().to_string().as_bytes(),
        ))[..16]
            .to_string()
    };
    let cfg = ApiConfig {
        require_token,
        token: token.clone(),
        host: bind_host.clone(),
        port,
        addresses: urls.clone(),
        max_body_bytes: env_usize(
            "VIS_GATEWAY_MAX_BODY_BYTES",
            crate::engine::MAX_TURN_BODY_BYTES,
        ),
        gateway_id,
        managed: false,
        cors_origins: std::env::var("VIS_GATEWAY_CORS_ORIGINS")
            .unwrap_or_default()
            .split(',')
            .map(|o| o.trim().trim_end_matches('/').to_string())
            .filter(|o| !o.is_empty())
            .collect(),
    };
    // The registry is written before anything is served: a client that saw `/healthz`
    // answer finds the gateway (`vis-gateway exec` right after start).
    home.write_registry(&Registry {
        pid: std::process::id(),
        url: local_url.clone(),
        host: bind_host.clone(),
        port,
        token: token.clone(),
        require_token,
        proxy_port: Some(proxy_port),
        started_at: crate::engine::now_ms(),
    })?;
    let mut app = vis_companion_api::app(crate::engine::areas::areas(&gw), cfg);
    if let Some(c) = &cluster {
        app = app.layer(axum::middleware::from_fn_with_state(
            c.clone(),
            crate::engine::routes::cluster::forward,
        ));
    }
    let shutdown = CancellationToken::new();
    let mut servers = vec![tokio::spawn(vis_companion_api::serve(
        listener,
        app.clone(),
        shutdown.clone(),
    ))];
    if let Some(l) = extra {
        servers.push(tokio::spawn(vis_companion_api::serve(
            l,
            app,
            shutdown.clone(),
        )));
    }
    tracing::info!(url = %url, require_token, home = %home.dir.display(), "vis-gateway listening");
    println!("vis-gateway listening on {url}");
    if args.pair {
        if pairing::is_loopback_host(&bind_host) {
            eprintln!("{}", pairing::LOOPBACK_REFUSAL);
        } else if let Some(link) = pairing::link(&urls, require_token.then_some(token.as_str())) {
            println!("Pair the Vis Companion app with this link:\n{link}");
            if let Some(qr) = pairing::qr(&link) {
                println!("{qr}");
            }
        }
    }

    wait_for_stop(&gw.stop_requested()).await;
    tracing::info!("stopping: cancelling running turns");
    gw.shutdown(Duration::from_secs(8)).await;
    if let Some(p) = publisher {
        if !p.drained(Duration::from_secs(5)).await {
            tracing::warn!("events still unpublished on NATS after 5 s; they stay in the journal");
        }
    }
    shutdown.cancel();
    for s in servers {
        let _ = s.await;
    }
    home.remove_registry();
    tracing::info!("stopped");
    Ok(ExitCode::SUCCESS)
}

async fn wait_for_stop(stop: &CancellationToken) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        stop.cancelled().await;
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
        _ = stop.cancelled() => {}
    }
}
