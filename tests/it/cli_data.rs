//! `conelab data …` through the real binary: output, help, and every bad input the foundation issue
//! lists — each must end in one line on stderr and exit status 2.

use crate::harness::{assert_one_line_error, conelab, corpus_dir, s, succeeded};
use conelab_data::{DataError, SplitText, VocabBuilder};

const OK: &[u8] = b"a b c\nb c\n";

#[test]
fn missing_directory() {
    let out = conelab(&["data", "stats", "/no/such/corpus"]);
    assert_one_line_error(&out, &["/no/such/corpus", "does not exist"]);
}

#[test]
fn a_file_instead_of_a_directory() {
    let dir = corpus_dir(OK, OK, OK);
    let file = dir.path().join("train.txt");
    let out = conelab(&["data", "stats", file.to_str().expect("utf-8")]);
    assert_one_line_error(&out, &["train.txt", "not a directory"]);
}

#[test]
fn missing_split_file() {
    let dir = corpus_dir(OK, OK, OK);
    std::fs::remove_file(dir.path().join("test.txt")).expect("rm");
    let out = conelab(&["data", "stats", dir.path().to_str().expect("utf-8")]);
    assert_one_line_error(&out, &["no test split", "test.txt", "wiki.test.tokens"]);
}

#[test]
fn empty_train_split() {
    for empty in [&b""[..], b"\n\n  \n"] {
        let dir = corpus_dir(empty, OK, OK);
        let out = conelab(&["data", "stats", dir.path().to_str().expect("utf-8")]);
        assert_one_line_error(&out, &["train.txt", "train split is empty"]);
    }
}

#[test]
fn empty_held_out_split() {
    let dir = corpus_dir(OK, b"", OK);
    let out = conelab(&["data", "stats", dir.path().to_str().expect("utf-8")]);
    assert_one_line_error(&out, &["valid.txt", "valid split is empty"]);
}

#[test]
fn binary_file() {
    let dir = corpus_dir(b"a b\nc \x00\x01\x02 d\n", OK, OK);
    let out = conelab(&["data", "stats", dir.path().to_str().expect("utf-8")]);
    assert_one_line_error(&out, &["train.txt", "binary file", "line 2"]);
}

/// Bad bytes in every split: the train file is named (it was the valid one, read on another
/// thread, whose error came first).
#[test]
fn bad_bytes_everywhere_name_the_train_file() {
    let bad = b"ok\nbad \xc3\x28 here\n";
    let dir = corpus_dir(bad, bad, bad);
    let out = conelab(&["data", "stats", dir.path().to_str().expect("utf-8")]);
    assert_one_line_error(&out, &["train.txt", "invalid UTF-8", "line 2"]);
}

/// A held-out split too short for the evaluation batch: the error names `eval_batch`, the
/// config-file setting behind the number, not just "batch size 10".
#[test]
fn a_valid_split_shorter_than_the_eval_batch_names_eval_batch() {
    let dir = corpus_dir(
        "a b c d e f g h i j k l m n o p\n".repeat(40).as_bytes(),
        b"a b\n",
        "a b c d e f g h i j k l m n o p\n".repeat(4).as_bytes(),
    );
    let out = conelab(&[
        "train",
        dir.path().to_str().expect("utf-8"),
        "--headless",
        "--steps",
        "1",
        "--batch",
        "1",
        "--bptt",
        "2",
        "--run-dir",
        dir.path().join("run").to_str().expect("utf-8"),
    ]);
    assert_one_line_error(&out, &["valid split", "eval_batch"]);
}

#[test]
fn invalid_utf8() {
    let dir = corpus_dir(OK, OK, b"ok\nfine\nbad \xc3\x28 here\n");
    let out = conelab(&["data", "stats", dir.path().to_str().expect("utf-8")]);
    assert_one_line_error(&out, &["test.txt", "invalid UTF-8", "line 3"]);
}

#[test]
fn a_100_mb_single_line() {
    let line = "word ".repeat(20 << 20); // 100 MiB, no newline
    let dir = corpus_dir(line.as_bytes(), OK, OK);
    let out = conelab(&["data", "stats", dir.path().to_str().expect("utf-8")]);
    assert_one_line_error(&out, &["train.txt", "line 1", "104857600 bytes", "limit"]);
}

