//! `conelab train` and `conelab bench train` through the real binary: a small run in a pipe, resume,
//! and every bad input ending in one line and exit status 2.

use std::path::Path;
use std::process::{Command, Stdio};

use crate::harness::{
    Fixture, assert_one_line_damage, assert_one_line_error, conelab, conelab_env, copy_dir, s,
    succeeded,
};

#[test]
fn a_small_run_in_a_pipe_logs_plain_lines_and_resumes() {
    let f = Fixture::new();
    let out = f.train(
        "run",
        &[
            "--steps",
            "6",
            "--eval-every",
            "3",
            "--checkpoint-every",
            "3",
            "--log-every",
            "1",
        ],
    );
    let stdout = succeeded(&out);
    assert!(
        !stdout.contains('\x1b'),
        "escape codes in a pipe: {stdout:?}"
    );
    for needle in [
        "start step=0 total=6",
        "step=6 ",
        "eval step=3 split=valid",
        "split=test",
        "checkpoint step=6",
        "finished step=6",
    ] {
        assert!(stdout.contains(needle), "missing {needle:?} in:\n{stdout}");
    }
    let run = f.path("run");
    assert!(run.join("run.toml").is_file() && run.join("vocab.tsv").is_file());
    assert!(run.join("step-000006/model.safetensors").is_file());
    assert!(run.join("step-000003/optimizer.bpk").is_file());

    // Starting again in the same directory would overwrite a run: refused.
    let again = f.train("run", &["--steps", "6"]);
    assert_one_line_error(&again, &["already holds a run", "--resume"]);

    // Resume and extend to 9 steps.
    let resumed = conelab(&[
        "train",
        "--resume",
        s(&run),
        "--steps",
        "9",
        "--log-every",
        "1",
    ]);
    let text = succeeded(&resumed);
    assert!(
        text.contains("start step=6 total=9") && text.contains("finished step=9"),
        "{text}"
    );
    // train.log: the same run in plain key=value lines, the resume appended to it.
    let log = std::fs::read_to_string(run.join("train.log")).expect("train.log");
    assert!(!log.contains('\x1b'), "{log:?}");
    let steps: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("conelab::step"))
        .collect();
    assert_eq!(
        steps.len(),
        9,
        "a step line per step (--log-every 1):\n{log}"
    );
    assert!(steps[5].contains("step step=6 epoch="), "{log}");
    let starts: Vec<&str> = log.lines().filter(|l| l.contains(": start ")).collect();
    assert_eq!(starts.len(), 2, "{log}");
    assert!(starts[1].contains("step=6 total_steps=9"), "{log}");
    assert!(
        log.contains("conelab::eval: eval step=3 split=valid"),
        "{log}"
    );
    assert!(log.contains("finished step=9 reason=completed"), "{log}");
}

/// `--patience`: a run whose validation stops improving (a learning rate too small to move a
/// weight) ends early, says so, and records the setting; resumed with a longer patience it goes
/// on until that is spent too.
#[test]
fn patience_stops_a_run_early_and_a_resume_may_wait_longer() {
    let f = Fixture::new();
    let args = ["--steps", "50", "--eval-every", "2", "--lr", "1e-30"];
    let out = f.train("early", &[&args[..], &["--patience", "2"]].concat());
    let stdout = succeeded(&out);
    assert!(
        stdout.contains("stopped early at step 6 of 50") && stdout.contains("finished step=6"),
        "{stdout}"
    );
    let run = f.path("early");
    let toml = std::fs::read_to_string(run.join("run.toml")).expect("run.toml");
    assert!(toml.contains("patience = 2"), "{toml}");
    // An impossible patience given to --resume: one line, the run untouched.
    let refused = conelab(&["train", "--resume", s(&run), "--patience", "0"]);
    assert_one_line_error(&refused, &["patience 0"]);
    // Evaluations at 8 and 10 do not improve either: with patience 4 the run ends at 10.
    let resumed = conelab(&["train", "--resume", s(&run), "--patience", "4"]);
    let text = succeeded(&resumed);
    assert!(
        text.contains("start step=6") && text.contains("finished step=10"),
        "{text}"
    );
    let toml = std::fs::read_to_string(run.join("run.toml")).expect("run.toml");
    assert!(toml.contains("patience = 4"), "{toml}");
}

