//! The servers added from the phone: `<home>/mcp-servers.json`, mode 0600 (a server's
//! environment and headers may hold credentials), written atomically.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use vis_companion_api::mcp::McpServerInput;

pub type Servers = BTreeMap<String, McpServerInput>;

pub fn path(home: &Path) -> PathBuf {
    home.join("mcp-servers.json")
}

/// The saved servers; a missing file is none, a broken one an error naming it.
pub fn load(home: &Path) -> Result<Servers, String> {
    let p = path(home);
    match std::fs::read(&p) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Servers::new()),
        Err(e) => Err(format!("cannot read {}: {e}", p.display())),
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map_err(|e| format!("{} is not a valid server list: {e}", p.display())),
    }
}

pub fn save(home: &Path, servers: &Servers) -> Result<(), String> {
    let p = path(home);
    let text = serde_json::to_vec_pretty(servers).map_err(|e| e.to_string())?;
    crate::home::write_private(&p, &text).map_err(|e| format!("cannot write {}: {e}", p.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use vis_companion_api::mcp::McpTransport;

    #[test]
    fn saved_servers_round_trip_in_a_private_file() {
        let dir = tempfile::tempdir().unwrap();
        assert!(load(dir.path()).unwrap().is_empty());
        let mut s = Servers::new();
        s.insert(
            "tools".into(),
            McpServerInput {
                transport: McpTransport::Stdio,
                enabled: Some(true),
                command: Some("srv".into()),
                args: Some(vec!["--x".into()]),
                cwd: None,
                env: Some([("TOKEN".to_string(), "secret".to_string())].into()),
                url: None,
                headers: None,
                timeout_ms: None,
            },
        );
        save(dir.path(), &s).unwrap();
        assert_eq!(load(dir.path()).unwrap(), s);
        let mode = std::fs::metadata(path(dir.path()))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        std::fs::write(path(dir.path()), "{not json").unwrap();
        assert!(load(dir.path()).unwrap_err().contains("mcp-servers.json"));
    }
}
