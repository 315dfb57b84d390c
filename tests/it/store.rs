//! The metrics store on disk: segments survive a crash, a broken segment is skipped, a resumed
//! run leaves no duplicates, compaction keeps every row, and the queries return what was written.

use std::path::Path;

use conelab_core::events::{Event, RunStarted};
use conelab_core::series::split;
use conelab_store::{FlushPolicy, RunRecord, StoreWriter, query};
use polars::prelude::*;

fn record(id: &str) -> RunRecord {
    let mut r = RunRecord::new(id, "[train]\n".into(), "synthetic".into(), "cpu".into());
    r.started_unix = 0.0;
    r.git_revision = "test".into();
    // Fixed, so that a record read back equals the one written by a second call.
    r.uuid = Some("00000000-0000-4000-8000-000000000001".into());
    r
}

/// A writer that never flushes on its own: the tests decide where segments end.
fn writer(dir: &Path) -> StoreWriter {
    StoreWriter::open(dir, &record("run"))
        .expect("open store")
        .with_policy(FlushPolicy {
            rows: usize::MAX,
            interval: std::time::Duration::from_secs(3600),
        })
}

fn loss(step: u64) -> f64 {
    10.0 / step as f64
}

fn push_losses(w: &mut StoreWriter, steps: std::ops::RangeInclusive<u64>, f: impl Fn(u64) -> f64) {
    for s in steps {
        w.push_metric_at(
            s,
            s as f64 / 10.0,
            1e9 + s as f64,
            split::TRAIN,
            "total",
            "loss",
            f(s),
        );
    }
}

/// (step, value) of train/loss in store order.
fn losses(run: &Path) -> Vec<(u64, f64)> {
    let s = conelab_store::load(run).expect("load");
    let h = query::history(s.metrics(), split::TRAIN, "total", "loss", 0).expect("history");
    h.steps.into_iter().zip(h.values).collect()
}

fn segment_files(run: &Path, prefix: &str) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(run.join(conelab_store::STORE_DIR))
        .expect("store dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(prefix) && n.ends_with(".parquet"))
        })
        .collect();
    v.sort();
    v
}

#[test]
fn a_crash_loses_only_the_unflushed_buffer() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let run = tmp.path();
    let mut w = writer(run);
    push_losses(&mut w, 1..=10, loss);
    w.flush().expect("flush");
    push_losses(&mut w, 11..=20, loss);
    w.push_event_at(15, 1e9, "regulariser on", "cos on", "MLE", "CosReg γ=1");
    w.flush().expect("flush");
    push_losses(&mut w, 21..=25, loss);
    // A crash: no flush, no destructor; and a half-written temp file of the next segment.
    std::mem::forget(w);
    std::fs::write(
        run.join(conelab_store::STORE_DIR)
            .join(".metrics-000003.parquet.tmp-4242"),
        b"PAR1 half a segment",
    )
    .expect("temp file");

    let got = losses(run);
    let want: Vec<(u64, f64)> = (1..=20).map(|s| (s, loss(s))).collect();
    assert_eq!(got, want);
    let s = conelab_store::load(run).expect("load");
    assert!(s.warnings().is_empty(), "{:?}", s.warnings());
    assert_eq!(s.events().height(), 1);
    assert_eq!(s.run(), &record("run"));
}

#[test]
fn a_truncated_segment_is_skipped_with_a_warning() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let run = tmp.path();
    let mut w = writer(run);
    for part in [1..=10, 11..=20, 21..=30] {
        push_losses(&mut w, part, loss);
        w.flush().expect("flush");
    }
    drop(w);
    let segs = segment_files(run, "metrics-");
    assert_eq!(segs.len(), 3);
    let bytes = std::fs::read(&segs[1]).expect("read");
    std::fs::write(&segs[1], &bytes[..bytes.len() / 2]).expect("truncate");

    let s = conelab_store::load(run).expect("a broken segment does not stop the load");
    assert_eq!(s.warnings().len(), 1, "{:?}", s.warnings());
    assert!(
        s.warnings()[0].contains("metrics-000002"),
        "{}",
        s.warnings()[0]
    );
    let steps: Vec<u64> = losses(run).into_iter().map(|(s, _)| s).collect();
    let want: Vec<u64> = (1..=10).chain(21..=30).collect();
    assert_eq!(steps, want);
}

