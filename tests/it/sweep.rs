//! `conelab sweep` through the real binary: a 2 × 2 grid on the small synthetic corpus run two at
//! a time, run again (completed runs kept, an unfinished one resumed), its status, its table, a
//! dry run, and bad files refused in one line.

use crate::harness::{Fixture, assert_one_line_error, conelab, s, succeeded};

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
    let text = succeeded(&dry);
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
        assert_eq!(crate::harness::store_losses(&dir).len(), 3);
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
    let csv = succeeded(&table);
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
        // An accounting database's answer: task 1 requeued once, then completed.
        (
            "sacct",
            "printf '4242_0|COMPLETED|0:0\\n4242_1|REQUEUED|0:15\\n4242_1|COMPLETED|0:0\\n'\n",
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
    let submit = crate::harness::command()
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
    succeeded(&submit);
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
    succeeded(&syntax);

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
    crate::harness::wait_until("task 1's run to train", || {
        run1.join("store/run.json").exists() && crate::harness::store_losses(&run1).len() >= 5
    });
    crate::harness::signal(child.id(), libc::SIGTERM);
    let status = child.wait().expect("wait");
    assert_eq!(status.code(), Some(75), "stopped after saving");
    let requeued = std::fs::read_to_string(bin.join("scontrol.calls")).expect("scontrol called");
    assert_eq!(requeued.trim(), "requeue 4242_1");
    let stopped_at = crate::harness::store_losses(&run1).len();
    assert!(
        stopped_at < 300,
        "TERM came too late to test anything ({stopped_at})"
    );

    // The requeued task resumes and finishes; task 0 runs from scratch.
    assert!(task("1").status().expect("task").success());
    assert!(task("0").status().expect("task").success());
    // A completed task run again does nothing.
    assert!(task("0").status().expect("task").success());
    let losses = crate::harness::store_losses(&run1);
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
    succeeded(&plain);
    assert_eq!(losses, crate::harness::store_losses(&f.path("plain")));

    // The status joins the runs' own state with the queue's and the accounting database's.
    let status = crate::harness::command()
        .args(["sweep", "status", s(&out)])
        .env("PATH", &path)
        .output()
        .expect("runs");
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(text.contains("2 of 2 runs completed"), "{text}");
    let header = text.lines().next().unwrap_or_default();
    assert!(
        header.contains("queue") && header.contains("sacct"),
        "{text}"
    );
    let line = text
        .lines()
        .find(|l| l.starts_with("seed-2"))
        .unwrap_or_default();
    assert!(line.contains("COMPLETED 0:0"), "{text}");
}

/// A SLURM controller answers here (`.ci/run` starts a one-node SLURM with
/// scripts/slurm-local.sh and exports SLURM_CONF); otherwise the test skips, or fails in CI.
fn real_slurm() -> bool {
    let answers = std::process::Command::new("sinfo")
        .args(["--noheader", "--format=%t"])
        .output()
        .is_ok_and(|o| o.status.success() && !o.stdout.is_empty());
    if !answers {
        crate::harness::skip_or_fail(
            "no SLURM controller answers sinfo (start one: eval \"$(scripts/slurm-local.sh start)\")",
        );
    }
    answers
}

/// Cancels the test's jobs however it ends, so a failed test leaves nothing in the queue.
struct CancelOnDrop(Vec<String>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        for job in &self.0 {
            let _ = std::process::Command::new("scancel").arg(job).status();
        }
    }
}

fn job_id(sweep: &std::path::Path) -> String {
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(sweep.join("sweep.json")).expect("sweep.json"))
            .expect("json");
    record["slurm"]["job_id"]
        .as_str()
        .expect("a submitted sweep records its job id")
        .to_string()
}

