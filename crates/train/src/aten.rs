//! conelab's own ATen extension (`csrc/`, compiled by `build.rs` under the `tch` feature): what
//! tch does not bind. Today: the operator counter behind `conelab bench ops`. Without the `tch`
//! feature the functions are here and say that LibTorch is missing.

use std::collections::BTreeMap;
#[cfg(feature = "tch")]
use std::ffi::{CStr, c_char};

#[cfg(feature = "tch")]
unsafe extern "C" {
    fn conelab_opcount_start(err: *mut c_char, err_len: usize) -> i32;
    fn conelab_opcount_stop() -> i64;
    fn conelab_opcount_get(i: usize, name: *mut *const c_char, count: *mut u64) -> i32;
}

#[derive(Debug, thiserror::Error)]
pub enum OpCountError {
    #[error("cannot count ATen operators: {0}")]
    Start(String),
    #[error("the ATen operator count was lost")]
    Lost,
    #[error(
        "counting ATen operators needs LibTorch, but this conelab was built without the `tch` feature (see docs/GPU.md)"
    )]
    NoTch,
}

/// Counts of the ATen operators dispatched by name.
pub type OpCounts = BTreeMap<String, u64>;

/// Without LibTorch there is nothing to count: `f` does not run.
#[cfg(not(feature = "tch"))]
pub fn count_ops<T>(_f: impl FnOnce() -> T) -> Result<(T, OpCounts), OpCountError> {
    Err(OpCountError::NoTch)
}

/// Runs `f` and counts the top-level ATen operators this thread dispatched meanwhile: those no
/// other ATen operator called (a composite such as `aten::linear` counts once, not with the
/// `aten::t` and `aten::addmm` it calls). Operators of other threads are not counted. One count
/// at a time in a process.
#[cfg(feature = "tch")]
pub fn count_ops<T>(f: impl FnOnce() -> T) -> Result<(T, OpCounts), OpCountError> {
    let mut err = [0 as c_char; 256];
    // SAFETY: the buffer and its length are ours; the function writes at most `len` bytes.
    let started = unsafe { conelab_opcount_start(err.as_mut_ptr(), err.len()) };
    if started != 0 {
        // SAFETY: the extension NUL-terminates what it writes, within the buffer.
        let why = unsafe { CStr::from_ptr(err.as_ptr()) };
        return Err(OpCountError::Start(why.to_string_lossy().into_owned()));
    }
    // Stops the count however `f` ends (a panic too), so the callback never outlives it.
    struct Stop(Option<i64>);
    impl Drop for Stop {
        fn drop(&mut self) {
            if self.0.is_none() {
                // SAFETY: no arguments; the extension checks its own state.
                unsafe { conelab_opcount_stop() };
            }
        }
    }
    let mut stop = Stop(None);
    let out = f();
    // SAFETY: as above.
    let n = unsafe { conelab_opcount_stop() };
    stop.0 = Some(n);
    if n < 0 {
        return Err(OpCountError::Lost);
    }
    let mut counts = OpCounts::new();
    for i in 0..n as usize {
        let mut name: *const c_char = std::ptr::null();
        let mut count = 0u64;
        // SAFETY: out-pointers to our locals; the name stays valid until the next stop, and is
        // copied before this function returns.
        if unsafe { conelab_opcount_get(i, &mut name, &mut count) } != 0 || name.is_null() {
            return Err(OpCountError::Lost);
        }
        // SAFETY: non-null, NUL-terminated by the extension.
        let name = unsafe { CStr::from_ptr(name) }
            .to_string_lossy()
            .into_owned();
        counts.insert(name, count);
    }
    Ok((out, counts))
}

#[cfg(all(test, feature = "tch"))]
mod tests {
    use super::*;
    use tch::{Device, Kind, Tensor};

    /// One count at a time in a process: the tests take turns.
    static ONE_COUNT: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn turn() -> std::sync::MutexGuard<'static, ()> {
        ONE_COUNT.lock().unwrap_or_else(|e| e.into_inner())
    }

    #[test]
    fn top_level_operators_are_counted_once_each() {
        let _turn = turn();
        let a = Tensor::randn([4, 3], (Kind::Float, Device::Cpu));
        let w = Tensor::randn([5, 3], (Kind::Float, Device::Cpu));
        let b = Tensor::randn([5], (Kind::Float, Device::Cpu));
        let (sum, counts) = count_ops(|| {
            // aten::linear is a composite (it calls t and addmm): it counts once.
            let y = a.linear(&w, Some(&b));
            let z = &y * 2.0;
            z.sum(Kind::Float)
        })
        .expect("counted");
        assert!(sum.double_value(&[]).is_finite());
        assert_eq!(counts.get("aten::linear"), Some(&1), "{counts:?}");
        assert_eq!(counts.get("aten::sum"), Some(&1), "{counts:?}");
        assert!(!counts.contains_key("aten::addmm"), "nested: {counts:?}");
        assert!(!counts.contains_key("aten::t"), "nested: {counts:?}");
    }

    #[test]
    fn another_threads_operators_are_not_counted_and_a_count_cannot_nest() {
        let _turn = turn();
        let a = Tensor::ones([8], (Kind::Float, Device::Cpu));
        let ((), counts) = count_ops(|| {
            std::thread::spawn(|| {
                let b = Tensor::ones([8], (Kind::Float, Device::Cpu));
                let _ = b.exp();
            })
            .join()
            .expect("the other thread");
            let nested = count_ops(|| ());
            assert!(matches!(nested, Err(OpCountError::Start(_))), "{nested:?}");
            let _ = a.sqrt();
        })
        .expect("counted");
        assert_eq!(counts.get("aten::sqrt"), Some(&1), "{counts:?}");
        assert!(!counts.contains_key("aten::exp"), "{counts:?}");
    }
}
