//! Language models with tied input/output embeddings, and the devices they run on.
//!
//! Everything backend-specific lives here and in `engine/`: the rest of conelab sees plain numbers.

pub mod config;
mod device;
pub mod lstm;
pub mod output;
pub mod transformer;

use burn::module::{ModuleMapper, Param, ParamId};
use burn::prelude::*;

pub use config::{LstmConfig, ModelConfig, Preset, TransformerConfig};
pub use device::{DeviceError, DeviceSpec};
pub use lstm::{LstmLm, RecurrentState};
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
        match self {
            LanguageModel::Transformer(m) => (m.hidden(inputs), None),
            LanguageModel::Lstm(m) => {
                let (h, s) = m.hidden(inputs, state);
                (h, Some(s))
            }
        }
    }

    /// The tied embedding matrix W, `[N, d]`.
    pub fn embedding(&self) -> Tensor<2> {
        match self {
            LanguageModel::Transformer(m) => m.embedding.weight.val(),
            LanguageModel::Lstm(m) => m.embedding.weight.val(),
        }
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

/// Renumbers parameters 1, 2, 3, … in visit order.
struct SequentialParamIds(u64);

impl ModuleMapper for SequentialParamIds {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        self.0 += 1;
        let (_, value, mapper) = param.consume();
        Param::from_mapped_value(ParamId::from(self.0), value, mapper)
    }
}
