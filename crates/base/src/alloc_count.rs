//! A global-allocator wrapper that can count bytes in use and their peak, for `conelab bench`'s
//! "peak extra memory" columns. Resident-set figures are useless for this: mimalloc keeps freed
//! pages mapped, so RSS only ever grows. Counting is off unless a benchmark switches it on; off,
//! it costs one relaxed atomic load per allocation.

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering::Relaxed};

pub struct CountingAllocator<A>(pub A);

static ENABLED: AtomicBool = AtomicBool::new(false);
static CURRENT: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);

fn grew(bytes: usize) {
    let now = CURRENT.fetch_add(bytes as isize, Relaxed) + bytes as isize;
    PEAK.fetch_max(now, Relaxed);
}

// SAFETY: every call is forwarded unchanged to the wrapped allocator; the counters are side data.
unsafe impl<A: GlobalAlloc> GlobalAlloc for CountingAllocator<A> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let p = unsafe { self.0.alloc(layout) };
        if ENABLED.load(Relaxed) && !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let p = unsafe { self.0.alloc_zeroed(layout) };
        if ENABLED.load(Relaxed) && !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { self.0.dealloc(ptr, layout) };
        if ENABLED.load(Relaxed) {
            CURRENT.fetch_sub(layout.size() as isize, Relaxed);
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let p = unsafe { self.0.realloc(ptr, layout, new_size) };
        if ENABLED.load(Relaxed) && !p.is_null() {
            if new_size >= layout.size() {
                grew(new_size - layout.size());
            } else {
                CURRENT.fetch_sub((layout.size() - new_size) as isize, Relaxed);
            }
        }
        p
    }
}

/// Measures the peak of bytes allocated (net of frees) while `f` runs, above the level at its
/// start. `None` when the process does not use [`CountingAllocator`] (e.g. in the test harness).
pub fn peak_extra_bytes<T>(f: impl FnOnce() -> T) -> (T, Option<usize>) {
    CURRENT.store(0, Relaxed);
    PEAK.store(0, Relaxed);
    ENABLED.store(true, Relaxed);
    let probe = std::hint::black_box(vec![0u8; 4096]);
    let active = PEAK.load(Relaxed) >= 4096;
    drop(probe);
    CURRENT.store(0, Relaxed);
    PEAK.store(0, Relaxed);
    let out = f();
    ENABLED.store(false, Relaxed);
    let peak = PEAK.load(Relaxed).max(0) as usize;
    (out, active.then_some(peak))
}