#[test]
fn train_log_in_json_and_a_full_disk_under_it() {
    let f = Fixture::new();
    let out = f.train(
        "json",
        &[
            "--headless",
            "--steps",
            "4",
            "--eval-every",
            "2",
            "--log-every",
            "1",
            "--log-format",
            "json",
        ],
    );
    succeeded(&out);
    let log = std::fs::read_to_string(f.path("json").join("train.log")).expect("train.log");
    let lines: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let steps: Vec<&serde_json::Value> = lines
        .iter()
        .filter(|v| v["fields"]["message"] == "step")
        .collect();
    assert_eq!(steps.len(), 4, "{log}");
    assert_eq!(steps[3]["fields"]["step"], 4);
    assert!(
        steps[3]["fields"]["loss"]
            .as_f64()
            .is_some_and(f64::is_finite)
    );
    assert!(
        lines
            .iter()
            .any(|v| v["fields"]["message"] == "eval" && v["fields"]["split"] == "valid"),
        "{log}"
    );
    // The disk fills under train.log from its third line on: those lines are lost, the two
    // before stay, and the run (its store, its checkpoint) is untouched.
    let corpus = f.path("corpus");
    let config = f.path("small.toml");
    let run = f.path("full");
    let out = crate::harness::command()
        .args([
            "train",
            s(&corpus),
            "--config",
            s(&config),
            "--run-dir",
            s(&run),
            "--headless",
            "--steps",
            "4",
            "--log-every",
            "1",
        ])
        .env("CONELAB_FAULT", "log.write:3+:ENOSPC")
        .stdin(Stdio::null())
        .output()
        .expect("runs");
    succeeded(&out);
    // Said once, in conelab's words; tracing's own complaint (a line per lost event) never.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.matches("train.log: No space left on device").count(),
        1,
        "{stderr}"
    );
    assert!(!stderr.contains("tracing-subscriber"), "{stderr}");
    let log = std::fs::read_to_string(run.join("train.log")).expect("train.log");
    assert_eq!(log.lines().count(), 2, "{log}");
    // The start, then the corpus's reference models.
    assert!(
        log.contains(": start ") && log.contains(": reference "),
        "{log}"
    );
    assert!(run.join("step-000004/model.safetensors").is_file());
    assert_eq!(crate::harness::store_losses(&run).len(), 4);
}

