//! The environment of a sandbox child (docs/decisions.md, P10): an allowlist
//! of the gateway's own variables, the project's declared environment, then the proxy and CA
//! variables. Everything else — ambient `*_KEY`, `*_TOKEN`, … — is scrubbed by omission.

use std::collections::BTreeMap;
use std::path::Path;

/// Variables passed through from the gateway's environment.
const PASSTHROUGH: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "TERM",
    "TERMINFO",
    "TZ",
    "TMPDIR",
    "PWD",
    "HOSTNAME",
    "COLORTERM",
    "DISPLAY",
];

/// Removed even when declared: they change how programs load code or parse their input.
const ALWAYS_REMOVED: &[&str] = &[
    "GCONV_PATH",
    "LOCPATH",
    "NLSPATH",
    "HOSTALIASES",
    "RESOLV_HOST_CONF",
    "BASH_ENV",
    "ENV",
    "SHELLOPTS",
    "BASHOPTS",
    "IFS",
];
const REMOVED_PREFIXES: &[&str] = &["LD_", "DYLD_", "PERL", "BASH_FUNC_"];

/// The CA bundle variables, all set to the one PEM bundle.
pub const CA_VARS: &[&str] = &[
    "SSL_CERT_FILE",
    "CURL_CA_BUNDLE",
    "REQUESTS_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "GIT_SSL_CAINFO",
    "PIP_CERT",
    "AWS_CA_BUNDLE",
    "CARGO_HTTP_CAINFO",
    "DENO_CERT",
];

/// The password of the proxy URL's userinfo (the token is the user).
pub const PROXY_PASSWORD: &str = "vis";

/// Where the child's traffic goes.
#[derive(Debug, Clone)]
pub struct ProxyEnv {
    pub port: u16,
    pub token: String,
    pub ca_bundle: std::path::PathBuf,
    /// A wget startup file naming the bundle (wget reads no CA variable).
    pub wgetrc: std::path::PathBuf,
}

/// The wget startup file that trusts `bundle` (wget reads its CA from `ca_certificate`).
pub fn wgetrc(bundle: &Path) -> String {
    format!("ca_certificate = {}\n", bundle.display())
}

/// Parses a dotenv file: `NAME=value` lines, optional `export`, quotes stripped, `#` comments.
pub fn parse_dotenv(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line);
        let Some((k, v)) = line.split_once('=') else {
            continue;
        };
        let k = k.trim();
        if k.is_empty() || !k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let v = v.trim();
        let v = v
            .strip_prefix('"')
            .and_then(|s| s.strip_suffix('"'))
            .or_else(|| v.strip_prefix('\'').and_then(|s| s.strip_suffix('\'')))
            .unwrap_or(v);
        out.insert(k.to_string(), v.to_string());
    }
    out
}

/// The project's declared environment: `.env`, then `.env.local`, then `environment:` (later wins).
pub fn project_env(root: &Path, declared: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    for f in [".env", ".env.local"] {
        if let Ok(text) = std::fs::read_to_string(root.join(f)) {
            env.extend(parse_dotenv(&text));
        }
    }
    env.extend(declared.iter().map(|(k, v)| (k.clone(), v.clone())));
    env
}

