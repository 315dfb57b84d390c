//! Runs found from any folder: the per-user run index, the run roots, addressing by name, the
//! filters of `conelab runs`, and the config file (docs/REFERENCE.md "Finding runs").

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::harness::{Fixture, assert_one_line_error, command, copy_dir, s};

/// `conelab ARGS` in `cwd` with this test's own run index (`state`) and extra variables.
fn at(cwd: &Path, state: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = command();
    // The data roots are the test's own (CI names the shared datasets in CONELAB_DATASETS).
    c.current_dir(cwd)
        .env_remove("CONELAB_DATASETS")
        .env("XDG_STATE_HOME", state)
        .args(args)
        .stdin(std::process::Stdio::null());
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("conelab runs")
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn rows(out: &Output) -> Vec<serde_json::Value> {
    serde_json::from_str::<serde_json::Value>(&ok(out))
        .expect("json")
        .as_array()
        .expect("array")
        .clone()
}

fn paths(rows: &[serde_json::Value]) -> Vec<PathBuf> {
    let mut p: Vec<PathBuf> = rows
        .iter()
        .map(|r| PathBuf::from(r["path"].as_str().expect("path")))
        .collect();
    p.sort();
    p
}

fn canon(p: &Path) -> PathBuf {
    p.canonicalize().expect("canonical")
}

#[test]
fn runs_are_found_and_addressed_by_name_from_any_folder() {
    let f = Fixture::new();
    let state = f.path("state");
    let home = f.path("home");
    std::fs::create_dir_all(&home).expect("home");
    // Two seeds of one name, trained with the index in `state`.
    for (run, seed) in [("a", "1"), ("b", "2")] {
        let mut c = command();
        c.env("XDG_STATE_HOME", &state).args([
            "train",
            s(&f.path("corpus")),
            "--config",
            s(&f.path("small.toml")),
            "--run-dir",
            s(&f.path(run)),
            "--steps",
            "2",
            "--eval-every",
            "0",
            "--headless",
            "--name",
            "syn-mle",
            "--seed",
            seed,
        ]);
        ok(&c.output().expect("train"));
    }
    // Each run registered itself: one entry file each, holding its absolute path.
    let index = state.join("conelab/runs");
    let entries: Vec<PathBuf> = std::fs::read_dir(&index)
        .expect("index")
        .map(|e| e.expect("entry").path())
        .collect();
    assert_eq!(entries.len(), 2, "{entries:?}");
    let entry: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&entries[0]).expect("entry")).expect("json");
    assert!(Path::new(entry["path"].as_str().expect("path")).is_absolute());
    assert_eq!(entry["name"], "syn-mle");

    // From another folder: both runs, with folder and seed columns.
    let listed = rows(&at(&home, &state, &["runs", "--json"], &[]));
    assert_eq!(
        paths(&listed),
        vec![canon(&f.path("a")), canon(&f.path("b"))]
    );
    let mut seeds: Vec<u64> = listed
        .iter()
        .map(|r| r["seed"].as_u64().expect("seed"))
        .collect();
    seeds.sort();
    assert_eq!(seeds, vec![1, 2]);
    let table = ok(&at(&home, &state, &["runs"], &[]));
    let header = table.lines().next().expect("header");
    for column in ["name", "folder", "seed", "status"] {
        assert!(header.contains(column), "{header}");
    }
    assert_eq!(
        table.lines().filter(|l| l.starts_with("syn-mle")).count(),
        2,
        "{table}"
    );

    // A name two runs share is ambiguous, and the error lists both with their seeds.
    let out = at(&home, &state, &["tag", "syn-mle", "+x"], &[]);
    let line = assert_one_line_error(&out, &["syn-mle names 2 runs", "syn-mle#1", "syn-mle#2"]);
    assert!(line.contains(s(&canon(&f.path("b")))), "{line}");
    // NAME#SEED picks one; so does a folder's name; a prefix when only one run has it.
    ok(&at(&home, &state, &["tag", "syn-mle#2", "+second"], &[]));
    ok(&at(&home, &state, &["rename", "a", "first-run"], &[]));
    ok(&at(&home, &state, &["tag", "first", "+prefixed"], &[]));
    let tagged = rows(&at(
        &home,
        &state,
        &["runs", "--json", "--tag", "second"],
        &[],
    ));
    assert_eq!(paths(&tagged), vec![canon(&f.path("b"))]);
    let tagged = rows(&at(
        &home,
        &state,
        &["runs", "--json", "--tag", "prefixed"],
        &[],
    ));
    assert_eq!(paths(&tagged), vec![canon(&f.path("a"))]);
    assert_eq!(tagged[0]["name"], "first-run");
    // The rename reached the index too.
    let names: Vec<String> = std::fs::read_dir(&index)
        .expect("index")
        .map(|e| std::fs::read_to_string(e.expect("entry").path()).expect("read"))
        .collect();
    assert!(names.iter().any(|t| t.contains("first-run")), "{names:?}");
    // Export and eval take names too.
    let csv = ok(&at(
        &home,
        &state,
        &[
            "export",
            "first-run",
            "syn-mle",
            "--table",
            "config",
            "--format",
            "csv",
        ],
        &[],
    ));
    assert!(csv.lines().count() >= 2, "{csv}");
    // So does inspect (issue #58: a name was "no such file or directory"); a matrix file that
    // is not there is still that.
    let inspected = ok(&at(&home, &state, &["inspect", "first-run", "--json"], &[]));
    assert!(inspected.contains("\"i1\""), "{inspected}");
    let out = at(&home, &state, &["inspect", "no-such.npy"], &[]);
    assert_one_line_error(&out, &["no-such.npy", "no such file"]);
    let out = at(&home, &state, &["inspect", "no-such-run"], &[]);
    assert_one_line_error(&out, &["no-such-run: no such run"]);
    // Nothing of that name: one line that says how many runs were looked at.
    let out = at(&home, &state, &["export", "nothing-like-it"], &[]);
    assert_one_line_error(&out, &["nothing-like-it: no such run", "2 runs known"]);
    // A `#` that is not followed by a seed is part of a name; a name may hold one.
    let out = at(&home, &state, &["tag", "syn-mle#x", "+y"], &[]);
    assert_one_line_error(&out, &["syn-mle#x: no such run"]);
    ok(&at(&home, &state, &["rename", "first-run", "exp#2"], &[]));
    ok(&at(&home, &state, &["tag", "exp#2", "+hashed"], &[]));
    let tagged = rows(&at(
        &home,
        &state,
        &["runs", "--json", "--tag", "hashed"],
        &[],
    ));
    assert_eq!(paths(&tagged), vec![canon(&f.path("a"))]);
    ok(&at(&home, &state, &["rename", "exp#2", "first-run"], &[]));

    // An existing path wins over a name: a folder called syn-mle here is that folder (and
    // changing its labels registers it).
    copy_dir(&f.path("b"), &home.join("syn-mle"));
    ok(&at(&home, &state, &["tag", "syn-mle", "+here"], &[]));
    let here = rows(&at(
        &home,
        &state,
        &["runs", "--json", "--tag", "here"],
        &[],
    ));
    assert_eq!(paths(&here), vec![canon(&home.join("syn-mle"))]);
    let here = rows(&at(
        &home,
        &state,
        &["runs", "--json", "--tag", "here", "."],
        &[],
    ));
    assert_eq!(paths(&here), vec![canon(&home.join("syn-mle"))]);

    // Runs made before the index (an unregistered copy) are found in a run root.
    let roots = f.path("roots");
    copy_dir(&f.path("a"), &roots.join("old-run"));
    ok(&at(&roots, &state, &["rename", "old-run/", "oldie"], &[]));
    std::fs::remove_dir_all(&index).expect("forget the index");
    let env = [("CONELAB_RUNS", s(&roots))];
    let listed = rows(&at(&home, &state, &["runs", "--json"], &env));
    // The rename above registered the copy again; with the index gone, only the root finds it.
    assert_eq!(paths(&listed), vec![canon(&roots.join("old-run"))]);
    ok(&at(&home, &state, &["tag", "oldie", "+found"], &env));

    // Filters and order (the tag above registered old-run again).
    for run in ["a", "b"] {
        ok(&at(
            &home,
            &state,
            &["rename", s(&f.path(run)), &format!("n-{run}")],
            &[],
        ));
    }
    let named = rows(&at(
        &home,
        &state,
        &["runs", "--json", "--name", "n-*", "--sort", "name"],
        &env,
    ));
    let names: Vec<&str> = named
        .iter()
        .map(|r| r["name"].as_str().expect("name"))
        .collect();
    assert_eq!(names, vec!["n-a", "n-b"]);
    let none = rows(&at(
        &home,
        &state,
        &["runs", "--json", "--status", "live"],
        &env,
    ));
    assert!(none.is_empty());
    let all = rows(&at(
        &home,
        &state,
        &["runs", "--json", "--status", "completed,live"],
        &env,
    ));
    assert_eq!(all.len(), 3);
    let out = at(&home, &state, &["runs", "--name", "[oops"], &env);
    assert_one_line_error(&out, &["--name", "not a glob"]);

    // A run deleted for good leaves the index at the next listing; its folder's parent is
    // there on the same filesystem, so it is provably gone.
    std::fs::remove_dir_all(f.path("b")).expect("rm");
    let listed = rows(&at(&home, &state, &["runs", "--json"], &[]));
    let mut expect = vec![canon(&f.path("a")), canon(&roots.join("old-run"))];
    expect.sort();
    assert_eq!(paths(&listed), expect);
    assert_eq!(std::fs::read_dir(&index).expect("index").count(), 2);

    // An index that cannot be read: a warning, then the roots.
    std::fs::remove_dir_all(&index).expect("rm index");
    std::fs::write(&index, "not a folder").expect("file");
    let out = at(&home, &state, &["runs", "--json"], &env);
    assert_eq!(paths(&rows(&out)), vec![canon(&roots.join("old-run"))]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cannot be read"), "{stderr}");
}

