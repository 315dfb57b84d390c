//! `conelab bench chaos`: what hostile same-user clients cost a run. The same training run with
//! no client and under attack, alternated; for each, the run process's CPU time per step (the
//! attackers share the machine's cores, so wall time would measure them, not the run) and its
//! peak resident set. The attack, from threads of this process over the run's socket, all at
//! once for the run's whole life:
//!
//! - **unread**: 6 clients that ask for neighbour lists and projections (replies of up to
//!   megabytes) as fast as they can write and never read a byte;
//! - **idle**: 200 connections that say hello and nothing more (more than the run's 64 places),
//!   each reconnecting as soon as it is closed;
//! - **subscribe storm**: 4 clients that connect, subscribe (the whole history), read a little
//!   and hang up, over and over;
//! - **command flood**: 50,000 identical `set-lr`, 200 `save-checkpoint` and objectives asking
//!   for 10¹³ NCE noise samples, never reading an answer.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::attach::{cpu_seconds, rss_mib};
use super::median;
use conelab_catalog::RunError;
use conelab_core::events::Command;
use conelab_core::objective::{LossKind, ObjectiveChange, Objectives};
use conelab_protocol::message::{ClientMessage, PROTOCOL_VERSION};
use conelab_protocol::wire::encode;

/// A run's resident set past which the benchmark kills it (an attack that works).
const RSS_LIMIT_MIB: f64 = 8_192.0;

#[derive(Debug, Clone)]
pub struct ChaosBench {
    /// Preset of the runs.
    pub model: String,
    pub batch: usize,
    pub steps: u64,
    /// Pairs of runs (quiet, attacked), alternating which goes first.
    pub rounds: usize,
    /// The attackers let loose: any of `unread`, `idle`, `subscribe`, `flood`.
    pub attacks: Vec<String>,
    /// Where the runs go (a temporary folder is made inside).
    pub work: PathBuf,
}

/// One run's figures.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct RunFigures {
    /// CPU time (user + system) of the run process per training step, ms: from the run being
    /// ready to its last step (its start and final evaluation left out).
    pub cpu_ms_per_step: f64,
    pub peak_rss_mib: f64,
    pub wall_s: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ChaosRound {
    pub quiet: RunFigures,
    pub attacked: RunFigures,
    /// attacked ÷ quiet CPU per step.
    pub cpu_ratio: f64,
}

