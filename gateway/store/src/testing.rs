//! For tests of this crate and of the programs built on it: where the machine's PostgreSQL
//! and NATS servers are (127.0.0.1:5432 and 127.0.0.1:4222, or `VIS_TEST_PG_ADDR` /
//! `VIS_TEST_NATS_ADDR`), whether they answer, and removing a test's schema.
//!
//! A test that needs a server which does not answer fails when `CI` is set, and otherwise
//! prints why it is skipped.

use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

pub fn pg_addr() -> String {
    std::env::var("VIS_TEST_PG_ADDR").unwrap_or_else(|_| "127.0.0.1:5432".into())
}

pub fn nats_addr() -> String {
    std::env::var("VIS_TEST_NATS_ADDR").unwrap_or_else(|_| "127.0.0.1:4222".into())
}

pub fn pg_url() -> String {
    format!("postgres://postgres@{}/test", pg_addr())
}

pub fn nats_url() -> String {
    format!("nats://{}", nats_addr())
}

/// Whether `what` answers at `addr`; with `CI` set, an absent server fails the test.
pub fn reachable(what: &str, addr: &str) -> bool {
    let sock: SocketAddr = addr.parse().expect("a socket address");
    assert!(
        sock.ip().is_loopback(),
        "tests dial loopback only, not {addr}"
    );
    if TcpStream::connect_timeout(&sock, Duration::from_secs(2)).is_ok() {
        return true;
    }
    if std::env::var_os("CI").is_some() {
        panic!("{what} is unreachable at {addr}, and CI is set: this test needs it");
    }
    eprintln!("skipped: {what} is unreachable at {addr} (set CI to make this a failure)");
    false
}

/// Drops `schema` (and everything in it) from the test database, on a thread of its own,
/// so a test's runtime (or none) may call it from a `Drop`.
pub fn drop_schema(schema: String) {
    let done = std::thread::spawn(move || {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        rt.block_on(drop_schema_at(&pg_url(), &schema));
    });
    let wait = || {
        let _ = done.join();
    };
    // Inside a multi-threaded runtime the worker is handed over while it waits.
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(wait)
        }
        _ => wait(),
    }
}

/// Drops `schema` (and everything in it) from the database at `url`; a failure is ignored
/// (a benchmark's or a test's clean-up).
pub async fn drop_schema_at(url: &str, schema: &str) {
    let Ok((client, conn)) = tokio_postgres::connect(url, tokio_postgres::NoTls).await else {
        return;
    };
    tokio::spawn(conn);
    let _ = client
        .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
        .await;
}
