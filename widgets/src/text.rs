//! Clipped text output into a buffer, measured in terminal cells.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::Span;

/// Display width of `s` in terminal cells.
pub(crate) fn text_width(s: &str) -> usize {
    Span::raw(s).width()
}

/// Writes `s` at (`x`, `y`) clipped to `area` (which must lie inside the buffer). Returns the
/// column after the last written cell.
pub(crate) fn put_str(buf: &mut Buffer, area: Rect, x: u16, y: u16, s: &str, style: Style) -> u16 {
    if y < area.top() || y >= area.bottom() || x < area.left() || x >= area.right() {
        return x;
    }
    let max = usize::from(area.right() - x);
    buf.set_stringn(x, y, s, max, style).0
}

/// `s` in at most `w` cells, a cut marked with `…` (a label: `cos Tot…`).
pub(crate) fn marked(s: &str, w: u16) -> String {
    let w = usize::from(w);
    if text_width(s) <= w {
        return s.to_owned();
    }
    if w == 0 {
        return String::new();
    }
    let mut out = String::new();
    for c in s.chars() {
        if text_width(&out) + text_width(c.encode_utf8(&mut [0; 4])) > w - 1 {
            break;
        }
        out.push(c);
    }
    out.push('…');
    out
}

/// A number in at most `w` cells: whole, or `…` — never its first digits, which read as
/// another number.
pub(crate) fn whole_or_marked(s: &str, w: u16) -> &str {
    if text_width(s) <= usize::from(w) {
        s
    } else if w == 0 {
        ""
    } else {
        "…"
    }
}

/// Writes a single character at (`x`, `y`) if that cell lies inside `area`.
pub(crate) fn put_char(buf: &mut Buffer, area: Rect, x: u16, y: u16, ch: char, style: Style) {
    if area.contains((x, y).into())
        && let Some(cell) = buf.cell_mut((x, y))
    {
        cell.set_char(ch).set_style(style);
    }
}
