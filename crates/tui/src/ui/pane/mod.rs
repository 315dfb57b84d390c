//! The workbench's panes, one file each, drawn from the app's state into their areas (bottom's
//! `canvas/widgets/`).

mod controls;
mod events;
mod groups;
mod neighbors;
mod progress;
mod scatter;
mod self_norm;
mod spectrum;

#[cfg(test)]
pub(super) use neighbors::word_head;

use ratatui::Frame;
use ratatui::layout::Rect;

use crate::app::{App, Pane};
use crate::style::{Palette, pane_block};
use conelab_data::Group;
use conelab_metrics::RowGroups;

/// The pane `pane` in `area`, in its frame.
pub(super) fn render_pane(
    frame: &mut Frame,
    app: &App,
    groups: Option<&RowGroups>,
    pane: Pane,
    area: Rect,
    pal: &Palette,
) {
    let focused = app.focus == pane;
    let b = pane_block(pane.title(), focused, pal);
    let inner = b.inner(area);
    frame.render_widget(b, area);
    match pane {
        Pane::Progress => progress::progress(frame, app, inner, pal),
        Pane::Groups => groups::groups_pane(frame, app, inner, pal),
        Pane::Scatter => scatter::scatter(frame, app, groups, inner, pal),
        Pane::Spectrum => spectrum::spectrum(frame, app, inner, pal),
        Pane::Controls => controls::controls(frame, app, inner),
        Pane::Events => events::events(frame, app, inner, pal),
        Pane::Neighbors => neighbors::neighbors_pane(frame, app, groups, inner, pal),
        Pane::SelfNorm => self_norm::self_norm(frame, app, inner, pal),
    }
}

/// The group of row `id` (0 frequent, 1 medium, 2 rare), where the groups are known.
pub(super) fn group_index(groups: Option<&RowGroups>, id: u32) -> Option<usize> {
    groups
        .filter(|g| (id as usize) < g.len())
        .map(|g| match g.group_of(id as usize) {
            Group::Frequent => 0,
            Group::Medium => 1,
            Group::Rare => 2,
        })
}
