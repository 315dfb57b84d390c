//! The model's forward pass over a step's window, and the host LSTM's second pass for its gradients.

use super::Trainer;
use super::update::add_gradients;

use burn::optim::GradientsParams;
use burn::prelude::*;
use burn::tensor::Gradients;

use crate::engine::EngineError;
use crate::model::TiedLm;
use crate::model::{HostLstmWindow, RecurrentState};

/// One step's forward pass, as the objective and the backward pass need it.
pub(super) struct Forward {
    /// The last layer's hidden states, a row per position.
    pub(super) hidden: Tensor<2>,
    /// The recurrent state to carry into the next window (an LSTM's).
    pub(super) state: Option<RecurrentState>,
    /// The host LSTM's saved activations, for its written-out backward.
    pub(super) host_window: Option<HostLstmWindow>,
    /// W as the step reads it; a leaf of its own under spectrum control with the host LSTM
    /// (`spectral_leaf`), else the model's W itself (`w_composed`).
    pub(super) w: Tensor<2>,
    pub(super) w_composed: Tensor<2>,
    /// Spectrum control is on: W = U·diag(σ)·Vᵀ.
    pub(super) spectral: bool,
    pub(super) spectral_leaf: bool,
}

impl Trainer {
    /// The forward pass over `inputs` up to the last hidden states, with W as the step reads it.
    pub(super) fn forward(&mut self, inputs: Tensor<2, Int>) -> Result<Forward, EngineError> {
        let w_composed = self.model.embedding();
        let spectral = self.model.spectral().is_some();
        // Under spectrum control with the host LSTM, the step sees W as a leaf and the gradient
        // it collects is taken through W = U·diag(σ)·Vᵀ once at the end: the host path's two
        // backward passes would otherwise each differentiate the composition (an N·d² product).
        let spectral_leaf =
            spectral && self.host_lstm && self.model.runs_lstm_on_host(&self.device);
        let w = if spectral_leaf {
            w_composed.clone().detach().require_grad()
        } else {
            w_composed.clone()
        };
        // In host memory (burn-flex, LibTorch CPU) an LSTM's layers run on the host with their
        // backward written out (model/lstm_host.rs); on CUDA burn's graph does it all.
        let mut carried = self.carried.take();
        let host_window = if self.host_lstm {
            self.model
                .hidden_on_host(inputs.clone(), &mut carried, spectral.then(|| w.clone()))
                .map_err(EngineError::backend("the LSTM on the host"))?
        } else {
            None
        };
        let (hidden, state, host_window) = match host_window {
            Some((hidden, state, window)) => (hidden, Some(state), Some(window)),
            None => {
                let (hidden, state) =
                    self.model
                        .hidden_with(inputs, carried, spectral.then(|| w.clone()));
                (hidden, state, None)
            }
        };
        Ok(Forward {
            hidden,
            state,
            host_window,
            w,
            w_composed,
            spectral,
            spectral_leaf,
        })
    }

    /// The step's gradients when its LSTM layers ran on the host: those of the loss (`raw`,
    /// differentiated with the last layer's output as a leaf), the layers' own from the host
    /// backward pass, and what reaches W below them through the rebuilt input lookup. Under
    /// spectrum control `spectral` is (W as the step's leaf, W composed from U, σ, V): the
    /// gradient collected for W goes through the composition once.
    pub(super) fn host_lstm_gradients(
        &self,
        window: HostLstmWindow,
        raw: Gradients,
        spectral: Option<(&Tensor<2>, &Tensor<2>)>,
    ) -> Result<GradientsParams, EngineError> {
        let from_loss = spectral.and_then(|(w, _)| w.grad(&raw));
        let lookup_leaf = spectral.map(|(_, composed)| composed.clone().detach().require_grad());
        let host = self
            .model
            .host_lstm_backward(window, &raw, lookup_leaf.clone())
            .map_err(EngineError::backend("the LSTM's backward on the host"))?;
        let mut grads = GradientsParams::from_grads(raw, &self.model);
        // `None`: the loss never read the hidden states, and the layers get no gradient at all
        // (as in burn's graph: no zeros for AdamW to count and decay).
        let below = host.as_ref().map(|h| h.surrogate.backward());
        let into_w = match (spectral, lookup_leaf) {
            (Some((_, composed)), Some(leaf)) => {
                let d_w = match (from_loss, below.as_ref().and_then(|b| leaf.grad(b))) {
                    (Some(a), Some(b)) => Some(a + b),
                    (a, b) => a.or(b),
                };
                d_w.map(|d_w| (composed.clone() * d_w).sum().backward())
            }
            _ => below,
        };
        if let Some(g) = into_w {
            add_gradients(
                &self.model,
                &mut grads,
                GradientsParams::from_grads(g, &self.model),
            );
        }
        if let Some(host) = host {
            for (id, g) in host.weights {
                grads.register(id, g);
            }
            for (id, g) in host.biases {
                grads.register(id, g);
            }
        }
        Ok(grads)
    }
}
