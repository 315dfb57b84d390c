//! The Embedding pane: the 2-D projection of W, coloured by group, at the scrubbed snapshot.

use super::group_index;
use conelab_widgets::{Layer, Scatter, ScatterMode, ScatterPoint};
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::Color;
use ratatui::widgets::Paragraph;

use crate::app::App;
use crate::style::Palette;
use conelab_metrics::RowGroups;

pub(in crate::ui) fn scatter(
    frame: &mut Frame,
    app: &App,
    groups: Option<&RowGroups>,
    area: Rect,
    pal: &Palette,
) {
    let Some(shown) = app.scatter_frame() else {
        frame.render_widget(Paragraph::new("no snapshot yet"), area);
        return;
    };
    let projection = if app.centred {
        shown.centred.as_ref().or(shown.uncentred.as_ref())
    } else {
        shown.uncentred.as_ref()
    };
    let Some(projection) = projection else {
        frame.render_widget(Paragraph::new("no projection"), area);
        return;
    };
    let group_of = |i: usize| -> u8 { group_index(groups, i as u32).unwrap_or(0) as u8 };
    let points: Vec<ScatterPoint> = projection
        .points
        .iter()
        .enumerate()
        .map(|(i, p)| (f64::from(p[0]), f64::from(p[1]), group_of(i)))
        .collect();
    let [title, plot] = Layout::vertical([Constraint::Length(1), Constraint::Min(0)]).areas(area);
    frame.render_widget(
        Paragraph::new(format!(
            "step {} · {:?} · axes {:.0}%/{:.0}%{}",
            shown.step,
            projection.mode,
            100.0 * projection.explained[0],
            100.0 * projection.explained[1],
            match app.scrub {
                Some(i) => format!(" · {}/{}", i + 1, app.run.projection_steps.len()),
                None if app.run.projection_steps.len() > 1 => " · live".to_string(),
                None => String::new(),
            }
        ))
        .style(pal.fg(Color::DarkGray)),
        title,
    );
    let layers = match groups {
        Some(_) => vec![
            Layer::new("freq", pal.group(0)).glyph('f').priority(0),
            Layer::new("med", pal.group(1)).glyph('m').priority(1),
            // Rare on top: it is the group that drifts.
            Layer::new("rare", pal.group(2)).glyph('r').priority(2),
        ],
        // No counts (a foreign matrix): one set, named as such.
        None => vec![Layer::new("all", pal.group(3)).glyph('o').priority(0)],
    };
    frame.render_widget(
        Scatter::new(&points)
            .layers(layers)
            .highlight(
                app.neighbors
                    .selected
                    .map(|i| i as usize)
                    .filter(|&i| i < points.len()),
            )
            .mode(if app.view.ascii {
                ScatterMode::Ascii
            } else {
                ScatterMode::Braille
            })
            .legend(true)
            .no_color(pal.no_color),
        plot,
    );
}
