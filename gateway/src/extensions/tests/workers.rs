//! Worker lifetime: hangs, `sys.exit`/`os._exit`, abandoned calls, dropping the host.

use super::*;

const BAD: &str = r#"
import os, sys, time
import blockether.vis.extension as vis
def ok() -> str:
    """Fine."""
    return "ok"
def hang() -> str:
    """Never returns."""
    while True:
        time.sleep(0.05)
def leave() -> str:
    """Calls sys.exit."""
    sys.exit(3)
def die() -> str:
    """Calls os._exit."""
    os._exit(1)
vis.register(vis.Extension(name="bad", alias="bad", description="d",
    symbols=[vis.Symbol(ok), vis.Symbol(hang), vis.Symbol(leave), vis.Symbol(die)]))
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_call_that_hangs_times_out_and_the_next_call_runs_on_a_fresh_worker() {
    let f = fixture_with(|c| c.call_timeout = Duration::from_millis(1500));
    f.global("bad.py", BAD);
    let s = f.session("s");
    f.host
        .tools()
        .call(&s, "ok", json!({}))
        .await
        .expect("warm up");
    let first = f.host.workers().session_pid("s").expect("pid");
    let started = std::time::Instant::now();
    let err = f
        .host
        .tools()
        .call(&s, "hang", json!({}))
        .await
        .expect_err("times out");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(err.kind, "timeout");
    assert!(
        err.message.contains("timed out after 1.5 s"),
        "{}",
        err.message
    );
    let out = f
        .host
        .tools()
        .call(&s, "ok", json!({}))
        .await
        .expect("fresh");
    assert_eq!(out.text, "ok");
    assert_ne!(f.host.workers().session_pid("s"), Some(first));
    f.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sys_exit_in_extension_code_fails_the_call_and_the_host_recovers() {
    let f = fixture();
    f.global("bad.py", BAD);
    let s = f.session("s");
    f.host
        .tools()
        .call(&s, "ok", json!({}))
        .await
        .expect("warm up");
    let first = f.host.workers().session_pid("s").expect("pid");
    let err = f
        .host
        .tools()
        .call(&s, "leave", json!({}))
        .await
        .expect_err("fails");
    assert_eq!(err.message, "SystemExit: extension code called sys.exit(3)");
    let out = f
        .host
        .tools()
        .call(&s, "ok", json!({}))
        .await
        .expect("recovered");
    assert_eq!(out.text, "ok");
    assert_ne!(f.host.workers().session_pid("s"), Some(first));
    f.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn os_exit_in_extension_code_fails_the_call_and_the_host_recovers() {
    let f = fixture();
    f.global("bad.py", BAD);
    let s = f.session("s");
    let other = SessionCtx {
        id: "other".into(),
        ..f.session("other")
    };
    f.host
        .tools()
        .call(&other, "ok", json!({}))
        .await
        .expect("other session");
    let other_pid = f.host.workers().session_pid("other");
    let err = f
        .host
        .tools()
        .call(&s, "die", json!({}))
        .await
        .expect_err("fails");
    assert_eq!(err.kind, "worker-exited");
    assert!(err.message.contains("exit code 1"), "{}", err.message);
    let out = f
        .host
        .tools()
        .call(&s, "ok", json!({}))
        .await
        .expect("recovered");
    assert_eq!(out.text, "ok");
    assert_eq!(
        f.host.workers().session_pid("other"),
        other_pid,
        "other session untouched"
    );
    f.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn dropping_the_host_ends_its_workers() {
    let f = fixture();
    f.global("todo.py", TODO_EXTENSION);
    let s = f.session("s");
    f.host
        .tools()
        .call(&s, "add", json!({"text": "a"}))
        .await
        .expect("call");
    let pid = f.host.workers().session_pid("s").expect("pid") as i32;
    drop(f);
    let mut gone = false;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        // Signal 0 only checks existence; a reaped child no longer exists.
        if unsafe { libc::kill(pid, 0) } != 0 {
            gone = true;
            break;
        }
    }
    assert!(gone, "worker {pid} still running");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_abandoned_call_stops_its_worker_and_the_next_call_runs_fresh() {
    let f = fixture();
    f.global("bad.py", BAD);
    let s = f.session("s");
    f.host
        .tools()
        .call(&s, "ok", json!({}))
        .await
        .expect("warm up");
    let first = f.host.workers().session_pid("s");
    let cancelled = tokio::time::timeout(
        Duration::from_millis(300),
        f.host.tools().call(&s, "hang", json!({})),
    )
    .await;
    assert!(cancelled.is_err(), "the caller gave up");
    let started = std::time::Instant::now();
    let out = f
        .host
        .tools()
        .call(&s, "ok", json!({}))
        .await
        .expect("fresh");
    assert_eq!(out.text, "ok");
    assert!(started.elapsed() < Duration::from_secs(4));
    assert_ne!(f.host.workers().session_pid("s"), first);
    f.host.shutdown().await;
}
