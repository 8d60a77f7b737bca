//! Unit tests of human input: field coercion, forms and their settlement, live views,
//! background shells and session disposal.

use super::shells::spawn_proc;
use super::tree::{coalesce_into, MERGED_APPEND_MAX};
use super::validate::check_field;
use super::*;
use crate::extensions::HumanDoors;
use async_trait::async_trait;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};

/// A worker double: alive until told otherwise; validators reject the text "bad".
struct FakeWorker {
    alive: AtomicBool,
}

#[async_trait]
impl DoorWorker for FakeWorker {
    async fn callback(&self, _: &Value, args: Vec<Value>) -> Result<Value, String> {
        Ok(if args.get(1) == Some(&json!("bad")) {
            json!("is bad")
        } else {
            Value::Null
        })
    }
    fn is_alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst)
    }
    fn hold(&self) -> Box<dyn Send + Sync> {
        Box::new(())
    }
}

fn fixture() -> (Arc<HumanInput>, Arc<Bus>, tempfile::TempDir) {
    let (store, dir) = crate::store::test_support::temp_store("hi");
    let bus = Arc::new(Bus::new(store, 1000));
    bus.open("s", 0);
    (HumanInput::new(bus.clone(), None), bus, dir)
}

fn session() -> SessionCtx {
    SessionCtx {
        id: "s".into(),
        project_root: None,
        workspace_root: std::env::temp_dir(),
    }
}

fn worker() -> Arc<FakeWorker> {
    Arc::new(FakeWorker {
        alive: AtomicBool::new(true),
    })
}

fn f(v: Value) -> Value {
    v
}

#[test]
fn every_field_type_is_coerced_and_checked() {
    let opts = json!([{"value": "a", "label": "A"}, {"value": 3, "label": "three"}]);
    let cb = f(json!({"type": "checkbox", "name": "c"}));
    assert_eq!(check_field(&cb, Some(&json!("on"))), Ok(json!(true)));
    assert_eq!(check_field(&cb, None), Ok(json!(false)));
    assert!(check_field(&cb, Some(&json!({}))).is_err());
    let req_cb = f(json!({"type": "checkbox", "name": "c", "is_required": true}));
    assert_eq!(
        check_field(&req_cb, Some(&json!(false))),
        Err("is required".into())
    );

    let sel = json!({"type": "select", "name": "s", "options": opts});
    assert_eq!(check_field(&sel, Some(&json!("3"))), Ok(json!(3)));
    assert_eq!(check_field(&sel, Some(&json!("a"))), Ok(json!("a")));
    assert!(check_field(&sel, Some(&json!("zz"))).is_err());
    assert_eq!(check_field(&sel, None), Ok(Value::Null));

    let ms = json!({"type": "multiselect", "name": "m", "options": opts, "is_required": true});
    assert_eq!(
        check_field(&ms, Some(&json!([3, "a", 3]))),
        Ok(json!(["a", 3]))
    );
    assert_eq!(check_field(&ms, Some(&json!("a"))), Ok(json!(["a"])));
    assert!(check_field(&ms, Some(&json!(["nope"]))).is_err());
    assert_eq!(
        check_field(&ms, Some(&json!([]))),
        Err("is required".into())
    );

    let rg = json!({"type": "range", "name": "r", "min": 0, "max": 10, "step": 2});
    assert_eq!(check_field(&rg, Some(&json!(4))), Ok(json!(4)));
    assert_eq!(check_field(&rg, Some(&json!("6"))), Ok(json!(6)));
    assert!(check_field(&rg, Some(&json!(5))).is_err(), "off step");
    assert!(check_field(&rg, Some(&json!(12))).is_err(), "out of bounds");
    assert!(check_field(&rg, Some(&json!("x"))).is_err());
    let frac = json!({"type": "range", "name": "r", "min": 0, "max": 1, "step": 0.25});
    assert_eq!(check_field(&frac, Some(&json!(0.5))), Ok(json!(0.5)));

    let txt = json!({"type": "plaintext", "name": "t", "min_length": 2, "max_length": 4, "is_required": true});
    assert_eq!(check_field(&txt, Some(&json!("abc"))), Ok(json!("abc")));
    assert!(check_field(&txt, Some(&json!("a"))).is_err());
    assert!(check_field(&txt, Some(&json!("abcde"))).is_err());
    assert_eq!(
        check_field(&txt, Some(&json!(""))),
        Err("is required".into())
    );
    assert!(check_field(&txt, Some(&json!([1]))).is_err());
    let ml = json!({"type": "multiline", "name": "ml"});
    assert_eq!(check_field(&ml, None), Ok(Value::Null));
    let pw = json!({"type": "password", "name": "p", "default": "dflt"});
    assert_eq!(check_field(&pw, None), Ok(json!("dflt")));

    let otp = json!({"type": "otp", "name": "o", "min_length": 6, "max_length": 6});
    assert_eq!(
        check_field(&otp, Some(&json!("123 456"))),
        Ok(json!("123456"))
    );
    assert!(check_field(&otp, Some(&json!("12345"))).is_err());
    assert!(check_field(&otp, Some(&json!("12a456"))).is_err());
}

