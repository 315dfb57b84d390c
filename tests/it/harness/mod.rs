//! The integration tests' harness: the CI rule for skips (a missing corpus or tool fails under
//! `CI=true`), the datasets, the `conelab` binary and its environment, fixtures, a tmux driver,
//! process and signal helpers, store readers, a seeded random source.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// Under `CI=true` a test must never skip for a missing tool or data set: it fails instead.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// Skips (with the reason printed) outside CI; fails in CI.
pub fn skip_or_fail(reason: &str) {
    if in_ci() {
        panic!("CI=true: {reason} (CI installs what the tests need: .ci/run)");
    }
    println!("SKIPPED: {reason}");
}

/// `../shared/datasets/NAME`, or `$CONELAB_DATASETS/NAME`. `None` (with the reason printed) when the
/// folder is absent, so the calling test can skip — except under `CI=true`, where it fails.
pub fn shared_dataset(name: &str) -> Option<PathBuf> {
    let root = std::env::var_os("CONELAB_DATASETS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/datasets"));
    let dir = root.join(name);
    // A language-model corpus (train.txt) or a parallel one (train.en, train.de, …).
    let has_train = std::fs::read_dir(&dir).is_ok_and(|entries| {
        entries
            .filter_map(Result::ok)
            .any(|e| e.file_name().to_string_lossy().starts_with("train."))
    });
    if has_train {
        Some(dir)
    } else {
        skip_or_fail(&format!(
            "{} not found (set CONELAB_DATASETS to the folder holding ptb/ and wikitext-2/)",
            dir.display()
        ));
        None
    }
}

/// Runs the `conelab` binary with no stdin.
pub fn conelab(args: &[&str]) -> Output {
    conelab_env(args, &[])
}

/// burn-flex keeps one random generator per process (initialisation, dropout): trainers running
/// at once in one process draw from it in turn and lose their determinism. conelab runs one
/// trainer per process; the tests that train in this process take turns through this one lock
/// (one per file was two locks: engine.rs and objectives_engine.rs ran trainers at once, and an
/// exact-resume test failed when they met).
pub fn one_trainer() -> std::sync::MutexGuard<'static, ()> {
    static ONE_TRAINER: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE_TRAINER.lock().unwrap_or_else(|e| e.into_inner())
}

/// The folder standing in for `XDG_STATE_HOME` (the run index) and `XDG_CACHE_HOME` of the
/// binaries the tests start: their runs register there, not in the index of whoever runs the
/// tests. One folder for every test process (not one each: they would pile up in the temp
/// dir); entries of deleted fixtures are pruned by the next listing, and the tests that read
/// the index use an index of their own.
pub fn test_state_home() -> &'static Path {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join("conelab-it-state");
        std::fs::create_dir_all(&dir).expect("test state folder");
        dir
    })
}

/// The `conelab` binary as the tests run it: its run index and config file are the test
/// process's own (a test that needs others sets `XDG_STATE_HOME` / `CONELAB_CONFIG` after this).
pub fn command() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_conelab"));
    c.env("XDG_STATE_HOME", test_state_home())
        .env("XDG_CACHE_HOME", test_state_home().join("cache"))
        .env("CONELAB_CONFIG", test_state_home().join("no-config.toml"))
        .env_remove("CONELAB_RUNS");
    c
}

/// [`conelab`] with environment variables set (a fault plan, …).
pub fn conelab_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = command();
    c.args(args)
        .stdin(std::process::Stdio::null())
        .env_remove("RUST_BACKTRACE");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("the conelab binary runs")
}

