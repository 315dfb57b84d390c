//! TensorBoard in and out (`export --format tfevents`, `import-tb`), checked with TensorBoard's own
//! reader and writer (the `tensorboard` Python package, installed by the test).

use std::collections::BTreeMap;
use std::path::Path;

use crate::harness::{
    Fixture, assert_one_line_error, conelab, conelab_env, python_run, python_with, s, succeeded,
};

const TENSORBOARD: &str = "tensorboard==2.21.0";

/// Every (tag, step) → value of a run's store, from `export --table metrics` (polars' reading);
/// JSON has no NaN or infinity, so a value that is not finite reads as NaN here.
fn stored(run: &Path) -> BTreeMap<(String, u64), f64> {
    let out = conelab(&["export", s(run), "--table", "metrics", "--format", "json"]);
    succeeded(&out);
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let mut map = BTreeMap::new();
    for r in rows.as_array().expect("rows") {
        let tag = format!(
            "{}/{}/{}",
            r["split"].as_str().expect("split"),
            r["group"].as_str().expect("group"),
            r["metric"].as_str().expect("metric")
        );
        let step = r["step"].as_u64().expect("step");
        map.insert((tag, step), r["value"].as_f64().unwrap_or(f64::NAN));
    }
    map
}

/// TensorBoard's EventAccumulator over one run folder: every scalar, and the Projector's
/// configuration read with its own protocol buffer, each tensor file loaded and measured.
const READ_LOG: &str = r#"
import json, os, sys
import numpy as np
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from google.protobuf import text_format
from tensorboard.plugins.projector.projector_config_pb2 import ProjectorConfig
run = sys.argv[1]
ea = EventAccumulator(run, size_guidance={"scalars": 0})
ea.Reload()
import math
# JSON has no NaN: a value that is not finite goes as null.
scalars = {t: [[e.step, e.value if math.isfinite(e.value) else None] for e in ea.Scalars(t)]
           for t in ea.Tags()["scalars"]}
cfg = text_format.Parse(open(os.path.join(run, "projector_config.pbtxt")).read(), ProjectorConfig())
embeddings = []
for e in cfg.embeddings:
    t = np.loadtxt(os.path.join(run, e.tensor_path), delimiter="\t", ndmin=2)
    meta = open(os.path.join(run, e.metadata_path)).read().splitlines()
    embeddings.append({"name": e.tensor_name, "shape": list(t.shape), "declared": list(e.tensor_shape),
                       "header": meta[0], "rows": len(meta) - 1, "first": meta[1].split("\t"),
                       "finite": bool(np.isfinite(t).all())})
print(json.dumps({"scalars": scalars, "embeddings": embeddings}))
"#;

/// `got` is `stored` as an f32 carries it (TensorBoard's scalars are f32); non-finite alike.
fn same(got: f64, stored: f64) -> bool {
    got as f32 == stored as f32 || (!got.is_finite() && !stored.is_finite())
}

