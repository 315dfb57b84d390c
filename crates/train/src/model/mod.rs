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
pub mod translation;

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

/// The parts every tied-embedding model has: the one matrix W that is its input embedding and
/// its output layer (or spectrum control's factors of it), and the output bias.
pub struct Tied<'a> {
    pub embedding: &'a Embedding,
    /// W = U·diag(σ)·Vᵀ while spectrum control is on; `embedding.weight` is then unused.
    pub spectral: Option<&'a SpectralEmbedding>,
    pub output_bias: Option<&'a Param<Tensor<1>>>,
}

/// [`Tied`], to change.
pub struct TiedMut<'a> {
    pub embedding: &'a mut Embedding,
    pub spectral: &'a mut Option<SpectralEmbedding>,
    pub output_bias: &'a mut Option<Param<Tensor<1>>>,
}

/// A family of language models whose input and output embeddings are one matrix W — what the
/// trainer, the objectives and the checkpoints ask of a model. The decoder-only Transformer and
/// the LSTM implement it; a new family (an encoder–decoder translation model) implements it and
/// joins [`LanguageModel`] as a variant, and the trainer is unchanged. Everything done to W, its
/// spectral factors and the output bias is written once, on [`LanguageModel`], through
/// [`TiedLm::tied`] and [`TiedLm::tied_mut`].
pub trait TiedLm {
    /// Hidden states `[positions, d]` for a window of inputs `[batch, time]`, and the recurrent
    /// state to carry into the next window (`None` for a model that carries none); `w` is W
    /// already computed, so that a step under spectrum control composes U·diag(σ)·Vᵀ once.
    fn hidden_with(
        &self,
        inputs: Tensor<2, Int>,
        state: Option<RecurrentState>,
        w: Option<Tensor<2>>,
    ) -> (Tensor<2>, Option<RecurrentState>);

    /// W, its spectral factors and the output bias.
    fn tied(&self) -> Tied<'_>;

    /// [`TiedLm::tied`], to change.
    fn tied_mut(&mut self) -> TiedMut<'_>;

    /// Whether [`TiedLm::hidden_on_host`] takes this model on `device`: a model whose layers
    /// have a host-memory path for training steps (the LSTM's); none by default.
    fn runs_on_host(&self, device: &Device) -> bool {
        let _ = device;
        false
    }

    /// [`TiedLm::hidden_with`] for a training step in host memory, with what its backward needs
    /// kept ([`HostLstmWindow`]); `None` (nothing consumed) where the model has no such path.
    fn hidden_on_host(
        &self,
        inputs: Tensor<2, Int>,
        state: &mut Option<RecurrentState>,
        w: Option<Tensor<2>>,
    ) -> Result<Option<(Tensor<2>, RecurrentState, HostLstmWindow)>, HostLstmError> {
        let _ = (inputs, state, w);
        Ok(None)
    }

    /// The host half of the backward pass of a window [`TiedLm::hidden_on_host`] ran; `w` as
    /// there (else the embedding, or W composed again from U, σ, V).
    fn host_backward(
        &self,
        window: HostLstmWindow,
        grads: &burn::tensor::Gradients,
        w: Option<Tensor<2>>,
    ) -> Result<Option<HostLstmGradients>, HostLstmError> {
        let _ = (window, grads, w);
        Err(HostLstmError::Shape(
            "a host window handed to a model without a host path".into(),
        ))
    }
}

/// [`TiedLm::tied`] and [`TiedLm::tied_mut`] of a model that keeps W, its spectral factors and
/// its output bias in fields named `embedding`, `spectral` and `output_bias`.
macro_rules! tied_fields {
    () => {
        fn tied(&self) -> Tied<'_> {
            Tied {
                embedding: &self.embedding,
                spectral: self.spectral.as_ref(),
                output_bias: self.output_bias.as_ref(),
            }
        }

        fn tied_mut(&mut self) -> TiedMut<'_> {
            TiedMut {
                embedding: &mut self.embedding,
                spectral: &mut self.spectral,
                output_bias: &mut self.output_bias,
            }
        }
    };
}

impl TiedLm for TransformerLm {
    fn hidden_with(
        &self,
        inputs: Tensor<2, Int>,
        _state: Option<RecurrentState>,
        w: Option<Tensor<2>>,
    ) -> (Tensor<2>, Option<RecurrentState>) {
        (self.hidden(inputs, w), None)
    }

    tied_fields!();
}

impl TiedLm for LstmLm {
    fn hidden_with(
        &self,
        inputs: Tensor<2, Int>,
        state: Option<RecurrentState>,
        w: Option<Tensor<2>>,
    ) -> (Tensor<2>, Option<RecurrentState>) {
        let (h, s) = self.hidden(inputs, state, w);
        (h, Some(s))
    }

    tied_fields!();

    fn runs_on_host(&self, device: &Device) -> bool {
        LstmLm::runs_on_host(self, device)
    }

    fn hidden_on_host(
        &self,
        inputs: Tensor<2, Int>,
        state: &mut Option<RecurrentState>,
        w: Option<Tensor<2>>,
    ) -> Result<Option<(Tensor<2>, RecurrentState, HostLstmWindow)>, HostLstmError> {
        if !LstmLm::runs_on_host(self, &inputs.device()) {
            return Ok(None);
        }
        LstmLm::hidden_on_host(self, inputs, state.take(), w)
    }

