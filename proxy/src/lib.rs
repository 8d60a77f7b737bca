//! # vis-proxy — the egress proxy of vis-gateway
//!
//! One loopback listener speaking HTTP forwarding, CONNECT (opaque tunnel
//! or TLS interception) and SOCKS5, with per-session attribution by proxy
//! token, a domain/method/path/port policy, an SSRF floor, network filters
//! and a decision record for every request. The crate knows nothing about
//! sessions or Python (docs/decisions.md, A5): it asks the traits in [`traits`].
//!
//! ## Pipeline (file names follow it)
//!
//! ```text
//! listener.rs   accept, overall connection cap
//!   └ detect.rs first byte: 0x05 SOCKS5 · 0x04 SOCKS4 → clean close · else HTTP
//!       (first-byte timeout; `PRI * HTTP/2.0` → 400)
//! phases.rs     THE order every flow follows, written once:
//!               attribute → slot → decide → request filters → credentials →
//!               validate (SSRF) → connect → response filters → relay;
//!               lanes implement `Framing` (target, refusal, connect, relay) only
//! attribution.rs  Proxy-Authorization Basic username / RFC 1929 username → Attribution
//! policy/         config.rs (parse) → compile.rs (once) → decide.rs (pure, per request)
//! filters.rs      NetworkFilter chain (order, first deny wins, error/timeout denies)
//! credentials.rs  phantom → secret swap on provider hosts (after filters)
//! dial.rs + ssrf.rs  resolve ONCE, classify EVERY answer, return the one address to dial
//! lanes/http.rs      hyper HTTP/1.1 server, keep-alive, every request decided alone
//! h1_watch.rs        follows the client's HTTP/1 request framing under hyper: an absurd
//!                    chunk size answers 400 at once
//! lanes/connect.rs   CONNECT: opaque tunnel or interception
//! lanes/intercept.rs TLS server with a minted leaf, h2 + http/1.1 inside (or plain
//!                    HTTP/1.1 when the first bytes are not TLS: prefixed.rs sniffs)
//! lanes/forward.rs   framing of HTTP requests (plain, intercepted, provider route)
//! lanes/socks5.rs    pure wire parsers + the SOCKS5 framing
//! lanes/provider.rs  /_vis/provider/<id>/<token>/… → the provider's base URL
//! lanes/target.rs    request targets (CONNECT authority, head size)
//! probe.rs           /net-probe: the same steps with a connector that does not dial,
//!                    then every filter reported one by one
//! conn_pool.rs       upstream connections driven in the client connection's task,
//!                    reused per client connection; idle plain sockets shared
//! upstream.rs        hyper-util pooled client connectors (only validated addresses)
//! relay.rs           byte relay: half-close, idle teardown, byte counts
//! metered.rs         a relayed body that counts bytes and emits the record at its end
//! deny.rs            denial kinds and THE mapping to 400/403/407/502/503/504 and SOCKS REP codes
//! record.rs          Decision records (denials at decision time, allows at the end)
//! tls.rs             ephemeral ECDSA P-256 CA, leaf LRU, upstream client config
//! state.rs           what a running proxy's connections share (services, settings, slots)
//! engine.rs          the running Proxy: start, CA bundle, probe, shutdown
//! standalone.rs      run from a YAML policy file
//! ```
//!
//! ## What the gateway calls
//!
//! * Implement [`Attribution`] (token → [`Lookup`] with a [`Principal`]:
//!   session id, `Arc<Policy>` compiled once with [`policy::Policy::compile`],
//!   reserved ports such as the control-plane port), [`DecisionSink`]
//!   (non-blocking), optionally [`FilterSet`] (ordered [`NetworkFilter`]s),
//!   [`Resolver`] and [`Dialer`] (defaults: [`SystemResolver`], [`TcpDialer`]),
//!   and [`Credentials`] (per-principal [`ProviderCredential`]s: provider id,
//!   hosts, phantom, secret, optional base URL; default [`NoCredentials`]).
//! * `Proxy::start(ProxyConfig::default().with_env_extra_roots().await?, Services::new(attr, sink).with_filters(f)).await?`
//!   → [`Proxy::local_addr`], [`Proxy::ca_pem`] / [`Proxy::ca_bundle_pem`]
//!   (CA + trusted roots: write it to the children's `SSL_CERT_FILE` & co.),
//!   [`Proxy::probe`] for `/net-probe`,
//!   [`Proxy::shutdown`] (idempotent).
//! * Stand-alone: [`run_standalone`]`(StandaloneConfig::new(path))`; the file
//!   format is documented in [`standalone`].
//!
//! ## Choices where the design record is silent
//!
//! * Attribution is async and three-way ([`Lookup::Found`] / `Unknown` → 407 /
//!   `Failed` → 403 `vis-agent: session policy error`, header
//!   `X-Vis-Egress-Error: blocked-by-denylist`; SOCKS: `01 00`
//!   then REP `02`).
//! * The proxy adds its own port to every principal's reserved ports.
//! * Host patterns: `.example.com` means `example.com`; any other `*` than
//!   a whole `*` or a leading `*.` is a config error naming the key.
//!   IP literals in any `inet_aton` spelling are canonicalized before the host
//!   gate and the floor; IPv6 is matched in RFC 5952 form.
//! * Rule ties: longest pattern, then non-wildcard, then config order.
//!   A closed rule with `methods`/`allow` denies everything except those.
//! * Interception happens when the selected rule can deny some method/path
//!   (`restricts_requests`: not `*`, not ports-only) or any filter is
//!   registered for the principal, and never for `exclude_domains`.
//! * SSRF extras: 240.0.0.0/4 and all of 0.0.0.0/8 always denied;
//!   192.0.0.0/24 and 198.18.0.0/15 private; metadata addresses
//!   169.254.169.254, 169.254.170.2, fd00:ec2::254/253/123, 100.100.100.200,
//!   168.63.129.16, 192.0.0.192 always denied; names `metadata.google.internal`,
//!   `metadata.goog`, `metadata`, `instance-data` refused at the floor; Teredo
//!   (2001::/32) classified by its client IPv4 as well. Denied-name addresses
//!   cached 30 s.
//! * Upstream failures: HTTP 502 `upstream error: …` (504 on connect
//!   timeout) without an egress kind; SOCKS REP
//!   `05` refused / `04` otherwise. A name that does not resolve is a 502 with kind
//!   `upstream-dns-failure` (REP `04`), not an SSRF refusal. The record of a request that
//!   the policy allowed and that then failed is an `allow` with `error_kind` (DNS,
//!   `upstream-error`, `upstream-no-response`, `upstream-incomplete`,
//!   `client-tls-rejected`, `request-body-timeout`, `request-chunk-too-large`) and the sentence in `reason`.
//! * Long-lived flows (opaque CONNECT, SOCKS5, upgraded connections, and responses still
//!   streaming after 1 s) are reported twice: `state: open` when they start (or pass 1 s),
//!   `state: closed` (same `flow`) with bytes at the end.
//! * An absolute `https://` URI on the plain lane is refused with 400.
//! * Limits (docs/decisions.md, P9): 10 s first byte and head, 15 s connect, 15 min idle, 5 s
//!   per filter, 2048 connections overall, established tunnels included, lowered to fit
//!   the descriptor limit with a reserve (excess connections are closed), 60 s without
//!   a byte of a streamed request body (408),
//!   256 concurrent requests/tunnels per session (excess: 503 / REP `01`),
//!   64 KiB request head (431), 1024 cached leaves.
//! * A response denied by a response filter produces one `deny` record with
//!   phase `http-response`/`https-response` and no `allow` record.
//! * Hop-by-hop headers (and those named in `Connection`) are stripped both
//!   ways; `Upgrade` + `Connection: upgrade` are kept for WebSocket handshakes.
//!   The CONNECT answer is exactly `HTTP/1.1 200 Connection Established` with
//!   no headers.
//! * Path globs are matched by a small hand-written matcher because globset
//!   gives `[`, `{` and `/` meanings the spec forbids.
//! * `VIS_SYSTEM_CA_CERT` may hold a PEM file path or PEM text.
//! * `exclude_domains` keeps hosts opaque even when the rest of the block
//!   compiles to "no policy" (excluded hosts are always opaque, per
//!   docs/decisions.md P5, and registered filters would otherwise intercept them).
//! * When filters are registered, a request body of `Content-Length` ≤ 1 MiB
//!   is read before the filters run and must arrive within the head timeout
//!   (else 400); larger and chunked bodies are streamed and shown as `None`.
//! * Filters never see `Proxy-Authorization` (the session's proxy token).
//! * Provider credentials (docs/decisions.md, P8): a phantom is looked for in `Authorization`,
//!   `x-api-key`, `api-key` and a `key=` query parameter; on one of the
//!   provider's hosts (its `hosts` plus its base URL's host) it is replaced by
//!   the secret, anywhere else the request is denied (403,
//!   `blocked-by-filter`, `decided_by.kind = credential`). Provider hosts are
//!   intercepted (unless excluded). Decision records keep the phantom, never
//!   the secret.
//! * Provider route form: `http://127.0.0.1:<proxy-port>/_vis/provider/<id>/<token>/<rest>`
//!   (origin form, or absolute form through the proxy) → `<base_url><rest>`;
//!   the token in the path attributes it; the session's host policy is NOT
//!   applied (the operator configured the provider), the SSRF floor and the
//!   filters are; `Host` is set to the base URL's authority; lane `provider`.
#![warn(missing_docs)]

mod admission;
pub mod attribution;
pub mod body;
mod conn_pool;
pub mod credentials;
pub mod deny;
pub mod detect;
pub mod dial;
mod engine;
pub mod error;
pub mod filters;
pub mod h1_watch;
mod io_threads;
pub use io_threads::{default_io_threads, io_thread_index};
pub mod lanes;
mod listener;
pub mod metered;
mod phases;
pub use listener::{effective_cap, nofile_limit, FDS_PER_CONNECTION};
pub mod policy;
pub mod prefixed;
pub mod probe;
pub mod record;
pub mod relay;
pub mod settings;
pub mod ssrf;
pub mod standalone;
mod state;
pub mod tls;
pub mod traits;
pub mod upstream;

pub use engine::Proxy;
pub use error::{ProxyError, Result};
pub use settings::ProxyConfig;
pub use standalone::{run_standalone, start_standalone, StandaloneConfig};
pub use state::Services;
pub use traits::*;
