//! README's commands as written (issue #37: the protocol version, `train ptb` and the sweep's
//! relative corpus failed as documented). Every `conelab …` line of its shell blocks names a
//! subcommand that exists and only options that subcommand has; the ones that need nothing but
//! this machine run as written.

use std::collections::HashMap;

use crate::harness::{command, conelab};

/// The `conelab` lines of README's ```sh blocks, comments cut (`  # …`; a `#` inside a word,
/// as in NAME#SEED, stays).
fn readme_commands() -> Vec<String> {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    let mut out = Vec::new();
    let mut in_sh = false;
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with("```") {
            in_sh = t == "```sh";
            continue;
        }
        if !in_sh {
            continue;
        }
        let code = match t.find("  #") {
            Some(i) => &t[..i],
            None => t,
        }
        .trim();
        if let Some(rest) = code.strip_prefix("conelab ") {
            out.push(rest.to_string());
        }
    }
    out
}

/// Subcommands with subcommands of their own.
const GROUPS: [&str; 5] = ["sweep", "data", "store", "bench", "config"];

#[test]
fn every_readme_command_names_real_subcommands_and_options() {
    let commands = readme_commands();
    assert!(
        commands.len() >= 10,
        "README's shell blocks lost their commands: {commands:?}"
    );
    let mut help: HashMap<Vec<String>, String> = HashMap::new();
    for line in &commands {
        let words: Vec<&str> = line.split_whitespace().collect();
        let mut path: Vec<String> = vec![words[0].to_string()];
        if GROUPS.contains(&words[0])
            && let Some(sub) = words.get(1)
        {
            path.push((*sub).to_string());
        }
        let text = help.entry(path.clone()).or_insert_with(|| {
            let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
            args.push("--help");
            let out = conelab(&args);
            assert!(
                out.status.success(),
                "`conelab {}` (README: `conelab {line}`): {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8_lossy(&out.stdout).into_owned()
        });
        for w in &words {
            if let Some(flag) = w.strip_prefix("--") {
                let name = flag.split('=').next().unwrap_or(flag);
                assert!(
                    text.contains(&format!("--{name}")),
                    "README: `conelab {line}`: `conelab {}` has no --{name}",
                    path.join(" ")
                );
            }
        }
    }
}

/// The commands that need nothing but this machine, run as README writes them.
#[test]
fn readme_commands_that_need_nothing_run_as_written() {
    let state = tempfile::tempdir().expect("tmp");
    for line in readme_commands() {
        if !matches!(line.as_str(), "runs" | "config show") {
            continue;
        }
        let args: Vec<&str> = line.split_whitespace().collect();
        let out = command()
            .env("XDG_STATE_HOME", state.path())
            .current_dir(state.path())
            .args(&args)
            .output()
            .expect("conelab");
        assert!(
            out.status.success(),
            "`conelab {line}`: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!out.stdout.is_empty(), "`conelab {line}` printed nothing");
    }
    // The protocol section documents the version the run speaks.
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/REFERENCE.md"))
        .expect("REFERENCE.md");
    let v = conelab_protocol::message::PROTOCOL_VERSION;
    assert!(
        text.contains(&format!("(version {v})")) && text.contains(&format!("\"protocol\":{v}")),
        "docs/REFERENCE.md must document protocol version {v}"
    );
}

/// The README's picture of the workbench is its 120×40 snapshot, as the snapshot test draws it
/// (issue #58: it had drifted — a penalty written another way, a footer without `d detach`, an
/// I1 of 3.1e-4 shown as 0.000): the two are compared line by line, trailing blanks aside.
#[test]
fn the_readmes_workbench_is_the_snapshot() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README");
    let snap = std::fs::read_to_string(root.join(
        "crates/tui/src/ui/snapshots/conelab_tui__ui__tests__snapshot_default_layout_120x40.snap",
    ))
    .expect("the snapshot");
    let drawn: Vec<String> = snap
        .lines()
        .filter(|l| l.starts_with('"'))
        .map(|l| {
            serde_json::from_str::<String>(l)
                .expect("a quoted line")
                .trim_end()
                .to_owned()
        })
        .collect();
    assert_eq!(drawn.len(), 40);
    let start = readme
        .lines()
        .position(|l| l.trim_end() == drawn[0])
        .expect("the README shows the workbench's header line");
    let shown: Vec<&str> = readme
        .lines()
        .skip(start)
        .take(40)
        .map(str::trim_end)
        .collect();
    assert_eq!(shown, drawn);
    // Its content, not just its shape: the run, the PPL, the groups.
    assert!(drawn[0].contains("tiny-synthetic-test") && drawn[0].contains("step 80/200"));
    assert!(drawn.iter().any(|l| l.contains("valid ppl 11.88")));
}
