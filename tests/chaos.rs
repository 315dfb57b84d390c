//! Chaos: a run with evaluations, snapshots and checkpoints is killed with SIGKILL twenty times at
//! seeded random moments, each time resumed; at the end its losses equal an uninterrupted run's
//! bit for bit, its store holds every step exactly once, and every export loads.

mod common;

use std::time::{Duration, Instant};

use common::{Fixture, conelab, s, store_losses};

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

/// xorshift64*: the kill moments are the same on every machine and every run of the test.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

fn series(run: &std::path::Path, split: &str, metric: &str) -> Vec<(u64, f64)> {
    let st = conelab::store::load(run).expect("store");
    let h =
        conelab::store::query::history(&st.metrics, split, "total", metric, 0).expect("history");
    h.steps.into_iter().zip(h.values).collect()
}

#[test]
fn twenty_kills_and_resumes_end_where_an_uninterrupted_run_ends_bit_for_bit() {
    let f = Fixture::new();
    let out = f.train("straight", &settings());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
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
        let mut child = if resume {
            let mut args = vec!["train", "--resume", s(&chaos)];
            // The cadences are the run's own; the same flags may be given again.
            args.extend(["--store-flush-secs", "0.05"]);
            std::process::Command::new(env!("CARGO_BIN_EXE_conelab"))
                .args(&args)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("resume")
        } else {
            common::spawn_train(&f, "chaos", &settings())
        };
        // Somewhere in the first 1.2 s of this life: start-up, steps, an evaluation, a
        // checkpoint, a compaction at the end.
        let wait = Duration::from_millis(rng.next() % 1_200);
        let t = Instant::now();
        let mut finished = false;
        while t.elapsed() < wait {
            if child.try_wait().expect("poll").is_some() {
                finished = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        if finished {
            if chaos.join("final.json").is_file() {
                // It got to the end before this kill: start again from a checkpoint further back
                // is not possible, so the chaos ends here with fewer kills.
                break;
            }
            continue;
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
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
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
    let st = conelab::store::load(&chaos).expect("store");
    let keys = ["step", "key"].map(String::from);
    let unique = st
        .metrics
        .unique_stable(
            Some(&keys),
            polars::prelude::UniqueKeepStrategy::First,
            None,
        )
        .expect("unique");
    assert_eq!(unique.height(), st.metrics.height());
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
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let bytes = std::fs::read(&file).expect("parquet");
        use polars_io::prelude::SerReader;
        let df = polars_io::prelude::ParquetReader::new(std::io::Cursor::new(bytes))
            .finish()
            .expect("reads back");
        assert!(df.height() > 0, "{table}");
    }
}
