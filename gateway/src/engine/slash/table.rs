//! The command table: the built-ins, the sandbox's and the extensions' commands of a
//! project, and the palette the Companion shows (with the `/draft` sub-commands and the
//! commands the Companion implements itself).

use super::SlashCommands;
use std::path::Path;
use vis_companion_api::wire::{SlashCommand, SlashPalette};

/// The built-in commands and their one-line docs.
const BUILTINS: &[(&str, &str)] = &[
    ("help", "List the slash commands of this session"),
    (
        "reload",
        "Reload the configuration (providers, policy) and extensions",
    ),
    ("extensions", "List loaded extensions and load failures"),
    (
        "net",
        "Learn mode: /net propose [project], /net review, /net mode [learn|enforce|project], /net suggested",
    ),
    (
        "prompt",
        "Show the system prompt the model is given in this session",
    ),
    (
        "compact",
        "Summarise the older turns to free the model's context: /compact [what to keep in focus]",
    ),
    (
        "draft",
        "Isolated workspaces: /draft new NAME, /draft, /draft list, /draft apply, /draft stash, /draft resume NAME, /draft abandon",
    ),
];

/// The `/draft` sub-commands, listed in the palette as commands of their own.
const DRAFT_PALETTE: &[(&str, &str)] = &[
    (
        "draft new",
        "Create an isolated draft workspace and enter it: /draft new NAME",
    ),
    ("draft list", "List the drafts of this repository"),
    (
        "draft apply",
        "Land the draft's changes in the real folder (commit + merge in git)",
    ),
    (
        "draft stash",
        "Return to trunk, keeping the draft for /draft resume",
    ),
    ("draft resume", "Enter a stashed draft: /draft resume NAME"),
    ("draft abandon", "Discard the current draft for good"),
];

/// Commands that need the sandbox.
const SANDBOX_BUILTINS: &[(&str, &str)] = &[
    ("sh", "Run a shell command in the session sandbox: /sh <command>"),
    ("net-probe", "Explain the egress verdict for a request without sending it: /net-probe [METHOD] <url | host:port>"),
];

/// Commands the Companion implements itself; listed in the palette only.
const CLIENT_NATIVE: &[(&str, &str)] = &[
    ("help", "Show help"),
    ("new-session", "Start a new session"),
    ("sessions", "Browse sessions"),
    ("clear", "Clear the view"),
];

/// Splits `/name rest` into `(name, rest)`.
pub(super) fn parse(request: &str) -> Option<(&str, &str)> {
    let body = request.trim().strip_prefix('/')?;
    let (name, rest) = body.split_once(char::is_whitespace).unwrap_or((body, ""));
    (!name.is_empty()).then_some((name, rest.trim()))
}

impl SlashCommands {
    /// Every slash command of a project with its doc (built-ins shadow extensions).
    pub async fn names(&self, root: &Path) -> Vec<(String, String)> {
        let mut names: Vec<(String, String)> = BUILTINS
            .iter()
            .map(|(n, d)| (n.to_string(), d.to_string()))
            .collect();
        if self.sandbox.get().is_some() {
            names.extend(
                SANDBOX_BUILTINS
                    .iter()
                    .map(|(n, d)| (n.to_string(), d.to_string())),
            );
        }
        for (n, d) in self.extensions.catalog().slashes(Some(root)).await {
            let n = n.trim_start_matches('/').to_string();
            if !names.iter().any(|(m, _)| *m == n) {
                names.push((n, d));
            }
        }
        names
    }

    /// Whether a request names a registered slash command of the project.
    pub async fn is_slash(&self, request: &str, root: &Path) -> bool {
        let Some((name, _)) = parse(request) else {
            return false;
        };
        self.names(root).await.iter().any(|(n, _)| n == name)
    }

    /// The palette of a project's sessions: its commands, the `/draft` sub-commands, then the
    /// Companion's own commands that no other command shadows.
    pub async fn palette(&self, root: &Path) -> SlashPalette {
        let mut commands: Vec<SlashCommand> = self
            .names(root)
            .await
            .into_iter()
            .map(|(n, doc)| SlashCommand {
                name: format!("/{n}"),
                doc,
            })
            .collect();
        for (n, d) in DRAFT_PALETTE {
            commands.push(SlashCommand {
                name: format!("/{n}"),
                doc: d.to_string(),
            });
        }
        for (n, d) in CLIENT_NATIVE {
            let name = format!("/{n}");
            if !commands.iter().any(|c| c.name == name) {
                commands.push(SlashCommand {
                    name,
                    doc: d.to_string(),
                });
            }
        }
        SlashPalette { commands }
    }
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn a_slash_request_splits_into_name_and_arguments() {
        assert_eq!(
            parse("/net-probe GET http://x"),
            Some(("net-probe", "GET http://x"))
        );
        assert_eq!(parse("  /help "), Some(("help", "")));
        assert_eq!(parse("hello"), None);
        assert_eq!(parse("/"), None);
    }
}