#[test]
fn corrupt_and_mismatched_checkpoints_are_one_line_errors() {
    let f = Fixture::new();
    assert!(
        f.train("run", &["--steps", "2", "--eval-every", "0"])
            .status
            .success()
    );
    let run = f.path("run");
    let step = run.join("step-000002");

    // Truncated model file.
    let copy = f.path("truncated");
    copy_dir(&run, &copy);
    let model = copy.join("step-000002/model.safetensors");
    let bytes = std::fs::read(&model).expect("read");
    std::fs::write(&model, &bytes[..bytes.len() / 2]).expect("truncate");
    assert_one_line_damage(
        &conelab(&["train", "--resume", s(&copy)]),
        &["model.safetensors", "checksum mismatch"],
    );
    // Written before manifests, a file cut short is still said to be that, never "does not
    // fit the configured model".
    std::fs::remove_file(copy.join("step-000002/checksums.json")).expect("rm manifest");
    let said = assert_one_line_damage(
        &conelab(&["train", "--resume", s(&copy)]),
        &["model.safetensors", "truncated"],
    );
    assert!(!said.contains("does not fit"), "{said}");

    // Garbage state file.
    let copy = f.path("garbage");
    copy_dir(&run, &copy);
    std::fs::write(copy.join("step-000002/state.json"), b"{not json").expect("write");
    assert_one_line_damage(
        &conelab(&["train", "--resume", s(&copy)]),
        &["state.json", "corrupt"],
    );

    // Another model shape in run.toml than in the checkpoint: an edit the run folder's
    // manifest finds as damage, and the checkpoint's copy puts back (said); in a run written
    // before manifests, the checkpoint's misfit.
    let copy = f.path("other-model");
    copy_dir(&run, &copy);
    let toml = std::fs::read_to_string(copy.join("run.toml")).expect("read");
    let edited = toml.replace("d_model = 16", "d_model = 24");
    std::fs::write(copy.join("run.toml"), &edited).expect("write");
    let out = conelab(&["train", "--resume", s(&copy)]);
    succeeded(&out);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("run.toml was damaged") && said.contains("rebuilt from step-000002"),
        "{said}"
    );
    assert_eq!(
        std::fs::read_to_string(copy.join("run.toml")).expect("read"),
        toml
    );
    std::fs::write(copy.join("run.toml"), &edited).expect("write");
    std::fs::remove_file(copy.join("checksums.json")).expect("rm manifest");
    assert_one_line_error(
        &conelab(&["train", "--resume", s(&copy)]),
        &["does not fit the configured model"],
    );

    // A vocabulary that is not the corpus's: put back from the checkpoint's copy where the
    // manifest finds the edit; without a manifest, not the corpus's vocabulary.
    let copy = f.path("other-vocab");
    copy_dir(&run, &copy);
    let vocab = std::fs::read_to_string(copy.join("vocab.tsv")).expect("read");
    let short = vocab.lines().skip(1).collect::<Vec<_>>().join("\n");
    std::fs::write(copy.join("vocab.tsv"), &short).expect("write");
    let out = conelab(&["train", "--resume", s(&copy)]);
    succeeded(&out);
    assert!(String::from_utf8_lossy(&out.stderr).contains("vocab.tsv was damaged"));
    assert_eq!(
        std::fs::read_to_string(copy.join("vocab.tsv")).expect("read"),
        vocab
    );
    std::fs::write(copy.join("vocab.tsv"), &short).expect("write");
    std::fs::remove_file(copy.join("checksums.json")).expect("rm manifest");
    assert_one_line_error(&conelab(&["train", "--resume", s(&copy)]), &["vocabulary"]);

    // Not a run, no checkpoint, nothing there.
    assert_one_line_error(
        &conelab(&["train", "--resume", s(&f.path("corpus"))]),
        &["not a conelab run"],
    );
    // A run folder without a checkpoint starts again from step 0 with its own run.toml.
    let empty = f.path("empty-run");
    copy_dir(&run, &empty);
    std::fs::remove_dir_all(empty.join("step-000002")).expect("rm");
    let out = conelab(&["train", "--resume", s(&empty), "--log-every", "1"]);
    let stdout = succeeded(&out);
    assert!(stdout.contains("start step=0 total=2"), "{stdout}");
    // The earlier run's store is not deleted: set aside, and said where.
    assert!(stdout.contains("its earlier store is kept in"), "{stdout}");
    assert_eq!(set_aside_stores(&empty), 1);
    // Nor when the folder is given to a new run instead (no --resume).
    std::fs::remove_dir_all(empty.join("step-000002")).expect("rm");
    let out = conelab(&[
        "train",
        s(&f.path("corpus")),
        "--config",
        s(&f.path("small.toml")),
        "--run-dir",
        s(&empty),
        "--steps",
        "2",
        "--eval-every",
        "0",
        "--log-every",
        "1",
    ]);
    let stdout = succeeded(&out);
    assert!(stdout.contains("its store is kept in"), "{stdout}");
    assert_eq!(set_aside_stores(&empty), 2);
    // The move aside fails (an I/O error): nothing starts, the store stays where it was, exit 4.
    std::fs::remove_dir_all(empty.join("step-000002")).expect("rm");
    let rows_before = crate::harness::store_losses(&empty).len();
    let out = crate::harness::conelab_env(
        &[
            "train",
            s(&f.path("corpus")),
            "--config",
            s(&f.path("small.toml")),
            "--run-dir",
            s(&empty),
            "--steps",
            "2",
        ],
        &[("CONELAB_FAULT", "store.set_aside:1:EIO")],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("moving the earlier store"), "{stderr}");
    assert_eq!(set_aside_stores(&empty), 2, "nothing moved");
    assert_eq!(
        crate::harness::store_losses(&empty).len(),
        rows_before,
        "no row lost"
    );
    assert_one_line_error(
        &conelab(&["train", "--resume", "/no/such/run"]),
        &["/no/such/run"],
    );
    // The checkpoint itself can be named.
    assert!(step.is_dir());
}