/// Reading four columns of the metrics (what the workbench needs of a finished run) gives the
/// rows a whole read gives, in the order written (a later row of a step comes later); a truncated
/// segment and a segment with other columns are skipped with the same warnings.
#[test]
fn a_read_of_some_columns_keeps_the_rows_and_the_warnings() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let run = tmp.path();
    let mut w = writer(run);
    for part in [1..=10, 11..=20, 21..=30] {
        push_losses(&mut w, part, loss);
        w.flush().expect("flush");
    }
    // Steps 15–20 written again with other values (rows of a second life): the later ones win.
    push_losses(&mut w, 15..=20, |s| loss(s) + 1.0);
    w.flush().expect("flush");
    drop(w);
    let segs = segment_files(run, "metrics-");
    let bytes = std::fs::read(&segs[2]).expect("read");
    std::fs::write(&segs[2], &bytes[..bytes.len() / 2]).expect("truncate");
    let mut foreign = df!("x" => [1i64, 2, 3]).expect("frame");
    let file = std::fs::File::create(
        run.join(conelab_store::STORE_DIR)
            .join("metrics-000009.parquet"),
    )
    .expect("create");
    polars_io::prelude::ParquetWriter::new(file)
        .finish(&mut foreign)
        .expect("write");

    let columns = [
        conelab_store::col::KEY,
        conelab_store::col::STEP,
        conelab_store::col::VALUE,
        conelab_store::col::EPOCH,
    ];
    let some = conelab_store::load_columns(run, &columns).expect("load some columns");
    let names: Vec<&str> = some
        .metrics()
        .get_column_names()
        .iter()
        .map(|n| n.as_str())
        .collect();
    assert_eq!(names, columns);
    let whole = conelab_store::load(run).expect("load");
    assert_eq!(some.warnings().len(), 2, "{:?}", some.warnings());
    assert_eq!(some.warnings(), whole.warnings());
    let steps = some
        .metrics()
        .column(conelab_store::col::STEP)
        .expect("step");
    let values = some
        .metrics()
        .column(conelab_store::col::VALUE)
        .expect("value");
    // Rows as written: the later row of a step is the one that counts.
    let mut last = std::collections::BTreeMap::new();
    for (s, v) in steps
        .u64()
        .expect("u64")
        .iter()
        .zip(values.f64().expect("f64").iter())
    {
        last.insert(s.expect("step"), v.expect("value"));
    }
    let got: Vec<(u64, f64)> = last.into_iter().collect();
    let want: Vec<(u64, f64)> = (1..=14)
        .map(|s| (s, loss(s)))
        .chain((15..=20).map(|s| (s, loss(s) + 1.0)))
        .collect();
    assert_eq!(
        got, want,
        "segment 3 (21–30) skipped, 15–20 from the second life"
    );
    assert_eq!(some.events().height(), whole.events().height());
}

