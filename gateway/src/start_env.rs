//! The environment the gateway was started with, held in memory and taken out of the
//! process's own environment block.
//!
//! With the jail off, a sandbox child running as the gateway's user can read
//! `/proc/<gateway pid>/environ`, which shows the environment block the process was started
//! with, whatever `setenv`/`unsetenv` did since. So [`seal`] (called once, first thing in
//! `start`, before any thread exists) copies the whole environment into memory, then
//! overwrites the VALUE bytes of every secret-looking variable in that block with NULs (the
//! process sees such a variable as empty from then on), and marks the process non-dumpable
//! (`PR_SET_DUMPABLE 0`: a process of the same non-root user can then neither read its
//! `/proc/<pid>/environ` or `/proc/<pid>/mem` nor attach a debugger). Everything in the
//! gateway that resolves a variable of its start environment asks [`var`] / [`vars`].

use std::collections::BTreeMap;
use std::sync::OnceLock;

static START: OnceLock<BTreeMap<String, String>> = OnceLock::new();

/// Name fragments of variables that carry credentials.
const SECRET_MARKS: &[&str] = &[
    "KEY",
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "CREDENTIAL",
    "AUTH",
    "COOKIE",
];

/// A variable whose value is scrubbed from the process's environment block.
pub fn is_secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    SECRET_MARKS.iter().any(|m| upper.contains(m))
}

fn snapshot() -> BTreeMap<String, String> {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect()
}

/// Copies the environment into memory and scrubs secret values from the process's
/// environment block (see the module doc). Call once, before starting any thread.
pub fn seal() -> usize {
    let _ = START.set(snapshot());
    // SAFETY: called before any other thread exists, so nothing reads the environment while
    // it is rewritten; only bytes inside each existing `NAME=value` string are overwritten
    // (its length is unchanged and the terminating NUL stays), so every pointer stays valid.
    let scrubbed = unsafe { scrub_block() };
    // SAFETY: prctl(PR_SET_DUMPABLE) has no memory-safety preconditions.
    unsafe {
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
    }
    scrubbed
}

extern "C" {
    static mut environ: *const *mut libc::c_char;
}

unsafe fn scrub_block() -> usize {
    let mut n = 0;
    let mut p = std::ptr::addr_of!(environ).read();
    if p.is_null() {
        return 0;
    }
    while !(*p).is_null() {
        let entry = *p;
        let len = libc::strlen(entry);
        let bytes = std::slice::from_raw_parts_mut(entry as *mut u8, len);
        if let Some(eq) = bytes.iter().position(|b| *b == b'=') {
            let name = String::from_utf8_lossy(&bytes[..eq]);
            if is_secret_name(&name) && eq + 1 < len {
                bytes[eq + 1..].fill(0);
                n += 1;
            }
        }
        p = p.add(1);
    }
    n
}

/// A variable of the start environment (after [`seal`]); the live environment before it
/// (every command other than `start`). Empty values count as unset.
pub fn var(name: &str) -> Option<String> {
    match START.get() {
        Some(m) => m.get(name).cloned(),
        None => std::env::var(name).ok(),
    }
    .filter(|v| !v.is_empty())
}

/// Every variable of the start environment (see [`var`]).
pub fn vars() -> Vec<(String, String)> {
    match START.get() {
        Some(m) => m.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        None => snapshot().into_iter().collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credential_names_are_secret_and_ordinary_ones_are_not() {
        for n in [
            "OPENAI_API_KEY",
            "ANTHROPIC_API_KEY",
            "GITHUB_TOKEN",
            "aws_secret_access_key",
            "PGPASSWORD",
            "XAUTHORITY",
        ] {
            assert!(is_secret_name(n), "{n}");
        }
        for n in [
            "PATH",
            "HOME",
            "LANG",
            "VIS_HOME",
            "OPENAI_BASE_URL",
            "TERM",
        ] {
            assert!(!is_secret_name(n), "{n}");
        }
    }
}
