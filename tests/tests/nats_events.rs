//! Events across nodes, first step (issue 25): with `--nats-url` every event the gateway
//! commits is also published on `<prefix>.<session id>` in a JetStream stream, in seq order,
//! with the journal's own envelope text, its seq and type in headers and a message id that
//! JetStream deduplicates on. The machine's NATS server (127.0.0.1:4222, or
//! `VIS_TEST_NATS_ADDR`) must answer when `CI` is set; elsewhere the test is skipped.

mod common;

use async_nats::jetstream::{self, consumer::pull, consumer::DeliverPolicy};
use common::*;
use futures::StreamExt;
use reqwest::StatusCode;
use serde_json::Value;
use std::net::TcpStream;
use std::time::{Duration, Instant};

fn suffix() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..12].to_string()
}

/// Removes a stream of the machine's NATS when dropped, also when the test fails.
struct StreamGuard {
    url: String,
    name: String,
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        let (url, name) = (self.url.clone(), self.name.clone());
        // On a thread of its own: this one belongs to the test's runtime.
        let remove = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async {
                if let Ok(client) = async_nats::connect(url).await {
                    let _ = jetstream::new(client).delete_stream(&name).await;
                }
            });
        });
        tokio::task::block_in_place(|| remove.join().ok());
    }
}

/// One message read back from the stream.
struct Published {
    subject: String,
    seq_header: Option<i64>,
    type_header: Option<String>,
    msg_id: Option<String>,
    data: Value,
}

