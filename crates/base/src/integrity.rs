//! Integrity of what a run wrote: CRC-32C checksums of files (recorded when a file is committed,
//! checked when it is read), and the boundary where a decoder's panic on damaged bytes becomes an
//! error about the file instead of a crash of the reader.
//!
//! CRC-32C (Castagnoli, the `crc32c` crate, SSE 4.2 where the CPU has it: several GB/s) detects
//! every burst of up to 32 flipped bits and all but 2⁻³² of the rest: what a flipped bit on a disk
//! or in a copy needs, not a cryptographic hash.

use std::cell::Cell;
use std::io::Read;
use std::path::Path;

/// The CRC-32C of `bytes`.
pub fn crc32c(bytes: &[u8]) -> u32 {
    crc32c::crc32c(bytes)
}

/// The CRC-32C of a file's contents, read in 1 MiB blocks.
pub fn file_crc32c(path: &Path) -> std::io::Result<u32> {
    let mut file = std::fs::File::open(path)?;
    let mut buf = vec![0u8; 1 << 20];
    let mut crc = 0u32;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            return Ok(crc);
        }
        crc = crc32c::crc32c_append(crc, &buf[..n]);
    }
}

/// A checksum as written in names and manifests: eight lowercase hex digits.
pub fn hex(crc: u32) -> String {
    format!("{crc:08x}")
}

/// [`hex`] read back; `None` unless exactly eight lowercase hex digits (as [`hex`] writes them:
/// a flipped case bit is damage too, never silently the same number).
pub fn parse_hex(text: &str) -> Option<u32> {
    (text.len() == 8 && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
        .then(|| u32::from_str_radix(text, 16).ok())
        .flatten()
}

thread_local! {
    /// Set while [`catch_panic`] runs on this thread: the process's panic hook stays quiet (the
    /// panic is expected and becomes an error).
    static CATCHING: Cell<bool> = const { Cell::new(false) };
}

/// Whether a panic on this thread now is caught by [`catch_panic`] (for the panic hook: a
/// decoder that panics on damaged bytes is not an internal error to report).
pub fn catching_panic() -> bool {
    CATCHING.with(Cell::get)
}

/// Runs `f` (a decoder of bytes read from a file); a panic inside it becomes `Err` with its
/// message. For third-party decoders (polars' Parquet reader, burn's records) that panic on
/// some damaged inputs instead of returning an error: the caller reports the file as corrupt.
pub fn catch_panic<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    let before = CATCHING.with(|c| c.replace(true));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    CATCHING.with(|c| c.set(before));
    result.map_err(|payload| {
        payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".into())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The standard check value of CRC-32C (RFC 3720, B.4): "123456789" → 0xE3069283; 32 zero
    /// bytes → 0x8A9136AA.
    #[test]
    fn crc32c_gives_the_published_check_values() {
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(&[0u8; 32]), 0x8A91_36AA);
        assert_eq!(hex(0xE306_9283), "e3069283");
        assert_eq!(parse_hex("e3069283"), Some(0xE306_9283));
        for bad in [
            "e306928",
            "e30692833",
            "e306928g",
            "",
            "+3069283",
            "E3069283",
        ] {
            assert_eq!(parse_hex(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_file_is_checked_in_blocks_as_a_whole() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("f");
        let bytes: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(&path, &bytes).expect("write");
        assert_eq!(file_crc32c(&path).expect("crc"), crc32c(&bytes));
        // One flipped bit anywhere changes it.
        let mut flipped = bytes.clone();
        flipped[2_345_678] ^= 0x10;
        std::fs::write(&path, &flipped).expect("write");
        assert_ne!(file_crc32c(&path).expect("crc"), crc32c(&bytes));
    }

    #[test]
    fn a_panic_becomes_an_error_and_the_flag_is_reset() {
        assert!(!catching_panic());
        let caught = catch_panic(|| -> u32 {
            assert!(catching_panic());
            panic!("range end index 9 out of range")
        });
        assert_eq!(caught, Err("range end index 9 out of range".into()));
        assert!(!catching_panic());
        assert_eq!(catch_panic(|| 7), Ok(7));
    }
}
