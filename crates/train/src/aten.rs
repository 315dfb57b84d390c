//! conelab's own ATen extension (`csrc/`, compiled by `build.rs` under the `tch` feature): what
//! tch does not bind. The operator counter behind `conelab bench ops` (`opcount.cpp`), and the
//! multi-tensor optimizer operators (`optim.cpp`): one fused AdamW over all parameters, the
//! global-norm clip's norm and scaling as foreach operators. Without the `tch` feature the
//! counter is here and says that LibTorch is missing.

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

/// A multi-tensor operator of the extension refused its inputs or libtorch failed in it.
#[derive(Debug, thiserror::Error)]
#[error("{op}: {why}")]
pub struct AtenError {
    pub op: &'static str,
    pub why: String,
}

impl AtenError {
    /// The fused node's result where libtorch gave one; `None` where it refused, after saying
    /// once per process and operator why, on stderr: the node's composed path then runs (the same
    /// values, several times the kernels), and a silent fall-back would hide a several-fold
    /// slowdown from the user (as it hid cuDNN's refusal of the LSTM layer's weights).
    pub fn or_composed<T>(result: Result<T, AtenError>) -> Option<T> {
        match result {
            Ok(v) => Some(v),
            Err(e) => {
                Self::say_once(&e);
                None
            }
        }
    }

    fn say_once(e: &AtenError) {
        if Self::first_refusal(e.op) {
            eprintln!("conelab: warning: {e}; the composed path runs instead (slower)");
        }
    }

    /// Whether `op` refuses for the first time in this process (the operators are a handful of
    /// static names: the list is bounded by the code).
    fn first_refusal(op: &'static str) -> bool {
        static SAID: std::sync::Mutex<Vec<&'static str>> = std::sync::Mutex::new(Vec::new());
        let mut said = SAID
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let first = !said.contains(&op);
        if first {
            said.push(op);
        }
        first
    }
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

#[cfg(feature = "tch")]
unsafe extern "C" {
    fn conelab_fused_adamw(
        params: *const *mut torch_sys::C_tensor,
        grads: *const *mut torch_sys::C_tensor,
        exp_avgs: *const *mut torch_sys::C_tensor,
        exp_avg_sqs: *const *mut torch_sys::C_tensor,
        n: usize,
        lr: f64,
        beta1: f64,
        beta2: f64,
        weight_decay: f64,
        eps: f64,
        step: f64,
        found_inf: *mut torch_sys::C_tensor,
        grad_scale: *mut torch_sys::C_tensor,
        err: *mut c_char,
        err_len: usize,
    ) -> i32;
    fn conelab_foreach_squared_norm(
        ts: *const *mut torch_sys::C_tensor,
        n: usize,
        out: *mut *mut torch_sys::C_tensor,
        err: *mut c_char,
        err_len: usize,
    ) -> i32;
    fn conelab_foreach_copy_(
        dst: *const *mut torch_sys::C_tensor,
        src: *const *mut torch_sys::C_tensor,
        n: usize,
        err: *mut c_char,
        err_len: usize,
    ) -> i32;
    fn conelab_foreach_mul_(
        ts: *const *mut torch_sys::C_tensor,
        n: usize,
        factor: f64,
        err: *mut c_char,
        err_len: usize,
    ) -> i32;
    #[allow(clippy::too_many_arguments)]
    fn conelab_step_guard(
        loss: *mut torch_sys::C_tensor,
        penalty: *mut torch_sys::C_tensor,
        sq: *mut torch_sys::C_tensor,
        sticky: *mut torch_sys::C_tensor,
        max_norm: f64,
        found: *mut *mut torch_sys::C_tensor,
        divisor: *mut *mut torch_sys::C_tensor,
        values: *mut *mut torch_sys::C_tensor,
        err: *mut c_char,
        err_len: usize,
    ) -> i32;
    fn conelab_host_copy_async(
        t: *mut torch_sys::C_tensor,
        out: *mut *mut torch_sys::C_tensor,
        event: *mut *mut std::ffi::c_void,
        err: *mut c_char,
        err_len: usize,
    ) -> i32;
    fn conelab_event_wait(event: *mut std::ffi::c_void, err: *mut c_char, err_len: usize) -> i32;
    fn conelab_event_free(event: *mut std::ffi::c_void);
}

/// Tensors the extension handed over through out-pointers (`new at::Tensor`), owned by tch from
/// here; `None` where it left one null.
#[cfg(feature = "tch")]
fn take_outputs<const N: usize>(out: [*mut torch_sys::C_tensor; N]) -> [Option<tch::Tensor>; N] {
    // SAFETY: each non-null pointer is a tensor the extension allocated for us and no one else
    // holds; tch owns it now.
    out.map(|p| (!p.is_null()).then(|| unsafe { tch::Tensor::from_ptr(p) }))
}

/// The extension's handles for a list of tensors (what tch's `C_tensor` points to).
#[cfg(feature = "tch")]
fn handles(ts: &[&tch::Tensor]) -> Vec<*mut torch_sys::C_tensor> {
    ts.iter().map(|t| t.as_ptr() as *mut _).collect()
}

/// Runs one extension call with an error buffer; its message on failure.
#[cfg(feature = "tch")]
fn call(op: &'static str, f: impl FnOnce(*mut c_char, usize) -> i32) -> Result<(), AtenError> {
    let mut err = [0 as c_char; 512];
    if f(err.as_mut_ptr(), err.len()) == 0 {
        return Ok(());
    }
    // SAFETY: the extension NUL-terminates what it writes, within the buffer (zeroed before).
    let why = unsafe { CStr::from_ptr(err.as_ptr()) }
        .to_string_lossy()
        .into_owned();
    Err(AtenError { op, why })
}

/// AdamW's hyper-parameters for [`fused_adamw`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamWStep {
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub weight_decay: f64,
    pub epsilon: f64,
    /// The step count after its increment (1 on a first step).
    pub step: usize,
}