#[test]
fn a_run_exported_as_tfevents_reads_in_tensorboard_and_back_through_import_tb() {
    let f = Fixture::new();
    let trained = f.train(
        "run",
        &[
            "--steps",
            "12",
            "--eval-every",
            "6",
            "--checkpoint-every",
            "6",
            "--headless",
        ],
    );
    succeeded(&trained);
    let run = f.path("run");
    let log = f.path("log");
    let out = conelab(&["export", s(&run), "--format", "tfevents", "--out", s(&log)]);
    succeeded(&out);
    let store = stored(&run);
    assert!(
        store.len() > 100,
        "a run stores more than {} values",
        store.len()
    );
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        said.contains(&format!("{} scalars", store.len())),
        "{said} vs {}",
        store.len()
    );

    // Round trip through conelab's own reader: every value back at its step, to f32.
    let back = f.path("imported");
    let out = conelab(&["import-tb", s(&log), "--out", s(&back), "--name", "tb"]);
    succeeded(&out);
    let again = stored(&back.join("tb-run"));
    assert_eq!(again.len(), store.len());
    for ((tag, step), v) in &store {
        let w = *again
            .get(&(tag.clone(), *step))
            .unwrap_or_else(|| panic!("{tag} at {step} lost on the way back"));
        assert!(same(w, *v), "{tag} at {step}: {w} vs {v}");
    }

    // A disk that fills while the export rewrites the event file, or EIO on a tensor: exit 4,
    // one line, and the log as the first export left it; an import that fails leaves no run.
    let event_file = std::fs::read_dir(log.join("run"))
        .expect("run log")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.to_string_lossy().contains("tfevents"))
        .expect("event file");
    let tensor = log.join("run/embedding-step-000000006.tsv");
    let before = (
        std::fs::read(&event_file).expect("event file"),
        std::fs::read(&tensor).expect("tensor file"),
    );
    let export = ["export", s(&run), "--format", "tfevents", "--out", s(&log)];
    for fault in ["tfevents.write:1:ENOSPC", "projector.write:1:EIO"] {
        let out = conelab_env(&export, &[("CONELAB_FAULT", fault)]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(4), "{fault}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{fault}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert_eq!(
            std::fs::read(&event_file).expect("event file"),
            before.0,
            "{fault}"
        );
        assert_eq!(
            std::fs::read(&tensor).expect("tensor file"),
            before.1,
            "{fault}"
        );
    }
    let out = conelab_env(
        &["import-tb", s(&log), "--out", s(&back), "--name", "again"],
        &[("CONELAB_FAULT", "segment.write:1:ENOSPC")],
    );
    assert_eq!(
        out.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let left: Vec<String> = std::fs::read_dir(&back)
        .expect("imported")
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect();
    assert_eq!(left, ["tb-run"], "a failed import leaves nothing behind");

    // TensorBoard's own reader.
    let Some(python) = python_with(&[TENSORBOARD]) else {
        return;
    };
    let read = python_run(&python, READ_LOG, &[s(&log.join("run"))]);
    let read: serde_json::Value = serde_json::from_str(&read).expect("json");
    let scalars = read["scalars"].as_object().expect("scalars");
    let mut seen = 0;
    for (tag, points) in scalars {
        for p in points.as_array().expect("points") {
            let step = p[0].as_u64().expect("step");
            let v = p[1].as_f64().unwrap_or(f64::NAN);
            let want = store
                .get(&(tag.clone(), step))
                .unwrap_or_else(|| panic!("{tag} at {step} is not in the store"));
            assert!(same(v, *want), "{tag} at {step}: {v} vs {want}");
            seen += 1;
        }
    }
    assert_eq!(
        seen,
        store.len(),
        "every stored value is a scalar in TensorBoard"
    );
    assert!(scalars.contains_key("valid/total/ppl") && scalars.contains_key("valid/rare/ppl"));
    // The two checkpoints (steps 6 and 12; best/ is one of them), a row per line of the run's
    // vocab.tsv, 16 wide (the fixture's d_model); the metadata's first row is vocab.tsv's.
    let vocab = std::fs::read_to_string(run.join("vocab.tsv")).expect("vocab.tsv");
    let n = vocab.lines().count();
    let first_token = vocab
        .lines()
        .next()
        .and_then(|l| l.split('\t').next())
        .expect("a token");
    let embeddings = read["embeddings"].as_array().expect("embeddings");
    assert_eq!(embeddings.len(), 2, "{embeddings:?}");
    for e in embeddings {
        assert_eq!(e["shape"], serde_json::json!([n, 16]), "{e}");
        assert_eq!(e["declared"], e["shape"]);
        assert_eq!(e["rows"], n);
        assert_eq!(e["first"][0], first_token);
        assert_eq!(e["header"], "token\tgroup\tcount");
        assert!(e["finite"].as_bool().unwrap_or(false));
        let first = e["first"].as_array().expect("first row");
        assert!(
            ["frequent", "medium", "rare"].contains(&first[1].as_str().unwrap_or("")),
            "{first:?}"
        );
    }
}

