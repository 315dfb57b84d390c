//! `conelab export` from stores built here with known values: the papers' tables in every format,
//! the curves, the events, and the one-line errors.

use std::path::{Path, PathBuf};

use crate::harness::{assert_one_line_error, conelab, succeeded};
use conelab_core::series::split;
use conelab_export::{ExportRequest, Format, StepChoice, Table};
use conelab_store::{FlushPolicy, RunRecord, StoreWriter};

/// One evaluation: (step, [total, frequent, medium, rare] PPL, Uniq, Human Uniq, I(W)).
struct Eval {
    step: u64,
    ppl: [f64; 4],
    uniq: [f64; 4],
    i1: [f64; 4],
}

const HUMAN: [f64; 4] = [1500.0, 400.0, 700.0, 400.0];
const GROUPS: [&str; 4] = ["total", "frequent", "medium", "rare"];
/// KN-3's valid PPL per group of GROUPS (as `data baseline` would give them).
const REF: [f64; 4] = [200.0, 100.0, 500.0, 2000.0];

/// A run directory holding only a store: its start label, objective changes and evaluations.
fn make_run(
    root: &Path,
    id: &str,
    start: &str,
    changes: &[(u64, &str)],
    evals: &[Eval],
) -> PathBuf {
    make_run_of(root, id, "[train]\nsteps = 200\n", start, changes, evals)
}

/// `make_run` with the run's `run.toml` given.
fn make_run_of(
    root: &Path,
    id: &str,
    config_toml: &str,
    start: &str,
    changes: &[(u64, &str)],
    evals: &[Eval],
) -> PathBuf {
    let dir = root.join(id);
    let mut record = RunRecord::new(id, config_toml.into(), "synthetic".into(), "cpu".into());
    record.started_unix = 1.7e9;
    record.git_revision = "test".into();
    // A fixed UUID per run, so that the snapshots hold still.
    record.uuid = Some(format!(
        "00000000-0000-4000-8000-{:012x}",
        id.len() * 4099 + id.as_bytes()[0] as usize
    ));
    let mut w = StoreWriter::open(&dir, &record)
        .expect("store")
        .with_policy(FlushPolicy {
            rows: usize::MAX,
            interval: std::time::Duration::from_secs(3600),
        });
    w.push_event_at(0, 1.7e9, "start", start, "", "cpu");
    let mut previous = start.to_string();
    for (step, label) in changes {
        w.push_event_at(
            *step,
            1.7e9 + *step as f64,
            "regulariser on",
            "cos on",
            &previous,
            label,
        );
        previous = label.to_string();
    }
    for step in (50..=200).step_by(50) {
        let t = 1.7e9 + step as f64;
        w.push_metric_at(
            step,
            step as f64 / 100.0,
            t,
            split::TRAIN,
            "total",
            "loss",
            7.0 - step as f64 / 100.0,
        );
    }
    // The corpus's KN-3 reference, recorded as the run starts: gains are ln(REF / PPL).
    for (g, name) in GROUPS.iter().enumerate() {
        w.push_metric_at(0, 0.0, 1.7e9, split::VALID, name, "ref_ppl", REF[g]);
    }
    for e in evals {
        let t = 1.7e9 + e.step as f64;
        let epoch = e.step as f64 / 100.0;
        for (g, name) in GROUPS.iter().enumerate() {
            w.push_metric_at(e.step, epoch, t, split::VALID, name, "ppl", e.ppl[g]);
            w.push_metric_at(e.step, epoch, t, split::VALID, name, "uniq", e.uniq[g]);
            w.push_metric_at(e.step, epoch, t, split::VALID, name, "human_uniq", HUMAN[g]);
            w.push_metric_at(e.step, epoch, t, split::EMBEDDING, name, "i1", e.i1[g]);
            // The companions of I(W), derived from it so that tests know them.
            for (metric, value) in [
                ("mean_norm", 1.0 + e.i1[g]),
                ("mean_cos", 1.0 - e.i1[g]),
                ("isoscore", e.i1[g] / 2.0),
                // A random matrix's IsoScore depends on the group's size only: 0.9g + 0.05.
                ("isoscore_random", 0.05 + 0.9 * g as f64 / 10.0),
            ] {
                w.push_metric_at(e.step, epoch, t, split::EMBEDDING, name, metric, value);
            }
        }
        w.push_event_at(
            e.step,
            t,
            "checkpoint",
            &format!("{id}/step-{:06}", e.step),
            "",
            "",
        );
    }
    w.flush().expect("flush");
    dir
}

struct Runs {
    _tmp: tempfile::TempDir,
    mle: PathBuf,
    cos: PathBuf,
    agg: PathBuf,
}