/// An LSTM checkpoint whose carried state is not the run's shape (another batch size) is a
/// one-line error when resumed, not a failure at the first step.
#[test]
fn a_carried_lstm_state_of_another_shape_is_a_one_line_error() {
    let f = Fixture::new();
    let config = f.path("lstm.toml");
    std::fs::write(
        &config,
        "[model]\npreset = \"lstm\"\nembed = 8\nhidden = 12\nlayers = 2\nbptt = 6\n\
         [train]\nbatch = 2\neval_batch = 2\nwarmup = 2\n",
    )
    .expect("config");
    let out = f.train_with(&config, "lstm-run", &["--steps", "2", "--eval-every", "0"]);
    let run = f.path("lstm-run");
    succeeded(&out);
    let recurrent = run.join("step-000002/recurrent.safetensors");
    assert!(recurrent.is_file(), "an LSTM checkpoint carries its state");
    // The same layers and hidden size, three sequences instead of two.
    let zeros = vec![0u8; 3 * 12 * 4];
    let names: Vec<String> = (0..2)
        .flat_map(|i| [format!("layer{i}.cell"), format!("layer{i}.hidden")])
        .collect();
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = names
        .iter()
        .map(|n| {
            let v =
                safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![3, 12], &zeros)
                    .expect("view");
            (n.clone(), v)
        })
        .collect();
    std::fs::write(
        &recurrent,
        safetensors::serialize(views, None).expect("serialize"),
    )
    .expect("write");
    // Without its manifest (a checkpoint written before them), so that the shape check is what
    // finds the file out (with the manifest, its checksum does first: `integrity` tests).
    let manifest = recurrent.with_file_name(conelab_train::checkpoint::MANIFEST);
    std::fs::remove_file(&manifest).expect("no manifest");
    let line = assert_one_line_damage(
        &conelab(&["train", "--resume", s(&run)]),
        &["recurrent.safetensors"],
    );
    assert!(
        line.contains("[3, 12]") && line.contains("[2, 12]"),
        "{line}"
    );
}

/// A --run-dir that is a folder of the user's own (files, none a run writes) is refused before
/// anything is written into it; an empty folder is taken.
#[test]
fn a_folder_of_the_users_own_is_not_taken_as_a_run_dir() {
    let f = Fixture::new();
    let own = f.path("papers");
    std::fs::create_dir_all(&own).expect("mkdir");
    std::fs::write(own.join("vocab.tsv"), "my own table\n").expect("write");
    let out = f.train("papers", &["--steps", "1", "--headless"]);
    assert_one_line_error(&out, &["papers", "vocab.tsv", "nothing was written"]);
    let left: Vec<_> = std::fs::read_dir(&own).expect("ls").collect();
    assert_eq!(left.len(), 1, "only the user's file");
    assert_eq!(
        std::fs::read_to_string(own.join("vocab.tsv")).expect("read"),
        "my own table\n"
    );
    let empty = f.path("empty");
    std::fs::create_dir_all(&empty).expect("mkdir");
    succeeded(&f.train(
        "empty",
        &["--steps", "1", "--headless", "--eval-every", "0"],
    ));
    assert!(empty.join("run.toml").is_file());
}