/// What the attackers managed to send (summed over the attacked runs).
#[derive(Debug, Clone, Default, Serialize)]
pub struct AttackCounts {
    pub connections: u64,
    pub requests_unread: u64,
    pub subscribes: u64,
    pub commands: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ChaosBenchResult {
    pub model: String,
    pub attacks: Vec<String>,
    pub steps: u64,
    pub rounds: Vec<ChaosRound>,
    /// Median over rounds of attacked ÷ quiet CPU per step.
    pub cpu_ratio: f64,
    /// The largest peak resident set of a quiet run and of an attacked one.
    pub quiet_rss_mib: f64,
    pub attacked_rss_mib: f64,
    /// What the run's bounds let the attack add, about: 64 connections, each a 4 MiB queue and
    /// two threads (their stacks and allocator heaps, ~4 MiB measured).
    pub rss_bound_added_mib: f64,
    pub attack: AttackCounts,
}

fn train_args(b: &ChaosBench, dir: &Path) -> Vec<std::ffi::OsString> {
    [
        "train",
        "synthetic",
        "--model",
        &b.model,
        "--batch",
        &b.batch.to_string(),
        "--steps",
        &b.steps.to_string(),
        "--eval-every",
        "0",
        "--snapshot-every",
        "25",
        "--checkpoint-every",
        "0",
        "--log-every",
        "1",
        "--run-dir",
        &dir.display().to_string(),
    ]
    .into_iter()
    .map(Into::into)
    .collect()
}

/// One JSON line of the protocol.
fn line(message: &ClientMessage) -> Vec<u8> {
    encode(message).unwrap_or_default().into_bytes()
}

fn hello() -> Vec<u8> {
    line(&ClientMessage::Hello {
        protocol: PROTOCOL_VERSION,
        client: "bench chaos".into(),
    })
}

/// A connection that has said hello (writes give up after a second: a run that stopped
/// reading from an attacker is not waited for).
fn connect(socket: &Path, counts: &Counters) -> Option<UnixStream> {
    let mut s = UnixStream::connect(socket).ok()?;
    s.set_write_timeout(Some(Duration::from_secs(1))).ok()?;
    s.set_read_timeout(Some(Duration::from_millis(200))).ok()?;
    s.write_all(&hello()).ok()?;
    counts.connections.fetch_add(1, Ordering::Relaxed);
    Some(s)
}

#[derive(Default)]
struct Counters {
    connections: AtomicU64,
    requests_unread: AtomicU64,
    subscribes: AtomicU64,
    commands: AtomicU64,
}

/// Starts every attacker; they stop when `stop` is set.
/// The attackers `bench chaos --attack` knows.
pub const ATTACKS: [&str; 4] = ["unread", "idle", "subscribe", "flood"];

fn attack(
    socket: PathBuf,
    stop: Arc<AtomicBool>,
    counts: Arc<Counters>,
    attacks: &[String],
) -> Vec<std::thread::JoinHandle<()>> {
    let mut threads = Vec::new();
    let on = |name: &str| attacks.iter().any(|a| a == name);
    let spawn =
        |threads: &mut Vec<_>, f: Box<dyn FnOnce() + Send>| threads.push(std::thread::spawn(f));
    for k in 0..if on("unread") { 6u64 } else { 0 } {
        let (socket, stop, counts) = (socket.clone(), stop.clone(), counts.clone());
        spawn(
            &mut threads,
            Box::new(move || {
                let mut id = k << 40;
                while !stop.load(Ordering::Relaxed) {
                    let Some(mut s) = connect(&socket, &counts) else {
                        std::thread::sleep(Duration::from_millis(50));
                        continue;
                    };
                    while !stop.load(Ordering::Relaxed) {
                        id += 1;
                        let ask = if id % 2 == 0 {
                            ClientMessage::Neighbors {
                                id,
                                words: (0..500).collect(),
                                k: 100,
                            }
                        } else {
                            ClientMessage::Projection { id, step: None }
                        };
                        if s.write_all(&line(&ask)).is_err() {
                            break;
                        }
                        counts.requests_unread.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }),
        );
    }
    for _ in 0..if on("idle") { 200 } else { 0 } {
        let (socket, stop, counts) = (socket.clone(), stop.clone(), counts.clone());
        spawn(
            &mut threads,
            Box::new(move || {
                let mut buf = [0u8; 4096];
                while !stop.load(Ordering::Relaxed) {
                    let Some(mut s) = connect(&socket, &counts) else {
                        std::thread::sleep(Duration::from_millis(100));
                        continue;
                    };
                    // Idle until the run closes it, then straight back.
                    loop {
                        match s.read(&mut buf) {
                            Ok(0) => break,
                            Ok(_) => {}
                            Err(_) if stop.load(Ordering::Relaxed) => return,
                            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
                            Err(_) => break,
                        }
                    }
                }
            }),
        );
    }
    for _ in 0..if on("subscribe") { 4 } else { 0 } {
        let (socket, stop, counts) = (socket.clone(), stop.clone(), counts.clone());
        spawn(
            &mut threads,
            Box::new(move || {
                let mut buf = vec![0u8; 64 << 10];
                while !stop.load(Ordering::Relaxed) {
                    let Some(mut s) = connect(&socket, &counts) else {
                        std::thread::sleep(Duration::from_millis(20));
                        continue;
                    };
                    if s.write_all(&line(&ClientMessage::Subscribe)).is_ok() {
                        counts.subscribes.fetch_add(1, Ordering::Relaxed);
                        let _ = s.read(&mut buf);
                    }
                }
            }),
        );
    }
    if on("flood") {
        let (socket, stop, counts) = (socket.clone(), stop.clone(), counts.clone());
        spawn(
            &mut threads,
            Box::new(move || {
                let mut nce = Objectives {
                    loss: LossKind::Nce,
                    ..Objectives::default()
                };
                nce.nce.noise = 10_000_000_000_000;
                let mut id = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let Some(mut s) = connect(&socket, &counts) else {
                        std::thread::sleep(Duration::from_millis(50));
                        continue;
                    };
                    for k in 0..50_450u64 {
                        if stop.load(Ordering::Relaxed) {
                            return;
                        }
                        id += 1;
                        let command = match k {
                            k if k % 250 == 0 => Command::SaveCheckpoint,
                            k if k % 1_000 == 1 => Command::Objective {
                                change: ObjectiveChange::Set {
                                    objectives: Box::new(nce.clone()),
                                },
                            },
                            _ => Command::SetLr { lr: 1e-3 },
                        };
                        if s.write_all(&line(&ClientMessage::Command { id, command }))
                            .is_err()
                        {
                            break;
                        }
                        counts.commands.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }),
        );
    }
    threads
}

/// One run, attacked or not, to its end.
fn timed_run(
    b: &ChaosBench,
    dir: &Path,
    attacked: bool,
    counts: &Arc<Counters>,
) -> Result<RunFigures, RunError> {
    let started = Instant::now();
    let ready = conelab_run::detach::spawn(train_args(b, dir))?;
    let stop = Arc::new(AtomicBool::new(false));
    let attackers = if attacked {
        let socket = conelab_core::run_dir::live::read_live(&ready.dir)
            .ok()
            .flatten()
            .map(|l| l.socket)
            .ok_or_else(|| RunError::internal_says("the run announced no socket"))?;
        attack(socket, stop.clone(), counts.clone(), &b.attacks)
    } else {
        Vec::new()
    };
    // CPU from the run being ready to its last step's line in train.log: the start and the
    // final evaluation (the same in both runs) would dilute the ratio.
    let cpu_ready = cpu_seconds(ready.pid);
    let last_step = format!(" step={} ", b.steps);
    let log = ready.dir.join("train.log");
    let (mut cpu, mut rss): (f64, f64) = (0.0, 0.0);
    let mut cpu_trained = None;
    while conelab_core::run_dir::live::read_final(&ready.dir)
        .ok()
        .flatten()
        .is_none()
    {
        if cpu_trained.is_none()
            && std::fs::read_to_string(&log).is_ok_and(|t| {
                t.lines()
                    .any(|l| l.contains("conelab::step") && l.contains(&last_step))
            })
        {
            cpu_trained = Some(cpu_seconds(ready.pid));
        }
        if started.elapsed() > Duration::from_secs(3_600) {
            stop.store(true, Ordering::SeqCst);
            return Err(RunError::internal_says(
                "the run did not end within an hour",
            ));
        }
        // The newest reading before the process is gone.
        cpu = cpu.max(cpu_seconds(ready.pid));
        rss = rss.max(rss_mib(ready.pid));
        if rss > RSS_LIMIT_MIB {
            // An attack that works: stop before it takes the machine.
            stop.store(true, Ordering::SeqCst);
            // SAFETY: kill(2) on the process we started.
            unsafe {
                libc::kill(ready.pid as i32, libc::SIGKILL);
            }
            return Err(RunError::internal_says(
                "the attacked run grew past 8 GiB: killed (a bound does not hold)",
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let wall = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::SeqCst);
    for t in attackers {
        let _ = t.join();
    }
    let trained = cpu_trained.unwrap_or(cpu) - cpu_ready;
    Ok(RunFigures {
        cpu_ms_per_step: 1e3 * trained / b.steps as f64,
        peak_rss_mib: rss,
        wall_s: wall,
    })
}

pub fn bench_chaos(b: &ChaosBench) -> Result<ChaosBenchResult, RunError> {
    let work = tempfile_dir(&b.work)?;
    let counts = Arc::new(Counters::default());
    let mut rounds = Vec::new();
    for round in 0..b.rounds {
        let run = |attacked: bool| {
            let dir = work.join(format!(
                "{}-{round}",
                if attacked { "attacked" } else { "quiet" }
            ));
            timed_run(b, &dir, attacked, &counts)
        };
        // Alternate which goes first: a machine that warms up or slows down favours neither.
        let (quiet, attacked) = if round % 2 == 0 {
            let q = run(false)?;
            (q, run(true)?)
        } else {
            let a = run(true)?;
            (run(false)?, a)
        };
        rounds.push(ChaosRound {
            quiet,
            attacked,
            cpu_ratio: attacked.cpu_ms_per_step / quiet.cpu_ms_per_step,
        });
    }
    let _ = std::fs::remove_dir_all(&work);
    let max = |f: &dyn Fn(&ChaosRound) -> f64| rounds.iter().map(f).fold(0.0, f64::max);
    Ok(ChaosBenchResult {
        model: b.model.clone(),
        attacks: b.attacks.clone(),
        steps: b.steps,
        cpu_ratio: median(rounds.iter().map(|r| r.cpu_ratio).collect()),
        quiet_rss_mib: max(&|r| r.quiet.peak_rss_mib),
        attacked_rss_mib: max(&|r| r.attacked.peak_rss_mib),
        rss_bound_added_mib: 64.0 * 8.0,
        attack: AttackCounts {
            connections: counts.connections.load(Ordering::Relaxed),
            requests_unread: counts.requests_unread.load(Ordering::Relaxed),
            subscribes: counts.subscribes.load(Ordering::Relaxed),
            commands: counts.commands.load(Ordering::Relaxed),
        },
        rounds,
    })
}

fn tempfile_dir(parent: &Path) -> Result<PathBuf, RunError> {
    let dir = parent.join(format!("conelab-bench-chaos-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(RunError::internal("making the bench's folder"))?;
    Ok(dir)
}

impl ChaosBenchResult {
    pub fn render(&self) -> String {
        let mut out = format!(
            "bench chaos: {} runs of {} steps, quiet and under attack ({}), alternated\n\n",
            self.model,
            self.steps,
            self.attacks.join(", ")
        );
        let rows = self.rounds.iter().enumerate().flat_map(|(i, r)| {
            [("quiet", r.quiet), ("attacked", r.attacked)].map(|(what, f)| {
                vec![
                    (i + 1).to_string(),
                    what.to_string(),
                    format!("{:.2}", f.cpu_ms_per_step),
                    format!("{:.0}", f.peak_rss_mib),
                    format!("{:.1}", f.wall_s),
                ]
            })
        });
        out.push_str(&conelab_catalog::list::plain_table(
            ["round", "run", "CPU ms/step", "peak RSS MiB", "wall s"],
            rows,
        ));
        out.push_str(&format!(
            "\nCPU per step, attacked ÷ quiet (median of {}): {:.3}\npeak RSS: quiet {:.0} MiB, \
             attacked {:.0} MiB (+{:.0}; the bounds allow about +{:.0}: 64 connections' queues and \
             threads)\n\
             attack: {} connections, {} requests never read, {} subscribes, {} commands\n",
            self.rounds.len(),
            self.cpu_ratio,
            self.quiet_rss_mib,
            self.attacked_rss_mib,
            self.attacked_rss_mib - self.quiet_rss_mib,
            self.rss_bound_added_mib,
            self.attack.connections,
            self.attack.requests_unread,
            self.attack.subscribes,
            self.attack.commands,
        ));
        out
    }
}
