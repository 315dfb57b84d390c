//! `conelab eval` and `conelab inspect` through the real binary: a small trained run, foreign
//! `.npy` and `.safetensors` matrices, the documented JSON keys, and bad input as one-line errors.

use std::path::Path;

use crate::harness::{Fixture, assert_one_line_error, conelab, s, succeeded};
use serde_json::Value;

fn json(out: &std::process::Output) -> Value {
    succeeded(out);
    serde_json::from_slice(&out.stdout).expect("valid JSON")
}

/// The bytes of a .npy file (format 1.0) with the given dtype, shape and raw data.
fn npy_bytes(descr: &str, shape: &str, data: &[u8]) -> Vec<u8> {
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend_from_slice(data);
    bytes
}

/// A little-endian f32, C-order .npy file.
fn write_npy(path: &Path, rows: usize, cols: usize, data: &[f32]) {
    let raw: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(path, npy_bytes("<f4", &format!("({rows}, {cols})"), &raw)).expect("write npy");
}

#[test]
fn eval_and_inspect_a_trained_run() {
    let fx = Fixture::new();
    let run = fx.path("run");
    let out = fx.train(
        "run",
        &["--steps", "6", "--eval-every", "0", "--snapshot-every", "3"],
    );
    let log = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{log}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The engine's metrics worker reports snapshots before the run finishes. Snapshots are
    // latest-wins (a busy worker skips to the newest), so step 3 may be skipped on a loaded
    // machine; the final one never is, and nothing but snapshot steps is reported.
    let emb: Vec<&str> = log
        .lines()
        .filter(|l| l.starts_with("embedding step="))
        .collect();
    assert!(
        emb.iter()
            .all(|l| l.starts_with("embedding step=3 ") || l.starts_with("embedding step=6 ")),
        "{log}"
    );
    assert!(
        emb.iter().any(|l| l.starts_with("embedding step=6 ")),
        "{log}"
    );
    let finished = log.find("finished step=6").expect("finished line");
    assert!(log.find("embedding step=6 ").expect("last embedding") < finished);

    let e = json(&conelab(&["eval", s(&run), "--json", "--split", "test"]));
    assert_eq!(e["step"], 6);
    assert_eq!(e["split"], "test");
    let o = &e["outputs"];
    let groups = &o["groups"];
    let positions: u64 = ["frequent", "medium", "rare"]
        .iter()
        .map(|g| groups[g]["positions"].as_u64().expect("positions"))
        .sum();
    assert_eq!(positions, o["positions"].as_u64().expect("positions"));
    let uniq: u64 = ["frequent", "medium", "rare"]
        .iter()
        .map(|g| groups[g]["uniq"].as_u64().expect("uniq"))
        .sum();
    assert_eq!(
        uniq,
        o["uniq"].as_u64().expect("uniq"),
        "groups partition the predicted ids"
    );
    // unnormalised PPL = PPL · exp(−μ_z).
    let (ppl, mu, un) = (
        o["ppl"].as_f64().expect("ppl"),
        o["mu_z"].as_f64().expect("mu_z"),
        o["unnormalised_ppl"].as_f64().expect("unnormalised"),
    );
    assert!((un - ppl * (-mu).exp()).abs() < 1e-6 * un.max(1.0));
    assert!(e["embedding"]["groups"]["rare"]["i1"].as_f64().is_some());
    // The hidden states of test's fixed sample: as many places as the split has targets up to
    // 4,096, a verdict whose certificate the report carries and whose check agrees with it.
    let h = &e["hidden"];
    let places = h["positions"].as_u64().expect("positions");
    assert_eq!(
        places,
        o["positions"].as_u64().expect("positions").min(4096)
    );
    let margin = h["margin"].as_f64().expect("margin");
    let certificate = h["certificate"].as_f64().expect("certificate");
    if h["separable"] == true {
        assert_eq!(h["direction"].as_array().expect("u").len(), 16);
        // The true margin lies between the checked min_t u·ĥ_t and the found point's norm,
        // which are a Wolfe tolerance apart (1e-10 of the unit rows' scale, over the margin).
        assert!(
            certificate > 0.0 && certificate <= margin * (1.0 + 1e-12),
            "{h}"
        );
        assert!(margin - certificate <= 1e-9 / margin, "{h}");
    } else {
        let weights = h["weights"].as_array().expect("weights");
        let sum: f64 = weights.iter().map(|w| w[1].as_f64().expect("λ")).sum();
        assert!((sum - 1.0).abs() < 1e-9 && certificate < 1e-6, "{h}");
        assert_eq!(margin, 0.0);
    }
    assert_eq!(h["self_sim"].as_array().expect("self-sim").len(), 3);
    // The later literature's W measures beside IsoScore.
    for key in ["abtt_top_variance", "abtt_mean_cos", "rogue_share"] {
        assert!(e["embedding"][key].as_f64().is_some(), "{key}");
    }
    // The shifted model: test split by default, shifted by the validation μ_z that a plain
    // `eval --split valid` reports; the uniform shift keeps PPL and σ_z and moves μ_z.
    let v = json(&conelab(&["eval", s(&run), "--json", "--split", "valid"]));
    let sh = json(&conelab(&[
        "eval",
        s(&run),
        "--json",
        "--shift-from",
        "valid",
    ]));
    assert_eq!(sh["split"], "test");
    let f = |v: &Value| v.as_f64().expect("number");
    let shifted = &sh["shifted"];
    let shift = f(&shifted["shift"]);
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs().max(1.0);
    assert!(
        close(shift, f(&v["outputs"]["mu_z"])),
        "{shifted} vs {}",
        v["outputs"]
    );
    assert!(close(f(&shifted["mu_z"]), mu - shift));
    assert!(close(f(&shifted["sigma_z"]), f(&o["sigma_z"])));
    assert!(close(f(&shifted["ppl"]), ppl));
    // −mean (s[y] − shift) = loss − μ_z + shift.
    let loss = f(&o["loss"]);
    assert!(close(
        f(&shifted["unnormalised_ppl"]),
        (loss - mu + shift).exp()
    ));
    assert!(e.get("shifted").is_none(), "only asked for");
    assert_eq!(shifted["shift_from"], "valid");
    // A shift fitted on the split it is scored on would flatter it: only valid is a source.
    let refused = conelab(&["eval", s(&run), "--shift-from", "test"]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("invalid value 'test' for '--shift-from"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    let table = conelab(&["eval", s(&run), "--shift-from", "valid"]);
    let text = String::from_utf8_lossy(&table.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("shifted model"))
        .expect("shifted row");
    assert!(line.contains(&format!("{:.4}", mu - shift)), "{line}");
    let md = conelab(&["eval", s(&run), s(&run), "--shift-from", "valid"]);
    let md = String::from_utf8_lossy(&md.stdout);
    assert!(
        md.contains("| u-perp |") && md.contains("shifted μ_z"),
        "{md}"
    );
    assert_eq!(
        md.matches(&format!("| {:.3} |", mu - shift)).count(),
        2,
        "{md}"
    );
    // The scale-free companions, beside i1 in every set.
    for set in [
        &e["embedding"],
        &e["embedding"]["groups"]["frequent"],
        &e["embedding"]["groups"]["rare"],
    ] {
        let iso = set["isoscore"].as_f64().expect("isoscore");
        assert!((0.0..=1.0).contains(&iso), "IsoScore {iso}");
        let i1u = set["i1_unit"].as_f64().expect("i1_unit");
        assert!(i1u > 0.0 && i1u <= 1.0, "i1_unit {i1u}");
        assert!(set["i2_unit"].as_f64().expect("i2_unit") >= 0.0);
    }
    assert!(
        e["class_precision"]["total"].as_f64().is_some(),
        "synthetic runs have classes"
    );
    let table = conelab(&["eval", s(&run)]);
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(
        text.contains("Uniq (human)") && text.contains("I1(W)"),
        "{text}"
    );
    // An MLE run has no cosine regulariser: Theorem 2 is not applicable, not a count.
    assert!(o["theorem2_threshold"].is_null(), "{o}");
    assert!(groups["rare"]["theorem2_below"].is_null(), "{o}");
    let thm = text
        .lines()
        .find(|l| l.starts_with("Thm-2 tokens below"))
        .expect("Theorem-2 row");
    assert_eq!(thm.matches("n/a").count(), 4, "{thm}");
    assert!(text.contains("Theorem-2 n/a"), "{text}");
    assert!(
        text.contains("IsoScore") && text.contains("I1 unit rows"),
        "{text}"
    );

    // inspect on the run: JSON keys and neighbours of a word of its vocabulary.
    let vocab = std::fs::read_to_string(run.join("vocab.tsv")).expect("vocab");
    let word = vocab
        .lines()
        .nth(5)
        .and_then(|l| l.split('\t').next())
        .expect("word")
        .to_owned();
    let i = json(&conelab(&[
        "inspect",
        s(&run),
        "--neighbors",
        &word,
        "-k",
        "4",
        "--json",
    ]));
    for key in [
        "n",
        "d",
        "i1",
        "i2",
        "i1_unit",
        "i2_unit",
        "isoscore",
        "mean_norm",
        "sv_norm",
        "effective_rank",
        "mean_cos",
        "groups",
        "neighbors",
    ] {
        assert!(i.get(key).is_some(), "missing key {key}");
    }
    assert_eq!(i["n"], 152);
    assert_eq!(i["d"], 16);
    assert_eq!(i["sv_norm"].as_array().expect("array").len(), 16);
    let nbrs = i["neighbors"][&word].as_array().expect("neighbours");
    assert_eq!(nbrs.len(), 4);
    let cos: Vec<f64> = nbrs
        .iter()
        .map(|n| n["cosine"].as_f64().expect("cosine"))
        .collect();
    assert!(cos.windows(2).all(|p| p[0] >= p[1]), "best first: {cos:?}");
    assert!(
        nbrs.iter().all(|n| n["token"] != word.as_str()),
        "query excluded"
    );
    // The same numbers as eval's embedding block (same checkpoint).
    assert_eq!(i["i1"], e["embedding"]["i1"]);
    assert_eq!(i["isoscore"], e["embedding"]["isoscore"]);
    assert_eq!(i["i1_unit"], e["embedding"]["i1_unit"]);

    // --compare: both reports (the same checkpoint twice gives the same numbers twice).
    let both = json(&conelab(&[
        "inspect",
        s(&run),
        "--compare",
        s(&run),
        "--json",
    ]));
    let both = both.as_array().expect("an array of two reports");
    assert_eq!(both.len(), 2);
    assert_eq!(both[0]["i1"], i["i1"]);
    assert_eq!(both[1]["i1"], i["i1"]);
    let missing = fx.path("nope");
    assert_one_line_error(
        &conelab(&["inspect", s(&run), "--compare", s(&missing)]),
        &["nope"],
    );

    // A misspelt word: one line naming close spellings.
    let typo = format!("{word}x");
    let out = conelab(&["inspect", s(&run), "--neighbors", &typo]);
    assert_one_line_error(&out, &["unknown word", &word]);
}

/// `inspect --stolen` on a foreign matrix with one row planted inside the others' hull (row 4 at
/// the origin, the other nine on the unit circle, every one a vertex) finds exactly that row, in
/// its group; the cheap
/// bound is at least as large; `--second-tier` gives every group's numbers; without counts
/// `--second-tier` is refused in one line before any work.
#[test]
fn inspect_finds_a_planted_stolen_row() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data: Vec<f32> = (0..10)
        .flat_map(|k| {
            let a = std::f32::consts::TAU * k as f32 / 10.0;
            if k == 4 {
                [0.0, 0.0]
            } else {
                [a.cos(), a.sin()]
            }
        })
        .collect();
    let npy = dir.path().join("w.npy");
    write_npy(&npy, 10, 2, &data);
    let counts = dir.path().join("counts.txt");
    std::fs::write(&counts, "90\n80\n70\n60\n1\n50\n40\n30\n20\n10\n").expect("counts");
    let v = json(&conelab(&[
        "inspect",
        s(&npy),
        "--counts",
        s(&counts),
        "--stolen",
        "--second-tier",
        "--format",
        "json",
    ]));
    let stolen = &v["stolen"];
    assert_eq!(stolen["total"]["stolen"], 1, "{stolen}");
    assert_eq!(stolen["total"]["undecided"], 0);
    // Count 1 is the lowest: row 4 is in the Rare group (the last 20 %: 2 rows).
    assert_eq!(stolen["rare"]["stolen"], 1, "{stolen}");
    assert_eq!(stolen["rare"]["rows"], 2);
    assert!(stolen["total"]["stolen_at_most"].as_u64().expect("bound") >= 1);
    assert_eq!(stolen["bias"], false);
    let tier = &v["second_tier"];
    for g in ["frequent", "medium", "rare"] {
        let mix = tier["neighbour_mix"][g].as_f64().expect("mix");
        assert!((0.0..=1.0).contains(&mix), "{tier}");
    }
    let text = String::from_utf8_lossy(
        &conelab(&["inspect", s(&npy), "--counts", s(&counts), "--stolen"]).stdout,
    )
    .to_string();
    assert!(text.contains("stolen probability"), "{text}");
    assert_one_line_error(
        &conelab(&["inspect", s(&npy), "--second-tier"]),
        &["--second-tier needs training counts"],
    );
}

/// A checkpoint with an output bias (DEV adds one) is inspected with it: stolen rows are decided
/// for h·Wᵀ + b, as the model scores.
#[test]
fn inspect_decides_stolen_rows_with_the_checkpoints_output_bias() {
    let fx = Fixture::new();
    let out = fx.train(
        "dev",
        &["--steps", "2", "--eval-every", "0", "--reg", "dev=0.1"],
    );
    succeeded(&out);
    let v = json(&conelab(&[
        "inspect",
        s(&fx.path("dev")),
        "--stolen",
        "--format",
        "json",
    ]));
    assert_eq!(v["stolen"]["bias"], true, "{v}");
    assert_eq!(v["stolen"]["total"]["rows"], v["n"]);
    let plain = fx.train("plain", &["--steps", "2", "--eval-every", "0"]);
    assert!(plain.status.success());
    let v = json(&conelab(&[
        "inspect",
        s(&fx.path("plain")),
        "--stolen",
        "--format",
        "json",
    ]));
    assert_eq!(v["stolen"]["bias"], false, "{v}");
}

#[test]
fn inspect_foreign_matrices() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Rows: two near-identical pairs and an outlier.
    let data = [1.0f32, 0.0, 0.9, 0.1, 0.0, 1.0, 0.1, 0.9, -1.0, -1.0];
    let npy = dir.path().join("w.npy");
    write_npy(&npy, 5, 2, &data);
    let vocab = dir.path().join("vocab.txt");
    std::fs::write(&vocab, "a\na2\nb\nb2\nz\n").expect("vocab");
    let counts = dir.path().join("counts.txt");
    std::fs::write(&counts, "50\n40\n30\n3\n1\n").expect("counts");
    let v = json(&conelab(&[
        "inspect",
        s(&npy),
        "--vocab",
        s(&vocab),
        "--counts",
        s(&counts),
        "--neighbors",
        "a,b",
        "-k",
        "1",
        "--json",
    ]));
    assert_eq!(v["n"], 5);
    assert_eq!(v["neighbors"]["a"][0]["token"], "a2");
    assert_eq!(v["neighbors"]["b"][0]["token"], "b2");
    assert_eq!(v["neighbors"]["b"][0]["count"], 3);
    assert!(v["groups"]["rare"]["rows"].as_u64() == Some(1));
    // Euclidean on request.
    let v = json(&conelab(&[
        "inspect",
        s(&npy),
        "--vocab",
        s(&vocab),
        "--neighbors",
        "z",
        "-k",
        "1",
        "--metric",
        "euclidean",
        "--json",
    ]));
    assert!(v["neighbors"]["z"][0]["distance"].as_f64().is_some());
    assert!(v.get("groups").is_none(), "no counts, no groups");

    // safetensors with several tensors: --tensor picks one; without it, a one-line error.
    let st = dir.path().join("model.safetensors");
    let bytes: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
    let other: Vec<u8> = [0f32; 4].iter().flat_map(|v| v.to_le_bytes()).collect();
    let views = vec![
        (
            "embeddings.word_embeddings.weight",
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![5, 2], &bytes)
                .expect("view"),
        ),
        (
            "other.weight",
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![2, 2], &other)
                .expect("view"),
        ),
    ];
    std::fs::write(&st, safetensors::serialize(views, None).expect("serialize")).expect("write");
    let v = json(&conelab(&[
        "inspect",
        s(&st),
        "--tensor",
        "embeddings.word_embeddings.weight",
        "--json",
    ]));
    assert_eq!(v["n"], 5);
    assert_one_line_error(&conelab(&["inspect", s(&st)]), &["--tensor"]);
    assert_one_line_error(
        &conelab(&["inspect", s(&st), "--tensor", "nope"]),
        &["nope"],
    );

    // Bad input: wrong vocabulary length, garbage file, unknown type, missing path, NaN row.
    std::fs::write(dir.path().join("short.txt"), "a\nb\n").expect("write");
    assert_one_line_error(
        &conelab(&[
            "inspect",
            s(&npy),
            "--vocab",
            s(&dir.path().join("short.txt")),
        ]),
        &["2 lines", "5 rows"],
    );
    std::fs::write(dir.path().join("junk.npy"), b"not numpy at all").expect("write");
    assert_one_line_error(
        &conelab(&["inspect", s(&dir.path().join("junk.npy"))]),
        &["junk.npy"],
    );
    std::fs::write(dir.path().join("w.txt"), b"1 2 3").expect("write");
    assert_one_line_error(
        &conelab(&["inspect", s(&dir.path().join("w.txt"))]),
        &["w.txt"],
    );
    assert_one_line_error(
        &conelab(&["inspect", s(&dir.path().join("missing"))]),
        &["missing"],
    );
    let mut bad = data;
    bad[7] = f32::NAN;
    write_npy(&dir.path().join("nan.npy"), 5, 2, &bad);
    assert_one_line_error(
        &conelab(&["inspect", s(&dir.path().join("nan.npy"))]),
        &["row 3"],
    );
    assert_one_line_error(&conelab(&["eval", s(dir.path())]), &["run.toml"]);
    assert_one_line_error(
        &conelab(&["eval", s(&dir.path().join("missing"))]),
        &["missing"],
    );

    // Impossible settings and malformed side files.
    assert_one_line_error(&conelab(&["inspect", s(&npy), "-k", "0"]), &["-k"]);
    assert_one_line_error(
        &conelab(&["inspect", s(&npy), "--groups", "0.9,0.2"]),
        &["0.9,0.2"],
    );
    std::fs::write(dir.path().join("badcounts.txt"), "1\ntwo\n3\n4\n5\n").expect("write");
    assert_one_line_error(
        &conelab(&[
            "inspect",
            s(&npy),
            "--counts",
            s(&dir.path().join("badcounts.txt")),
        ]),
        &["line 2", "two"],
    );
    assert_one_line_error(
        &conelab(&[
            "inspect",
            s(&npy),
            "--counts",
            s(&dir.path().join("short.txt")),
        ]),
        &["short.txt"],
    );
    assert_one_line_error(
        &conelab(&["inspect", s(&npy), "--neighbors", "#9"]),
        &["row 9"],
    );
    assert_one_line_error(&conelab(&["bench", "metrics", "--n", "1"]), &["--n"]);
    // Every size a benchmark can grow is bounded (absurd ones once aborted out of memory or ran
    // on for minutes), each flag and the matrix's n × d; zero repeats or steps are refused, not
    // quietly taken as one.
    for (bench, flag, value) in [
        ("train", "--vocab", "99999999999"),
        ("train", "--steps", "0"),
        ("train", "--batch", "1000000"),
        ("metrics", "--n", "99999999999"),
        ("metrics", "--repeats", "0"),
        ("metrics", "--d", "x"),
        ("store", "--rows", "99999999999999"),
        ("store", "--repeats", "0"),
        ("objectives", "--vocab", "10000,99999999999"),
        ("tui", "--frames", "0"),
        ("attach", "--history", "5"),
    ] {
        assert_one_line_error(&conelab(&["bench", bench, flag, value]), &[flag]);
    }
    assert_one_line_error(
        &conelab(&["bench", "metrics", "--n", "10000000", "--d", "65536"]),
        &["--n 10000000 × --d 65536"],
    );
    // bench ops: flex has no ATen operators; impossible sizes; a missing reference script.
    assert_one_line_error(
        &conelab(&["bench", "ops", "--device", "cpu"]),
        &["--device libtorch-cpu"],
    );
    assert_one_line_error(&conelab(&["bench", "ops", "--batch", "0"]), &["--batch"]);
    // An objective `train --reg` would refuse, refused the same way before any work.
    assert_one_line_error(
        &conelab(&["bench", "ops", "--reg", "ul=much"]),
        &["--reg ul=much"],
    );
    assert_one_line_error(&conelab(&["bench", "ops", "--reg", "zz=1"]), &["unknown"]);
    // bench runs: no runs, absurdly many, no history, no measurement at all.
    for bad in [
        ["--runs", "0"],
        ["--runs", "100001"],
        ["--history", "0"],
        ["--repeats", "0"],
        ["--repeats", "101"],
    ] {
        let mut args = vec!["bench", "runs"];
        args.extend(bad);
        assert_one_line_error(&conelab(&args), &[bad[0]]);
    }
    assert_one_line_error(
        &conelab(&["bench", "ops", "--reference", "/nonexistent/ref.py"]),
        &["no such script"],
    );
    // A .npy that is not 2-D, and one of integers.
    std::fs::write(
        dir.path().join("flat.npy"),
        npy_bytes("<f4", "(4,)", &[0u8; 16]),
    )
    .expect("write");
    assert_one_line_error(
        &conelab(&["inspect", s(&dir.path().join("flat.npy"))]),
        &["shape"],
    );
    std::fs::write(
        dir.path().join("ints.npy"),
        npy_bytes("<i4", "(2, 2)", &[0u8; 16]),
    )
    .expect("write");
    assert_one_line_error(
        &conelab(&["inspect", s(&dir.path().join("ints.npy"))]),
        &["not supported"],
    );
    // A shape whose product overflows: it once wrapped to 0 and passed as an empty matrix (a
    // release build), or panicked inside the decoder (a debug one).
    std::fs::write(
        dir.path().join("vast.npy"),
        npy_bytes(
            "<f4",
            "(4611686018427387904, 4611686018427387904)",
            &[0u8; 16],
        ),
    )
    .expect("write");
    assert_one_line_error(
        &conelab(&["inspect", s(&dir.path().join("vast.npy"))]),
        &["vast.npy"],
    );
    // A header the Python-literal parser rejects: its caret diagnostic spans lines.
    std::fs::write(
        dir.path().join("header.npy"),
        npy_bytes("<f4", "(2 2)", &[0u8; 16]),
    )
    .expect("write");
    assert_one_line_error(
        &conelab(&["inspect", s(&dir.path().join("header.npy"))]),
        &["header.npy", "not a .npy file"],
    );
}