/// PyTorch's SummaryWriter (simple_value) and TF2's tf.summary.scalar (tensors, the plugin in
/// the first value's metadata only), written by TensorBoard's own event writer.
const WRITE_LOG: &str = r#"
import sys, time
from tensorboard.summary.writer.event_file_writer import EventFileWriter
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
from tensorboard.compat.proto import tensor_pb2, types_pb2
root = sys.argv[1]
pt = EventFileWriter(root + "/pt")
for step in range(20):
    pt.add_event(Event(step=step, wall_time=1.7e9 + step,
                       summary=Summary(value=[Summary.Value(tag="Loss/train", simple_value=10.0 / (step + 1))])))
pt.close()
tf2 = EventFileWriter(root + "/tf2")
for step in range(5):
    meta = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name="scalars")) if step == 0 else None
    t = tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, float_val=[100.0 - step])
    v = Summary.Value(tag="valid/rare/ppl", tensor=t)
    if meta is not None:
        v.metadata.CopyFrom(meta)
    hist_meta = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name="histograms"))
    h = Summary.Value(tag="weights", tensor=tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, float_val=[7.0]))
    if step == 0:
        h.metadata.CopyFrom(hist_meta)
    tf2.add_event(Event(step=step, wall_time=1.7e9 + step, summary=Summary(value=[v, h])))
tf2.close()
"#;

fn curve(run: &Path, metric: &str) -> Vec<(u64, f64)> {
    let out = conelab(&[
        "export",
        s(run),
        "--table",
        "curves",
        "--metric",
        metric,
        "--format",
        "json",
    ]);
    succeeded(&out);
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    rows.as_array()
        .expect("rows")
        .iter()
        .filter_map(|r| {
            // The curve's column: the one that is not the run's or the step's.
            let value = r
                .as_object()?
                .iter()
                .find(|(k, _)| {
                    !["run_id", "run", "run_uuid", "step", "epoch", "wall_time"]
                        .contains(&k.as_str())
                })?
                .1
                .as_f64()?;
            Some((r["step"].as_u64()?, value))
        })
        .collect()
}

#[test]
fn import_tb_reads_pytorch_and_tf2_logs_and_skips_damage_once() {
    let Some(python) = python_with(&[TENSORBOARD]) else {
        return;
    };
    let tmp = tempfile::tempdir().expect("tempdir");
    let log = tmp.path().join("log");
    python_run(&python, WRITE_LOG, &[s(&log)]);
    let out_dir = tmp.path().join("runs");
    let out = conelab(&["import-tb", s(&log), "--out", s(&out_dir)]);
    succeeded(&out);
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Listed as imported, with the logged run's last step.
    let listed = conelab(&["runs", s(&out_dir)]);
    let listed = String::from_utf8_lossy(&listed.stdout);
    let pt_line = listed
        .lines()
        .find(|l| l.starts_with("log-pt "))
        .expect("log-pt listed");
    assert!(
        pt_line.contains("imported") && pt_line.contains("19/19"),
        "{listed}"
    );

    // Named by the log folder, then the run's sub-folder.
    let pt = curve(&out_dir.join("log-pt"), "Loss/train");
    assert_eq!(pt.len(), 20);
    for (step, v) in &pt {
        assert_eq!(
            *v,
            f64::from((10.0 / (*step as f64 + 1.0)) as f32),
            "step {step}"
        );
    }
    let tf2 = curve(&out_dir.join("log-tf2"), "valid/rare/ppl");
    assert_eq!(
        tf2,
        (0..5).map(|s| (s, 100.0 - s as f64)).collect::<Vec<_>>()
    );
    let tf2_all = stored(&out_dir.join("log-tf2"));
    assert!(
        tf2_all.keys().all(|(tag, _)| !tag.contains("weights")),
        "a histogram is not a scalar: {tf2_all:?}"
    );

    // A bit flipped in a record, and the file cut inside its last record: one warning for the
    // file, the other 18 read.
    let damaged = tmp.path().join("damaged");
    std::fs::create_dir_all(damaged.join("pt")).expect("mkdir");
    let file = std::fs::read_dir(log.join("pt"))
        .expect("read_dir")
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().contains("tfevents"))
        .expect("event file");
    let mut bytes = std::fs::read(&file).expect("read");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x20;
    bytes.truncate(bytes.len() - 5);
    std::fs::write(
        damaged.join("pt").join(file.file_name().expect("name")),
        &bytes,
    )
    .expect("write");
    let out = conelab(&["import-tb", s(&damaged), "--out", s(&out_dir)]);
    succeeded(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("1 damaged record skipped") && stderr.contains("truncated"),
        "{stderr}"
    );
    assert_eq!(curve(&out_dir.join("damaged-pt"), "Loss/train").len(), 18);

    // Bad input: one line, exit 2, nothing written over.
    assert_one_line_error(
        &conelab(&["import-tb", s(&log), "--out", s(&out_dir)]),
        &["log-pt exists already"],
    );
    assert_eq!(curve(&out_dir.join("log-pt"), "Loss/train").len(), 20);
    let empty = tmp.path().join("empty");
    std::fs::create_dir_all(&empty).expect("mkdir");
    assert_one_line_error(
        &conelab(&["import-tb", s(&empty), "--out", s(&out_dir)]),
        &["no TensorBoard event files"],
    );
    // Event files with no scalar at all (bytes that are no records): nothing imported is exit
    // 2, not a success that made nothing, and no empty --out folder is left behind.
    let garbage = tmp.path().join("garbage");
    std::fs::create_dir_all(&garbage).expect("mkdir");
    let noise: Vec<u8> = (0..3000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(garbage.join("events.out.tfevents.1.host"), noise).expect("write");
    let fresh = tmp.path().join("fresh-out");
    assert_one_line_error(
        &conelab(&["import-tb", s(&garbage), "--out", s(&fresh)]),
        &["no scalars in any of its event files", "nothing imported"],
    );
    assert!(!fresh.exists(), "an empty --out folder was left");
    let run = out_dir.join("log-pt");
    assert_one_line_error(
        &conelab(&["export", s(&run), "--format", "tfevents"]),
        &["--out DIR"],
    );
    assert_one_line_error(
        &conelab(&[
            "export",
            s(&run),
            "--format",
            "tfevents",
            "--table",
            "groups",
            "--out",
            s(&tmp.path().join("tb")),
        ]),
        &["--table groups does not apply"],
    );
}

