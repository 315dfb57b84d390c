//! Chaos: a run with evaluations, snapshots and checkpoints is killed with SIGKILL twenty times at
//! seeded random moments (a time into start-up, or a number of steps into the life and a few
//! milliseconds more; the last kill just after the final step), each time resumed; at the end
//! its losses equal an uninterrupted run's bit for bit, its store holds every step exactly once,
//! and every export loads.

use std::io::{BufRead, BufReader};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::harness::{Fixture, Rng, conelab, s, store_losses, succeeded};

const STEPS: u64 = 1_500;
const KILLS: usize = 20;

fn settings() -> Vec<&'static str> {
    vec![
        "--steps",
        "1500",
        "--eval-every",
        "100",
        "--snapshot-every",
        "35",
        "--checkpoint-every",
        "25",
        "--keep",
        "2",
        "--store-flush-secs",
        "0.05",
    ]
}

/// What a life has reported on stdout so far: the step it started from and the newest step.
struct Progress {
    start: Arc<AtomicU64>,
    step: Arc<AtomicU64>,
}

/// Not yet said.
const UNKNOWN: u64 = u64::MAX;

impl Progress {
    fn follow(out: std::process::ChildStdout) -> Self {
        let start = Arc::new(AtomicU64::new(UNKNOWN));
        let step = Arc::new(AtomicU64::new(UNKNOWN));
        let (s, n) = (start.clone(), step.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                let value = |prefix: &str| {
                    line.strip_prefix(prefix)?
                        .split_whitespace()
                        .next()?
                        .parse::<u64>()
                        .ok()
                };
                if let Some(v) = value("start step=") {
                    s.store(v, Ordering::SeqCst);
                } else if let Some(v) = value("step=") {
                    n.store(v, Ordering::SeqCst);
                }
            }
        });
        Self { start, step }
    }

    /// Steps taken in this life, once it has said where it started and taken one.
    fn taken(&self) -> Option<u64> {
        let (start, step) = (
            self.start.load(Ordering::SeqCst),
            self.step.load(Ordering::SeqCst),
        );
        (start != UNKNOWN && step != UNKNOWN).then(|| step.saturating_sub(start))
    }

    fn at(&self) -> Option<u64> {
        let step = self.step.load(Ordering::SeqCst);
        (step != UNKNOWN).then_some(step)
    }
}

/// When a life is killed.
#[derive(Clone, Copy)]
enum Moment {
    /// This long after the start: start-up, opening the store, restoring the checkpoint.
    After(Duration),
    /// `extra` after the life's `steps`-th step: mid-training, across evaluations (every 100),
    /// snapshots (35) and checkpoints (25).
    AfterStep { steps: u64, extra: Duration },
    /// `extra` after the run's last step: the final evaluation, checkpoint and compaction.
    AtTheEnd { extra: Duration },
}

impl Moment {
    fn draw(rng: &mut Rng, last: bool) -> Self {
        let extra = Duration::from_micros(rng.next() % 20_000);
        if last {
            return Moment::AtTheEnd { extra };
        }
        match rng.next() % 4 {
            0 => Moment::After(Duration::from_millis(rng.next() % 400)),
            _ => Moment::AfterStep {
                steps: 1 + rng.next() % 60,
                extra,
            },
        }
    }

    fn reached(self, elapsed: Duration, progress: &Progress) -> bool {
        match self {
            Moment::After(wait) => elapsed >= wait,
            Moment::AfterStep { steps, .. } => progress.taken().is_some_and(|n| n >= steps),
            Moment::AtTheEnd { .. } => progress.at().is_some_and(|s| s >= STEPS),
        }
    }
}

fn series(run: &std::path::Path, split: &str, metric: &str) -> Vec<(u64, f64)> {
    let st = conelab_store::load(run).expect("store");
    let h =
        conelab_store::query::history(st.metrics(), split, "total", metric, 0).expect("history");
    h.steps.into_iter().zip(h.values).collect()
}

