//! Shared helpers for the integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// `../shared/datasets/NAME`, or `$CONELAB_DATASETS/NAME`. `None` (with the reason printed) when the
/// folder is absent, so the calling test can skip.
pub fn shared_dataset(name: &str) -> Option<PathBuf> {
    let root = std::env::var_os("CONELAB_DATASETS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/datasets"));
    let dir = root.join(name);
    if dir.join("train.txt").is_file() {
        Some(dir)
    } else {
        eprintln!(
            "SKIPPED: {} not found (set CONELAB_DATASETS to the folder holding ptb/ and wikitext-2/)",
            dir.display()
        );
        None
    }
}

/// Runs the `conelab` binary with no stdin.
pub fn conelab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_conelab"))
        .args(args)
        .stdin(std::process::Stdio::null())
        .env_remove("RUST_BACKTRACE")
        .output()
        .expect("the conelab binary runs")
}

/// Asserts the run failed the way every bad input must: exit status 2 and exactly one line on
/// stderr that contains each of `needles`, no panic, no backtrace.
pub fn assert_one_line_error(out: &Output, needles: &[&str]) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(2), "exit status; stderr: {stderr}");
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
        let corpus = self.path("corpus");
        let config = self.path("small.toml");
        let run_dir = self.path(run);
        let mut args = vec![
            "train",
            s(&corpus),
            "--config",
            s(&config),
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
        while !file.exists() {
            assert!(
                start.elapsed() < Duration::from_secs(90),
                "conelab did not exit; the screen:\n{}",
                self.screen()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        std::fs::read_to_string(file)
            .expect("exit status")
            .trim()
            .to_string()
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
