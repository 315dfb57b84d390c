//! The allocator's settings, made once at the start of the binary.
//!
//! mimalloc hands freed memory back to the OS a while after it is freed (its purge delay, 1 s). A
//! training step frees and allocates tens of MB (the `[P, N]` logits, their gradient, the
//! activations), so every step faulted in fresh zeroed pages: the kernel's `clear_page` was 7–13 %
//! of a `tiny` step. Never purging keeps the process at the peak it reaches in its first step
//! anyway; measured side by side: +13 % tokens/s on `tiny`, the same peak RSS (docs/BENCHMARKS.md,
//! "Performance").

/// mimalloc's `mi_option_purge_delay` (v3's `mi_option_e`; libmimalloc-sys names no constant for
/// it). Its default in this mimalloc is 1,000 (ms; the header's comment still says 10): the test
/// below checks that this index holds that default.
#[cfg(feature = "mimalloc")]
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Freed memory stays with the process for reuse instead of going back to the OS.
pub fn keep_freed_memory() {
    #[cfg(feature = "mimalloc")]
    // SAFETY: sets a process-wide option before any thread but this one allocates; mimalloc
    // reads it when it next considers purging.
    unsafe {
        libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1)
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
            assert_eq!(libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY), -1);
        }
    }
}
