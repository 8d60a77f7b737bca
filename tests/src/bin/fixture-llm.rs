//! Runs the fixture LLM server in echo mode for manual runs and benchmarks.
//!
//! Usage: `fixture-llm [--port N]` (default 0 = any free port). Prints the
//! base URL (serves both `/v1/chat/completions` and `/v1/messages`) and runs
//! until Ctrl-C.

use vis_tests::FixtureLlm;

fn parse_port() -> Result<u16, String> {
    let mut args = std::env::args().skip(1);
    let mut port = 0u16;
    while let Some(a) = args.next() {
        let value = if a == "--port" {
            args.next().ok_or("--port needs a value")?
        } else if let Some(v) = a.strip_prefix("--port=") {
            v.to_string()
        } else if a == "-h" || a == "--help" {
            return Err("usage: fixture-llm [--port N]".into());
        } else {
            return Err(format!(
                "unknown argument {a:?}; usage: fixture-llm [--port N]"
            ));
        };
        port = value
            .parse()
            .map_err(|_| format!("invalid port {value:?}"))?;
    }
    Ok(port)
}

#[tokio::main]
async fn main() {
    let port = match parse_port() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let server = match FixtureLlm::start_on(port).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("fixture-llm: cannot listen on 127.0.0.1:{port}: {e}");
            std::process::exit(1);
        }
    };
    println!("{}", server.openai_base_url());
    if let Err(e) = tokio::signal::ctrl_c().await {
        eprintln!("fixture-llm: waiting for Ctrl-C failed: {e}");
    }
}
