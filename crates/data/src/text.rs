//! Reading one split file: validation (binary, UTF-8, line length) and the line/word split of
//! methods.md §1.

use std::path::{Path, PathBuf};

use super::DataError;

/// Longest line accepted, in bytes. Word-level corpora hold one sentence (PTB) or one paragraph
/// (WikiText) per line — WikiText-103's longest is well under 100 KB — so a multi-megabyte line means
/// the file is not such a corpus (a minified dump, a database export, a binary blob without NULs).
pub const DEFAULT_MAX_LINE_BYTES: usize = 16 << 20;

/// The validated text of one split.
#[derive(Debug, Clone)]
pub struct SplitText {
    path: PathBuf,
    text: String,
}

impl SplitText {
    /// Reads and validates a split file.
    pub fn read(path: &Path, max_line_bytes: usize) -> Result<Self, DataError> {
        let bytes = std::fs::read(path).map_err(|source| DataError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_bytes(path.to_path_buf(), bytes, max_line_bytes)
    }

    /// Validates text that is already in memory; `path` is only used in messages.
    pub fn from_bytes(
        path: PathBuf,
        bytes: Vec<u8>,
        max_line_bytes: usize,
    ) -> Result<Self, DataError> {
        let line_of = |offset: usize| memchr::memchr_iter(b'\n', &bytes[..offset]).count() + 1;
        if let Some(offset) = memchr::memchr(0, &bytes) {
            return Err(DataError::Binary {
                line: line_of(offset),
                path,
                offset,
            });
        }
        let line_ends = memchr::memchr_iter(b'\n', &bytes).chain(std::iter::once(bytes.len()));
        let mut start = 0;
        for (line, end) in (1..).zip(line_ends) {
            let len = end - start;
            if len > max_line_bytes {
                return Err(DataError::LineTooLong {
                    path,
                    line,
                    len,
                    max: max_line_bytes,
                });
            }
            start = end + 1;
        }
        match String::from_utf8(bytes) {
            Ok(text) => Ok(Self { path, text }),
            Err(e) => {
                let offset = e.utf8_error().valid_up_to();
                let line = memchr::memchr_iter(b'\n', &e.as_bytes()[..offset]).count() + 1;
                Err(DataError::InvalidUtf8 { path, line, offset })
            }
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The lines of the file, as Python's line iteration sees them: split after each `\n`; a last
    /// line without a trailing `\n` counts when it is not empty. A `\r` before the `\n` is whitespace
    /// and disappears in [`words`].
    pub fn lines(&self) -> impl Iterator<Item = &str> {
        let text = self.text.strip_suffix('\n').unwrap_or(&self.text);
        // An empty file has no lines at all, not one empty line.
        let empty = self.text.is_empty();
        text.split('\n').filter(move |_| !empty)
    }

    /// Number of words (whitespace-separated, no `<eos>`) over the whole split.
    pub fn word_count(&self) -> usize {
        self.lines().map(|l| words(l).count()).sum()
    }
}

/// The words of one line: split on Unicode whitespace, as Python's `str.split()` does.
pub fn words(line: &str) -> impl Iterator<Item = &str> {
    line.split_whitespace()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(s: &str) -> SplitText {
        SplitText::from_bytes("t".into(), s.as_bytes().to_vec(), 1000).expect("valid text")
    }

    #[test]
    fn lines_follow_python_iteration() {
        assert_eq!(text("").lines().count(), 0);
        assert_eq!(text("\n").lines().collect::<Vec<_>>(), vec![""]);
        assert_eq!(
            text("a b\n\nc").lines().collect::<Vec<_>>(),
            vec!["a b", "", "c"]
        );
        assert_eq!(
            text("a b\n\nc\n").lines().collect::<Vec<_>>(),
            vec!["a b", "", "c"]
        );
        assert_eq!(text(" a  b \r\n").word_count(), 2);
    }

    #[test]
    fn nul_byte_is_reported_with_its_line() {
        let err = SplitText::from_bytes("f".into(), b"ok\nbad\0x\n".to_vec(), 100).unwrap_err();
        assert!(
            matches!(
                err,
                DataError::Binary {
                    line: 2,
                    offset: 6,
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn invalid_utf8_is_reported_with_its_line() {
        let err = SplitText::from_bytes("f".into(), b"a\nb\nc\xff\n".to_vec(), 100).unwrap_err();
        assert!(
            matches!(
                err,
                DataError::InvalidUtf8 {
                    line: 3,
                    offset: 5,
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn long_line_is_rejected_at_the_limit() {
        assert!(SplitText::from_bytes("f".into(), b"abcd\nxy".to_vec(), 4).is_ok());
        let err = SplitText::from_bytes("f".into(), b"ab\nabcde\n".to_vec(), 4).unwrap_err();
        assert!(
            matches!(
                err,
                DataError::LineTooLong {
                    line: 2,
                    len: 5,
                    max: 4,
                    ..
                }
            ),
            "{err}"
        );
    }
}
