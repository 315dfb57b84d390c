//! The loss curve's scale and smoothing (TensorBoard's weight; `m` switches it off and back).

use super::{Action, App, Effect};
use crate::format::Smoothing;

impl App {
    fn smoothing(&mut self) -> Smoothing<'_> {
        Smoothing {
            weight: &mut self.smoothing,
            off_from: &mut self.smoothing_off_from,
        }
    }

    pub(super) fn apply_loss_chart(&mut self, action: Action) -> Effect {
        match action {
            Action::ToggleLogY => self.log_y = !self.log_y,
            Action::ToggleSmoothing => self.smoothing().toggle(),
            Action::Smoothing(d) => self.smoothing().step(d),
            _ => {}
        }
        Effect::None
    }
}
