//! Reusable ratatui widgets for conelab, with no knowledge of training: they draw numbers.
//!
//! * [`Scatter`]: layered 2-D scatter plot (braille or ASCII), built for ~33k points.
//! * [`SpectrumPlot`]: positive series against index on a log10 y axis (e.g. singular values).
//! * [`HeatMap`]: a 2-D histogram drawn as shaded cells with axis labels.
//! * [`SparklineTable`]: a table of labelled rows with a sparkline of each row's history.
//!
//! Every widget renders into any [`Rect`](ratatui::layout::Rect), including empty and tiny ones,
//! and tolerates empty data, NaN and infinities. Each has a `no_color` switch; see
//! [`no_color_from_env`] for the `NO_COLOR` convention.

mod braille;
mod color;
mod heatmap;
mod number;
mod scatter;
mod sparkline_table;
mod spectrum;
#[cfg(test)]
mod testutil;
mod text;

pub use color::{light_theme, no_color_from_env, on_light};
pub use heatmap::{HeatMap, HeatMapScale};
pub use number::format_compact;
pub use scatter::{Layer, Scatter, ScatterColoring, ScatterMode, ScatterPoint};
pub use sparkline_table::{SparkRow, SparkScale, SparklineTable};
pub use spectrum::{Series, SpectrumPlot};

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::Terminal;
    use ratatui::backend::TestBackend;
    use ratatui::layout::Rect;
    use ratatui::style::Color;

    /// All four widgets side by side in one `Terminal` frame, as conelab would draw them.
    #[test]
    fn widgets_render_in_a_terminal_frame() {
        let points: Vec<ScatterPoint> = (0..400)
            .map(|i| {
                let t = f64::from(i) * 0.05;
                (t.cos() * t, t.sin() * t, (i % 3) as u8)
            })
            .collect();
        let spectrum: Vec<f64> = (0..50).map(|i| 0.8f64.powi(i)).collect();
        let counts: Vec<u64> = (0..64).map(|i| (i * 7 % 13) as u64).collect();
        let history: Vec<f64> = (0..30).map(|i| f64::from(i).sqrt()).collect();

        let mut terminal = Terminal::new(TestBackend::new(80, 20)).expect("test backend");
        terminal
            .draw(|frame| {
                let [w, h] = [frame.area().width / 2, frame.area().height / 2];
                frame.render_widget(
                    Scatter::new(&points)
                        .layers([
                            Layer::new("a", Color::Cyan),
                            Layer::new("b", Color::Yellow),
                            Layer::new("c", Color::Magenta),
                        ])
                        .legend(true),
                    Rect::new(0, 0, w, h),
                );
                frame.render_widget(
                    SpectrumPlot::new([Series::new("σ", &spectrum).style(Color::Green)]),
                    Rect::new(w, 0, w, h),
                );
                frame.render_widget(
                    HeatMap::from_counts(&counts, 8, 8)
                        .x_title("x")
                        .y_title("y"),
                    Rect::new(0, h, w, h),
                );
                frame.render_widget(
                    SparklineTable::new([SparkRow::new("sqrt", &history, "5.39").delta("+0.09")])
                        .header("row", "history", "now", "Δ"),
                    Rect::new(w, h, w, h),
                );
            })
            .expect("draw");
        insta::assert_snapshot!(terminal.backend());
    }
}
