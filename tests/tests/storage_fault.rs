//! A full disk under the database (issue item 11): durable before live must hold when writes
//! fail. The fault is real: the gateway runs in a private mount namespace (`unshare -Urm`)
//! where its database lives on a 16 MiB tmpfs; the test fills that tmpfs with a file
//! (through `/proc/<pid>/root`) until the kernel answers ENOSPC, and frees it again.
//!
//! - no frame reaches a live client that the database does not hold;
//! - a `kill -9` during the fault hands out no seq twice, and the interrupted turn gets its
//!   terminal at the next start;
//! - without a kill, the running turn fails (`storage_error`) once the disk has room again,
//!   live and stored, and a client resuming from its last seq gets that terminal.

mod common;

use common::*;
use reqwest::StatusCode;
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A gateway whose database is on a size-limited tmpfs in a mount namespace of its own.
struct OnTmpfs {
    /// `unshare … sh`: holds the namespace; (re)starts the gateway on each `go` file.
    wrapper: Child,
    dirs: Arc<Dirs>,
    opts: Opts,
    ctl: PathBuf,
    db_dir: PathBuf,
    starts: usize,
}

const SCRIPT: &str = r#"
set -e
mount -t tmpfs -o size=16m tmpfs "$DB_DIR"
: > "$CTL/mounted"
n=0
while :; do
  while [ ! -e "$CTL/go" ]; do
    [ -e "$CTL/quit" ] && exit 0
    sleep 0.02
  done
  rm -f "$CTL/go"
  "$@" > "$CTL/stdout-$n.log" 2> "$CTL/stderr-$n.log" || true
  n=$((n+1))
done
"#;

