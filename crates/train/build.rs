//! Compiles conelab's ATen extension (`csrc/`) in LibTorch builds (the `tch` feature), against the
//! libtorch that torch-sys links; nothing in the default build, nor under `tch-doc-only` (which
//! type-checks without libtorch and cannot link).

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=csrc");
    #[cfg(feature = "tch")]
    extension::build();
}

#[cfg(feature = "tch")]
mod extension {
    use std::env;
    use std::path::PathBuf;

    pub fn build() {
        if env::var_os("CARGO_FEATURE_TCH_DOC_ONLY").is_some() {
            return;
        }
        println!("cargo:rerun-if-env-changed=LIBTORCH_CXX11_ABI");
        // torch-sys (`links = "tch"`) hands its direct dependents the folder of the libraries it
        // links; the headers sit beside it, in a libtorch folder and in PyTorch's `torch/` alike.
        let Some(lib) = env::var_os("DEP_TCH_LIBTORCH_LIB").map(PathBuf::from) else {
            panic!(
                "torch-sys did not say where libtorch is (DEP_TCH_LIBTORCH_LIB): see docs/GPU.md"
            );
        };
        let include = lib.parent().unwrap_or(&lib).join("include");
        // The same C++ ABI as torch-sys's own C++ (its default: the new one, as PyTorch's wheels).
        let abi = env::var("LIBTORCH_CXX11_ABI").unwrap_or_else(|_| "1".into());
        cc::Build::new()
            .cpp(true)
            .pic(true)
            .warnings(false)
            .include(&include)
            .include(include.join("torch/csrc/api/include"))
            .flag("-std=c++17")
            .flag(format!("-D_GLIBCXX_USE_CXX11_ABI={abi}"))
            .flag("-DGLOG_USE_GLOG_EXPORT")
            .file("csrc/opcount.cpp")
            .file("csrc/optim.cpp")
            .file("csrc/version.cpp")
            .file("csrc/norm.cpp")
            .file("csrc/island.cpp")
            .file("csrc/step.cpp")
            .file("csrc/head.cpp")
            .compile("conelab_aten");
    }
}