fn runs() -> Runs {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mle = make_run(
        tmp.path(),
        "mle",
        "MLE",
        &[],
        &[
            Eval {
                step: 100,
                ppl: [150.0, 60.0, 300.0, 2000.0],
                uniq: [900.0, 300.0, 500.0, 100.0],
                i1: [0.4, 0.7, 0.35, 0.3],
            },
            Eval {
                step: 200,
                ppl: [120.0, 50.0, 250.0, 1800.0],
                uniq: [950.0, 320.0, 520.0, 110.0],
                i1: [0.45, 0.72, 0.4, 0.33],
            },
        ],
    );
    let cos = make_run(
        tmp.path(),
        "cos",
        "MLE",
        &[(50, "CosReg γ=1")],
        &[
            Eval {
                step: 100,
                ppl: [160.0, 62.0, 310.0, 1500.0],
                uniq: [1000.0, 310.0, 560.0, 130.0],
                i1: [0.7, 0.8, 0.7, 0.65],
            },
            Eval {
                step: 200,
                ppl: [125.0, 52.0, 240.0, 1400.0],
                uniq: [1050.0, 330.0, 580.0, 140.0],
                i1: [0.8, 0.85, 0.78, 0.75],
            },
        ],
    );
    let agg = make_run(
        tmp.path(),
        "agg",
        "AGG α=0.03",
        &[],
        &[
            Eval {
                step: 100,
                ppl: [110.0, 55.0, 260.0, 900.0],
                uniq: [1100.0, 300.0, 600.0, 200.0],
                i1: [0.6, 0.7, 0.6, 0.55],
            },
            Eval {
                step: 200,
                ppl: [130.0, 58.0, 280.0, 950.0],
                uniq: [1080.0, 305.0, 590.0, 185.0],
                i1: [0.62, 0.71, 0.61, 0.57],
            },
        ],
    );
    Runs {
        _tmp: tmp,
        mle,
        cos,
        agg,
    }
}

fn request(runs: Vec<PathBuf>, table: Table, format: Format) -> ExportRequest {
    ExportRequest {
        runs,
        table,
        format,
        step: None,
        split: None,
        metrics: Vec::new(),
        words: Vec::new(),
        k: 5,
        aggregate_seeds: false,
        paired_with: None,
    }
}

fn text(req: &ExportRequest) -> String {
    let table = conelab_export::build(req).expect("build");
    assert!(table.warnings.is_empty(), "{:?}", table.warnings);
    String::from_utf8(conelab_export::render(&table, req.format).expect("render")).expect("utf-8")
}

#[test]
fn groups_table_in_markdown_marks_the_best_of_each_column() {
    let r = runs();
    let md = text(&request(
        vec![r.mle.clone(), r.cos.clone(), r.agg.clone()],
        Table::Groups,
        Format::Markdown,
    ));
    insta::assert_snapshot!("groups_last_md", md);
    // Independent of the snapshot: the best rare PPL at step 200 is AGG's 950, the best total
    // I(W) is CosReg's 0.800; the Human row carries the reference Uniq and nothing in bold.
    let agg_row = md
        .lines()
        .find(|l| l.starts_with("| AGG"))
        .expect("AGG row");
    assert!(agg_row.contains("**950.00**"), "{agg_row}");
    let cos_row = md
        .lines()
        .find(|l| l.starts_with("| CosReg"))
        .expect("CosReg row");
    assert!(cos_row.contains("**0.800**"), "{cos_row}");
    // IsoScore (I(W)/2 here) is a score too: CosReg's total 0.400 in bold; mean norm (1.800) and
    // mean cosine are not scores: never bold.
    assert!(cos_row.contains("**0.400**"), "{cos_row}");
    assert!(cos_row.contains("| 1.800 |"), "{cos_row}");
    let header = md.lines().next().expect("header");
    assert_eq!(header.matches("IsoScore").count(), 4, "{header}");
    // The KN-3 reference and the gain over it: MLE's frequent PPL 50 against 100 gains ln 2, its
    // rare 1800 against 2000 ln(10/9); never bold (it orders the runs as PPL does).
    let mle_row = md
        .lines()
        .find(|l| l.starts_with("| MLE"))
        .expect("MLE row");
    assert!(
        mle_row.contains("| 100.0 | 0.69 |") && mle_row.contains("| 2000.0 | 0.11 |"),
        "{mle_row}"
    );
    assert!(
        agg_row.contains(&format!("| 2000.0 | {:.2} |", (2000.0f64 / 950.0).ln())),
        "{agg_row}"
    );
    assert_eq!(header.matches("KN-3 PPL").count(), 4, "{header}");
    // IsoScore's random baseline beside it, per group, never bold (not a score).
    assert_eq!(header.matches("Iso. random").count(), 4, "{header}");
    assert!(
        cos_row.contains("| 0.050 |") && cos_row.contains("| 0.320 |"),
        "{cos_row}"
    );
    let human = md
        .lines()
        .find(|l| l.starts_with("| Human"))
        .expect("Human row");
    assert!(
        human.contains("| 1500 |") && !human.contains("**"),
        "{human}"
    );
}

