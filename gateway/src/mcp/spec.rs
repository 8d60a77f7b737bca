//! What a configured MCP server must look like, and how its tools are named in a block.

use std::time::Duration;
use vis_companion_api::mcp::{McpServerEdit, McpServerInput, McpTransport, SecretsEdit};

/// Connecting (spawn + `initialize` + `tools/list`) may take this long by default.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// One tool call may take this long by default.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(60);

const PY_KEYWORDS: &[&str] = &[
    "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue",
    "def", "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import",
    "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while",
    "with", "yield",
];

fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A server's name becomes a Python name in every block (`await github.search(…)`), so it
/// must not be a keyword or one of the sandbox's own functions (`reserved`).
pub fn check_name(name: &str, reserved: &[String]) -> Result<(), String> {
    if name.len() > 64 || !is_identifier(name) || PY_KEYWORDS.contains(&name) {
        return Err(format!(
            "an MCP server name must be a Python identifier of at most 64 characters \
             (letters, digits, _; not a keyword), got {name:?}"
        ));
    }
    if reserved.iter().any(|r| r == name) {
        return Err(format!(
            "{name:?} is a built-in function of the sandbox; choose another server name"
        ));
    }
    Ok(())
}

/// The input is usable as written.
pub fn check(input: &McpServerInput) -> Result<(), String> {
    let blank = |s: &Option<String>| s.as_deref().is_none_or(|v| v.trim().is_empty());
    match input.transport {
        McpTransport::Stdio => {
            if blank(&input.command) {
                return Err("a stdio server needs `command`".into());
            }
            if input.url.is_some() || input.headers.is_some() {
                return Err("`url` and `headers` belong to a streamable_http server".into());
            }
        }
        McpTransport::StreamableHttp => {
            let url = input.url.as_deref().unwrap_or("").trim();
            let ok = url.parse::<axum::http::Uri>().ok().is_some_and(|u| {
                matches!(u.scheme_str(), Some("http" | "https")) && u.host().is_some()
            });
            if !ok {
                return Err(format!(
                    "a streamable_http server needs `url`, an http:// or https:// URL, got {url:?}"
                ));
            }
            if input.command.is_some() || input.args.is_some() {
                return Err("`command` and `args` belong to a stdio server".into());
            }
        }
    }
    if let Some(t) = input.timeout_ms {
        if !(100..=600_000).contains(&t) {
            return Err(format!("`timeout_ms` must be 100..=600000, got {t}"));
        }
    }
    Ok(())
}

/// `scheme://host:port` of a URL (the default port filled in), or `None` when it is not one.
fn origin(url: &str) -> Option<String> {
    let u = url.trim().parse::<axum::http::Uri>().ok()?;
    let scheme = u.scheme_str()?.to_ascii_lowercase();
    let port = u.port_u16().or(match scheme.as_str() {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    })?;
    Some(format!(
        "{scheme}://{}:{port}",
        u.host()?.to_ascii_lowercase()
    ))
}

/// An edit from the phone over the server saved under its name: secrets it does not resend
/// are kept (docs/decisions.md, "MCP server edits"). Saved headers never follow a server to
/// another origin: such an edit must resend or clear them.
pub fn edited(
    edit: &McpServerEdit,
    saved: Option<&McpServerInput>,
) -> Result<McpServerInput, String> {
    let Some(saved) = saved else {
        return Ok(edit.fresh());
    };
    let kept_headers = !edit.headers.keeps_nothing_of(saved.headers.as_ref());
    if kept_headers {
        let (old, new) = (
            saved.url.as_deref().and_then(origin),
            edit.server.url.as_deref().and_then(origin),
        );
        if new.is_some() && old != new {
            return Err(format!(
                "the server's url moves to another origin ({}), and its saved headers are \
                 kept only for {}: resend the headers for the new url, or send \
                 `\"headers\": null` to drop them",
                new.unwrap_or_default(),
                old.unwrap_or_else(|| "its old url".into())
            ));
        }
    }
    let mut out = edit.over(Some(saved));
    // A server moved to stdio has no headers; kept ones are not carried into it.
    if out.transport == McpTransport::Stdio && edit.headers == SecretsEdit::Keep {
        out.headers = None;
    }
    Ok(out)
}

/// A `vis.yml` server entry, read as users bring it from the reference's configs:
/// `transport` may be left out (`command` means stdio, `url` streamable HTTP) and `http`
/// names streamable HTTP.
pub fn from_config(raw: &serde_json::Value) -> Result<McpServerInput, String> {
    let mut v = raw.clone();
    let Some(m) = v.as_object_mut() else {
        return Err(format!("a server entry must be a mapping, got {raw}"));
    };
    if !m.contains_key("transport") {
        let t =
            match (m.contains_key("command"), m.contains_key("url")) {
                (true, false) => "stdio",
                (false, true) => "streamable_http",
                _ => return Err(
                    "give either `command` (a stdio server) or `url` (a streamable_http server), \
                     or name the `transport`"
                        .into(),
                ),
            };
        m.insert("transport".into(), t.into());
    }
    serde_json::from_value(v).map_err(|e| format!("invalid server entry: {e}"))
}

