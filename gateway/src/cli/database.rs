//! `start --database-url`: where the store lives (docs/decisions.md, C3): the SQLite file
//! under the home by default, or a PostgreSQL database.

use crate::home::Home;
use crate::store::Store;
use anyhow::{Context, Result};

/// A PostgreSQL URL: `postgres://` or `postgresql://` naming a host (or a socket folder in
/// `?host=`).
pub(super) fn url(v: &str) -> Result<String, String> {
    let (scheme, rest) = v
        .split_once("://")
        .ok_or("expected a PostgreSQL URL such as postgres://user@127.0.0.1:5432/vis")?;
    if !["postgres", "postgresql"].contains(&scheme) {
        return Err(format!(
            "the scheme {scheme}:// is not a PostgreSQL one (postgres://, postgresql://)"
        ));
    }
    let authority = rest.split(['/', '?']).next().unwrap_or_default();
    let host = authority.rsplit('@').next().unwrap_or_default();
    if (host.is_empty() || host.starts_with(':')) && !rest.contains("host=") {
        return Err("the URL names no host".into());
    }
    Ok(v.to_string())
}

/// A schema name: lowercase letters, digits and `_`, starting with a letter.
pub(super) fn schema(v: &str) -> Result<String, String> {
    let fine = v.len() <= 63
        && v.starts_with(|c: char| c.is_ascii_lowercase())
        && v.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    fine.then(|| v.to_string()).ok_or_else(|| {
        "a schema name is up to 63 lowercase letters, digits or '_', starting with a letter".into()
    })
}

/// The URL with its password (if any) hidden, for messages and the machine view.
pub fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((user, host)) if user.contains(':') => {
            let name = user.split(':').next().unwrap_or_default();
            format!("{scheme}://{name}:***@{host}{tail}")
        }
        _ => url.to_string(),
    }
}

/// Opens the store: PostgreSQL when a URL is given (the gateway does not start when the
/// server cannot be reached or its schema cannot be brought up to date), else the home's
/// SQLite file. A cluster node's PostgreSQL store fences its event writes with `fence`.
pub(super) async fn open(
    url: Option<&str>,
    schema: Option<&str>,
    home: &Home,
    fence: Option<vis_store::Writer>,
) -> Result<Store> {
    let Some(url) = url else {
        let path = home.db_path();
        return Store::open(&path)
            .with_context(|| format!("cannot open the database {}", path.display()));
    };
    let shown = redacted(url);
    Store::open_postgres(&pg_options(url, schema), shown.clone(), fence)
        .await
        .with_context(|| format!("cannot open the PostgreSQL store at {shown}"))
}

/// The connection options of `--database-url` and `--database-schema`.
pub(super) fn pg_options(url: &str, schema: Option<&str>) -> vis_store::PgOptions {
    let opts = vis_store::PgOptions::new(url);
    match schema {
        Some(s) => opts.with_schema(s),
        None => opts,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_database_url_needs_a_postgres_scheme_and_a_host() {
        for good in [
            "postgres://postgres@127.0.0.1:5432/test",
            "postgresql://u:p@db.internal/vis?sslmode=disable",
            "postgres:///vis?host=/var/run/postgresql",
        ] {
            assert_eq!(url(good).as_deref(), Ok(good));
        }
        for bad in [
            "127.0.0.1:5432",
            "mysql://h/db",
            "postgres:///vis",
            "postgres://u@:5432/x",
        ] {
            assert!(url(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn a_schema_name_is_a_plain_lowercase_identifier() {
        assert!(schema("vis_node_1").is_ok());
        for bad in ["", "1abc", "Vis", "a-b", "a;drop"] {
            assert!(schema(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn a_password_in_the_url_is_never_shown() {
        assert_eq!(
            redacted("postgres://vis:s3cret@db:5432/vis?x=1"),
            "postgres://vis:***@db:5432/vis?x=1"
        );
        let plain = "postgres://postgres@127.0.0.1/test";
        assert_eq!(redacted(plain), plain);
    }
}
