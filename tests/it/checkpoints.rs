//! Checkpoint folders on disk: ordered by the step they name (past step 999,999 too), pruned to
//! the newest `keep`, swapped in crash-safely when a step is saved twice, and what a killed
//! process left is cleaned — or put back — when a run starts.

use std::fs;
use std::path::{Path, PathBuf};

use crate::harness::succeeded;
use conelab_core::run_dir::{checkpoints_in, step_of};

fn mkdir(p: &Path) {
    fs::create_dir_all(p).expect("mkdir");
}

/// A fake checkpoint: a folder with a marker file saying which one it is.
fn fake(dir: &Path, name: &str, marker: &str) -> PathBuf {
    let p = dir.join(name);
    mkdir(&p);
    fs::write(p.join("marker"), marker).expect("marker");
    p
}

fn steps(dir: &Path) -> Vec<u64> {
    checkpoints_in(dir)
        .expect("list")
        .iter()
        .filter_map(|p| step_of(p))
        .collect()
}

#[test]
fn checkpoints_are_ordered_by_step_across_a_million_and_pruning_keeps_the_newest() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let run = tmp.path();
    for s in ["step-999000", "step-999500", "step-999999", "step-1000000"] {
        fake(run, s, s);
    }
    // Ordered by number, not by text ("step-1000000" < "step-999000" as text).
    assert_eq!(steps(run), vec![999_000, 999_500, 999_999, 1_000_000]);
    let staged = fake(run, ".step-1000500.staged-test", "new");
    let placed = conelab_core::run_dir::commit(run, 1_000_500, &staged, 3).expect("commit");
    assert_eq!(placed, run.join("step-1000500"));
    assert_eq!(
        steps(run),
        vec![999_999, 1_000_000, 1_000_500],
        "the oldest went"
    );
    // Any width is read: an old six-digit name and a longer one sort together.
    assert_eq!(step_of(Path::new("step-000042")), Some(42));
    assert_eq!(step_of(Path::new("step-12345678")), Some(12_345_678));
    assert_eq!(step_of(Path::new("step-12a")), None);
}

#[test]
fn saving_a_step_twice_swaps_the_folders_and_a_failed_swap_keeps_the_old_one() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let run = tmp.path();
    fake(run, "step-000010", "old");
    // The commit fails before anything moves: the old checkpoint is intact.
    let staged = fake(run, ".step-000010.staged-a", "new");
    let err = conelab_base::fault::with_plan("checkpoint.commit:1:EIO", || {
        conelab_core::run_dir::commit(run, 10, &staged, 3)
    })
    .expect_err("injected");
    assert!(err.to_string().contains("Input/output error"), "{err}");
    assert_eq!(
        fs::read_to_string(run.join("step-000010/marker")).expect("read"),
        "old"
    );
    // Then it succeeds: the new one is in place, the old one set aside and deleted.
    conelab_core::run_dir::commit(run, 10, &staged, 3).expect("commit");
    assert_eq!(
        fs::read_to_string(run.join("step-000010/marker")).expect("read"),
        "new"
    );
    let names: Vec<String> = fs::read_dir(run)
        .expect("list")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, vec!["step-000010".to_string()]);
}

#[test]
fn leftovers_of_a_killed_process_are_cleaned_and_a_set_aside_checkpoint_is_put_back() {
    // A real run folder (run.toml), as a killed process would leave it.
    let f = crate::harness::Fixture::new();
    let out = f.train("run", &["--steps", "1", "--eval-every", "0"]);
    succeeded(&out);
    let run = f.path("run");
    // Killed during a re-save of step 1: the old folder set aside, the new one not yet in.
    fs::rename(run.join("step-000001"), run.join(".step-000001.old-99-0")).expect("set aside");
    fake(&run, ".step-000001.staged-99-1", "half");
    // Killed while staging another, and a temporary folder of an older version.
    fake(&run, ".step-000002.staged-98-0", "half");
    fake(&run, ".step-000003.tmp-97", "half");
    let dir = conelab_core::run_dir::RunDir::open(&run).expect("open");
    let done = dir.recover().expect("recover");
    assert_eq!(done.len(), 4, "{done:?}");
    assert_eq!(steps(&run), vec![1], "step-000001 is back");
    assert!(run.join("step-000001/model.safetensors").is_file());
    let hidden: Vec<String> = fs::read_dir(&run)
        .expect("list")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".step-"))
        .collect();
    assert!(hidden.is_empty(), "{hidden:?}");
    // And a resume starts from the restored checkpoint.
    let out = crate::harness::command()
        .args(["train", "--resume"])
        .arg(&run)
        .args(["--steps", "2", "--log-every", "1"])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("conelab");
    let stdout = succeeded(&out);
    assert!(stdout.contains("start step=1 total=2"), "{stdout}");
}