#[test]
fn a_resumed_run_drops_the_lost_timeline_and_has_no_duplicates() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let run = tmp.path();
    // First life: checkpoint at step 10, rows flushed up to 15, then killed.
    let mut w = writer(run);
    push_losses(&mut w, 1..=15, loss);
    w.push_event_at(12, 1e9, "weight", "cos weight 2", "a", "b");
    w.flush().expect("flush");
    // Killed: the buffer is gone, the kernel releases the writer's lock (a drop does both).
    drop(w);
    // Second life: resumed from the checkpoint at 10; steps 11.. are recomputed.
    let mut w = writer(run);
    w.start_at(10).expect("cut back to the checkpoint");
    let started = Event::Started(Box::new(RunStarted {
        step: 10,
        total_steps: 20,
        windows_per_epoch: 5,
        parameters: 1,
        device: "cpu".into(),
        run_dir: None,
        objective: "MLE".into(),
        objectives: Default::default(),
    }));
    assert!(!w.record(&started).expect("record"));
    push_losses(&mut w, 11..=20, |s| 100.0 + s as f64);
    w.flush().expect("flush");
    drop(w);

    let got = losses(run);
    let want: Vec<(u64, f64)> = (1..=10)
        .map(|s| (s, loss(s)))
        .chain((11..=20).map(|s| (s, 100.0 + s as f64)))
        .collect();
    assert_eq!(got, want);
    let s = conelab_store::load(run).expect("load");
    let keys = ["step", "split", "group", "metric"].map(String::from);
    let unique = s
        .metrics()
        .unique_stable(Some(&keys), UniqueKeepStrategy::First, None)
        .expect("unique");
    assert_eq!(unique.height(), s.metrics().height());
    // The event of the lost timeline (step 12) is gone; the restart is recorded.
    let kinds: Vec<String> = s
        .events()
        .column("kind")
        .expect("kind")
        .str()
        .expect("str")
        .iter()
        .map(|k| k.unwrap_or_default().to_string())
        .collect();
    assert_eq!(kinds, vec!["start".to_string()]);
}

#[test]
fn the_newest_row_of_a_key_wins() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let run = tmp.path();
    let mut w = writer(run);
    push_losses(&mut w, 1..=5, |_| 1.0);
    w.flush().expect("flush");
    push_losses(&mut w, 5..=5, |_| 2.0);
    w.flush().expect("flush");
    drop(w);
    assert_eq!(
        losses(run),
        vec![(1, 1.0), (2, 1.0), (3, 1.0), (4, 1.0), (5, 2.0)]
    );
}

#[test]
fn new_metric_names_need_no_schema_change() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let run = tmp.path();
    let mut w = writer(run);
    push_losses(&mut w, 1..=3, loss);
    w.flush().expect("flush");
    w.push_metric_at(4, 0.4, 1e9, "probe", "rare", "a_metric_added_later", 0.25);
    w.flush().expect("flush");
    drop(w);
    let s = conelab_store::load(run).expect("load");
    let last = query::last_values_vec(s.metrics()).expect("last");
    let find = |metric: &str| last.iter().find(|v| v.metric == metric).cloned();
    let new = find("a_metric_added_later").expect("new metric");
    assert_eq!(
        (new.split.as_str(), new.group.as_str(), new.step, new.value),
        ("probe", "rare", 4, 0.25)
    );
    let old = find("loss").expect("loss");
    assert_eq!((old.step, old.value), (3, loss(3)));
}

#[test]
fn compaction_keeps_every_row_and_supersedes_what_it_replaced() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let run = tmp.path();
    let mut w = writer(run);
    for k in 0..5u64 {
        push_losses(&mut w, k * 10 + 1..=k * 10 + 10, loss);
        w.push_event_at(k * 10 + 1, 1e9, "checkpoint", "x", "", "");
        w.flush().expect("flush");
    }
    drop(w);
    let first_segment = std::fs::read(&segment_files(run, "metrics-")[0]).expect("read");
    let before = conelab_store::load(run).expect("load");
    let done = conelab_store::compact(run).expect("compact");
    assert_eq!(done.replaced, 10, "5 metrics + 5 events segments");
    assert!(done.set_aside.is_empty());
    assert_eq!(segment_files(run, "metrics-").len(), 1);
    assert_eq!(segment_files(run, "events-").len(), 1);
    let after = conelab_store::load(run).expect("load");
    assert!(after.metrics().equals(before.metrics()));
    assert!(after.events().equals(before.events()));
    // A crash between the base's rename and the deletions leaves an old segment behind: the base
    // supersedes it, so its rows are not counted twice.
    std::fs::write(
        run.join(conelab_store::STORE_DIR)
            .join("metrics-000001.parquet"),
        first_segment,
    )
    .expect("restore an old segment");
    let again = conelab_store::load(run).expect("load");
    assert!(again.metrics().equals(before.metrics()));
    // A writer opened afterwards numbers its segments after the base.
    let mut w = writer(run);
    push_losses(&mut w, 51..=52, loss);
    w.flush().expect("flush");
    drop(w);
    assert_eq!(losses(run).len(), 52);
}

