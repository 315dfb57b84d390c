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

/// A directory of stand-ins for `sbatch` and `scontrol` that record how they were called (this
/// machine has no SLURM controller; the script's logic is what is tested here).
fn fake_slurm(f: &Fixture) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let bin = f.path("fake-slurm");
    std::fs::create_dir_all(&bin).expect("dir");
    for (name, body) in [
        (
            "sbatch",
            "echo \"$@\" >> \"$(dirname \"$0\")/sbatch.calls\"\necho '4242;cluster'\n",
        ),
        (
            "scontrol",
            "echo \"$@\" >> \"$(dirname \"$0\")/scontrol.calls\"\n",
        ),
    ] {
        let path = bin.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}")).expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    bin
}

#[test]
fn slurm_submits_an_array_whose_tasks_run_stop_requeue_and_resume_exactly() {
    let f = Fixture::new();
    let file = sweep_file(&f, "[grid]\nseed = [1, 2]\n");
    // A longer run for the preemption: 2,000 steps instead of 3, a checkpoint every 50.
    let text = std::fs::read_to_string(&file)
        .expect("file")
        .replace("steps = 3\n", "steps = 2000\ncheckpoint_every = 50\n")
        .replace("eval_every = 3\n", "eval_every = 500\n")
        .replace("snapshot_every = 3\n", "snapshot_every = 500\n");
    std::fs::write(&file, text).expect("write");
    let out = f.path("sweep");
    let bin = fake_slurm(&f);
    let path = format!("{}:{}", s(&bin), std::env::var("PATH").unwrap_or_default());
    let submit = std::process::Command::new(env!("CARGO_BIN_EXE_conelab"))
        .args([
            "sweep",
            "run",
            s(&file),
            "--out",
            s(&out),
            "--slurm",
            "--partition",
            "cpu",
        ])
        .args(["--time", "00:10:00", "--sbatch-arg=--qos=test"])
        .env("PATH", &path)
        .output()
        .expect("runs");
    assert!(submit.status.success(), "{submit:?}");
    assert!(String::from_utf8_lossy(&submit.stdout).contains("submitted job array 4242: 2 tasks"));
    // SLURM opens each task's output file itself and fails the task when the folder is missing
    // (found on a real one-node SLURM: every task failed at once).
    assert!(out.join("logs").is_dir());
    let calls = std::fs::read_to_string(bin.join("sbatch.calls")).expect("sbatch called");
    assert!(
        calls.starts_with("--parsable ") && calls.contains("sweep.sbatch"),
        "{calls}"
    );
    let record = std::fs::read_to_string(out.join("sweep.json")).expect("sweep.json");
    assert!(record.contains("\"job_id\": \"4242\""), "{record}");
    let script = out.join("sweep.sbatch");
    let text = std::fs::read_to_string(&script).expect("script");
    for line in [
        "#SBATCH --array=0-1",
        "#SBATCH --partition=cpu",
        "#SBATCH --qos=test",
    ] {
        assert!(text.contains(line), "{text}");
    }
    let syntax = std::process::Command::new("bash")
        .arg("-n")
        .arg(&script)
        .output()
        .expect("bash");
    assert!(syntax.status.success(), "{syntax:?}");

    // Task 1 as SLURM would run it; TERM (the time limit's warning) reaches the run, which
    // saves and exits 75; the script requeues its own task.
    let task = |index: &str| {
        let mut c = std::process::Command::new("bash");
        c.arg(&script)
            .env("PATH", &path)
            .env("SLURM_ARRAY_JOB_ID", "4242")
            .env("SLURM_ARRAY_TASK_ID", index)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        c
    };
    let run1 = out.join("runs/seed-2");
    let mut child = task("1").spawn().expect("task");
    common::wait_until("task 1's run to train", || {
        run1.join("store/run.json").exists() && common::store_losses(&run1).len() >= 5
    });
    common::signal(child.id(), libc::SIGTERM);
    let status = child.wait().expect("wait");
    assert_eq!(status.code(), Some(75), "stopped after saving");
    let requeued = std::fs::read_to_string(bin.join("scontrol.calls")).expect("scontrol called");
    assert_eq!(requeued.trim(), "requeue 4242_1");
    let stopped_at = common::store_losses(&run1).len();
    assert!(
        stopped_at < 300,
        "TERM came too late to test anything ({stopped_at})"
    );

    // The requeued task resumes and finishes; task 0 runs from scratch.
    assert!(task("1").status().expect("task").success());
    assert!(task("0").status().expect("task").success());
    // A completed task run again does nothing.
    assert!(task("0").status().expect("task").success());
    let losses = common::store_losses(&run1);
    assert_eq!(losses.len(), 2000);
    // The same run uninterrupted: identical losses, step by step.
    let plain = f.train(
        "plain",
        &[
            "--headless",
            "--steps",
            "2000",
            "--checkpoint-every",
            "50",
            "--eval-every",
            "500",
            "--snapshot-every",
            "500",
            "--seed",
            "2",
        ],
    );
    assert!(plain.status.success(), "{plain:?}");
    assert_eq!(losses, common::store_losses(&f.path("plain")));
}
