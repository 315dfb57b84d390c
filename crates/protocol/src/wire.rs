//! The control protocol's lines: one JSON message per line, each read with a bound so that no
//! peer can make the other hold more than it allows.

use std::io::{self, BufRead};

use serde::Serialize;

/// One line read with a bound.
#[derive(Debug, PartialEq)]
pub enum Line {
    Text(String),
    /// Longer than the bound; the reader consumed the whole line (or up to the end of input).
    TooLong(usize),
    Eof,
}

/// Reads one `\n`-terminated line of at most `max` bytes (the newline excluded) without ever
/// holding more than `max` bytes: a longer line is consumed and reported, not buffered.
pub fn read_line_limited(reader: &mut impl BufRead, max: usize) -> io::Result<Line> {
    read_line(reader, max, true)
}

/// [`read_line_limited`] that stops as soon as a line passes `max` bytes, its rest unread, with
/// [`Line::TooLong`] of the bytes read so far: for a reader that disconnects on it (a client
/// streaming one endless line is not read to its end).
pub fn read_line_bounded(reader: &mut impl BufRead, max: usize) -> io::Result<Line> {
    read_line(reader, max, false)
}

fn read_line(reader: &mut impl BufRead, max: usize, skip_whole: bool) -> io::Result<Line> {
    let mut buf: Vec<u8> = Vec::new();
    let mut total = 0usize;
    loop {
        let available = match reader.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            return Ok(if total == 0 {
                Line::Eof
            } else if total > max {
                Line::TooLong(total)
            } else {
                Line::Text(String::from_utf8_lossy(&buf).into_owned())
            });
        }
        let (chunk, done) = match available.iter().position(|&b| b == b'\n') {
            Some(i) => (&available[..i], Some(i + 1)),
            None => (available, None),
        };
        total += chunk.len();
        if total <= max {
            buf.extend_from_slice(chunk);
        } else {
            buf = Vec::new();
        }
        let used = done.unwrap_or(available.len());
        reader.consume(used);
        if total > max && !skip_whole {
            return Ok(Line::TooLong(total));
        }
        if done.is_some() {
            return Ok(if total > max {
                Line::TooLong(total)
            } else {
                Line::Text(String::from_utf8_lossy(&buf).into_owned())
            });
        }
    }
}

/// A message as one JSON line (with its newline).
pub fn encode<T: Serialize>(message: &T) -> Result<String, serde_json::Error> {
    let mut s = serde_json::to_string(message)?;
    s.push('\n');
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    #[test]
    fn lines_are_read_up_to_the_bound_and_longer_ones_are_skipped_whole() {
        let input = format!("short\n{}\nnext\nlast", "x".repeat(100));
        let mut r = std::io::BufReader::with_capacity(16, Cursor::new(input));
        assert_eq!(
            read_line_limited(&mut r, 10).expect("1"),
            Line::Text("short".into())
        );
        assert_eq!(
            read_line_limited(&mut r, 10).expect("2"),
            Line::TooLong(100)
        );
        assert_eq!(
            read_line_limited(&mut r, 10).expect("3"),
            Line::Text("next".into())
        );
        assert_eq!(
            read_line_limited(&mut r, 10).expect("4"),
            Line::Text("last".into())
        );
        assert_eq!(read_line_limited(&mut r, 10).expect("5"), Line::Eof);
        // Bounded: it stops at the first chunk past the limit, the rest of the line unread.
        let input = format!("{}\nnext\n", "x".repeat(100));
        let mut r = std::io::BufReader::with_capacity(16, Cursor::new(input));
        assert_eq!(read_line_bounded(&mut r, 10).expect("1"), Line::TooLong(16));
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut r, &mut rest).expect("rest");
        assert_eq!(rest.len(), 100 - 16 + "\nnext\n".len());
    }
}