    fn host_backward(
        &self,
        window: HostLstmWindow,
        grads: &burn::tensor::Gradients,
        w: Option<Tensor<2>>,
    ) -> Result<Option<HostLstmGradients>, HostLstmError> {
        let w = w.or_else(|| self.spectral.as_ref().map(SpectralEmbedding::weight));
        window.backward(grads, self, w)
    }
}

/// The model a run trains: one of the families, held as the checkpoint stores it (a tensor's
/// name starts with its family's variant).
#[derive(Module, Debug)]
pub enum LanguageModel {
    Transformer(TransformerLm),
    Lstm(LstmLm),
}

/// `$body` with `$m` bound to the family's model, whichever it is: the one place a new family
/// joins (a variant here, an arm below).
macro_rules! each_family {
    ($model:expr, $m:ident => $body:expr) => {
        match $model {
            LanguageModel::Transformer($m) => $body,
            LanguageModel::Lstm($m) => $body,
        }
    };
}

impl TiedLm for LanguageModel {
    fn hidden_with(
        &self,
        inputs: Tensor<2, Int>,
        state: Option<RecurrentState>,
        w: Option<Tensor<2>>,
    ) -> (Tensor<2>, Option<RecurrentState>) {
        each_family!(self, m => m.hidden_with(inputs, state, w))
    }

    fn tied(&self) -> Tied<'_> {
        each_family!(self, m => m.tied())
    }

    fn tied_mut(&mut self) -> TiedMut<'_> {
        each_family!(self, m => m.tied_mut())
    }

    fn runs_on_host(&self, device: &Device) -> bool {
        each_family!(self, m => TiedLm::runs_on_host(m, device))
    }

    fn hidden_on_host(
        &self,
        inputs: Tensor<2, Int>,
        state: &mut Option<RecurrentState>,
        w: Option<Tensor<2>>,
    ) -> Result<Option<(Tensor<2>, RecurrentState, HostLstmWindow)>, HostLstmError> {
        each_family!(self, m => TiedLm::hidden_on_host(m, inputs, state, w))
    }

    fn host_backward(
        &self,
        window: HostLstmWindow,
        grads: &burn::tensor::Gradients,
        w: Option<Tensor<2>>,
    ) -> Result<Option<HostLstmGradients>, HostLstmError> {
        each_family!(self, m => m.host_backward(window, grads, w))
    }
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

    /// Whether [`TiedLm::hidden_on_host`] would take this model on `device`.
    pub fn runs_lstm_on_host(&self, device: &Device) -> bool {
        TiedLm::runs_on_host(self, device)
    }

    /// The host half of an LSTM window's backward pass ([`TiedLm::host_backward`]).
    pub fn host_lstm_backward(
        &self,
        window: HostLstmWindow,
        grads: &burn::tensor::Gradients,
        w: Option<Tensor<2>>,
    ) -> Result<Option<HostLstmGradients>, HostLstmError> {
        self.host_backward(window, grads, w)
    }

    /// The tied embedding matrix W, `[N, d]` (composed from U, σ, V under spectrum control).
    pub fn embedding(&self) -> Tensor<2> {
        let tied = self.tied();
        match tied.spectral {
            Some(s) => s.weight(),
            None => tied.embedding.weight.val(),
        }
    }

    /// The spectrum-control factors, when on.
    pub fn spectral(&self) -> Option<&SpectralEmbedding> {
        self.tied().spectral
    }

    /// Installs (Some) or removes (None) the spectrum-control factors. Removing them writes
    /// W = U·diag(σ)·Vᵀ back into the plain embedding, so the model computes the same function.
    pub fn set_spectral(mut self, spectral: Option<SpectralEmbedding>) -> Self {
        let collapsed = match (&spectral, self.spectral()) {
            (None, Some(old)) => Some(old.weight().detach()),
            _ => None,
        };
        *self.tied_mut().spectral = spectral;
        match collapsed {
            Some(w) => self.replace_embedding_weight(w),
            None => self,
        }
    }

    /// Removes the spectral factors without touching W's own parameter (for stepping them with
    /// their own optimizer); put them back with [`set_spectral_raw`](Self::set_spectral_raw).
    pub fn take_spectral(mut self) -> (Self, Option<SpectralEmbedding>) {
        let taken = self.tied_mut().spectral.take();
        (self, taken)
    }

    pub fn set_spectral_raw(mut self, spectral: Option<SpectralEmbedding>) -> Self {
        *self.tied_mut().spectral = spectral;
        self
    }

    /// Replaces the output bias's value (same id); no-op for a model without one.
    pub fn replace_output_bias(mut self, b: Tensor<1>) -> Self {
        let slot = self.tied_mut().output_bias;
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
        *self.tied_mut().output_bias = Some(Param::initialized(
            ParamId::from(last.0 + 1),
            b.detach().require_grad(),
        ));
        self
    }

    /// Replaces the value of W's own parameter (same id, still trainable).
    pub fn replace_embedding_weight(mut self, w: Tensor<2>) -> Self {
        let embedding = self.tied_mut().embedding;
        let param = embedding.weight.clone();
        embedding.weight = param.map(|_| w.detach().require_grad());
        self
    }

    /// Id of the parameter holding W (to read or edit its gradient and rows).
    pub fn embedding_param_id(&self) -> ParamId {
        self.tied().embedding.weight.id
    }

    pub fn output_bias(&self) -> Option<Tensor<1>> {
        self.tied().output_bias.map(Param::val)
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