/// A full disk under the run index costs only the index entry: the run trains and finishes,
/// says once that it is found by its folder only, and is still found by scanning the roots.
#[test]
fn a_failed_registration_warns_and_the_run_goes_on() {
    let f = Fixture::new();
    let state = f.path("state");
    let root = f.path("roots");
    let run = root.join("a");
    let mut c = command();
    c.env("XDG_STATE_HOME", &state)
        .env("CONELAB_FAULT", "index.write:1+:ENOSPC")
        .args([
            "train",
            s(&f.path("corpus")),
            "--config",
            s(&f.path("small.toml")),
            "--run-dir",
            s(&run),
            "--steps",
            "2",
            "--eval-every",
            "0",
            "--headless",
            "--name",
            "no-index",
        ]);
    let out = c.output().expect("train");
    ok(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.matches("found by its folder only").count(),
        1,
        "{stderr}"
    );
    assert!(stderr.contains("No space left on device"), "{stderr}");
    assert!(run.join("store").is_dir(), "the run itself wrote its store");
    // No entry and no temporary file left in the index.
    let index = state.join("conelab/runs");
    let left: Vec<_> = std::fs::read_dir(&index)
        .map(|d| d.map(|e| e.expect("entry").file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "{left:?}");
    // Found all the same, by name, through the run roots.
    let home = f.path("home");
    std::fs::create_dir_all(&home).expect("home");
    let listed = rows(&at(
        &home,
        &state,
        &["runs", "--json", "--name", "no-index"],
        &[("CONELAB_RUNS", s(&root))],
    ));
    assert_eq!(paths(&listed), vec![canon(&run)]);
}

/// `conelab runs SWEEP-FOLDER` lists the sweep's runs, with a sweep column.
#[test]
fn a_sweep_folder_lists_its_runs() {
    let f = Fixture::new();
    assert!(
        f.train("r", &["--steps", "1", "--eval-every", "0", "--headless"])
            .status
            .success()
    );
    let sweep = f.path("sweeps/grid");
    copy_dir(&f.path("r"), &sweep.join("runs/reg-cos=1"));
    std::fs::write(sweep.join("sweep.json"), "{}").expect("sweep.json");
    let state = f.path("state");
    let listed = rows(&at(
        &f.path(""),
        &state,
        &["runs", "--json", s(&sweep)],
        &[],
    ));
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["sweep"], "grid");
    assert_eq!(listed[0]["dir"], "reg-cos=1");
    // Its parent folder as a root finds it too.
    let listed = rows(&at(
        &f.path(""),
        &state,
        &["runs", "--json", s(&f.path("sweeps"))],
        &[],
    ));
    assert_eq!(listed.len(), 1);
    let table = ok(&at(&f.path(""), &state, &["runs", s(&sweep)], &[]));
    assert!(
        table.lines().next().expect("header").contains("sweep"),
        "{table}"
    );
}

