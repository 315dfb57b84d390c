//! The source revision this binary was built from, recorded in every run's `run.json`. The binary
//! sets it once at start (its build script knows the revision); a library has no build script of
//! its own, so a commit rebuilds the binary only.

use std::sync::OnceLock;

static REVISION: OnceLock<&'static str> = OnceLock::new();

/// Sets the revision (the first call wins; `None`, a build outside git, leaves it unknown).
pub fn set(revision: Option<&'static str>) {
    if let Some(r) = revision {
        let _ = REVISION.set(r);
    }
}

/// The revision, or `unknown` when the binary did not say.
pub fn get() -> &'static str {
    REVISION.get().copied().unwrap_or("unknown")
}

#[cfg(test)]
mod tests {
    #[test]
    fn unknown_until_set_then_the_first_setting_wins() {
        assert_eq!(super::get(), "unknown");
        super::set(None);
        assert_eq!(super::get(), "unknown");
        super::set(Some("abc123"));
        super::set(Some("def456"));
        assert_eq!(super::get(), "abc123");
    }
}
