//! The foundation every other conelab crate stands on; it knows nothing of training or the UI.
//!
//! - [`exit`]: the exit statuses, one type for every process conelab starts.
//! - [`error`]: typed errors with their causes, written as one line.
//! - [`atomic`]: the crash-safe writes every file that matters goes through.
//! - [`clock`]: the system clock as Unix seconds, and UTC dates from them.
//! - [`settings`]: the user's settings file and the environment that overrides it.
//! - [`lockfile`]: the OS locks that keep two processes off one run folder.
//! - [`fault`]: the I/O failures the tests inject (`CONELAB_FAULT`).
//! - [`channel_relay`]: a thread that hands on what a channel receives.
//! - [`jsonfloat`]: floats in JSON that survive NaN and infinity.
//! - [`format`]: durations as the screens and tables write them.
//! - [`number`]: numbers in cells: in full or visibly abbreviated, never cut.
//! - [`name`]: text made safe as one path component.
//! - [`stderr`]: lines for the user that never panic on a closed stderr.
//! - [`revision`]: the source revision the binary was built from.
//! - [`alloc_count`]: the counting allocator behind the benchmarks' memory columns.

pub mod alloc_count;
pub mod atomic;
pub mod channel_relay;
pub mod clock;
pub mod error;
pub mod exit;
pub mod fault;
pub mod format;
pub mod hash;
pub mod integrity;
pub mod jsonfloat;
pub mod lockfile;
pub mod name;
pub mod number;
pub mod platform;
pub mod revision;
pub mod settings;
pub mod stderr;
pub mod system;

/// The memory the kernel says new work can take without swapping (`MemAvailable` of
/// /proc/meminfo), in bytes; `None` where it does not say (not Linux, no /proc).
pub fn available_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    available_in_meminfo(&text)
}

fn available_in_meminfo(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

#[cfg(test)]
mod meminfo_tests {
    #[test]
    fn mem_available_is_read_in_bytes() {
        let text = "MemTotal:       24576000 kB\nMemFree:  100 kB\nMemAvailable:   20480000 kB\n";
        assert_eq!(super::available_in_meminfo(text), Some(20_480_000 * 1024));
        assert_eq!(super::available_in_meminfo("MemTotal: 1 kB\n"), None);
        assert_eq!(super::available_in_meminfo("MemAvailable: lots kB\n"), None);
    }
}