/// Reads every message on `subject` from the start of the stream until `done` holds for
/// what was read (bounded).
async fn read_subject(
    js: &jetstream::Context,
    stream: &str,
    subject: &str,
    done: impl Fn(&[Published]) -> bool,
) -> Vec<Published> {
    let stream = js.get_stream(stream).await.expect("the stream exists");
    let consumer = stream
        .create_consumer(pull::OrderedConfig {
            filter_subject: subject.to_string(),
            deliver_policy: DeliverPolicy::All,
            ..Default::default()
        })
        .await
        .expect("an ordered consumer");
    let mut messages = consumer.messages().await.expect("messages");
    let deadline = Instant::now() + WAIT;
    let mut out = Vec::new();
    while !done(&out) {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(Some(Ok(m))) = tokio::time::timeout(left, messages.next()).await else {
            panic!("the stream held only {} messages on {subject}", out.len());
        };
        let header = |name: &str| {
            m.headers
                .as_ref()
                .and_then(|h| h.get(name))
                .map(|v| v.as_str().to_string())
        };
        out.push(Published {
            subject: m.subject.to_string(),
            seq_header: header("Vis-Seq").and_then(|s| s.parse().ok()),
            type_header: header("Vis-Type"),
            msg_id: m
                .headers
                .as_ref()
                .and_then(|h| h.get(async_nats::header::NATS_MESSAGE_ID))
                .map(|v| v.as_str().to_string()),
            data: serde_json::from_slice(&m.payload).expect("the payload is JSON"),
        });
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_committed_event_of_a_turn_is_published_on_the_sessions_subject_in_seq_order() {
    if !vis_store::testing::reachable("NATS", &vis_store::testing::nats_addr()) {
        return;
    }
    let (name, prefix) = (
        format!("VIS_TEST_{}", suffix()),
        format!("vistest.{}", suffix()),
    );
    let url = vis_store::testing::nats_url();
    let _stream = StreamGuard {
        url: url.clone(),
        name: name.clone(),
    };
    let llm = FixtureLlm::start().await;
    llm.push(Script::Text(vec!["Hello ".into(), "from the turn.".into()]));
    let mut opts = Opts::openai(&llm);
    opts.extra_args = vec![
        "--nats-url".into(),
        url.clone(),
        "--nats-stream".into(),
        name.clone(),
        "--nats-subject-prefix".into(),
        prefix.clone(),
    ];
    let gw = Gateway::start(opts).await;
    let sid = gw.create_session().await;
    let (s, _) = gw.submit(&sid, "say hello").await;
    assert_eq!(s, StatusCode::ACCEPTED);
    let stored = gw.wait_stored(&sid, "turn.completed").await;
    gw.wait_idle(&sid).await;
    let last_stored = stored.last().unwrap()["seq"].as_i64().unwrap();

    let js = jetstream::new(async_nats::connect(&url).await.expect("NATS"));
    let subject = format!("{prefix}.{sid}");
    let published = read_subject(&js, &name, &subject, |got| {
        got.last()
            .and_then(|p| p.data["seq"].as_i64())
            .is_some_and(|s| s >= last_stored)
    })
    .await;

    let seqs: Vec<i64> = published
        .iter()
        .map(|p| p.data["seq"].as_i64().expect("an envelope seq"))
        .collect();
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "published in seq order, each once: {seqs:?}"
    );
    for p in &published {
        let seq = p.data["seq"].as_i64().unwrap();
        assert_eq!(p.subject, subject);
        assert_eq!(p.seq_header, Some(seq), "the Vis-Seq header is the seq");
        assert_eq!(p.type_header.as_deref(), p.data["type"].as_str());
        assert_eq!(p.msg_id.as_deref(), Some(format!("{sid}:{seq}").as_str()));
        assert_eq!(p.data["session_id"], sid.as_str());
    }
    // Every journal event went out with the journal's own text; live-only events (the
    // activity of the running turn) went out too.
    for e in &stored {
        let seq = e["seq"].as_i64().unwrap();
        let p = published
            .iter()
            .find(|p| p.data["seq"] == seq)
            .unwrap_or_else(|| panic!("stored event {seq} ({}) not published", e["type"]));
        assert_eq!(&p.data, e, "event {seq} published as stored");
    }
    let kinds: Vec<&str> = published
        .iter()
        .filter_map(|p| p.type_header.as_deref())
        .collect();
    assert!(kinds.contains(&"turn.started"), "{kinds:?}");
    assert!(kinds.contains(&"turn.completed"), "{kinds:?}");
    assert!(
        published.len() > stored.len(),
        "live-only events are published too: {kinds:?}"
    );
    assert_eq!(
        gw.metric("vis_events_not_published_total").await,
        Some(0.0),
        "nothing was left out"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_told_to_publish_on_an_unreachable_nats_refuses_to_start_and_says_why() {
    // A loopback port nothing listens on.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let dirs = Dirs::new();
    let url = format!("nats://127.0.0.1:{port}");
    let (code, _, stderr) = run_cli(&dirs, &["start", "--port", "0", "--nats-url", &url]).await;
    assert_ne!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("NATS") && stderr.contains(&url),
        "the error names NATS and the URL: {stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nats_url_that_is_not_one_is_refused_before_anything_starts() {
    let dirs = Dirs::new();
    let (code, _, stderr) = run_cli(
        &dirs,
        &["start", "--port", "0", "--nats-url", "http://127.0.0.1:1"],
    )
    .await;
    assert_ne!(code, Some(0), "{stderr}");
    assert!(stderr.contains("--nats-url"), "{stderr}");
}

/// A NATS server of the test's own (the machine's `nats-server` binary) on a loopback port,
/// with JetStream storing under target/; killed when dropped.
struct OwnNats {
    child: std::process::Child,
    port: u16,
    store: tempfile::TempDir,
}

impl OwnNats {
    fn binary() -> Option<std::path::PathBuf> {
        [
            "/usr/sbin/nats-server",
            "/usr/bin/nats-server",
            "/usr/local/bin/nats-server",
        ]
        .into_iter()
        .map(std::path::PathBuf::from)
        .find(|p| p.exists())
    }

    async fn start(port: Option<u16>, store: Option<tempfile::TempDir>) -> OwnNats {
        let port = port.unwrap_or_else(|| {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        });
        let store = store.unwrap_or_else(|| {
            tempfile::Builder::new()
                .prefix("vis-nats-")
                .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
                .unwrap()
        });
        let child = std::process::Command::new(Self::binary().expect("nats-server"))
            .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
            .arg(store.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start nats-server");
        let deadline = Instant::now() + WAIT;
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "nats-server did not listen");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        OwnNats { child, port, store }
    }

    fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Kills the server, keeping its port and its stored stream for a restart.
    fn kill(mut self) -> (u16, tempfile::TempDir) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let port = self.port;
        let store = tempfile::Builder::new().tempdir().unwrap();
        let store = std::mem::replace(&mut self.store, store);
        (port, store)
    }
}

impl Drop for OwnNats {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs one turn and waits until its terminal is stored; answers the terminal's seq.
async fn one_turn(gw: &Gateway, llm: &FixtureLlm, sid: &str, text: &str) -> i64 {
    llm.push(Script::Text(vec![text.into()]));
    let before = gw.events_since(sid, 0).await.len();
    let (s, _) = gw.submit(sid, text).await;
    assert_eq!(s, StatusCode::ACCEPTED);
    let deadline = Instant::now() + WAIT;
    loop {
        let evs = gw.events_since(sid, 0).await;
        if let Some(e) = evs[before.min(evs.len())..]
            .iter()
            .find(|e| e["type"] == "turn.completed")
        {
            gw.wait_idle(sid).await;
            return e["seq"].as_i64().unwrap();
        }
        assert!(
            Instant::now() < deadline,
            "the turn {text:?} never completed"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turns_go_on_while_nats_is_down_and_publishing_resumes_when_it_is_back() {
    if OwnNats::binary().is_none() {
        eprintln!("skipped: no nats-server binary to start a server of this test's own");
        return;
    }
    let nats = OwnNats::start(None, None).await;
    let url = nats.url();
    let llm = FixtureLlm::start().await;
    let mut opts = Opts::openai(&llm);
    opts.extra_args = vec!["--nats-url".into(), url.clone()];
    let gw = Gateway::start(opts).await;
    let sid = gw.create_session().await;
    let subject = format!("vis.events.{sid}");
    let first = one_turn(&gw, &llm, &sid, "first").await;
    {
        let js = jetstream::new(async_nats::connect(&url).await.expect("NATS"));
        read_subject(&js, "VIS_EVENTS", &subject, |got| {
            got.iter().any(|p| p.seq_header == Some(first))
        })
        .await;
    }

    // NATS goes away: the next turn runs and lands as if nothing happened.
    let (port, store) = nats.kill();
    let second = one_turn(&gw, &llm, &sid, "second").await;
    assert!(second > first);

    // NATS comes back on the same port with its stream: later events are published again.
    let _nats = OwnNats::start(Some(port), Some(store)).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let third = loop {
        let seq = one_turn(&gw, &llm, &sid, "third").await;
        let js = jetstream::new(async_nats::connect(&url).await.expect("NATS"));
        let stream = js
            .get_stream("VIS_EVENTS")
            .await
            .expect("the stream is still there");
        let last = stream
            .get_last_raw_message_by_subject(&subject)
            .await
            .ok()
            .and_then(|m| serde_json::from_slice::<Value>(&m.payload).ok())
            .and_then(|v| v["seq"].as_i64());
        if last.is_some_and(|l| l >= seq) {
            break seq;
        }
        assert!(
            Instant::now() < deadline,
            "nothing published within 30 s of NATS coming back (last {last:?}, want {seq})"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert!(third > second);
    let (s, _) = gw.get("/healthz").await;
    assert_eq!(s, StatusCode::OK, "the gateway kept serving");
}
