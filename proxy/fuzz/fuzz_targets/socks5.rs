//! SOCKS5 wire parsers: never panic, never consume more than given.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vis_proxy::lanes::socks5::{parse_auth, parse_greeting, parse_request};

fuzz_target!(|data: &[u8]| {
    if let Ok(Some((_, used))) = parse_greeting(data) {
        assert!(used <= data.len());
    }
    if let Ok(Some((_, used))) = parse_auth(data) {
        assert!(used <= data.len());
    }
    if let Ok(Some((req, used))) = parse_request(data) {
        assert!(used <= data.len());
        let _ = req.port;
    }
});