/// A run whose store record (run.json) is damaged: listed as damaged with one line for the file,
/// and no start time or wall time (it once showed 1970-01-01 and 56 years of wall time). A
/// status filter takes the known statuses only, and a listing that filters out every run says
/// so instead of "no runs".
#[test]
fn a_damaged_run_record_lists_no_start_and_filters_are_checked() {
    let f = Fixture::new();
    assert!(
        f.train("r", &["--steps", "1", "--eval-every", "0", "--headless"])
            .status
            .success()
    );
    let run = f.path("list/r");
    copy_dir(&f.path("r"), &run);
    std::fs::write(run.join("store/run.json"), "{bad").expect("damage run.json");
    let state = f.path("state");
    let listed = rows(&at(
        &f.path(""),
        &state,
        &["runs", "--json", s(&f.path("list"))],
        &[],
    ));
    assert_eq!(listed.len(), 1, "{listed:?}");
    let row = &listed[0];
    assert_eq!(row["status"], "damaged", "{row}");
    assert!(
        row["started"].is_null() && row["seconds"].is_null(),
        "{row}"
    );
    let damaged = row["damaged"].as_array().expect("damage lines");
    assert_eq!(damaged.len(), 1, "one line for the one file: {row}");
    let line = damaged[0].as_str().expect("text");
    assert!(
        line.contains("run.json") && line.contains("UUID are unknown"),
        "{line}"
    );
    let table = ok(&at(&f.path(""), &state, &["runs", s(&f.path("list"))], &[]));
    assert!(!table.contains("1970"), "{table}");

    assert_one_line_error(
        &at(&f.path(""), &state, &["runs", "--status", "bogus"], &[]),
        &["--status", "completed"],
    );
    let none = ok(&at(
        &f.path(""),
        &state,
        &["runs", s(&f.path("list")), "--status", "live,failed"],
        &[],
    ));
    assert!(
        none.contains("match the filters (1 without them)"),
        "{none}"
    );
}

