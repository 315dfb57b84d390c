//! The allocator's settings, made once at the start of the binary.
//!
//! mimalloc hands freed memory back to the OS a while after it is freed (its purge delay, 1 s). A
//! training step frees and allocates tens of MB (the `[P, N]` logits, their gradient, the
//! activations), so with 1 s every step faulted in fresh zeroed pages: the kernel's `clear_page`
//! was 7–13 % of a `tiny` step. The delay is 10 s here: a step reuses its memory well within it,
//! and what a burst took (a flood of socket clients, a large export) still goes back — never
//! purging (`-1`, before issue #61) kept a flood's 360 MiB for ever. Measured side by side, 10 s
//! against never: tokens/s ×1.013 (`tiny`) and ×1.037 (`small`), peak RSS the same
//! (docs/BENCHMARKS.md, "Performance").

/// mimalloc's `mi_option_purge_delay` (v3's `mi_option_e`; libmimalloc-sys names no constant for
/// it). Its default in this mimalloc is 1,000 (ms; the header's comment still says 10): the test
/// below checks that this index holds that default.
#[cfg(feature = "mimalloc")]
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// How long freed memory stays with the process for reuse before it goes back to the OS, ms.
/// Long against a training step (tens of ms to seconds), so a step's memory is reused without
/// faulting pages in; finite, so what a burst took (a flood of socket clients, a large export)
/// goes back a while after it ends. Never (`-1`, before) kept a flood's 360 MiB for ever.
pub const PURGE_DELAY_MS: std::ffi::c_long = PURGE_DELAY;

const PURGE_DELAY: std::ffi::c_long = 10_000;

/// Freed memory stays with the process for reuse for [`PURGE_DELAY_MS`] instead of going back
/// to the OS at once (`MIMALLOC_PURGE_DELAY` in the environment decides instead, for
/// measuring).
pub fn keep_freed_memory() {
    #[cfg(feature = "mimalloc")]
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: sets a process-wide option before any thread but this one allocates;
        // mimalloc reads it when it next considers purging.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY) }
    }
}

#[cfg(all(test, feature = "mimalloc"))]
mod tests {
    use super::*;

    #[test]
    fn the_purge_delay_option_is_the_one_set() {
        // SAFETY: reads and sets a process-wide option; no other test touches mimalloc's options.
        unsafe {
            // Unset in the environment, the option holds its default, 1,000 ms (options.c): this
            // index is the purge delay of the mimalloc that is linked.
            if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
                assert_eq!(libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY), 1000);
            }
            keep_freed_memory();
            if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
                assert_eq!(
                    libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY),
                    PURGE_DELAY_MS
                );
            }
        }
    }
}