#[test]
fn impossible_settings_are_one_line_errors() {
    let f = Fixture::new();
    for (args, needles) in [
        (&["--lr", "-1"][..], &["lr"][..]),
        (&["--lr", "nan"], &["lr"]),
        (&["--batch", "0"], &["batch"]),
        (&["--bptt", "0"], &["context"]),
        (&["--steps", "0"], &["steps"]),
        (&["--epochs", "-2"], &["--epochs"]),
        (&["--clip", "-1"], &["clip_norm"]),
        (&["--device", "gpu"], &["gpu"]),
        (&["--groups", "0.9,0.1"], &["--groups"]),
        (&["--batch", "100000"], &["batch"]),
        (&["--objective", "nce", "--reg", "agg=0.03"], &["gating"]),
        (&["--reg", "cos=-1"], &["cos", "≥ 0"]),
        (&["--reg", "agg=0"], &["α", "must be > 0"]),
        // NaN gets AGG's own bound (it was told "≥ 0", which 0 then fails).
        (&["--reg", "agg=NaN"], &["agg α = NaN must be > 0"]),
        (&["--reg", "lap"], &["NAME=WEIGHT"]),
        (&["--reg", "spectral=1"], &["unknown regulariser"]),
        (&["--freeze", "rares"], &["unknown group"]),
        (
            &["--freeze", "rare", "--reg", "sc=exp:1"],
            &["spectrum control"],
        ),
        (&["--gate-freeze", "d"], &["--gate-freeze"]),
        (
            &["--reg", "agg=0.03", "--gate-freeze", "bc"],
            &["gate-freeze"],
        ),
        (&["--objective", "nce-r", "--nce-r", "1,0"], &["fraction"]),
        (&["--objective", "nce", "--nce-noise", "0"], &["noise"]),
        (
            &["--objective", "nce-r", "--nce-r", "-1,0.1"],
            &["nce-r alpha"],
        ),
        (
            &["--objective", "and:sqush"],
            &["only options are squash and nosquash"],
        ),
        (&["--objective", "nce:squash"], &["no option"]),
        (&["--objective", "andd"], &["unknown objective"]),
        (
            &["--objective", "and", "--and", "1"],
            &["--and", "ALPHA,GAMMA"],
        ),
        (&["--objective", "and", "--and", "1,1.5"], &["and fraction"]),
        (&["--objective", "and", "--and", "-1,0.1"], &["and alpha"]),
        (
            &["--objective", "and", "--reg", "dev=1"],
            &["cannot be combined with dev"],
        ),
        (
            &["--objective", "and", "--and", "0,0.1"],
            &["no bound", "and:squash"],
        ),
        (
            &["--objective", "and", "--reg", "agg=0.03"],
            &["gradient gating"],
        ),
        (
            &["--objective", "and:squash", "--reg", "ul=1"],
            &["unlikelihood"],
        ),
        (&["--store-flush-secs", "-1"], &["--store-flush-secs"]),
        // The default device is burn-flex, which computes in fp32 only.
        (&["--precision", "bf16"], &["--precision bf16", "LibTorch"]),
        (&["--precision", "fp16"], &["fp16"]),
        (
            &["--objective", "nce", "--nce-noise", "10000000000000"],
            &["at most the vocabulary size"],
        ),
        (&["--reg", "cos=1e300"], &["cos", "1e6"]),
        // Ranges (docs/REFERENCE.md): a typo of a few digits is refused before anything runs.
        (&["--keep", "20000"], &["keep_checkpoints", "10000"]),
        (&["--clip", "1e9"], &["clip_norm", "1e6"]),
        (&["--patience", "0"], &["patience 0", "1 to"]),
        (&["--steps", "2000000000000"], &["steps", "1e12"]),
        (
            &["--reg", "agg=0.03:memory=99999999"],
            &["agg memory", "1000000"],
        ),
        (&["--compare", "/no/such/run"], &["/no/such/run"]),
    ] {
        let out = f.train("bad", args);
        assert_one_line_error(&out, needles);
        assert!(
            !f.path("bad").join("run.toml").exists(),
            "{args:?} wrote a run"
        );
    }
    // A model no machine holds: refused from its configuration, before anything is allocated.
    let huge = f.path("huge.toml");
    std::fs::write(&huge, "[model]\nd_model = 1000000\nheads = 2\nlayers = 1\n").expect("write");
    let out = conelab(&[
        "train",
        s(&f.path("corpus")),
        "--config",
        s(&huge),
        "--run-dir",
        s(&f.path("huge-run")),
    ]);
    assert_one_line_error(&out, &["needs at least", "GiB", "available"]);
    assert!(!f.path("huge-run").join("run.toml").exists());
    let bad_config = f.path("bad.toml");
    std::fs::write(&bad_config, "[model]\nheads = 3\n").expect("write");
    let out = conelab(&[
        "train",
        s(&f.path("corpus")),
        "--config",
        s(&bad_config),
        "--run-dir",
        s(&f.path("bad")),
    ]);
    assert_one_line_error(&out, &["not divisible"]);
    let out = conelab(&["train", "--config", "/no/such.toml"]);
    assert_one_line_error(&out, &["/no/such.toml"]);
}

#[cfg(not(feature = "tch"))]
#[test]
fn libtorch_devices_need_the_tch_feature() {
    let f = Fixture::new();
    for device in ["cuda", "libtorch-cpu"] {
        assert_one_line_error(&f.train("bad", &["--device", device]), &["`tch` feature"]);
    }
}

#[test]
fn sigterm_stops_after_the_current_step_and_saves() {
    let f = Fixture::new();
    let corpus = f.path("corpus");
    let config = f.path("small.toml");
    let run = f.path("run");
    let mut child = crate::harness::command()
        .args([
            "train",
            s(&corpus),
            "--config",
            s(&config),
            "--run-dir",
            s(&run),
            "--steps",
            "100000",
            "--eval-every",
            "0",
            "--checkpoint-every",
            "0",
            "--log-every",
            "1",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    // Wait until training runs, then terminate it.
    let mut stdout = child.stdout.take().expect("stdout");
    let mut seen = String::new();
    let mut buf = [0u8; 4096];
    while !seen.contains("step=3 ") {
        let n = std::io::Read::read(&mut stdout, &mut buf).expect("read");
        assert!(n > 0, "ended early: {seen}");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    let pid = child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill")
            .success()
    );
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).expect("read rest");
    let status = child.wait().expect("wait");
    assert_eq!(
        status.code(),
        Some(75),
        "stopped by a signal after saving: {rest}"
    );
    assert!(rest.contains("finished"), "{rest}");
    let steps: Vec<_> = std::fs::read_dir(&run)
        .expect("list")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("step-"))
        .collect();
    assert_eq!(steps.len(), 1, "the stop wrote a checkpoint");
}