impl OnTmpfs {
    async fn start(opts: Opts) -> (OnTmpfs, Gateway) {
        let dirs = Dirs::new();
        let ctl = dirs.base.path().join("ctl");
        let db_dir = dirs.base.path().join("db");
        std::fs::create_dir_all(&ctl).unwrap();
        std::fs::create_dir_all(&db_dir).unwrap();
        // SQLite follows the link: the database and its -wal and -shm live on the tmpfs.
        std::os::unix::fs::symlink(db_dir.join("vis.db"), dirs.home().join("vis.db")).unwrap();
        let gw = command(&dirs, &opts);
        let mut cmd = Command::new("unshare");
        cmd.args(["-Urm", "sh", "-c", SCRIPT, "sh"]);
        cmd.arg(gw.get_program());
        cmd.args(gw.get_args());
        cmd.args(["start", "--port", "0", "--root"])
            .arg(dirs.root());
        for (k, v) in gw.get_envs() {
            match v {
                Some(v) => cmd.env(k, v),
                None => cmd.env_remove(k),
            };
        }
        cmd.env("DB_DIR", &db_dir).env("CTL", &ctl);
        let wrapper = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(ctl.join("wrapper.log")).unwrap())
            .spawn()
            .expect("unshare (util-linux) runs");
        let deadline = Instant::now() + WAIT;
        while !ctl.join("mounted").exists() {
            assert!(
                Instant::now() < deadline,
                "no private tmpfs (user and mount namespaces needed): {}",
                std::fs::read_to_string(ctl.join("wrapper.log")).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let mut t = OnTmpfs {
            wrapper,
            dirs,
            opts,
            ctl,
            db_dir,
            starts: 0,
        };
        let gw = t.launch().await;
        (t, gw)
    }

    /// The tmpfs as seen from outside the namespace.
    fn tmpfs(&self) -> PathBuf {
        let inner = self.db_dir.strip_prefix("/").unwrap();
        PathBuf::from(format!("/proc/{}/root", self.wrapper.id())).join(inner)
    }

    /// Starts the gateway in the namespace and waits until it answers.
    async fn launch(&mut self) -> Gateway {
        let old = std::fs::read_to_string(self.dirs.registry()).unwrap_or_default();
        std::fs::write(self.ctl.join("go"), "").unwrap();
        let n = self.starts;
        self.starts += 1;
        let deadline = Instant::now() + Duration::from_secs(20);
        let registry = loop {
            let text = std::fs::read_to_string(self.dirs.registry()).unwrap_or_default();
            if text != old {
                if let Ok(r) = serde_json::from_str::<Value>(&text) {
                    break r;
                }
            }
            assert!(
                Instant::now() < deadline,
                "the gateway did not start: {}",
                std::fs::read_to_string(self.ctl.join(format!("stderr-{n}.log")))
                    .unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let port = registry["port"].as_u64().expect("port") as u16;
        let gw = Gateway {
            dirs: self.dirs.clone(),
            opts: self.opts.clone(),
            child: None,
            url: format!("http://127.0.0.1:{port}"),
            port,
            token: registry["token"].as_str().unwrap_or_default().to_string(),
            registry,
            http: client(),
            stdout_path: self.ctl.join(format!("stdout-{n}.log")),
            stderr_path: self.ctl.join(format!("stderr-{n}.log")),
        };
        loop {
            if let Ok(r) = gw.http.get(gw.u("/healthz")).send().await {
                if r.status() == StatusCode::OK {
                    return gw;
                }
            }
            assert!(Instant::now() < deadline, "/healthz never answered");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Writes a file into the tmpfs until the kernel refuses (ENOSPC).
    fn fill(&self) {
        let mut f = std::fs::File::create(self.tmpfs().join("filler")).expect("filler");
        let block = vec![0u8; 64 * 1024];
        let mut wrote = 0usize;
        for size in [64 * 1024, 4096, 1] {
            loop {
                match f.write(&block[..size]) {
                    Ok(0) => break,
                    Ok(n) => wrote += n,
                    Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
                    Err(e) => panic!("filling the tmpfs: {e}"),
                }
                assert!(wrote < 64 << 20, "a 16 MiB tmpfs never filled");
            }
        }
        let _ = f.sync_all();
    }

    fn free(&self) {
        std::fs::remove_file(self.tmpfs().join("filler")).expect("remove the filler");
    }

    fn kill9(gw: &Gateway) {
        let pid = gw.registry["pid"].as_i64().expect("pid") as libc::pid_t;
        // SAFETY: SIGKILL to the gateway this test started (its pid from its registry).
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
        let deadline = Instant::now() + WAIT;
        // SAFETY: signal 0 only checks that the process exists.
        while unsafe { libc::kill(pid, 0) } == 0 {
            assert!(Instant::now() < deadline, "the gateway did not die");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for OnTmpfs {
    fn drop(&mut self) {
        let _ = std::fs::write(self.ctl.join("quit"), "");
        if let Some(pid) = std::fs::read_to_string(self.dirs.registry())
            .ok()
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            .and_then(|r| r["pid"].as_i64())
        {
            // SAFETY: the gateway this test started.
            unsafe {
                libc::kill(pid as libc::pid_t, libc::SIGKILL);
            }
        }
        let _ = self.wrapper.kill();
        let _ = self.wrapper.wait();
    }
}

/// A turn that streams one sentence of ~1 KiB every 40 ms for 16 s.
fn long_answer() -> Script {
    let sentence = format!("{}. ", "word ".repeat(200).trim_end());
    Script::Slow {
        chunks: vec![sentence; 400],
        delay_ms: 40,
    }
}

/// The stored journal by seq.
async fn journal(gw: &Gateway, sid: &str) -> BTreeMap<i64, Value> {
    gw.events_since(sid, 0)
        .await
        .into_iter()
        .filter_map(|e| e["seq"].as_i64().map(|s| (s, e)))
        .collect()
}

/// Every frame a client saw is in the journal exactly as it saw it; a live-only frame's
/// seq holds no other event.
fn assert_all_stored(seen: &[Event], stored: &BTreeMap<i64, Value>) {
    const LIVE_ONLY: [&str; 8] = [
        "activity",
        "turn.queued",
        "turn.queued.updated",
        "turn.queued.deleted",
        "turn.queued.drained",
        "session.model_updated",
        "egress.decision",
        "notification",
    ];
    for e in seen {
        let Some(seq) = e.seq() else { continue };
        match stored.get(&seq) {
            Some(s) => assert_eq!(
                s, &e.data,
                "seq {seq} was shown as {} but the database holds {}",
                e.event, s["type"]
            ),
            None => assert!(
                LIVE_ONLY.contains(&e.event.as_str()),
                "seq {seq} ({}) reached a client but is not stored",
                e.event
            ),
        }
    }
}

fn error_code(terminal: &Value) -> String {
    terminal["content"]
        .as_array()
        .and_then(|c| c.iter().find(|b| b["type"] == "error"))
        .and_then(|b| b["code"].as_str())
        .unwrap_or("")
        .to_string()
}

/// Starts the long turn, waits for its first deltas, fills the disk and reads for 1.5 s.
/// Returns the turn id and every frame seen (before and during the fault).
async fn turn_into_a_full_disk(t: &OnTmpfs, gw: &Gateway, sid: &str) -> (String, Sse, Vec<Event>) {
    let mut sse = gw.events(sid, -1).await;
    let (s, rec) = gw.submit(sid, "write a lot").await;
    assert_eq!(s, StatusCode::ACCEPTED, "{rec}");
    let tid = rec["turn_id"].as_str().unwrap().to_string();
    let mut seen = Vec::new();
    let deadline = Instant::now() + WAIT;
    while seen
        .iter()
        .filter(|e: &&Event| e.event == "content.block.delta")
        .count()
        < 3
    {
        assert!(
            Instant::now() < deadline,
            "no deltas: {:?}",
            ev_types(&seen)
        );
        seen.extend(sse.next_event(WAIT).await);
    }
    t.fill();
    seen.extend(sse.drain_for(Duration::from_millis(1500)).await);
    (tid, sse, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_full_disk_clients_see_only_stored_frames_and_the_turn_fails_once_there_is_room() {
    let llm = FixtureLlm::start().await;
    llm.push(long_answer());
    let (t, gw) = OnTmpfs::start(Opts::openai(&llm)).await;
    let sid = gw.create_session().await;
    let (tid, mut sse, mut seen) = turn_into_a_full_disk(&t, &gw, &sid).await;
    let before_room = seen.iter().filter_map(Event::seq).max().unwrap_or(0);
    t.free();
    let rest = sse
        .collect_until_any(TERMINALS, Duration::from_secs(30))
        .await;
    seen.extend(rest);
    let stored = journal(&gw, &sid).await;
    assert_all_stored(&seen, &stored);
    let failed = seen.iter().find(|e| e.event == "turn.failed").unwrap();
    assert_eq!(failed.data["turn_id"], tid.as_str());
    assert_eq!(error_code(&failed.data), "storage_error", "{}", failed.data);
    assert!(
        gw.metric("vis_events_lost_total").await.unwrap_or(0.0) > 0.0,
        "the disk really was full: some events were lost"
    );
    assert!(
        stored
            .values()
            .any(|e| e["type"] == "turn.failed" && e["turn_id"] == tid.as_str()),
        "the terminal is stored"
    );
    let (_, rec) = gw.get(format!("/v1/sessions/{sid}/turns/{tid}")).await;
    assert_eq!(rec["status"], "failed", "{rec}");
    // A client that resumes from the last seq it saw before the disk had room gets it too.
    let mut again = gw.events(&sid, before_room).await;
    let evs = again.collect_until("turn.failed", WAIT).await;
    assert!(evs
        .iter()
        .any(|e| e.event == "turn.failed" && e.data["turn_id"] == tid.as_str()));
    // And the session takes turns again.
    let mut sse = gw.events(&sid, -1).await;
    gw.submit(&sid, "/help").await;
    sse.collect_until("turn.completed", WAIT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_during_a_disk_full_fault_hands_out_no_seq_twice_and_the_turn_gets_its_terminal() {
    let llm = FixtureLlm::start().await;
    llm.push(long_answer());
    let (mut t, gw) = OnTmpfs::start(Opts::openai(&llm)).await;
    let sid = gw.create_session().await;
    let (tid, _sse, seen) = turn_into_a_full_disk(&t, &gw, &sid).await;
    let last_seen = seen.iter().filter_map(Event::seq).max().unwrap_or(0);
    OnTmpfs::kill9(&gw);
    drop(gw);
    t.free();
    let gw = t.launch().await;

    // The client resumes from the last seq it saw and gets the interrupted turn's terminal.
    let mut sse = gw.events(&sid, last_seen).await;
    let evs = sse.collect_until("turn.failed", WAIT).await;
    let failed = evs.iter().find(|e| e.event == "turn.failed").unwrap();
    assert_eq!(failed.data["turn_id"], tid.as_str());
    assert_eq!(error_code(&failed.data), "interrupted", "{}", failed.data);
    assert!(failed.seq().unwrap() > last_seen);
    // Nothing the client saw before the kill means anything else now.
    assert_all_stored(&seen, &journal(&gw, &sid).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_whose_terminal_was_lost_is_failed_from_its_stored_record_once_there_is_room() {
    let llm = FixtureLlm::start().await;
    llm.push(Script::Stall {
        chunks: vec!["Thinking about it. ".into()],
    });
    let (t, gw) = OnTmpfs::start(Opts::openai(&llm)).await;
    let sid = gw.create_session().await;
    let mut sse = gw.events(&sid, -1).await;
    let (s, rec) = gw.submit(&sid, "take your time").await;
    assert_eq!(s, StatusCode::ACCEPTED, "{rec}");
    let tid = rec["turn_id"].as_str().unwrap().to_string();
    let mut seen = sse.collect_until("content.block.delta", WAIT).await;
    gw.wait_stored(&sid, "content.block.delta").await;
    // The turn's stream is silent now: the only writes during the fault are its cancel.
    t.fill();
    let (s, v) = gw
        .post_empty(&format!("/v1/sessions/{sid}/turns/{tid}/cancel"))
        .await;
    assert!(s.is_success(), "{s} {v}");
    seen.extend(sse.drain_for(Duration::from_millis(1000)).await);
    assert!(
        !seen.iter().any(|e| TERMINALS.contains(&e.event.as_str())),
        "the unstored turn.cancelled reached a client: {:?}",
        ev_types(&seen)
    );
    t.free();
    seen.extend(
        sse.collect_until("turn.failed", Duration::from_secs(15))
            .await,
    );
    let failed = seen.iter().find(|e| e.event == "turn.failed").unwrap();
    assert_eq!(failed.data["turn_id"], tid.as_str());
    assert_eq!(error_code(&failed.data), "storage_error", "{}", failed.data);
    let stored = journal(&gw, &sid).await;
    assert_all_stored(&seen, &stored);
    let terminals: Vec<&str> = stored
        .values()
        .filter(|e| e["turn_id"] == tid.as_str())
        .filter_map(|e| e["type"].as_str())
        .filter(|k| TERMINALS.contains(k))
        .collect();
    assert_eq!(
        terminals,
        vec!["turn.failed"],
        "exactly one stored terminal"
    );
    let (_, rec) = gw.get(format!("/v1/sessions/{sid}/turns/{tid}")).await;
    assert_eq!(rec["status"], "failed", "{rec}");
}

/// Seq holes in what one client of a session saw between its turn's start and its terminal.
fn holes(seen: &[Event]) -> Vec<i64> {
    let seqs: Vec<i64> = seen.iter().filter_map(Event::seq).collect();
    seqs.windows(2)
        .filter(|w| w[1] > w[0] + 1)
        .flat_map(|w| (w[0] + 1)..w[1])
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_session_that_loses_events_on_a_full_disk_learns_it() {
    let llm = FixtureLlm::start().await;
    let sentence = format!("{}. ", "word ".repeat(200).trim_end());
    // One turn streams all along, so its loss wakes the storage watcher first; four others
    // write a sentence every 0.7–0.85 s, lose the ones written while the disk is full (4 s)
    // and end soon after it frees, while the watcher may still be waiting to retry a write
    // for the first one (this is how they used to end `turn.completed` with holes).
    llm.push(long_answer());
    for i in 0..4 {
        llm.push(Script::Slow {
            chunks: vec![sentence.clone(); 5],
            delay_ms: 700 + 50 * i,
        });
    }
    let (t, gw) = OnTmpfs::start(Opts::openai(&llm)).await;
    let mut runs = Vec::new();
    for _ in 0..5 {
        let sid = gw.create_session().await;
        let sse = gw.events(&sid, -1).await;
        runs.push((sid, sse, Vec::<Event>::new()));
    }
    for (sid, _, _) in &runs {
        let (s, rec) = gw.submit(sid, "write a lot").await;
        assert_eq!(s, StatusCode::ACCEPTED, "{rec}");
    }
    for (_, sse, seen) in runs.iter_mut() {
        let deadline = Instant::now() + WAIT;
        while !seen.iter().any(|e| e.event == "content.block.delta") {
            assert!(Instant::now() < deadline, "no deltas: {:?}", ev_types(seen));
            seen.extend(sse.next_event(WAIT).await);
        }
    }
    t.fill();
    tokio::time::sleep(Duration::from_millis(4000)).await;
    t.free();
    for (sid, sse, seen) in runs.iter_mut() {
        seen.extend(
            sse.collect_until_any(TERMINALS, Duration::from_secs(30))
                .await,
        );
        let terminal = seen
            .iter()
            .rev()
            .find(|e| TERMINALS.contains(&e.event.as_str()))
            .unwrap_or_else(|| panic!("session {sid} saw no terminal: {:?}", ev_types(seen)));
        let holes = holes(seen);
        let told = seen.iter().any(|e| e.event == "stream.gap")
            || (terminal.event == "turn.failed" && error_code(&terminal.data) == "storage_error");
        assert!(
            holes.is_empty() || told,
            "session {sid} lost seqs {holes:?} and ended {} {} without being told",
            terminal.event,
            terminal.data
        );
        assert_all_stored(seen, &journal(&gw, sid).await);
    }
    assert!(
        gw.metric("vis_events_lost_total").await.unwrap_or(0.0) > 0.0,
        "the disk really was full: some events were lost"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creating_a_session_on_a_full_disk_answers_507_and_works_once_there_is_room() {
    let (t, gw) = OnTmpfs::start(Opts::default()).await;
    // A little history so the journal's pages are in use.
    let first = gw.create_session().await;
    gw.submit(&first, "/help").await;
    gw.wait_idle(&first).await;
    t.fill();
    let mut refused = None;
    // Writes may still fit in pages SQLite holds; a few sessions use them up.
    for _ in 0..200 {
        let (s, v) = gw.post("/v1/sessions", serde_json::json!({})).await;
        if s != StatusCode::CREATED {
            refused = Some((s, v));
            break;
        }
    }
    let (s, v) = refused.expect("a session was refused on the full disk");
    assert_eq!(s, StatusCode::INSUFFICIENT_STORAGE, "{v}");
    assert_eq!(error_type(&v), "insufficient-storage", "{v}");
    t.free();
    let (s, v) = gw.post("/v1/sessions", serde_json::json!({})).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
}
