//! First-byte demux and the request-head helpers (CONNECT target, token,
//! IP literals, path normalization) and the intercepted relay's request and response heads:
//! never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vis_proxy::attribution::token_from_proxy_authorization;
use vis_proxy::detect::{classify, is_h2c_preface};
use vis_proxy::lanes::connect::parse_authority;
use vis_proxy::lanes::fuzz_intercepted_heads;
use vis_proxy::policy::{normalize_host, normalize_path};
use vis_proxy::ssrf::{classify as classify_ip, parse_ip_literal};

fuzz_target!(|data: &[u8]| {
    let _ = classify(data);
    let _ = is_h2c_preface(data);
    let _ = token_from_proxy_authorization(data);
    let text = String::from_utf8_lossy(data);
    if let Some((host, _port)) = parse_authority(&text) {
        let _ = normalize_host(&host);
    }
    if let Some(ip) = parse_ip_literal(&text) {
        let _ = classify_ip(ip);
    }
    let _ = normalize_path(&text);
    fuzz_intercepted_heads(data);
});
