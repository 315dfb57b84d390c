//! `conelab bench chaos --phased`: one long run, quiet, then attacked, then quiet again, with
//! the run's pace and memory in each phase — what a flood costs while it lasts and what it
//! leaves behind (issue #61). The attackers, from threads of this process (one user):
//!
//! - **idle-flood**: 1,000 connections opened as fast as the socket takes them, each saying
//!   hello and nothing more, reopened when closed;
//! - **slow**: 20 viewers that subscribe and read 1 KiB a second;
//! - **commands**: 20 clients each sending `set-lr` with a value of its own, as fast as it can.
//!
//! A probe viewer connects once a second throughout and times the run's hello: the figure a
//! user feels (the bound: 2 s). Steps/s is the training pace in each phase; RSS is sampled
//! before the attack, at its peak, and once the after-phase has run (a minute by default).

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::attach::{cpu_seconds, rss_mib};
use conelab_catalog::RunError;
use conelab_core::events::Command;
use conelab_protocol::message::{ClientMessage, PROTOCOL_VERSION};
use conelab_protocol::wire::encode;

/// The attackers `--phased` knows.
pub const PHASED_ATTACKS: [&str; 3] = ["idle-flood", "slow", "commands"];

#[derive(Debug, Clone)]
pub struct PhasedChaos {
    pub model: String,
    pub batch: usize,
    pub attacks: Vec<String>,
    /// Seconds of each phase.
    pub quiet_secs: u64,
    pub attack_secs: u64,
    pub after_secs: u64,
    pub work: PathBuf,
}

#[derive(Debug, Clone, Serialize)]
pub struct PhasedChaosResult {
    pub model: String,
    pub attacks: Vec<String>,
    pub steps_per_sec_quiet: f64,
    pub steps_per_sec_attacked: f64,
    pub steps_per_sec_after: f64,
    /// Attacked ÷ quiet steps per second (wall: on a small machine the attackers' own threads
    /// take cores from the run too).
    pub pace_ratio: f64,
    /// The run process's CPU time per step in the quiet and attacked phases, ms, and their
    /// ratio: what the attack costs the run itself, whatever the attackers take of the machine.
    pub cpu_ms_per_step_quiet: f64,
    pub cpu_ms_per_step_attacked: f64,
    pub cpu_ratio: f64,
    pub rss_before_mib: f64,
    pub rss_peak_mib: f64,
    pub rss_after_mib: f64,
    /// After ÷ before.
    pub rss_after_ratio: f64,
    /// The probe viewer's slowest hello (s) during the attack, and how many it got or missed.
    pub probe_max_hello_s: f64,
    pub probe_answered: u64,
    pub probe_unanswered: u64,
    /// What the attackers managed.
    pub connections: u64,
    pub commands_sent: u64,
    /// `set-lr` commands the run applied (its log's `applied` lines for lr).
    pub commands_applied: u64,
}

fn line(message: &ClientMessage) -> Vec<u8> {
    encode(message).unwrap_or_default().into_bytes()
}

fn hello_line() -> Vec<u8> {
    line(&ClientMessage::Hello {
        protocol: PROTOCOL_VERSION,
        client: "bench chaos --phased".into(),
    })
}

fn connect(socket: &Path) -> Option<UnixStream> {
    let mut s = UnixStream::connect(socket).ok()?;
    s.set_write_timeout(Some(Duration::from_secs(1))).ok()?;
    s.set_read_timeout(Some(Duration::from_millis(200))).ok()?;
    s.write_all(&hello_line()).ok()?;
    Some(s)
}

/// The highest step in the run's log so far.
fn logged_step(log: &Path) -> u64 {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("conelab::step"))
        .filter_map(|l| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix("step="))
                .and_then(|n| n.parse().ok())
        })
        .max()
        .unwrap_or(0)
}

#[derive(Default)]
struct Counts {
    connections: AtomicU64,
    commands: AtomicU64,
}

