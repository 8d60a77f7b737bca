//! How many events a JetStream stream holds, and optionally removes it (benchmark tear-down).
//!
//! Usage: nats_stream <nats-url> <stream> [--delete]

use std::process::ExitCode;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(url), Some(name)) = (args.first(), args.get(1)) else {
        eprintln!("usage: nats_stream <nats-url> <stream> [--delete]");
        return ExitCode::from(2);
    };
    let client = match async_nats::connect(url.as_str()).await {
        Ok(c) => c,
        Err(e) => {
            eprintln!("cannot reach NATS at {url}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let js = async_nats::jetstream::new(client);
    let mut stream = match js.get_stream(name).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("no stream {name}: {e}");
            return ExitCode::FAILURE;
        }
    };
    match stream.info().await {
        Ok(info) => println!(
            "{name}: {} messages, {} bytes",
            info.state.messages, info.state.bytes
        ),
        Err(e) => eprintln!("cannot read {name}: {e}"),
    }
    if args.iter().any(|a| a == "--delete") {
        if let Err(e) = js.delete_stream(name).await {
            eprintln!("cannot delete {name}: {e}");
            return ExitCode::FAILURE;
        }
        println!("{name}: deleted");
    }
    ExitCode::SUCCESS
}
