//! `conelab bench attach`: what viewers cost a run, and what attaching costs a viewer.
//!
//! - Throughput: the same training run with no viewer and with two real viewers (`conelab
//!   attach` processes on pseudo-terminals of 200×60, started through util-linux `script`),
//!   alternated; tokens/s from the run's own store, between the end of the warm-up and the end.
//! - Memory: the run process's resident set (sampled), with and without viewers; a viewer's.
//! - CPU: the share of one core the run and each viewer used over their lives (from
//!   `/proc/PID/stat`): on a machine with few cores, what the viewers' drawing takes from training.
//! - Attach: from nothing to a complete first frame (hello, history, one frame drawn into a
//!   200×60 `TestBackend`) on a run whose store holds `history` steps — a finished one (its
//!   history rebuilt from the store) and a live one (its history sent by the run).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ratatui::Terminal;
use ratatui::backend::TestBackend;
use serde::Serialize;

use super::median;
use conelab_catalog::RunError;
use conelab_client::open::Opened;
use conelab_core::choice::Choice;
use conelab_core::objective::Objectives;
use conelab_core::series::split;
use conelab_data::{FrequencyGroups, GroupBounds};
use conelab_metrics::RowGroups;
use conelab_protocol::message::{ClientMessage, ServerMessage};
use conelab_run::archive::StoreArchive;
use conelab_store as store;
use conelab_tui::app::{App, ViewOptions};

#[derive(Debug, Clone)]
pub struct AttachBench {
    /// Preset of the timed runs.
    pub model: String,
    pub batch: usize,
    pub bptt: Option<usize>,
    /// Untimed steps (the viewers attach during them), then timed steps.
    pub warmup: u64,
    pub steps: u64,
    /// Pairs of runs (without, with viewers), alternating which goes first.
    pub rounds: usize,
    /// Steps in the store of the attach benchmark.
    pub history: u64,
    /// Where the runs go (a temporary folder is made inside).
    pub work: PathBuf,
}

#[derive(Debug, Clone, Serialize)]
pub struct ThroughputRound {
    pub without_viewers: f64,
    pub with_two_viewers: f64,
    pub ratio: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct AttachBenchResult {
    pub model: String,
    pub steps: u64,
    pub rounds: Vec<ThroughputRound>,
    /// Median over rounds of (with ÷ without).
    pub ratio: f64,
    pub run_rss_mib_without_viewers: f64,
    pub run_rss_mib_with_two_viewers: f64,
    /// A viewer of a live run, at its largest.
    pub viewer_rss_mib: f64,
    /// A viewer of a run that is over (nothing arriving), after it settled.
    pub idle_viewer_rss_mib: f64,
    /// CPU of the run process, % of one core over its life (median over rounds).
    pub run_cpu_percent_without_viewers: f64,
    pub run_cpu_percent_with_two_viewers: f64,
    /// CPU of one viewer of the live run, % of one core over its life (the busier of the two,
    /// median over rounds).
    pub viewer_cpu_percent: f64,
    pub history_steps: u64,
    /// Hello to first complete frame, median of 3, on the finished run / on the live run.
    pub attach_finished_ms: f64,
    pub attach_live_ms: f64,
}

fn internal(what: &str) -> impl FnOnce(std::io::Error) -> RunError {
    RunError::internal(what)
}

/// Resident set of a process in MiB (0 when it is gone).
pub fn rss_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

/// CPU time (user + system) a process has used so far, in seconds (0 when it is gone).
pub fn cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // After the command name (in parentheses, which may hold anything) come the state, then
    // 10 more fields, then utime and stime in clock ticks (proc(5) fields 14 and 15).
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0.0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // SAFETY: sysconf(3) has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz <= 0 {
        return 0.0;
    }
    (ticks(11) + ticks(12)) / hz as f64
}

/// A process's CPU as a share of one core: the newest reading of its CPU time over the wall time
/// from its start to that reading.
#[derive(Debug, Default, Clone, Copy)]
struct CpuShare {
    seconds: f64,
    wall: f64,
}

impl CpuShare {
    fn update(&mut self, pid: u32, since: Instant) {
        let seconds = cpu_seconds(pid);
        if seconds >= self.seconds && seconds > 0.0 {
            self.seconds = seconds;
            self.wall = since.elapsed().as_secs_f64();
        }
    }

