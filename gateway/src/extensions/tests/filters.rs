//! Network filters: verdicts, the filter lane, timeouts and kills, concurrency, doors from a
//! filter, per-project filter sets.

use super::*;

#[tokio::test(flavor = "multi_thread")]
async fn network_filters_block_allow_and_deny_when_they_raise_or_hang() {
    let f = fixture_with(|c| c.filter_timeout = Duration::from_millis(1500));
    f.global("todo.py", TODO_EXTENSION);
    f.global(
        "zfilters.py",
        r#"
import time
import blockether.vis.extension as vis
def picky(ctx):
    if ctx["host"] == "raise.test":
        raise KeyError("no such header")
    if ctx["host"] == "hang.test":
        time.sleep(60)
    if ctx.get("body") == "secret":
        return vis.block("body leaks a secret")
    return "strings allow"
vis.register(vis.Extension(name="zfilters", description="d", network_filters=[vis.NetworkFilter(picky)]))
"#,
    );
    f.host.catalog().reload(None).await;
    let ctx = |method: &str, host: &str, body: Option<&str>| {
        json!({"phase": "https", "method": method, "host": host, "port": 443, "path": "/x",
               "headers": {"user-agent": "t"}, "body": body})
    };
    let names: Vec<String> = f
        .host
        .filters()
        .infos()
        .into_iter()
        .map(|i| i.extension)
        .collect();
    assert_eq!(names, vec!["todo", "zfilters"]);
    assert_eq!(
        f.host.filters().run(&ctx("GET", "ok.test", None)).await,
        Ok(FilterVerdict::Allow)
    );
    assert_eq!(
        f.host.filters().run(&ctx("DELETE", "api.test", None)).await,
        Ok(FilterVerdict::Block("no DELETE to api.test".into()))
    );
    assert_eq!(
        f.host
            .filters()
            .run(&ctx("POST", "ok.test", Some("secret")))
            .await,
        Ok(FilterVerdict::Block("body leaks a secret".into()))
    );
    match f.host.filters().run(&ctx("GET", "raise.test", None)).await {
        Err(e) => {
            assert!(e.message.starts_with("KeyError"), "{}", e.message);
            assert!(e.trace.unwrap_or_default().contains("zfilters.py"));
        }
        other => panic!("{other:?}"),
    }
    match f.host.filters().run(&ctx("GET", "hang.test", None)).await {
        Err(e) => assert!(e.message.contains("timed out"), "{}", e.message),
        other => panic!("{other:?}"),
    }
    // The filter worker was replaced and serves again.
    assert_eq!(
        f.host.filters().run(&ctx("GET", "ok.test", None)).await,
        Ok(FilterVerdict::Allow)
    );
    // Through the proxy's trait.
    let filters = f.host.filters().global();
    assert_eq!(filters.len(), 2);
    let pctx = vis_proxy::FilterCtx {
        phase: vis_proxy::Phase::Http,
        method: Some("DELETE".into()),
        host: "x.test".into(),
        port: 80,
        path: Some("/".into()),
        headers: Default::default(),
        body: None,
        status: None,
    };
    assert_eq!(
        filters[0].check(&pctx).await,
        Ok(vis_proxy::FilterVerdict::Block(
            "no DELETE to x.test".into()
        ))
    );
    f.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_filter_is_not_held_up_by_a_slow_provider_callback_of_its_extension() {
    let f = fixture_with(|c| c.filter_timeout = Duration::from_millis(500));
    f.global(
        "slow.py",
        r#"
import time
import blockether.vis.extension as vis
def slow_status():
    time.sleep(1.5)
    return vis.ProviderStatus(is_authenticated=True)
vis.register(vis.Extension(name="slow", description="d",
    providers=[vis.Provider(id="slow", label="Slow", status_fn=slow_status)],
    network_filters=[vis.NetworkFilter(lambda ctx: None)]))
"#,
    );
    f.host.catalog().reload(None).await;
    let ctx = json!({"phase": "http", "method": "GET", "host": "h.test", "port": 80,
                     "path": "/", "headers": {}});
    assert_eq!(
        f.host.filters().run(&ctx).await,
        Ok(FilterVerdict::Allow),
        "warm"
    );
    let pid = f.host.workers().registration_pid();
    let host = f.host.clone();
    let status = tokio::spawn(async move {
        host.providers()
            .call("slow", "slow", "status_fn", vec![])
            .await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = std::time::Instant::now();
    // The filter runs in the extension's filter worker, not behind the callback.
    assert_eq!(f.host.filters().run(&ctx).await, Ok(FilterVerdict::Allow));
    assert!(started.elapsed() < Duration::from_millis(1000));
    let status = status.await.expect("join").expect("status still answers");
    assert_eq!(status["is_authenticated"], true);
    assert_eq!(f.host.workers().registration_pid(), pid);
    assert_eq!(f.host.filters().run(&ctx).await, Ok(FilterVerdict::Allow));
    f.host.shutdown().await;
}

/// Filter-lane latency probe: `cargo test -p vis-gateway lane_latency_probe -- --ignored
/// --nocapture` (prints p50/p99 of sequential calls; asserts nothing about speed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn lane_latency_probe() {
    let f = fixture();
    f.global(
        "allow.py",
        r#"
import blockether.vis.extension as vis
vis.register(vis.Extension(name="allow", description="d",
    network_filters=[vis.NetworkFilter(lambda ctx: None)]))
"#,
    );
    f.host.catalog().reload(None).await;
    let filters = f.host.filters().global();
    let pctx = vis_proxy::FilterCtx {
        phase: vis_proxy::Phase::Http,
        method: Some("GET".into()),
        host: "x.test".into(),
        port: 80,
        path: Some("/".into()),
        headers: [("user-agent".to_string(), "t".to_string())]
            .into_iter()
            .collect(),
        body: None,
        status: None,
    };
    let mut lat = Vec::new();
    for i in 0..3000 {
        let t = std::time::Instant::now();
        let v = filters[0].check(&pctx).await;
        if i >= 200 {
            lat.push(t.elapsed().as_micros());
        }
        assert_eq!(v, Ok(vis_proxy::FilterVerdict::Allow));
        if std::env::var_os("LANE_GAP").is_some() {
            tokio::time::sleep(Duration::from_micros(50)).await;
        }
    }
    lat.sort();
    println!(
        "lane: p50 {} µs, p90 {} µs, p99 {} µs",
        lat[lat.len() / 2],
        lat[lat.len() * 9 / 10],
        lat[lat.len() * 99 / 100]
    );
    f.host.shutdown().await;
}

// -- the filter lane -------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn the_filter_lane_allows_blocks_and_keeps_the_traceback_of_a_raise() {
    use vis_proxy::{FilterVerdict, Phase};
    let (f, filter) = lane_fixture(Duration::from_secs(5)).await;
    assert_eq!(
        filter.check(&pctx(Phase::Http, "ok.test")).await,
        Ok(FilterVerdict::Allow)
    );
    assert_eq!(
        filter.check(&pctx(Phase::Https, "block.test")).await,
        Ok(FilterVerdict::Block(
            "no POST /p?q=1 (https, port 8080)".into()
        ))
    );
    let mut teapot = pctx(Phase::HttpsResponse, "ok.test");
    teapot.status = Some(418);
    assert_eq!(
        filter.check(&teapot).await,
        Ok(FilterVerdict::Block("teapot".into()))
    );
    // A body near the 1 MiB bound crosses whole (larger than the socket buffer).
    let mut big = pctx(Phase::Http, "ok.test");
    big.body = Some("x".repeat(1 << 20));
    assert_eq!(filter.check(&big).await, Ok(FilterVerdict::Allow));
    big.body = Some("secret".into());
    assert_eq!(
        filter.check(&big).await,
        Ok(FilterVerdict::Block("body".into()))
    );
    let err = filter
        .check(&pctx(Phase::Http, "raise.test"))
        .await
        .expect_err("a raise denies");
    // The filter reports the raise as it is; the proxy names the filter in the deny reason.
    assert_eq!(err.message, "ValueError: bad é-42");
    let trace = err.trace.unwrap_or_default();
    assert!(trace.contains("lane.py"), "{trace}");
    assert!(trace.contains("raise ValueError(\"bad \""), "{trace}");
    // The message is not repeated as the traceback's last line.
    assert!(!trace.contains("ValueError: bad é-42"), "{trace}");
    f.host.shutdown().await;
}

/// Voluntary context switches of the calling thread.
fn own_voluntary_switches() -> i64 {
    // SAFETY: getrusage writes one rusage.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut u) };
    u.ru_nvcsw
}

/// Voluntary context switches of a process's threads named `name`.
fn voluntary_switches_of(pid: u32, name: &str) -> i64 {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("tasks");
    tasks
        .flatten()
        .filter(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == name))
        .filter_map(|t| std::fs::read_to_string(t.path().join("status")).ok())
        .filter_map(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
                .and_then(|v| v.trim().parse::<i64>().ok())
        })
        .sum()
}

