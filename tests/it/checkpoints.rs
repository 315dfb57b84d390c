//! Checkpoint folders on disk: ordered by the step they name (past step 999,999 too), pruned to
//! the newest `keep`, swapped in crash-safely when a step is saved twice, and what a killed
//! process left is cleaned — or put back — when a run starts.

use std::fs;
use std::path::{Path, PathBuf};

use conelab::checkpoint::{self, checkpoints_in, step_of};

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
    let placed = checkpoint::commit(run, 1_000_500, &staged, 3).expect("commit");
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
    let err = conelab::fault::with_plan("checkpoint.commit:1:EIO", || {
        checkpoint::commit(run, 10, &staged, 3)
    })
    .expect_err("injected");
    assert!(err.to_string().contains("Input/output error"), "{err}");
    assert_eq!(
        fs::read_to_string(run.join("step-000010/marker")).expect("read"),
        "old"
    );
    // Then it succeeds: the new one is in place, the old one set aside and deleted.
    checkpoint::commit(run, 10, &staged, 3).expect("commit");
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
    let f = crate::common::Fixture::new();
    let out = f.train("run", &["--steps", "1", "--eval-every", "0"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = f.path("run");
    // Killed during a re-save of step 1: the old folder set aside, the new one not yet in.
    fs::rename(run.join("step-000001"), run.join(".step-000001.old-99-0")).expect("set aside");
    fake(&run, ".step-000001.staged-99-1", "half");
    // Killed while staging another, and a temporary folder of an older version.
    fake(&run, ".step-000002.staged-98-0", "half");
    fake(&run, ".step-000003.tmp-97", "half");
    let dir = checkpoint::RunDir::open(&run).expect("open");
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
    let out = crate::common::command()
        .args(["train", "--resume"])
        .arg(&run)
        .args(["--steps", "2", "--log-every", "1"])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("conelab");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("start step=1 total=2"), "{stdout}");
}