#[test]
fn compaction_refuses_while_a_process_holds_the_writer_lock_and_a_killed_holder_frees_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let run = tmp.path();
    let mut w = writer(run);
    push_losses(&mut w, 1..=3, loss);
    w.flush().expect("flush");
    // A live writer (this process's own) holds the OS lock: no compaction, no second writer.
    let err = conelab_store::compact(run).expect_err("a live writer");
    assert!(err.to_string().contains("is writing"), "{err}");
    assert!(
        StoreWriter::open(run, &record("run")).is_err(),
        "two writers on one store"
    );
    drop(w);
    // Another process holds it, and is killed with -9: the kernel releases it (a pid file would
    // have stayed "held" until a recycled pid made it lie).
    let lock = run
        .join(conelab_store::STORE_DIR)
        .join(conelab_store::writer::WRITER_LOCK);
    // -o: the lock stays with flock itself, not with the command it runs.
    let mut holder = std::process::Command::new("flock")
        .arg("-o")
        .arg(&lock)
        .args(["sleep", "60"])
        .spawn()
        .expect("flock(1) from util-linux");
    let start = std::time::Instant::now();
    while conelab_store::writer::live_writer(&run.join(conelab_store::STORE_DIR))
        .expect("probe")
        .is_none()
    {
        assert!(start.elapsed().as_secs() < 30, "flock never took the lock");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(
        conelab_store::compact(run).is_err(),
        "held by another process"
    );
    holder.kill().expect("kill -9");
    let _ = holder.wait();
    let start = std::time::Instant::now();
    loop {
        match conelab_store::compact(run) {
            Ok(_) => break,
            Err(e) => {
                assert!(start.elapsed().as_secs() < 30, "the lock stayed held: {e}");
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        }
    }
    assert_eq!(losses(run).len(), 3);
}

#[test]
fn a_flush_is_all_or_nothing_and_never_replaces_a_segment() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let run = tmp.path();
    let mut w = writer(run);
    push_losses(&mut w, 1..=10, loss);
    w.push_event_at(3, 1e9, "checkpoint", "x", "", "");
    w.flush().expect("first flush");
    push_losses(&mut w, 11..=20, loss);
    w.push_event_at(15, 1e9, "weight", "cos weight 2", "a", "b");
    let buffered = w.buffered_rows();
    // Disk full as the events segment is put in place (the metrics one already is): the flush
    // takes the metrics segment back and keeps every row buffered.
    let err = conelab_base::fault::with_plan("segment.rename:2:ENOSPC", || w.flush())
        .expect_err("injected");
    assert!(err.to_string().contains("No space left"), "{err}");
    assert_eq!(w.buffered_rows(), buffered, "nothing dropped");
    assert_eq!(segment_files(run, "metrics-").len(), 1, "taken back");
    assert_eq!(segment_files(run, "events-").len(), 1);
    // Half a segment written (disk full while writing): the same.
    conelab_base::fault::with_plan("segment.write:1:ENOSPC", || w.flush()).expect_err("injected");
    assert_eq!(w.buffered_rows(), buffered);
    // A stranger with the next number (a file an old writer left, named without a checksum):
    // segments are named with their checksum, so the flush takes its own name beside it and
    // the stranger stays as it was (a taken name is refused: `segment` tests).
    let squatter = run
        .join(conelab_store::STORE_DIR)
        .join("events-000002.parquet");
    std::fs::write(&squatter, b"not mine").expect("write");
    w.flush().expect("a name of its own");
    assert_eq!(std::fs::read(&squatter).expect("read"), b"not mine");
    w.flush().expect("nothing left to write");
    drop(w);
    let s = conelab_store::load(run).expect("load");
    assert_eq!(
        losses(run),
        (1..=20).map(|s| (s, loss(s))).collect::<Vec<_>>()
    );
    assert_eq!(s.events().height(), 2, "every event once");
    assert_eq!(
        s.warnings().len(),
        1,
        "the squatter is skipped: {:?}",
        s.warnings()
    );
}