// One sleep per call on each side: on a Unix socket, reading wakes whoever waits on the
// peer's socket with "write space", so a gateway thread that also waits for writability,
// or a lane thread blocked in `recv`, used to sleep twice per call.
#[tokio::test(flavor = "current_thread")]
async fn a_filter_call_costs_each_side_one_sleep_not_two() {
    use vis_proxy::{FilterVerdict, Phase};
    let (f, filter) = lane_fixture(Duration::from_secs(5)).await;
    let ok = pctx(Phase::Http, "ok.test");
    assert_eq!(filter.check(&ok).await, Ok(FilterVerdict::Allow));
    let pid = f.host.workers().filter_pid("lane").expect("pid");
    const N: i64 = 200;
    let (gw0, lane0) = (
        own_voluntary_switches(),
        voluntary_switches_of(pid, "vis-filter-lane"),
    );
    for _ in 0..N {
        assert_eq!(filter.check(&ok).await, Ok(FilterVerdict::Allow));
    }
    let gw = own_voluntary_switches() - gw0;
    let lane = voluntary_switches_of(pid, "vis-filter-lane") - lane0;
    assert!(
        gw <= N * 3 / 2,
        "the gateway thread slept {gw} times for {N} calls"
    );
    assert!(
        lane <= N * 3 / 2,
        "the lane thread slept {lane} times for {N} calls"
    );
    f.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_filter_that_hangs_times_out_kills_the_worker_and_the_next_call_recovers() {
    use vis_proxy::{FilterVerdict, Phase};
    let (f, filter) = lane_fixture(Duration::from_millis(700)).await;
    assert_eq!(
        filter.check(&pctx(Phase::Http, "ok.test")).await,
        Ok(FilterVerdict::Allow)
    );
    let pid = f.host.workers().filter_pid("lane").expect("pid");
    let started = std::time::Instant::now();
    let err = filter
        .check(&pctx(Phase::Http, "hang.test"))
        .await
        .expect_err("a timeout denies");
    assert!(err.message.contains("timed out"), "{}", err.message);
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!(
        filter.check(&pctx(Phase::Http, "ok.test")).await,
        Ok(FilterVerdict::Allow)
    );
    assert_ne!(f.host.workers().filter_pid("lane"), Some(pid));
    f.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_killed_during_a_filter_call_denies_it_and_the_next_call_recovers() {
    use vis_proxy::{FilterVerdict, Phase};
    let (f, filter) = lane_fixture(Duration::from_secs(10)).await;
    assert_eq!(
        filter.check(&pctx(Phase::Http, "ok.test")).await,
        Ok(FilterVerdict::Allow)
    );
    let pid = f.host.workers().filter_pid("lane").expect("pid");
    let slow = {
        let filter = filter.clone();
        tokio::spawn(async move { filter.check(&pctx(Phase::Http, "slow.test")).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    // SAFETY: signalling a child process of this test.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    let started = std::time::Instant::now();
    let err = slow.await.expect("join").expect_err("a crash denies");
    assert!(err.message.contains("exited"), "{}", err.message);
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!(
        filter.check(&pctx(Phase::Http, "ok.test")).await,
        Ok(FilterVerdict::Allow)
    );
    assert_ne!(f.host.workers().filter_pid("lane"), Some(pid));
    // sys.exit in a filter denies too, and the worker is replaced after that answer.
    let pid = f.host.workers().filter_pid("lane");
    let err = filter
        .check(&pctx(Phase::Http, "exit.test"))
        .await
        .expect_err("sys.exit denies");
    assert!(err.message.contains("SystemExit"), "{}", err.message);
    assert_eq!(
        filter.check(&pctx(Phase::Http, "ok.test")).await,
        Ok(FilterVerdict::Allow)
    );
    assert_ne!(f.host.workers().filter_pid("lane"), pid);
    f.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_filter_calls_from_many_tasks_each_get_their_own_verdict() {
    use vis_proxy::{FilterVerdict, Phase};
    let (f, filter) = lane_fixture(Duration::from_secs(10)).await;
    let mut tasks = Vec::new();
    for i in 0..200u32 {
        let filter = filter.clone();
        tasks.push(tokio::spawn(async move {
            let mut out = Vec::new();
            for round in 0..5u32 {
                let host = format!("odd{}.test", i * 5 + round);
                out.push((host.clone(), filter.check(&pctx(Phase::Http, &host)).await));
            }
            out
        }));
    }
    let mut n = 0;
    for t in tasks {
        for (host, verdict) in t.await.expect("join") {
            let k: u32 = host[3..host.len() - 5].parse().expect("number");
            let want = if k % 2 == 1 {
                Ok(FilterVerdict::Block(host.clone()))
            } else {
                Ok(FilterVerdict::Allow)
            };
            assert_eq!(verdict, want, "{host}");
            n += 1;
        }
    }
    assert_eq!(n, 1000);
    f.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_filter_can_use_host_doors_and_a_reload_swaps_it() {
    use vis_proxy::{FilterVerdict, Phase};
    let (f, filter) = lane_fixture(Duration::from_secs(5)).await;
    for seen in 1..=3 {
        assert_eq!(
            filter.check(&pctx(Phase::Http, "door.test")).await,
            Ok(FilterVerdict::Block(format!("seen={seen}")))
        );
    }
    assert_eq!(
        f.state.get("lane", "seen").await.expect("state"),
        Some(json!(3))
    );
    f.global(
        "lane.py",
        r#"
import blockether.vis.extension as vis
vis.register(vis.Extension(name="lane", description="d",
    network_filters=[vis.NetworkFilter(lambda ctx: vis.block("v2"))]))
"#,
    );
    f.host.catalog().reload(None).await;
    let filters = f.host.filters().global();
    assert_eq!(
        filters[0].check(&pctx(Phase::Http, "ok.test")).await,
        Ok(FilterVerdict::Block("v2".into()))
    );
    f.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_abandoned_filter_call_that_never_answers_gets_its_worker_replaced() {
    use vis_proxy::{FilterVerdict, Phase};
    let (f, filter) = lane_fixture(Duration::from_millis(600)).await;
    assert_eq!(
        filter.check(&pctx(Phase::Http, "ok.test")).await,
        Ok(FilterVerdict::Allow)
    );
    let pid = f.host.workers().filter_pid("lane").expect("pid");
    // The caller gives up first (as the proxy's own timeout or a client that left would).
    let gave_up = tokio::time::timeout(
        Duration::from_millis(100),
        filter.check(&pctx(Phase::Http, "hang.test")),
    )
    .await;
    assert!(gave_up.is_err());
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(
        filter.check(&pctx(Phase::Http, "ok.test")).await,
        Ok(FilterVerdict::Allow)
    );
    assert_ne!(f.host.workers().filter_pid("lane"), Some(pid));
    f.host.shutdown().await;
}

#[tokio::test]
async fn a_projects_filters_decide_only_its_own_sessions_and_load_on_their_first_request() {
    use vis_proxy::FilterSet;
    let f = fixture();
    f.project_ext(
        "wall.py",
        r#"
import blockether.vis.extension as vis
vis.register(vis.Extension(name="wall", description="d",
    network_filters=[vis.NetworkFilter(lambda ctx: vis.block("nothing leaves project A"))]))
"#,
    );
    let set = crate::engine::ext::HostFilters(f.host.clone());
    let ctx = vis_proxy::FilterCtx {
        phase: vis_proxy::Phase::Http,
        method: Some("GET".into()),
        host: "x.test".into(),
        port: 80,
        path: Some("/".into()),
        headers: Default::default(),
        body: None,
        status: None,
    };
    // Nothing loaded yet: the project's first request loads it and is decided by it.
    let first = set.filters(&principal_of(Some(&f.project)));
    assert_eq!(first.len(), 1);
    assert_eq!(
        first[0].check(&ctx).await,
        Ok(vis_proxy::FilterVerdict::Block(
            "nothing leaves project A".into()
        ))
    );
    // Loaded now: the project's own filter, by name.
    let loaded = set.filters(&principal_of(Some(&f.project)));
    assert_eq!(
        loaded.iter().map(|x| x.name()).collect::<Vec<_>>(),
        ["wall"]
    );
    // Another project (loaded, no extensions) and a session without a project: none of A's.
    let other = f.root.join("other");
    std::fs::create_dir_all(&other).unwrap();
    f.host.catalog().ensure_project(Some(&other)).await;
    assert!(set.filters(&principal_of(Some(&other))).is_empty());
    assert!(set.filters(&principal_of(None)).is_empty());
    f.host.shutdown().await;
}