#[test]
fn best_is_swapped_in_like_a_step_and_a_killed_swap_is_cleaned_or_put_back() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let run = tmp.path();
    fake(run, "best", "old");
    fake(run, "step-000010", "ten");
    // A failed swap leaves the old best in place.
    let staged = fake(run, ".best.staged-a", "new");
    conelab_base::fault::with_plan("checkpoint.commit:1:EIO", || {
        conelab_core::run_dir::commit_best(run, &staged)
    })
    .expect_err("injected");
    assert_eq!(
        fs::read_to_string(run.join("best/marker")).expect("read"),
        "old"
    );
    // Then it succeeds, and best/ is never a step nor pruned with them.
    conelab_core::run_dir::commit_best(run, &staged).expect("commit");
    assert_eq!(
        fs::read_to_string(run.join("best/marker")).expect("read"),
        "new"
    );
    assert_eq!(steps(run), vec![10], "best/ is not a step-N");
    let placed =
        conelab_core::run_dir::commit(run, 20, &fake(run, ".step-000020.staged-b", "20"), 1)
            .expect("commit");
    assert_eq!(placed, run.join("step-000020"));
    assert_eq!(steps(run), vec![20], "step-000010 pruned");
    assert!(
        run.join("best/marker").is_file(),
        "best/ kept by the pruning"
    );
}

#[test]
fn a_best_checkpoint_set_aside_by_a_killed_swap_is_put_back_and_a_staged_one_removed() {
    let f = crate::harness::Fixture::new();
    let out = f.train("run", &["--steps", "2", "--eval-every", "1"]);
    succeeded(&out);
    let run = f.path("run");
    assert!(
        run.join("best/model.safetensors").is_file(),
        "best/ written"
    );
    fs::rename(run.join("best"), run.join(".best.old-99-0")).expect("set aside");
    fake(&run, ".best.staged-99-1", "half");
    let done = conelab_core::run_dir::RunDir::open(&run)
        .expect("open")
        .recover()
        .expect("recover");
    assert_eq!(done.len(), 2, "{done:?}");
    assert!(done.iter().any(|l| l.contains("restored best")), "{done:?}");
    assert!(
        run.join("best/model.safetensors").is_file(),
        "best/ is back"
    );
    assert!(!run.join(".best.staged-99-1").exists());
}

/// The validation evaluations a run's `train.log` reports (full precision): (step, PPL).
fn valid_evals(log: &str) -> Vec<(u64, f64)> {
    split_evals(log, "valid")
}

/// The evaluations of `split` a run's `train.log` reports: (step, PPL).
fn split_evals(log: &str, split: &str) -> Vec<(u64, f64)> {
    let field = |line: &str, key: &str| -> Option<String> {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(key))
            .map(str::to_owned)
    };
    log.lines()
        .filter(|l| l.contains(" eval step=") && l.contains(&format!("split={split} ")))
        .filter_map(|l| {
            let step = field(l, "step=")?.parse().ok()?;
            let ppl = field(l, "ppl=")?.parse().ok()?;
            Some((step, ppl))
        })
        .collect()
}

