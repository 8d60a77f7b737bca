//! Generic answers and error bodies for malformed or hostile input.

mod common;

use common::*;
use reqwest::{Method, StatusCode};
use serde_json::json;

async fn send_raw_body(
    gw: &Gateway,
    path: &str,
    body: Vec<u8>,
    ct: &str,
) -> (StatusCode, serde_json::Value) {
    into_json(
        gw.req(Method::POST, path)
            .header("Content-Type", ct)
            .body(body)
            .send()
            .await
            .unwrap(),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_or_blank_or_non_string_request_is_400_invalid_request() {
    let gw = Gateway::start(Opts::default()).await;
    let sid = gw.create_session().await;
    let path = format!("/v1/sessions/{sid}/turns");
    let bodies: Vec<&[u8]> = vec![
        b"",
        b"{not json",
        b"null",
        b"[1,2]",
        b"\"hi\"",
        b"{}",
        b"{\"request\": null}",
        b"{\"request\": 5}",
        b"{\"request\": [\"a\"]}",
        b"{\"request\": {\"text\": \"a\"}}",
        b"{\"request\": \"\"}",
        b"{\"request\": \" \\n\\t \"}",
        b"\xff\xfe\x00garbage",
    ];
    for b in bodies {
        let (s, v) = send_raw_body(&gw, &path, b.to_vec(), "application/json").await;
        assert_eq!(
            s,
            StatusCode::BAD_REQUEST,
            "{:?}: {v}",
            String::from_utf8_lossy(b)
        );
        assert_eq!(
            error_type(&v),
            "invalid-request",
            "{:?}",
            String::from_utf8_lossy(b)
        );
    }
    // a wrongly typed optional field is a 400 too, not a 500
    let (s, v) = gw
        .post(&path, json!({"request": "hi", "attachments": "nope"}))
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    error_type(&v);
    // JSON is parsed whatever the Content-Type
    let (s, v) = send_raw_body(
        &gw,
        &path,
        br#"{"request": "/help"}"#.to_vec(),
        "text/plain",
    )
    .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{v}");
    let (s, _) = gw.get("/healthz").await;
    assert_eq!(s, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_integer_windows_are_400_invalid_window() {
    let gw = Gateway::start(Opts::default()).await;
    let sid = gw.create_session().await;
    for q in [
        format!("/v1/sessions/{sid}/transcript?limit=abc"),
        format!("/v1/sessions/{sid}/transcript?offset=1.5"),
        format!("/v1/sessions/{sid}/transcript?limit=-2"),
        "/v1/sessions?limit=abc".to_string(),
        "/v1/sessions?after=zzz".to_string(),
        format!("/v1/sessions/{sid}/egress?limit=abc"),
        format!("/v1/sessions/{sid}/egress?limit=0"),
        format!("/v1/sessions/{sid}/egress?before=x"),
    ] {
        let (s, v) = gw.get(&q).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{q}: {v}");
        assert_eq!(error_type(&v), "invalid-window", "{q}");
    }
    let (_, v) = gw
        .get(format!("/v1/sessions/{sid}/transcript?limit=abc"))
        .await;
    assert_eq!(v["error"]["message"], "limit and offset must be integers");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_cursors_never_break_the_stream_routes() {
    let gw = Gateway::start(Opts::default()).await;
    let sid = gw.create_session().await;
    let mut sse = gw.events(&sid, -1).await;
    gw.submit(&sid, "/help").await;
    sse.collect_until("context.updated", WAIT).await;
    for (path, hdr) in [
        (format!("/v1/sessions/{sid}/events?cursor=abc"), None),
        (format!("/v1/sessions/{sid}/events"), Some("not-a-number")),
        (
            format!("/v1/sessions/{sid}/events?cursor=99999999999999999999"),
            None,
        ),
        (format!("/v1/sessions/{sid}/events?cursor=-5"), None),
    ] {
        let hs: Vec<(&str, &str)> = hdr.map(|h| vec![("Last-Event-ID", h)]).unwrap_or_default();
        let r = gw.sse_response(&path, &hs).await;
        assert_eq!(r.status(), StatusCode::OK, "{path}");
        let mut sse = Sse::new(r);
        let ready = sse.next_event(WAIT).await.unwrap();
        assert_eq!(ready.event, "subscription.ready", "{path}");
        assert!(
            ready.data["cursor"].as_i64().unwrap() >= 0,
            "{path}: {:?}",
            ready.data
        );
    }
    for q in ["abc", "-1", "1e9"] {
        let (s, v) = gw
            .get(format!("/v1/sessions/{sid}/events-since?cursor={q}"))
            .await;
        assert_eq!(s, StatusCode::OK, "{q}: {v}");
        assert!(v["events"].is_array());
    }
    let (s, _) = gw.get("/healthz").await;
    assert_eq!(s, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_body_is_413_with_an_error_body() {
    let gw = Gateway::start(Opts::default().env("VIS_GATEWAY_MAX_BODY_BYTES", "1000")).await;
    let sid = gw.create_session().await;
    let big = "y".repeat(5000);
    for path in [
        format!("/v1/sessions/{sid}/turns"),
        "/v1/sessions".to_string(),
    ] {
        let (s, v) = gw.post(&path, json!({"request": big, "title": big})).await;
        assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE, "{path}: {v}");
        error_type(&v);
    }
    // a chunked body without Content-Length is capped too (the gateway may also close the
    // connection while the client is still sending, which the client sees as an error)
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        (0..10).map(|_| Ok(vec![b' '; 500])).collect();
    let sent = gw
        .req(Method::POST, &format!("/v1/sessions/{sid}/turns"))
        .body(reqwest::Body::wrap_stream(futures::stream::iter(chunks)))
        .send()
        .await;
    if let Ok(r) = sent {
        let (s, v) = into_json(r).await;
        assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE, "chunked: {v}");
    }
    let (s, _) = gw
        .post(
            &format!("/v1/sessions/{sid}/turns"),
            json!({"request": "/help"}),
        )
        .await;
    assert_eq!(s, StatusCode::ACCEPTED, "small bodies still work");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_routes_are_404_not_found_and_wrong_verbs_405() {
    let gw = Gateway::start(Opts::default()).await;
    let sid = gw.create_session().await;
    for p in ["/nope", "/v1/nope", "/v1/sessions/x/y/z/w", "/v2/sessions"] {
        let (s, v) = gw.get(p).await;
        assert_eq!(s, StatusCode::NOT_FOUND, "{p}");
        assert_eq!(
            v,
            json!({"error": {"type": "not-found", "message": "no such route"}}),
            "{p}"
        );
    }
    for (m, p) in [
        (Method::PUT, "/v1/sessions".to_string()),
        (Method::DELETE, "/v1/capabilities".to_string()),
        (Method::POST, format!("/v1/sessions/{sid}/transcript")),
        (Method::GET, format!("/v1/sessions/{sid}/cancel-current")),
        (Method::PATCH, format!("/v1/sessions/{sid}/events")),
    ] {
        let (s, v) = into_json(gw.req(m.clone(), &p).send().await.unwrap()).await;
        assert_eq!(s, StatusCode::METHOD_NOT_ALLOWED, "{m} {p}: {v}");
        assert_eq!(error_type(&v), "method-not-allowed", "{m} {p}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trailing_slash_is_stripped_or_redirected() {
    let gw = Gateway::start(Opts::default()).await;
    let sid = gw.create_session().await;
    let client = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    for p in ["/v1/sessions/".to_string(), format!("/v1/sessions/{sid}/")] {
        let r = client
            .get(gw.u(&p))
            .header("X-Vis-Protocol", "2")
            .header("X-Vis-Min-Gateway-Protocol", "2")
            .send()
            .await
            .unwrap();
        let s = r.status();
        let ok = s == StatusCode::OK
            || ((s == StatusCode::MOVED_PERMANENTLY || s == StatusCode::PERMANENT_REDIRECT)
                && r.headers()["location"] == p.trim_end_matches('/'));
        assert!(ok, "{p}: {s}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn human_input_and_live_view_errors_have_their_types() {
    let gw = Gateway::start(Opts::default()).await;
    let sid = gw.create_session().await;
    let rid = uuid::Uuid::new_v4().to_string();
    let base = format!("/v1/sessions/{sid}/human-input");
    for body in [
        json!({}),
        json!({"values": [1]}),
        json!({"values": "x"}),
        json!(null),
    ] {
        let (s, v) = gw
            .post(&format!("{base}/{rid}/actions/submit"), body.clone())
            .await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{body}: {v}");
        assert_eq!(error_type(&v), "bad-request");
        assert_eq!(v["error"]["message"], "values must be an object");
    }
    let (s, v) = gw
        .post(
            &format!("{base}/{rid}/actions/submit"),
            json!({"values": {"a": 1}}),
        )
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{v}");
    assert_eq!(error_type(&v), "human-input-not-found");
    assert_eq!(v["error"]["request_id"], rid.as_str());
    let (s, v) = gw.post_empty(&format!("{base}/{rid}/actions/cancel")).await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{v}");
    assert_eq!(error_type(&v), "human-input-not-found");
    let (s, v) = gw.get(format!("{base}/live/not-a-uuid/log/n1")).await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{v}");
    assert_eq!(error_type(&v), "live-view-not-found");
    let (s, v) = gw
        .post(
            &format!("{base}/live/not-a-uuid/actions/interrupt"),
            json!({}),
        )
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{v}");
    assert_eq!(error_type(&v), "live-view-not-found");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unparsable_ids_and_odd_shapes_get_documented_answers() {
    let gw = Gateway::start(Opts::default()).await;
    let sid = gw.create_session().await;
    for p in [
        "/v1/sessions/not-a-uuid/transcript",
        "/v1/sessions/not-a-uuid/events-since",
        "/v1/sessions/not-a-uuid/seq",
        "/v1/sessions/not-a-uuid/turns/x/trace",
    ] {
        let (s, v) = gw.get(p).await;
        assert_eq!(s, StatusCode::NOT_FOUND, "{p}: {v}");
        error_type(&v);
    }
    // A valid but unknown UUID gets an empty transcript page
    let unknown = uuid::Uuid::new_v4();
    let (s, v) = gw.get(format!("/v1/sessions/{unknown}/transcript")).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(
        v,
        json!({"turns": [], "total": 0, "offset": 0, "has_more": false})
    );
    // trace of an unknown id is an empty list
    let (s, v) = gw
        .get(format!("/v1/sessions/{sid}/turns/{unknown}/trace"))
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["iterations"], json!([]));
    // a session root that is not a directory
    let (s, v) = gw
        .post(
            "/v1/sessions",
            json!({"channel": "web", "root": "/definitely/not/here"}),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    error_type(&v);
    // a non-object create body falls back to defaults
    let (s, v) = gw.post("/v1/sessions", json!([1, 2])).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_bad_requests_leave_the_gateway_serving() {
    let gw = Gateway::start(Opts::default()).await;
    let sid = gw.create_session().await;
    let mut futs = Vec::new();
    for i in 0..60 {
        let b = match i % 4 {
            0 => gw
                .req(Method::POST, &format!("/v1/sessions/{sid}/turns"))
                .body("{"),
            1 => gw.req(Method::GET, "/v1/sessions?limit=x"),
            2 => gw.raw(Method::GET, "/v1/sessions"),
            _ => gw.req(
                Method::GET,
                &format!("/v1/sessions/{}", uuid::Uuid::new_v4()),
            ),
        };
        futs.push(b.send());
    }
    for r in futures::future::join_all(futs).await {
        let r = r.unwrap();
        assert!(r.status().is_client_error(), "{}", r.status());
        let v: serde_json::Value = r.json().await.unwrap();
        error_type(&v);
    }
    let (s, v) = gw.get(format!("/v1/sessions/{sid}")).await;
    assert_eq!(s, StatusCode::OK, "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seq_of_an_unknown_but_valid_sid_is_not_a_404() {
    let gw = Gateway::start(Opts::default()).await;
    let unknown = uuid::Uuid::new_v4();
    let (s, v) = gw.get(format!("/v1/sessions/{unknown}/events-since")).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v, json!({"events": []}));
    let (s, v) = gw.get(format!("/v1/sessions/{unknown}/seq")).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v, json!({"seq": 0}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attachments_over_the_advertised_caps_are_400_invalid_attachment() {
    let gw = Gateway::start(Opts::default()).await;
    let sid = gw.create_session().await;
    let path = format!("/v1/sessions/{sid}/turns");
    let big = "A".repeat(26_214_400 / 3 * 4 + 400);
    for (name, att) in [
        (
            "too big",
            json!({"filename": "a.png", "media_type": "image/png", "base64": big}),
        ),
        (
            "no data",
            json!({"filename": "a.png", "media_type": "image/png"}),
        ),
    ] {
        let (s, v) = gw
            .post(&path, json!({"request": "/help", "attachments": [att]}))
            .await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{name}: {v}");
        assert_eq!(error_type(&v), "invalid-attachment", "{name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attachments_of_unadvertised_types_or_bad_base64_are_refused() {
    let gw = Gateway::start(Opts::default()).await;
    let sid = gw.create_session().await;
    let path = format!("/v1/sessions/{sid}/turns");
    for (name, att) in [
        (
            "type",
            json!({"filename": "x.exe", "media_type": "application/x-msdownload", "base64": "AAAA"}),
        ),
        (
            "base64",
            json!({"filename": "a.png", "media_type": "image/png", "base64": "!!not base64!!"}),
        ),
    ] {
        let (s, v) = gw
            .post(&path, json!({"request": "/help", "attachments": [att]}))
            .await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{name}: {v}");
        assert_eq!(error_type(&v), "invalid-attachment", "{name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submit_within_the_advertised_attachment_caps_is_not_refused_as_too_large() {
    let gw = Gateway::start(Opts::default()).await;
    let sid = gw.create_session().await;
    let (_, caps) = gw.get("/v1/capabilities").await;
    let max = caps["features"]["attachments"]["max_file_bytes"]
        .as_u64()
        .unwrap() as usize;
    // base64 of exactly `max` zero bytes (each full group of 3 is "AAAA", the tail is padded)
    let tail = match max % 3 {
        1 => "AA==",
        2 => "AAA=",
        _ => "",
    };
    let b64 = format!("{}{tail}", "A".repeat(max / 3 * 4));
    let atts: Vec<_> = (0..2)
        .map(|i| json!({"filename": format!("{i}.png"), "media_type": "image/png", "base64": b64}))
        .collect();
    let (s, v) = gw
        .post(
            &format!("/v1/sessions/{sid}/turns"),
            json!({"request": "/help", "attachments": atts}),
        )
        .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_on_a_project_with_a_broken_config_is_refused_with_the_key_named() {
    let gw = Gateway::start(Opts::default()).await;
    let proj = gw.dirs.base.path().join("broken-project");
    std::fs::create_dir_all(&proj).unwrap();
    std::fs::write(proj.join("vis.yml"), "default_modle: x\n").unwrap();
    let (s, v) = gw
        .post(
            "/v1/sessions",
            json!({"channel": "web", "root": proj.display().to_string()}),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    error_type(&v);
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("default_modle") && msg.contains("vis.yml"),
        "{msg}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_utf8_in_a_path_parameter_is_a_json_400_naming_the_parameter() {
    let gw = Gateway::start(Opts::default()).await;
    for path in ["/v1/sessions/%FF%FE", "/v1/sessions/%C3%28/seq"] {
        let r = gw.req(Method::GET, path).send().await.unwrap();
        let ct = r
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let (s, v) = into_json(r).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{path}: {v}");
        assert!(ct.starts_with("application/json"), "{path}: {ct}");
        assert_eq!(error_type(&v), "invalid-request", "{path}: {v}");
        assert!(v.to_string().contains("path parameter"), "{path}: {v}");
    }
}
