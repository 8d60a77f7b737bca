use super::*;
use serde::Serialize;
use serde_json::{json, Value};

#[derive(Serialize)]
struct Started {
    turn_id: &'static str,
    iteration: usize,
    error: Option<String>,
}

#[derive(Serialize)]
struct Counts {
    count: u64,
    last_ts: u64,
}

#[derive(Serialize)]
struct Record<'a> {
    id: &'a str,
    host: &'a str,
    #[serde(flatten)]
    counts: Option<Counts>,
}

fn data_line(frame: &[u8]) -> String {
    let text = std::str::from_utf8(frame).expect("utf-8");
    text.lines()
        .find_map(|l| l.strip_prefix("data: "))
        .expect("a data line")
        .to_string()
}

#[test]
fn an_event_is_the_envelope_keys_in_order_then_the_payload_members_in_theirs() {
    let payload = Started {
        turn_id: "t1",
        iteration: 2,
        error: None,
    };
    let e = Envelope::new(42, 1_700_000_000_000, "s1", "turn.started", payload);
    assert_eq!(
        e.to_json(),
        r#"{"schema":1,"seq":42,"ts":1700000000000,"session_id":"s1","type":"turn.started","turn_id":"t1","iteration":2,"error":null}"#
    );
}

#[test]
fn flattened_members_of_a_payload_sit_beside_the_envelope_keys() {
    let r = Record {
        id: "r",
        host: "example.com",
        counts: Some(Counts {
            count: 3,
            last_ts: 9,
        }),
    };
    let v: Value = serde_json::from_str(&Envelope::new(1, 5, "s", "egress.decision", r).to_json())
        .expect("json");
    assert_eq!(
        v,
        json!({"schema": 1, "seq": 1, "ts": 5, "session_id": "s", "type": "egress.decision",
               "id": "r", "host": "example.com", "count": 3, "last_ts": 9})
    );
    let none = Record {
        id: "r",
        host: "h",
        counts: None,
    };
    let text = Envelope::new(2, 5, "s", "egress.decision", none).to_json();
    assert!(!text.contains("count"), "{text}");
}

#[test]
fn a_payload_member_named_like_an_envelope_key_never_overrides_the_envelope() {
    #[derive(Serialize)]
    struct Claims {
        session_id: &'static str,
        ts: u64,
        fork_session_id: &'static str,
    }
    let text = Envelope::new(
        7,
        100,
        "s",
        "session.forked",
        Claims {
            session_id: "other",
            ts: 1,
            fork_session_id: "f",
        },
    )
    .to_json();
    assert_eq!(
        text,
        r#"{"schema":1,"seq":7,"ts":100,"session_id":"s","type":"session.forked","fork_session_id":"f"}"#
    );
    let map = json!({"type": "spoofed", "seq": 1, "schema": 9, "keep": true});
    let text = Envelope::new(8, 100, "s", "notification", &map).to_json();
    assert_eq!(
        text,
        r#"{"schema":1,"seq":8,"ts":100,"session_id":"s","type":"notification","keep":true}"#
    );
}

#[test]
fn hostile_session_ids_and_hosts_are_escaped_and_the_frame_keeps_one_data_line() {
    let sid = "s\"\r\nid: 999\n\nevent: turn.completed\ndata: {}";
    let host = "evil.example\"},\"decision\":\"allow\u{2028}\n\n";
    let r = Record {
        id: "</script>",
        host,
        counts: None,
    };
    let e = Envelope::new(3, 1, sid, "egress.decision", r);
    let json = e.to_json();
    let frame = e.frame(&json);
    let text = std::str::from_utf8(&frame).expect("utf-8");
    // one frame: three lines and the blank line that ends it, nothing a parser could split
    assert_eq!(text.matches("\n\n").count(), 1, "{text:?}");
    assert!(text.ends_with("\n\n"));
    assert!(!text.contains('\r'));
    // `id:`, `event:`, `data:` and the empty line that ends the frame
    assert_eq!(text.lines().count(), 4, "{text:?}");
    let v: Value = serde_json::from_str(&data_line(&frame)).expect("json");
    assert_eq!(v["session_id"], sid);
    assert_eq!(v["host"], host);
    assert_eq!(v["id"], "</script>");
    assert_eq!(v["seq"], 3);
    assert_eq!(v.as_object().map(|m| m.len()), Some(7), "{v}");
}

#[test]
fn the_frame_id_is_the_seq_a_client_sends_back_as_last_event_id() {
    let e = Envelope::new(1234, 1, "s", "turn.started", ());
    let frame = e.frame(&e.to_json());
    let text = std::str::from_utf8(&frame).expect("utf-8");
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("id: 1234"));
    assert_eq!(lines.next(), Some("event: turn.started"));
    let last_event_id: i64 = text
        .lines()
        .find_map(|l| l.strip_prefix("id: "))
        .and_then(|s| s.parse().ok())
        .expect("an id");
    let v: Value = serde_json::from_str(&data_line(&frame)).expect("json");
    assert_eq!(v["seq"], last_event_id);
}

#[test]
fn an_empty_payload_is_the_envelope_alone_and_a_non_object_payload_is_left_out() {
    let bare = r#"{"schema":1,"seq":1,"ts":2,"session_id":"s","type":"x"}"#;
    assert_eq!(Envelope::new(1, 2, "s", "x", ()).to_json(), bare);
    assert_eq!(
        Envelope::new(1, 2, "s", "x", None::<Counts>).to_json(),
        bare
    );
    assert_eq!(Envelope::new(1, 2, "s", "x", 5).to_json(), bare);
    assert_eq!(Envelope::new(1, 2, "s", "x", vec![1]).to_json(), bare);
}

#[test]
fn a_control_frame_has_an_empty_id_line() {
    let f = crate::format_frame(None, "subscription.ready", "{}");
    assert_eq!(&f[..], b"id: \nevent: subscription.ready\ndata: {}\n\n");
}