#[test]
fn best_holds_the_lowest_validation_ppl_and_eval_step_best_reads_it() {
    use crate::harness::{assert_one_line_error, conelab, s};
    let f = crate::harness::Fixture::new();
    // A rate so high that validation PPL jumps up and down (here the lowest came at step 44 of
    // 48): best/ must follow the minimum, wherever it falls.
    let out = f.train(
        "run",
        &[
            "--steps",
            "48",
            "--eval-every",
            "4",
            "--lr",
            "0.3",
            "--log-every",
            "48",
            "--eval-test",
        ],
    );
    succeeded(&out);
    let run = f.path("run");
    let log = fs::read_to_string(run.join("train.log")).expect("train.log");
    let evals = valid_evals(&log);
    assert!(evals.len() >= 12, "{evals:?}\n{log}");
    // --eval-test: test beside every validation, once each (the end's included).
    let tests = split_evals(&log, "test");
    assert_eq!(
        tests.iter().map(|t| t.0).collect::<Vec<_>>(),
        evals.iter().map(|e| e.0).collect::<Vec<_>>(),
        "{log}"
    );
    let &(best_step, best_ppl) = evals
        .iter()
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .expect("evaluations");
    let state: serde_json::Value =
        serde_json::from_slice(&fs::read(run.join("best/state.json")).expect("best/state.json"))
            .expect("json");
    assert_eq!(state["step"], best_step, "{evals:?}");
    let kept = state["best_valid_ppl"].as_f64().expect("ppl");
    assert!(
        (kept - best_ppl).abs() <= 1e-9 * best_ppl,
        "{kept} vs {best_ppl}"
    );

    // eval --step best evaluates that model again: the same step, the same PPL.
    let out = conelab(&["eval", s(&run), "--step", "best", "--json", "-k", "0"]);
    succeeded(&out);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(report["step"], best_step);
    let again = report["outputs"]["ppl"].as_f64().expect("ppl");
    assert!(
        (again - best_ppl).abs() <= 1e-4 * best_ppl,
        "{again} vs {best_ppl}"
    );
    // --step last and a step number name step-N folders.
    let out = conelab(&["eval", s(&run), "--step", "last", "--json", "-k", "0"]);
    succeeded(&out);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(report["step"], 48);

    // export --step best --split test: the test numbers at the best *validation* step.
    let out = conelab(&[
        "export",
        s(&run),
        "--table",
        "groups",
        "--step",
        "best",
        "--split",
        "test",
        "--format",
        "json",
    ]);
    succeeded(&out);
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(rows[0]["step"], best_step, "{rows}");
    let test_at_best = tests
        .iter()
        .find(|t| t.0 == best_step)
        .expect("a test eval")
        .1;
    let got = rows[0]["total_ppl"].as_f64().expect("total_ppl");
    assert!(
        (got - test_at_best).abs() <= 1e-9 * got,
        "{got} vs {test_at_best}"
    );

    // Bad input: a step with no checkpoint, --step beside a checkpoint folder, a run without best/.
    let out = conelab(&["eval", s(&run), "--step", "7"]);
    assert_one_line_error(&out, &["no checkpoint at step 7", "48"]);
    let out = conelab(&["eval", s(&run.join("step-000048")), "--step", "best"]);
    assert_one_line_error(&out, &["is a checkpoint folder", "--step"]);
    let out = conelab(&["eval", s(&run), "--step", "soon"]);
    assert_eq!(out.status.code(), Some(2));
    fs::remove_dir_all(run.join("best")).expect("rm best");
    let out = conelab(&["eval", s(&run), "--step", "best"]);
    assert_one_line_error(&out, &["no best/ checkpoint", "--step last"]);
}

/// A run may be named `best`: its folder holds its own run.toml, so it is a run, not a best/
/// checkpoint (review of #38 part 3).
#[test]
fn a_run_named_best_is_a_run() {
    use crate::harness::{conelab, s};
    let f = crate::harness::Fixture::new();
    let out = f.train("best", &["--steps", "2", "--eval-every", "1"]);
    succeeded(&out);
    let run = f.path("best");
    let dir = conelab_core::run_dir::RunDir::open(&run).expect("a run");
    assert_eq!(dir.path(), run.as_path());
    assert_eq!(
        conelab_core::run_dir::RunDir::open(&run.join("best"))
            .expect("its best/")
            .path(),
        run.as_path()
    );
    let out = conelab(&["eval", s(&run), "--step", "best", "--json", "-k", "0"]);
    succeeded(&out);
}