#[test]
fn compaction_sets_a_corrupt_segment_aside_and_an_io_error_leaves_everything_in_place() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let run = tmp.path();
    let mut w = writer(run);
    for part in [1..=10, 11..=20] {
        push_losses(&mut w, part, loss);
        w.flush().expect("flush");
    }
    drop(w);
    let dir = run.join(conelab_store::STORE_DIR);
    std::fs::write(dir.join("metrics-009999.parquet"), b"garbage, not parquet").expect("write");
    let listing = || {
        let mut v: Vec<String> = std::fs::read_dir(&dir)
            .expect("list")
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    // An I/O error on a segment (EIO): compaction stops with every file where it was.
    let before = listing();
    let err = conelab_base::fault::with_plan("segment.read:2:EIO", || conelab_store::compact(run))
        .expect_err("injected EIO");
    assert!(err.to_string().contains("Input/output error"), "{err}");
    assert_eq!(listing(), before);
    // Disk full while writing the compacted segment: the same.
    conelab_base::fault::with_plan("segment.write:1:ENOSPC", || conelab_store::compact(run))
        .expect_err("injected ENOSPC");
    assert_eq!(listing(), before);
    // The corrupt segment is moved to store/corrupt/, never deleted, and said.
    let done = conelab_store::compact(run).expect("compact");
    assert_eq!(done.set_aside.len(), 1, "{done:?}");
    assert!(done.set_aside[0].1.contains("metrics-009999"), "{done:?}");
    assert_eq!(
        std::fs::read(dir.join("corrupt/metrics-009999.parquet")).expect("kept"),
        b"garbage, not parquet"
    );
    assert_eq!(
        losses(run),
        (1..=20).map(|s| (s, loss(s))).collect::<Vec<_>>()
    );
}

#[test]
fn queries_return_what_was_written() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let run = tmp.path();
    let mut w = writer(run);
    push_losses(&mut w, 1..=1000, |s| s as f64);
    for step in [100, 200, 300] {
        w.push_metric_at(
            step,
            0.0,
            1e9,
            split::VALID,
            "rare",
            "ppl",
            step as f64 * 2.0,
        );
        w.push_event_at(step, 1e9, "checkpoint", "c", "", "");
    }
    w.flush().expect("flush");
    drop(w);
    let s = conelab_store::load(run).expect("load");
    let last = query::last_values_vec(s.metrics()).expect("last");
    assert_eq!(last.len(), 2);
    let rare = last.iter().find(|v| v.split == "valid").expect("valid");
    assert_eq!((rare.step, rare.value), (300, 600.0));
    // 1000 points into 100 buckets of 10: bucket b holds steps 10b+1..=10b+10, mean 10b+5.5.
    let h = query::history(s.metrics(), split::TRAIN, "total", "loss", 100).expect("history");
    assert_eq!(h.len(), 100);
    for (b, (step, v)) in h.steps.iter().zip(&h.values).enumerate() {
        assert_eq!(*step, 10 * b as u64 + 10);
        assert!(
            (v - (10.0 * b as f64 + 5.5)).abs() < 1e-9,
            "bucket {b}: {v}"
        );
    }
    let ev = query::events_between(s.events(), 150, 300).expect("events");
    let steps: Vec<u64> = ev
        .column("step")
        .expect("step")
        .u64()
        .expect("u64")
        .into_no_null_iter()
        .collect();
    assert_eq!(steps, vec![200, 300]);
    assert_eq!(
        query::value_at_or_before(s.metrics(), split::VALID, "rare", "ppl", 250).expect("q"),
        Some((200, 400.0))
    );
}

