//! The README's walk-through on `fake` keeps its vault, its API tokens and its simulated cloud
//! outside the repository: every file its commands write is under `$KEEPER_DEMO`, a temporary
//! directory.

const README: &str = include_str!("../../README.md");

/// The shell commands of the walk-through, one line each (continued lines joined).
fn demo_commands() -> Vec<String> {
    let start = README
        .find("## Run it on `fake`")
        .expect("the walk-through");
    let end = start + README[start..].find("\n## ").expect("the next section");
    let mut lines = Vec::new();
    for block in README[start..end].split("```sh\n").skip(1) {
        let body = block.split("```").next().unwrap_or_default();
        let mut line = String::new();
        for l in body.lines() {
            line.push_str(l.trim());
            if let Some(open) = line.strip_suffix('\\') {
                line = format!("{open} ");
                continue;
            }
            lines.push(std::mem::take(&mut line));
        }
    }
    lines
}

fn in_demo(path: &str) -> bool {
    let path = path.trim_start_matches('"');
    path.starts_with("$KEEPER_DEMO/") || path.starts_with("${KEEPER_DEMO}/")
}

/// The files `command` writes: what `>` redirects to, what `mkdir` makes, and where
/// `KEEPER_VAULT_DIR` and `KEEPER_API_TOKENS_FILE` point.
fn written(command: &str) -> Vec<String> {
    let words: Vec<&str> = command.split_whitespace().collect();
    let mut out = Vec::new();
    for (i, w) in words.iter().enumerate() {
        if let Some(target) = w.strip_prefix('>') {
            if target.starts_with('&') {
                continue;
            }
            let target = if target.is_empty() {
                words.get(i + 1).copied().unwrap_or_default()
            } else {
                target
            };
            out.push(target.trim_end_matches(')').to_string());
        }
        if *w == "mkdir" {
            out.extend(
                words[i + 1..]
                    .iter()
                    .filter(|a| !a.starts_with('-'))
                    .map(|a| a.to_string()),
            );
        }
        for var in ["KEEPER_VAULT_DIR=", "KEEPER_API_TOKENS_FILE="] {
            if let Some(v) = w.strip_prefix(var) {
                out.push(format!("{v}/"));
            }
        }
    }
    out
}

#[test]
fn the_walk_through_writes_its_vault_and_files_outside_the_repository() {
    let commands = demo_commands();
    assert!(
        commands
            .iter()
            .any(|c| c == "export KEEPER_DEMO=$(mktemp -d)"),
        "the demo's directory is a temporary one: {commands:#?}"
    );
    let mut files = Vec::new();
    for c in &commands {
        for path in written(c) {
            assert!(
                in_demo(&path),
                "{c:?} writes {path:?}, not under $KEEPER_DEMO"
            );
            files.push(path);
        }
    }
    for want in [
        "$KEEPER_DEMO/vault/fake",
        "$KEEPER_DEMO/vault/fake/lab.json",
        "$KEEPER_DEMO/tokens.json",
        "$KEEPER_DEMO/vault/",
    ] {
        assert!(
            files.iter().any(|f| f.trim_matches('"') == want),
            "{want} in {files:?}"
        );
    }
    assert!(
        commands
            .iter()
            .any(|c| c.contains(r#""%s/cloud.json"}\n' "$KEEPER_DEMO""#)),
        "the simulated cloud's state file is in the demo's directory"
    );
}
