//! Environment for `env=[…]` declarations (docs/decisions.md, E5).
//!
//! Per name: the project's `environment:` block, then `<project>/.env.local`, then
//! `<project>/.env`, then the environment that started the gateway. Names that resolve to
//! nothing (or to an empty value) are absent. Values are never logged.

use std::collections::BTreeMap;
use std::path::Path;

/// Parses a dotenv file: `NAME=value`, optional `export `, `#` comments, single or double
/// quotes (double quotes understand `\n`, `\"`, `\\`), inline ` #` comments after unquoted
/// values.
pub fn parse_dotenv(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for raw in text.lines() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line).trim_start();
        let Some((name, value)) = line.split_once('=') else {
            continue;
        };
        let name = name.trim();
        if name.is_empty()
            || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            || name.starts_with(|c: char| c.is_ascii_digit())
        {
            continue;
        }
        let value = value.trim();
        let value = if let Some(rest) = value.strip_prefix('"') {
            let mut s = String::new();
            let mut chars = rest.chars();
            while let Some(c) = chars.next() {
                match c {
                    '"' => break,
                    '\\' => match chars.next() {
                        Some('n') => s.push('\n'),
                        Some('t') => s.push('\t'),
                        Some(other) => s.push(other),
                        None => break,
                    },
                    c => s.push(c),
                }
            }
            s
        } else if let Some(rest) = value.strip_prefix('\'') {
            rest.split('\'').next().unwrap_or("").to_string()
        } else {
            match value.find(" #") {
                Some(i) => value[..i].trim_end().to_string(),
                None => value.to_string(),
            }
        };
        out.insert(name.to_string(), value);
    }
    out
}

fn read_dotenv(path: &Path) -> BTreeMap<String, String> {
    std::fs::read_to_string(path)
        .map(|t| parse_dotenv(&t))
        .unwrap_or_default()
}

/// Resolves `names` for a project. `gateway_env` looks a name up in the environment that
/// started the gateway (a function, so tests need not touch the process environment).
pub fn resolve(
    names: &[String],
    project_root: Option<&Path>,
    environment: &BTreeMap<String, String>,
    gateway_env: &dyn Fn(&str) -> Option<String>,
) -> BTreeMap<String, String> {
    let (local, dotenv) = match project_root {
        Some(root) => (
            read_dotenv(&root.join(".env.local")),
            read_dotenv(&root.join(".env")),
        ),
        None => Default::default(),
    };
    let mut out = BTreeMap::new();
    for name in names {
        let value = if let Some(v) = environment.get(name) {
            // A declaration in `environment:` decides, even when it is empty.
            Some(v.clone())
        } else {
            local
                .get(name)
                .filter(|v| !v.is_empty())
                .or_else(|| dotenv.get(name).filter(|v| !v.is_empty()))
                .cloned()
                .or_else(|| gateway_env(name))
        };
        if let Some(v) = value.filter(|v| !v.is_empty()) {
            out.insert(name.clone(), v);
        }
    }
    out
}

/// The names a project defines itself (docs/decisions.md, E5: they need no `env=[…]` declaration): those under
/// its `environment:` block and those assigned in its `.env` and `.env.local`.
pub fn project_names(
    project_root: Option<&Path>,
    environment: &BTreeMap<String, String>,
) -> Vec<String> {
    let mut names: std::collections::BTreeSet<String> = environment.keys().cloned().collect();
    if let Some(root) = project_root {
        names.extend(read_dotenv(&root.join(".env")).into_keys());
        names.extend(read_dotenv(&root.join(".env.local")).into_keys());
    }
    names.into_iter().collect()
}

/// What `declare_env` answers an extension: its declared names and the project's own names,
/// each resolved as docs/decisions.md E5 says (names that resolve to nothing are absent).
pub fn resolve_for_extension(
    declared: &[String],
    project_root: Option<&Path>,
    environment: &BTreeMap<String, String>,
    gateway_env: &dyn Fn(&str) -> Option<String>,
) -> BTreeMap<String, String> {
    let mut names = project_names(project_root, environment);
    for n in declared {
        if !names.contains(n) {
            names.push(n.clone());
        }
    }
    resolve(&names, project_root, environment, gateway_env)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dotenv_lines_with_quotes_comments_and_export_are_understood() {
        let m = parse_dotenv(
            "# c\nA=1\nexport B = two \nC=\"x\\ny\"\nD='lit # not comment'\nE=v # note\n1X=no\nF=\n",
        );
        assert_eq!(m["A"], "1");
        assert_eq!(m["B"], "two");
        assert_eq!(m["C"], "x\ny");
        assert_eq!(m["D"], "lit # not comment");
        assert_eq!(m["E"], "v");
        assert_eq!(m["F"], "");
        assert!(!m.contains_key("1X"));
    }

    #[test]
    fn environment_block_beats_env_local_beats_env_beats_the_gateway_and_blanks_are_absent() {
        let root = std::env::temp_dir().join(format!("vis-env-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&root).expect("mkdir");
        std::fs::write(root.join(".env.local"), "KEY=local\nBOTH=local\nBLANK=\n").expect("w");
        std::fs::write(root.join(".env"), "KEY=dotenv\nONLY_ENV=dotenv\nBLANK=\n").expect("w");
        let mut block = BTreeMap::new();
        block.insert("BOTH".to_string(), "block".to_string());
        let gw = |n: &str| match n {
            "GW" | "KEY" => Some(format!("gw-{n}")),
            _ => None,
        };
        let names: Vec<String> = ["KEY", "BOTH", "ONLY_ENV", "GW", "BLANK", "NOPE"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let r = resolve(&names, Some(&root), &block, &gw);
        assert_eq!(r["KEY"], "local");
        assert_eq!(r["BOTH"], "block");
        assert_eq!(r["ONLY_ENV"], "dotenv");
        assert_eq!(r["GW"], "gw-GW");
        assert!(!r.contains_key("BLANK"));
        assert!(!r.contains_key("NOPE"));
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn the_projects_own_names_resolve_without_a_declaration_and_others_need_one() {
        let root = std::env::temp_dir().join(format!("vis-env-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&root).expect("mkdir");
        std::fs::write(root.join(".env"), "FROM_ENV=e\nSHARED=env\n").expect("w");
        std::fs::write(root.join(".env.local"), "FROM_LOCAL=l\nSHARED=local\n").expect("w");
        let mut block = BTreeMap::new();
        block.insert("FROM_BLOCK".to_string(), "b".to_string());
        let gw = |n: &str| match n {
            "GATEWAY_ONLY" | "DECLARED" => Some(format!("gw-{n}")),
            _ => None,
        };
        let got = resolve_for_extension(&[], Some(&root), &block, &gw);
        let want: BTreeMap<String, String> = [
            ("FROM_BLOCK", "b"),
            ("FROM_ENV", "e"),
            ("FROM_LOCAL", "l"),
            ("SHARED", "local"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(
            got, want,
            "the start environment is not handed out undeclared"
        );
        let got = resolve_for_extension(&["DECLARED".into()], Some(&root), &block, &gw);
        assert_eq!(got["DECLARED"], "gw-DECLARED");
        assert!(!got.contains_key("GATEWAY_ONLY"));
        let _ = std::fs::remove_dir_all(&root);
    }
}