#[test]
fn a_folder_without_a_store_is_a_clear_error() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let err = conelab_store::load(tmp.path()).expect_err("no store");
    assert!(err.to_string().contains("no metrics store"), "{err}");
    std::fs::create_dir_all(tmp.path().join("store")).expect("mkdir");
    std::fs::write(tmp.path().join("store/run.json"), "{ not json").expect("write");
    let err = conelab_store::load(tmp.path()).expect_err("corrupt record");
    assert!(err.to_string().contains("corrupt"), "{err}");
}

/// What killed writers left (temporary files of segments and of the run record) is deleted when
/// the next writer opens the store; the segments and the record are untouched.
#[test]
fn stale_temporary_files_are_removed_when_a_writer_opens() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = dir.path();
    {
        let mut w = writer(run);
        w.push_metric(1, "train", "all", "loss", loss(1));
        w.flush().expect("flush");
    }
    let store_dir = run.join("store");
    let stale = [".metrics-000002.parquet.tmp-4242-0", ".run.json.tmp-4242-1"];
    for name in stale {
        std::fs::write(store_dir.join(name), b"half a segment").expect("write");
    }
    let before: Vec<String> = names(&store_dir)
        .into_iter()
        .filter(|n| !stale.contains(&n.as_str()))
        .collect();
    drop(writer(run));
    let after = names(&store_dir);
    for name in stale {
        assert!(!after.contains(&name.to_string()), "{name} is still there");
    }
    for name in &before {
        assert!(after.contains(name), "{name} was removed");
    }
    assert_eq!(
        conelab_store::load(run).expect("load").metrics().height(),
        1
    );
}

fn names(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .expect("dir")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

/// A segment that vanishes between the listing and its read (a compaction replaced it: the
/// issue's `export` racing `store compact`) makes the reader list again, not fail; one that
/// never comes back fails after a bounded number of lists, naming the file.
#[test]
fn a_reader_lists_again_when_a_segment_vanishes_under_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = dir.path();
    {
        let mut w = writer(run);
        for step in 1..=3 {
            w.push_metric(step, "train", "all", "loss", loss(step));
            w.flush().expect("flush");
        }
    }
    let loaded =
        conelab_base::fault::with_plan("segment.read:2:ENOENT", || conelab_store::load(run))
            .expect("read again after the vanished segment");
    assert_eq!(loaded.metrics().height(), 3);
    assert!(loaded.warnings().is_empty(), "{:?}", loaded.warnings());
    let Err(gone) =
        conelab_base::fault::with_plan("segment.read:1+:ENOENT", || conelab_store::load(run))
    else {
        panic!("a segment that never comes back was read");
    };
    assert!(gone.to_string().contains("metrics-"), "{gone}");
}

/// A store whose `run.json` was deleted still loads when its segments are intact: every row, and
/// a warning that names the missing record (issue: export refused the whole store).
#[test]
fn a_store_without_its_run_record_still_gives_its_rows() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = dir.path().join("my-run");
    {
        let mut w = writer(&run);
        for step in 1..=4 {
            w.push_metric(step, "train", "all", "loss", loss(step));
        }
        w.flush().expect("flush");
    }
    std::fs::remove_file(run.join("store/run.json")).expect("rm run.json");
    let loaded = conelab_store::load(&run).expect("the rows load");
    assert_eq!(loaded.metrics().height(), 4);
    assert_eq!(loaded.run().run_id, "my-run");
    assert!(
        loaded
            .warnings()
            .iter()
            .any(|w| w.contains("run.json") && w.contains("missing")),
        "{:?}",
        loaded.warnings()
    );
    // A folder with neither record nor rows is still not a store.
    let empty = dir.path().join("empty");
    std::fs::create_dir_all(empty.join("store")).expect("mkdir");
    assert!(conelab_store::load(&empty).is_err());
}