#[test]
fn the_reference_spectrum_is_the_normalised_singular_values_and_a_bad_file_one_error() {
    let tmp = tempfile::tempdir().expect("tmp");
    // Rows (3, 0), (0, −1), (0, 0): singular values 3 and 1, so 1 and 1/3 once divided by the
    // largest.
    let path = tmp.path().join("w.npy");
    write_npy(&path, 3, 2, &[3.0, 0.0, 0.0, -1.0, 0.0, 0.0]);
    let (label, sv) =
        conelab_core::run_dir::matrix::reference_spectrum(&path).expect("a reference spectrum");
    assert_eq!(label, "w.npy");
    assert_eq!(sv.len(), 2);
    assert!(
        (sv[0] - 1.0).abs() < 1e-6 && (sv[1] - 1.0 / 3.0).abs() < 1e-6,
        "{sv:?}"
    );
    // A file that is not a matrix: an error that names it.
    let bad = tmp.path().join("w.txt");
    std::fs::write(&bad, "not a matrix").expect("write");
    let e = conelab_core::run_dir::matrix::reference_spectrum(&bad).expect_err("refused");
    assert!(e.to_string().contains("w.txt"), "{e}");
}

/// Issue #38 part 2: `eval --bootstrap N` brackets each group's PPL with a 95 % interval, the
/// same on every call; `eval A B --paired` gives PPL_B − PPL_A with its paired interval — zero
/// for a run against itself, and of the sign of the plain difference for two runs; bad input is
/// one line, exit 2.
#[test]
fn eval_bootstraps_intervals_and_pairs_two_runs() {
    let f = Fixture::new();
    for (run, steps) in [("short", "4"), ("long", "40")] {
        let out = f.train(run, &["--steps", steps, "--eval-every", "0"]);
        succeeded(&out);
    }
    let (short, long) = (f.path("short"), f.path("long"));
    let boot = |extra: &[&str]| {
        let mut args = vec!["eval", s(&long), "--json", "-k", "0"];
        args.extend_from_slice(extra);
        json(&conelab(&args))
    };
    let v = boot(&["--bootstrap", "300"]);
    let b = &v["bootstrap"];
    assert_eq!(b["replicates"], 300);
    assert!(b["sentences"].as_u64().expect("sentences") > 10, "{b}");
    for g in ["frequent", "medium", "rare", "total"] {
        let (e, lo, hi) = (
            b[g]["estimate"].as_f64().expect("estimate"),
            b[g]["lo"].as_f64().expect("lo"),
            b[g]["hi"].as_f64().expect("hi"),
        );
        assert!(lo <= e && e <= hi && lo < hi, "{g}: {lo} {e} {hi}");
    }
    let total = v["outputs"]["ppl"].as_f64().expect("ppl");
    assert!((b["total"]["estimate"].as_f64().expect("e") - total).abs() < 1e-6 * total);
    assert_eq!(
        boot(&["--bootstrap", "300"])["bootstrap"],
        *b,
        "a fixed seed"
    );

    let paired = |a: &Path, b: &Path| {
        json(&conelab(&[
            "eval",
            s(a),
            s(b),
            "--paired",
            "--bootstrap",
            "300",
            "--json",
            "-k",
            "0",
        ]))
    };
    let same = paired(&long, &long);
    for g in ["frequent", "total"] {
        let p = &same["paired"][g];
        assert_eq!(
            (p["estimate"].as_f64(), p["lo"].as_f64(), p["hi"].as_f64()),
            (Some(0.0), Some(0.0), Some(0.0))
        );
    }
    let two = paired(&short, &long);
    let ppl = |i: usize| two["runs"][i]["outputs"]["ppl"].as_f64().expect("ppl");
    let d = &two["paired"]["total"];
    let estimate = d["estimate"].as_f64().expect("estimate");
    assert!(
        (estimate - (ppl(1) - ppl(0))).abs() < 1e-6 * ppl(0),
        "B − A"
    );
    assert!(d["lo"].as_f64().expect("lo") <= estimate && estimate <= d["hi"].as_f64().expect("hi"));
    // The text form names both runs and the difference.
    let out = conelab(&[
        "eval",
        s(&short),
        s(&long),
        "--paired",
        "--bootstrap",
        "50",
        "-k",
        "0",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    // Issue #58 item 4: stderr is not a terminal here, so no progress bar is drawn on it.
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !err.contains("bootstrap") && !err.contains('\r') && !err.contains('\u{1b}'),
        "{err:?}"
    );
    assert!(
        out.status.success() && text.contains("B − A") && text.contains("95 % low"),
        "{text}"
    );

    assert_one_line_error(
        &conelab(&["eval", s(&long), "--bootstrap", "0"]),
        &["--bootstrap", "replicates"],
    );
    // One replicate's "interval" is that replicate (it excluded the PPL it was about): too few.
    assert_one_line_error(
        &conelab(&["eval", s(&long), "--bootstrap", "39"]),
        &["--bootstrap", "from 40"],
    );
    assert_one_line_error(
        &conelab(&["eval", s(&long), "--paired"]),
        &["--paired", "two runs"],
    );
    // Another corpus is another split: no pairing.
    let other = f.path("other");
    let out = conelab(&[
        "data",
        "synth",
        "--out",
        s(&other),
        "--vocab",
        "150",
        "--tokens",
        "7000",
        "--classes",
        "5",
    ]);
    assert!(out.status.success());
    let out = conelab(&[
        "train",
        s(&other),
        "--config",
        s(&f.path("small.toml")),
        "--run-dir",
        s(&f.path("elsewhere")),
        "--steps",
        "2",
        "--eval-every",
        "0",
    ]);
    succeeded(&out);
    assert_one_line_error(
        &conelab(&[
            "eval",
            s(&long),
            s(&f.path("elsewhere")),
            "--paired",
            "-k",
            "0",
        ]),
        &["not scored on the same split"],
    );
}
