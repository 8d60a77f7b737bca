//! Three gateway nodes on one PostgreSQL schema and one NATS JetStream stream (issue 25,
//! decision C4), each with its own home, on loopback ports: a session's events reach a
//! client on another node in order; requests about a session run on its home node; when a
//! node is killed a survivor takes its sessions over, ends its running turn as interrupted,
//! and the node that comes back does not write for them. PostgreSQL and NATS must answer
//! when `CI` is set; elsewhere the test is skipped.

mod common;

use common::*;
use reqwest::Method;
use serde_json::json;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const LEASE_MS: u64 = 2000;

struct SchemaGuard(String);

impl Drop for SchemaGuard {
    fn drop(&mut self) {
        vis_store::testing::drop_schema(std::mem::take(&mut self.0));
    }
}

/// Deletes the test's JetStream stream when dropped.
struct StreamGuard(String);

impl Drop for StreamGuard {
    fn drop(&mut self) {
        let name = std::mem::take(&mut self.0);
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async {
                let url = vis_store::testing::nats_url();
                if let Ok(n) = vis_store::nats::Nats::connect(&url, &name, "vis.cleanup").await {
                    let _ = n.delete_stream().await;
                }
            });
        })
        .join();
    }
}

/// The flags every node shares, with what removes the schema and stream afterwards.
fn shared_args() -> Option<(Vec<String>, SchemaGuard, StreamGuard)> {
    use vis_store::testing::{nats_addr, nats_url, pg_addr, pg_url, reachable};
    if !reachable("PostgreSQL", &pg_addr()) || !reachable("NATS", &nats_addr()) {
        return None;
    }
    let tag = &uuid::Uuid::new_v4().simple().to_string()[..12];
    let (schema, stream) = (format!("vis_cl_{tag}"), format!("VIS_CL_{tag}"));
    let args = vec![
        "--database-url".into(),
        pg_url(),
        "--database-schema".into(),
        schema.clone(),
        "--nats-url".into(),
        nats_url(),
        "--nats-stream".into(),
        stream.clone(),
        "--nats-subject-prefix".into(),
        format!("cl{tag}.events"),
        "--lease-ttl-ms".into(),
        LEASE_MS.to_string(),
    ];
    Some((args, SchemaGuard(schema), StreamGuard(stream)))
}

fn node_opts(llm: &FixtureLlm, shared: &[String], node: &str) -> Opts {
    let mut opts = Opts::openai(llm);
    opts.extra_args = shared.to_vec();
    opts.extra_args
        .extend(["--node-id".to_string(), node.to_string()]);
    opts
}

/// Submits a turn through `gw`; answers the turn id and the node that took it.
async fn submit_via(gw: &Gateway, sid: &str, request: &str) -> (String, String) {
    let resp = gw
        .req(Method::POST, &format!("/v1/sessions/{sid}/turns"))
        .json(&json!({"request": request, "idempotency_key": uuid::Uuid::new_v4().to_string()}))
        .send()
        .await
        .expect("submit");
    let node = resp
        .headers()
        .get("vis-node")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let (status, body) = into_json(resp).await;
    assert!(status.is_success(), "{status} {body}");
    let tid = body["turn_id"]
        .as_str()
        .or(body["id"].as_str())
        .unwrap_or_else(|| panic!("no turn id in {body}"))
        .to_string();
    (tid, node)
}

/// Follows the session's stream on `gw` from `cursor` until an event of one of `types`
/// for turn `tid`, reconnecting after the last seq seen when the stream ends (as the
/// Companion does). Answers every event seen.
async fn follow_until(
    gw: &Gateway,
    sid: &str,
    cursor: i64,
    tid: &str,
    types: &[&str],
) -> Vec<Event> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen: Vec<Event> = Vec::new();
    let mut cursor = cursor;
    loop {
        assert!(
            Instant::now() < deadline,
            "no {types:?} for {tid}: {:?}",
            ev_types(&seen)
        );
        let resp = gw
            .sse_response(&format!("/v1/sessions/{sid}/events?cursor={cursor}"), &[])
            .await;
        if !resp.status().is_success() {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        }
        let mut sse = Sse::new(resp);
        while let Some(ev) = sse.next_event(Duration::from_secs(5)).await {
            if let Some(seq) = ev.seq() {
                cursor = cursor.max(seq);
            }
            let done = types.contains(&ev.ty()) && ev.data["turn_id"] == tid;
            seen.push(ev);
            if done {
                return seen;
            }
            if Instant::now() > deadline {
                break;
            }
        }
    }
}

