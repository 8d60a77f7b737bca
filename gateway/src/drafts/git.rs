//! The git backend: the real `git` CLI, run with `tokio::process`.
//!
//! Create: the trunk's current tree (tracked changes, staged or not, and untracked files
//! that are not ignored) is written through a throwaway index — a copy of the user's, so
//! only changed files are hashed — into a baseline commit; the user's index, working tree
//! and refs are never touched. A worktree on the draft's own branch is checked out from it.
//!
//! Apply (docs/decisions.md, W1): `git merge-tree` puts the draft's own changes onto the
//! target branch's tip (base: the baseline, so the user's uncommitted work the draft
//! started from is not carried) without touching any working tree; the result is ONE
//! commit whose parent is the tip (or, with `drafts.apply: uncommitted`, no commit);
//! `git read-tree -m -u` moves the trunk's index and files from the tip to it the way a
//! checkout does (it refuses, changing nothing, when a file it changes has uncommitted
//! edits in trunk); then the branch ref moves, compare-and-swap on the tip.
//! The gateway's own plumbing runs with the repository's git hooks switched off: its commits
//! cross the extensions' `git/commit` op hook instead.

use super::{guard, DraftError, Hooks};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Stdio;

/// A repository a trunk root lies in.
#[derive(Debug, Clone)]
pub struct Repo {
    pub top: PathBuf,
    /// The trunk root relative to `top` (`""` or `"sub/dir/"`).
    pub prefix: String,
}

