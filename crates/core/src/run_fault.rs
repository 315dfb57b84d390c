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

/// What a panic of the training backend says, in one line. libtorch's errors reach burn-tch as
/// tch's `Result::unwrap()` panics, `… Err value: Torch("<message>\nException raised from …")`
/// with the C++ frames escaped into the same line: only the message is kept. A device out of
/// memory (CUDA's allocator, typically at the first step of too large a model or batch) also
/// says what needs less.
pub fn backend_panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    describe_backend_panic(&panic_message(panic))
}

fn describe_backend_panic(text: &str) -> String {
    let inner = text.split_once("Torch(\"").map_or(text, |(_, rest)| rest);
    let end = [inner.find("\\n"), inner.find('\n'), inner.rfind("\")")]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(inner.len());
    let message = inner[..end].trim();
    if message.to_lowercase().contains("out of memory") {
        format!(
            "the device ran out of memory: {message} (a smaller --batch, --bptt or model, or --precision bf16, needs less)"
        )
    } else {
        format!("the training backend panicked: {message}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// tch's panic text as libtorch's CUDA allocator makes it (the frames shortened).
    const OOM: &str = "called `Result::unwrap()` on an `Err` value: Torch(\"CUDA out of memory. \
        Tried to allocate 4.06 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.2 GiB is \
        free.\\nException raised from malloc at /pytorch/c10/cuda/CUDACachingAllocator.cpp:1335 \
        (most recent call first):\\nframe #0: c10::Error::Error(...) + 0x98\")";

    #[test]
    fn an_out_of_memory_is_one_line_that_says_what_needs_less() {
        let line = describe_backend_panic(OOM);
        assert!(!line.contains('\n') && !line.contains("\\n"), "{line}");
        assert!(
            line.starts_with(
                "the device ran out of memory: CUDA out of memory. Tried to allocate 4.06 GiB."
            ),
            "{line}"
        );
        assert!(
            line.contains("--batch") && line.contains("--precision bf16"),
            "{line}"
        );
        assert!(
            !line.contains("frame #0") && !line.contains("Exception raised"),
            "{line}"
        );
        let boxed: Box<dyn std::any::Any + Send> = Box::new(OOM.to_string());
        assert_eq!(backend_panic_message(boxed.as_ref()), line);
    }

    #[test]
    fn other_panics_keep_their_first_line() {
        assert_eq!(
            describe_backend_panic("injected backend panic at step 8"),
            "the training backend panicked: injected backend panic at step 8"
        );
        assert_eq!(
            describe_backend_panic("shape mismatch\nsecond line"),
            "the training backend panicked: shape mismatch"
        );
        assert_eq!(
            describe_backend_panic("Err value: Torch(\"index out of range\")"),
            "the training backend panicked: index out of range"
        );
    }
}
