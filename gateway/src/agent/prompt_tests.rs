use super::*;

fn dirs() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let t = tempfile::tempdir().unwrap();
    let home = t.path().join("home");
    let repo = t.path().join("repo");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(repo.join("app/src")).unwrap();
    (t, home, repo)
}

fn inputs(home: &Path, project: &Path, work: &Path) -> PromptInputs {
    PromptInputs {
        home: home.to_path_buf(),
        project: project.to_path_buf(),
        work: work.to_path_buf(),
        sandbox: true,
        network: "n".into(),
        ..Default::default()
    }
}

#[test]
fn instructions_come_from_the_home_then_the_repository_root_down_to_the_work_folder() {
    let (_t, home, repo) = dirs();
    std::fs::create_dir_all(repo.join(".git")).unwrap();
    std::fs::write(home.join("AGENTS.md"), "home rules").unwrap();
    std::fs::write(repo.join("AGENTS.md"), "root rules").unwrap();
    std::fs::write(repo.join("CLAUDE.md"), "ignored beside AGENTS.md").unwrap();
    std::fs::write(repo.join("app/CLAUDE.md"), "app rules").unwrap();
    let work = repo.join("app/src");
    let files = instruction_files(&home, &work);
    let bodies: Vec<&str> = files.iter().map(|(_, b)| b.as_str()).collect();
    assert_eq!(bodies, ["home rules", "root rules", "app rules"]);
    let p = assemble(&inputs(&home, &repo, &work));
    let (a, b) = (
        p.text.find("root rules").unwrap(),
        p.text.find("app rules").unwrap(),
    );
    assert!(a < b);
    assert!(!p.text.contains("ignored beside"));
    assert!(p.text.starts_with("You are Vis"));
}

#[test]
fn without_a_repository_only_the_work_folder_is_read() {
    let (_t, home, repo) = dirs();
    std::fs::write(repo.join("AGENTS.md"), "parent rules").unwrap();
    let work = repo.join("app");
    std::fs::write(work.join("AGENTS.md"), "own rules").unwrap();
    let bodies: Vec<String> = instruction_files(&home, &work)
        .into_iter()
        .map(|(_, b)| b)
        .collect();
    assert_eq!(bodies, ["own rules"]);
}

#[test]
fn system_md_replaces_the_core_prompt_and_the_appended_parts_follow_the_instructions() {
    let (_t, home, repo) = dirs();
    std::fs::create_dir_all(repo.join(".vis")).unwrap();
    std::fs::write(repo.join(".vis/SYSTEM.md"), "custom core").unwrap();
    std::fs::write(repo.join(".vis/APPEND_SYSTEM.md"), "appended file").unwrap();
    std::fs::write(repo.join("AGENTS.md"), "rules").unwrap();
    let mut i = inputs(&home, &repo, &repo);
    i.system_prompt = Some("from vis.yml".into());
    i.append_system_prompt = Some("appended key".into());
    let p = assemble(&i);
    assert!(p.text.starts_with("custom core"), "{}", p.text);
    assert!(!p.text.contains("You are Vis"));
    assert!(!p.text.contains("from vis.yml"));
    let order: Vec<usize> = ["rules", "appended file", "appended key", "# Environment"]
        .iter()
        .map(|s| p.text.find(s).unwrap())
        .collect();
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}");
    // Without the file, the key replaces the core prompt.
    std::fs::remove_file(repo.join(".vis/SYSTEM.md")).unwrap();
    assert!(assemble(&i).text.starts_with("from vis.yml"));
}

#[test]
fn the_facts_name_the_workspace_the_branch_the_servers_and_come_after_the_stable_part() {
    let (_t, home, repo) = dirs();
    let git = |args: &[&str]| {
        let ok = std::process::Command::new("git")
            .arg("-C")
            .arg(&repo)
            .args(args)
            .output()
            .unwrap()
            .status
            .success();
        assert!(ok, "git {args:?}");
    };
    git(&["init", "-q", "-b", "feature-x"]);
    std::fs::write(repo.join("new.txt"), "x").unwrap();
    let mut i = inputs(&home, &repo, &repo);
    i.mcp = vec![("github".into(), "connected, 3 tools".into())];
    i.namespaces = vec![("notes".into(), "2 functions".into())];
    i.extensions = vec![("notes".into(), "Use notes.add for todos.".into())];
    let p = assemble(&i);
    assert!(p.text.contains(&format!("Workspace: {}", repo.display())));
    assert!(
        p.text.contains("branch `feature-x`, 1 changed"),
        "{}",
        p.text
    );
    assert!(p.text.contains("`github`: connected, 3 tools"));
    assert!(p.text.contains("# From the extension `notes`"));
    assert!(!p.text[..p.stable_len].contains("feature-x"));
}

#[test]
fn the_network_line_names_the_allowed_hosts() {
    let v = serde_json::json!({"allowed_domains": ["pypi.org", "github.com"]});
    let line = network_line(false, Some(&v));
    assert!(
        line.starts_with("allowed hosts pypi.org, github.com;"),
        "{line}"
    );
    assert!(network_line(true, None).contains("unset"));
}