/// Polls until `ok` holds, `secs` at most (SLURM schedules in its own time).
fn wait_secs(what: &str, secs: u64, mut ok: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !ok() {
        assert!(
            start.elapsed().as_secs() < secs,
            "waited {secs} s for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

fn completed(run: &std::path::Path) -> bool {
    std::fs::read_to_string(run.join("final.json")).is_ok_and(|t| t.contains("\"completed\""))
}

#[test]
fn a_real_slurm_runs_the_array_and_a_preempted_task_is_requeued_and_resumes_exactly() {
    if !real_slurm() {
        return;
    }
    let f = Fixture::new();

    // A 2 × 2 grid of short runs: one array of 4 tasks, every run completed with its store and
    // checkpoint.
    let file = sweep_file(
        &f,
        "[grid]\nseed = [1, 2]\nreg = [\"cos=off\", \"cos=1\"]\n",
    );
    let grid = f.path("grid");
    let submit = conelab(&[
        "sweep",
        "run",
        s(&file),
        "--out",
        s(&grid),
        "--slurm",
        "--cpus-per-task",
        "1",
    ]);
    succeeded(&submit);
    let mut jobs = CancelOnDrop(vec![job_id(&grid)]);
    let names = [
        "seed-1_reg-cos=off",
        "seed-1_reg-cos=1",
        "seed-2_reg-cos=off",
        "seed-2_reg-cos=1",
    ];
    wait_secs("the 4-task array", 300, || {
        names.iter().all(|n| completed(&grid.join("runs").join(n)))
    });
    for name in names {
        let dir = grid.join("runs").join(name);
        assert!(
            dir.join("step-000003/model.safetensors").is_file(),
            "{name}"
        );
        assert_eq!(crate::harness::store_losses(&dir).len(), 3, "{name}");
    }
    let status = conelab(&["sweep", "status", s(&grid)]);
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(text.contains("4 of 4 runs completed"), "{text}");
    assert!(
        text.lines().next().is_some_and(|h| h.contains("queue")),
        "{text}"
    );

    // A long run, TERM-ed as a time limit would: it stops after a step with a checkpoint and
    // exit 75, the script requeues its task, and the requeued task finishes the run with the
    // losses of an uninterrupted one.
    let steps = "3000";
    let long = f.path("long.toml");
    let text = std::fs::read_to_string(&file)
        .expect("file")
        .replace(
            "steps = 3\n",
            &format!("steps = {steps}\ncheckpoint_every = 50\n"),
        )
        .replace("eval_every = 3\n", "eval_every = 1000\n")
        .replace("snapshot_every = 3\n", "snapshot_every = 1000\n")
        .replace(
            "[grid]\nseed = [1, 2]\nreg = [\"cos=off\", \"cos=1\"]\n",
            "[grid]\nseed = [2]\n",
        );
    std::fs::write(&long, text).expect("write");
    let preempt = f.path("preempt");
    let submit = conelab(&["sweep", "run", s(&long), "--out", s(&preempt), "--slurm"]);
    succeeded(&submit);
    let job = job_id(&preempt);
    jobs.0.push(job.clone());
    let run = preempt.join("runs/seed-2");
    wait_secs("the long run to train", 120, || {
        run.join("store/run.json").exists() && crate::harness::store_losses(&run).len() >= 5
    });
    // The array's one task by its job id: 22.05 answers "Invalid job id" to `JOB_0` here.
    let term = std::process::Command::new("scancel")
        .args(["--batch", "--signal=TERM", &job])
        .output()
        .expect("scancel");
    succeeded(&term);
    let log = preempt.join(format!("logs/slurm-{job}_0.log"));
    wait_secs("the task to stop and requeue itself", 120, || {
        std::fs::read_to_string(&log).is_ok_and(|t| t.contains("(exit 75): requeued"))
    });
    let stopped_at = crate::harness::store_losses(&run).len();
    println!("TERM stopped the run after step {stopped_at} of {steps}");
    assert!(
        stopped_at < 3000,
        "TERM came after the run had finished: nothing was tested"
    );
    assert!(
        run.join(format!("step-{stopped_at:06}/model.safetensors"))
            .is_file(),
        "a checkpoint at the step it stopped after ({stopped_at})"
    );
    // The same run uninterrupted, trained meanwhile (SLURM holds a requeued task back for the
    // credential lifetime).
    let plain = crate::harness::command()
        .args([
            "train",
            s(&f.path("corpus")),
            "--config",
            s(&f.path("small.toml")),
        ])
        .args([
            "--run-dir",
            s(&f.path("plain")),
            "--headless",
            "--seed",
            "2",
        ])
        .args(["--steps", steps, "--checkpoint-every", "50"])
        .args(["--eval-every", "1000", "--snapshot-every", "1000"])
        .stdin(std::process::Stdio::null())
        .output();
    wait_secs("the requeued task to finish the run", 300, || {
        completed(&run)
    });
    let shown = std::process::Command::new("scontrol")
        .args(["show", "job", &job])
        .output()
        .expect("scontrol");
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.contains("Restarts=1"), "{shown}");
    let losses = crate::harness::store_losses(&run);
    assert_eq!(losses.len(), 3000);
    let plain = plain.expect("the uninterrupted run");
    succeeded(&plain);
    assert_eq!(losses, crate::harness::store_losses(&f.path("plain")));
}