fn removed(name: &str) -> bool {
    ALWAYS_REMOVED.contains(&name) || REMOVED_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// Builds the child environment from the gateway's own (`ambient`).
pub fn child_env(
    ambient: impl IntoIterator<Item = (String, String)>,
    project: &BTreeMap<String, String>,
    proxy: &ProxyEnv,
) -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> = ambient
        .into_iter()
        .filter(|(k, _)| PASSTHROUGH.contains(&k.as_str()) || k.starts_with("LC_"))
        .collect();
    env.extend(project.iter().map(|(k, v)| (k.clone(), v.clone())));
    // The token is the userinfo's user (docs/decisions.md, P2); the password is a fixed non-empty word because
    // some clients (Python's urllib) send proxy credentials only when both are present.
    let http = format!(
        "http://{}:{PROXY_PASSWORD}@127.0.0.1:{}",
        proxy.token, proxy.port
    );
    for k in ["http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"] {
        env.insert(k.into(), http.clone());
    }
    // No ALL_PROXY (docs/decisions.md, P10): httpx-based clients refuse to start on a socks5h:// value when
    // `socksio` is missing; SOCKS5 stays on the same port for clients configured for it.
    for k in ["no_proxy", "NO_PROXY"] {
        env.insert(k.into(), String::new());
    }
    let bundle = proxy.ca_bundle.to_string_lossy().to_string();
    for k in CA_VARS {
        env.insert((*k).into(), bundle.clone());
    }
    env.insert("NPM_CONFIG_CAFILE".into(), bundle.clone());
    env.insert("UV_NATIVE_TLS".into(), "1".into());
    env.insert("WGETRC".into(), proxy.wgetrc.to_string_lossy().to_string());
    // Node 24+ routes `fetch` through the proxy variables with it; Node 20 ignores both.
    env.insert("NODE_USE_ENV_PROXY".into(), "1".into());
    env.retain(|k, _| !removed(k));
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proxy() -> ProxyEnv {
        ProxyEnv {
            port: 4000,
            token: "tok".into(),
            ca_bundle: "/h/ca.pem".into(),
            wgetrc: "/h/wgetrc".into(),
        }
    }

    #[test]
    fn operator_secrets_never_reach_the_child() {
        let ambient = vec![
            ("PATH".to_string(), "/usr/bin".to_string()),
            ("OPENAI_API_KEY".to_string(), "sk-real".to_string()),
            ("GITHUB_TOKEN".to_string(), "ghp".to_string()),
            ("LC_ALL".to_string(), "C".to_string()),
            ("LD_PRELOAD".to_string(), "/evil.so".to_string()),
        ];
        let env = child_env(ambient, &BTreeMap::new(), &proxy());
        assert_eq!(env.get("PATH").map(String::as_str), Some("/usr/bin"));
        assert_eq!(env.get("LC_ALL").map(String::as_str), Some("C"));
        assert!(
            !env.contains_key("OPENAI_API_KEY")
                && !env.contains_key("GITHUB_TOKEN")
                && !env.contains_key("LD_PRELOAD")
        );
    }

    #[test]
    fn the_child_gets_every_proxy_and_ca_variable() {
        let env = child_env(Vec::<(String, String)>::new(), &BTreeMap::new(), &proxy());
        assert_eq!(env["HTTPS_PROXY"], "http://tok:vis@127.0.0.1:4000");
        assert!(
            !env.contains_key("all_proxy") && !env.contains_key("ALL_PROXY"),
            "no SOCKS URL by default (httpx without socksio refuses it)"
        );
        assert_eq!(env["NPM_CONFIG_CAFILE"], "/h/ca.pem");
        assert_eq!(env["NO_PROXY"], "");
        for k in CA_VARS {
            assert_eq!(env[*k], "/h/ca.pem");
        }
        assert_eq!(env["UV_NATIVE_TLS"], "1");
        assert_eq!(env["WGETRC"], "/h/wgetrc");
        assert_eq!(env["NODE_USE_ENV_PROXY"], "1");
    }

    #[test]
    fn declared_variables_are_kept_but_loader_variables_are_not() {
        let mut declared = BTreeMap::new();
        declared.insert("PROJECT".to_string(), "x".to_string());
        declared.insert("LD_LIBRARY_PATH".to_string(), "/x".to_string());
        let env = child_env(Vec::<(String, String)>::new(), &declared, &proxy());
        assert_eq!(env["PROJECT"], "x");
        assert!(!env.contains_key("LD_LIBRARY_PATH"));
    }

    #[test]
    fn dotenv_lines_parse_with_quotes_comments_and_export() {
        let e = parse_dotenv("# c\nexport A=1\nB=\"two words\"\nC='x'\nbad line\n");
        assert_eq!(e["A"], "1");
        assert_eq!(e["B"], "two words");
        assert_eq!(e["C"], "x");
        assert_eq!(e.len(), 3);
    }
}
