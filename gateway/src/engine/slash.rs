//! Slash commands (`/name args`): run locally, without a provider (§6.11, decision E8).

use super::lifecycle::Terminal;
use super::turn::prose_block;
use super::Gateway;
use crate::bus::payload;
use serde_json::{json, Value};
use std::sync::Arc;

/// The built-in commands and their one-line docs.
pub const BUILTINS: &[(&str, &str)] = &[
    ("help", "List the slash commands of this session"),
    (
        "reload",
        "Reload the configuration (providers, policy) and extensions",
    ),
    ("extensions", "List loaded extensions and load failures"),
];

/// Commands that need the sandbox.
pub const SANDBOX_BUILTINS: &[(&str, &str)] = &[
    ("sh", "Run a shell command in the session sandbox: /sh <command>"),
    ("net-probe", "Explain the egress verdict for a request without sending it: /net-probe [METHOD] <url | host:port>"),
];

/// Splits `/name rest` into `(name, rest)`.
pub fn parse(request: &str) -> Option<(&str, &str)> {
    let body = request.trim().strip_prefix('/')?;
    let (name, rest) = body.split_once(char::is_whitespace).unwrap_or((body, ""));
    (!name.is_empty()).then_some((name, rest.trim()))
}

impl Gateway {
    /// Whether a request names a registered slash command.
    pub fn is_slash(&self, request: &str) -> bool {
        parse(request).is_some_and(|(name, _)| self.slash_names().iter().any(|(n, _)| n == name))
    }

    /// Every slash command with its doc.
    pub fn slash_names(&self) -> Vec<(String, String)> {
        BUILTINS
            .iter()
            .map(|(n, d)| (n.to_string(), d.to_string()))
            .collect()
    }

    pub fn slash_palette(&self) -> Value {
        let mut cmds: Vec<Value> = self
            .slash_names()
            .into_iter()
            .map(|(n, d)| json!({"name": format!("/{n}"), "doc": d}))
            .collect();
        for (n, d) in [
            ("help", "Show help"),
            ("new-session", "Start a new session"),
            ("sessions", "Browse sessions"),
            ("clear", "Clear the view"),
        ] {
            if !cmds.iter().any(|c| c["name"] == format!("/{n}")) {
                cmds.push(json!({"name": format!("/{n}"), "doc": d}));
            }
        }
        json!({"commands": cmds})
    }

    pub(super) async fn run_slash(
        self: &Arc<Self>,
        sid: &str,
        tid: &str,
        request: &str,
        root: &str,
    ) -> Terminal {
        let Some((name, args)) = parse(request) else {
            return Terminal::Failed {
                code: "turn_failed".into(),
                message: "not a slash command".into(),
            };
        };
        self.bus.publish(sid, "chunk.slash", payload(json!({"turn_id": tid, "iteration": 1, "detail": format!("/{name} {args}").trim_end()})));
        let result: Result<String, String> = match name {
            "help" => Ok(self
                .slash_names()
                .iter()
                .map(|(n, d)| format!("- `/{n}` — {d}"))
                .collect::<Vec<_>>()
                .join("\n")),
            "reload" => self.reload_config(root).await,
            "extensions" => Ok("No extensions are loaded: the Python extension host is not part of this build yet.".to_string()),
            "sh" => self.slash_sh(sid, args, root).await,
            "net-probe" => self.slash_net_probe(sid, args, root).await,
            other => Err(format!("unknown slash command /{other}")),
        };
        let (status, text) = match &result {
            Ok(t) => ("ok", t.clone()),
            Err(e) => ("error", e.clone()),
        };
        let form = json!({"tag": "user-slash", "code": request, "op": format!("slash/{name}"),
            "result": {"slash/status": status, "slash/title": format!("/{name}"), "slash/reason": result.as_ref().err()}});
        if let Some(shared) = self
            .loaded()
            .into_iter()
            .find(|(k, _)| k == sid)
            .map(|(_, v)| v)
        {
            if let Some(r) = &shared.lock().running {
                r.progress.lock().iterations.push(json!({"id": format!("{tid}:1"), "position": 0, "thinking": "",
                    "assistant_prose": text, "answer": text, "code": [request], "forms": [form], "duration_ms": 0,
                    "cost_usd": 0.0, "error": result.as_ref().err(), "llm_selected": null, "llm_actual": null,
                    "is_llm_fallback": false, "llm_routing_trace": []}));
            }
        }
        match result {
            Ok(t) => Terminal::Completed {
                content: vec![prose_block(format!("{tid}:assistant-prose:1"), &t)],
            },
            Err(e) => Terminal::Failed {
                code: "turn_failed".into(),
                message: e,
            },
        }
    }

    async fn slash_sh(&self, sid: &str, command: &str, root: &str) -> Result<String, String> {
        let sandbox = self.sandbox.get().ok_or("the sandbox is not running")?;
        if command.trim().is_empty() {
            return Err("usage: /sh <command>".into());
        }
        let root = std::path::PathBuf::from(root);
        let cfg = self.project_config(&root).await?;
        let env = sandbox.child_env(sid, &root, &cfg);
        let cancel = tokio_util::sync::CancellationToken::new();
        let out = crate::sandbox::run::run(
            command,
            &root,
            &env,
            crate::sandbox::shell::DEFAULT_TIMEOUT,
            &cancel,
        )
        .await
        .map_err(|e| format!("cannot start the command: {e}"))?;
        Ok(format!(
            "```\n{}\n```",
            crate::sandbox::shell::describe(&out).trim_end()
        ))
    }

    async fn slash_net_probe(&self, sid: &str, args: &str, root: &str) -> Result<String, String> {
        let sandbox = self.sandbox.get().ok_or("the sandbox is not running")?;
        let cfg = self.project_config(std::path::Path::new(root)).await?;
        sandbox.probe(sid, &cfg, args).await
    }

    /// Re-reads the configuration layers and rebuilds the provider router; last good wins.
    pub async fn reload_config(&self, root: &str) -> Result<String, String> {
        let home = self.home.dir.clone();
        let project = std::path::PathBuf::from(root);
        let cfg = tokio::task::spawn_blocking(move || crate::config::load(&home, &project))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("reload failed, the previous configuration stays active: {e}"))?;
        let router = crate::providers::Router::from_config(&cfg)
            .map_err(|e| format!("reload failed, the previous configuration stays active: {e}"))?;
        let n = router.clients.len();
        if let Some(sb) = self.sandbox.get() {
            sb.routes.refresh(&router.clients);
        }
        *self.providers.write() = router;
        *self.config.write() = cfg;
        Ok(format!(
            "Configuration reloaded: {n} provider(s) configured."
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn a_slash_request_splits_into_name_and_arguments() {
        assert_eq!(
            parse("/net-probe GET http://x"),
            Some(("net-probe", "GET http://x"))
        );
        assert_eq!(parse("  /help "), Some(("help", "")));
        assert_eq!(parse("hello"), None);
        assert_eq!(parse("/"), None);
    }
}
