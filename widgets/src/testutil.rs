//! Turns a rendered buffer into readable text for snapshot tests: the glyphs framed by `|`
//! (so trailing spaces are visible), then a map of each non-blank cell's foreground colour
//! and a list of the modifiers used.

use ratatui::buffer::Buffer;
use ratatui::style::{Color, Modifier};

fn color_code(c: Color) -> char {
    match c {
        Color::Reset => '.',
        Color::Black => 'k',
        Color::Red => 'r',
        Color::Green => 'g',
        Color::Yellow => 'y',
        Color::Blue => 'b',
        Color::Magenta => 'm',
        Color::Cyan => 'c',
        Color::Gray => 'w',
        Color::DarkGray => 'd',
        Color::LightRed => 'R',
        Color::LightGreen => 'G',
        Color::LightYellow => 'Y',
        Color::LightBlue => 'B',
        Color::LightMagenta => 'M',
        Color::LightCyan => 'C',
        Color::White => 'W',
        _ => '?',
    }
}

/// Glyphs plus foreground-colour map of `buf`.
pub(crate) fn render_text(buf: &Buffer) -> String {
    let area = buf.area;
    let mut out = String::new();
    let mut fg = String::new();
    let mut bold = 0usize;
    for y in area.top()..area.bottom() {
        out.push('|');
        fg.push('|');
        for x in area.left()..area.right() {
            let cell = &buf[(x, y)];
            out.push_str(cell.symbol());
            fg.push(if cell.symbol() == " " {
                ' '
            } else {
                color_code(cell.fg)
            });
            if cell.modifier.contains(Modifier::BOLD) {
                bold += 1;
            }
        }
        out.push_str("|\n");
        fg.push_str("|\n");
    }
    out.push_str("fg:\n");
    out.push_str(&fg);
    out.push_str(&format!("bold cells: {bold}\n"));
    out
}
