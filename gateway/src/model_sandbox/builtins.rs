//! The built-in functions of every block's namespace and their documents (what `doc()`
//! shows and `apropos()` searches).

use super::apropos::DocEntry;

/// `(name, signature, summary, details)`.
const BUILTINS: &[(&str, &str, &str, &str)] = &[
    (
        "cat",
        "cat(path, start=None, end=None) -> str",
        "Read a file of the workspace as anchored lines `LINE:HASH│ text`.",
        "start/end are 1-based inclusive line numbers; negative ones count from the end \
         (cat(p, -20) = the last 20 lines). The anchors (`12:a3f`) address lines for patch().",
    ),
    (
        "grep",
        "grep(query, paths=None, include=None, exclude=None, is_regex=False) -> Grep",
        "Search the workspace's files for text (or a regex); hits as anchored lines grouped by file.",
        "Honours .gitignore. include/exclude are glob lists (['*.rs']). print(g) shows the first \
         page; next(g) the next one; g.all() every page; g.hits and g.files count them.",
    ),
    (
        "patch",
        "patch(path, edits) -> str",
        "Edit one file atomically by anchors: [{'from': '12:a3f', 'to': '14:9c1', 'replace': 'new text'}].",
        "'to' defaults to 'from'; replace '' deletes the lines; {'after': '12:a3f', 'insert': '…'} \
         inserts. Anchors come from cat() or grep(). A stale anchor (the line changed since it \
         was read) or overlapping edits refuse the whole batch and leave the file untouched; \
         the answer gives the fresh anchors. Create a new file with \
         pathlib.Path(p).write_text(text).",
    ),
    (
        "ls",
        "ls(path='.') -> str",
        "List a directory of the workspace (directories end with /, files show their size).",
        "",
    ),
    (
        "shell",
        "shell(cmd, timeout=120) -> str",
        "Run a shell command (sh -c) in the workspace; returns its output and exit status.",
        "Network access goes through the session's egress policy.",
    ),
    (
        "apropos",
        "apropos(text) -> str",
        "Search every available function (built-ins, extension symbols, MCP tools) by words of its name or docs.",
        "Ranked; tolerates typos. Then read one with doc(name).",
    ),
    (
        "doc",
        "doc(name) -> str",
        "The whole documentation and contract of one function, by its (dotted) name.",
        "",
    ),
    (
        "draft_create",
        "draft_create(label) -> dict",
        "Create an isolated draft workspace of the project and move the session into it.",
        "Everything after it (files, shell, this block's cwd) works in the draft until \
         draft_approve() lands it or draft_discard() throws it away; the real folder is untouched \
         until then. Returns the new workspace.",
    ),
    (
        "draft_approve",
        "draft_approve(message=None) -> dict",
        "Ask the user to land the current draft in the real project (git: one commit on its branch) and return to it.",
        "The user approves or declines on their phone (unless the project lets the model land drafts \
         alone); a decline raises PermissionError and leaves the draft as it is. Refused, changing \
         nothing, when trunk changed the same files since the draft started.",
    ),
    (
        "draft_discard",
        "draft_discard(reason=None) -> dict",
        "Throw the current draft away for good and return to the real project.",
        "",
    ),
    (
        "gather",
        "await gather(*aws) -> list",
        "Await several async calls (extension symbols, MCP tools) at once; results in order.",
        "",
    ),
];

/// The names the gateway answers as host calls (`gather` lives in the runtime).
pub fn host_names() -> impl Iterator<Item = &'static str> {
    BUILTINS.iter().map(|b| b.0).filter(|n| *n != "gather")
}

/// The built-ins as searchable documents.
pub fn docs() -> Vec<DocEntry> {
    BUILTINS
        .iter()
        .map(|(name, sig, summary, details)| DocEntry {
            name: name.to_string(),
            summary: summary.to_string(),
            doc: if details.is_empty() {
                format!("{sig}\n\n{summary}")
            } else {
                format!("{sig}\n\n{summary}\n{details}")
            },
            is_hidden: false,
        })
        .collect()
}