/// One AdamW step over all `params` at once, in place (`aten::_fused_adamw_`): the parameters
/// and both moments are written, the gradients only read (but see `DeviceGuard::grad_scale`). Torch's formula is burn's
/// (θ ← θ·(1 − η·λ) − η·m̂/(√v̂ + ε), ε outside the root of the bias-corrected v̂ in both); the
/// order of the f32 operations differs (torch: `m.lerp_(g, 1 − β₁)`, η/(1 − β₁ᵗ) as one factor,
/// √v / √(1 − β₂ᵗ)), so the two agree to a few ulps of the update, not bit for bit.
/// `guard`: what the device decided about the step ([`step_guard`]), read by the kernel.
#[cfg(feature = "tch")]
pub fn fused_adamw(
    params: &[&tch::Tensor],
    grads: &[&tch::Tensor],
    exp_avgs: &[&tch::Tensor],
    exp_avg_sqs: &[&tch::Tensor],
    h: AdamWStep,
    guard: DeviceGuard<'_>,
) -> Result<(), AtenError> {
    let n = params.len();
    if [grads.len(), exp_avgs.len(), exp_avg_sqs.len()] != [n; 3] {
        return Err(AtenError {
            op: "fused AdamW",
            why: "as many gradients and moments as parameters are needed".into(),
        });
    }
    let (p, g, m, v) = (
        handles(params),
        handles(grads),
        handles(exp_avgs),
        handles(exp_avg_sqs),
    );
    call("fused AdamW", |err, len| {
        // SAFETY: four arrays of n live tensor handles (borrowed for the call); the extension
        // checks what they hold and writes only the tensors' data.
        unsafe {
            conelab_fused_adamw(
                p.as_ptr(),
                g.as_ptr(),
                m.as_ptr(),
                v.as_ptr(),
                n,
                h.lr,
                h.beta1,
                h.beta2,
                h.weight_decay,
                h.epsilon,
                h.step as f64,
                handle_or_null(guard.found_inf),
                handle_or_null(guard.grad_scale),
                err,
                len,
            )
        }
    })
}

/// What the device decided about a step, for [`fused_adamw`] to read there: one-element f32
/// tensors on the parameters' device, or none.
#[cfg(feature = "tch")]
#[derive(Clone, Copy, Default)]
pub struct DeviceGuard<'a> {
    /// Where it holds 1, nothing is written (a step found bad on the device).
    pub found_inf: Option<&'a tch::Tensor>,
    /// Every gradient is read divided by it (the global-norm clip, [`StepGuard::divisor`]),
    /// and written back so divided (torch's AMP unscaling): the gradients must be the step's
    /// own, read by nothing after it.
    pub grad_scale: Option<&'a tch::Tensor>,
}

#[cfg(feature = "tch")]
fn handle_or_null(t: Option<&tch::Tensor>) -> *mut torch_sys::C_tensor {
    t.map_or(std::ptr::null_mut(), |t| t.as_ptr() as *mut _)
}

/// Σ over all tensors of Σ x², a new one-element tensor (shape [1]) on their device: one
/// `_foreach_norm`, a stack, a square and a sum, whatever the number of tensors.
#[cfg(feature = "tch")]
pub fn foreach_squared_norm(ts: &[&tch::Tensor]) -> Result<tch::Tensor, AtenError> {
    let h = handles(ts);
    let mut out: *mut torch_sys::C_tensor = std::ptr::null_mut();
    call("foreach norm", |err, len| {
        // SAFETY: an array of live handles and an out-pointer to our local.
        unsafe { conelab_foreach_squared_norm(h.as_ptr(), h.len(), &mut out, err, len) }
    })?;
    if out.is_null() {
        return Err(AtenError {
            op: "foreach norm",
            why: "no result".into(),
        });
    }
    // SAFETY: the extension handed over a tensor it allocated (`new at::Tensor`); tch owns it now.
    Ok(unsafe { tch::Tensor::from_ptr(out) })
}

/// `dst[i] ← src[i]` for every i: one `_foreach_copy_`. The caller makes sure nothing else
/// holds the destinations' storage.
#[cfg(feature = "tch")]
pub fn foreach_copy_(dst: &[&tch::Tensor], src: &[&tch::Tensor]) -> Result<(), AtenError> {
    if dst.len() != src.len() {
        return Err(AtenError {
            op: "foreach copy",
            why: "as many destinations as sources are needed".into(),
        });
    }
    let (d, s) = (handles(dst), handles(src));
    call("foreach copy", |err, len| {
        // SAFETY: two arrays of n live handles; the extension writes only the destinations' data.
        unsafe { conelab_foreach_copy_(d.as_ptr(), s.as_ptr(), d.len(), err, len) }
    })
}

/// Every tensor multiplied by `factor` in place: one `_foreach_mul_`. The caller makes sure
/// nothing else holds their storage.
#[cfg(feature = "tch")]
pub fn foreach_mul_(ts: &[&tch::Tensor], factor: f64) -> Result<(), AtenError> {
    let h = handles(ts);
    call("foreach scale", |err, len| {
        // SAFETY: an array of live handles; the extension writes only their data.
        unsafe { conelab_foreach_mul_(h.as_ptr(), h.len(), factor, err, len) }
    })
}

#[cfg(feature = "tch")]
unsafe extern "C" {
    fn conelab_layer_norm(
        x: *mut torch_sys::C_tensor,
        w: *mut torch_sys::C_tensor,
        b: *mut torch_sys::C_tensor,
        eps: f64,
        out: *mut *mut torch_sys::C_tensor,
        mean: *mut *mut torch_sys::C_tensor,
        rstd: *mut *mut torch_sys::C_tensor,
        err: *mut c_char,
        err_len: usize,
    ) -> i32;
    #[allow(clippy::too_many_arguments)]
    fn conelab_layer_norm_backward(
        grad_out: *mut torch_sys::C_tensor,
        x: *mut torch_sys::C_tensor,
        mean: *mut torch_sys::C_tensor,
        rstd: *mut torch_sys::C_tensor,
        w: *mut torch_sys::C_tensor,
        b: *mut torch_sys::C_tensor,
        want_x: i32,
        want_w: i32,
        want_b: i32,
        g_x: *mut *mut torch_sys::C_tensor,
        g_w: *mut *mut torch_sys::C_tensor,
        g_b: *mut *mut torch_sys::C_tensor,
        err: *mut c_char,
        err_len: usize,
    ) -> i32;
}

/// A tensor the extension allocated (`new at::Tensor`), now tch's; `None` for a null handle.
#[cfg(feature = "tch")]
fn adopt(t: *mut torch_sys::C_tensor) -> Option<tch::Tensor> {
    // SAFETY: a non-null handle the extension allocated for us and no one else holds.
    (!t.is_null()).then(|| unsafe { tch::Tensor::from_ptr(t) })
}

/// The forward of [`layer_norm`]: the output and the statistics its backward reads.
#[cfg(feature = "tch")]
pub struct LayerNormForward {
    pub out: tch::Tensor,
    pub mean: tch::Tensor,
    pub rstd: tch::Tensor,
}

