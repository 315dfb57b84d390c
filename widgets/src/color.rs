//! Colour choices every widget shares: the `NO_COLOR` convention and the light theme.

use ratatui::buffer::Buffer;
use ratatui::style::{Color, Style};

/// `style`, or the plain style when colours are off (NO_COLOR, monochrome terminals).
pub(crate) fn paint(no_color: bool, style: Style) -> Style {
    if no_color { Style::default() } else { style }
}

/// Whether the `NO_COLOR` environment variable asks for colourless output (set and non-empty, see
/// <https://no-color.org>). Pass the result to the widgets' `no_color` builders.
pub fn no_color_from_env() -> bool {
    std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty())
}

/// The colour a foreground chosen for a dark background takes on a light one: the bright
/// variants (made to stand out on black) their normal ones, white black, light grey dark grey,
/// and the pale cyan and yellow blue and red. Only the 16 ANSI colours, so it holds in every
/// terminal; anything else is left as it is.
pub fn on_light(c: Color) -> Color {
    match c {
        Color::White => Color::Black,
        Color::Gray => Color::DarkGray,
        Color::Cyan | Color::LightCyan | Color::LightBlue => Color::Blue,
        Color::Yellow | Color::LightYellow | Color::LightRed => Color::Red,
        Color::LightGreen => Color::Green,
        Color::LightMagenta => Color::Magenta,
        other => other,
    }
}

/// Repaints a drawn buffer for a light background (`--theme light`): every foreground through
/// [`on_light`], dark backgrounds (a highlight) light grey. Applied after drawing, so every
/// widget is covered without knowing of themes.
pub fn light_theme(buf: &mut Buffer) {
    for cell in buf.content.iter_mut() {
        cell.fg = on_light(cell.fg);
        cell.bg = match cell.bg {
            Color::Black | Color::DarkGray | Color::Gray => Color::Gray,
            other => on_light(other),
        };
    }
}
