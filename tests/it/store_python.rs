//! docs/STORE.md's Python blocks, run as written (polars, pandas, DuckDB, installed by the test)
//! against two real runs — one failed mid-run and resumed, so its store held superseded rows
//! before it ended — and checked against conelab's own reading of the same stores.

use std::collections::BTreeMap;
use std::path::Path;

use crate::harness::{Fixture, conelab, conelab_env, python_run, python_with, s, succeeded};

const PACKAGES: [&str; 4] = [
    "polars==2.1.0",
    "pandas==3.1.1",
    "pyarrow==26.0.1",
    "duckdb==2.0.1",
];

/// The ```python blocks of a Markdown text, in order.
fn python_blocks(markdown: &str) -> String {
    let mut out = String::new();
    let mut inside = false;
    for line in markdown.lines() {
        match (inside, line.trim_end()) {
            (false, "```python") => inside = true,
            (true, "```") => inside = false,
            (true, code) => {
                out.push_str(code);
                out.push('\n');
            }
            _ => {}
        }
    }
    out
}

/// Every file under `dir` with its length and modification time.
fn listing(dir: &Path) -> BTreeMap<String, (u64, std::time::SystemTime)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d)
            .expect("read_dir")
            .filter_map(|e| e.ok())
        {
            let meta = e.metadata().expect("metadata");
            if meta.is_dir() {
                stack.push(e.path());
            } else {
                let modified = meta.modified().expect("mtime");
                out.insert(e.path().display().to_string(), (meta.len(), modified));
            }
        }
    }
    out
}

fn json_rows(args: &[&str]) -> Vec<serde_json::Value> {
    let out = conelab(args);
    succeeded(&out);
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    rows.as_array().expect("rows").clone()
}

#[test]
fn the_store_pages_python_reads_the_stores_as_conelab_does() {
    let f = Fixture::new();
    let checkpoints = f.path("work/checkpoints");
    std::fs::create_dir_all(&checkpoints).expect("mkdir");
    let (a, b) = (checkpoints.join("a"), checkpoints.join("b"));
    let corpus = f.path("corpus");
    let config = f.path("small.toml");
    let train = |run: &Path, env: &[(&str, &str)]| {
        conelab_env(
            &[
                "train",
                s(&corpus),
                "--config",
                s(&config),
                "--run-dir",
                s(run),
                "--steps",
                "12",
                "--eval-every",
                "4",
                "--checkpoint-every",
                "4",
                "--store-flush-secs",
                "0",
                "--headless",
            ],
            env,
        )
    };
    // Run a fails at its 7th step (after the checkpoint at 4, its rows of 5 and 6 stored) and is
    // resumed from step 4: steps 5 and 6 are recorded twice.
    let failed = train(&a, &[("CONELAB_FAULT", "engine.panic:7:EIO")]);
    assert_eq!(
        failed.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&failed.stderr)
    );
    let resumed = conelab(&["train", "--resume", s(&a)]);
    succeeded(&resumed);
    let trained = train(&b, &[]);
    succeeded(&trained);

    let work = f.path("work");
    let before = listing(&checkpoints);
    for table in ["runs", "metrics"] {
        let out = conelab(&[
            "export",
            s(&a),
            s(&b),
            "--table",
            table,
            "--out",
            s(&work.join(format!("{table}.parquet"))),
        ]);
        succeeded(&out);
    }
    // The runs table as conelab reads it (outside CI without Python, its only check here).
    let runs = json_rows(&[
        "export",
        s(&a),
        s(&b),
        "--table",
        "runs",
        "--format",
        "json",
    ]);
    assert_eq!(runs.len(), 2);
    let uuids: Vec<&str> = runs.iter().filter_map(|r| r["run_uuid"].as_str()).collect();
    assert!(uuids.len() == 2 && uuids[0] != uuids[1], "{uuids:?}");
    for r in &runs {
        assert_eq!(r["status"], "completed");
        assert_eq!(r["last_step"], 12);
        assert_eq!(r["train.steps"], 12, "typed, not text: {r}");
        assert!(r["best_valid_ppl"].as_f64().is_some_and(|p| p > 1.0), "{r}");
    }
    let Some(python) = python_with(&PACKAGES) else {
        return;
    };
    let page = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/STORE.md"))
        .expect("docs/STORE.md");
    let blocks = python_blocks(&page);
    assert!(
        blocks.contains("read_parquet") && blocks.contains("duckdb"),
        "{blocks}"
    );
    let script = format!(
        "import os\nos.chdir({work:?})\n{blocks}\n{CHECKS}",
        work = work.display().to_string()
    );
    let read: serde_json::Value =
        serde_json::from_str(&python_run(&python, &script, &[])).expect("json");
    assert_eq!(listing(&checkpoints), before, "reading wrote to a store");

    // conelab's own reading: every value once (the resumed run's later rows), each run's best.
    let rows = json_rows(&[
        "export",
        s(&a),
        s(&b),
        "--table",
        "metrics",
        "--format",
        "json",
    ]);
    assert_eq!(read["raw_rows"], rows.len(), "{read}");
    assert_eq!(
        read["raw_duplicates"], 0,
        "a finished run's segments hold each value once"
    );
    assert_eq!(read["deduplicated_rows"], rows.len());
    assert_eq!(read["last_steps"], serde_json::json!({"a": 12, "b": 12}));
    for r in &runs {
        let uuid = r["run_uuid"].as_str().expect("uuid");
        let want = r["best_valid_ppl"].as_f64().expect("best");
        for who in ["best_polars", "best_pandas"] {
            let got = read[who][uuid].as_f64().expect(who);
            assert!(
                (got - want).abs() <= 1e-9 * want,
                "{who} {uuid}: {got} vs {want}"
            );
        }
    }
    assert_eq!(read["lr_type"], "Float64");
    assert_eq!(read["batch_type"], "Int64");
}

/// What the page's blocks made, as JSON.
const CHECKS: &str = r#"
import json
print(json.dumps({
    "raw_rows": m.height,
    "raw_duplicates": int(m.select("run_id", "step", "split", "group", "metric").is_duplicated().sum()),
    "deduplicated_rows": deduplicated.height,
    "last_steps": dict(last_steps),
    "best_polars": {r["run_uuid"]: r["best_ppl"] for r in best.to_dicts()},
    "best_pandas": {k: float(v) for k, v in best_pd.items()},
    "lr_type": str(runs.schema["train.lr"]),
    "batch_type": str(runs.schema["train.batch"]),
}))
"#;
