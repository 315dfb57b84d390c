//! The training text a step reads: its windows, and the split held on the device when it fits.

use super::Trainer;

use burn::prelude::*;

use conelab_data::{Batch, PartialWindow, StreamBatcher};

/// The training split on the device, laid out as the step's windows read it: row b is stream b
/// (`StreamBatcher`: tokens b·L .. b·L + L, and one more for the last target), so window k's
/// inputs are columns kT .. kT + T and its targets the same shifted by one.
pub(super) struct ResidentSplit {
    pub(super) streams: Tensor<2, Int>,
    pub(super) batch: usize,
    pub(super) window: usize,
    pub(super) windows: usize,
}

/// The most the training split may take on the device as [`ResidentSplit`] (8 bytes a token):
/// 128 M tokens (WikiText-103 fits); a larger split is copied window by window.
pub(super) const RESIDENT_SPLIT_BYTES: usize = 1 << 30;

impl ResidentSplit {
    fn upload(
        tokens: &[u32],
        batch: usize,
        window: usize,
        windows: u64,
        device: &Device,
    ) -> Option<Self> {
        let sb = StreamBatcher::new(tokens, batch, window, PartialWindow::Drop).ok()?;
        let len = sb.stream_len();
        if batch.checked_mul(len + 1)?.checked_mul(8)? > RESIDENT_SPLIT_BYTES {
            return None;
        }
        let mut rows = Vec::with_capacity(batch * (len + 1));
        for b in 0..batch {
            rows.extend_from_slice(tokens.get(b * len..b * len + len + 1)?);
        }
        Some(Self {
            streams: Tensor::<2, Int>::from_data(TensorData::new(rows, [batch, len + 1]), device),
            batch,
            window,
            windows: windows as usize,
        })
    }

    /// Window `k`'s inputs [B, T] and targets [B·T], where the split was laid out for B and T.
    fn window(
        &self,
        batch: usize,
        window: usize,
        k: usize,
    ) -> Option<(Tensor<2, Int>, Tensor<1, Int>)> {
        if self.batch != batch || self.window != window || k >= self.windows {
            return None;
        }
        let (b, t, start) = (batch, window, k * window);
        let inputs = self.streams.clone().slice([0..b, start..start + t]);
        let targets = self
            .streams
            .clone()
            .slice([0..b, start + 1..start + t + 1])
            .reshape([b * t]);
        Some((inputs, targets))
    }
}

impl Trainer {
    /// Window `k`'s inputs [B, T] and targets [B·T] on the device: slices of the training split
    /// kept there ([`ResidentSplit`]) on the paths a GPU takes, so that no step waits on a copy
    /// from host memory (a blocking one, from pageable memory, would wait for the step before
    /// to finish); elsewhere copied from `batch`.
    pub(super) fn window_tensors(
        &mut self,
        k: usize,
        batch: &Batch,
    ) -> (Tensor<2, Int>, Tensor<1, Int>) {
        let (b, t) = (batch.batch, batch.time);
        if !self.host_paths && self.resident.is_none() {
            self.resident = ResidentSplit::upload(
                &self.train_stream,
                b,
                t,
                self.windows_per_epoch,
                &self.device,
            );
        }
        if let Some(window) = self.resident.as_ref().and_then(|r| r.window(b, t, k)) {
            return window;
        }
        (
            Tensor::<2, Int>::from_data(
                TensorData::new(batch.inputs.clone(), [b, t]),
                &self.device,
            ),
            Tensor::<1, Int>::from_data(
                TensorData::new(batch.targets.clone(), [b * t]),
                &self.device,
            ),
        )
    }

    /// Training window `k` of the epoch.
    pub(super) fn window(&self, k: usize) -> Option<Batch> {
        StreamBatcher::new(
            &self.train_stream,
            self.config.batch,
            self.model_config.window(),
            PartialWindow::Drop,
        )
        .ok()
        .and_then(|b| b.window(k))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::DeviceSpecExt;
    use conelab_core::model::DeviceSpec;

    /// Every window sliced from the split on the device is `StreamBatcher`'s window, for
    /// several B and T (a leftover after the last stream, a partial last window dropped).
    #[test]
    fn the_resident_split_gives_the_batchers_windows() {
        let tokens: Vec<u32> = (0..1_003).map(|i| (i * 7 + 3) % 101).collect();
        let device = DeviceSpec::Cpu.training_device().expect("device");
        for (b, t) in [(1, 7), (3, 5), (4, 10), (16, 35)] {
            let sb = StreamBatcher::new(&tokens, b, t, PartialWindow::Drop).expect("batcher");
            let windows = sb.num_windows();
            let r =
                ResidentSplit::upload(&tokens, b, t, windows as u64, &device).expect("uploaded");
            for k in 0..windows {
                let want = sb.window(k).expect("window");
                let (inputs, targets) = r.window(b, t, k).expect("resident window");
                assert_eq!(inputs.dims(), [b, t]);
                let ints = |v: Vec<i64>| v.into_iter().map(|x| x as u32).collect::<Vec<_>>();
                let inputs = inputs.try_into_vec_as::<i64>().expect("inputs");
                let targets = targets.try_into_vec_as::<i64>().expect("targets");
                assert_eq!(ints(inputs), want.inputs, "B {b}, T {t}, window {k}");
                assert_eq!(ints(targets), want.targets, "B {b}, T {t}, window {k}");
            }
            assert!(r.window(b, t, windows).is_none());
            assert!(r.window(b + 1, t, 0).is_none());
        }
    }
}