#[test]
fn bench_train_prints_a_table_and_json() {
    let out = conelab(&[
        "bench", "train", "--steps", "2", "--warmup", "1", "--batch", "2", "--bptt", "8",
        "--vocab", "500", "--json",
    ]);
    succeeded(&out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["vocab"], 500);
    assert_eq!(v["window"], 8);
    assert!(v["tokens_per_sec"].as_f64().expect("number") > 0.0);
    // The process's CPU over the timed steps (Linux: some share of a core, at most all of them);
    // no GPU figures on the CPU.
    let cpu = v["cpu_percent"].as_f64().expect("cpu_percent");
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    // (Two tiny steps can fall inside one clock tick: 0 is a possible reading.)
    assert!((0.0..=100.0 * cores + 10.0).contains(&cpu), "cpu {cpu}");
    assert!(
        v["gpu_util_percent"].is_null() && v["gpu_mem_peak_mib"].is_null(),
        "{v}"
    );
    assert_one_line_error(
        &conelab(&["bench", "train", "--vocab", "2"]),
        &["--vocab", "outside 3 to 10000000"],
    );
}

/// `bench chaos` runs a quiet and an attacked run and reports both side by side; an attacker it
/// does not know is a one-line error. (Its figures, with every attacker, are in
/// docs/BENCHMARKS.md: this checks the benchmark works, not the bounds.)
#[test]
fn bench_chaos_reports_a_quiet_and_an_attacked_run() {
    let out = conelab(&[
        "bench", "chaos", "--steps", "10", "--rounds", "1", "--attack", "flood", "--json",
    ]);
    succeeded(&out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["attacks"], serde_json::json!(["flood"]));
    let round = &v["rounds"][0];
    for run in ["quiet", "attacked"] {
        assert!(
            round[run]["cpu_ms_per_step"].as_f64().expect("cpu") > 0.0,
            "{v}"
        );
        assert!(
            round[run]["peak_rss_mib"].as_f64().expect("rss") > 1.0,
            "{v}"
        );
    }
    let ratio = round["cpu_ratio"].as_f64().expect("ratio");
    let want = round["attacked"]["cpu_ms_per_step"].as_f64().expect("a")
        / round["quiet"]["cpu_ms_per_step"].as_f64().expect("q");
    assert!((ratio - want).abs() < 1e-9, "{v}");
    assert!(
        v["attack"]["commands"].as_u64().expect("commands") > 0,
        "{v}"
    );
    assert_eq!(v["attack"]["subscribes"], 0, "only the flood was let loose");
    assert_one_line_error(
        &conelab(&["bench", "chaos", "--attack", "flood,ddos"]),
        &["--attack ddos", "unread, idle, subscribe, flood"],
    );
    // --phased's options, and its probe's, are bounded and refused in one line.
    for (args, says) in [
        (
            &["bench", "chaos", "--phased", "--phases", "20,20"][..],
            "three numbers",
        ),
        (
            &["bench", "chaos", "--phased", "--phases", "20,0,60"][..],
            "from 1 to 3600",
        ),
        (
            &["bench", "chaos", "--phased", "--attack", "flood"][..],
            "--attack flood",
        ),
        (
            &[
                "bench",
                "hello-probe",
                "/nonexistent.sock",
                "--seconds",
                "99999999999",
            ][..],
            "--seconds",
        ),
    ] {
        assert_one_line_error(&conelab(args), &[says]);
    }
}

#[test]
fn compare_refuses_what_it_cannot_show_in_one_line() {
    let f = Fixture::new();
    let out = f.train("a", &["--headless", "--steps", "4", "--eval-every", "0"]);
    succeeded(&out);
    let run = f.path("a");
    let not_a_run = f.path("corpus");
    assert_one_line_error(
        &conelab(&["compare", s(&run), s(&not_a_run)]),
        &["not a conelab run"],
    );
    assert_one_line_error(
        &conelab(&["compare", s(&run), s(&f.path("nowhere"))]),
        &["no such run"],
    );
    assert_one_line_error(&conelab(&["compare", s(&run), s(&run)]), &["named twice"]);
    for w in ["1.5", "-0.1", "NaN"] {
        assert_one_line_error(
            &conelab(&["compare", s(&run), "--smoothing", w]),
            &["--smoothing", "0.99"],
        );
    }
    for bad in ["nope", "valid/rare/uniq/x", "valid//uniq"] {
        assert_one_line_error(
            &conelab(&["compare", s(&run), "--curve", bad]),
            &["--curve", "SPLIT/GROUP/METRIC"],
        );
    }
    // Any stored series is a curve: past the parser, to the terminal check.
    assert_one_line_error(
        &conelab(&["compare", s(&run), "--curve", "valid/rare/uniq"]),
        &["needs a terminal"],
    );
    // Output captured (not a terminal): the tables that give the same numbers are named.
    assert_one_line_error(
        &conelab(&["compare", s(&run)]),
        &["needs a terminal", "export"],
    );
    assert_one_line_error(
        &conelab(&["attach", s(&run), s(&not_a_run)]),
        &["not a conelab run"],
    );
}

