//! A `vis.Provider` contributed by an extension serves model turns (docs/decisions.md, G7): its
//! `get_token_fn` supplies the credential, its preset the endpoint and model.

mod common;

use common::*;
use vis_tests::{FixtureLlm, Script};

fn provider_extension(base_url: &str) -> String {
    format!(
        r#"import blockether.vis.extension as vis

def token():
    return vis.ProviderCredential(token="tok-from-extension")

vis.register(vis.Extension(
    name="extllm", description="An LLM endpoint contributed by an extension.",
    providers=[vis.Provider(
        id="extllm", label="Extension LLM",
        preset=vis.ProviderPreset(base_url="{base_url}", api_style="openai", default_models=["ext-model"]),
        get_token_fn=token,
    )],
))
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_turn_uses_an_extension_provider_when_none_is_configured() {
    let llm = FixtureLlm::start().await;
    llm.push(Script::text(&["Hello from the extension provider."]));
    let gw = Gateway::start(Opts::default()).await;
    let ext_dir = gw.dirs.root().join(".vis").join("extensions");
    std::fs::create_dir_all(&ext_dir).unwrap();
    std::fs::write(
        ext_dir.join("extllm.py"),
        provider_extension(&llm.openai_base_url()),
    )
    .unwrap();
    let sid = gw.create_session().await;
    let (_, terminal) = gw.run_turn(&sid, "hi").await;
    assert_eq!(terminal.event, "turn.completed", "{:?}", terminal.data);
    let reqs = llm.requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(
        reqs[0].header("authorization"),
        Some("Bearer tok-from-extension")
    );
    assert_eq!(reqs[0].body["model"], "ext-model");
}