/// What an unreadable hand-written entry is listed as (its reason shows as its error).
pub fn unreadable() -> McpServerInput {
    McpServerInput {
        transport: McpTransport::Stdio,
        enabled: None,
        command: None,
        args: None,
        cwd: None,
        env: None,
        url: None,
        headers: None,
        timeout_ms: None,
    }
}

/// `text` with every `${NAME}` replaced by `var(NAME)`; a name that resolves to nothing is
/// an error naming it.
fn expand(text: &str, var: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("${") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 2..];
        let Some(end) = after.find('}') else {
            return Err(format!("an unclosed `${{` in {text:?}"));
        };
        let name = &after[..end];
        let value = var(name).ok_or_else(|| {
            format!("`${{{name}}}` is not set in the project's environment (vis.yml `environment:`, .env, .env.local, or the gateway's own)")
        })?;
        out.push_str(&value);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The server with `${VAR}` expanded in its `env` and `headers` values and its `url`.
pub fn interpolate(
    input: &McpServerInput,
    var: &dyn Fn(&str) -> Option<String>,
) -> Result<McpServerInput, String> {
    let mut out = input.clone();
    for map in [&mut out.env, &mut out.headers].into_iter().flatten() {
        for v in map.values_mut() {
            *v = expand(v, var)?;
        }
    }
    if let Some(u) = &mut out.url {
        *u = expand(u, var)?;
    }
    Ok(out)
}

/// The call's time limit.
pub fn call_timeout(input: &McpServerInput) -> Duration {
    input
        .timeout_ms
        .map(Duration::from_millis)
        .unwrap_or(CALL_TIMEOUT)
}

/// The connect time limit.
pub fn connect_timeout(input: &McpServerInput) -> Duration {
    input
        .timeout_ms
        .map(Duration::from_millis)
        .unwrap_or(CONNECT_TIMEOUT)
}

/// A tool's Python name under its server: other characters become `_`, a leading digit gets
/// a `_` in front.
pub fn tool_name(tool: &str) -> String {
    let mut s: String = tool
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty()
        || s.starts_with(|c: char| c.is_ascii_digit())
        || PY_KEYWORDS.contains(&s.as_str())
    {
        s.insert(0, '_');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stdio(cmd: &str) -> McpServerInput {
        McpServerInput {
            transport: McpTransport::Stdio,
            enabled: None,
            command: Some(cmd.into()),
            args: None,
            cwd: None,
            env: None,
            url: None,
            headers: None,
            timeout_ms: None,
        }
    }

    #[test]
    fn server_names_are_python_identifiers_that_shadow_nothing() {
        let reserved: Vec<String> = crate::model_sandbox::builtins::docs()
            .into_iter()
            .map(|d| d.name)
            .collect();
        let check_name = |n: &str| check_name(n, &reserved);
        assert!(check_name("github").is_ok());
        assert!(check_name("my_server2").is_ok());
        for bad in [
            "",
            "2x",
            "a-b",
            "class",
            "cat",
            "grep",
            "x".repeat(65).as_str(),
        ] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn each_transport_needs_its_own_fields() {
        assert!(check(&stdio("srv")).is_ok());
        assert!(check(&stdio(" ")).is_err());
        let mut http = stdio("srv");
        http.transport = McpTransport::StreamableHttp;
        assert!(check(&http).unwrap_err().contains("url"));
        http.command = None;
        http.url = Some("ftp://x".into());
        assert!(check(&http).is_err());
        http.url = Some("http://127.0.0.1:9/mcp".into());
        assert!(check(&http).is_ok());
        http.timeout_ms = Some(5);
        assert!(check(&http).unwrap_err().contains("timeout_ms"));
    }

    #[test]
    fn reference_entries_infer_their_transport_and_expand_variables() {
        let s = from_config(&serde_json::json!({"command": "srv"})).unwrap();
        assert_eq!(s.transport, McpTransport::Stdio);
        let h = from_config(&serde_json::json!({"url": "http://h/mcp"})).unwrap();
        assert_eq!(h.transport, McpTransport::StreamableHttp);
        let h =
            from_config(&serde_json::json!({"transport": "http", "url": "http://h/mcp"})).unwrap();
        assert_eq!(h.transport, McpTransport::StreamableHttp);
        assert!(from_config(&serde_json::json!({"transport": "pigeon"}))
            .unwrap_err()
            .contains("pigeon"));
        assert!(from_config(&serde_json::json!({})).is_err());
        let mut h = h;
        h.url = Some("https://${HOST}/mcp".into());
        h.headers = Some([("Authorization".to_string(), "Bearer ${TOKEN}".to_string())].into());
        let var = |n: &str| match n {
            "HOST" => Some("example.org".to_string()),
            "TOKEN" => Some("t0k".to_string()),
            _ => None,
        };
        let x = interpolate(&h, &var).unwrap();
        assert_eq!(x.url.as_deref(), Some("https://example.org/mcp"));
        assert_eq!(x.headers.unwrap()["Authorization"], "Bearer t0k");
        h.url = Some("https://${NOPE}/".into());
        assert!(interpolate(&h, &var).unwrap_err().contains("NOPE"));
    }

    #[test]
    fn tool_names_become_python_names() {
        assert_eq!(tool_name("search-issues"), "search_issues");
        assert_eq!(tool_name("2fa"), "_2fa");
        assert_eq!(tool_name("import"), "_import");
        assert_eq!(tool_name("ok_name"), "ok_name");
    }
}