fn attackers(
    socket: &Path,
    attacks: &[String],
    stop: &Arc<AtomicBool>,
    counts: &Arc<Counts>,
) -> Vec<std::thread::JoinHandle<()>> {
    let on = |a: &str| attacks.iter().any(|x| x == a);
    let mut threads = Vec::new();
    if on("idle-flood") {
        let (socket, stop, counts) = (socket.to_path_buf(), stop.clone(), counts.clone());
        threads.push(std::thread::spawn(move || {
            let mut open: Vec<UnixStream> = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                // Keep 1,000 open: drop the ones the run closed, open more.
                open.retain(still_open);
                while open.len() < 1_000 && !stop.load(Ordering::Relaxed) {
                    match connect(&socket) {
                        Some(s) => {
                            counts.connections.fetch_add(1, Ordering::Relaxed);
                            open.push(s);
                        }
                        None => break,
                    }
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }));
    }
    if on("slow") {
        for _ in 0..20 {
            let (socket, stop, counts) = (socket.to_path_buf(), stop.clone(), counts.clone());
            threads.push(std::thread::spawn(move || {
                let mut buf = [0u8; 1024];
                while !stop.load(Ordering::Relaxed) {
                    let Some(mut s) = connect(&socket) else {
                        std::thread::sleep(Duration::from_millis(100));
                        continue;
                    };
                    counts.connections.fetch_add(1, Ordering::Relaxed);
                    if s.write_all(&line(&ClientMessage::Subscribe)).is_err() {
                        continue;
                    }
                    while !stop.load(Ordering::Relaxed) {
                        match s.read(&mut buf) {
                            Ok(0) => break,
                            Ok(_) => std::thread::sleep(Duration::from_secs(1)),
                            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
                            Err(_) => break,
                        }
                    }
                }
            }));
        }
    }
    if on("commands") {
        for k in 0..20u64 {
            let (socket, stop, counts) = (socket.to_path_buf(), stop.clone(), counts.clone());
            threads.push(std::thread::spawn(move || {
                let mut id = k << 40;
                while !stop.load(Ordering::Relaxed) {
                    let Some(mut s) = connect(&socket) else {
                        std::thread::sleep(Duration::from_millis(50));
                        continue;
                    };
                    counts.connections.fetch_add(1, Ordering::Relaxed);
                    while !stop.load(Ordering::Relaxed) {
                        id += 1;
                        // A value of its own each time: nothing to coalesce.
                        let lr = 1e-4 * (1.0 + (id % 1_000) as f64 / 1_000.0 + k as f64);
                        let command = ClientMessage::Command {
                            id,
                            command: Command::SetLr { lr },
                        };
                        if s.write_all(&line(&command)).is_err() {
                            break;
                        }
                        counts.commands.fetch_add(1, Ordering::Relaxed);
                        // Drain what the run answers (the replies would fill its queue).
                        let mut sink = [0u8; 65_536];
                        let _ = s.set_nonblocking(true);
                        while matches!((&s).read(&mut sink), Ok(n) if n > 0) {}
                        let _ = s.set_nonblocking(false);
                    }
                }
            }));
        }
    }
    threads
}

/// Whether the run still holds `s` open (what it sent, its hello, is read and dropped).
fn still_open(s: &UnixStream) -> bool {
    let mut buf = [0u8; 4096];
    if s.set_nonblocking(true).is_err() {
        return false;
    }
    loop {
        match (&*s).read(&mut buf) {
            Ok(0) => return false,
            Ok(_) => continue,
            Err(e) => return e.kind() == std::io::ErrorKind::WouldBlock,
        }
    }
}

/// What the probe viewer saw.
#[derive(Debug, Clone, Copy, Default, Serialize, serde::Deserialize)]
pub struct ProbeResult {
    /// The slowest hello, s.
    pub worst_s: f64,
    pub answered: u64,
    pub unanswered: u64,
}

/// A viewer connecting to `socket` once a second for `seconds`: how long the run takes to say
/// hello (`conelab bench hello-probe`, a process of its own: the run paces connections by
/// process, and the attackers' process is not the viewer's).
pub fn probe_hello(socket: &Path, seconds: u64) -> ProbeResult {
    let mut r = ProbeResult::default();
    let until = Instant::now() + Duration::from_secs(seconds);
    while Instant::now() < until {
        let started = Instant::now();
        let said = (|| {
            let mut s = UnixStream::connect(socket).ok()?;
            s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
            s.write_all(&hello_line()).ok()?;
            let mut buf = [0u8; 4096];
            let n = s.read(&mut buf).ok()?;
            std::str::from_utf8(&buf[..n])
                .ok()?
                .contains("\"hello\"")
                .then_some(())
        })();
        match said {
            Some(()) => {
                r.answered += 1;
                r.worst_s = r.worst_s.max(started.elapsed().as_secs_f64());
            }
            None => r.unanswered += 1,
        }
        std::thread::sleep(Duration::from_secs(1).saturating_sub(started.elapsed()));
    }
    r
}

/// The probe as a process of its own, for `seconds`.
fn spawn_probe(socket: &Path, seconds: u64) -> Option<std::process::Child> {
    std::process::Command::new(std::env::current_exe().ok()?)
        .args(["bench", "hello-probe"])
        .arg(socket)
        .args(["--seconds", &seconds.to_string()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .ok()
}

/// Sleeps `secs`, sampling the run's RSS; the largest sample.
fn sample_rss(pid: u32, secs: u64) -> f64 {
    let until = Instant::now() + Duration::from_secs(secs);
    let mut peak = 0.0f64;
    while Instant::now() < until {
        peak = peak.max(rss_mib(pid));
        std::thread::sleep(Duration::from_millis(100));
    }
    peak
}

pub fn bench_phased(b: &PhasedChaos) -> Result<PhasedChaosResult, RunError> {
    let work = b
        .work
        .join(format!("conelab-bench-phased-{}", std::process::id()));
    std::fs::create_dir_all(&work).map_err(RunError::internal("making the bench's folder"))?;
    let dir = work.join("run");
    let args: Vec<std::ffi::OsString> = [
        "train",
        "synthetic",
        "--model",
        &b.model,
        "--batch",
        &b.batch.to_string(),
        "--steps",
        "100000000",
        "--eval-every",
        "0",
        "--snapshot-every",
        "0",
        "--checkpoint-every",
        "0",
        "--log-every",
        "1",
        "--run-dir",
        &dir.display().to_string(),
    ]
    .into_iter()
    .map(Into::into)
    .collect();
    let ready = conelab_run::detach::spawn(args)?;
    let socket = conelab_core::run_dir::live::read_live(&ready.dir)
        .ok()
        .flatten()
        .map(|l| l.socket)
        .ok_or_else(|| RunError::internal_says("the run announced no socket"))?;
    let log = ready.dir.join("train.log");
    let pid = ready.pid;
    // Warm up, then the quiet phase.
    std::thread::sleep(Duration::from_secs(3));
    let (s0, c0) = (logged_step(&log), cpu_seconds(pid));
    let t0 = Instant::now();
    let rss_before = sample_rss(pid, b.quiet_secs);
    let quiet = (logged_step(&log) - s0) as f64 / t0.elapsed().as_secs_f64();

    let cpu_quiet = (cpu_seconds(pid) - c0) * 1e3 / (logged_step(&log) - s0).max(1) as f64;

    let stop = Arc::new(AtomicBool::new(false));
    let counts = Arc::new(Counts::default());
    let prober = spawn_probe(&socket, b.attack_secs);
    let threads = attackers(&socket, &b.attacks, &stop, &counts);
    let (s1, c1) = (logged_step(&log), cpu_seconds(pid));
    let t1 = Instant::now();
    let rss_peak = sample_rss(pid, b.attack_secs);
    let attacked = (logged_step(&log) - s1) as f64 / t1.elapsed().as_secs_f64();
    let cpu_attacked = (cpu_seconds(pid) - c1) * 1e3 / (logged_step(&log) - s1).max(1) as f64;
    stop.store(true, Ordering::SeqCst);
    for t in threads {
        let _ = t.join();
    }
    let probe = prober
        .and_then(|p| p.wait_with_output().ok())
        .and_then(|o| serde_json::from_slice::<ProbeResult>(&o.stdout).ok())
        .unwrap_or(ProbeResult {
            worst_s: f64::NAN,
            ..ProbeResult::default()
        });

    let s2 = logged_step(&log);
    let t2 = Instant::now();
    std::thread::sleep(Duration::from_secs(b.after_secs));
    let after = (logged_step(&log) - s2) as f64 / t2.elapsed().as_secs_f64();
    let rss_after = rss_mib(pid);

    // Stop the run (through its socket, as a viewer would) and wait for its end.
    if let Some(mut s) = connect(&socket) {
        let _ = s.write_all(&line(&ClientMessage::Command {
            id: 1,
            command: Command::Stop { save: false },
        }));
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    while conelab_core::run_dir::live::read_final(&ready.dir)
        .ok()
        .flatten()
        .is_none()
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(100));
    }
    let applied = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("applied") && l.contains("lr"))
        .count() as u64;
    let _ = std::fs::remove_dir_all(&work);
    Ok(PhasedChaosResult {
        model: b.model.clone(),
        attacks: b.attacks.clone(),
        steps_per_sec_quiet: quiet,
        steps_per_sec_attacked: attacked,
        steps_per_sec_after: after,
        pace_ratio: attacked / quiet,
        rss_before_mib: rss_before,
        rss_peak_mib: rss_peak,
        rss_after_mib: rss_after,
        rss_after_ratio: rss_after / rss_before,
        cpu_ms_per_step_quiet: cpu_quiet,
        cpu_ms_per_step_attacked: cpu_attacked,
        cpu_ratio: cpu_attacked / cpu_quiet,
        probe_max_hello_s: probe.worst_s,
        probe_answered: probe.answered,
        probe_unanswered: probe.unanswered,
        connections: counts.connections.load(Ordering::Relaxed),
        commands_sent: counts.commands.load(Ordering::Relaxed),
        commands_applied: applied,
    })
}

impl PhasedChaosResult {
    pub fn render(&self) -> String {
        let rows = [
            vec![
                "quiet".to_string(),
                format!("{:.1}", self.steps_per_sec_quiet),
                format!("{:.1}", self.cpu_ms_per_step_quiet),
                format!("{:.0} (before)", self.rss_before_mib),
            ],
            vec![
                "attacked".to_string(),
                format!("{:.1}", self.steps_per_sec_attacked),
                format!("{:.1}", self.cpu_ms_per_step_attacked),
                format!("{:.0} (peak)", self.rss_peak_mib),
            ],
            vec![
                "after".to_string(),
                format!("{:.1}", self.steps_per_sec_after),
                "".to_string(),
                format!("{:.0} (at its end)", self.rss_after_mib),
            ],
        ];
        let mut out = format!(
            "bench chaos --phased: one {} run, quiet, attacked ({}), after\n\n",
            self.model,
            self.attacks.join(", ")
        );
        out.push_str(&conelab_catalog::list::plain_table(
            ["phase", "steps/s", "run CPU ms/step", "RSS MiB"],
            rows,
        ));
        out.push_str(&format!(
            "\nsteps/s attacked ÷ quiet: {:.3}; the run's CPU per step attacked ÷ quiet: {:.3}; \
             RSS after ÷ before: {:.2}\n\
             probe viewer: slowest hello {:.2} s ({} answered, {} not)\n\
             attack: {} connections, {} commands sent, {} applied\n",
            self.pace_ratio,
            self.cpu_ratio,
            self.rss_after_ratio,
            self.probe_max_hello_s,
            self.probe_answered,
            self.probe_unanswered,
            self.connections,
            self.commands_sent,
            self.commands_applied,
        ));
        out
    }
}