/// The config file: its roots are used and shown with their line; a malformed file stops every
/// command with one line naming the line.
#[test]
fn the_config_file_is_read_shown_and_refused_when_malformed() {
    let f = Fixture::new();
    let data = f.path("data");
    copy_dir(&f.path("corpus"), &data.join("mycorpus"));
    let config = f.path("config.toml");
    std::fs::write(
        &config,
        format!(
            "# mine\ndata_roots = [\"{}\"]\ntheme = \"light\"\n",
            data.display()
        ),
    )
    .expect("config");
    let state = f.path("state");
    let env = [("CONELAB_CONFIG", s(&config))];
    let shown = ok(&at(
        &f.path(""),
        &state,
        &["config", "show", "--json"],
        &env,
    ));
    let v: serde_json::Value = serde_json::from_str(&shown).expect("json");
    assert_eq!(v["file_exists"], true);
    assert_eq!(v["data_roots"][0]["path"], s(&data));
    assert_eq!(
        v["data_roots"][0]["from"],
        format!("{}:2", config.display())
    );
    assert_eq!(v["theme"]["value"], "light");
    assert_eq!(v["run_index"]["path"], s(&state.join("conelab/runs")));
    let human = ok(&at(&f.path(""), &state, &["config", "show"], &env));
    assert!(
        human.contains(&format!("{}  [{}:2]", data.display(), config.display())),
        "{human}"
    );
    // A root that is a file is said to be one, not "missing" (issue #58).
    let file_root = f.path("a-file");
    std::fs::write(&file_root, b"x").expect("file");
    std::fs::write(
        &config,
        format!(
            "# mine\ndata_roots = [\"{}\", \"{}\"]\ntheme = \"light\"\n",
            data.display(),
            file_root.display()
        ),
    )
    .expect("config");
    let human = ok(&at(&f.path(""), &state, &["config", "show"], &env));
    assert!(
        human.contains(&format!("{} (not a folder)", file_root.display())),
        "{human}"
    );
    std::fs::write(
        &config,
        format!(
            "# mine\ndata_roots = [\"{}\"]\ntheme = \"light\"\n",
            data.display()
        ),
    )
    .expect("config");
    // The corpus by name, from the configured data root.
    let out = at(
        &f.path(""),
        &state,
        &["data", "stats", "mycorpus", "--json"],
        &env,
    );
    let stats: serde_json::Value = serde_json::from_str(&ok(&out)).expect("json");
    assert!(
        stats["train_tokens"].as_u64().is_some_and(|n| n > 0),
        "{stats}"
    );
    // The default device: shown with its line; a value no device has stops a new run with one
    // line naming the file's line, before anything is made.
    std::fs::write(&config, "theme = \"dark\"\ndevice = \"gpu7\"\n").expect("config");
    let shown = ok(&at(
        &f.path(""),
        &state,
        &["config", "show", "--format", "json"],
        &env,
    ));
    let v: serde_json::Value = serde_json::from_str(&shown).expect("json");
    assert_eq!(v["device"]["value"], "gpu7");
    assert_eq!(v["device"]["from"], format!("{}:2", config.display()));
    let run = f.path("device-run");
    let out = at(
        &f.path(""),
        &state,
        &[
            "train",
            s(&f.path("corpus")),
            "--steps",
            "1",
            "--headless",
            "--run-dir",
            s(&run),
        ],
        &env,
    );
    assert_one_line_error(&out, &[&format!("{}:2", config.display()), "gpu7"]);
    assert!(!run.exists(), "nothing made");
    std::fs::write(&config, "device = \"cpu\"\n").expect("config");
    let out = at(
        &f.path(""),
        &state,
        &[
            "train",
            s(&f.path("corpus")),
            "--config",
            s(&f.path("small.toml")),
            "--steps",
            "1",
            "--eval-every",
            "0",
            "--headless",
            "--run-dir",
            s(&run),
        ],
        &env,
    );
    ok(&out);
    let toml = std::fs::read_to_string(run.join("run.toml")).expect("run.toml");
    assert!(toml.contains("device = \"cpu\""), "{toml}");

    // A typo on line 3: every command refuses, naming the file and line.
    std::fs::write(&config, "theme = \"dark\"\n\nrun_rots = [\"/x\"]\n").expect("config");
    for args in [
        &["runs"][..],
        &["config", "show"],
        &["data", "stats", "mycorpus"],
    ] {
        let out = at(&f.path(""), &state, args, &env);
        assert_one_line_error(&out, &[s(&config), "line 3", "run_rots"]);
    }
}