/// y = (x − μ)·r·γ + β over x's last dimension (μ its mean, r = 1/√(biased variance + ε)):
/// one `aten::native_layer_norm`.
#[cfg(feature = "tch")]
pub fn layer_norm(
    x: &tch::Tensor,
    gamma: &tch::Tensor,
    beta: &tch::Tensor,
    eps: f64,
) -> Result<LayerNormForward, AtenError> {
    let h = handles(&[x, gamma, beta]);
    let mut out = [std::ptr::null_mut(); 3];
    let [o, m, r] = &mut out;
    call("layer norm", |err, len| {
        // SAFETY: three live handles, three out-pointers to our locals.
        unsafe { conelab_layer_norm(h[0], h[1], h[2], eps, o, m, r, err, len) }
    })?;
    match (adopt(out[0]), adopt(out[1]), adopt(out[2])) {
        (Some(out), Some(mean), Some(rstd)) => Ok(LayerNormForward { out, mean, rstd }),
        _ => Err(AtenError {
            op: "layer norm",
            why: "no result".into(),
        }),
    }
}

/// The gradients of x, γ and β (each only where `want` asks) from the output's, given the
/// forward's statistics: one `aten::native_layer_norm_backward`.
#[cfg(feature = "tch")]
#[allow(clippy::too_many_arguments)]
pub fn layer_norm_backward(
    grad_out: &tch::Tensor,
    x: &tch::Tensor,
    mean: &tch::Tensor,
    rstd: &tch::Tensor,
    gamma: &tch::Tensor,
    beta: &tch::Tensor,
    want: [bool; 3],
) -> Result<[Option<tch::Tensor>; 3], AtenError> {
    let h = handles(&[grad_out, x, mean, rstd, gamma, beta]);
    let mut out = [std::ptr::null_mut(); 3];
    let [gx, gw, gb] = &mut out;
    call("layer norm backward", |err, len| {
        // SAFETY: six live handles, three out-pointers to our locals.
        unsafe {
            conelab_layer_norm_backward(
                h[0],
                h[1],
                h[2],
                h[3],
                h[4],
                h[5],
                i32::from(want[0]),
                i32::from(want[1]),
                i32::from(want[2]),
                gx,
                gw,
                gb,
                err,
                len,
            )
        }
    })?;
    let grads = out.map(adopt);
    if want.iter().zip(&grads).any(|(w, g)| *w && g.is_none()) {
        return Err(AtenError {
            op: "layer norm backward",
            why: "a gradient asked for is missing".into(),
        });
    }
    Ok(grads)
}

#[cfg(feature = "tch")]
unsafe extern "C" {
    #[allow(clippy::too_many_arguments)]
    fn conelab_lstm_layer(
        x: *mut torch_sys::C_tensor,
        h0: *mut torch_sys::C_tensor,
        c0: *mut torch_sys::C_tensor,
        w_ih: *mut torch_sys::C_tensor,
        w_hh: *mut torch_sys::C_tensor,
        b_ih: *mut torch_sys::C_tensor,
        b_hh: *mut torch_sys::C_tensor,
        track: i32,
        lower: i32,
        out: *mut *mut torch_sys::C_tensor,
        h_n: *mut *mut torch_sys::C_tensor,
        c_n: *mut *mut torch_sys::C_tensor,
        island: *mut *mut std::ffi::c_void,
        err: *mut c_char,
        err_len: usize,
    ) -> i32;
    fn conelab_causal_attention(
        q: *mut torch_sys::C_tensor,
        k: *mut torch_sys::C_tensor,
        v: *mut torch_sys::C_tensor,
        dropout_p: f64,
        track: i32,
        lower: i32,
        out: *mut *mut torch_sys::C_tensor,
        island: *mut *mut std::ffi::c_void,
        err: *mut c_char,
        err_len: usize,
    ) -> i32;
    fn conelab_island_backward(
        island: *mut std::ffi::c_void,
        grad_out: *mut torch_sys::C_tensor,
        n: usize,
        want: *const i32,
        grads: *mut *mut torch_sys::C_tensor,
        err: *mut c_char,
        err_len: usize,
    ) -> i32;
    fn conelab_island_free(island: *mut std::ffi::c_void);
}

/// The inputs of [`lstm_layer`], in the order the island keeps them (and its backward's
/// gradients come back in).
#[cfg(feature = "tch")]
pub const LSTM_INPUTS: usize = 7;

/// A forward pass run under torch's own autograd (`csrc/lstm.cpp`): its leaves and output,
/// held until [`Island::backward`] takes the gradients, or freed when dropped unused.
#[cfg(feature = "tch")]
pub struct Island(std::ptr::NonNull<std::ffi::c_void>);

// SAFETY: the island is a heap object of the extension touched only through these functions,
// each a whole call; libtorch's tensors and graphs may move between threads.
#[cfg(feature = "tch")]
unsafe impl Send for Island {}
#[cfg(feature = "tch")]
unsafe impl Sync for Island {}

#[cfg(feature = "tch")]
impl std::fmt::Debug for Island {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Island")
    }
}

#[cfg(feature = "tch")]
impl Drop for Island {
    fn drop(&mut self) {
        // SAFETY: the extension allocated it; this is its only owner.
        unsafe { conelab_island_free(self.0.as_ptr()) }
    }
}

#[cfg(feature = "tch")]
impl Island {
    /// The gradients of the island's `N` inputs (in the order of the function that made it)
    /// from its output's, each where `want` asks for it. Once: the island's graph is freed.
    pub fn backward<const N: usize>(
        &self,
        grad_out: &tch::Tensor,
        want: [bool; N],
    ) -> Result<[Option<tch::Tensor>; N], AtenError> {
        let want = want.map(i32::from);
        let mut out = [std::ptr::null_mut(); N];
        let g = grad_out.as_ptr() as *mut _;
        call("backward", |err, len| {
            // SAFETY: our island, a live handle, `want` and `out` of length N (the extension
            // checks N against the island's inputs).
            unsafe {
                conelab_island_backward(
                    self.0.as_ptr(),
                    g,
                    N,
                    want.as_ptr(),
                    out.as_mut_ptr(),
                    err,
                    len,
                )
            }
        })?;
        Ok(out.map(adopt))
    }
}