/// A full disk under `export --out` is the machine's failure, not the user's input: exit 4 (not
/// 2), one line, the cause once; the file is not left half-written.
#[test]
fn a_full_disk_under_an_export_is_status_4_in_one_line() {
    let f = Fixture::new();
    assert!(
        f.train("run", &["--steps", "2", "--eval-every", "0"])
            .status
            .success()
    );
    let file = f.path("curves.csv");
    let out = crate::harness::conelab_env(
        &[
            "export",
            s(&f.path("run")),
            "--table",
            "curves",
            "--out",
            s(&file),
        ],
        &[("CONELAB_FAULT", "export.write:1:ENOSPC")],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("No space left on device"), "{stderr}");
    assert_eq!(
        stderr.matches("No space left on device").count(),
        1,
        "the cause once: {stderr}"
    );
    assert!(!file.exists(), "a half-written export was left");
}

/// The `store.before-*` folders of a run folder that each hold the segments of an earlier run.
fn set_aside_stores(run: &Path) -> usize {
    std::fs::read_dir(run)
        .expect("run folder")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("store.before-"))
        .filter(|e| {
            std::fs::read_dir(e.path()).is_ok_and(|d| {
                d.filter_map(Result::ok)
                    .any(|f| f.file_name().to_string_lossy().ends_with(".parquet"))
            })
        })
        .count()
}

/// Issue #39 part 6: `--notify CMD` runs once when the run ends, told how in its environment —
/// a completed run, and one that diverged (exit 3, which the notifier neither changes nor hides).
#[test]
fn notify_runs_a_command_with_how_the_run_ended() {
    let f = Fixture::new();
    let said = f.path("said.txt");
    let notify = format!(
        "printf '%s|%s|%s|%s\\n' \"$CONELAB_STATUS\" \"$CONELAB_STEP\" \"$CONELAB_EXIT_CODE\" \"$CONELAB_SUMMARY\" >> {}",
        said.display()
    );
    let out = f.train(
        "done",
        &["--steps", "4", "--eval-every", "2", "--notify", &notify],
    );
    succeeded(&out);
    let text = std::fs::read_to_string(&said).expect("the notifier ran");
    let line = text.lines().next().expect("a line");
    assert!(line.starts_with("completed|4|0|"), "{line}");
    assert!(
        line.contains("completed at step 4/4, best valid PPL"),
        "{line}"
    );
    // A divergence at step 3 (the loss made NaN), nobody watching: exit 3, notified as such.
    let diverged = f.path("diverged");
    let out = conelab_env(
        &[
            "train",
            s(&f.path("corpus")),
            "--config",
            s(&f.path("small.toml")),
            "--run-dir",
            s(&diverged),
            "--steps",
            "6",
            "--notify",
            &notify,
        ],
        &[("CONELAB_FAULT", "engine.nan:3:EIO")],
    );
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&said).expect("read");
    let line = text.lines().nth(1).expect("a second line");
    assert!(line.starts_with("diverged|2|3|"), "{line}");
    // A notifier that fails is a warning; the run's status stays its own.
    let out = f.train("warned", &["--steps", "2", "--notify", "exit 9"]);
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--notify") && stderr.contains("9"),
        "{stderr}"
    );
}

