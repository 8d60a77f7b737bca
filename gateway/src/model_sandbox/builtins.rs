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
        "grep(query=None, paths=None, include=None, exclude=None, is_regex=False, context=0, \
         limit=None, offset=0, case=None) -> Grep",
        "Search the workspace's files (and file names) for text, any of several terms, or a regex; hits as anchored lines grouped by file.",
        "query: one term or a list of terms (a line matching any of them is a hit). Case-insensitive \
         unless a term has a capital letter (case=True/False forces it). Files whose path matches \
         are listed too; an empty query lists the files under paths. context=N shows N lines \
         around each hit; limit hits per page (default 100), offset skips hits. Honours \
         .gitignore. include/exclude are glob lists (['*.rs']). print(g) shows the first page; \
         next(g) the next one; g.all() every page; g.hits and g.files count them.",
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
        "shell(cmd, timeout=None, background=False) -> str | Job",
        "Run a shell command (sh -c) in the workspace; returns its output and exit status, or a Job handle with background=True.",
        "timeout (seconds) bounds the command and extends the block's own limit for it \
         (shell('cargo test', timeout=900)); without one the command gets what is left of the \
         block's limit. A timeout kills everything the command started. A long output keeps its \
         first 8 KiB and last 24 KiB and names a file holding all of it. background=True returns \
         a Job at once: .alive, .wait(timeout), .logs(tail=N) / .logs(since=pos), .stop(), .log \
         (its log file); it runs across blocks and turns until it ends or the session is deleted. \
         A trailing & never hangs the call; what it started is stopped when the block ends. \
         Network access goes through the session's egress policy.",
    ),
    (
        "jobs",
        "jobs() -> list[Job]",
        "The session's background jobs (running and recently finished), oldest first.",
        "Each is a Job handle: .alive, .exit_code, .wait(timeout), .logs(tail=N), .stop().",
    ),
    (
        "apropos",
        "apropos(text=None) -> list[Hit]",
        "Search every available function (built-ins, extension symbols and extensions, MCP tools, your own definitions, Python's built-ins) by words of its name or docs.",
        "Ranked; tolerates typos. With no text: everything, by namespace. Each hit can be passed to doc().",
    ),
    (
        "doc",
        "doc(name=None) -> str",
        "The whole documentation and contract of one function (a dotted name, a hit of apropos, or the function itself); with no name, an index of everything.",
        "",
    ),
    (
        "defs",
        "defs() -> str",
        "What this session's blocks defined: functions and classes with signatures, other names with types.",
        "Names persist from block to block. When the sandbox restarts (a block past its limit, a \
         cancel, a gateway restart) the next block says so; your functions and classes come back \
         from their source, other names do not.",
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

/// Built-ins that live in the runtime (no host call).
pub const RUNTIME_ONLY: [&str; 2] = ["gather", "defs"];

/// The names the gateway answers as host calls.
pub fn host_names() -> impl Iterator<Item = &'static str> {
    BUILTINS
        .iter()
        .map(|b| b.0)
        .filter(|n| !RUNTIME_ONLY.contains(n))
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
            kind: "builtin".into(),
        })
        .collect()
}