/// Causal attention softmax(q·kᵀ/√d + causal mask)·v, dropout `dropout_p` on the attention
/// weights inside (libtorch's generator), q, k, v [B, heads, T, d]: one
/// `aten::scaled_dot_product_attention` (flash or memory-efficient kernels on CUDA). With
/// `track`, under torch's autograd, keeping an [`Island`] of the three inputs for the backward.
#[cfg(feature = "tch")]
pub fn causal_attention(
    q: &tch::Tensor,
    k: &tch::Tensor,
    v: &tch::Tensor,
    dropout_p: f64,
    track: bool,
    lower: bool,
) -> Result<(tch::Tensor, Option<Island>), AtenError> {
    let h = handles(&[q, k, v]);
    let mut out = std::ptr::null_mut();
    let mut island: *mut std::ffi::c_void = std::ptr::null_mut();
    call("attention", |err, len| {
        // SAFETY: three live handles and out-pointers to our locals.
        unsafe {
            conelab_causal_attention(
                h[0],
                h[1],
                h[2],
                dropout_p,
                i32::from(track),
                i32::from(lower),
                &mut out,
                &mut island,
                err,
                len,
            )
        }
    })?;
    let island = std::ptr::NonNull::new(island).map(Island);
    match adopt(out) {
        Some(out) if island.is_some() == track => Ok((out, island)),
        _ => Err(AtenError {
            op: "attention",
            why: "no result".into(),
        }),
    }
}

/// One LSTM layer's forward: its output and final state, and the island where tracked.
#[cfg(feature = "tch")]
pub struct LstmLayerForward {
    pub out: tch::Tensor,
    pub h_n: tch::Tensor,
    pub c_n: tch::Tensor,
    pub island: Option<Island>,
}

/// One batch-first LSTM layer as `aten::lstm` (cuDNN on CUDA): x [B, T, D] from (h0, c0)
/// [B, H], torch's weights w_ih [4H, D], w_hh [4H, H] and biases [4H] in torch's gate order
/// (input, forget, cell, output). With `track`, under torch's autograd, keeping an [`Island`]
/// for the backward.
#[cfg(feature = "tch")]
#[allow(clippy::too_many_arguments)]
pub fn lstm_layer(
    x: &tch::Tensor,
    h0: &tch::Tensor,
    c0: &tch::Tensor,
    w_ih: &tch::Tensor,
    w_hh: &tch::Tensor,
    b_ih: &tch::Tensor,
    b_hh: &tch::Tensor,
    track: bool,
    lower: bool,
) -> Result<LstmLayerForward, AtenError> {
    let h = handles(&[x, h0, c0, w_ih, w_hh, b_ih, b_hh]);
    let mut outs = [std::ptr::null_mut(); 3];
    let mut island: *mut std::ffi::c_void = std::ptr::null_mut();
    let [o, hn, cn] = &mut outs;
    call("LSTM layer", |err, len| {
        // SAFETY: seven live handles and out-pointers to our locals.
        unsafe {
            conelab_lstm_layer(
                h[0],
                h[1],
                h[2],
                h[3],
                h[4],
                h[5],
                h[6],
                i32::from(track),
                i32::from(lower),
                o,
                hn,
                cn,
                &mut island,
                err,
                len,
            )
        }
    })?;
    let island = std::ptr::NonNull::new(island).map(Island);
    match (adopt(outs[0]), adopt(outs[1]), adopt(outs[2])) {
        (Some(out), Some(h_n), Some(c_n)) if island.is_some() == track => Ok(LstmLayerForward {
            out,
            h_n,
            c_n,
            island,
        }),
        _ => Err(AtenError {
            op: "LSTM layer",
            why: "no result".into(),
        }),
    }
}

#[cfg(feature = "tch")]
unsafe extern "C" {
    fn conelab_libtorch_built() -> *const c_char;
    fn conelab_libtorch_config(buf: *mut c_char, len: usize) -> usize;
}

/// conelab compiled against one libtorch and loaded another.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "conelab was built against libtorch {built}, but the libtorch loaded at run time is {loaded}: \
     rebuild it against {loaded} (scripts/build-gpu-binary.sh --torch {loaded}) or load libtorch \
     {built} (its lib/ first in LD_LIBRARY_PATH)"
)]
pub struct LibtorchMismatch {
    pub built: String,
    pub loaded: String,
}

/// The libtorch version a configuration text names (`at::show_config()`'s build setting
/// `TORCH_VERSION=2.11.0, …`).
pub fn version_in_config(config: &str) -> Option<&str> {
    let start = config.find("TORCH_VERSION=")? + "TORCH_VERSION=".len();
    let rest = &config[start..];
    let end = rest
        .find(|c: char| c == ',' || c.is_whitespace())
        .unwrap_or(rest.len());
    Some(&rest[..end]).filter(|v| !v.is_empty())
}

/// Whether two libtorch versions are one release: major.minor.patch equal, a local tag
/// (`+cu130`, `+cpu`) aside.
pub fn same_release(a: &str, b: &str) -> bool {
    let release = |v: &str| v.split('+').next().unwrap_or(v).trim().to_owned();
    release(a) == release(b)
}

/// Built against `built`, loaded `loaded` (where the loaded libtorch names itself).
pub fn compare_libtorch(built: &str, loaded: Option<&str>) -> Result<(), LibtorchMismatch> {
    match loaded {
        Some(loaded) if !same_release(built, loaded) => Err(LibtorchMismatch {
            built: built.to_owned(),
            loaded: loaded.to_owned(),
        }),
        // A libtorch that does not name its version is not refused: nothing to compare.
        _ => Ok(()),
    }
}

/// The libtorch version conelab was compiled against.
#[cfg(feature = "tch")]
pub fn libtorch_built() -> String {
    // SAFETY: a pointer to a string literal of the extension, NUL-terminated, never freed.
    unsafe { CStr::from_ptr(conelab_libtorch_built()) }
        .to_string_lossy()
        .into_owned()
}

/// The loaded libtorch's configuration text (`at::show_config()`), where it gives one.
#[cfg(feature = "tch")]
pub fn libtorch_config() -> Option<String> {
    let mut buf = vec![0 as c_char; 16 * 1024];
    // SAFETY: the buffer and its length are ours; the extension writes at most `len` bytes.
    let n = unsafe { conelab_libtorch_config(buf.as_mut_ptr(), buf.len()) };
    if n == 0 {
        return None;
    }
    if n >= buf.len() {
        buf = vec![0 as c_char; n + 1];
        // SAFETY: as above, with room for the whole text.
        unsafe { conelab_libtorch_config(buf.as_mut_ptr(), buf.len()) };
    }
    // SAFETY: NUL-terminated by the extension within the buffer.
    Some(
        unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned(),
    )
}

