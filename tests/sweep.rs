//! `conelab sweep` through the real binary: a 2 × 2 grid on the small synthetic corpus run two at
//! a time, run again (completed runs kept, an unfinished one resumed), its status, its table, a
//! dry run, and bad files refused in one line.

mod common;

use common::{Fixture, assert_one_line_error, conelab, s};

fn sweep_file(f: &Fixture, body: &str) -> std::path::PathBuf {
    let path = f.path("grid.toml");
    let text = format!(
        "[base]\ncorpus = \"{}\"\nconfig = \"{}\"\nsteps = 3\neval_every = 3\nsnapshot_every = 3\n{body}",
        s(&f.path("corpus")),
        s(&f.path("small.toml"))
    );
    std::fs::write(&path, text).expect("sweep file");
    path
}

#[test]
fn a_grid_runs_two_at_a_time_is_kept_resumed_and_tabled() {
    let f = Fixture::new();
    let file = sweep_file(
        &f,
        "[grid]\nseed = [1, 2]\nreg = [\"cos=off\", \"cos=1\"]\n",
    );
    let out = f.path("sweep");

    // A dry run names every run and writes nothing.
    let dry = conelab(&["sweep", "run", s(&file), "--out", s(&out), "--dry-run"]);
    let text = String::from_utf8_lossy(&dry.stdout);
    assert!(dry.status.success(), "{dry:?}");
    assert!(text.starts_with("4 runs into"), "{text}");
    for name in [
        "seed-1_reg-cos=off",
        "seed-1_reg-cos=1",
        "seed-2_reg-cos=off",
        "seed-2_reg-cos=1",
    ] {
        assert!(
            text.contains(&format!("  {name}: conelab train ")),
            "{text}"
        );
    }
    assert!(!out.exists(), "a dry run wrote {}", out.display());

    let run = conelab(&["sweep", "run", s(&file), "--out", s(&out), "--local", "2"]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    assert!(
        String::from_utf8_lossy(&run.stdout).contains("4 runs: 4 completed, 0 stopped, 0 failed"),
        "{run:?}"
    );
    assert_eq!(stderr.matches(": started (pid").count(), 4, "{stderr}");
    for name in ["seed-1_reg-cos=off", "seed-2_reg-cos=1"] {
        let dir = out.join("runs").join(name);
        let final_json = std::fs::read_to_string(dir.join("final.json")).expect("final.json");
        assert!(final_json.contains("\"completed\""), "{final_json}");
        assert!(dir.join("step-000003/model.safetensors").is_file());
        assert_eq!(common::store_losses(&dir).len(), 3);
        assert!(out.join("logs").join(format!("{name}.log")).is_file());
    }
    // The seeds of one setting share a label: --aggregate seeds makes one row of each.
    let runs: Vec<String> = std::fs::read_dir(out.join("runs"))
        .expect("runs")
        .map(|e| e.expect("entry").path().display().to_string())
        .collect();
    let mut args = vec!["export"];
    args.extend(runs.iter().map(String::as_str));
    args.extend([
        "--table",
        "groups",
        "--aggregate",
        "seeds",
        "--format",
        "csv",
    ]);
    let table = conelab(&args);
    let csv = String::from_utf8_lossy(&table.stdout);
    assert!(table.status.success(), "{table:?}");
    for label in ["reg-cos=off,2,", "reg-cos=1,2,"] {
        assert!(csv.lines().any(|l| l.starts_with(label)), "{csv}");
    }

    // Again: every run kept; one made unfinished (its final record gone) is resumed.
    std::fs::remove_file(out.join("runs/seed-2_reg-cos=off/final.json")).expect("rm");
    let again = conelab(&["sweep", "run", s(&file), "--out", s(&out), "--local", "2"]);
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(again.status.success(), "{stderr}");
    assert_eq!(
        stderr.matches("completed before, kept").count(),
        3,
        "{stderr}"
    );
    assert!(stderr.contains("seed-2_reg-cos=off: resumed"), "{stderr}");

    let status = conelab(&["sweep", "status", s(&out)]);
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(text.contains("4 of 4 runs completed"), "{text}");
    assert!(
        text.lines().any(|l| l.split_whitespace().take(3).eq([
            "seed-1_reg-cos=1",
            "completed",
            "3/3"
        ])),
        "{text}"
    );
}

#[test]
fn bad_sweeps_are_one_line_errors_before_anything_runs() {
    let f = Fixture::new();
    let out = f.path("sweep");
    for (body, needle) in [
        ("[grid]\nsteps = [1, 2]\n", "steps: given twice"),
        (
            "[grid]\nlearning_rate = [0.1]\n",
            "learning_rate: not a `conelab train` option",
        ),
        ("[grid]\nseed = []\n", "seed: an empty list"),
        (
            "[[zip]]\nlr = [0.1, 0.2]\nwarmup = [1]\n",
            "zip lists vary together",
        ),
        ("[grid]\nbatch = [0]\n", "run batch-0"),
    ] {
        let file = sweep_file(&f, body);
        assert_one_line_error(
            &conelab(&["sweep", "run", s(&file), "--out", s(&out)]),
            &[needle],
        );
        assert!(!out.exists(), "{body}: something was written");
    }
    assert_one_line_error(
        &conelab(&["sweep", "run", s(&f.path("none.toml"))]),
        &["none.toml"],
    );
    assert_one_line_error(
        &conelab(&["sweep", "status", s(&f.path("corpus"))]),
        &["not a sweep folder"],
    );
    let file = sweep_file(&f, "");
    assert_one_line_error(
        &conelab(&["sweep", "run", s(&file), "--local", "0"]),
        &["--local 0"],
    );
}
