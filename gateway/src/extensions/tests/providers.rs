//! Providers: the listing and `get_token_fn`.

use super::*;

#[tokio::test(flavor = "multi_thread")]
async fn providers_are_listed_and_their_token_comes_from_get_token_fn() {
    let f = fixture();
    f.global(
        "acme.py",
        r#"
import blockether.vis.extension as vis
def token():
    return vis.ProviderCredential(token="sk-acme", api_url="https://api.acme.test/v1")
vis.register(vis.Extension(name="acme", description="d", providers=[vis.Provider(
    id="acme", label="Acme", preset=vis.ProviderPreset(base_url="https://api.acme.test/v1",
    api_style="openai", default_models=["a-1"]), get_token_fn=token,
    status_fn=lambda: vis.ProviderStatus(is_authenticated=True))]))
"#,
    );
    f.host.catalog().reload(None).await;
    let providers = f.host.providers().list(None).await;
    assert_eq!(providers.len(), 1);
    assert_eq!(providers[0].id, "acme");
    assert!(providers[0].slots.contains(&"get_token_fn".to_string()));
    assert_eq!(providers[0].preset["default_models"], json!(["a-1"]));
    let token = f
        .host
        .providers()
        .token("acme", "acme")
        .await
        .expect("token")
        .expect("some");
    assert_eq!(token["token"], "sk-acme");
    let status = f
        .host
        .providers()
        .call("acme", "acme", "status_fn", vec![])
        .await
        .expect("status");
    assert_eq!(status["is_authenticated"], true);
    assert!(f.host.providers().token("acme", "nope").await.is_err());
    f.host.shutdown().await;
}