/// Refuses a libtorch at run time other than the one conelab was compiled against (its ATen
/// extension and tch's bindings assume the headers' layouts); checked once a process.
#[cfg(feature = "tch")]
pub fn check_libtorch() -> Result<(), LibtorchMismatch> {
    static CHECKED: std::sync::OnceLock<Result<(), LibtorchMismatch>> = std::sync::OnceLock::new();
    CHECKED
        .get_or_init(|| {
            let config = libtorch_config();
            compare_libtorch(
                &libtorch_built(),
                config.as_deref().and_then(version_in_config),
            )
        })
        .clone()
}

#[cfg(test)]
mod version_tests {
    use super::*;

    #[test]
    fn a_refusal_gives_the_composed_path_and_is_said_once_per_operator() {
        let refused = || AtenError {
            op: "test: refusing operator",
            why: "no".into(),
        };
        assert_eq!(AtenError::or_composed(Ok::<u8, AtenError>(7)), Some(7));
        assert_eq!(AtenError::or_composed::<u8>(Err(refused())), None);
        assert!(!AtenError::first_refusal("test: refusing operator"));
        assert!(AtenError::first_refusal("test: another operator"));
        assert!(!AtenError::first_refusal("test: another operator"));
    }

    #[test]
    fn the_loaded_version_is_read_from_the_build_settings() {
        let config = "PyTorch built with:\n  - C++ Version: 201703\n  - Build settings: \
            BLAS_INFO=mkl, BUILD_TYPE=Release, TORCH_VERSION=2.11.0, USE_CUDA=ON, \n";
        assert_eq!(version_in_config(config), Some("2.11.0"));
        assert_eq!(version_in_config("TORCH_VERSION=2.9.0"), Some("2.9.0"));
        assert_eq!(version_in_config("no version here"), None);
        assert_eq!(version_in_config("TORCH_VERSION=, X=1"), None);
    }

    #[test]
    fn a_mismatch_names_both_versions_and_how_to_come_back() {
        assert!(same_release("2.11.0", "2.11.0+cu130"));
        assert!(!same_release("2.9.0", "2.11.0"));
        assert_eq!(compare_libtorch("2.9.0", Some("2.9.0")), Ok(()));
        assert_eq!(compare_libtorch("2.9.0", None), Ok(()));
        let e = compare_libtorch("2.9.0", Some("2.11.0")).expect_err("a mismatch");
        let line = e.to_string();
        assert!(!line.contains('\n'), "one line: {line}");
        for part in [
            "2.9.0",
            "2.11.0",
            "build-gpu-binary.sh --torch 2.11.0",
            "LD_LIBRARY_PATH",
        ] {
            assert!(line.contains(part), "{part} in: {line}");
        }
    }
}

#[cfg(all(test, feature = "tch"))]
pub(crate) mod tests {
    use super::*;
    use tch::{Device, Kind, Tensor};

    /// One count at a time in a process: the tests (of every module) take turns.
    static ONE_COUNT: std::sync::Mutex<()> = std::sync::Mutex::new(());

    pub(crate) fn turn() -> std::sync::MutexGuard<'static, ()> {
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

    /// torch's autograd engine's own records (evaluating a backward node, accumulating a
    /// leaf's gradient) are not operators: the ATen operators the nodes run count instead.
    #[test]
    fn the_operators_of_torchs_backward_nodes_count_not_the_engines_records() {
        let _turn = turn();
        let a = Tensor::ones([4], (Kind::Float, Device::Cpu)).set_requires_grad(true);
        let loss = (&a * &a).sum(Kind::Float);
        let ((), counts) = count_ops(|| loss.backward()).expect("counted");
        assert!(
            counts.keys().all(|k| k.starts_with("aten::")),
            "only ATen operators: {counts:?}"
        );
        // MulBackward0 multiplies the incoming gradient by each factor.
        assert!(
            counts.get("aten::mul").is_some_and(|&n| n >= 1),
            "{counts:?}"
        );
        assert!(a.grad().defined());
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

    fn refs(ts: &[Tensor]) -> Vec<&Tensor> {
        ts.iter().collect()
    }

    fn values(t: &Tensor) -> Vec<f32> {
        Vec::<f32>::try_from(t.flatten(0, -1)).expect("f32 values")
    }

    /// Deterministic values of mixed sign and scale.
    fn filled(n: usize, salt: f32) -> Tensor {
        let v: Vec<f32> = (0..n)
            .map(|i| (i as f32 * 0.73 + salt).sin() * (1.0 + (i % 5) as f32))
            .collect();
        Tensor::from_slice(&v)
    }

    /// AdamW in f64, burn's formula written out: the independent reference.
    fn adamw_reference(theta: &mut [f64], m: &mut [f64], v: &mut [f64], g: &[f64], h: AdamWStep) {
        let t = h.step as i32;
        for i in 0..theta.len() {
            m[i] = h.beta1 * m[i] + (1.0 - h.beta1) * g[i];
            v[i] = h.beta2 * v[i] + (1.0 - h.beta2) * g[i] * g[i];
            let m_hat = m[i] / (1.0 - h.beta1.powi(t));
            let v_hat = v[i] / (1.0 - h.beta2.powi(t));
            theta[i] = theta[i] * (1.0 - h.lr * h.weight_decay)
                - h.lr * m_hat / (v_hat.sqrt() + h.epsilon);
        }
    }

    #[test]
    fn fused_adamw_follows_the_formula_over_several_tensors_and_steps() {
        let sizes = [7usize, 33, 1];
        let params: Vec<Tensor> = sizes
            .iter()
            .enumerate()
            .map(|(k, &n)| filled(n, k as f32))
            .collect();
        let moments = |_: usize| -> Vec<Tensor> {
            sizes
                .iter()
                .map(|&n| Tensor::zeros([n as i64], (Kind::Float, Device::Cpu)))
                .collect()
        };
        let (m, v) = (moments(0), moments(1));
        let mut expect: Vec<(Vec<f64>, Vec<f64>, Vec<f64>)> = params
            .iter()
            .map(|p| {
                let n = p.numel();
                (
                    values(p).iter().map(|&x| x as f64).collect(),
                    vec![0.0; n],
                    vec![0.0; n],
                )
            })
            .collect();
        for step in 1..=4 {
            let grads: Vec<Tensor> = sizes
                .iter()
                .enumerate()
                .map(|(k, &n)| filled(n, 10.0 * step as f32 + k as f32))
                .collect();
            let h = AdamWStep {
                lr: 1e-2,
                beta1: 0.9,
                beta2: 0.999,
                weight_decay: 0.01,
                epsilon: 1e-8,
                step,
            };
            let grads_before: Vec<Vec<f32>> = grads.iter().map(values).collect();
            fused_adamw(
                &refs(&params),
                &refs(&grads),
                &refs(&m),
                &refs(&v),
                h,
                DeviceGuard::default(),
            )
            .expect("one fused step");
            // The gradients are only read.
            assert_eq!(grads.iter().map(values).collect::<Vec<_>>(), grads_before);
            for (k, (theta, mm, vv)) in expect.iter_mut().enumerate() {
                let g: Vec<f64> = values(&grads[k]).iter().map(|&x| x as f64).collect();
                adamw_reference(theta, mm, vv, &g, h);
            }
        }
        for (k, (theta, _, _)) in expect.iter().enumerate() {
            for (got, want) in values(&params[k]).iter().zip(theta) {
                assert!(
                    (*got as f64 - want).abs() <= 1e-6 * want.abs().max(1.0),
                    "parameter {k}: {got} vs {want}"
                );
            }
        }
    }

    #[test]
    fn bad_inputs_are_errors_not_aborts() {
        let a = Tensor::zeros([3], (Kind::Float, Device::Cpu));
        let b = Tensor::zeros([4], (Kind::Float, Device::Cpu));
        let d = Tensor::zeros([3], (Kind::Double, Device::Cpu));
        let h = AdamWStep {
            lr: 1e-3,
            beta1: 0.9,
            beta2: 0.999,
            weight_decay: 0.0,
            epsilon: 1e-8,
            step: 1,
        };
        let e = fused_adamw(&[&a], &[&b], &[&a], &[&a], h, DeviceGuard::default())
            .expect_err("shapes differ");
        assert!(e.to_string().contains("differ in shape"), "{e}");
        let e = fused_adamw(&[&a], &[&d], &[&a], &[&a], h, DeviceGuard::default())
            .expect_err("not f32");
        assert!(e.to_string().contains("not f32"), "{e}");
        let e = fused_adamw(&[], &[], &[], &[], h, DeviceGuard::default()).expect_err("nothing");
        assert!(e.to_string().contains("no tensors"), "{e}");
        let e = fused_adamw(
            &[&a],
            &[&a],
            &[&a],
            &[&a],
            AdamWStep { step: 0, ..h },
            DeviceGuard::default(),
        )
        .expect_err("step 0");
        assert!(e.to_string().contains("starts at 1"), "{e}");
        let e =
            fused_adamw(&[&a], &[], &[&a], &[&a], h, DeviceGuard::default()).expect_err("lengths");
        assert!(e.to_string().contains("as many"), "{e}");
        assert!(foreach_squared_norm(&[]).is_err());
        assert!(foreach_mul_(&[&d], 2.0).is_err());
        let e = foreach_copy_(&[&a], &[&b]).expect_err("shapes differ");
        assert!(e.to_string().contains("differs in shape"), "{e}");
    }

    fn skip(flag: &Tensor) -> DeviceGuard<'_> {
        DeviceGuard {
            found_inf: Some(flag),
            grad_scale: None,
        }
    }

