//! The Spectrum pane: W's normalised singular values now, at the start and against a reference, and spectrum control's prior.

use conelab_widgets::{Series, format_compact};
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Style};
use ratatui::widgets::Paragraph;

use crate::app::App;
use crate::chrome;
use crate::style::Palette;

pub(in crate::ui) fn spectrum(frame: &mut Frame, app: &App, area: Rect, pal: &Palette) {
    // Scrubbed back in time: the shown snapshot's spectrum (it travels with its projections),
    // labelled with its step.
    let scrubbed = app
        .scrub
        .and_then(|_| app.scatter_frame())
        .filter(|f| !f.spectrum.is_empty())
        .map(|f| (format!("step {}", f.step), &f.spectrum));
    let newest = match (&app.analysis, &app.run.last_embedding) {
        (Some(a), _) => Some(&a.panel.total.sv_norm),
        (None, Some(e)) if !e.total.sv_norm.is_empty() => Some(&e.total.sv_norm),
        _ => None,
    };
    let Some((label, now)) = scrubbed.or_else(|| newest.map(|n| ("now".to_string(), n))) else {
        chrome::spectra(frame, area, Vec::new(), pal.no_color, Style::default());
        return;
    };
    let mut series = vec![Series::new(label.as_str(), now).style(pal.fg(Color::Green))];
    if let Some((label, values)) = &app.spectrum_reference {
        series.push(Series::new(label.as_str(), values).style(pal.fg(Color::Yellow)));
    }
    if let Some(first) = &app.run.first_spectrum {
        series.push(Series::new("start", first).style(pal.fg(Color::DarkGray)));
    }
    // Under spectrum control: the prior's shape beside W's, and one line of numbers saying
    // whether σ reached it and whether σ still are W's singular values.
    let spectral = app
        .run
        .last_embedding
        .as_ref()
        .and_then(|e| e.spectral.as_ref());
    let prior: Vec<f64> = spectral
        .and_then(|s| {
            let t1 = *s.targets.first()?;
            (t1 > 0.0).then(|| s.targets.iter().map(|t| t / t1).collect())
        })
        .unwrap_or_default();
    if !prior.is_empty() {
        series.push(Series::new("prior", &prior).style(pal.fg(Color::Magenta)));
    }
    let area = match spectral {
        Some(s) if area.height >= 5 => {
            let [top, rest] =
                Layout::vertical([Constraint::Length(2), Constraint::Min(0)]).areas(area);
            frame.render_widget(Paragraph::new(spectral_lines(s)), top);
            rest
        }
        _ => area,
    };
    chrome::spectra(frame, area, series, pal.no_color, Style::default());
}

/// Spectrum control in two lines: σ's distance from the prior, from W's own singular values, and
/// U's from orthonormal columns.
pub(super) fn spectral_lines(s: &conelab_core::events::SpectralStats) -> String {
    let first = |v: &[f64]| v.first().map_or("–".to_string(), |x| format_compact(*x));
    format!(
        "σ₁ {} → prior {} · off prior {}\nσ vs W {} · ‖UᵀU−I‖ {} · σ {}",
        first(&s.sigma),
        first(&s.targets),
        percent(s.prior_gap()),
        percent(s.sigma_vs_w),
        format_compact(s.u_orth),
        s.update
    )
}

pub(super) fn percent(x: f64) -> String {
    if x.is_finite() {
        format!("{:.1}%", 100.0 * x)
    } else {
        "–".into()
    }
}