    fn percent(self) -> f64 {
        if self.wall > 0.0 {
            100.0 * self.seconds / self.wall
        } else {
            f64::NAN
        }
    }
}

/// Samples a process's resident set every 100 ms until `stop`; returns the largest.
fn sample_rss(pid: u32, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<f64> {
    std::thread::spawn(move || {
        let mut max: f64 = 0.0;
        while !stop.load(Ordering::SeqCst) {
            max = max.max(rss_mib(pid));
            std::thread::sleep(Duration::from_millis(100));
        }
        max
    })
}

/// A `conelab attach DIR` on a pseudo-terminal of 200×60 (util-linux `script`).
fn spawn_viewer(dir: &Path) -> Result<Child, RunError> {
    let exe = std::env::current_exe().map_err(internal("finding conelab"))?;
    let command = format!(
        "stty cols 200 rows 60; exec '{}' attach '{}'",
        exe.display(),
        dir.display()
    );
    Command::new("script")
        .args(["-qfec", &command, "/dev/null"])
        .env("TERM", "xterm-256color")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(RunError::internal(
            "starting `script` (util-linux) for a viewer",
        ))
}

/// The viewer process under `script` (its child), once it runs.
fn viewer_pid(script: u32) -> Option<u32> {
    let children =
        std::fs::read_to_string(format!("/proc/{script}/task/{script}/children")).ok()?;
    children.split_whitespace().next()?.parse().ok()
}

fn train_args(b: &AttachBench, dir: &Path, steps: u64) -> Vec<std::ffi::OsString> {
    let mut args: Vec<String> = vec![
        "train".into(),
        "synthetic".into(),
        "--model".into(),
        b.model.clone(),
        "--batch".into(),
        b.batch.to_string(),
        "--steps".into(),
        steps.to_string(),
        "--eval-every".into(),
        "0".into(),
        "--snapshot-every".into(),
        "25".into(),
        "--checkpoint-every".into(),
        "0".into(),
        "--run-dir".into(),
        dir.display().to_string(),
    ];
    if let Some(t) = b.bptt {
        args.extend(["--bptt".into(), t.to_string()]);
    }
    args.into_iter().map(Into::into).collect()
}

/// Tokens/s between the end of the warm-up and the last step, from the run's store.
fn store_throughput(dir: &Path, warmup: u64, tokens_per_step: f64) -> Result<f64, RunError> {
    let st = store::load(dir)?;
    let df = &st.metrics();
    let key = conelab_core::series::series_key(split::TRAIN, "total", "loss");
    let mut rows: Vec<(u64, f64)> = store::rows::metric_rows(df)?
        .into_iter()
        .filter(|r| r.key == key)
        .filter_map(|r| Some((r.step, r.wall_time?)))
        .collect();
    rows.sort_by_key(|r| r.0);
    let start = rows.iter().find(|r| r.0 >= warmup);
    let end = rows.last();
    match (start, end) {
        (Some(a), Some(b)) if b.0 > a.0 && b.1 > a.1 => {
            Ok((b.0 - a.0) as f64 * tokens_per_step / (b.1 - a.1))
        }
        _ => Err(RunError::internal_says("too few steps to time")),
    }
}

/// What one timed run measured.
struct TimedRun {
    tokens_per_sec: f64,
    run_rss_mib: f64,
    viewer_rss_mib: f64,
    run_cpu_percent: f64,
    /// The busier viewer's (NaN without viewers).
    viewer_cpu_percent: f64,
}

/// One timed run with `viewers` viewers attached.
fn timed_run(
    b: &AttachBench,
    dir: &Path,
    viewers: usize,
    tokens_per_step: f64,
) -> Result<TimedRun, RunError> {
    let run_start = Instant::now();
    let ready = conelab_run::detach::spawn(train_args(b, dir, b.warmup + b.steps))?;
    let stop = Arc::new(AtomicBool::new(false));
    let run_rss = sample_rss(ready.pid, stop.clone());
    let mut scripts = Vec::new();
    for _ in 0..viewers {
        scripts.push((
            spawn_viewer(&ready.dir)?,
            Instant::now(),
            CpuShare::default(),
        ));
    }
    let mut viewer_max: f64 = 0.0;
    let mut run_cpu = CpuShare::default();
    let start = Instant::now();
    while conelab_core::run_dir::live::read_final(&ready.dir)
        .ok()
        .flatten()
        .is_none()
    {
        if start.elapsed() > Duration::from_secs(3_600) {
            return Err(RunError::internal_says("the timed run did not end"));
        }
        run_cpu.update(ready.pid, run_start);
        for (s, since, cpu) in &mut scripts {
            if let Some(v) = viewer_pid(s.id()) {
                viewer_max = viewer_max.max(rss_mib(v));
                cpu.update(v, *since);
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let viewer_cpu = scripts
        .iter()
        .map(|(_, _, cpu)| cpu.percent())
        .fold(f64::NAN, f64::max);
    stop.store(true, Ordering::SeqCst);
    let run_max = run_rss.join().unwrap_or(0.0);
    for (mut s, _, _) in scripts {
        if let Some(v) = viewer_pid(s.id()) {
            // A signal only detaches a viewer.
            // SAFETY: kill(2) on a process we started.
            unsafe {
                libc::kill(v as i32, libc::SIGTERM);
            }
        }
        let _ = s.kill();
        let _ = s.wait();
    }
    Ok(TimedRun {
        tokens_per_sec: store_throughput(&ready.dir, b.warmup, tokens_per_step)?,
        run_rss_mib: run_max,
        viewer_rss_mib: viewer_max,
        run_cpu_percent: run_cpu.percent(),
        viewer_cpu_percent: viewer_cpu,
    })
}

/// From opening the run (connect, handshake; or reading its store) to the first complete frame.
pub(crate) fn first_frame(
    open: impl FnOnce() -> Result<Opened, RunError>,
) -> Result<f64, RunError> {
    let t = Instant::now();
    let Opened {
        mut link, hello, ..
    } = open()?;
    link.send(ClientMessage::Subscribe)
        .map_err(RunError::internal("subscribing"))?;
    let mut app = App::new(Objectives::default(), ViewOptions::default());
    loop {
        match link
            .recv_timeout(Duration::from_secs(60))
            .map_err(RunError::internal("waiting for the history"))?
        {
            Some(m @ ServerMessage::History { .. }) => {
                app.on_message(m);
                break;
            }
            Some(_) => {}
            None => return Err(RunError::internal_says("no history within a minute")),
        }
    }
    let bounds = GroupBounds::new(hello.group_bounds[0], hello.group_bounds[1]).unwrap_or_default();
    let rows = RowGroups::from_ranks(&FrequencyGroups::new(hello.vocab_size, bounds));
    let mut terminal =
        Terminal::new(TestBackend::new(200, 60)).map_err(RunError::internal("a test terminal"))?;
    terminal
        .draw(|f| conelab_tui::ui::render(f, &app, Some(&rows)))
        .map_err(RunError::internal("drawing the first frame"))?;
    if app.run.loss.is_empty() {
        return Err(RunError::internal_says("the first frame has no history"));
    }
    Ok(t.elapsed().as_secs_f64() * 1e3)
}

pub fn bench_attach(b: &AttachBench) -> Result<AttachBenchResult, RunError> {
    in_work_folder(&b.work, "attach", |tmp| run_all(b, tmp))
}

/// Runs `f` in a fresh folder `work/conelab-bench-NAME-PID`, removed afterwards whatever `f`
/// returned.
pub(crate) fn in_work_folder<T>(
    work: &Path,
    name: &str,
    f: impl FnOnce(&Path) -> Result<T, RunError>,
) -> Result<T, RunError> {
    let tmp = work.join(format!("conelab-bench-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).map_err(internal("making the work folder"))?;
    let result = f(&tmp);
    let _ = std::fs::remove_dir_all(&tmp);
    result
}

fn run_all(b: &AttachBench, tmp: &Path) -> Result<AttachBenchResult, RunError> {
    let preset = conelab_core::model::Preset::from_name(&b.model)
        .ok_or_else(|| format!("invalid variant: {}", b.model))
        .map_err(RunError::bad_input_at(format!("--model {}", b.model)))?;
    let window = b.bptt.unwrap_or_else(|| preset.config().window());
    let tokens_per_step = (b.batch * window) as f64;
    let mut rounds = Vec::new();
    let (mut rss_without, mut rss_with, mut viewer_rss) = (Vec::new(), Vec::new(), 0.0f64);
    let (mut cpu_without, mut cpu_with, mut viewer_cpu) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..b.rounds.max(1) {
        let order = if r % 2 == 0 { [0, 2] } else { [2, 0] };
        let mut pair = [0.0; 2];
        for viewers in order {
            let dir = tmp.join(format!("round-{r}-viewers-{viewers}"));
            let t = timed_run(b, &dir, viewers, tokens_per_step)?;
            if viewers == 0 {
                pair[0] = t.tokens_per_sec;
                rss_without.push(t.run_rss_mib);
                cpu_without.push(t.run_cpu_percent);
            } else {
                pair[1] = t.tokens_per_sec;
                rss_with.push(t.run_rss_mib);
                cpu_with.push(t.run_cpu_percent);
                viewer_rss = viewer_rss.max(t.viewer_rss_mib);
                viewer_cpu.push(t.viewer_cpu_percent);
            }
            let _ = std::fs::remove_dir_all(&dir);
        }
        rounds.push(ThroughputRound {
            without_viewers: pair[0],
            with_two_viewers: pair[1],
            ratio: pair[1] / pair[0],
        });
    }
    let (finished_ms, live_ms, idle_rss) = attach_times(b, tmp)?;
    Ok(AttachBenchResult {
        model: b.model.clone(),
        steps: b.steps,
        ratio: median(rounds.iter().map(|r| r.ratio).collect()),
        rounds,
        run_rss_mib_without_viewers: median(rss_without),
        run_rss_mib_with_two_viewers: median(rss_with),
        viewer_rss_mib: viewer_rss,
        idle_viewer_rss_mib: idle_rss,
        run_cpu_percent_without_viewers: median(cpu_without),
        run_cpu_percent_with_two_viewers: median(cpu_with),
        viewer_cpu_percent: median(viewer_cpu),
        history_steps: b.history,
        attach_finished_ms: finished_ms,
        attach_live_ms: live_ms,
    })
}

/// A run whose store holds `b.history` steps: finished, then resumed (live); the time to a first
/// frame on each, and an idle viewer's memory.
fn attach_times(b: &AttachBench, tmp: &Path) -> Result<(f64, f64, f64), RunError> {
    let dir = tmp.join("history");
    // A real run of two steps gives the folder its run.toml, vocabulary and a checkpoint ...
    let mut args = train_args(b, &dir, 2);
    args.push("--headless".into());
    let exe = std::env::current_exe().map_err(internal("finding conelab"))?;
    let out = Command::new(&exe)
        .args(&args)
        .stdin(Stdio::null())
        .output()
        .map_err(internal("the history run"))?;
    if !out.status.success() {
        return Err(RunError::internal_says(format!(
            "the history run failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    // ... then its store is given a long history and its checkpoint the step that ends it.
    std::fs::remove_dir_all(dir.join(store::STORE_DIR)).map_err(internal("clearing the store"))?;
    crate::simulate_run(&dir, b.history)?;
    let ckpt = dir.join(conelab_core::run_dir::step_dir_name(2));
    let state_path = ckpt.join("state.json");
    let mut state: serde_json::Value = serde_json::from_slice(
        &std::fs::read(&state_path).map_err(internal("reading state.json"))?,
    )
    .map_err(RunError::internal("timing the attach"))?;
    state["step"] = b.history.into();
    std::fs::write(&state_path, state.to_string()).map_err(internal("writing state.json"))?;
    std::fs::rename(
        &ckpt,
        dir.join(conelab_core::run_dir::step_dir_name(b.history)),
    )
    .map_err(internal("renaming the checkpoint"))?;
    let mut finished = Vec::new();
    for _ in 0..3 {
        finished.push(first_frame(|| {
            Ok(conelab_client::open::open(&dir, &StoreArchive)?)
        })?);
    }
    // An idle viewer: attached to the finished run, nothing arriving.
    let mut script = spawn_viewer(&dir)?;
    std::thread::sleep(Duration::from_secs(3));
    let idle = viewer_pid(script.id()).map_or(0.0, rss_mib);
    if let Some(v) = viewer_pid(script.id()) {
        // SAFETY: kill(2) on a process we started.
        unsafe {
            libc::kill(v as i32, libc::SIGTERM);
        }
    }
    let _ = script.kill();
    let _ = script.wait();
    // Live: resumed at that step, the history in the run's memory.
    let resume: Vec<std::ffi::OsString> = vec![
        "train".into(),
        "--resume".into(),
        dir.clone().into(),
        "--steps".into(),
        (b.history + 1_000_000).to_string().into(),
    ];
    let ready = conelab_run::detach::spawn(resume)?;
    let mut live = Vec::new();
    for _ in 0..3 {
        match first_frame(|| Ok(conelab_client::open::connect(&ready.socket)?)) {
            Ok(ms) => live.push(ms),
            Err(e) => {
                // SAFETY: kill(2) on the run we started.
                unsafe {
                    libc::kill(ready.pid as i32, libc::SIGTERM);
                }
                return Err(e);
            }
        }
    }
    // SAFETY: kill(2) on the run we started.
    unsafe {
        libc::kill(ready.pid as i32, libc::SIGTERM);
    }
    let start = Instant::now();
    while conelab_core::run_dir::live::read_final(&dir)
        .ok()
        .flatten()
        .is_none()
        && start.elapsed() < Duration::from_secs(60)
    {
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok((median(finished), median(live), idle))
}

impl AttachBenchResult {
    /// The table `conelab bench attach` prints.
    pub fn render(&self) -> String {
        let mut out = format!(
            "training {} ({} timed steps per run), tokens/s without viewers vs with two `conelab attach` viewers (200×60 pseudo-terminals), alternated\n{:<8} {:>12} {:>12} {:>8}\n",
            self.model, self.steps, "round", "none", "two", "ratio"
        );
        for (i, round) in self.rounds.iter().enumerate() {
            out.push_str(&format!(
                "{:<8} {:>12.0} {:>12.0} {:>8.3}\n",
                i + 1,
                round.without_viewers,
                round.with_two_viewers,
                round.ratio
            ));
        }
        out.push_str(&format!(
            "median ratio {:.3} (goal ≥ 0.97)\nrun process RSS: {:.0} MiB without viewers, {:.0} MiB with two; a viewer of a live run {:.0} MiB; an idle viewer {:.0} MiB\nCPU, % of one core over a process's life ({} cores here): the run {:.0} without viewers, {:.0} with two; a viewer of the live run {:.1}\nattach to a first frame, {} steps of history: finished run {:.0} ms, live run {:.0} ms (goal ≤ 1000 ms)\n",
            self.ratio,
            self.run_rss_mib_without_viewers,
            self.run_rss_mib_with_two_viewers,
            self.viewer_rss_mib,
            self.idle_viewer_rss_mib,
            std::thread::available_parallelism().map_or(1, |n| n.get()),
            self.run_cpu_percent_without_viewers,
            self.run_cpu_percent_with_two_viewers,
            self.viewer_cpu_percent,
            self.history_steps,
            self.attach_finished_ms,
            self.attach_live_ms
        ));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `/proc/PID/stat` against a second source: getrusage(2) of the same process, after some
    /// work (the two agree to a few clock ticks; threads of other tests add to both).
    #[test]
    fn cpu_seconds_agrees_with_getrusage() {
        let rusage = || {
            // SAFETY: getrusage(2) writes into the struct we pass.
            let usage = unsafe {
                let mut u: libc::rusage = std::mem::zeroed();
                assert_eq!(libc::getrusage(libc::RUSAGE_SELF, &mut u), 0);
                u
            };
            let secs = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
            secs(usage.ru_utime) + secs(usage.ru_stime)
        };
        // 0.3 s of CPU, not of wall time: on a loaded machine the wall clock runs ahead.
        let start = rusage();
        let mut x = 0u64;
        while rusage() - start < 0.3 {
            for _ in 0..10_000 {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
        }
        let from_proc = cpu_seconds(std::process::id());
        let from_rusage = rusage();
        assert!(from_proc >= 0.25, "{from_proc} s after 0.3 s of work");
        assert!(
            (from_proc - from_rusage).abs() < 0.1,
            "/proc {from_proc} s, getrusage {from_rusage} s"
        );
        assert_eq!(cpu_seconds(u32::MAX), 0.0, "no such process");
    }
}