/// Two sub-folders that would get one run name are refused before anything is written; a name
/// with nothing safe in it falls back to `tensorboard`. (Logs written by conelab's own writer:
/// this runs without Python.)
#[test]
fn import_tb_refuses_two_runs_of_one_name_before_writing_anything() {
    use conelab_export::tensorboard::events::{push_event, scalar_event};
    let tmp = tempfile::tempdir().expect("tempdir");
    let log = tmp.path().join("log");
    for sub in ["a b", "a_b", "c"] {
        let dir = log.join(sub);
        std::fs::create_dir_all(&dir).expect("mkdir");
        let mut bytes = Vec::new();
        for step in 0..3 {
            push_event(
                &mut bytes,
                &scalar_event(1.7e9, step, "loss", 1.0 / (step as f32 + 1.0)),
            );
        }
        std::fs::write(dir.join("events.out.tfevents.1.host"), bytes).expect("write");
    }
    let out_dir = tmp.path().join("runs");
    assert_one_line_error(
        &conelab(&["import-tb", s(&log), "--out", s(&out_dir), "--name", "x"]),
        &["would both be run x-a_b"],
    );
    assert!(!out_dir.exists(), "nothing written");
    std::fs::remove_dir_all(log.join("a b")).expect("rm");
    let out = conelab(&["import-tb", s(&log), "--out", s(&out_dir), "--name", "."]);
    succeeded(&out);
    let mut made: Vec<String> = std::fs::read_dir(&out_dir)
        .expect("runs")
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect();
    made.sort();
    assert_eq!(made, ["tensorboard-a_b", "tensorboard-c"]);
    assert_eq!(curve(&out_dir.join("tensorboard-c"), "tb/loss").len(), 3);
}

