//! What a sandbox child can learn about the gateway with the jail off (the default): the
//! provider keys the gateway was started with are not in its readable environment.

mod common;

use common::*;

#[tokio::test(flavor = "multi_thread")]
async fn a_child_reading_the_gateways_proc_environ_finds_no_provider_key() {
    let secret = "sk-proj-ThisIsTheRealKeyNobodyMaySee0123456789";
    let gw = Gateway::start(
        Opts::default()
            .env("OPENAI_API_KEY", secret)
            .env("ANTHROPIC_API_KEY", "sk-ant-api03-AlsoReal0123456789"),
    )
    .await;
    let sid = gw.create_session().await;
    let script = format!(
        "tr '\\0' '\\n' < /proc/{}/environ | grep -c -e ThisIsTheRealKey -e AlsoReal; true",
        gw.pid()
    );
    let ran = gw.exec(&sid, &["sh", "-c", &script]).await;
    assert_eq!(ran.stdout.trim(), "0", "{ran:?}");
    // The child's own environment has only the phantom.
    let ran = gw
        .exec(&sid, &["sh", "-c", "echo \"$OPENAI_API_KEY\""])
        .await;
    assert!(!ran.stdout.contains("ThisIsTheRealKey"), "{ran:?}");
    assert!(
        ran.stdout.starts_with("sk-"),
        "a phantom in the provider's form: {ran:?}"
    );
}
