//! Language-model batching: the token stream cut into B contiguous streams, read in windows of T.
//!
//! A stream of `n` tokens holds `n − 1` prediction positions (input `x[p]`, target `x[p + 1]`).
//! They are cut into `B` streams of `L = ⌊(n − 1) / B⌋` consecutive positions; stream `b` owns
//! positions `[b·L, (b+1)·L)`, so a recurrent state carried from one window to the next continues the
//! same text. Window `k` covers times `[k·T, (k+1)·T)` of every stream.
//!
//! Two explicit choices, because exact evaluation must see every position exactly once:
//! - the last window, when `T` does not divide `L`, is shorter: [`PartialWindow::Keep`] yields it
//!   (evaluation), [`PartialWindow::Drop`] skips it (training, where a fixed shape is worth more than
//!   `< T` positions per stream and epoch);
//! - the `(n − 1) mod B` positions left after the `B` streams are returned by
//!   [`StreamBatcher::leftover`] as a one-stream batch; training ignores them, evaluation adds them.

use super::DataError;

/// What to do with the last, shorter window of each stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartialWindow {
    Drop,
    Keep,
}

/// One window of a batch, row-major `[batch, time]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    pub inputs: Vec<u32>,
    pub targets: Vec<u32>,
    pub batch: usize,
    pub time: usize,
}

/// Deterministic window iterator over a token stream.
#[derive(Debug, Clone)]
pub struct StreamBatcher<'a> {
    tokens: &'a [u32],
    streams: usize,
    stream_len: usize,
    window: usize,
    partial: PartialWindow,
}

impl<'a> StreamBatcher<'a> {
    pub fn new(
        tokens: &'a [u32],
        streams: usize,
        window: usize,
        partial: PartialWindow,
    ) -> Result<Self, DataError> {
        let param = |option, value: usize, reason: &str| DataError::InvalidParameter {
            option,
            value: value.to_string(),
            reason: reason.to_owned(),
        };
        if streams == 0 {
            return Err(param("batch size", streams, "must be at least 1"));
        }
        if window == 0 {
            return Err(param("window length", window, "must be at least 1"));
        }
        let positions = tokens.len().saturating_sub(1);
        let stream_len = positions / streams;
        if stream_len == 0 {
            return Err(param(
                "batch size",
                streams,
                &format!(
                    "the split has only {positions} prediction positions, fewer than one per stream"
                ),
            ));
        }
        Ok(Self {
            tokens,
            streams,
            stream_len,
            window,
            partial,
        })
    }

    /// Positions per stream (`L`).
    pub fn stream_len(&self) -> usize {
        self.stream_len
    }

    pub fn num_windows(&self) -> usize {
        match self.partial {
            PartialWindow::Drop => self.stream_len / self.window,
            PartialWindow::Keep => self.stream_len.div_ceil(self.window),
        }
    }

    /// Window `k` of every stream, or `None` past the end.
    pub fn window(&self, k: usize) -> Option<Batch> {
        if k >= self.num_windows() {
            return None;
        }
        let start = k * self.window;
        let time = self.window.min(self.stream_len - start);
        let mut inputs = Vec::with_capacity(self.streams * time);
        let mut targets = Vec::with_capacity(self.streams * time);
        for b in 0..self.streams {
            let p = b * self.stream_len + start;
            inputs.extend_from_slice(&self.tokens[p..p + time]);
            targets.extend_from_slice(&self.tokens[p + 1..p + time + 1]);
        }
        Some(Batch {
            inputs,
            targets,
            batch: self.streams,
            time,
        })
    }

    pub fn iter(&self) -> impl Iterator<Item = Batch> + '_ {
        (0..self.num_windows()).map_while(|k| self.window(k))
    }

    /// The positions after the last stream, as a single-stream batch (`None` when `B` divides `n − 1`).
    pub fn leftover(&self) -> Option<Batch> {
        let start = self.streams * self.stream_len;
        let end = self.tokens.len() - 1;
        (start < end).then(|| Batch {
            inputs: self.tokens[start..end].to_vec(),
            targets: self.tokens[start + 1..end + 1].to_vec(),
            batch: 1,
            time: end - start,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_cover_every_position_once_with_keep_and_leftover() {
        let tokens: Vec<u32> = (0..103).collect();
        for (b, t) in [(1, 7), (3, 5), (4, 10), (5, 1), (7, 100)] {
            let sb = StreamBatcher::new(&tokens, b, t, PartialWindow::Keep).expect("valid");
            let mut seen = vec![0u32; tokens.len() - 1];
            for batch in sb.iter().chain(sb.leftover()) {
                for (x, y) in batch.inputs.iter().zip(&batch.targets) {
                    assert_eq!(*y, x + 1, "target is the next token");
                    seen[*x as usize] += 1;
                }
            }
            assert!(seen.iter().all(|&c| c == 1), "b={b} t={t}: {seen:?}");
        }
    }

    #[test]
    fn streams_are_contiguous_across_windows() {
        let tokens: Vec<u32> = (0..41).collect(); // 40 positions, B=4 -> L=10
        let sb = StreamBatcher::new(&tokens, 4, 3, PartialWindow::Drop).expect("valid");
        assert_eq!(sb.num_windows(), 3); // the 1-long tail window is dropped
        let w0 = sb.window(0).expect("w0");
        let w1 = sb.window(1).expect("w1");
        assert_eq!(&w0.inputs[..3], &[0, 1, 2]);
        assert_eq!(&w0.inputs[3..6], &[10, 11, 12]);
        assert_eq!(&w1.inputs[3..6], &[13, 14, 15]);
        assert!(sb.window(3).is_none());
        assert!(sb.leftover().is_none());
        let keep = StreamBatcher::new(&tokens, 4, 3, PartialWindow::Keep).expect("valid");
        let last = keep.window(3).expect("partial window kept");
        assert_eq!((last.batch, last.time), (4, 1));
        assert_eq!(last.targets, vec![10, 20, 30, 40]);
    }

    #[test]
    fn impossible_shapes_are_errors() {
        let tokens = [1u32, 2, 3];
        assert!(StreamBatcher::new(&tokens, 0, 2, PartialWindow::Drop).is_err());
        assert!(StreamBatcher::new(&tokens, 1, 0, PartialWindow::Drop).is_err());
        assert!(StreamBatcher::new(&tokens, 3, 2, PartialWindow::Drop).is_err());
        assert!(StreamBatcher::new(&[], 1, 1, PartialWindow::Keep).is_err());
    }
}
