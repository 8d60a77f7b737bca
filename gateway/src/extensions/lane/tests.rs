//! The filter lane: frames, and the gateway side over a socket pair.

use super::*;
use crate::extensions::protocol::WireError;

fn ctx() -> vis_proxy::FilterCtx {
    vis_proxy::FilterCtx {
        phase: vis_proxy::Phase::HttpsResponse,
        method: Some("GET".into()),
        host: "h.test".into(),
        port: 443,
        path: None,
        headers: [("a".to_string(), "b".to_string())].into_iter().collect(),
        body: Some("x".repeat(70_000)),
        status: Some(204),
    }
}

fn pair() -> (OwnedFd, OwnedFd) {
    let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
    (a.into(), b.into())
}

#[test]
fn a_thread_outside_the_proxy_uses_the_last_lane() {
    let lanes: Vec<_> = (0..3).map(|_| Lane::new(pair().0).unwrap()).collect();
    let last = lanes[2].clone();
    let lanes = Lanes::new(lanes).unwrap();
    assert!(Arc::ptr_eq(lanes.pick(), &last));
    assert!(Lanes::new(Vec::new()).is_none());
}

#[tokio::test]
async fn a_lane_registers_with_the_runtime_of_its_first_waiter_and_answers() {
    let (ours, theirs) = pair();
    let lane = Lane::new(ours).unwrap();
    let mut call = lane.call("f.py", 0, &ctx(), u64::MAX).unwrap();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    // Play the worker: read the request, answer "allow" once told to.
    let worker = std::thread::spawn(move || {
        let mut s = std::os::unix::net::UnixStream::from(theirs);
        let mut got = Vec::new();
        let mut buf = [0u8; 65536];
        loop {
            let n = std::io::Read::read(&mut s, &mut buf).unwrap();
            got.extend_from_slice(&buf[..n]);
            if let Ok((frames, _)) = split_frames(&got) {
                if let Some(f) = frames.first() {
                    let id = u64::from_le_bytes(f[..8].try_into().unwrap());
                    go_rx.recv().unwrap();
                    let mut out = Vec::new();
                    encode_reply(&mut out, id, &Reply::Allow);
                    std::io::Write::write_all(&mut s, &out).unwrap();
                    return;
                }
            }
        }
    });
    assert!(
        lane.reg.get().is_none(),
        "nothing registered before anyone waits"
    );
    // Nothing to read yet: the call goes to sleep on readiness, registering the socket.
    let early = tokio::time::timeout(Duration::from_millis(20), &mut call).await;
    assert!(early.is_err(), "no answer before the worker sends one");
    assert!(lane.reg.get().is_some(), "registered on first wait");
    go_tx.send(()).unwrap();
    let reply = call.answer().await.unwrap();
    assert_eq!(reply, Reply::Allow);
    worker.join().unwrap();
}

#[test]
fn frames_split_only_when_complete_and_replies_round_trip() {
    let mut buf = Vec::new();
    encode_request(&mut buf, 7, 9, "/f.py", 2, &ctx());
    let whole = buf.len();
    encode_reply(&mut buf, 8, &Reply::Block("no".into()));
    encode_reply(
        &mut buf,
        9,
        &Reply::Error {
            error: WireError {
                kind: "KeyError".into(),
                message: "KeyError: 'x'".into(),
                traceback: Some("tb".into()),
            },
            restart: true,
        },
    );
    let (frames, used) = split_frames(&buf[..whole - 1]).expect("split");
    assert!(frames.is_empty());
    assert_eq!(used, 0);
    let (frames, used) = split_frames(&buf).expect("split");
    assert_eq!(frames.len(), 3);
    assert_eq!(used, buf.len());
    assert_eq!(
        decode_reply(frames[1]),
        Some((8, Reply::Block("no".into())))
    );
    match decode_reply(frames[2]) {
        Some((9, Reply::Error { error, restart })) => {
            assert!(restart);
            assert_eq!(error.traceback.as_deref(), Some("tb"));
        }
        other => panic!("{other:?}"),
    }
    // A truncated body is refused, never read out of bounds.
    assert_eq!(decode_reply(&frames[2][..frames[2].len() - 1]), None);
    let huge = ((MAX_FRAME + 1) as u32).to_le_bytes();
    assert!(split_frames(&huge).is_err());
}