/// A long run's store stays small: 7,200 flushes (a flush per step, as `--store-flush-secs 0`
/// makes; two segments each) roll into one base whenever the store holds `ROLL_AT` segment
/// files, so it never holds more than `ROLL_AT` + 2 of them (never more than 300), and at the
/// end every row is there once, every event once, in order.
#[test]
fn a_long_run_keeps_a_bounded_store_and_every_row() {
    use conelab_store::writer::ROLL_AT;
    const { assert!(ROLL_AT + 2 <= 300, "the issue's bound") };
    let tmp = tempfile::tempdir().expect("tempdir");
    let run = tmp.path();
    let mut w = writer(run);
    let (flushes, mut most, mut rolls) = (7_200u64, 0, 0);
    for step in 1..=flushes {
        push_losses(&mut w, step..=step, loss);
        w.push_event(step, "note", &format!("step {step}"), "", "");
        w.flush().expect("flush");
        rolls += usize::from(w.roll().expect("roll").is_some());
        let files = segment_files(run, "metrics-").len() + segment_files(run, "events-").len();
        most = most.max(files);
    }
    assert!(most <= ROLL_AT + 2, "{most} segment files at once");
    assert_eq!(
        rolls as u64,
        flushes * 2 / ROLL_AT as u64,
        "a roll every {} flushes",
        ROLL_AT / 2
    );
    drop(w);
    assert_eq!(
        losses(run),
        (1..=flushes).map(|s| (s, loss(s))).collect::<Vec<_>>()
    );
    let s = conelab_store::load(run).expect("load");
    assert_eq!(s.events().height() as u64, flushes, "every event once");
    assert!(s.warnings().is_empty(), "{:?}", s.warnings());
}

/// `export` started while the run compacts its store (the issue: 26 of 30 exports started
/// 0.1 s after a compaction of 1,345 segments failed with a missing file): every export
/// succeeds with every row, because a reader holds the store's readers' lock and the
/// compaction leaves the files it read until it is done.
#[test]
fn exports_during_compactions_all_succeed_with_every_row() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = dir.path();
    let mut w = writer(run);
    let mut step = 0u64;
    for round in 0..8 {
        for _ in 0..60 {
            step += 1;
            push_losses(&mut w, step..=step, loss);
            w.flush().expect("flush");
        }
        let export = crate::harness::command()
            .args([
                "export",
                run.to_str().expect("utf-8"),
                "--table",
                "metrics",
                "--format",
                "csv",
            ])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn export");
        // The export starts reading while the store is compacted under it.
        std::thread::sleep(std::time::Duration::from_millis(20 * (round % 4)));
        w.compact().expect("compact");
        let out = export.wait_with_output().expect("export");
        assert!(
            out.status.success(),
            "round {round}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let rows = String::from_utf8_lossy(&out.stdout).lines().count() - 1;
        assert_eq!(rows as u64, step, "round {round}: every row, once");
    }
    drop(w);
    // Whatever the readers kept is gone once nobody reads: one base per table is left.
    conelab_store::compact(run).expect("compact");
    assert_eq!(segment_files(run, "metrics-").len(), 1);
}

/// A rolling compaction that fails — disk full writing the base, EIO reading a segment, EIO
/// deleting what the base superseded — leaves every row readable once, and the next roll
/// succeeds and keeps the store bounded.
#[test]
fn a_failed_roll_loses_nothing_and_the_next_one_succeeds() {
    use conelab_store::writer::ROLL_AT;
    for plan in [
        "segment.write:1:ENOSPC",
        "segment.read:7:EIO",
        "segment.remove:1:EIO",
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let run = dir.path();
        let mut w = writer(run);
        let mut step = 0;
        // Each flush makes one metrics segment (no events here).
        while store_segment_count(run) < ROLL_AT {
            step += 1;
            push_losses(&mut w, step..=step, loss);
            w.flush().expect("flush");
        }
        let e = conelab_base::fault::with_plan(plan, || w.roll()).expect_err(plan);
        assert!(!e.to_string().is_empty());
        assert_eq!(
            losses(run),
            (1..=step).map(|s| (s, loss(s))).collect::<Vec<_>>(),
            "{plan}: every row, once"
        );
        // Training goes on; the next roll brings the store back under the bound.
        step += 1;
        push_losses(&mut w, step..=step, loss);
        w.flush().expect("flush");
        // (After a failed deletion, deleting the dead segments is enough.)
        w.roll().expect("the next roll");
        assert!(
            store_segment_count(run) <= 2,
            "{plan}: {}",
            store_segment_count(run)
        );
        assert_eq!(
            losses(run),
            (1..=step).map(|s| (s, loss(s))).collect::<Vec<_>>(),
            "{plan}: every row, once, after the roll"
        );
    }
}