/// Asserts the command succeeded (printing its stderr and stdout if not) and returns its stdout.
pub fn succeeded(out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{}: {}{stdout}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Asserts the run failed the way every bad input must: exit status 2 and exactly one line on
/// stderr that contains each of `needles`, no panic, no backtrace.
pub fn assert_one_line_error(out: &Output, needles: &[&str]) -> String {
    one_line_error_with(out, 2, needles)
}

/// [`assert_one_line_error`] for damaged data: exit status 5.
pub fn assert_one_line_damage(out: &Output, needles: &[&str]) -> String {
    one_line_error_with(out, 5, needles)
}

fn one_line_error_with(out: &Output, status: i32, needles: &[&str]) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(
        out.status.code(),
        Some(status),
        "exit status; stderr: {stderr}"
    );
    assert_eq!(
        stderr.lines().count(),
        1,
        "one line expected, got: {stderr}"
    );
    assert!(
        !stderr.contains("panicked") && !stderr.contains("internal error"),
        "{stderr}"
    );
    assert!(!stderr.to_lowercase().contains("backtrace"), "{stderr}");
    // Each cause once (issue: "No space left on device (os error 28): No space left on device
    // (os error 28)").
    let parts: Vec<&str> = stderr.trim_end().split(": ").collect();
    assert!(
        parts.windows(2).all(|w| w[0] != w[1]),
        "a cause printed twice: {stderr}"
    );
    for n in needles {
        assert!(stderr.contains(n), "stderr lacks {n:?}: {stderr}");
    }
    stderr
}

/// A corpus directory with the given split contents.
pub fn corpus_dir(train: &[u8], valid: &[u8], test: &[u8]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, bytes) in [
        ("train.txt", train),
        ("valid.txt", valid),
        ("test.txt", test),
    ] {
        std::fs::write(dir.path().join(name), bytes).expect("write split");
    }
    dir
}

/// A one-layer, 16-wide Transformer: trains in well under a second per step.
pub const SMALL_MODEL: &str = "[model]\npreset = \"tiny\"\nd_model = 16\nlayers = 1\nheads = 2\nd_ff = 32\ncontext = 8\n[train]\nbatch = 2\neval_batch = 2\nwarmup = 2\n";

/// A temporary folder with a small synthetic corpus (`corpus/`, 150 types, 6,000 tokens, 5
/// classes) and `small.toml`.
pub struct Fixture {
    dir: tempfile::TempDir,
}

/// A test that fails halfway must not leave a detached run of its folder training for ever (one
/// did: four of them took the machine's two cores for an hour): every conelab process whose
/// command line names the fixture's folder is killed with it.
impl Drop for Fixture {
    fn drop(&mut self) {
        let folder = self.dir.path().to_string_lossy().to_string();
        // A failed test: what its runs said (a detached run's output.log, every run's
        // train.log) goes to the test's output before the folder is deleted.
        if std::thread::panicking() {
            print_run_logs(self.dir.path(), 0);
        }
        for pid in conelab_processes(&folder) {
            // Not `signal`: it asserts, and a panic while a failed test unwinds aborts. A process
            // that ended in between only makes kill(2) fail.
            // SAFETY: kill(2) with a pid read from /proc.
            unsafe {
                libc::kill(pid as i32, libc::SIGKILL);
            }
        }
    }
}

/// The last lines of every `output.log` and `train.log` under `dir` (two levels), on stderr.
fn print_run_logs(dir: &Path, depth: usize) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.filter_map(|e| e.ok()) {
        let path = e.path();
        if path.is_dir() && depth < 2 {
            print_run_logs(&path, depth + 1);
        } else if path
            .file_name()
            .is_some_and(|n| n == "output.log" || n == "train.log")
            && let Ok(text) = std::fs::read_to_string(&path)
        {
            let lines: Vec<&str> = text.lines().collect();
            let tail = lines[lines.len().saturating_sub(30)..].join("\n");
            eprintln!("--- {} (last 30 lines)\n{tail}", path.display());
        }
    }
}

impl Fixture {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let corpus = dir.path().join("corpus");
        let out = conelab(&[
            "data",
            "synth",
            "--out",
            s(&corpus),
            "--vocab",
            "150",
            "--tokens",
            "6000",
            "--classes",
            "5",
        ]);
        assert!(out.status.success());
        std::fs::write(dir.path().join("small.toml"), SMALL_MODEL).expect("config");
        Self { dir }
    }
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
    /// `conelab train corpus --config small.toml --run-dir RUN EXTRA…`.
    pub fn train(&self, run: &str, extra: &[&str]) -> std::process::Output {
        self.train_with(&self.path("small.toml"), run, extra)
    }

    /// [`Self::train`] with another config file.
    pub fn train_with(&self, config: &Path, run: &str, extra: &[&str]) -> std::process::Output {
        let corpus = self.path("corpus");
        let run_dir = self.path(run);
        let mut args = vec![
            "train",
            s(&corpus),
            "--config",
            s(config),
            "--run-dir",
            s(&run_dir),
        ];
        args.extend_from_slice(extra);
        conelab(&args)
    }
}

