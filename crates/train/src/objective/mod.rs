//! Training objectives and regularisers (methods.md §3), one file each.
//!
//! Their settings (`Objectives`, `ObjectiveChange`, …) are data shared with the run and the
//! viewer, so they live in `conelab_core::objective`. The files hold pure
//! tensor functions; `engine/trainer.rs` composes them into one step.

pub mod agg;
pub mod and_loss;
pub mod cosreg;
pub mod device_softmax;
pub mod freeze;
pub mod head;
pub mod host_softmax;
pub mod laplacian;
pub mod mle;
pub mod self_norm;
pub mod spectrum;
pub mod squash;
pub mod unlikelihood;

use conelab_core::objective::*;