/// Issue #39 part 4: every command that opens a view takes the same view switches, with the same
/// help, and the renamed flags keep their old names.
#[test]
fn every_view_takes_the_same_switches_and_old_flag_names_still_work() {
    let help = |cmd: &str| {
        let out = conelab(&[cmd, "--help"]);
        assert!(out.status.success(), "{cmd} --help");
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let switches = ["--ascii", "--no-mouse", "--theme <THEME>", "--color <WHEN>"];
    let train = help("train");
    for cmd in ["attach", "compare", "inspect"] {
        let text = help(cmd);
        for s in switches {
            assert!(text.contains(s) && train.contains(s), "{cmd}: {s}");
        }
    }
    // New names in the help; the old ones hidden but read.
    assert!(help("compare").contains("--x-axis") && !help("compare").contains("--x <"));
    assert!(help("eval").contains("--shift") && !help("eval").contains("--shift-from"));
    assert!(help("inspect").contains("--similarity") && !help("inspect").contains("--metric <"));
    assert!(help("runs").contains("--format") && !help("runs").contains("--json"));
    // `--compare` meant two things beside `conelab compare`: now each says what it is.
    assert!(train.contains("--spectrum-beside <OTHER>") && !train.contains("--compare <"));
    assert!(
        help("inspect").contains("--beside <OTHER>") && !help("inspect").contains("--compare <")
    );
    assert!(help("man").contains("--out <DIR>"));
    assert_one_line_error(
        &conelab(&["compare", "a", "--color", "sometimes"]),
        &["sometimes"],
    );
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().to_str().expect("utf-8");
    for args in [
        vec!["runs", dir, "--json"],
        vec!["runs", dir, "--format", "json"],
    ] {
        let out = conelab(&args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        assert!(v.is_array(), "{args:?}");
    }
    assert_one_line_error(
        &conelab(&["runs", dir, "--format", "csv"]),
        &["runs writes --format table, json, not csv"],
    );
    assert_one_line_error(
        &conelab(&["runs", dir, "--json", "--format", "table"]),
        &["disagree"],
    );
}

/// Issue #58: `--lr 10` trained to a loss far above ln V (a PPL of 10¹⁰⁵ on PTB) and the run
/// "completed" without a word. A model worse than a uniform guess is said — in the run's
/// output and train.log, as a typed event in the store (read back as one), and in `runs`.
#[test]
fn a_run_worse_than_uniform_says_so_everywhere() {
    let f = Fixture::new();
    let out = f.train(
        "bad",
        &[
            "--headless",
            "--steps",
            "80",
            "--lr",
            "10",
            "--eval-every",
            "40",
        ],
    );
    succeeded(&out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("worse than uniform: the training loss"),
        "{stdout}"
    );
    let run = f.path("bad");
    let log = std::fs::read_to_string(run.join("train.log")).expect("train.log");
    assert!(log.contains("worse than uniform"), "{log}");
    let history = conelab_store::history::read(&run).expect("history");
    let found: Vec<&conelab_core::events::Event> = history
        .events
        .iter()
        .filter(|e| matches!(e, conelab_core::events::Event::WorseThanUniform { .. }))
        .collect();
    assert!(!found.is_empty(), "no typed event read back");
    if let conelab_core::events::Event::WorseThanUniform { bound, steps, .. } = found
        .iter()
        .find(|e| {
            matches!(
                e,
                conelab_core::events::Event::WorseThanUniform {
                    measure: conelab_core::events::UniformMeasure::TrainLoss,
                    ..
                }
            )
        })
        .expect("the training loss finding")
    {
        // ln V for the fixture's vocabulary, independently: its words plus <eos> and <unk>.
        let vocab = std::fs::read_to_string(run.join("vocab.tsv")).expect("vocab");
        let v = vocab.lines().filter(|l| !l.trim().is_empty()).count() as f64;
        assert!((bound - v.ln()).abs() < 1e-9, "{bound} against ln {v}");
        assert_eq!(*steps, 50);
    }
    let listed = conelab(&["runs", s(&f.path(".")), "--json"]);
    let rows: serde_json::Value = serde_json::from_slice(&listed.stdout).expect("runs --json");
    assert!(rows[0]["worse_than_uniform"].as_u64().is_some(), "{rows}");
    let table = String::from_utf8_lossy(&conelab(&["runs", s(&f.path("."))]).stdout).to_string();
    assert!(table.contains("completed, worse than uniform"), "{table}");

    // A run that learns says nothing of the kind.
    let good = f.train(
        "good",
        &["--headless", "--steps", "60", "--eval-every", "30"],
    );
    succeeded(&good);
    assert!(!String::from_utf8_lossy(&good.stdout).contains("worse than uniform"));
    let rows: serde_json::Value =
        serde_json::from_slice(&conelab(&["runs", s(&f.path(".")), "--json"]).stdout)
            .expect("runs --json");
    let good_row = rows
        .as_array()
        .and_then(|r| r.iter().find(|r| r["dir"] == "good"))
        .expect("listed");
    assert!(good_row.get("worse_than_uniform").is_none(), "{good_row}");
}