#[test]
fn twenty_kills_and_resumes_end_where_an_uninterrupted_run_ends_bit_for_bit() {
    let f = Fixture::new();
    let out = f.train("straight", &settings());
    succeeded(&out);
    let straight = f.path("straight");
    let want = store_losses(&straight);
    assert_eq!(want.len(), STEPS as usize);

    let chaos = f.path("chaos");
    let mut rng = Rng(0x00C0_FFEE_1234_5678);
    let mut kills = 0;
    let mut lives = 0;
    let started = Instant::now();
    while kills < KILLS {
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "the chaos run takes too long ({kills} kills, {lives} lives)"
        );
        lives += 1;
        let resume = chaos.join("run.toml").is_file();
        // A step line for every step on stdout: the kills are placed by the run's own progress,
        // so a faster or slower machine sees the same kind of chaos.
        let mut child = if resume {
            let args = [
                "train",
                "--resume",
                s(&chaos),
                "--store-flush-secs",
                "0.05",
                "--log-every",
                "1",
            ];
            crate::harness::command()
                .args(args)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("resume")
        } else {
            let mut args = settings();
            args.extend(["--log-every", "1"]);
            crate::harness::spawn_train(&f, "chaos", &args)
        };
        drop(child.stderr.take());
        let progress = Progress::follow(child.stdout.take().expect("stdout"));
        let moment = Moment::draw(&mut rng, kills + 1 == KILLS);
        let t = Instant::now();
        let mut finished = false;
        loop {
            if child.try_wait().expect("poll").is_some() {
                finished = true;
                break;
            }
            if moment.reached(t.elapsed(), &progress) {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        if finished {
            if chaos.join("final.json").is_file() {
                // It got to the end before this kill: start again from a checkpoint further back
                // is not possible, so the chaos ends here with fewer kills.
                break;
            }
            continue;
        }
        if let Moment::AfterStep { extra, .. } | Moment::AtTheEnd { extra } = moment {
            // Into whatever follows the step: an evaluation, a snapshot, a checkpoint's write.
            std::thread::sleep(extra);
        }
        child.kill().expect("SIGKILL");
        let _ = child.wait();
        kills += 1;
    }
    // Resume until the run completes.
    let mut tries = 0;
    while !chaos.join("final.json").is_file() {
        tries += 1;
        assert!(tries < 5, "the run does not complete");
        let out = conelab(&["train", "--resume", s(&chaos)]);
        succeeded(&out);
    }
    assert!(
        kills >= KILLS / 2,
        "only {kills} kills landed before the run ended"
    );
    println!("{kills} kills over {lives} lives");

    let got = store_losses(&chaos);
    let steps: Vec<u64> = got.iter().map(|p| p.0).collect();
    assert_eq!(steps, (1..=STEPS).collect::<Vec<_>>(), "every step once");
    for ((s1, a), (s2, b)) in got.iter().zip(&want) {
        assert_eq!(s1, s2);
        assert_eq!(a.to_bits(), b.to_bits(), "loss at step {s1}: {a} vs {b}");
    }
    let valid = series(&chaos, "valid", "loss");
    let valid_want = series(&straight, "valid", "loss");
    assert_eq!(valid.len(), valid_want.len());
    for ((s1, a), (_, b)) in valid.iter().zip(&valid_want) {
        assert_eq!(a.to_bits(), b.to_bits(), "valid loss at step {s1}");
    }
    // No duplicate (step, series) anywhere in the store.
    let st = conelab_store::load(&chaos).expect("store");
    let keys = ["step", "key"].map(String::from);
    let unique = st
        .metrics()
        .unique_stable(
            Some(&keys),
            polars::prelude::UniqueKeepStrategy::First,
            None,
        )
        .expect("unique");
    assert_eq!(unique.height(), st.metrics().height());
    // Every export loads.
    for table in ["groups", "metrics", "curves", "events"] {
        for format in ["csv", "json", "md", "latex"] {
            let out = conelab(&["export", s(&chaos), "--table", table, "--format", format]);
            assert!(
                out.status.success() && !out.stdout.is_empty(),
                "{table} {format}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let file = f.path(&format!("{table}.parquet"));
        let out = conelab(&["export", s(&chaos), "--table", table, "--out", s(&file)]);
        succeeded(&out);
        let bytes = std::fs::read(&file).expect("parquet");
        use polars_io::prelude::SerReader;
        let df = polars_io::prelude::ParquetReader::new(std::io::Cursor::new(bytes))
            .finish()
            .expect("reads back");
        assert!(df.height() > 0, "{table}");
    }
}
