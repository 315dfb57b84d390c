//! The self-normalisation pane: μ_z, σ_z, the entropy–log Z correlation and their histogram.

use conelab_widgets::{HeatMap, HeatMapScale};
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::Color;
use ratatui::text::Line;
use ratatui::widgets::Paragraph;

use crate::app::App;
use crate::style::Palette;

/// The newest evaluation's self-normalisation: μ_z, σ_z, and where (entropy, log Z) fall.
pub(in crate::ui) fn self_norm(frame: &mut Frame, app: &App, area: Rect, pal: &Palette) {
    let Some(e) = &app.run.last_eval else {
        frame.render_widget(
            Paragraph::new("appears with the first validation evaluation"),
            area,
        );
        return;
    };
    let o = &e.outputs;
    let [text, plot] = Layout::vertical([Constraint::Length(2), Constraint::Min(0)]).areas(area);
    frame.render_widget(
        Paragraph::new(vec![
            Line::raw(format!(
                "step {} · μ_z {:.3} · σ_z {:.3} · corr(H, log Z) {:.3}",
                e.step, o.mu_z, o.sigma_z, o.entropy_log_z_corr
            )),
            Line::styled(
                format!(
                    "PPL {:.2} · unnormalised PPL {:.2}",
                    o.ppl, o.unnormalised_ppl
                ),
                pal.fg(Color::DarkGray),
            ),
        ]),
        text,
    );
    let h = &o.histogram;
    frame.render_widget(
        HeatMap::from_counts(&h.counts, h.log_z_bins, h.entropy_bins)
            .scale(HeatMapScale::Log)
            .x_range(h.entropy_range[0], h.entropy_range[1])
            .y_range(h.log_z_range[0], h.log_z_range[1])
            .x_title("entropy H")
            .y_title("log Z")
            .no_color(pal.no_color),
        plot,
    );
}
