//! The first fatal failure of one of a run's threads, shared between them.

use std::sync::{Arc, Mutex};

/// The first fatal failure of one of a run's threads (the metrics thread, the store recorder, the
/// run's server). The engine looks at it before every step and ends the run cleanly when set.
#[derive(Debug, Clone, Default)]
pub struct Fault(Arc<Mutex<Option<String>>>);

impl Fault {
    /// Records a failure; the first one wins.
    pub fn set(&self, message: String) {
        let mut slot = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_none() {
            *slot = Some(message);
        }
    }

    pub fn get(&self) -> Option<String> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// The text of a panic payload.
pub fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "unknown panic".into())
}
