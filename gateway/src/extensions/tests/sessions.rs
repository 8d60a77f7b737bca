//! Sessions: slash commands and the per-turn `prompt`, `activation` and `ctx`.

use super::*;

#[tokio::test(flavor = "multi_thread")]
async fn slash_commands_get_their_ctx_and_errors_come_back_as_markdown() {
    let f = fixture();
    f.global("todo.py", TODO_EXTENSION);
    f.global(
        "slashes.py",
        r#"
import blockether.vis.extension as vis
def fail(ctx):
    return vis.err("nope", body="because")
def boom(ctx):
    raise ValueError("slash bug")
vis.register(vis.Extension(name="slashes", description="d", slash_commands=[
    vis.SlashCommand("fail", fail), vis.SlashCommand("boom", boom),
    vis.SlashCommand("quiet", lambda ctx: None)]))
"#,
    );
    let s = f.session("s");
    assert_eq!(
        f.host.sessions().run_slash(&s, "todos", "a b").await,
        Ok("0 open\n\nargs=['a', 'b']".to_string())
    );
    assert_eq!(
        f.host.sessions().run_slash(&s, "/quiet", "").await,
        Ok("slashes: done".to_string())
    );
    assert_eq!(
        f.host.sessions().run_slash(&s, "fail", "").await,
        Err("nope\n\nbecause".to_string())
    );
    let boom = f
        .host
        .sessions()
        .run_slash(&s, "boom", "")
        .await
        .expect_err("raises");
    assert!(boom.starts_with("ValueError: slash bug\n\n```"), "{boom}");
    assert!(f
        .host
        .sessions()
        .run_slash(&s, "missing", "")
        .await
        .is_err());
    f.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn per_turn_prompt_activation_and_ctx_are_collected() {
    let f = fixture();
    f.global(
        "turny.py",
        r#"
import blockether.vis.extension as vis
vis.register(vis.Extension(name="turny", description="d",
    prompt=lambda env: f"cwd is {env['cwd']}", ctx=lambda env: {"session_env": {"turny": 1}}))
"#,
    );
    f.global(
        "zoff.py",
        r#"
import blockether.vis.extension as vis
def act(env):
    raise RuntimeError("no")
vis.register(vis.Extension(name="zoff", description="d", prompt="never", activation=act))
"#,
    );
    let s = f.session("s");
    let t = f.host.sessions().turn(&s, Some("companion")).await;
    assert_eq!(
        t.prompts,
        vec![(
            "turny".to_string(),
            format!("cwd is {}", f.project.display())
        )]
    );
    assert_eq!(t.inactive, vec!["zoff".to_string()]);
    assert_eq!(t.session, json!({"session_env": {"turny": 1}}));
    f.host.shutdown().await;
}