struct Out {
    ok: bool,
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

async fn exec(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Result<Out, DraftError> {
    let mut cmd = tokio::process::Command::new("git");
    cmd.arg("-C")
        .arg(dir)
        .args(["-c", "core.hooksPath=/dev/null"])
        .args(args)
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env_remove("GIT_INDEX_FILE")
        .env("GIT_TERMINAL_PROMPT", "0")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd
        .output()
        .await
        .map_err(|e| DraftError::failed(format!("cannot run git: {e}")))?;
    Ok(Out {
        ok: out.status.success(),
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}

/// Runs git and returns its trimmed stdout, or a failure naming the command and git's words.
async fn git(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Result<String, DraftError> {
    let out = exec(dir, args, env).await?;
    if !out.ok {
        return Err(DraftError::failed(format!(
            "git {} failed: {}",
            args.first().copied().unwrap_or(""),
            out.stderr.trim()
        )));
    }
    Ok(out.stdout.trim_end().to_string())
}

/// The repository `root` lies in, if any.
pub async fn detect(root: &Path) -> Option<Repo> {
    let out = exec(
        root,
        &["rev-parse", "--show-toplevel", "--show-prefix"],
        &[],
    )
    .await
    .ok()?;
    if !out.ok {
        return None;
    }
    let mut lines = out.stdout.lines();
    let top = PathBuf::from(lines.next()?.trim());
    let prefix = lines.next().unwrap_or("").trim().to_string();
    Some(Repo { top, prefix })
}

/// Author and committer for the gateway's commits when the user has configured none.
async fn identity(top: &Path) -> Vec<(&'static str, &'static str)> {
    match exec(top, &["var", "GIT_COMMITTER_IDENT"], &[]).await {
        Ok(o) if o.ok => Vec::new(),
        _ => vec![
            ("GIT_AUTHOR_NAME", "Vis"),
            ("GIT_AUTHOR_EMAIL", "vis@localhost"),
            ("GIT_COMMITTER_NAME", "Vis"),
            ("GIT_COMMITTER_EMAIL", "vis@localhost"),
        ],
    }
}

async fn commit_tree(
    top: &Path,
    tree: &str,
    parents: &[&str],
    message: &str,
) -> Result<String, DraftError> {
    let mut args = vec!["commit-tree", tree];
    for p in parents {
        args.extend(["-p", p]);
    }
    args.extend(["-m", message]);
    git(top, &args, &identity(top).await).await
}

/// A commit crossing the `git/commit` hooks: before (may refuse), make it, after.
async fn hooked_commit(
    hooks: &dyn Hooks,
    args: Value,
    make: impl std::future::Future<Output = Result<String, DraftError>>,
) -> Result<String, DraftError> {
    guard(hooks, "git/commit", &args).await?;
    let sha = make.await?;
    hooks.after("git/commit", &args, &sha).await;
    Ok(sha)
}

/// What a new git draft starts from.
pub struct Created {
    pub baseline: String,
    pub target_branch: String,
}

/// Makes the worktree `dir` on a new branch `branch`, from the trunk's current tree (or
/// from `HEAD` when `clean`). `args` are the draft's hook arguments.
pub async fn create(
    repo: &Repo,
    dir: &Path,
    branch: &str,
    clean: bool,
    hooks: &dyn Hooks,
    args: &Value,
) -> Result<Created, DraftError> {
    let top = &repo.top;
    let head = git(top, &["rev-parse", "--verify", "-q", "HEAD^{commit}"], &[])
        .await
        .map_err(|_| {
            DraftError::unavailable(format!(
                "the repository at {} has no commit yet: commit once, then make a draft",
                top.display()
            ))
        })?;
    let target = git(top, &["symbolic-ref", "-q", "--short", "HEAD"], &[])
        .await
        .map_err(|_| {
            DraftError::unavailable(
                "trunk is on a detached HEAD: check out a branch to apply a draft into first",
            )
        })?;
    let exists = exec(
        top,
        &[
            "rev-parse",
            "--verify",
            "-q",
            &format!("refs/heads/{branch}"),
        ],
        &[],
    )
    .await?;
    if exists.ok {
        return Err(DraftError::Exists(format!(
            "the branch {branch} already exists in {}",
            top.display()
        )));
    }
    let baseline = if clean {
        head.clone()
    } else {
        snapshot(top, &head, dir, hooks, args).await?
    };
    if let Some(parent) = dir.parent() {
        tokio::fs::create_dir_all(parent)
            .await
            .map_err(|e| DraftError::failed(format!("cannot make {}: {e}", parent.display())))?;
    }
    let d = dir.to_string_lossy();
    // Parallel checkout: writing the files is most of a draft's cost on a large tree.
    git(
        top,
        &[
            "-c",
            "checkout.workers=8",
            "worktree",
            "add",
            "--quiet",
            "-b",
            branch,
            &d,
            &baseline,
        ],
        &[],
    )
    .await?;
    Ok(Created {
        baseline,
        target_branch: target,
    })
}

/// The trunk's working tree as a commit on top of `head` (`head` itself when unchanged).
async fn snapshot(
    top: &Path,
    head: &str,
    dir: &Path,
    hooks: &dyn Hooks,
    args: &Value,
) -> Result<String, DraftError> {
    // Beside the draft folders; a label never starts with a dot, so this name is free.
    let parent = dir.parent().unwrap_or(dir);
    let _ = tokio::fs::create_dir_all(parent).await;
    let index = parent.join(format!(".{}.index", uuid::Uuid::new_v4()));
    let real = PathBuf::from(
        git(
            top,
            &["rev-parse", "--path-format=absolute", "--git-path", "index"],
            &[],
        )
        .await?,
    );
    let _ = tokio::fs::remove_file(&index).await;
    if tokio::fs::metadata(&real).await.is_ok() {
        tokio::fs::copy(&real, &index)
            .await
            .map_err(|e| DraftError::failed(format!("cannot copy the index: {e}")))?;
    }
    let idx = index.to_string_lossy().into_owned();
    let env = [("GIT_INDEX_FILE", idx.as_str())];
    let tree = async {
        git(top, &["add", "-A", "--", "."], &env).await?;
        git(top, &["write-tree"], &env).await
    }
    .await;
    let _ = tokio::fs::remove_file(&index).await;
    let tree = tree?;
    if git(top, &["rev-parse", &format!("{head}^{{tree}}")], &[]).await? == tree {
        return Ok(head.to_string());
    }
    let message = "vis: the trunk's uncommitted changes a draft started from";
    let mut a = args.clone();
    a["message"] = json!(message);
    hooked_commit(hooks, a, commit_tree(top, &tree, &[head], message)).await
}

/// The draft's current tree (its index updated from its files) and the files that differ
/// from the baseline.
pub async fn changed(d: &super::Draft) -> Result<(String, Vec<String>), DraftError> {
    let Some(base) = &d.baseline else {
        return Err(DraftError::failed("the draft has no git baseline"));
    };
    git(&d.dir, &["add", "-A", "--", "."], &[]).await?;
    let tree = git(&d.dir, &["write-tree"], &[]).await?;
    let files = git(
        &d.dir,
        &["diff-tree", "-r", "--name-only", "-z", base, &tree],
        &[],
    )
    .await?
    .split('\0')
    .filter(|f| !f.is_empty())
    .map(str::to_string)
    .collect();
    Ok((tree, files))
}

/// An apply, checked and ready to land: nothing is written yet.
#[derive(Debug)]
pub struct Prepared {
    pub files: Vec<String>,
    /// The target branch's tip the draft's changes go on top of.
    tip: String,
    /// The tip's tree with the draft's own changes (docs/decisions.md, W1).
    merged: String,
}

/// Puts the draft's own changes (its files against the baseline it started from) on top of
/// the target branch's tip, in memory, and checks that trunk can take them. The baseline
/// may hold the user's uncommitted work; a three-way merge with it as the base carries
/// only what the draft changed, so that work never enters the branch through the draft.
/// `None`: nothing changed.
pub async fn prepare(d: &super::Draft, top: &Path) -> Result<Option<Prepared>, DraftError> {
    let (Some(base), Some(target)) = (&d.baseline, &d.target_branch) else {
        return Err(DraftError::failed("the draft has no git baseline"));
    };
    let dir = &d.dir;
    let (tree, files) = changed(d).await?;
    if files.is_empty() {
        return Ok(None);
    }
    // The draft's state as an object for the merge (no ref names it).
    let draft_head = git(dir, &["rev-parse", "HEAD"], &[]).await?;
    let draft_commit = if git(dir, &["rev-parse", "HEAD^{tree}"], &[]).await? == tree {
        draft_head
    } else {
        commit_tree(top, &tree, &[&draft_head], "vis: the draft's state").await?
    };
    let on = git(top, &["symbolic-ref", "-q", "HEAD"], &[])
        .await
        .unwrap_or_default();
    if on != format!("refs/heads/{target}") {
        return Err(DraftError::conflict(
            format!(
                "trunk is no longer on {target} (now {}): check out {target} to apply this draft",
                if on.is_empty() {
                    "a detached HEAD"
                } else {
                    on.trim_start_matches("refs/heads/")
                }
            ),
            Vec::new(),
        ));
    }
    let tip = git(top, &["rev-parse", "--verify", "HEAD^{commit}"], &[]).await?;
    let mb = format!("--merge-base={base}");
    let merge = exec(
        top,
        &[
            "merge-tree",
            "--write-tree",
            "--name-only",
            "--no-messages",
            &mb,
            &tip,
            &draft_commit,
        ],
        &[],
    )
    .await?;
    let mut lines = merge.stdout.lines();
    let merged = lines.next().unwrap_or("").trim().to_string();
    match merge.code {
        Some(0) => {}
        Some(1) => {
            let files: Vec<String> = lines
                .filter(|l| !l.is_empty())
                .map(str::to_string)
                .collect();
            return Err(DraftError::conflict(
                format!(
                    "the draft conflicts with {target} as committed ({}): the draft \
                     changed files that differ on {target} since it started, or that hold \
                     work you have not committed; nothing was changed: reconcile them \
                     (commit your work, or undo the draft's edit), then apply again",
                    files.join(", ")
                ),
                files,
            ));
        }
        _ => {
            return Err(DraftError::failed(format!(
                "git merge-tree failed: {}",
                merge.stderr.trim()
            )))
        }
    }
    let _ = exec(top, &["update-index", "-q", "--refresh"], &[]).await;
    let dry = exec(top, &["read-tree", "-m", "-u", "-n", &tip, &merged], &[]).await?;
    if !dry.ok {
        return Err(trunk_conflict(&dry.stderr));
    }
    Ok(Some(Prepared { files, tip, merged }))
}

/// Trunk has uncommitted edits (or untracked files) where the draft changes files.
fn trunk_conflict(stderr: &str) -> DraftError {
    let files: Vec<String> = stderr
        .lines()
        .filter_map(|l| {
            let (_, rest) = l.split_once('\'')?;
            let (name, _) = rest.split_once('\'')?;
            Some(name.to_string())
        })
        .collect();
    let named = if files.is_empty() {
        stderr.trim().to_string()
    } else {
        files.join(", ")
    };
    DraftError::conflict(
        format!(
            "trunk has uncommitted changes to files the draft also changes ({named}): nothing \
             was changed; commit or undo them in trunk, then apply again"
        ),
        files,
    )
}

/// Moves trunk's index and files from `from` to `to` the way a checkout does (refusing,
/// changing nothing, where a file it changes has uncommitted edits).
async fn move_trunk(top: &Path, from: &str, to: &str) -> Result<(), DraftError> {
    let moved = exec(top, &["read-tree", "-m", "-u", from, to], &[]).await?;
    if !moved.ok {
        return Err(trunk_conflict(&moved.stderr));
    }
    Ok(())
}

/// Lands a prepared apply. `Commit`: one commit of the draft's changes whose parent is the
/// target branch's tip (through the `git/commit` hooks), checked out in trunk, the branch
/// moved compare-and-swap on the tip; returns it. `Uncommitted`: the draft's changes are
/// written to trunk's files and left unstaged; no commit, `None`.
pub async fn land(
    d: &super::Draft,
    top: &Path,
    p: &Prepared,
    message: &str,
    mode: crate::config::DraftApply,
    hooks: &dyn Hooks,
) -> Result<Option<String>, DraftError> {
    let Some(target) = &d.target_branch else {
        return Err(DraftError::failed("the draft has no target branch"));
    };
    if mode == crate::config::DraftApply::Uncommitted {
        move_trunk(top, &p.tip, &p.merged).await?;
        // Back out of the index: the files stay as the draft left them, unstaged.
        for chunk in p.files.chunks(256) {
            let mut args = vec!["reset".to_string(), "-q".into(), p.tip.clone(), "--".into()];
            args.extend(chunk.iter().map(|f| format!(":(literal){f}")));
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            git(top, &args, &[]).await?;
        }
        return Ok(None);
    }
    let mut args = serde_json::Value::Object(d.hook_args());
    args["message"] = json!(message);
    args["files"] = json!(p.files);
    args["branch"] = json!(target);
    let commit = hooked_commit(hooks, args, async {
        let c = commit_tree(top, &p.merged, &[&p.tip], message).await?;
        move_trunk(top, &p.tip, &c).await?;
        let r = format!("refs/heads/{target}");
        git(
            top,
            &["update-ref", "-m", "vis: apply a draft", &r, &c, &p.tip],
            &[],
        )
        .await?;
        Ok(c)
    })
    .await?;
    Ok(Some(commit))
}

/// Removes the draft's worktree and branch (abandon, or after apply).
pub async fn remove(d: &super::Draft, top: &Path) -> Result<(), DraftError> {
    let dir = d.dir.to_string_lossy().into_owned();
    let out = exec(
        top,
        &["worktree", "remove", "--force", "--force", &dir],
        &[],
    )
    .await?;
    if !out.ok {
        // Already gone from disk: forget its administrative files.
        let _ = tokio::fs::remove_dir_all(&d.dir).await;
        let _ = exec(top, &["worktree", "prune"], &[]).await;
    }
    if let Some(b) = &d.branch {
        let _ = exec(top, &["branch", "-D", "--quiet", b], &[]).await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drafts::{Backend, Draft, DraftState};

    struct NoHooks;
    #[async_trait::async_trait]
    impl Hooks for NoHooks {
        async fn before(&self, _: &str, _: &Value) -> Result<(), String> {
            Ok(())
        }
        async fn after(&self, _: &str, _: &Value, _: &str) {}
    }

    /// Records every hook call; refuses `refuse` with a reason.
    #[derive(Default)]
    struct Recording {
        calls: parking_lot::Mutex<Vec<(String, Value)>>,
        refuse: Option<&'static str>,
    }
    #[async_trait::async_trait]
    impl Hooks for Recording {
        async fn before(&self, op: &str, args: &Value) -> Result<(), String> {
            self.calls.lock().push((op.to_string(), args.clone()));
            match self.refuse {
                Some(r) if r == op => Err("no commits today".into()),
                _ => Ok(()),
            }
        }
        async fn after(&self, _: &str, _: &Value, _: &str) {}
    }

    #[tokio::test]
    async fn every_commit_crosses_the_git_commit_hook_and_a_refusal_lands_nothing() {
        let t = tempfile::tempdir().unwrap();
        let top = t.path().join("repo");
        std::fs::create_dir_all(top.join("sub")).unwrap();
        sh(&top, &["init", "-q", "-b", "main"]);
        std::fs::write(top.join("sub/a.txt"), "a\n").unwrap();
        sh(&top, &["add", "."]);
        sh(&top, &["commit", "-qm", "init"]);
        std::fs::write(top.join("wip.txt"), "wip\n").unwrap();
        // A session working in a sub folder of the repository.
        let repo = detect(&top.join("sub")).await.unwrap();
        assert_eq!(repo.prefix, "sub/");
        let dir = t.path().join("drafts/t");
        let hooks = Recording::default();
        let made = create(
            &repo,
            &dir,
            "vis-draft/t",
            false,
            &hooks,
            &json!({"label": "t"}),
        )
        .await
        .unwrap();
        assert_eq!(
            hooks.calls.lock().len(),
            1,
            "the snapshot of uncommitted work is a commit"
        );
        assert_eq!(hooks.calls.lock()[0].0, "git/commit");
        assert_eq!(hooks.calls.lock()[0].1["label"], "t");
        let mut d = draft(&repo, &dir, &made);
        d.root = dir.join("sub");
        std::fs::write(d.root.join("a.txt"), "a2\n").unwrap();
        let head = sh(&top, &["rev-parse", "HEAD"]);

        let refusing = Recording {
            refuse: Some("git/commit"),
            ..Default::default()
        };
        let commit = crate::config::DraftApply::Commit;
        let p = prepare(&d, &top).await.unwrap().unwrap();
        let e = land(&d, &top, &p, "m", commit, &refusing)
            .await
            .unwrap_err();
        assert_eq!(e, DraftError::Blocked("no commits today".into()));
        assert_eq!(sh(&top, &["rev-parse", "HEAD"]), head);
        assert_eq!(
            std::fs::read_to_string(top.join("sub/a.txt")).unwrap(),
            "a\n"
        );

        let hooks = Recording::default();
        let p = prepare(&d, &top).await.unwrap().unwrap();
        assert_eq!(p.files, vec!["sub/a.txt"]);
        land(&d, &top, &p, "m", commit, &hooks).await.unwrap();
        let ops: Vec<(String, Value)> = hooks.calls.lock().clone();
        assert_eq!(ops.len(), 1, "one commit on the target branch: {ops:?}");
        assert_eq!(ops[0].1["branch"], "main");
        assert_eq!(
            std::fs::read_to_string(top.join("sub/a.txt")).unwrap(),
            "a2\n"
        );
        assert_eq!(
            std::fs::read_to_string(top.join("wip.txt")).unwrap(),
            "wip\n"
        );
    }

    fn sh(dir: &Path, args: &[&str]) -> String {
        let out = std::process::Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(["-c", "user.name=t", "-c", "user.email=t@t"])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn draft(repo: &Repo, dir: &Path, made: &Created) -> Draft {
        Draft {
            workspace_id: "w".into(),
            label: "t".into(),
            repo_root: repo.top.clone(),
            trunk_root: repo.top.clone(),
            dir: dir.to_path_buf(),
            root: dir.to_path_buf(),
            backend: Backend::Git,
            branch: Some("vis-draft/t".into()),
            target_branch: Some(made.target_branch.clone()),
            baseline: Some(made.baseline.clone()),
            state: DraftState::Active,
            session_id: None,
            created_by: "s".into(),
            fork_ms: 0,
            ended_ms: None,
            reason: None,
        }
    }

    #[tokio::test]
    async fn a_draft_starts_from_staged_unstaged_and_untracked_work_without_touching_the_users_index(
    ) {
        let t = tempfile::tempdir().unwrap();
        let top = t.path().join("repo");
        std::fs::create_dir_all(&top).unwrap();
        sh(&top, &["init", "-q", "-b", "main"]);
        std::fs::write(top.join("a.txt"), "a\n").unwrap();
        std::fs::write(top.join("b.txt"), "b\n").unwrap();
        std::fs::write(top.join(".gitignore"), "*.log\n").unwrap();
        sh(&top, &["add", "."]);
        sh(&top, &["commit", "-qm", "init"]);
        std::fs::write(top.join("a.txt"), "a staged\n").unwrap();
        sh(&top, &["add", "a.txt"]);
        std::fs::write(top.join("b.txt"), "b unstaged\n").unwrap();
        std::fs::write(top.join("new.txt"), "untracked\n").unwrap();
        std::fs::write(top.join("x.log"), "ignored\n").unwrap();
        let index_before = std::fs::read(top.join(".git/index")).unwrap();
        let status_before = sh(&top, &["status", "--porcelain"]);

        let repo = detect(&top).await.unwrap();
        let dir = t.path().join("drafts/t");
        let made = create(&repo, &dir, "vis-draft/t", false, &NoHooks, &json!({}))
            .await
            .unwrap();
        assert_eq!(std::fs::read(top.join(".git/index")).unwrap(), index_before);
        assert_eq!(sh(&top, &["status", "--porcelain"]), status_before);
        assert_eq!(
            std::fs::read_to_string(dir.join("a.txt")).unwrap(),
            "a staged\n"
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("b.txt")).unwrap(),
            "b unstaged\n"
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("new.txt")).unwrap(),
            "untracked\n"
        );
        assert!(!dir.join("x.log").exists());

        // Apply lands only the draft's own change; trunk's work stays uncommitted.
        let d = draft(&repo, &dir, &made);
        std::fs::write(dir.join("c.txt"), "from the draft\n").unwrap();
        let p = prepare(&d, &top).await.unwrap().unwrap();
        assert_eq!(p.files, vec!["c.txt"]);
        let commit = crate::config::DraftApply::Commit;
        land(&d, &top, &p, "add c", commit, &NoHooks).await.unwrap();
        assert_eq!(
            std::fs::read_to_string(top.join("c.txt")).unwrap(),
            "from the draft\n"
        );
        assert_eq!(
            std::fs::read_to_string(top.join("b.txt")).unwrap(),
            "b unstaged\n"
        );
        let status = sh(&top, &["status", "--porcelain"]);
        assert!(
            status.contains("M  a.txt") && status.contains(" M b.txt"),
            "{status}"
        );
        assert!(!status.contains("c.txt"), "{status}");
        let head_tree = sh(&top, &["show", "--stat", "--format=%s", "HEAD"]);
        assert!(head_tree.starts_with("add c"), "{head_tree}");
        assert_eq!(
            sh(&top, &["rev-list", "--count", "HEAD"]).trim(),
            "2",
            "one commit on the tip, the snapshot not in the history"
        );
        remove(&d, &top).await.unwrap();
        assert!(!dir.exists());
    }
}