#[test]
fn vocabulary_beyond_u32() {
    // A corpus with 2^32 types cannot be built in a test; the same check runs with a lower cap.
    let text = SplitText::from_bytes("train.txt".into(), b"a b c d e\n".to_vec(), 1 << 20)
        .expect("valid text");
    let err = VocabBuilder::with_max_types(4).build(&text).unwrap_err();
    assert!(matches!(err, DataError::VocabTooLarge { limit: 4 }));
    let msg = err.to_string();
    assert!(msg.contains("u32") && !msg.contains('\n'), "{msg}");
}

#[test]
fn synth_rejects_impossible_settings() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out_dir = dir.path().to_str().expect("utf-8");
    for (args, needles) in [
        (&["--vocab", "0"][..], &["--vocab", "0"][..]),
        (&["--classes", "0"], &["--classes"]),
        (&["--classes", "9000"], &["--classes", "9000"]),
        (&["--tokens", "0"], &["--tokens"]),
        (&["--zipf", "-1"], &["--zipf", "-1"]),
        (&["--zipf", "nan"], &["--zipf"]),
        (&["--vocab", "many"], &["--vocab", "many"]),
    ] {
        let mut full = vec!["data", "synth", "--out", out_dir];
        full.extend_from_slice(args);
        assert_one_line_error(&conelab(&full), needles);
    }
    assert!(
        std::fs::read_dir(dir.path())
            .expect("list")
            .next()
            .is_none(),
        "nothing written on a rejected setting"
    );
}

#[test]
fn group_boundaries_must_increase_inside_the_unit_interval() {
    let dir = corpus_dir(OK, OK, OK);
    let path = dir.path().to_str().expect("utf-8");
    for bad in [
        "0.8,0.3", "0,0.5", "0.3,1", "0.5,0.5", "0.3", "a,b", "-0.1,0.5",
    ] {
        let out = conelab(&["data", "stats", path, &format!("--groups={bad}")]);
        assert_one_line_error(&out, &["--groups", "invalid group boundaries"]);
    }
}

