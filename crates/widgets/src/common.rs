//! Small drawing helpers shared by the widgets: clipped text output, braille dot bits, compact
//! number formatting and the `NO_COLOR` convention.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Style};
use ratatui::text::Span;

/// First code point of the Unicode braille block (U+2800, no dots raised).
pub(crate) const BRAILLE_BLANK: u32 = 0x2800;

/// Bit of the braille code point for the dot at column `dx` (0 = left, 1 = right) and row `dy`
/// (0 = top … 3 = bottom) of a 2×4 braille cell.
///
/// Unicode numbers the dots 1, 2, 3, 7 down the left column and 4, 5, 6, 8 down the right one;
/// dot *n* is bit *n − 1* of the offset from U+2800.
pub(crate) const fn braille_bit(dx: usize, dy: usize) -> u8 {
    const BITS: [[u8; 4]; 2] = [
        [0x01, 0x02, 0x04, 0x40], // dots 1, 2, 3, 7
        [0x08, 0x10, 0x20, 0x80], // dots 4, 5, 6, 8
    ];
    BITS[dx & 1][dy & 3]
}

/// The braille character with the given dot bits raised.
pub(crate) fn braille_char(bits: u8) -> char {
    // Every value in U+2800..=U+28FF is a valid scalar value, so this never falls back.
    char::from_u32(BRAILLE_BLANK + u32::from(bits)).unwrap_or(' ')
}

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

/// Writes a single character at (`x`, `y`) if that cell lies inside `area`.
pub(crate) fn put_char(buf: &mut Buffer, area: Rect, x: u16, y: u16, ch: char, style: Style) {
    if area.contains((x, y).into())
        && let Some(cell) = buf.cell_mut((x, y))
    {
        cell.set_char(ch).set_style(style);
    }
}

/// A duration the way the screens and tables show it: `59s`, `1m 05s`, `2h 03m` (coarser the
/// longer; negative or NaN is 0s).
pub fn format_duration(seconds: f64) -> String {
    let s = if seconds.is_finite() {
        seconds.max(0.0).round() as u64
    } else {
        0
    };
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m {:02}s", s / 60, s % 60),
        _ => format!("{}h {:02}m", s / 3600, (s % 3600) / 60),
    }
}

/// Formats a number compactly for axis labels: at most ~3 significant digits, scientific notation
/// for very large or very small magnitudes, `NaN` / `inf` spelled out.
pub fn format_compact(v: f64) -> String {
    if v.is_nan() {
        return "NaN".to_owned();
    }
    if v.is_infinite() {
        return if v > 0.0 { "inf" } else { "-inf" }.to_owned();
    }
    if v == 0.0 {
        return "0".to_owned();
    }
    let mag = v.abs();
    if !(1e-3..1e5).contains(&mag) {
        return format!("{v:.1e}");
    }
    // Three significant digits, capped at four decimals, trailing zeros trimmed.
    let decimals = (2 - mag.log10().floor() as i32).clamp(0, 4) as usize;
    let s = format!("{v:.decimals$}");
    let s = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        s
    };
    if s == "-0" { "0".to_owned() } else { s }
}

#[cfg(test)]
pub(crate) mod testutil {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn braille_bits_follow_unicode_dot_numbering() {
        // Left column top→bottom: dots 1, 2, 3, 7.
        assert_eq!(braille_char(braille_bit(0, 0)), '⠁'); // dot 1 = U+2801
        assert_eq!(braille_char(braille_bit(0, 1)), '⠂'); // dot 2 = U+2802
        assert_eq!(braille_char(braille_bit(0, 2)), '⠄'); // dot 3 = U+2804
        assert_eq!(braille_char(braille_bit(0, 3)), '⡀'); // dot 7 = U+2840
        // Right column top→bottom: dots 4, 5, 6, 8.
        assert_eq!(braille_char(braille_bit(1, 0)), '⠈'); // dot 4 = U+2808
        assert_eq!(braille_char(braille_bit(1, 1)), '⠐'); // dot 5 = U+2810
        assert_eq!(braille_char(braille_bit(1, 2)), '⠠'); // dot 6 = U+2820
        assert_eq!(braille_char(braille_bit(1, 3)), '⢀'); // dot 8 = U+2880
        let all = (0..2)
            .flat_map(|dx| (0..4).map(move |dy| braille_bit(dx, dy)))
            .fold(0u8, |a, b| a | b);
        assert_eq!(braille_char(all), '⣿');
    }

    #[test]
    fn durations_by_hand() {
        assert_eq!(format_duration(0.4), "0s");
        assert_eq!(format_duration(59.4), "59s");
        assert_eq!(format_duration(65.0), "1m 05s");
        assert_eq!(format_duration(7_380.0), "2h 03m");
        assert_eq!(format_duration(-3.0), "0s");
        assert_eq!(format_duration(f64::NAN), "0s");
    }

    #[test]
    fn compact_numbers() {
        assert_eq!(format_compact(0.0), "0");
        assert_eq!(format_compact(1.0), "1");
        assert_eq!(format_compact(-2.5), "-2.5");
        assert_eq!(format_compact(4.56789), "4.57");
        assert_eq!(format_compact(0.012345), "0.0123");
        assert_eq!(format_compact(123.4), "123");
        assert_eq!(format_compact(12345.0), "12345");
        assert_eq!(format_compact(123456.0), "1.2e5");
        assert_eq!(format_compact(0.0001), "1.0e-4");
        assert_eq!(format_compact(f64::NAN), "NaN");
        assert_eq!(format_compact(f64::NEG_INFINITY), "-inf");
        assert_eq!(format_compact(-0.0001), "-1.0e-4");
    }
}