pub fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// A tmux server of the test's own (its own socket), to drive the TUI through a real terminal.
pub struct Tmux {
    pub socket: String,
    pub session: String,
}

impl Tmux {
    pub fn run(&self, args: &[&str]) -> std::process::Output {
        Command::new("tmux")
            .args(["-L", &self.socket])
            .args(args)
            .output()
            .expect("tmux runs")
    }

    pub fn keys(&self, keys: &[&str]) {
        for k in keys {
            let out = self.run(&["send-keys", "-t", &self.session, k]);
            assert!(out.status.success(), "send-keys {k}");
            std::thread::sleep(Duration::from_millis(150));
        }
    }

    pub fn screen(&self) -> String {
        String::from_utf8_lossy(
            &self
                .run(&["capture-pane", "-p", "-t", &self.session])
                .stdout,
        )
        .into_owned()
    }

    /// Waits (90 s at most) for the shell to write conelab's exit status into `file`; returns it.
    pub fn wait_for_exit(&self, file: &Path) -> String {
        let start = Instant::now();
        // `echo $? > FILE` creates the file before it writes the line: wait for the whole line
        // (reading at creation gave "" once in CI).
        loop {
            if let Ok(text) = std::fs::read_to_string(file)
                && text.ends_with('\n')
            {
                return text.trim().to_string();
            }
            assert!(
                start.elapsed() < Duration::from_secs(90),
                "conelab did not exit; the screen:\n{}",
                self.screen()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Polls the screen until it contains `needle`.
    pub fn wait_for(&self, needle: &str) -> String {
        let start = Instant::now();
        loop {
            let screen = self.screen();
            if screen.contains(needle) {
                return screen;
            }
            assert!(
                start.elapsed() < Duration::from_secs(90),
                "waited 90 s for {needle:?}; the screen:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
    }
}

pub fn tmux_available() -> bool {
    Command::new("tmux")
        .arg("-V")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// tmux is there; or the test skips (outside CI) / fails (in CI).
pub fn require_tmux() -> bool {
    if tmux_available() {
        return true;
    }
    skip_or_fail("tmux not found: the terminal end-to-end tests need it");
    false
}

/// `conelab train corpus --config small.toml --run-dir RUN EXTRA…` started in the background
/// (stdin closed, stdout and stderr piped).
pub fn spawn_train(f: &Fixture, run: &str, extra: &[&str]) -> std::process::Child {
    spawn_train_env(f, run, extra, &[])
}

/// [`spawn_train`] with extra environment variables (a fault plan).
pub fn spawn_train_env(
    f: &Fixture,
    run: &str,
    extra: &[&str],
    env: &[(&str, &str)],
) -> std::process::Child {
    let corpus = f.path("corpus");
    let config = f.path("small.toml");
    let run_dir = f.path(run);
    let mut args = vec![
        "train",
        s(&corpus),
        "--config",
        s(&config),
        "--run-dir",
        s(&run_dir),
    ];
    args.extend_from_slice(extra);
    let mut c = command();
    c.args(&args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .env_remove("RUST_BACKTRACE");
    for (k, v) in env {
        c.env(k, v);
    }
    c.spawn().expect("conelab starts")
}

/// Reads and drops the child's piped stdout and stderr on threads of their own, for a child whose
/// reports the test does not need: a full pipe would block the child's next write.
pub fn drain(child: &mut std::process::Child) {
    if let Some(mut out) = child.stdout.take() {
        std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    }
    if let Some(mut err) = child.stderr.take() {
        std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
    }
}

/// Reads the child's stdout until a line contains `needle` (90 s at most); returns all read.
pub fn read_until(out: &mut impl std::io::Read, needle: &str) -> String {
    let start = Instant::now();
    let mut seen = String::new();
    let mut buf = [0u8; 4096];
    while !seen.contains(needle) {
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "waited 90 s for {needle:?}: {seen}"
        );
        let n = out.read(&mut buf).expect("read");
        assert!(n > 0, "the output ended before {needle:?}: {seen}");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    seen
}

/// Polls until `ok` holds (90 s at most).
pub fn wait_until(what: &str, mut ok: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ok() {
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "waited 90 s for {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Sends a signal to a process.
pub fn signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) with a pid we started.
    let rc = unsafe { libc::kill(pid as i32, sig) };
    assert_eq!(rc, 0, "kill({pid}, {sig})");
}

/// The process is gone (or a zombie nobody reaped: it runs nothing any more).
pub fn process_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
    }
}

/// Pids of live conelab processes whose command line mentions `needle` (a run folder).
pub fn conelab_processes(needle: &str) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in entries.filter_map(|e| e.ok()) {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        // The program itself is conelab (not a shell or a tmux server naming it in a command).
        let argv0 = cmd.split(|b| *b == 0).next().unwrap_or_default();
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if argv0 == env!("CARGO_BIN_EXE_conelab").as_bytes()
            && cmd.contains(needle)
            && !process_gone(pid)
        {
            out.push(pid);
        }
    }
    out
}

/// `final.json` of a run folder, once the run has written it (90 s at most).
pub fn wait_final(run: &Path) -> serde_json::Value {
    let p = run.join("final.json");
    wait_until(&format!("{}", p.display()), || p.is_file());
    serde_json::from_slice(&std::fs::read(&p).expect("read")).expect("json")
}

/// Every train/loss row of a run's store as (step, loss), in store order.
pub fn store_losses(run: &Path) -> Vec<(u64, f64)> {
    let st = conelab_store::load(run).expect("the run's store");
    let h =
        conelab_store::query::history(st.metrics(), "train", "total", "loss", 0).expect("history");
    h.steps.into_iter().zip(h.values).collect()
}

/// The kinds and steps of a run's store events, in order.
pub fn store_events(run: &Path) -> Vec<(String, u64, String)> {
    let st = conelab_store::load(run).expect("the run's store");
    let kinds = st
        .events()
        .column("kind")
        .expect("kind")
        .str()
        .expect("str")
        .clone();
    let steps = st
        .events()
        .column("step")
        .expect("step")
        .u64()
        .expect("u64")
        .clone();
    let after = st
        .events()
        .column("after")
        .expect("after")
        .str()
        .expect("str")
        .clone();
    kinds
        .iter()
        .zip(steps.iter())
        .zip(after.iter())
        .map(|((k, s), a)| {
            (
                k.unwrap_or_default().to_string(),
                s.unwrap_or_default(),
                a.unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// xorshift64*: seeded draws that are the same on every machine and every run of a test.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A draw in 0..n.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Copies a folder and everything in it.
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("list") {
        let e = e.expect("entry");
        let dest = to.join(e.file_name());
        if e.path().is_dir() {
            copy_dir(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), dest).expect("copy");
        }
    }
}

/// A Python with `requirements` (pip's spelling, pinned) installed in a virtual environment kept
/// under `~/.cache/conelab/test-python/` (made once, a few seconds; a lock keeps two test
/// processes from making it at once). `None` where python3, venv or the package index is not to
/// be had — outside CI only; under `CI=true` that fails the test.
pub fn python_with(requirements: &[&str]) -> Option<PathBuf> {
    let key: String = requirements
        .join("_")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let root = std::env::var_os("HOME")
        .map(|h| PathBuf::from(h).join(".cache/conelab/test-python"))
        .unwrap_or_else(|| std::env::temp_dir().join("conelab-test-python"));
    let venv = root.join(key);
    let python = venv.join("bin/python");
    let ready = venv.join("ready");
    if ready.is_file() {
        return Some(python);
    }
    std::fs::create_dir_all(&root).expect("test-python folder");
    let lock = std::fs::File::create(root.join(".lock")).expect("lock file");
    lock.lock().expect("lock");
    if ready.is_file() {
        return Some(python);
    }
    let _ = std::fs::remove_dir_all(&venv);
    let made = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .output()
        .is_ok_and(|o| o.status.success())
        && Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .args(requirements)
            .output()
            .is_ok_and(|o| o.status.success());
    if made {
        std::fs::write(&ready, requirements.join("\n")).expect("ready mark");
        Some(python)
    } else {
        skip_or_fail(&format!(
            "no python3 with {} (python3 -m venv and pip install failed)",
            requirements.join(", ")
        ));
        None
    }
}

/// Runs `script` with `python`, arguments after it; panics with its stderr when it fails.
pub fn python_run(python: &Path, script: &str, args: &[&str]) -> String {
    let out = Command::new(python)
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "python failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}