fn seqs(evs: &[Event]) -> Vec<i64> {
    evs.iter().filter_map(|e| e.seq()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_share_sessions_and_a_survivor_takes_over_a_killed_node() {
    let llm = FixtureLlm::start().await;
    let Some((shared, _schema, _stream)) = shared_args() else {
        return;
    };
    let a = Gateway::start(node_opts(&llm, &shared, "a")).await;
    let b = Gateway::start(node_opts(&llm, &shared, "b")).await;
    let c = Gateway::start(node_opts(&llm, &shared, "c")).await;

    // A session made on A is homed on A; a client on B follows it.
    let sid = a.create_session().await;
    let mut on_b = b.events(&sid, 0).await;

    // A turn submitted to C runs on A, and B's client sees all of it in order.
    llm.push(Script::Slow {
        chunks: (0..20).map(|i| format!("word{i} ")).collect(),
        delay_ms: 10,
    });
    let (tid, node) = submit_via(&c, &sid, "count some words").await;
    assert_eq!(node, "a", "the turn was taken by the session's home node");
    let mut live = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !live
        .iter()
        .any(|e: &Event| e.ty() == "turn.completed" && e.data["turn_id"] == tid)
    {
        assert!(Instant::now() < deadline, "B saw {:?}", ev_types(&live));
        if let Some(e) = on_b.next_event(Duration::from_secs(1)).await {
            live.push(e);
        }
    }
    let got = seqs(&live);
    assert!(
        got.windows(2).all(|w| w[0] < w[1]),
        "B's seqs are increasing, no duplicate: {got:?}"
    );
    let stored: Vec<i64> = a
        .events_since(&sid, 0)
        .await
        .iter()
        .filter_map(|e| e["seq"].as_i64())
        .collect();
    let last = *got.last().expect("events");
    for s in stored.iter().filter(|s| **s <= last) {
        assert!(
            got.contains(s),
            "B missed stored seq {s}: {got:?} vs {stored:?}"
        );
    }

    // Reads work on every node: B answers the session (forwarded to A).
    let resp = b
        .req(Method::GET, &format!("/v1/sessions/{sid}/turns"))
        .send()
        .await
        .expect("turns");
    assert_eq!(resp.headers()["vis-node"], "a");
    let (status, turns) = into_json(resp).await;
    assert!(status.is_success(), "{turns}");

    // A turn left running on A; A is killed. A survivor ends it as interrupted, and
    // clients on B and C see that.
    llm.push(Script::Stall {
        chunks: vec!["thinking".into()],
    });
    let (stalled, _) = submit_via(&b, &sid, "think for a long time").await;
    let before_kill = follow_until(&b, &sid, last, &stalled, &["turn.started"]).await;
    let cursor = *seqs(&before_kill).last().unwrap_or(&last);
    let mut a = a;
    let killed_at = Instant::now();
    a.kill9();
    let on_c = follow_until(&c, &sid, cursor, &stalled, &["turn.failed"]).await;
    let failed = on_c.last().expect("terminal");
    let error = failed.data["content"]
        .as_array()
        .and_then(|c| c.iter().find(|b| b["type"] == "error"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(error["code"], "interrupted", "{:?}", failed.data);
    let on_b = follow_until(&b, &sid, cursor, &stalled, &["turn.failed"]).await;
    assert_eq!(on_b.last().map(|e| e.seq()), on_c.last().map(|e| e.seq()));
    assert!(
        killed_at.elapsed() < Duration::from_millis(LEASE_MS * 4),
        "taken over within the lease time and a watch period: {:?}",
        killed_at.elapsed()
    );

    // The session's next turn runs on a live node.
    llm.push(Script::text(&["Back again."]));
    let (next, node) = submit_via(&c, &sid, "are you there?").await;
    assert!(node == "b" || node == "c", "ran on {node}");
    follow_until(&b, &sid, cursor, &next, &["turn.completed"]).await;

    // A comes back with a new lease: the session is not its own any more, so what it is
    // asked about the session goes to the new home, and it writes nothing for it.
    let a = a.restart_after_kill().await;
    llm.push(Script::text(&["Still here."]));
    let (again, taken_by) = submit_via(&a, &sid, "one more").await;
    assert_eq!(
        taken_by, node,
        "the restarted node forwards to the session's home"
    );
    let evs = follow_until(&a, &sid, 0, &again, &["turn.completed"]).await;
    let all = seqs(&evs);
    assert!(
        all.windows(2).all(|w| w[0] < w[1]),
        "one seq per event across the three homes: {all:?}"
    );
    assert!(
        !a.stderr().contains("may not write for it"),
        "the restarted node tried to write for a session it does not own"
    );
}

/// Kinds a node only hands to live streams (not in the journal).
const LIVE_ONLY: &[&str] = &[
    "activity",
    "turn.queued",
    "turn.queued.updated",
    "turn.queued.deleted",
    "turn.queued.drained",
    "session.model.updated",
    "egress.decision",
    "notification",
    "providers.updated",
    "mcp.servers.updated",
    "subscription.ready",
    "stream.gap",
];

/// A client following one session on one node, reconnecting after its last seq when the
/// stream ends, until told to stop.
fn observe(
    url: String,
    sid: String,
    mut cursor: i64,
    seen: Arc<Mutex<Vec<Event>>>,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<i64> {
    tokio::spawn(async move {
        let client = stream_client();
        while !stop.load(Ordering::Relaxed) {
            let resp = client
                .get(format!("{url}/v1/sessions/{sid}/events?cursor={cursor}"))
                .header("Accept", "text/event-stream")
                .header("X-Vis-Protocol", "2")
                .send()
                .await;
            let Ok(resp) = resp.map_err(|_| ()).and_then(|r| {
                if r.status().is_success() {
                    Ok(r)
                } else {
                    Err(())
                }
            }) else {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            let mut sse = Sse::new(resp);
            while !stop.load(Ordering::Relaxed) {
                match sse.next_event(Duration::from_millis(200)).await {
                    Some(ev) => {
                        if let Some(seq) = ev.seq() {
                            cursor = cursor.max(seq);
                        }
                        seen.lock().unwrap().push(ev);
                    }
                    None if sse.ended => break,
                    None => {}
                }
            }
        }
        cursor
    })
}

/// The crash trial on PostgreSQL: 30 rounds, each killing (-9) the node a running turn's
/// session is homed on at a random moment, resubmitting the turn by its idempotency key
/// through a survivor, and restarting the killed node. A client on a survivor sees every
/// event: none it saw is missing from the journal or differs there, no seq is used twice,
/// and every key made exactly one turn with exactly one terminal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_node_kills_lose_no_event_reuse_no_seq_and_keep_resubmits_idempotent() {
    const ROUNDS: usize = 30;
    let llm = FixtureLlm::start().await;
    let Some((mut shared, _schema, _stream)) = shared_args() else {
        return;
    };
    let ttl = shared
        .iter()
        .position(|a| a == "--lease-ttl-ms")
        .expect("ttl")
        + 1;
    shared[ttl] = "1000".into();
    let mut nodes = Vec::new();
    for name in ["a", "b", "c"] {
        nodes.push(Gateway::start(node_opts(&llm, &shared, name)).await);
    }
    let sid = nodes[0].create_session().await;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut cursor = 0;
    let mut turns = Vec::new();
    let names = ["a", "b", "c"];
    for round in 0..ROUNDS {
        llm.push(Script::Slow {
            chunks: (0..25).map(|i| format!("w{i} ")).collect(),
            delay_ms: 20,
        });
        let key = format!("crash-trial-{round}");
        let entry = &nodes[round % 3];
        let (tid, home) = submit_keyed_via(entry, &sid, &key).await;
        let h = names.iter().position(|n| *n == home).expect("home node");
        let o = (h + 1) % 3;
        let stop = Arc::new(AtomicBool::new(false));
        let watcher = observe(
            nodes[o].url.clone(),
            sid.clone(),
            cursor,
            seen.clone(),
            stop.clone(),
        );
        tokio::time::sleep(Duration::from_millis(rand_ms(round, 600))).await;
        nodes[h].kill9();
        // The same key through a survivor: the same turn, never a second one.
        let deadline = Instant::now() + Duration::from_secs(15);
        let again = loop {
            let resp = nodes[o]
                .req(Method::POST, &format!("/v1/sessions/{sid}/turns"))
                .json(&json!({"request": "count", "idempotency_key": key}))
                .send()
                .await
                .expect("resubmit");
            let (status, body) = into_json(resp).await;
            if status.is_success() {
                break body["turn_id"].as_str().unwrap_or_default().to_string();
            }
            assert!(
                Instant::now() < deadline,
                "resubmit refused: {status} {body}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert_eq!(
            again, tid,
            "round {round}: a resubmitted key is the same turn"
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        while !seen.lock().unwrap().iter().any(|e| {
            (e.ty() == "turn.completed" || e.ty() == "turn.failed") && e.data["turn_id"] == tid
        }) {
            assert!(
                Instant::now() < deadline,
                "round {round}: no terminal for {tid}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        stop.store(true, Ordering::Relaxed);
        cursor = watcher.await.expect("observer");
        let dead = nodes.remove(h);
        nodes.insert(h, dead.restart_after_kill().await);
        turns.push(tid);
    }

    let journal = nodes[0].events_since(&sid, 0).await;
    let stored: Vec<i64> = journal.iter().filter_map(|e| e["seq"].as_i64()).collect();
    assert!(
        stored.windows(2).all(|w| w[0] < w[1]),
        "journal seqs increase: {stored:?}"
    );
    let by_seq: std::collections::HashMap<i64, &serde_json::Value> = journal
        .iter()
        .filter_map(|e| e["seq"].as_i64().map(|s| (s, e)))
        .collect();
    let seen = seen.lock().unwrap();
    let mut first: std::collections::HashMap<i64, &serde_json::Value> = Default::default();
    for ev in seen.iter() {
        let Some(seq) = ev.seq() else { continue };
        let prev = first.entry(seq).or_insert(&ev.data);
        assert_eq!(
            *prev, &ev.data,
            "seq {seq} was used for two different events"
        );
        if !LIVE_ONLY.contains(&ev.ty()) {
            assert_eq!(
                by_seq.get(&seq).copied(),
                Some(&ev.data),
                "event {seq} ({}) seen live is not in the journal as seen",
                ev.ty()
            );
        }
    }
    for tid in &turns {
        let terminals = journal
            .iter()
            .filter(|e| {
                (e["type"] == "turn.completed" || e["type"] == "turn.failed")
                    && e["turn_id"] == tid.as_str()
            })
            .count();
        assert_eq!(terminals, 1, "turn {tid} has one terminal");
    }
    let failed = journal
        .iter()
        .filter(|e| e["type"] == "turn.failed")
        .count();
    eprintln!(
        "crash trial: {ROUNDS} kills, {} events seen live, {} stored, {failed} turns interrupted",
        seen.len(),
        stored.len()
    );
    assert!(failed > 0, "some kills landed while a turn ran");
    let started: std::collections::HashSet<&str> = journal
        .iter()
        .filter(|e| e["type"] == "turn.started")
        .filter_map(|e| e["turn_id"].as_str())
        .collect();
    assert!(
        started.len() <= ROUNDS,
        "{} turns started for {ROUNDS} keys",
        started.len()
    );
}

/// A spread of kill moments, the same on every run.
fn rand_ms(round: usize, max: u64) -> u64 {
    (round as u64 * 7919 + 31) % max
}

/// Submits a keyed turn through `gw`; answers the turn id and the node that took it.
async fn submit_keyed_via(gw: &Gateway, sid: &str, key: &str) -> (String, String) {
    let resp = gw
        .req(Method::POST, &format!("/v1/sessions/{sid}/turns"))
        .json(&json!({"request": "count", "idempotency_key": key}))
        .send()
        .await
        .expect("submit");
    let node = resp
        .headers()
        .get("vis-node")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let (status, body) = into_json(resp).await;
    assert!(status.is_success(), "{status} {body}");
    (
        body["turn_id"].as_str().unwrap_or_default().to_string(),
        node,
    )
}
