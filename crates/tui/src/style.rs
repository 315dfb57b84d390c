//! The workbench's colours and frames, shared by every view: the palette (which honours
//! `--no-color`), the frequency groups' colours and names, a pane's frame.

use ratatui::style::{Color, Modifier, Style};
use ratatui::widgets::Block;

/// The column names of the frequency groups, with the total.
pub(crate) const GROUP_NAMES: [&str; 4] = ["Freq", "Med", "Rare", "Total"];

pub(crate) struct Palette {
    pub(crate) no_color: bool,
}

impl Palette {
    pub(crate) fn fg(&self, c: Color) -> Style {
        if self.no_color {
            Style::default()
        } else {
            Style::default().fg(c)
        }
    }

    pub(crate) fn group(&self, g: usize) -> Style {
        self.fg([Color::Cyan, Color::Yellow, Color::Magenta, Color::White][g.min(3)])
    }

    pub(crate) fn focus(&self, focused: bool) -> Style {
        match (focused, self.no_color) {
            (true, false) => Style::default().fg(Color::LightGreen),
            (true, true) => Style::default().add_modifier(Modifier::BOLD),
            _ => Style::default(),
        }
    }
}

/// A pane's frame: its title, the border lit when it has the focus.
pub(crate) fn pane_block(title: &str, focused: bool, pal: &Palette) -> Block<'static> {
    Block::bordered()
        .title(title.to_string())
        .border_style(pal.focus(focused))
}