/// Issue #58 item 5: `export --format tfevents` names each run's folder by the name the run goes
/// by (it named them by run folder, so `import-tb` made `tb-tiny-ptb-…` of `ptb-mle`); the
/// imported run is in the run index, found by name from any folder; and a value past float32
/// (an lr of 1e308) is said where TensorBoard would show inf, not silently turned into one.
#[test]
fn tfevents_folders_go_by_run_name_and_imported_runs_by_theirs() {
    let f = Fixture::new();
    let name = format!("tfname-{}", std::process::id());
    let trained = f.train(
        "folder",
        &[
            "--steps",
            "4",
            "--eval-every",
            "2",
            "--headless",
            "--name",
            &name,
        ],
    );
    succeeded(&trained);
    let log = f.path("log");
    succeeded(&conelab(&[
        "export",
        s(&f.path("folder")),
        "--format",
        "tfevents",
        "--out",
        s(&log),
    ]));
    assert!(log.join(&name).is_dir(), "named by the run's name");
    assert!(!log.join("folder").exists(), "not by its folder");
    let back = f.path("imported");
    succeeded(&conelab(&[
        "import-tb",
        s(&log),
        "--out",
        s(&back),
        "--name",
        "tb",
    ]));
    let imported = format!("tb-{name}");
    assert!(back.join(&imported).is_dir());
    // From another folder, by name alone (the run index has it).
    let elsewhere = f.path("elsewhere");
    std::fs::create_dir_all(&elsewhere).expect("mkdir");
    let out = crate::harness::command()
        .current_dir(&elsewhere)
        .args(["export", &imported, "--table", "runs", "--format", "csv"])
        .output()
        .expect("export");
    let csv = succeeded(&out);
    assert!(csv.contains(&imported), "{csv}");

    // A store whose lr is 1e308: written (TensorBoard's scalars are f32, so it reads inf
    // there), and said once, with the value, on stderr.
    let huge = f.path("huge");
    let record =
        conelab_store::RunRecord::new("huge", String::new(), "synthetic".into(), "cpu".into());
    let mut writer = conelab_store::StoreWriter::open(&huge, &record).expect("store");
    for step in 1..=3u64 {
        writer
            .record(&conelab_core::events::Event::Step(
                conelab_core::events::StepStats {
                    step,
                    epoch: 0.1,
                    loss: 5.0,
                    penalty: 0.0,
                    lr: 1e308,
                    grad_norm: 0.5,
                    tokens_per_sec: 1000.0,
                    step_ms: 4.0,
                    rare_tokens: None,
                    rare_g1: None,
                    rare_in_group: None,
                },
            ))
            .expect("record");
    }
    writer.flush().expect("flush");
    drop(writer);
    let out = conelab(&[
        "export",
        s(&huge),
        "--format",
        "tfevents",
        "--out",
        s(&f.path("log2")),
    ]);
    succeeded(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let said: Vec<&str> = stderr.lines().filter(|l| l.contains("float32")).collect();
    assert_eq!(said.len(), 1, "once a tag: {stderr}");
    assert!(
        said[0].contains("train/total/lr") || said[0].contains("lr"),
        "{stderr}"
    );
    assert!(
        said[0].contains("1e308") && said[0].contains("inf"),
        "{stderr}"
    );
}

/// Issue #58 item 6: a file of pure garbage named like an event file was described as "1 damaged
/// record skipped (the first at byte 0); truncated at byte 0": it is no event file at all.
#[test]
fn import_tb_says_garbage_is_no_event_file() {
    let f = Fixture::new();
    let log = f.path("garbage");
    std::fs::create_dir_all(&log).expect("mkdir");
    let mut rng = crate::harness::Rng(7);
    let junk: Vec<u8> = (0..5000).map(|_| rng.next() as u8).collect();
    std::fs::write(log.join("events.out.tfevents.1.junk"), junk).expect("junk");
    let out = conelab(&["import-tb", s(&log), "--out", s(&f.path("out"))]);
    let line = assert_one_line_error(
        &out,
        &[
            "not a TensorBoard event file",
            "5000 bytes",
            "nothing imported",
        ],
    );
    assert!(
        !line.contains("truncated") && !line.contains("damaged record"),
        "{line}"
    );
    assert!(!f.path("out").exists());
}
