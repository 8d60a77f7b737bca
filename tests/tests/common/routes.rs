//! The Companion routes as the source declares them, for tests that walk every route.

/// `(METHOD, path)` pairs of every `.route(...)` of the route modules
/// (companion-api/src/routes/*.rs).
pub fn source_routes() -> Vec<(String, String)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../companion-api/src/routes");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("route modules")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let src = std::fs::read_to_string(&f).expect("route module source");
        out.extend(routes_in(&src));
    }
    out
}

/// The `(METHOD, path)` pairs of the `.route(...)` calls in one source text.
fn routes_in(src: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = src;
    while let Some(i) = rest.find(".route(") {
        rest = &rest[i + ".route(".len()..];
        // the call's text up to its balanced closing paren
        let mut depth = 1;
        let mut end = 0;
        for (j, c) in rest.char_indices() {
            match c {
                '(' => depth += 1,
                ')' => {
                    depth -= 1;
                    if depth == 0 {
                        end = j;
                        break;
                    }
                }
                _ => {}
            }
        }
        let call = &rest[..end];
        let path = call.split('"').nth(1).unwrap_or("").to_string();
        for verb in ["get", "post", "patch", "delete", "put"] {
            let needle = format!("{verb}(");
            let found = call.match_indices(&needle).any(|(k, _)| {
                k == 0
                    || !call.as_bytes()[k - 1].is_ascii_alphanumeric()
                        && call.as_bytes()[k - 1] != b'_'
            });
            if found {
                out.push((verb.to_uppercase(), path.clone()));
            }
        }
    }
    out
}