#[test]
fn a_form_reports_every_invalid_field_by_name() {
    let fields = vec![
        json!({"type": "plaintext", "name": "a", "is_required": true}),
        json!({"type": "checkbox", "name": "b"}),
    ];
    let errs = validate(&fields, &Map::new()).expect_err("a is required");
    assert_eq!(errs.len(), 1);
    assert_eq!(errs["a"], "is required");
    let ok = validate(&fields, json!({"a": "x"}).as_object().unwrap()).expect("valid");
    assert_eq!(Value::Object(ok), json!({"a": "x", "b": false}));
}

fn ask_payload(extra: Value) -> Value {
    let mut request = json!({"title": "T", "fields": [
        {"type": "group", "direction": "row", "fields": [
            {"type": "plaintext", "name": "name", "is_required": true}]},
        {"type": "password", "name": "pw"}]});
    if let (Some(r), Some(e)) = (request.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            r.insert(k.clone(), v.clone());
        }
    }
    json!({"request": request, "validators": {"name": [1]},
        "run_validator": {"__vis_callback__": "run_validator", "id": "cb1"}})
}

async fn pending_id(hi: &HumanInput) -> String {
    for _ in 0..200 {
        let list = hi.list("s");
        if let Some(id) = list.requests.first().and_then(|r| r["id"].as_str()) {
            return id.to_string();
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("no pending request");
}

#[tokio::test]
async fn a_submit_is_validated_then_settles_the_form_with_secret_handles() {
    let (hi, _bus, _dir) = fixture();
    let w = worker();
    let h = hi.clone();
    let door =
        tokio::spawn(async move { h.ask(&session(), "ext", ask_payload(json!({})), w).await });
    let rid = pending_id(&hi).await;
    assert!(hi.is_awaiting("s"));
    assert_eq!(hi.list("s").requests[0]["timeout_ms"], DEFAULT_TIMEOUT_MS);
    let r = hi.submit("s", &rid, Map::new()).await.expect("known");
    assert!(!r.is_accepted);
    assert_eq!(r.errors.as_ref().expect("errors")["name"], "is required");
    let bad = json!({"name": "bad"}).as_object().cloned().unwrap();
    let r = hi.submit("s", &rid, bad).await.expect("known");
    assert_eq!(
        r.errors.as_ref().expect("errors")["name"],
        "is bad",
        "the custom validator ran: {r:?}"
    );
    assert!(hi.is_awaiting("s"), "the form stays pending");
    let good = json!({"name": "Ann", "pw": "hunter2"})
        .as_object()
        .cloned()
        .unwrap();
    let r = hi.submit("s", &rid, good.clone()).await.expect("known");
    assert!(r.is_accepted);
    let answer = door.await.expect("join").expect("answer");
    assert_eq!(answer["status"], "submitted");
    assert_eq!(answer["values"]["name"], "Ann");
    let handle = answer["values"]["pw"].as_str().expect("handle");
    assert!(handle.starts_with("vis-secret:"), "{handle}");
    assert_eq!(hi.reveal(Some("s"), handle).as_deref(), Some("hunter2"));
    assert!(hi.forget(Some("s"), handle));
    assert_eq!(hi.reveal(Some("s"), handle), None);
    assert!(!hi.is_awaiting("s"));
    let late = hi.submit("s", &rid, good).await.expect("remembered");
    assert!(!late.is_accepted);
    assert_eq!(
        hi.submit("s", "nope", Map::new()).await,
        Err(HiError::RequestNotFound)
    );
}

#[tokio::test]
async fn cancel_timeout_and_a_vanished_worker_settle_with_their_reasons() {
    let (hi, _bus, _dir) = fixture();
    // Not cancellable → refused; then a timeout settles it.
    let h = hi.clone();
    let door = tokio::spawn(async move {
        h.ask(
            &session(),
            "ext",
            ask_payload(json!({"is_cancellable": false, "timeout_ms": 150})),
            worker(),
        )
        .await
    });
    let rid = pending_id(&hi).await;
    assert_eq!(hi.cancel("s", &rid), Err(HiError::NotCancellable));
    let a = door.await.expect("join").expect("answer");
    assert_eq!(
        (a["status"].as_str(), a["reason"].as_str()),
        (Some("timeout"), Some("timeout"))
    );
    // Cancellable → cancelled.
    let h = hi.clone();
    let door = tokio::spawn(async move {
        h.ask(&session(), "ext", ask_payload(json!({})), worker())
            .await
    });
    let rid = pending_id(&hi).await;
    assert!(hi.cancel("s", &rid).expect("ok").is_cancelled);
    assert_eq!(
        door.await.expect("join").expect("answer")["reason"],
        "cancelled"
    );
    assert!(!hi.cancel("s", &rid).expect("settled").is_cancelled);
    // The worker goes away (no gateway bound: the session counts as gone).
    let w = worker();
    let (h, w2) = (hi.clone(), w.clone());
    let door =
        tokio::spawn(async move { h.ask(&session(), "ext", ask_payload(json!({})), w2).await });
    pending_id(&hi).await;
    w.alive.store(false, Ordering::SeqCst);
    assert_eq!(
        door.await.expect("join").expect("answer")["reason"],
        "undeliverable"
    );
    assert!(!hi.is_awaiting("s"));
}

#[test]
fn consecutive_log_appends_merge_up_to_the_cap() {
    let mut buf = Vec::new();
    coalesce_into(
        &mut buf,
        json!({"op": "append", "node_id": "l", "lines": ["a"]}),
    );
    coalesce_into(
        &mut buf,
        json!({"op": "append", "node_id": "l", "lines": ["b", "c"]}),
    );
    assert_eq!(buf.len(), 1);
    assert_eq!(buf[0]["lines"], json!(["a", "b", "c"]));
    coalesce_into(
        &mut buf,
        json!({"op": "append", "node_id": "other", "lines": ["x"]}),
    );
    assert_eq!(buf.len(), 2);
    let many: Vec<String> = (0..MERGED_APPEND_MAX).map(|i| i.to_string()).collect();
    coalesce_into(
        &mut buf,
        json!({"op": "append", "node_id": "other", "lines": many}),
    );
    assert_eq!(
        buf.len(),
        3,
        "a merge may not exceed {MERGED_APPEND_MAX} lines"
    );
}

#[tokio::test]
async fn live_patches_within_the_window_publish_once_and_logs_stay_readable() {
    let (hi, bus, _dir) = fixture();
    let w = worker();
    let nodes = json!([{"type": "log", "id": "out", "lines": []},
        {"type": "table", "id": "t", "columns": [], "rows": []}]);
    let open = hi
        .live_door(
            Some(&session()),
            "ext",
            json!({"op": "open", "title": "Job", "nodes": nodes}),
            w.clone(),
        )
        .await
        .expect("open");
    let vid = open["view_id"].as_str().unwrap().to_string();
    let before = bus.high_water("s").unwrap();
    for i in 0..5 {
        let env = json!({"op": "patch", "view_id": vid,
            "ops": [{"op": "append", "node_id": "out", "lines": [format!("line {i}")]}]});
        hi.live_door(Some(&session()), "ext", env, w.clone())
            .await
            .expect("patch");
    }
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert_eq!(
        bus.high_water("s").unwrap(),
        before + 1,
        "one coalesced patch event"
    );
    let log = hi.live_log("s", &vid, "out", 1, 2).expect("log");
    assert_eq!(log.total, 5);
    assert_eq!(log.lines, ["line 1", "line 2"]);
    let bad = hi
        .live_door(
            Some(&session()),
            "ext",
            json!({"op": "patch", "view_id": vid, "ops": [{"op": "set", "node_id": "nope"}]}),
            w.clone(),
        )
        .await;
    assert!(bad.is_err());
    let env = json!({"op": "patch", "view_id": vid,
        "ops": [{"op": "set", "node_id": "t", "row": {"id": "r1", "cells": {"a": 1}}}]});
    hi.live_door(Some(&session()), "ext", env, w.clone())
        .await
        .expect("row");
    assert_eq!(
        hi.live_focus("s", &vid, &json!({"node_id": "t", "item_ids": ["r1"]}))
            .expect("focus")
            .focused_ids,
        ["r1"]
    );
    assert!(matches!(
        hi.live_focus("s", &vid, &json!({"node_id": "t", "item_ids": ["zz"]})),
        Err(HiError::InvalidFocus(_))
    ));
    assert!(
        hi.live_interrupt("s", &vid, Some("stop".into()))
            .expect("ok")
            .is_interrupted
    );
    let env = json!({"op": "patch", "view_id": vid,
        "ops": [{"op": "append", "node_id": "out", "lines": ["more"]}]});
    let r = hi
        .live_door(Some(&session()), "ext", env, w.clone())
        .await
        .expect("patch");
    assert_eq!(r["interrupted"], true);
    assert_eq!(r["note"], "stop");
    hi.live_door(
        Some(&session()),
        "ext",
        json!({"op": "close", "view_id": vid, "reason": "interrupted"}),
        w,
    )
    .await
    .expect("close");
    assert_eq!(hi.live_views("s").views, Vec::<serde_json::Value>::new());
    assert_eq!(
        hi.live_log("s", &vid, "out", 0, 10)
            .expect("after close")
            .total,
        5
    );
}

#[tokio::test]
async fn background_children_answer_logs_send_wait_and_stop_by_id() {
    let (hi, _bus, _dir) = fixture();
    let env: BTreeMap<String, String> = [("PATH".to_string(), "/usr/bin:/bin".to_string())].into();
    let p = spawn_proc(
        "read x; echo got $x; sleep 30",
        &std::env::temp_dir(),
        &env,
        &[],
        None,
        None,
    )
    .expect("spawn");
    let id = p.id.clone();
    hi.with("s", |s| s.procs.insert(id.clone(), p));
    let w: Arc<dyn DoorWorker> = worker();
    let door = |op: Value| {
        let (hi, w) = (hi.clone(), w.clone());
        async move {
            hi.shell_door("shell", Some(&session()), "ext", op, w)
                .await
                .expect("door")
        }
    };
    let r = door(json!({"op": "send", "id": id, "text": "abc"})).await;
    assert_eq!(r["status"], "running");
    let r = door(json!({"op": "wait", "id": id, "seconds": 0.5})).await;
    assert_eq!(r["status"], "running", "{r}");
    assert_eq!(r["out"], "got abc");
    let r = door(json!({"op": "stop", "id": id})).await;
    assert_eq!(
        (r["status"].as_str(), r["is_eof"].as_bool()),
        (Some("stopped"), Some(true))
    );
    assert!(hi
        .shell_door(
            "shell",
            Some(&session()),
            "ext",
            json!({"op": "logs", "id": "nope"}),
            w.clone()
        )
        .await
        .is_err());

    let p = spawn_proc(
        "echo a; echo b; exit 3",
        &std::env::temp_dir(),
        &env,
        &[],
        Some(10),
        None,
    )
    .expect("spawn");
    let id = p.id.clone();
    hi.with("s", |s| s.procs.insert(id.clone(), p));
    let r = door(json!({"op": "wait", "id": id, "seconds": 10})).await;
    assert_eq!(
        (r["status"].as_str(), r["exit"].as_i64()),
        (Some("exited"), Some(3))
    );
    let r = door(json!({"op": "logs", "id": id, "offset": -1})).await;
    assert_eq!(r["out"], "b");
    assert_eq!(
        (r["offset"].as_u64(), r["next_offset"].as_u64()),
        (Some(1), Some(2))
    );
}

#[tokio::test]
async fn disposing_a_session_settles_its_forms_and_closes_its_views() {
    let (hi, bus, _dir) = fixture();
    let h = hi.clone();
    let door = tokio::spawn(async move {
        h.ask(&session(), "ext", ask_payload(json!({})), worker())
            .await
    });
    pending_id(&hi).await;
    let env = json!({"op": "open", "title": "J", "nodes": [{"type": "log", "id": "l"}]});
    hi.live_door(Some(&session()), "ext", env, worker())
        .await
        .expect("open");
    let before = bus.high_water("s").unwrap();
    hi.session_disposed("s");
    let a = door.await.expect("join").expect("answer");
    assert_eq!(a["reason"], "undeliverable");
    assert_eq!(
        bus.high_water("s").unwrap(),
        before + 2,
        "close + live.close"
    );
    assert!(!hi.is_awaiting("s"));
    assert_eq!(hi.live_views("s").views, Vec::<serde_json::Value>::new());
}
