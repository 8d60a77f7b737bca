//! Stand-alone mode from a YAML policy file, driven by curl.

mod common;

use common::*;
use vis_proxy::{start_standalone, StandaloneConfig};

#[tokio::test]
async fn standalone_proxy_serves_the_file_policy_to_its_static_tokens() {
    let o = origin().await;
    let file = temp_pem("tokens: [tok-one, tok-two]\nnetwork:\n  allowed_domains: [localhost]\n  rules: [{host: localhost, access: read-only}]\n");
    let mut cfg = StandaloneConfig::new(file.path());
    cfg.proxy.use_system_roots = false;
    let proxy = start_standalone(cfg).await.unwrap();
    let port = proxy.local_addr().port();
    let url = format!("http://localhost:{}/sa", o.port());
    let ok = curl(&[
        "--proxy",
        &format!("http://tok-two:@127.0.0.1:{port}"),
        &url,
    ])
    .await;
    assert_eq!(ok.status(), 200, "{ok:?}");
    let post = curl(&[
        "--proxy",
        &format!("http://tok-one:@127.0.0.1:{port}"),
        "-d",
        "x",
        &url,
    ])
    .await;
    assert_eq!(post.status(), 403);
    let other = curl(&[
        "--proxy",
        &format!("http://tok-one:@127.0.0.1:{port}"),
        &format!("http://127.0.0.1:{}/", o.port()),
    ])
    .await;
    assert_eq!(other.status(), 403);
    let unknown = curl(&[
        "--proxy",
        &format!("http://tok-three:@127.0.0.1:{port}"),
        &url,
    ])
    .await;
    assert_eq!(unknown.status(), 407);
    proxy.shutdown();
    proxy.shutdown();
    let mut refused = false;
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            refused = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(refused, "the listener is closed after shutdown");
}
