//! Frame-time check for [`Scatter`]: 33,000 pseudo-random points in three layers rendered at
//! 200×60 into a buffer, 200 times, in braille and ASCII mode. Run with
//! `cargo bench -p conelab-widgets --bench render`; prints the mean milliseconds per frame.
//! Plain `std` timing, no harness: it is a measurement, not a pass/fail test.

use std::hint::black_box;
use std::time::Instant;

use conelab_widgets::{Layer, Scatter, ScatterMode, ScatterPoint};
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::Color;
use ratatui::widgets::Widget;

const POINTS: usize = 33_000;
const FRAMES: u32 = 200;

/// SplitMix64-based uniform floats in [0, 1).
fn uniform(state: &mut u64) -> f64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

fn points() -> Vec<ScatterPoint> {
    let mut state = 42u64;
    (0..POINTS)
        .map(|i| {
            let layer = (i % 10).min(2) as u8; // roughly 10% / 10% / 80%
            let gx = uniform(&mut state) + uniform(&mut state) + uniform(&mut state) - 1.5;
            let gy = uniform(&mut state) + uniform(&mut state) + uniform(&mut state) - 1.5;
            (gx + f64::from(layer), gy * (1.0 + f64::from(layer)), layer)
        })
        .collect()
}

fn main() {
    let pts = points();
    let area = Rect::new(0, 0, 200, 60);
    let mut buf = Buffer::empty(area);
    for mode in [ScatterMode::Braille, ScatterMode::Ascii] {
        let scatter = Scatter::new(&pts)
            .layers([
                Layer::new("frequent", Color::Cyan),
                Layer::new("medium", Color::Yellow),
                Layer::new("rare", Color::Magenta).priority(1),
            ])
            .mode(mode)
            .legend(true)
            .highlight(Some(123));
        // Warm-up frame, not timed.
        (&scatter).render(area, &mut buf);
        let start = Instant::now();
        for _ in 0..FRAMES {
            buf.reset();
            (&scatter).render(black_box(area), &mut buf);
            black_box(&buf);
        }
        let mean_ms = start.elapsed().as_secs_f64() * 1e3 / f64::from(FRAMES);
        println!(
            "scatter {mode:?}: {POINTS} points at {}x{}: {mean_ms:.3} ms/frame (mean of {FRAMES})",
            area.width, area.height
        );
    }
}