/// Issue #58 item 5: runs are deleted by name from any folder — listed and asked first
/// (refused without a terminal unless --yes), a live run refused with nothing deleted, the
/// index updated; `gc` collects only runs with nothing to come back to; `runs` shows each run's
/// path and `--watch` lists again until stopped.
#[test]
fn runs_are_deleted_by_name_collected_and_watched() {
    let f = Fixture::new();
    let state = f.path("state");
    let home = f.path("home");
    std::fs::create_dir_all(&home).expect("home");
    for (run, name) in [("k", "keeper"), ("g", "goner")] {
        let mut c = command();
        c.env("XDG_STATE_HOME", &state).args([
            "train",
            s(&f.path("corpus")),
            "--config",
            s(&f.path("small.toml")),
            "--run-dir",
            s(&f.path(run)),
            "--steps",
            "2",
            "--eval-every",
            "0",
            "--headless",
            "--name",
            name,
        ]);
        ok(&c.output().expect("train"));
    }
    // A run killed (-9) before its first checkpoint: nothing to come back to.
    let mut crashy = crate::harness::spawn_train_env(
        &f,
        "c",
        &[
            "--steps",
            "100000000",
            "--eval-every",
            "0",
            "--checkpoint-every",
            "0",
            "--headless",
            "--log-every",
            "1",
            "--name",
            "crashy",
        ],
        &[("XDG_STATE_HOME", s(&state))],
    );
    let mut out = crashy.stdout.take().expect("stdout");
    crate::harness::read_until(&mut out, "step=2 ");
    crate::harness::signal(crashy.id(), libc::SIGKILL);
    let _ = crashy.wait();

    // The table has a path column with each run's absolute folder.
    let table = ok(&at(&home, &state, &["runs"], &[]));
    assert!(
        table.lines().next().expect("header").contains("path"),
        "{table}"
    );
    for run in ["k", "g", "c"] {
        assert!(table.contains(s(&canon(&f.path(run)))), "{table}");
    }

    // No terminal to ask on and no --yes: refused, nothing deleted.
    let out = at(&home, &state, &["rm", "goner"], &[]);
    assert_one_line_error(&out, &["--yes", "nothing deleted"]);
    assert!(f.path("g").join("run.toml").is_file());
    // A live run (its lock held): refused, nothing deleted.
    let lock = conelab_core::run_dir::live::hold(&f.path("k")).expect("hold");
    let out = at(&home, &state, &["rm", "keeper", "goner", "--yes"], &[]);
    assert_one_line_error(&out, &["keeper", "live", "nothing deleted"]);
    drop(lock);
    assert!(f.path("g").join("run.toml").is_file() && f.path("k").join("run.toml").is_file());
    // By name, from another folder: gone, and gone from the index and the listing.
    let index = state.join("conelab/runs");
    let entries = || std::fs::read_dir(&index).expect("index").count();
    let before = entries();
    let out = ok(&at(&home, &state, &["rm", "goner", "--yes"], &[]));
    assert!(
        out.contains(&format!(
            "deleted {}",
            s(&canon(&f.path("k")).with_file_name("g"))
        )),
        "{out}"
    );
    assert!(!f.path("g").exists());
    assert_eq!(entries(), before - 1);
    let listed = rows(&at(&home, &state, &["runs", "--json"], &[]));
    assert_eq!(
        paths(&listed),
        vec![canon(&f.path("c")), canon(&f.path("k"))]
    );
    // Nothing hidden left beside it.
    let hidden: Vec<_> = std::fs::read_dir(f.path("k").parent().expect("parent"))
        .expect("list")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
        .collect();
    assert!(hidden.is_empty(), "{hidden:?}");

    // gc: the crashed run without a checkpoint only; --dry-run deletes nothing.
    let dry = ok(&at(&home, &state, &["gc", "--dry-run"], &[]));
    assert!(
        dry.contains(s(&canon(&f.path("c")))) && dry.contains("crashed"),
        "{dry}"
    );
    assert!(!dry.contains(s(&canon(&f.path("k")))), "{dry}");
    assert!(f.path("c").is_dir());
    let out = at(&home, &state, &["gc"], &[]);
    assert_one_line_error(&out, &["--yes"]);
    ok(&at(&home, &state, &["gc", "--yes"], &[]));
    assert!(!f.path("c").exists() && f.path("k").join("run.toml").is_file());
    let again = ok(&at(&home, &state, &["gc", "--dry-run"], &[]));
    assert!(again.contains("no runs to collect"), "{again}");

    // --watch lists again until stopped; its interval is bounded.
    let out = at(&home, &state, &["runs", "--watch", "0.1"], &[]);
    assert_one_line_error(&out, &["0.5 to 3600"]);
    let mut child = command()
        .current_dir(&home)
        .env("XDG_STATE_HOME", &state)
        .args(["runs", "--watch", "0.5"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("watch");
    let mut stdout = child.stdout.take().expect("stdout");
    let first = crate::harness::read_until(&mut stdout, "keeper");
    let second = crate::harness::read_until(&mut stdout, "every 0.5 s");
    let _ = child.kill();
    let _ = child.wait();
    assert!(first.contains("every 0.5 s"), "{first}");
    assert!(second.contains("every 0.5 s"), "{second}");
}

/// Every subcommand whose usage takes a run (`<RUN>`, `[RUN]`, `<RUNS>`, inspect's `<PATH>`,
/// `--resume <RUN>`), found by walking `conelab --help` and each subcommand's, as a user reads
/// them.
fn subcommands_taking_a_run() -> Vec<String> {
    let help = |args: &[&str]| {
        let out = command().args(args).arg("--help").output().expect("help");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let commands = |text: &str| -> Vec<String> {
        text.lines()
            .skip_while(|l| !l.starts_with("Commands:"))
            .skip(1)
            .take_while(|l| !l.trim().is_empty())
            .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
            .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
            .filter(|c| c != "help")
            .collect()
    };
    let mut found = Vec::new();
    for top in commands(&help(&[])) {
        let text = help(&[&top]);
        let mut paths = vec![(vec![top.clone()], text.clone())];
        for sub in commands(&text) {
            paths.push((vec![top.clone(), sub.clone()], help(&[&top, &sub])));
        }
        for (path, text) in paths {
            let usage = text.lines().find(|l| l.starts_with("Usage:")).unwrap_or("");
            let takes = ["<RUN>", "[RUN]", "<RUNS>"]
                .iter()
                .any(|t| usage.contains(t))
                || (path == ["inspect"] && usage.contains("<PATH>"))
                || text.contains("--resume <RUN>");
            if takes {
                found.push(path.join(" "));
            }
        }
    }
    found.sort();
    found
}

/// Issue #58 item 5: every subcommand that takes a run takes its name, from any folder. The
/// subcommands are found by walking the help (a new one that takes a run joins the walk, or this
/// test fails); each is then given a run's name from a folder that holds no run.
#[test]
fn every_subcommand_that_takes_a_run_takes_its_name() {
    let f = Fixture::new();
    let state = f.path("state");
    let home = f.path("home");
    std::fs::create_dir_all(&home).expect("home");
    let mut c = command();
    c.env("XDG_STATE_HOME", &state).args([
        "train",
        s(&f.path("corpus")),
        "--config",
        s(&f.path("small.toml")),
        "--run-dir",
        s(&f.path("walked")),
        "--steps",
        "2",
        "--eval-every",
        "0",
        "--headless",
        "--name",
        "walk-me",
    ]);
    ok(&c.output().expect("train"));
    // What each is given beside the name; the viewers need a terminal, which a test is not:
    // for them, only that the name was found (they refuse for want of a terminal, not a run).
    let cases: Vec<(&str, Vec<&str>, bool)> = vec![
        ("attach", vec!["attach", "walk-me"], false),
        ("compare", vec!["compare", "walk-me"], false),
        ("eval", vec!["eval", "walk-me", "-k", "0"], true),
        ("export", vec!["export", "walk-me"], true),
        ("inspect", vec!["inspect", "walk-me", "--json"], true),
        ("note", vec!["note", "walk-me", "walked"], true),
        ("rename", vec!["rename", "walk-me", "walk-me"], true),
        ("store compact", vec!["store", "compact", "walk-me"], true),
        ("store verify", vec!["store", "verify", "walk-me"], true),
        ("tag", vec!["tag", "walk-me", "+walked"], true),
        (
            "train",
            vec!["train", "--resume", "walk-me", "--steps", "3", "--headless"],
            true,
        ),
        // Last: it deletes the run.
        ("rm", vec!["rm", "walk-me", "--yes"], true),
    ];
    let mut exercised: Vec<String> = cases.iter().map(|c| c.0.to_string()).collect();
    exercised.sort();
    assert_eq!(
        subcommands_taking_a_run(),
        exercised,
        "a subcommand takes a run and is not walked here (or no longer takes one)"
    );
    for (what, args, succeeds) in cases {
        let out = at(&home, &state, &args, &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !stderr.contains("no such run")
                && !stderr.contains("no such directory")
                && !stderr.contains("no such file"),
            "{what}: {stderr}"
        );
        if succeeds {
            assert!(out.status.success(), "{what}: {stderr}");
        } else {
            assert!(stderr.contains("needs a terminal"), "{what}: {stderr}");
        }
    }
    assert!(!f.path("walked").exists(), "rm took the run by its name");
}
