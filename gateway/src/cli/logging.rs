//! Tracing set-up for the long-running sub-commands (`start`, `proxy`): `VIS_LOG` filter
//! (default `info`), to stderr, as text or JSON lines. Colours only on a terminal: stderr
//! redirected to a file (systemd, Docker, `2>log`) gets plain text, and `NO_COLOR` turns
//! them off everywhere.

use std::io::IsTerminal;

/// Whether text logs may carry ANSI colour codes: stderr is a terminal and `NO_COLOR` is unset
/// or empty.
pub fn colours() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// Targets that print secrets at debug level whatever `VIS_LOG` asks: the MCP SDK's OAuth
/// client logs the single-use authorization code it exchanges.
const SECRET_TARGETS: &[&str] = &["rmcp::transport::auth=info"];

pub fn filter(spec: Option<&str>) -> tracing_subscriber::EnvFilter {
    let mut f = spec
        .and_then(|s| tracing_subscriber::EnvFilter::try_new(s).ok())
        .unwrap_or_else(|| tracing_subscriber::EnvFilter::new("info"));
    for d in SECRET_TARGETS {
        if let Ok(d) = d.parse() {
            f = f.add_directive(d);
        }
    }
    f
}

pub fn init(json: bool) {
    let filter = filter(std::env::var("VIS_LOG").ok().as_deref());
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(colours());
    if json {
        b.json().init();
    } else {
        b.init();
    }
}

#[cfg(test)]
mod tests {
    use tracing::level_filters::LevelFilter;

    #[test]
    fn the_oauth_client_never_logs_below_info_even_when_everything_else_does() {
        for spec in [
            "trace",
            "debug",
            "rmcp=trace",
            "rmcp::transport::auth=trace",
        ] {
            let f = super::filter(Some(spec)).to_string();
            assert!(f.contains("rmcp::transport::auth=info"), "{spec}: {f}");
            assert!(!f.contains("rmcp::transport::auth=trace"), "{spec}: {f}");
        }
        assert_eq!(
            super::filter(None).max_level_hint(),
            Some(LevelFilter::INFO)
        );
    }
}
