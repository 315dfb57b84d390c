//! Language models with tied input/output embeddings, and the devices they run on.
//!
//! Everything backend-specific lives here and in `engine/`: the rest of conelab sees plain numbers.

pub mod attention;
mod device;
pub mod dropout;
pub mod gelu;
pub mod layer_norm;
pub mod lstm;
mod lstm_host;
pub mod output;
pub mod precision;
pub mod spectral;
#[cfg(feature = "tch")]
#[allow(deprecated)] // burn's LibTorch backend, conelab's LibTorch path all the same
mod torch_backward;
pub mod transformer;

use burn::module::{ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::nn::Embedding;
use burn::prelude::*;

use conelab_core::model::ModelConfig;
#[cfg(feature = "flex")]
pub use device::flex_buffer;
pub use device::{DeviceSpecExt, check_bf16, is_flex};
pub use lstm::{HostLstmError, HostLstmGradients, HostLstmWindow, LstmLm, RecurrentState};
pub use spectral::{SPECTRAL_PARAM_IDS, SpectralEmbedding, SvdError};
pub use transformer::TransformerLm;

#[derive(Module, Debug)]
pub enum LanguageModel {
    Transformer(TransformerLm),
    Lstm(LstmLm),
}

impl LanguageModel {
    /// Builds a freshly initialised model. Parameter values come from the device's RNG, so seed the
    /// device first; parameter ids are numbered in declaration order, so that optimizer state saved
    /// with a checkpoint finds its parameters again in a model rebuilt on resume.
    pub fn new(cfg: &ModelConfig, vocab: usize, device: &Device) -> Self {
        let model = match cfg {
            ModelConfig::Transformer(t) => {
                LanguageModel::Transformer(TransformerLm::new(t, vocab, device))
            }
            ModelConfig::Lstm(l) => LanguageModel::Lstm(LstmLm::new(l, vocab, device)),
        };
        model.map(&mut SequentialParamIds(0))
    }

    /// Hidden states `[positions, d]` for a window of inputs `[batch, time]`, and the recurrent state
    /// to carry into the next window (LSTM only).
    pub fn hidden(
        &self,
        inputs: Tensor<2, Int>,
        state: Option<RecurrentState>,
    ) -> (Tensor<2>, Option<RecurrentState>) {
        self.hidden_with(inputs, state, None)
    }

    /// [`hidden`](Self::hidden) with W already computed (`w` = [`embedding`](Self::embedding)),
    /// so that a step under spectrum control composes U·diag(σ)·Vᵀ once.
    pub fn hidden_with(
        &self,
        inputs: Tensor<2, Int>,
        state: Option<RecurrentState>,
        w: Option<Tensor<2>>,
    ) -> (Tensor<2>, Option<RecurrentState>) {
        match self {
            LanguageModel::Transformer(m) => (m.hidden(inputs, w), None),
            LanguageModel::Lstm(m) => {
                let (h, s) = m.hidden(inputs, state, w);
                (h, Some(s))
            }
        }
    }

    /// [`Self::hidden_with`] for a training step in host memory (burn-flex, LibTorch CPU) with an
    /// LSTM's layers computed on the host ([`LstmLm::hidden_on_host`]); `None` (nothing consumed) for a Transformer or an
    /// LSTM the host path does not cover.
    pub fn hidden_on_host(
        &self,
        inputs: Tensor<2, Int>,
        state: &mut Option<RecurrentState>,
        w: Option<Tensor<2>>,
    ) -> Result<Option<(Tensor<2>, RecurrentState, HostLstmWindow)>, HostLstmError> {
        match self {
            LanguageModel::Lstm(m) if m.runs_on_host(&inputs.device()) => {
                m.hidden_on_host(inputs, state.take(), w)
            }
            _ => Ok(None),
        }
    }

    /// Whether [`Self::hidden_on_host`] would take this model on `device`.
    pub fn runs_lstm_on_host(&self, device: &Device) -> bool {
        matches!(self, LanguageModel::Lstm(m) if m.runs_on_host(device))
    }

    /// The host half of an LSTM window's backward pass ([`HostLstmWindow::backward`]); the
    /// input lookup is rebuilt from `w` when given, else from the embedding (or W composed
    /// again from U, σ, V).
    pub fn host_lstm_backward(
        &self,
        window: HostLstmWindow,
        grads: &burn::tensor::Gradients,
        w: Option<Tensor<2>>,
    ) -> Result<Option<HostLstmGradients>, HostLstmError> {
        match self {
            LanguageModel::Lstm(m) => {
                let w = w.or_else(|| self.spectral().map(SpectralEmbedding::weight));
                window.backward(grads, m, w)
            }
            LanguageModel::Transformer(_) => Err(HostLstmError::Shape(
                "an LSTM window handed to a Transformer".into(),
            )),
        }
    }

    /// The tied embedding matrix W, `[N, d]` (composed from U, σ, V under spectrum control).
    pub fn embedding(&self) -> Tensor<2> {
        if let Some(s) = self.spectral() {
            return s.weight();
        }
        self.embedding_module().weight.val()
    }

    fn embedding_module(&self) -> &Embedding {
        match self {
            LanguageModel::Transformer(m) => &m.embedding,
            LanguageModel::Lstm(m) => &m.embedding,
        }
    }

    /// The spectrum-control factors, when on.
    pub fn spectral(&self) -> Option<&SpectralEmbedding> {
        match self {
            LanguageModel::Transformer(m) => m.spectral.as_ref(),
            LanguageModel::Lstm(m) => m.spectral.as_ref(),
        }
    }

    /// Installs (Some) or removes (None) the spectrum-control factors. Removing them writes
    /// W = U·diag(σ)·Vᵀ back into the plain embedding, so the model computes the same function.
    pub fn set_spectral(mut self, spectral: Option<SpectralEmbedding>) -> Self {
        let collapsed = match (&spectral, self.spectral()) {
            (None, Some(old)) => Some(old.weight().detach()),
            _ => None,
        };
        let slot = match &mut self {
            LanguageModel::Transformer(m) => &mut m.spectral,
            LanguageModel::Lstm(m) => &mut m.spectral,
        };
        *slot = spectral;
        match collapsed {
            Some(w) => self.replace_embedding_weight(w),
            None => self,
        }
    }

    /// Removes the spectral factors without touching W's own parameter (for stepping them with
    /// their own optimizer); put them back with [`set_spectral_raw`](Self::set_spectral_raw).
    pub fn take_spectral(mut self) -> (Self, Option<SpectralEmbedding>) {
        let slot = match &mut self {
            LanguageModel::Transformer(m) => &mut m.spectral,
            LanguageModel::Lstm(m) => &mut m.spectral,
        };
        let taken = slot.take();
        (self, taken)
    }

    pub fn set_spectral_raw(mut self, spectral: Option<SpectralEmbedding>) -> Self {
        match &mut self {
            LanguageModel::Transformer(m) => m.spectral = spectral,
            LanguageModel::Lstm(m) => m.spectral = spectral,
        }
        self
    }

    /// Replaces the output bias's value (same id); no-op for a model without one.
    pub fn replace_output_bias(mut self, b: Tensor<1>) -> Self {
        let slot = match &mut self {
            LanguageModel::Transformer(m) => &mut m.output_bias,
            LanguageModel::Lstm(m) => &mut m.output_bias,
        };
        if let Some(param) = slot.take() {
            *slot = Some(param.map(|_| b.detach().require_grad()));
        }
        self
    }

    /// Gives the model an output bias of value `b` (DEV switched on mid-run), or replaces its value
    /// when it has one. A new bias takes the id after the model's own parameters: the id
    /// [`new`](Self::new) gives the bias of a model built with one (it is declared after every
    /// other numbered parameter), so a resumed run's optimizer state finds it again.
    pub fn add_output_bias(mut self, b: Tensor<1>) -> Self {
        if self.output_bias().is_some() {
            return self.replace_output_bias(b);
        }
        let mut last = LastOwnId(0);
        self.visit(&mut last);
        let slot = match &mut self {
            LanguageModel::Transformer(m) => &mut m.output_bias,
            LanguageModel::Lstm(m) => &mut m.output_bias,
        };
        *slot = Some(Param::initialized(
            ParamId::from(last.0 + 1),
            b.detach().require_grad(),
        ));
        self
    }

    /// Replaces the value of W's own parameter (same id, still trainable).
    pub fn replace_embedding_weight(mut self, w: Tensor<2>) -> Self {
        let embedding = match &mut self {
            LanguageModel::Transformer(m) => &mut m.embedding,
            LanguageModel::Lstm(m) => &mut m.embedding,
        };
        let param = embedding.weight.clone();
        embedding.weight = param.map(|_| w.detach().require_grad());
        self
    }

    /// Id of the parameter holding W (to read or edit its gradient and rows).
    pub fn embedding_param_id(&self) -> ParamId {
        match self {
            LanguageModel::Transformer(m) => m.embedding.weight.id,
            LanguageModel::Lstm(m) => m.embedding.weight.id,
        }
    }

    pub fn output_bias(&self) -> Option<Tensor<1>> {
        let bias = match self {
            LanguageModel::Transformer(m) => m.output_bias.as_ref(),
            LanguageModel::Lstm(m) => m.output_bias.as_ref(),
        };
        bias.map(Param::val)
    }

    /// Logits through the tied output layer.
    pub fn logits(&self, hidden: Tensor<2>) -> Tensor<2> {
        output::tied_logits(hidden, self.embedding(), self.output_bias())
    }
}

/// `t`'s values as a constant of the graph. burn's `detach` cuts a tensor from the graph but keeps
/// a leaf's `require_grad`: a detached parameter is still a tracked leaf, so every product taken
/// with it is recorded and differentiated (the head's G·W recorded a product whose backward, an
/// unused gradient of W's copy as large as the logits' product, was a tenth of an `lstm` step).
pub fn constant<const D: usize>(t: Tensor<D>) -> Tensor<D> {
    t.detach().set_require_grad(false)
}

/// The input lookup of the tied matrix: rows of `w` (given, or composed from the spectral
/// factors) or the plain embedding.
fn lookup(
    embedding: &Embedding,
    spectral: Option<&SpectralEmbedding>,
    inputs: Tensor<2, Int>,
    w: Option<Tensor<2>>,
) -> Tensor<3> {
    let w = match (w, spectral) {
        (Some(w), _) => w,
        (None, Some(s)) => s.weight(),
        (None, None) => return embedding.forward(inputs),
    };
    let [b, t] = inputs.dims();
    let d = w.dims()[1];
    w.select(0, inputs.reshape([b * t])).reshape([b, t, d])
}

/// Renumbers parameters 1, 2, 3, … in visit order.
struct SequentialParamIds(u64);

/// The largest id of the model's own (sequentially numbered) parameters; spectrum control's
/// fixed ids lie far above them and are left out.
struct LastOwnId(u64);

impl ModuleVisitor for LastOwnId {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let id = param.id.val();
        if id < SPECTRAL_PARAM_IDS[0] {
            self.0 = self.0.max(id);
        }
    }
}

impl ModuleMapper for SequentialParamIds {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        self.0 += 1;
        let (_, value, mapper) = param.consume();
        Param::from_mapped_value(ParamId::from(self.0), value, mapper)
    }
}