fn store_segment_count(run: &Path) -> usize {
    segment_files(run, "metrics-").len() + segment_files(run, "events-").len()
}

/// A store made before run records held a UUID reads with one derived from the record: the
/// same at every read, unlike another run's, and nothing written to the store for it.
#[test]
fn a_store_without_a_uuid_gets_the_same_derived_one_at_every_read() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let make = |id: &str| {
        let dir = tmp.path().join(id);
        let mut r = record(id);
        r.uuid = None;
        let mut w = StoreWriter::open(&dir, &r).expect("open store");
        w.push_metric(1, "train", "total", "loss", 1.0);
        w.flush().expect("flush");
        dir
    };
    let (a, b) = (make("a"), make("b"));
    let json = std::fs::read(a.join("store/run.json")).expect("run.json");
    assert!(
        !String::from_utf8_lossy(&json).contains("uuid"),
        "an old record has none"
    );
    let uuid = |dir: &Path| conelab_store::load(dir).expect("load").run().uuid();
    let first = uuid(&a);
    assert_eq!(uuid(&a), first);
    assert_ne!(uuid(&b), first);
    // The canonical form of a version-4 UUID.
    let parsed: Vec<&str> = first.split('-').collect();
    assert_eq!(
        parsed.iter().map(|p| p.len()).collect::<Vec<_>>(),
        [8, 4, 4, 4, 12],
        "{first}"
    );
    assert!(parsed[2].starts_with('4'), "{first}");
    assert_eq!(
        std::fs::read(a.join("store/run.json")).expect("run.json"),
        json
    );
    // New records get one of their own, at random.
    let new = || RunRecord::new("x", String::new(), "synthetic".into(), "cpu".into());
    let (x, y) = (new(), new());
    assert!(x.uuid.is_some() && x.uuid != y.uuid);
}

/// A CUDA run's system sample: the GPU's numbers stored beside the process's, in MiB; a sensor
/// the board lacks (NaN) is left out, not stored as NaN.
#[test]
fn a_gpu_sample_is_stored_beside_the_process_load() {
    use conelab_core::events::{GpuStats, SystemStats};
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut w = writer(tmp.path());
    const GIB: u64 = 1 << 30;
    w.record(&Event::System(SystemStats {
        step: 7,
        cpu_percent: 100.0,
        rss_bytes: GIB,
        host_used_bytes: 4 * GIB,
        host_total_bytes: 8 * GIB,
        gpu: Some(GpuStats {
            util_percent: 93.0,
            mem_used_bytes: 3 * GIB / 2,
            mem_total_bytes: 80 * GIB,
            power_watts: f64::NAN,
            temp_c: 61.0,
        }),
    }))
    .expect("record");
    w.flush().expect("flush");
    let st = conelab_store::load(tmp.path()).expect("load");
    let at = |m: &str| query::value_at(st.metrics(), split::SYSTEM, "total", m, 7).expect("query");
    assert_eq!(at("gpu_util_percent"), Some(93.0));
    assert_eq!(at("gpu_mem_used_mib"), Some(1536.0));
    assert_eq!(at("gpu_mem_total_mib"), Some(81920.0));
    assert_eq!(at("gpu_temp_c"), Some(61.0));
    assert_eq!(at("gpu_power_w"), None);
    assert_eq!(at("rss_mib"), Some(1024.0));
}