    /// `grad_scale` divides the gradients as the kernel reads them: the same step as with the
    /// gradients divided beforehand (within an ulp: torch divides in its own order). Torch's
    /// kernel also writes the divided gradients back (AMP's in-place unscaling).
    #[test]
    fn grad_scale_is_the_step_on_divided_gradients() {
        let h = AdamWStep {
            lr: 1e-2,
            beta1: 0.9,
            beta2: 0.999,
            weight_decay: 0.01,
            epsilon: 1e-8,
            step: 2,
        };
        let state = || (filled(33, 0.3), filled(33, 0.1), filled(33, 0.2).abs());
        let g = filled(33, 0.7);
        let divisor = Tensor::from_slice(&[4.0f32]);
        let (p, m, v) = state();
        let g_before = values(&g);
        let guard = DeviceGuard {
            found_inf: None,
            grad_scale: Some(&divisor),
        };
        fused_adamw(&[&p], &[&g], &[&m], &[&v], h, guard).expect("a step");
        let quarter: Vec<f32> = g_before.iter().map(|x| x / 4.0).collect();
        assert_eq!(values(&g), quarter, "the gradients are written divided");
        let (p2, m2, v2) = state();
        let divided = Tensor::from_slice(&quarter);
        fused_adamw(
            &[&p2],
            &[&divided],
            &[&m2],
            &[&v2],
            h,
            DeviceGuard::default(),
        )
        .expect("a step");
        for (a, b) in [(&p, &p2), (&m, &m2), (&v, &v2)] {
            for (x, y) in values(a).iter().zip(values(b)) {
                assert!((x - y).abs() <= 1e-6 * y.abs().max(1e-3), "{x} vs {y}");
            }
        }
    }

    #[test]
    fn found_inf_leaves_parameters_and_moments_untouched_and_zero_changes_nothing() {
        let h = AdamWStep {
            lr: 1e-2,
            beta1: 0.9,
            beta2: 0.999,
            weight_decay: 0.01,
            epsilon: 1e-8,
            step: 3,
        };
        let fresh = || {
            (
                filled(17, 0.3),
                filled(17, 0.7),
                filled(17, 0.1),
                filled(17, 0.2).abs(), // v ≥ 0, as a second moment is
            )
        };
        let (p, g, m, v) = fresh();
        let before = [values(&p), values(&m), values(&v)];
        let one = Tensor::ones([1], (Kind::Float, Device::Cpu));
        fused_adamw(&[&p], &[&g], &[&m], &[&v], h, skip(&one)).expect("a skipped step");
        assert_eq!([values(&p), values(&m), values(&v)], before);
        // found_inf = 0 is the plain step, bit for bit.
        let (p0, g0, m0, v0) = fresh();
        let zero = Tensor::zeros([1], (Kind::Float, Device::Cpu));
        fused_adamw(&[&p0], &[&g0], &[&m0], &[&v0], h, skip(&zero)).expect("a step");
        fused_adamw(&[&p], &[&g], &[&m], &[&v], h, DeviceGuard::default()).expect("a step");
        assert_ne!(values(&p), before[0], "the step moved θ");
        assert_eq!(
            [values(&p0), values(&m0), values(&v0)],
            [values(&p), values(&m), values(&v)]
        );
        let two = Tensor::zeros([2], (Kind::Float, Device::Cpu));
        let e = fused_adamw(&[&p], &[&g], &[&m], &[&v], h, skip(&two)).expect_err("two elements");
        assert!(e.to_string().contains("one element"), "{e}");
    }

