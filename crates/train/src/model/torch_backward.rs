//! The backward of a node of burn's graph whose forward ran under torch's own autograd (an
//! island of our ATen extension, `csrc/island.cpp`): the node hands its output's gradient to
//! `torch::autograd::grad` over the inputs that need one. The LSTM layer and causal attention
//! on LibTorch are such nodes.

use std::sync::Arc;

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops};
use burn::backend::{LibTorch, libtorch::TchTensor};

use crate::aten::Island;

/// The node of an island with `N` inputs.
#[derive(Debug)]
pub(super) struct TorchBackward<const N: usize>;

/// The island, and burn's handles on the tensors torch's graph saved (the inputs and the
/// output): held while the node lives, so that burn-tch, which writes in place into a tensor
/// nothing else holds, leaves them as the backward needs them.
#[derive(Clone, Debug)]
pub(super) struct Saved {
    pub island: Arc<Island>,
    pub _held: Vec<TchTensor>,
}

impl Saved {
    /// The island, holding burn's handles on the node's inputs (`held`) and on its output.
    pub fn new(island: Island, mut held: Vec<TchTensor>, out: &TchTensor) -> Self {
        held.push(out.clone());
        Self {
            island: Arc::new(island),
            _held: held,
        }
    }
}

impl<const N: usize> Backward<LibTorch, N> for TorchBackward<N> {
    type State = Saved;

    fn backward(self, ops: Ops<Saved, N>, grads: &mut Gradients, _: &mut Checkpointer) {
        let grad_out: TchTensor = grads.consume::<LibTorch>(&ops.node);
        let want = ops.parents.each_ref().map(Option::is_some);
        // The forward checked the same tensors: a failure here is libtorch failing (out of
        // memory), which burn's own backward ops panic on as well.
        let computed = match ops.state.island.backward(&grad_out.tensor, want) {
            Ok(g) => g,
            Err(e) => panic!("{e}"),
        };
        for (parent, grad) in ops.parents.into_iter().zip(computed) {
            if let (Some(node), Some(grad)) = (parent, grad) {
                grads.register::<LibTorch>(node.id, TchTensor::new(grad));
            }
        }
    }
}
