//! Sub-commands that talk to the running gateway of a home (found through its registry).

use crate::home::{pid_alive, Home, Registry};
use crate::pairing;
use anyhow::{bail, Result};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// The registry of a live gateway, or `None`.
fn running(home: &Home) -> Option<Registry> {
    home.read_registry().filter(|r| pid_alive(r.pid))
}

pub fn status(home: Option<PathBuf>) -> Result<ExitCode> {
    let home = Home::resolve(home)?;
    let Some(reg) = running(&home) else {
        println!("not running (home {})", home.dir.display());
        return Ok(ExitCode::from(3));
    };
    let body = healthz(&reg).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
    println!(
        "running: pid {} at {} (home {})",
        reg.pid,
        reg.url,
        home.dir.display()
    );
    println!("{body}");
    Ok(ExitCode::SUCCESS)
}

/// `GET /healthz` over a plain TCP socket (the gateway is local; no client stack needed).
fn healthz(reg: &Registry) -> Result<String> {
    use std::io::{Read, Write};
    let addr = format!("127.0.0.1:{}", reg.port);
    let mut s = std::net::TcpStream::connect_timeout(&addr.parse()?, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(s, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Vis-Gateway-Secret: {}\r\nConnection: close\r\n\r\n", reg.token)?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or(out))
}

pub fn stop(home: Option<PathBuf>) -> Result<ExitCode> {
    let home = Home::resolve(home)?;
    let Some(reg) = running(&home) else {
        println!("not running");
        return Ok(ExitCode::SUCCESS);
    };
    // SAFETY: sending SIGTERM to the pid the gateway itself recorded.
    if unsafe { libc::kill(reg.pid as libc::pid_t, libc::SIGTERM) } != 0 {
        bail!(
            "cannot signal pid {}: {}",
            reg.pid,
            std::io::Error::last_os_error()
        );
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    while pid_alive(reg.pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    if pid_alive(reg.pid) {
        bail!("pid {} did not stop within 15 s", reg.pid);
    }
    println!("stopped (pid {})", reg.pid);
    Ok(ExitCode::SUCCESS)
}

pub fn pair(home: Option<PathBuf>) -> Result<ExitCode> {
    let home = Home::resolve(home)?;
    let Some(reg) = running(&home) else {
        bail!("no gateway is running for {}", home.dir.display())
    };
    if pairing::is_loopback_host(&reg.host) {
        eprintln!("{}", pairing::LOOPBACK_REFUSAL);
        return Ok(ExitCode::from(2));
    }
    let urls = pairing::urls(&reg.host, reg.port);
    let Some(link) = pairing::link(&urls, reg.require_token.then_some(reg.token.as_str())) else {
        bail!("no reachable address found for {}", reg.host);
    };
    println!("{link}");
    if let Some(qr) = pairing::qr(&link) {
        println!("{qr}");
    }
    Ok(ExitCode::SUCCESS)
}