    #[test]
    fn the_step_guard_decides_on_the_device_what_the_host_would() {
        let scalar = |x: f32| Tensor::from_slice(&[x]);
        // ‖g‖ = 5 above a clip of 2: the gradients divided by (5 + 1e-6)/2; the values come
        // back in order.
        let g = step_guard(&scalar(2.5), &scalar(0.5), &scalar(25.0), None, 2.0).expect("a guard");
        assert_eq!(values(&g.values), vec![2.5, 0.5, 25.0]);
        assert_eq!(values(&g.found_inf), vec![0.0]);
        let divisor = |g: &StepGuard| values(g.divisor.as_ref().expect("a clip's divisor"))[0];
        assert!((divisor(&g) as f64 - (5.0 + 1e-6) / 2.0).abs() < 1e-6);
        // Below the clip: divided by 1; no clip: no divisor.
        let g = step_guard(&scalar(2.5), &scalar(0.0), &scalar(0.25), None, 1.0).expect("a guard");
        assert_eq!(divisor(&g), 1.0);
        let g = step_guard(&scalar(2.5), &scalar(0.0), &scalar(25.0), None, 0.0).expect("a guard");
        assert!(g.divisor.is_none());
        // A non-finite loss or penalty sets the flag; the flag is sticky.
        for (loss, pen) in [
            (f32::NAN, 0.0),
            (1.0, f32::INFINITY),
            (f32::NEG_INFINITY, 0.0),
        ] {
            let g =
                step_guard(&scalar(loss), &scalar(pen), &scalar(1.0), None, 1.0).expect("a guard");
            assert_eq!(values(&g.found_inf), vec![1.0], "{loss} {pen}");
        }
        let bad = scalar(1.0);
        let g =
            step_guard(&scalar(2.0), &scalar(0.0), &scalar(1.0), Some(&bad), 1.0).expect("a guard");
        assert_eq!(values(&g.found_inf), vec![1.0], "sticky");
        let good = scalar(0.0);
        let g = step_guard(&scalar(2.0), &scalar(0.0), &scalar(1.0), Some(&good), 1.0)
            .expect("a guard");
        assert_eq!(values(&g.found_inf), vec![0.0]);
        let two = Tensor::zeros([2], (Kind::Float, Device::Cpu));
        assert!(step_guard(&two, &scalar(0.0), &scalar(1.0), None, 1.0).is_err());
        // The host copy on the CPU is done when it returns.
        let copy = HostCopy::start(&g.values).expect("a copy");
        assert_eq!(copy.wait().expect("its values"), vec![2.0, 0.0, 1.0]);
    }

    #[test]
    fn foreach_norm_and_scale_against_sums_of_their_values() {
        let ts = [filled(5, 0.5), filled(64, 1.5), filled(3, 2.5)];
        let all = refs(&ts);
        let want: f64 = ts
            .iter()
            .flat_map(values)
            .map(|x| (x as f64) * (x as f64))
            .sum();
        let got = foreach_squared_norm(&all).expect("a norm");
        assert_eq!(got.size(), vec![1]);
        let got = got.double_value(&[0]);
        assert!((got - want).abs() <= 1e-5 * want, "{got} vs {want}");
        let before: Vec<Vec<f32>> = ts.iter().map(values).collect();
        foreach_mul_(&all, 0.25).expect("scaled");
        for (t, b) in ts.iter().zip(&before) {
            let scaled: Vec<f32> = b.iter().map(|x| x * 0.25).collect();
            assert_eq!(values(t), scaled);
        }
        let copies: Vec<Tensor> = ts.iter().map(|t| t.zeros_like()).collect();
        foreach_copy_(&refs(&copies), &refs(&ts)).expect("copied");
        for (c, t) in copies.iter().zip(&ts) {
            assert_eq!(values(c), values(t));
        }
    }

    /// The test build links the libtorch it was compiled against: the check passes, and the two
    /// versions it compares were both read (the headers' and the library's own).
    #[test]
    fn the_linked_libtorch_is_the_one_compiled_against() {
        let built = libtorch_built();
        let config = libtorch_config().expect("libtorch describes itself");
        let loaded = version_in_config(&config).expect("its TORCH_VERSION");
        assert!(built.starts_with("2."), "{built}");
        assert!(same_release(&built, loaded), "{built} vs {loaded}");
        assert_eq!(check_libtorch(), Ok(()));
    }
}

/// A step's guard, decided on the device ([`step_guard`]).
#[cfg(feature = "tch")]
pub struct StepGuard {
    /// 1.0 where this step or an earlier one still unread went wrong (a non-finite loss or
    /// penalty), else 0.0: AdamW writes nothing where it holds 1 ([`fused_adamw`]).
    pub found_inf: tch::Tensor,
    /// The global-norm clip as AdamW's kernel takes it (`grad_scale`, which it divides the
    /// gradients by): `max(1, (‖g‖ + 1e-6) / max_norm)`, torch's `clip_grad_norm_` factor's
    /// inverse; `None` without a clip.
    pub divisor: Option<tch::Tensor>,
    /// `[loss, penalty, ‖g‖²]`, for the host to read when it gets to it.
    pub values: tch::Tensor,
}

/// The step's guard from its loss, penalty sum and squared gradient norm (one-element f32
/// tensors on one device), computed there without a host read; `sticky`: the previous unread
/// step's `found_inf`, which this one keeps.
#[cfg(feature = "tch")]
pub fn step_guard(
    loss: &tch::Tensor,
    penalty: &tch::Tensor,
    squared_norm: &tch::Tensor,
    sticky: Option<&tch::Tensor>,
    max_norm: f64,
) -> Result<StepGuard, AtenError> {
    let mut out = [std::ptr::null_mut::<torch_sys::C_tensor>(); 3];
    let [found, divisor, values] = &mut out;
    call("step guard", |err, len| {
        // SAFETY: live handles (or null for `sticky`) and out-pointers to our locals.
        unsafe {
            conelab_step_guard(
                loss.as_ptr() as *mut _,
                penalty.as_ptr() as *mut _,
                squared_norm.as_ptr() as *mut _,
                sticky.map_or(std::ptr::null_mut(), |s| s.as_ptr() as *mut _),
                max_norm,
                found,
                divisor,
                values,
                err,
                len,
            )
        }
    })?;
    let [found_inf, divisor, values] = take_outputs(out);
    let (Some(found_inf), Some(values)) = (found_inf, values) else {
        return Err(AtenError {
            op: "step guard",
            why: "no result".into(),
        });
    };
    if (max_norm > 0.0) != divisor.is_some() {
        return Err(AtenError {
            op: "step guard",
            why: "no clip's divisor".into(),
        });
    }
    Ok(StepGuard {
        found_inf,
        divisor,
        values,
    })
}