#[test]
fn stats_json_counts_are_exact() {
    let dir = corpus_dir(b"a b a\nc a b\n", b"a z z\n", b"b\n\n");
    let out = conelab(&[
        "data",
        "stats",
        dir.path().to_str().expect("utf-8"),
        "--json",
    ]);
    succeeded(&out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    assert_eq!(v["train_tokens"], 8);
    assert_eq!(v["valid_tokens"], 4);
    assert_eq!(v["test_tokens"], 3);
    // a, b, <eos>, c, <unk> (added with count 0)
    assert_eq!(v["vocab_size"], 5);
    assert_eq!(v["splits"]["valid"]["oov_types"], 1);
    assert_eq!(v["splits"]["valid"]["unk"], 2);
    // floor(0.3·5) = 1, floor(0.8·5) = 4
    assert_eq!(v["groups"]["frequent"]["size"], 1);
    assert_eq!(v["groups"]["frequent"]["max_count"], 3);
    assert_eq!(v["groups"]["medium"]["size"], 3);
    assert_eq!(v["groups"]["medium"]["min_count"], 1);
    assert_eq!(v["groups"]["rare"]["size"], 1);
    assert_eq!(v["groups"]["rare"]["max_count"], 0);
    assert!(v["load_seconds"].as_f64().expect("number") >= 0.0);
}

#[test]
fn wikitext_file_names_are_found() {
    let dir = tempfile::tempdir().expect("tempdir");
    for s in ["train", "valid", "test"] {
        std::fs::write(dir.path().join(format!("wiki.{s}.tokens")), OK).expect("write");
    }
    let out = conelab(&["data", "stats", dir.path().to_str().expect("utf-8")]);
    succeeded(&out);
    assert!(String::from_utf8_lossy(&out.stdout).contains("vocabulary  5 types"));
}

#[test]
fn table_output_to_a_pipe_has_no_escape_codes() {
    let out = conelab(&["data", "stats", "synthetic"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).expect("utf-8");
    assert!(!text.contains('\x1b'));
    assert!(
        text.contains("frequent") && text.contains("1,000,0"),
        "{text}"
    );
}

#[test]
fn help_documents_every_option_with_its_default_and_version_works() {
    // Help text is wrapped to the terminal width: compare with whitespace collapsed.
    let help = |args: &[&str]| {
        let out = conelab(args);
        assert!(out.status.success());
        String::from_utf8(out.stdout)
            .expect("utf-8")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    let synth = help(&["data", "synth", "--help"]);
    for opt in [
        "--out",
        "--seed",
        "--vocab",
        "--tokens",
        "--classes",
        "--zipf",
    ] {
        assert!(synth.contains(opt), "{opt} missing from help");
    }
    for default in [
        "[default: 1]",
        "[default: 5000]",
        "[default: 1000000]",
        "[default: 50]",
    ] {
        assert!(
            synth.contains(default),
            "{default} missing from help:\n{synth}"
        );
    }
    let stats = help(&["data", "stats", "--help"]);
    assert!(
        stats.contains("--format <FORMAT>") && stats.contains("[default: 0.3,0.8]"),
        "{stats}"
    );
    let version = conelab(&["--version"]);
    assert!(version.status.success());
    assert!(String::from_utf8_lossy(&version.stdout).starts_with("conelab 0."));
}

#[test]
fn unknown_subcommand_is_one_line() {
    assert_one_line_error(&conelab(&["data", "frobnicate"]), &["frobnicate"]);
}

/// Issue #39 part 4: the shell completes run names — the folder's and the run's own name — as
/// clap_complete's engine asks (`source <(CONELAB_COMPLETE=bash conelab)`), from the runs this user has.
#[test]
fn the_shell_completes_run_names() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let run = tmp.path().join("checkpoints/wt2-baseline");
    std::fs::create_dir_all(run.join("store")).expect("mkdir");
    let mut record =
        conelab_store::RunRecord::new("wt2-baseline", String::new(), "c".into(), "cpu".into());
    record.labels.name = Some("best-so-far".into());
    conelab_store::StoreWriter::open(&run, &record).expect("store");
    std::fs::write(run.join("run.toml"), "").expect("run.toml");
    let complete = |word: &str| {
        let out = crate::harness::command()
            .current_dir(tmp.path())
            .env("XDG_STATE_HOME", tmp.path().join("state"))
            .env("CONELAB_COMPLETE", "bash")
            .env("_CLAP_COMPLETE_INDEX", "2")
            .env("_CLAP_COMPLETE_COMP_TYPE", "9")
            .env("_CLAP_COMPLETE_SPACE", "true")
            .args(["--", "conelab", "attach", word])
            .output()
            .expect("conelab runs");
        succeeded(&out);
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let got = complete("wt2");
    assert!(
        got.split_whitespace().any(|w| w == "wt2-baseline"),
        "{got:?}"
    );
    let got = complete("best");
    assert!(
        got.split_whitespace().any(|w| w == "best-so-far"),
        "{got:?}"
    );
    assert!(!complete("zzz").contains("wt2"), "only what matches");
    // The registration script itself.
    let out = crate::harness::command()
        .env("CONELAB_COMPLETE", "bash")
        .output()
        .expect("runs");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("complete "),
        "a bash script"
    );
}

/// A usage error keeps what clap says — the tip and the usage — on its one line.
#[test]
fn a_usage_error_says_the_tip_and_the_usage_in_one_line() {
    assert_one_line_error(
        &conelab(&["runs", "--jsonn"]),
        &[
            "unexpected argument '--jsonn'",
            "tip: a similar argument exists",
            "usage: conelab runs",
        ],
    );
}

#[test]
fn completions_are_valid_shell_and_know_the_subcommands_and_flags() {
    let out = conelab(&["completions", "bash"]);
    let script = succeeded(&out);
    for word in [
        "train",
        "export",
        "--objective",
        "--aggregate",
        "--headless",
    ] {
        assert!(script.contains(word), "bash completion lacks {word}");
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = tmp.path().join("conelab.bash");
    std::fs::write(&path, &script).expect("write");
    let parsed = std::process::Command::new("bash")
        .arg("-n")
        .arg(&path)
        .output()
        .expect("bash runs");
    assert!(
        parsed.status.success(),
        "bash -n: {}",
        String::from_utf8_lossy(&parsed.stderr)
    );
    for (shell, marker) in [
        ("zsh", "#compdef conelab"),
        ("fish", "complete -c conelab"),
        ("elvish", "edit:completion:arg-completer[conelab]"),
        ("powershell", "Register-ArgumentCompleter"),
    ] {
        let out = conelab(&["completions", shell]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains(marker),
            "{shell}: {text}"
        );
    }
    assert_eq!(conelab(&["completions", "tcsh"]).status.code(), Some(2));
}

#[test]
fn the_manual_pages_cover_every_subcommand() {
    let out = conelab(&["man"]);
    let page = succeeded(&out);
    assert!(
        page.starts_with(".ie") || page.contains(".TH conelab"),
        "{page}"
    );
    assert!(page.contains("train") && page.contains("export"), "{page}");
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("man1");
    let out = conelab(&["man", "--dir", dir.to_str().expect("utf-8")]);
    succeeded(&out);
    for name in [
        "conelab",
        "conelab-train",
        "conelab-export",
        "conelab-bench-train",
        "conelab-data-stats",
    ] {
        let page = std::fs::read_to_string(dir.join(format!("{name}.1")))
            .unwrap_or_else(|e| panic!("{name}.1: {e}"));
        assert!(page.contains(&format!(".TH {name}")), "{name}: {page}");
    }
    let train = std::fs::read_to_string(dir.join("conelab-train.1")).expect("train page");
    assert!(
        train.contains("objective"),
        "the train page lists its flags"
    );
    // A folder that cannot be made: one line, exit non-zero, nothing half-written.
    let blocked = tmp.path().join("file");
    std::fs::write(&blocked, "x").expect("write");
    let out = conelab(&["man", "--dir", blocked.join("sub").to_str().expect("utf-8")]);
    assert_one_line_error(&out, &["creating"]);
}

/// A corpus given by name is found under `$CONELAB_DATASETS` (one folder or several, `:`
/// between them, the first that holds it); a path that exists wins over a name; a name found
/// nowhere is one line that says where it was looked for.
#[test]
fn a_corpus_is_found_by_name_under_conelab_datasets() {
    let f = crate::harness::Fixture::new();
    let roots = tempfile::tempdir().expect("tmp");
    let (first, second) = (roots.path().join("a"), roots.path().join("b"));
    std::fs::create_dir_all(&first).expect("mkdir");
    std::fs::create_dir_all(&second).expect("mkdir");
    crate::harness::copy_dir(&f.path("corpus"), &second.join("mycorpus"));
    let config = f.path("small.toml");
    let env = format!("{}:{}", first.display(), second.display());
    let out = crate::harness::conelab_env(
        &["data", "stats", "mycorpus", "--json"],
        &[("CONELAB_DATASETS", &env)],
    );
    succeeded(&out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert!(v["train_tokens"].as_u64().is_some_and(|n| n >= 5), "{v}");
    // Training by name too, and the run records the folder it found.
    let run = roots.path().join("run");
    let out = crate::harness::conelab_env(
        &[
            "train",
            "mycorpus",
            "--config",
            config.to_str().expect("utf-8"),
            "--steps",
            "1",
            "--eval-every",
            "0",
            "--headless",
            "--run-dir",
            run.to_str().expect("utf-8"),
        ],
        &[("CONELAB_DATASETS", &env)],
    );
    succeeded(&out);
    let toml = std::fs::read_to_string(run.join("run.toml")).expect("run.toml");
    assert!(toml.contains("b/mycorpus"), "{toml}");
    let out = crate::harness::conelab_env(
        &["data", "stats", "nosuchcorpus"],
        &[("CONELAB_DATASETS", &env)],
    );
    assert_one_line_error(
        &out,
        &["nosuchcorpus", "does not exist", "CONELAB_DATASETS"],
    );
}

/// Issue #38: `data baseline` on the synthetic corpus: the reference models per group as JSON,
/// cached in the user's cache folder (a second call reads it), and an unwritable cache costs
/// only a warning. A corpus too small for Kneser–Ney's discounts is one line, exit 2.
#[test]
fn baseline_computes_caches_and_refuses_a_tiny_corpus() {
    let tmp = tempfile::tempdir().expect("tmp");
    let cache = tmp.path().join("cache");
    let run = |cache: &std::path::Path, args: &[&str]| {
        crate::harness::command()
            .env("XDG_CACHE_HOME", cache)
            .args(args)
            .output()
            .expect("conelab runs")
    };
    let out = run(&cache, &["data", "baseline", "synthetic", "--json"]);
    succeeded(&out);
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let valid = &r["splits"][0];
    assert_eq!(valid["split"], "valid");
    let (kn, uni) = (&valid["kn3"], &valid["unigram"]);
    for g in 0..3 {
        let (k, u) = (
            kn["groups"][g].as_f64().expect("a number"),
            uni["groups"][g].as_f64().expect("a number"),
        );
        assert!(1.0 < k && k < u, "group {g}: KN-3 {k}, unigram {u}");
    }
    let files: Vec<_> = std::fs::read_dir(cache.join("conelab/baselines"))
        .expect("the cache folder")
        .collect();
    assert_eq!(files.len(), 1);
    // The second time from the cache, the same numbers.
    let again = run(&cache, &["data", "baseline", "synthetic"]);
    let text = String::from_utf8_lossy(&again.stdout);
    assert!(text.contains("read from the cache"), "{text}");
    let total = kn["total"].as_f64().expect("total");
    assert!(text.contains(&format!("{total:.1}")), "{text}");
    // A cache folder that is a file: computed all the same, with a warning.
    let blocked = tmp.path().join("blocked");
    std::fs::write(&blocked, "not a folder").expect("file");
    let out = run(&blocked, &["data", "baseline", "synthetic"]);
    succeeded(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("not cached"), "{stderr}");
    // Two short sentences: computed, each level saying how its discounts were estimated.
    let dir = corpus_dir(OK, OK, OK);
    let out = run(
        &cache,
        &["data", "baseline", dir.path().to_str().expect("utf-8")],
    );
    let text = succeeded(&out);
    assert!(
        text.contains("(single Y)") || text.contains("(fixed 0.75)"),
        "{text}"
    );
    // One word: no trigram at all.
    let dir = corpus_dir(b"a\n", OK, OK);
    let out = run(
        &cache,
        &["data", "baseline", dir.path().to_str().expect("utf-8")],
    );
    assert_one_line_error(&out, &["too small for a trigram model", "2 tokens"]);
}

/// Issue #38 part 7: `data bpe` re-segments a corpus with merges learnt on train (Sennrich et
/// al.'s example, merges counted by hand in `conelab_data::bpe`), every split joins back to its
/// words, the result loads as a corpus, and impossible requests are one line, exit 2, nothing
/// written.
#[test]
fn data_bpe_writes_a_segmented_corpus_and_refuses_impossible_merges() {
    let dir = tempfile::tempdir().expect("tempdir");
    let corpus = dir.path().join("words");
    std::fs::create_dir_all(&corpus).expect("mkdir");
    let train = "low low low low low lower lower\nnewest newest newest newest newest newest\nwidest widest widest\n";
    let valid = "lowest <unk> newer\n";
    for (name, text) in [
        ("train.txt", train),
        ("valid.txt", valid),
        ("test.txt", "wider low\n"),
    ] {
        std::fs::write(corpus.join(name), text).expect("write");
    }
    let out = dir.path().join("bpe");
    let run = |merges: &str, to: &std::path::Path| {
        conelab(&[
            "data",
            "bpe",
            s(&corpus),
            "--merges",
            merges,
            "--out",
            s(to),
        ])
    };
    let done = run("5", &out);
    let stdout = succeeded(&done);
    assert!(
        stdout.contains("5 merges") && stdout.contains("Rare group"),
        "{stdout}"
    );
    assert_eq!(
        std::fs::read_to_string(out.join("bpe-merges.txt")).expect("merges"),
        "e s\nes t</w>\nl o\ne w\nn ew\n"
    );
    let valid_out = std::fs::read_to_string(out.join("valid.txt")).expect("valid");
    assert_eq!(valid_out, "lo@@ w@@ est <unk> new@@ e@@ r\n");
    for (name, text) in [
        ("train.txt", train),
        ("valid.txt", valid),
        ("test.txt", "wider low\n"),
    ] {
        let got = std::fs::read_to_string(out.join(name)).expect("split");
        assert_eq!(got.replace("@@ ", ""), text, "{name}");
    }
    // The written corpus is a corpus.
    let stats = conelab(&["data", "stats", s(&out), "--json"]);
    succeeded(&stats);

    // Bad input: nothing written.
    let fresh = dir.path().join("fresh");
    assert_one_line_error(&run("0", &fresh), &["--merges 0", "at least 1"]);
    assert_one_line_error(&run("1000", &fresh), &["--merges 1000", "allows only"]);
    assert!(!fresh.exists(), "nothing written");
    assert_one_line_error(&run("5", &out), &["not an empty folder"]);
    let missing = dir.path().join("no-such-corpus");
    assert_one_line_error(
        &conelab(&[
            "data",
            "bpe",
            s(&missing),
            "--merges",
            "5",
            "--out",
            s(&fresh),
        ]),
        &["no-such-corpus"],
    );
    assert!(!fresh.exists(), "nothing written");
    // A corpus whose words already carry the continuation mark (segmented already): its
    // segmentation could not be joined back, so it is refused, naming the file and line.
    let marked = corpus_dir(b"low lower\nnew@@ er words\n", b"low\n", b"lower\n");
    assert_one_line_error(
        &conelab(&[
            "data",
            "bpe",
            s(marked.path()),
            "--merges",
            "2",
            "--out",
            s(&fresh),
        ]),
        &["train.txt", "line 2", "new@@", "segmented already"],
    );
    assert!(!fresh.exists(), "nothing written");
}

/// Issue #58: `--help > /dev/full` exited 0 with nothing written; the help's example named
/// `man --dir`, which the flag's own help calls its older name.
#[test]
fn help_that_cannot_be_written_fails_and_names_flags_as_they_are() {
    let full = std::fs::OpenOptions::new().write(true).open("/dev/full");
    if let Ok(full) = full {
        let out = crate::harness::command()
            .arg("--help")
            .stdout(full)
            .output()
            .expect("runs");
        assert_eq!(out.status.code(), Some(4), "{out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("No space left"), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
    } else {
        assert!(std::env::var("CI").is_err(), "/dev/full is needed under CI");
    }
    let man = conelab(&["man", "--help"]);
    // Wrapped to the terminal's width: compared with whitespace collapsed.
    let text = String::from_utf8_lossy(&man.stdout)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(text.contains("conelab man --out DIR"), "{text}");
    assert!(!text.contains("man --dir"), "{text}");
    // The JSON keys documented for `runs` and `inspect` were never shown: the subcommand's
    // doc comment overrode the long help set on its arguments.
    let long = |cmd: &str| {
        String::from_utf8_lossy(&conelab(&[cmd, "--help"]).stdout)
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert!(
        long("runs").contains("JSON (`--format json`, stable)")
            && long("runs").contains("worse_than_uniform"),
        "{}",
        long("runs")
    );
    assert!(
        long("inspect").contains("JSON keys (stable)"),
        "{}",
        long("inspect")
    );
}

/// Issue #59 item 1: a parallel corpus through `data stats` — the direction asked for in one
/// line when missing, Multi30k's published counts (its README) when given, `--pair` refused on a
/// language-model corpus.
#[test]
fn a_parallel_corpus_reports_its_published_counts() {
    let Some(m30k) = crate::harness::shared_dataset("multi30k") else {
        return;
    };
    let out = conelab(&["data", "stats", s(&m30k)]);
    assert_one_line_error(&out, &["--pair de-en", "--pair en-de"]);
    let out = conelab(&["data", "stats", s(&m30k), "--pair", "en-fr"]);
    assert_one_line_error(&out, &["en-fr", "de", "en"]);
    let json: serde_json::Value = serde_json::from_str(&succeeded(&conelab(&[
        "data",
        "stats",
        s(&m30k),
        "--pair",
        "en-de",
        "--format",
        "json",
    ])))
    .expect("json");
    // The README's table: lines, words en / de, types en / de.
    for (split, lines, words, types) in [
        ("train", 29_000, [377_534, 360_706], [10_210, 18_722]),
        ("valid", 1_014, [13_308, 12_828], [1_964, 2_303]),
        ("test", 1_000, [12_968, 12_103], [1_898, 2_125]),
    ] {
        let s = &json["splits"][split];
        assert_eq!(s["lines"], lines, "{split}");
        for (side, i) in [("source", 0), ("target", 1)] {
            assert_eq!(s[side]["words"], words[i], "{split} {side}");
            assert_eq!(s[side]["types"], types[i], "{split} {side}");
        }
    }
    let dir = corpus_dir(OK, OK, OK);
    let out = conelab(&["data", "stats", s(dir.path()), "--pair", "en-de"]);
    assert_one_line_error(&out, &["--pair en-de", "not a parallel corpus"]);
    // Where a language model's corpus is expected, a parallel one is said to be one (it was "no
    // train split … expected train.txt"), and nothing is made.
    let runs = tempfile::tempdir().expect("tmp");
    let run = runs.path().join("run");
    let out = conelab(&[
        "train",
        s(&m30k),
        "--headless",
        "--steps",
        "1",
        "--run-dir",
        s(&run),
    ]);
    assert_one_line_error(&out, &["is a parallel corpus (de, en)"]);
    assert!(!run.exists());
}

/// Issue #59 item 1: `data bpe --joint` learns one BPE on both sides' train splits and applies it
/// to all six files: deleting `@@ ` gives every file back byte for byte, both sides share the
/// merges' pieces, and a parallel corpus without `--joint` (or `--joint` on a language-model
/// corpus) is refused in one line with nothing written.
#[test]
fn joint_bpe_segments_both_sides_and_joins_back() {
    let tmp = tempfile::tempdir().expect("tmp");
    let corpus = tmp.path().join("par");
    std::fs::create_dir_all(&corpus).expect("mkdir");
    let en = "the little dog runs\nthe big dogs ran home\na dog and a cat\n";
    let de = "der kleine hund rennt\ndie grossen hunde rannten heim\nein hund und eine katze\n";
    for split in ["train", "valid", "test"] {
        std::fs::write(corpus.join(format!("{split}.en")), en).expect("en");
        std::fs::write(corpus.join(format!("{split}.de")), de).expect("de");
    }
    let out_dir = tmp.path().join("bpe");
    let refused = conelab(&[
        "data",
        "bpe",
        s(&corpus),
        "--merges",
        "20",
        "--out",
        s(&out_dir),
    ]);
    assert_one_line_error(&refused, &["--joint"]);
    assert!(!out_dir.exists());
    succeeded(&conelab(&[
        "data",
        "bpe",
        s(&corpus),
        "--joint",
        "--merges",
        "20",
        "--out",
        s(&out_dir),
    ]));
    for split in ["train", "valid", "test"] {
        for (code, text) in [("en", en), ("de", de)] {
            let got = std::fs::read_to_string(out_dir.join(format!("{split}.{code}")))
                .expect("segmented");
            assert_eq!(got.replace("@@ ", ""), text, "{split}.{code}");
        }
    }
    // One set of merges for both: a merge learnt from German text (`hund`'s pieces) is used
    // on the German side, one from English on the English side.
    let merges = std::fs::read_to_string(out_dir.join("bpe-merges.txt")).expect("merges");
    assert_eq!(
        merges.lines().filter(|l| !l.starts_with('#')).count(),
        20,
        "{merges}"
    );
    let de_train = std::fs::read_to_string(out_dir.join("train.de")).expect("de");
    let en_train = std::fs::read_to_string(out_dir.join("train.en")).expect("en");
    assert_ne!(de_train, de, "the German side is segmented");
    assert!(
        en_train.contains("dog") || en_train.contains("do@@"),
        "{en_train}"
    );
    let lm = corpus_dir(OK, OK, OK);
    let out = conelab(&[
        "data",
        "bpe",
        s(lm.path()),
        "--joint",
        "--merges",
        "5",
        "--out",
        s(&tmp.path().join("x")),
    ]);
    assert_one_line_error(&out, &["--joint", "not a parallel corpus"]);
}

/// Issue #59 item 1: `data synth --mt` writes synthetic-mt, whose target is each source word
/// through the dictionary (`q` + word) with adjacent words swapped — re-derived here — and
/// which `data stats` reads as the parallel corpus xx → yy.
#[test]
fn synthetic_mt_is_written_and_its_target_is_the_rule() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("mt");
    succeeded(&conelab(&[
        "data",
        "synth",
        "--mt",
        "--out",
        s(&dir),
        "--seed",
        "3",
    ]));
    for split in ["train", "valid", "test"] {
        let src = std::fs::read_to_string(dir.join(format!("{split}.xx"))).expect("xx");
        let tgt = std::fs::read_to_string(dir.join(format!("{split}.yy"))).expect("yy");
        assert_eq!(src.lines().count(), tgt.lines().count(), "{split}");
        for (a, b) in src.lines().zip(tgt.lines()) {
            let words: Vec<&str> = a.split(' ').collect();
            let mut want = Vec::new();
            let mut i = 0;
            while i < words.len() {
                if i + 1 < words.len() {
                    want.push(format!("q{}", words[i + 1]));
                }
                want.push(format!("q{}", words[i]));
                i += 2;
            }
            assert_eq!(b, want.join(" "), "{split}: {a}");
        }
    }
    let table = succeeded(&conelab(&["data", "stats", s(&dir), "--pair", "xx-yy"]));
    assert!(table.contains("xx → yy"), "{table}");
}

/// Issue #59's bad input: two sides of a split that differ in line count are named with both
/// counts, in one line, exit 2.
#[test]
fn a_parallel_split_whose_sides_differ_in_length_is_named() {
    let tmp = tempfile::tempdir().expect("tmp");
    for split in ["train", "valid", "test"] {
        std::fs::write(tmp.path().join(format!("{split}.en")), "a b\nc d\n").expect("en");
        std::fs::write(tmp.path().join(format!("{split}.de")), "e f\nh i\n").expect("de");
    }
    std::fs::write(tmp.path().join("valid.de"), "e f\ng\nh\n").expect("de");
    let out = conelab(&["data", "stats", s(tmp.path()), "--pair", "en-de"]);
    assert_one_line_error(&out, &["valid.en", "valid.de", "2", "3"]);
}

/// Issue #59 item 6: `bench translate` trains and decodes a translation model on the parallel
/// corpus it is given and reports what it measured; a corpus that is not parallel is one line.
#[test]
fn bench_translate_measures_training_and_decoding() {
    let tmp = tempfile::tempdir().expect("tmp");
    let en = "the dog runs\nthe cat sleeps\na dog and a cat\n";
    let de = "der hund rennt\ndie katze schläft\nein hund und eine katze\n";
    for split in ["train", "valid", "test"] {
        std::fs::write(tmp.path().join(format!("{split}.en")), en).expect("en");
        std::fs::write(tmp.path().join(format!("{split}.de")), de).expect("de");
    }
    let out = conelab(&[
        "bench",
        "translate",
        "--corpus",
        s(tmp.path()),
        "--pair",
        "en-de",
        "--steps",
        "2",
        "--warmup",
        "0",
        "--max-tokens",
        "64",
        "--beam",
        "2",
        "--format",
        "json",
    ]);
    let r: serde_json::Value = serde_json::from_str(&succeeded(&out)).expect("json");
    assert_eq!(r["pair"], "en-de");
    assert_eq!(r["valid_sentences"], 3);
    assert_eq!(r["steps"], 2);
    // The joint vocabulary: 7 English word types (the dog runs cat sleeps a and) and 9 German
    // ones (der hund rennt die katze schläft ein und eine), none shared, then </s>, <unk>, <s>
    // and <pad>.
    assert_eq!(r["vocab"], 7 + 9 + 4);
    for key in [
        "target_tokens_per_sec",
        "ms_per_step",
        "greedy_sentences_per_sec",
        "beam_sentences_per_sec",
        "peak_rss_mib",
    ] {
        let v = r[key].as_f64().unwrap_or(f64::NAN);
        assert!(v.is_finite() && v > 0.0, "{key}: {r}");
    }
    let out = conelab(&["bench", "translate", "--corpus", "synthetic"]);
    assert_one_line_error(&out, &["synthetic", "not a parallel corpus"]);
}

/// Issue #58 item 4: a long command draws its progress bar on a terminal — `script(1)` gives it
/// one and keeps every byte it drew — and nothing of it where stderr is a pipe. The bar is drawn
/// from its first real position (it showed an empty `0/0` first) and cleared before the summary.
#[test]
fn progress_bars_are_drawn_on_a_terminal_and_only_there() {
    let has_script = std::process::Command::new("script")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_script {
        crate::harness::skip_or_fail("script(1) (util-linux) is not installed");
        return;
    }
    let text: String = (0..400)
        .map(|i| format!("w{} w{} w{} w{}\n", i % 37, i % 11, i % 53, i % 7))
        .collect();
    let corpus = corpus_dir(text.as_bytes(), OK, OK);
    let tmp = tempfile::tempdir().expect("tmp");
    let (typescript, out) = (tmp.path().join("typescript"), tmp.path().join("bpe"));
    let command = format!(
        "{} data bpe {} --merges 40 --out {}",
        env!("CARGO_BIN_EXE_conelab"),
        s(corpus.path()),
        s(&out)
    );
    let status = std::process::Command::new("script")
        .args(["-qec", &command, s(&typescript)])
        .env("TERM", "xterm")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .status()
        .expect("script");
    assert!(status.success(), "{status:?}");
    let drawn =
        String::from_utf8_lossy(&std::fs::read(&typescript).expect("typescript")).into_owned();
    assert!(drawn.contains("learning merges"), "{drawn:?}");
    assert!(
        drawn.contains("/40"),
        "positions of the 40 merges: {drawn:?}"
    );
    assert!(!drawn.contains("0/0"), "an empty bar was drawn: {drawn:?}");
    assert!(drawn.contains("wrote"), "{drawn:?}");
    // The same command with stderr a pipe: not a byte of the bar.
    let piped = conelab(&[
        "data",
        "bpe",
        s(corpus.path()),
        "--merges",
        "40",
        "--out",
        s(&tmp.path().join("bpe2")),
    ]);
    let stderr = String::from_utf8_lossy(&piped.stderr);
    assert!(
        piped.status.success() && !stderr.contains("merges"),
        "{stderr:?}"
    );
}