#[test]
fn best_takes_each_run_at_its_lowest_total_perplexity() {
    let r = runs();
    let mut req = request(
        vec![r.mle.clone(), r.agg.clone()],
        Table::Groups,
        Format::Csv,
    );
    req.step = Some(StepChoice::Best);
    let table = conelab_export::build(&req).expect("build");
    let steps: Vec<Option<u64>> = table
        .frame
        .column("step")
        .expect("step")
        .u64()
        .expect("u64")
        .iter()
        .collect();
    // MLE is best at its last evaluation (120 < 150), AGG at its first (110 < 130); the Human
    // row has no step.
    assert_eq!(steps, vec![Some(200), Some(100), None]);
    let total: Vec<Option<f64>> = table
        .frame
        .column("total_ppl")
        .expect("col")
        .f64()
        .expect("f64")
        .iter()
        .collect();
    assert_eq!(total, vec![Some(120.0), Some(110.0), None]);
    insta::assert_snapshot!("groups_best_csv", text(&req));
}

#[test]
fn the_run_name_is_the_objective_in_force_at_the_step() {
    let r = runs();
    let mut req = request(vec![r.cos.clone()], Table::Groups, Format::Csv);
    req.step = Some(StepChoice::At(100));
    let table = conelab_export::build(&req).expect("build");
    let names: Vec<String> = table
        .frame
        .column("run")
        .expect("run")
        .str()
        .expect("str")
        .iter()
        .map(|v| v.unwrap_or_default().to_string())
        .collect();
    assert_eq!(names[0], "CosReg γ=1");
    // Two runs with the same label are told apart by their id.
    let req = request(
        vec![r.mle.clone(), r.mle.clone()],
        Table::Groups,
        Format::Markdown,
    );
    let md = text(&req);
    assert!(md.contains("| MLE (mle) |"), "{md}");
}

#[test]
fn groups_table_in_latex_is_booktabs_and_balanced() {
    let r = runs();
    let tex = text(&request(
        vec![r.mle.clone(), r.cos.clone(), r.agg.clone()],
        Table::Groups,
        Format::Latex,
    ));
    insta::assert_snapshot!("groups_last_latex", tex);
    let mut depth = 0i64;
    let mut prev = '\0';
    for ch in tex.chars() {
        if prev != '\\' {
            match ch {
                '{' => depth += 1,
                '}' => depth -= 1,
                _ => {}
            }
            assert!(depth >= 0, "unbalanced braces:\n{tex}");
        }
        prev = ch;
    }
    assert_eq!(depth, 0, "unbalanced braces:\n{tex}");
    let pos = |needle: &str| {
        tex.find(needle)
            .unwrap_or_else(|| panic!("{needle} missing:\n{tex}"))
    };
    assert!(pos("\\begin{tabular}") < pos("\\toprule"));
    assert!(pos("\\toprule") < pos("\\midrule") && pos("\\midrule") < pos("\\bottomrule"));
    assert!(pos("\\bottomrule") < pos("\\end{tabular}"));
    // Every body row has as many cells as the column spec has columns: Run, Step, 4 groups × 9
    // (PPL, KN-3 PPL, gain, Uniq, I(W), norm, cosine, IsoScore, its random baseline).
    let spec_start = pos("\\begin{tabular}{") + "\\begin{tabular}{".len();
    let spec: String = tex[spec_start..]
        .chars()
        .take_while(|c| *c != '}')
        .collect();
    assert_eq!(spec.len(), 2 + 4 * 9, "{spec}");
    let body = &tex[pos("\\midrule") + 8..pos("\\bottomrule")];
    let rows: Vec<&str> = body.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(rows.len(), 4, "3 runs + Human:\n{body}");
    for row in rows {
        assert_eq!(row.matches(" & ").count(), spec.len() - 1, "{row}");
        assert!(row.trim_end().ends_with("\\\\"), "{row}");
    }
    assert!(
        tex.contains("CosReg $\\gamma$=1") && tex.contains("\\textbf{950.00}"),
        "{tex}"
    );
    compile_if_pdflatex(&tex);
}

