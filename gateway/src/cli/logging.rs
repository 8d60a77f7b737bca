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

pub fn init(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("VIS_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
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