/// A copy of a tensor on its way to host memory ([`HostCopy::start`]).
#[cfg(feature = "tch")]
pub struct HostCopy {
    host: tch::Tensor,
    /// Recorded after the copy on a CUDA stream; null where the copy was done at once.
    event: *mut std::ffi::c_void,
}

#[cfg(feature = "tch")]
impl HostCopy {
    /// Queues the copy of `t` behind the device's queued work and returns at once (on CUDA,
    /// into pinned memory; elsewhere the copy is made here).
    pub fn start(t: &tch::Tensor) -> Result<Self, AtenError> {
        let mut out: *mut torch_sys::C_tensor = std::ptr::null_mut();
        let mut event: *mut std::ffi::c_void = std::ptr::null_mut();
        call("host copy", |err, len| {
            // SAFETY: a live handle and out-pointers to our locals.
            unsafe { conelab_host_copy_async(t.as_ptr() as *mut _, &mut out, &mut event, err, len) }
        })?;
        if out.is_null() {
            if !event.is_null() {
                // SAFETY: an event the extension allocated, not freed elsewhere.
                unsafe { conelab_event_free(event) };
            }
            return Err(AtenError {
                op: "host copy",
                why: "no result".into(),
            });
        }
        // SAFETY: a tensor the extension allocated; tch owns it now.
        let host = unsafe { tch::Tensor::from_ptr(out) };
        Ok(Self { host, event })
    }

    /// Waits for the copy (only for the work queued before it), then its values as f64.
    pub fn wait(self) -> Result<Vec<f64>, AtenError> {
        let event = self.event;
        call("host copy", |err, len| {
            // SAFETY: null or our live event.
            unsafe { conelab_event_wait(event, err, len) }
        })?;
        Vec::<f64>::try_from(self.host.to_kind(tch::Kind::Double).reshape([-1])).map_err(|e| {
            AtenError {
                op: "host copy",
                why: e.to_string(),
            }
        })
    }
}

// SAFETY: a CUDA event may be waited on and destroyed from any thread; the copy's tensor is Send.
#[cfg(feature = "tch")]
unsafe impl Send for HostCopy {}

#[cfg(feature = "tch")]
impl Drop for HostCopy {
    fn drop(&mut self) {
        if !self.event.is_null() {
            // SAFETY: our event, freed once (the pointer is cleared).
            unsafe { conelab_event_free(self.event) };
            self.event = std::ptr::null_mut();
        }
    }
}

#[cfg(feature = "tch")]
unsafe extern "C" {
    #[allow(clippy::too_many_arguments)]
    fn conelab_softmax_head(
        logits: *mut torch_sys::C_tensor,
        targets: *mut torch_sys::C_tensor,
        alpha: f64,
        ul_idx: *mut torch_sys::C_tensor,
        ul_mask: *mut torch_sys::C_tensor,
        beta: f64,
        nll: *mut *mut torch_sys::C_tensor,
        dev: *mut *mut torch_sys::C_tensor,
        ul: *mut *mut torch_sys::C_tensor,
        g: *mut *mut torch_sys::C_tensor,
        err: *mut c_char,
        err_len: usize,
    ) -> i32;
}

/// Unlikelihood's part of the head: its weight β and its candidates, int64 columns `[P, T]`
/// with a mask `[P, T]` (0 = padding), distinct within a row and never the row's target
/// (`objective::unlikelihood::candidates`).
#[cfg(feature = "tch")]
pub struct HeadUnlikelihood<'a> {
    pub beta: f64,
    pub idx: &'a tch::Tensor,
    pub mask: &'a tch::Tensor,
}

/// The full-softmax head on LibTorch (`csrc/head.cpp`).
#[cfg(feature = "tch")]
pub struct SoftmaxHead {
    /// The mean NLL, `[1]`.
    pub nll: tch::Tensor,
    /// DEV's α·mean (log Z)², `[1]`, when α > 0.
    pub dev: Option<tch::Tensor>,
    /// Unlikelihood's β/P Σ −ln(1 − p), `[1]`, when given.
    pub ul: Option<tch::Tensor>,
    /// G = ∂(NLL + DEV + UL)/∂z, `[P, N]` f32.
    pub g: tch::Tensor,
}

/// The head's terms and G on LibTorch (`csrc/head.cpp`) from the logits `[P, N]` (f32 or bf16),
/// the int64 targets `[P]`, DEV's α (0 = off) and unlikelihood's part where it is on.
#[cfg(feature = "tch")]
pub fn softmax_head(
    logits: &tch::Tensor,
    targets: &tch::Tensor,
    alpha: f64,
    unlikelihood: Option<HeadUnlikelihood<'_>>,
) -> Result<SoftmaxHead, AtenError> {
    let mut out = [std::ptr::null_mut::<torch_sys::C_tensor>(); 4];
    let [nll, dev, ul, g] = &mut out;
    let (idx, mask, beta) = match &unlikelihood {
        Some(u) => (u.idx.as_ptr() as *mut _, u.mask.as_ptr() as *mut _, u.beta),
        None => (std::ptr::null_mut(), std::ptr::null_mut(), 0.0),
    };
    call("softmax head", |err, len| {
        // SAFETY: live handles (or null where β = 0, which the call does not read) and
        // out-pointers to our locals.
        unsafe {
            conelab_softmax_head(
                logits.as_ptr() as *mut _,
                targets.as_ptr() as *mut _,
                alpha,
                idx,
                mask,
                beta,
                nll,
                dev,
                ul,
                g,
                err,
                len,
            )
        }
    })?;
    let [nll, dev, ul, g] = take_outputs(out);
    match (nll, g) {
        (Some(nll), Some(g)) if dev.is_some() == (alpha > 0.0) && ul.is_some() == (beta > 0.0) => {
            Ok(SoftmaxHead { nll, dev, ul, g })
        }
        _ => Err(AtenError {
            op: "softmax head",
            why: "no result".into(),
        }),
    }
}