/// Compiles the table in a minimal document when pdflatex is installed.
fn compile_if_pdflatex(tabular: &str) {
    let found = std::process::Command::new("pdflatex")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        eprintln!("SKIPPED (pdflatex compile): pdflatex is not installed; structure checked above");
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let doc = format!(
        "\\documentclass{{article}}\n\\usepackage{{booktabs}}\n\\begin{{document}}\n{tabular}\\end{{document}}\n"
    );
    std::fs::write(tmp.path().join("t.tex"), doc).expect("write");
    let out = std::process::Command::new("pdflatex")
        .args(["-interaction=nonstopmode", "-halt-on-error", "t.tex"])
        .current_dir(tmp.path())
        .output()
        .expect("pdflatex runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn curves_put_chosen_metrics_side_by_side_by_step() {
    let r = runs();
    let mut req = request(
        vec![r.mle.clone(), r.cos.clone()],
        Table::Curves,
        Format::Csv,
    );
    req.metrics = vec![
        "train/loss".into(),
        "valid/rare/ppl".into(),
        "embedding/i1".into(),
    ];
    let csv = text(&req);
    insta::assert_snapshot!("curves_csv", csv);
    // The name a run goes by beside its folder's (unnamed: the same), as the groups table.
    assert!(
        csv.lines()
            .next()
            .is_some_and(|h| h.starts_with("run_id,run,run_uuid,step,")),
        "{csv}"
    );
    // Independent of the snapshot: MLE's train loss at step 100 is 7 − 100/100 = 6 and its rare
    // PPL there 2000; CosReg's rare PPL at step 200 is 1400.
    let row = |run: &str, step: &str| {
        csv.lines()
            .find(|l| l.starts_with(&format!("{run},")) && l.split(',').nth(3) == Some(step))
            .unwrap_or_else(|| panic!("no {run} row at {step}:\n{csv}"))
            .to_string()
    };
    let mle100: Vec<String> = row("mle", "100").split(',').map(String::from).collect();
    assert!(
        mle100.contains(&"6".to_string()) || mle100.contains(&"6.0".to_string()),
        "{mle100:?}"
    );
    assert!(
        mle100.iter().any(|c| c.parse::<f64>() == Ok(2000.0)),
        "{mle100:?}"
    );
    assert!(
        row("cos", "200")
            .split(',')
            .any(|c| c.parse::<f64>() == Ok(1400.0))
    );
}

#[test]
fn events_and_metrics_export_as_csv_json_and_parquet() {
    let r = runs();
    let events = text(&request(vec![r.cos.clone()], Table::Events, Format::Csv));
    insta::assert_snapshot!("events_csv", events);
    // Independent: the switch-on at step 50 with its before and after, and the two checkpoints.
    assert!(
        events.lines().any(|l| l.contains(",50,")
            && l.contains("regulariser on")
            && l.contains("CosReg γ=1")),
        "{events}"
    );
    assert_eq!(
        events.lines().filter(|l| l.contains("checkpoint")).count(),
        2
    );
    let mut req = request(vec![r.mle.clone()], Table::Metrics, Format::Csv);
    req.step = Some(StepChoice::At(100));
    req.split = Some("valid".into());
    let metrics = text(&req);
    insta::assert_snapshot!("metrics_step100_valid_csv", metrics);
    // Independent: MLE's rare PPL at step 100 was written as 2000, its total Uniq as 900.
    assert!(
        metrics.lines().any(|l| l.contains(",rare,ppl,2000")),
        "{metrics}"
    );
    assert!(
        metrics.lines().any(|l| l.contains(",total,uniq,900")),
        "{metrics}"
    );

    // JSON parses back to the same values.
    let req = request(
        vec![r.mle.clone(), r.agg.clone()],
        Table::Groups,
        Format::Json,
    );
    let json: serde_json::Value = serde_json::from_str(&text(&req)).expect("json");
    let rows = json.as_array().expect("array of rows");
    assert_eq!(rows.len(), 3);
    assert_eq!(rows[0]["run"], "MLE");
    assert_eq!(rows[0]["rare_ppl"], 1800.0);
    assert_eq!(rows[1]["medium_i_w"], 0.61);
    // Beside I(W): mean norm 1 + I(W), mean cosine 1 − I(W), IsoScore I(W)/2 as written.
    assert_eq!(rows[1]["medium_mean_norm"], 1.61);
    assert!((rows[1]["medium_mean_cos"].as_f64().expect("cos") - 0.39).abs() < 1e-12);
    assert_eq!(rows[1]["medium_isoscore"], 0.305);
    assert!(
        rows[2]["medium_isoscore"].is_null(),
        "the Human row has none"
    );
    assert_eq!(rows[2]["run"], "Human");
    assert_eq!(rows[2]["frequent_uniq"], 400.0);

    // Parquet reads back to the frame that was written.
    let req = request(
        vec![r.mle.clone(), r.cos.clone()],
        Table::Metrics,
        Format::Parquet,
    );
    let table = conelab_export::build(&req).expect("build");
    let bytes = conelab_export::render(&table, Format::Parquet).expect("parquet");
    use polars_io::prelude::{ParquetReader, SerReader};
    let back = ParquetReader::new(std::io::Cursor::new(bytes))
        .finish()
        .expect("read back");
    assert!(back.equals_missing(&table.frame));
    // Per run: 4 training losses, and per evaluation and group PPL, Uniq, Human Uniq, I(W) and
    // its four companions, and the KN-3 reference per group.
    assert_eq!(back.height(), 2 * (4 + 4 + 2 * 4 * 8));
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

#[test]
fn the_command_line_writes_files_atomically_and_refuses_bad_input_in_one_line() {
    let r = runs();
    let out_file = r.mle.parent().expect("root").join("table.tex");
    let ok = conelab(&["export", s(&r.mle), s(&r.cos), "--out", s(&out_file)]);
    succeeded(&ok);
    let tex = std::fs::read_to_string(&out_file).expect("written");
    assert!(
        tex.starts_with("\\begin{tabular}"),
        "format from the extension: {tex}"
    );

    // An extension no format has: refused, nothing written (Markdown went into a .xlsx).
    let sheet = r.mle.parent().expect("root").join("table.xlsx");
    assert_one_line_error(
        &conelab(&["export", s(&r.mle), "--out", s(&sheet)]),
        &["table.xlsx", ".xlsx", "--format"],
    );
    assert!(!sheet.exists());

    let missing = r.mle.parent().expect("root").join("nope");
    assert_one_line_error(&conelab(&["export", s(&missing)]), &["nope", "no such run"]);
    assert_one_line_error(
        &conelab(&[
            "export",
            s(&r.mle),
            "--table",
            "curves",
            "--metric",
            "valid/pll",
        ]),
        &["unknown metric 'valid/pll'", "valid/ppl"],
    );
    assert_one_line_error(
        &conelab(&["export", s(&r.mle), "--step", "150"]),
        &["no valid evaluation at step 150", "100, 200"],
    );
    assert_one_line_error(
        &conelab(&["export", s(&r.mle), "--step", "soon"]),
        &["soon"],
    );
    assert_one_line_error(
        &conelab(&["export", s(&r.mle), "--split", "train"]),
        &["unknown split 'train'"],
    );
    assert_one_line_error(
        &conelab(&["export", s(&r.mle), "--table", "neighbors"]),
        &["--words"],
    );
    let empty = r.mle.parent().expect("root").join("empty");
    std::fs::create_dir_all(&empty).expect("mkdir");
    assert_one_line_error(&conelab(&["export", s(&empty)]), &["no metrics store"]);
}

/// Seeds of one setting: only the seed and the name differ in their run.toml.
fn seed_run(root: &Path, id: &str, seed: u64, steps: u64, start: &str, ppl: [f64; 4]) -> PathBuf {
    let config = format!(
        "conelab_version = \"0.1.{seed}\"\nname = \"{id}\"\n[train]\nsteps = {steps}\nseed = {seed}\n"
    );
    let eval = Eval {
        step: 100,
        ppl,
        uniq: [900.0 + seed as f64, 300.0, 500.0, 100.0],
        i1: [0.4, 0.7, 0.35, 0.3 + 0.01 * seed as f64],
    };
    make_run_of(root, id, &config, start, &[], &[eval])
}

#[test]
fn seeds_of_one_setting_aggregate_into_mean_std_and_count() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    let runs = vec![
        seed_run(root, "mle-1", 1, 100, "MLE", [120.0, 50.0, 250.0, 1800.0]),
        seed_run(
            root,
            "cos-1",
            1,
            100,
            "CosReg γ=1",
            [130.0, 52.0, 240.0, 1400.0],
        ),
        seed_run(root, "mle-2", 2, 100, "MLE", [126.0, 52.0, 260.0, f64::NAN]),
        seed_run(root, "mle-3", 3, 100, "MLE", [129.0, 54.0, 255.0, 1700.0]),
        seed_run(
            root,
            "cos-2",
            2,
            100,
            "CosReg γ=1",
            [134.0, 50.0, 230.0, 1300.0],
        ),
        // Same objective, another setting (more steps): a row of its own.
        seed_run(
            root,
            "mle-long",
            1,
            400,
            "MLE",
            [110.0, 45.0, 200.0, 1500.0],
        ),
    ];
    let mut req = request(runs.clone(), Table::Groups, Format::Csv);
    req.aggregate_seeds = true;
    let json = {
        let mut r = req.clone();
        r.format = Format::Json;
        text(&r)
    };
    let json: serde_json::Value = serde_json::from_str(&json).expect("json");
    let rows = json.as_array().expect("rows");
    // MLE ×3, CosReg ×2, the long MLE, Human — in the order each setting's first run came.
    assert_eq!(rows.len(), 4, "{json}");
    let f = |v: &serde_json::Value| v.as_f64().unwrap_or(f64::NAN);
    let mle = &rows[0];
    assert_eq!(mle["seeds"], 3);
    assert_eq!(mle["run_ids"], "mle-1,mle-2,mle-3");
    assert!(
        mle["run"].as_str().is_some_and(|r| r.starts_with("MLE (")),
        "{mle}"
    );
    // By hand: total PPL 120, 126, 129 → mean 125, sample std √((25 + 1 + 16)/2) = √21.
    assert!((f(&mle["total_ppl_mean"]) - 125.0).abs() < 1e-9);
    assert!((f(&mle["total_ppl_std"]) - 21f64.sqrt()).abs() < 1e-9);
    assert_eq!(mle["total_ppl_n"], 3);
    // The seeds' 95 % t-interval (methods.md §4): t(0.975, 2) = 4.303 × √21/√3 = 11.38.
    assert!((f(&mle["total_ppl_ci95"]) - 4.302_653 * 7f64.sqrt()).abs() < 1e-3);
    // Seed 2's rare PPL is NaN: two values, 1800 and 1700 → 1750 ± √5000.
    assert_eq!(mle["rare_ppl_n"], 2);
    assert!((f(&mle["rare_ppl_mean"]) - 1750.0).abs() < 1e-9);
    assert!((f(&mle["rare_ppl_std"]) - 5000f64.sqrt()).abs() < 1e-9);
    // Uniq 901, 902, 903 → 902 ± 1.
    assert!((f(&mle["total_uniq_mean"]) - 902.0).abs() < 1e-9);
    assert!((f(&mle["total_uniq_std"]) - 1.0).abs() < 1e-9);
    let cos = &rows[1];
    assert_eq!(
        (cos["run"].as_str(), cos["seeds"].as_u64()),
        (Some("CosReg γ=1"), Some(2))
    );
    assert!((f(&cos["total_ppl_mean"]) - 132.0).abs() < 1e-9);
    assert!((f(&cos["total_ppl_std"]) - 8f64.sqrt()).abs() < 1e-9);
    let long = &rows[2];
    assert_eq!(
        (long["seeds"].as_u64(), long["run_ids"].as_str()),
        (Some(1), Some("mle-long"))
    );
    assert!(long["total_ppl_std"].is_null(), "one seed has no spread");
    assert!(long["total_ppl_ci95"].is_null(), "nor an interval");
    assert_eq!(rows[3]["run"], "Human");

    // CSV: the same four columns per cell.
    let csv = text(&req);
    let header = csv.lines().next().expect("header");
    assert!(
        header.contains("total_ppl_mean,total_ppl_std,total_ppl_n,total_ppl_ci95"),
        "{header}"
    );

    // Markdown: mean ± std in one cell, the count where it is short, best mean in bold.
    req.format = Format::Markdown;
    let md = text(&req);
    let line = |label: &str| {
        md.lines()
            .find(|l| l.starts_with(&format!("| {label}")))
            .unwrap_or_else(|| panic!("{label} row:\n{md}"))
            .to_string()
    };
    let mle_line = line("MLE (mle-1)");
    // mean ± std [the 95 % interval]: 125 ± 11.38.
    assert!(
        mle_line.contains("125.00 ± 4.58 [113.62, 136.38]"),
        "{mle_line}"
    );
    // Two values: t(0.975, 1) = 12.706 × 70.71/√2 = 635.3.
    assert!(
        mle_line.contains("1750.00 ± 70.71 [1114.69, 2385.31] (n=2)"),
        "{mle_line}"
    );
    // A whole-number column keeps the spread's digits: 902 ± 1 has its first decimal (issue
    // #37: 10.5 ± 0.71 printed as 10 ± 1).
    assert!(mle_line.contains("902.0 ± 1.0"), "{mle_line}");
    assert!(
        line("MLE (mle-long)").contains("**110.00**"),
        "lowest total PPL mean:\n{md}"
    );
    // Medium Uniq is 500 in every run: a tie everywhere has no best.
    assert!(!md.contains("**500**"), "a column of ties in bold:\n{md}");
    assert!(
        !md.contains("run ids") && !md.contains(" std |"),
        "partners hidden:\n{md}"
    );
    assert!(
        md.lines().next().is_some_and(|h| h.contains("| Seeds |")),
        "{md}"
    );

    req.format = Format::Latex;
    let tex = text(&req);
    assert!(tex.contains("125.00 $\\pm$ 4.58"), "{tex}");
    assert!(tex.contains("\\textbf{110.00}"), "{tex}");
    compile_if_pdflatex(&tex);

    // Only the groups table aggregates.
    let out = conelab(&[
        "export",
        s(&runs[0]),
        "--table",
        "curves",
        "--aggregate",
        "seeds",
    ]);
    assert_one_line_error(&out, &["--aggregate seeds applies to --table groups"]);
}

/// methods.md §4: a difference between two settings is read from the per-seed paired
/// differences, each run against the baseline's run of the same seed.
#[test]
fn paired_differences_pair_each_run_with_the_baselines_run_of_its_seed() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    let cos = "CosReg γ=1";
    // Given out of seed order, so that pairing by position would be wrong.
    let runs = vec![
        seed_run(root, "mle-1", 1, 100, "MLE", [120.0, 50.0, 250.0, 1800.0]),
        seed_run(root, "mle-2", 2, 100, "MLE", [126.0, 52.0, 260.0, 1750.0]),
        seed_run(root, "mle-3", 3, 100, "MLE", [129.0, 54.0, 255.0, 1700.0]),
        seed_run(root, "cos-3", 3, 100, cos, [135.0, 55.0, 250.0, 1650.0]),
        seed_run(root, "cos-1", 1, 100, cos, [130.0, 52.0, 240.0, 1400.0]),
        seed_run(root, "cos-2", 2, 100, cos, [134.0, 50.0, 230.0, 1900.0]),
    ];
    let mut req = request(runs.clone(), Table::Groups, Format::Json);
    req.aggregate_seeds = true;
    req.paired_with = Some("mle-2".into());
    let json: serde_json::Value = serde_json::from_str(&text(&req)).expect("json");
    let rows = json.as_array().expect("rows");
    assert_eq!(rows.len(), 1, "the baseline has no row of its own: {json}");
    let row = &rows[0];
    let f = |k: &str| row[k].as_f64().unwrap_or(f64::NAN);
    assert_eq!(row["seeds"], 3);
    assert_eq!(row["run"], "CosReg γ=1 − MLE");
    // By hand, total: 130 − 120, 134 − 126, 135 − 129 = 10, 8, 6 → 8 ± 2, and the t-interval
    // of the differences, t(0.975, 2)·2/√3 = 4.968 (not the two settings' own spreads).
    assert!((f("total_ppl_mean") - 8.0).abs() < 1e-9);
    assert!((f("total_ppl_std") - 2.0).abs() < 1e-9);
    assert!((f("total_ppl_ci95") - 4.302_653 * 2.0 / 3f64.sqrt()).abs() < 1e-3);
    // Rare: −400, +150, −50 → −100, std √(((−300)² + 250² + 50²)/2) = √77,500.
    assert!((f("rare_ppl_mean") + 100.0).abs() < 1e-9);
    assert!((f("rare_ppl_std") - 77_500f64.sqrt()).abs() < 1e-9);
    // Uniq differs only by seed (900 + seed) in both: every difference 0.
    assert!(f("total_uniq_mean").abs() < 1e-12 && f("total_uniq_std").abs() < 1e-12);

    // Bold where the interval excludes 0: total PPL's [3.03, 12.97] does, Rare's does not.
    req.format = Format::Markdown;
    let md = text(&req);
    assert!(md.contains("**8.00 ± 2.00 [3.03, 12.97]**"), "{md}");
    assert!(
        md.contains("-100.00 ± 278.39") && !md.contains("**-100.00"),
        "{md}"
    );
    assert!(!md.contains("Human"), "{md}");

    // Through the binary: by folder; a baseline not given, or a seed without its partner, is bad
    // input.
    let mut args: Vec<String> = ["export", "--aggregate", "seeds", "--format", "json"]
        .map(String::from)
        .to_vec();
    args.extend(runs.iter().map(|r| s(r).to_string()));
    let run = |extra: &[String]| {
        let mut all = args.clone();
        all.extend_from_slice(extra);
        conelab(&all.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let out = run(&["--paired-with".into(), s(&runs[0]).into()]);
    succeeded(&out);
    let by_folder: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(by_folder[0]["total_ppl_mean"], 8.0);
    assert_one_line_error(
        &run(&["--paired-with".into(), "nobody".into()]),
        &["--paired-with nobody", "no run"],
    );
    let lone = seed_run(root, "cos-4", 4, 100, cos, [131.0, 51.0, 241.0, 1401.0]);
    assert_one_line_error(
        &run(&["--paired-with".into(), "mle-1".into(), s(&lone).into()]),
        &["cos-4", "seed 4", "no run of mle-1"],
    );
}

#[test]
fn the_config_table_flattens_each_run_toml_with_the_differing_keys_first() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    let eval = || Eval {
        step: 100,
        ppl: [120.0, 50.0, 250.0, 1800.0],
        uniq: [900.0, 300.0, 500.0, 100.0],
        i1: [0.4, 0.7, 0.35, 0.3],
    };
    let config = |lr: &str, seed: u64, extra: &str| {
        format!(
            "name = \"r\"\n[corpus.dir]\npath = \"/data/ptb\"\n[model.transformer]\nlayers = 2\n[train]\nlr = {lr}\nseed = {seed}\nsteps = 100\n{extra}"
        )
    };
    let a = make_run_of(root, "a", &config("0.001", 1, ""), "MLE", &[], &[eval()]);
    let b = make_run_of(
        root,
        "b",
        &config("0.0003", 1, "clip = 1.0\n"),
        "MLE",
        &[],
        &[eval()],
    );
    let c = make_run_of(root, "c", &config("0.001", 2, ""), "MLE", &[], &[eval()]);
    let req = request(vec![a, b, c], Table::Config, Format::Csv);
    let csv = text(&req);
    let mut lines = csv.lines();
    // Differing (or missing somewhere) first, sorted; then the shared ones, sorted.
    assert_eq!(
        lines.next(),
        Some(
            "run_id,run,run_uuid,train.clip,train.lr,train.seed,corpus.dir.path,model.transformer.layers,name,train.steps"
        )
    );
    // `run` is the name a run goes by (unnamed here: its folder's), as in the groups table.
    // run_uuid: the record's (the fixture fixes it from the id).
    let uuid = |n: usize| format!("00000000-0000-4000-8000-{n:012x}");
    let line = |id: &str, n: usize, rest: &str| format!("{id},{id},{},{rest}", uuid(n));
    assert_eq!(
        lines.next(),
        Some(line("a", 4099 + 97, ",0.001,1,/data/ptb,2,r,100").as_str())
    );
    assert_eq!(
        lines.next(),
        Some(line("b", 4099 + 98, "1.0,0.0003,1,/data/ptb,2,r,100").as_str())
    );
    assert_eq!(
        lines.next(),
        Some(line("c", 4099 + 99, ",0.001,2,/data/ptb,2,r,100").as_str())
    );
    assert_eq!(lines.next(), None);
    let mut md = req.clone();
    md.format = Format::Markdown;
    let md = text(&md);
    assert!(
        md.starts_with("| run_id | run | train.clip | train.lr |"),
        "{md}"
    );
    assert!(md.contains("| b | b | 1.0 | 0.0003 | 1 |"), "{md}");
}

/// Issue #58: `--help` said the groups table held "PPL, Uniq, I(W)" where it holds nine columns
/// a group: the help names every one.
#[test]
fn the_groups_tables_help_names_every_column_it_has() {
    let f = crate::harness::Fixture::new();
    crate::harness::succeeded(&f.train(
        "run",
        &[
            "--headless",
            "--steps",
            "2",
            "--eval-every",
            "2",
            "--snapshot-every",
            "2",
        ],
    ));
    let out = crate::harness::conelab(&[
        "export",
        crate::harness::s(&f.path("run")),
        "--table",
        "groups",
        "--format",
        "csv",
    ]);
    let csv = String::from_utf8_lossy(&out.stdout).to_string();
    let header = csv.lines().next().expect("a header");
    let help = String::from_utf8_lossy(&crate::harness::conelab(&["export", "--help"]).stdout)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    let said = [
        ("_kn3_ppl", "KN-3 reference's PPL"),
        ("_kn3_gain", "gain over it"),
        ("_isoscore_random", "random matrix's IsoScore"),
        ("_ppl", "PPL"),
        ("_uniq", "Uniq"),
        ("_i_w", "I(W)"),
        ("_mean_norm", "mean norm"),
        ("_mean_cos", "mean cosine"),
        ("_isoscore", "IsoScore"),
    ];
    for column in header.split(',').filter(|c| c.starts_with("frequent_")) {
        let (_, words) = said
            .iter()
            .find(|(end, _)| column.ends_with(end))
            .unwrap_or_else(|| panic!("{column}: a column the test does not know"));
        assert!(help.contains(words), "{column}: `{words}` not in the help");
    }
    assert_eq!(
        header
            .split(',')
            .filter(|c| c.starts_with("frequent_"))
            .count(),
        9,
        "{header}"
    );
    // Uniq is a count: `17`, not `17.0`.
    let at = header
        .split(',')
        .position(|c| c == "total_uniq")
        .expect("total_uniq");
    let row = csv.lines().nth(1).expect("a row");
    let uniq = row.split(',').nth(at).expect("a cell");
    assert!(uniq.parse::<u64>().is_ok(), "total_uniq {uniq:?} in {row}");
}
