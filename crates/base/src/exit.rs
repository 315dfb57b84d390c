//! conelab's exit statuses: one type for the run, the viewer, sweeps and `main`, so that a number
//! means the same everywhere (README, "Exit statuses").

use std::fmt;

/// How a conelab process ended, as its exit status says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    /// 0: completed, stopped from a viewer, or a viewer that detached; any command's success.
    Success,
    /// 2: bad input, said in one line before anything was created.
    BadInput,
    /// 3: training diverged (NaN or infinite loss) with nobody watching.
    Diverged,
    /// 4: an internal or a device error; for a sweep, a run failed.
    Failed,
    /// 5: damaged data: a file the command needs fails its checksum or does not decode (named
    /// on stderr, nothing written), `store verify` found damage, or `export --strict` read
    /// around damage. Not the input's fault and not the machine's: a retry gives the same.
    Damaged,
    /// 75 (`EX_TEMPFAIL`): stopped by SIGINT/SIGTERM after saving a checkpoint, resumable (a
    /// scheduler can requeue on it); for a sweep, a run was stopped so.
    Stopped,
    /// 130: a second signal, or one before training started.
    Interrupted,
    /// Any other status, passed on as a child process gave it.
    Other(u8),
}

impl ExitStatus {
    /// The number the process exits with.
    pub const fn code(self) -> u8 {
        match self {
            ExitStatus::Success => 0,
            ExitStatus::BadInput => 2,
            ExitStatus::Diverged => 3,
            ExitStatus::Failed => 4,
            ExitStatus::Damaged => 5,
            ExitStatus::Stopped => 75,
            ExitStatus::Interrupted => 130,
            ExitStatus::Other(code) => code,
        }
    }

    /// The status a number stands for (a child's exit status, `final.json`'s `exit_code`).
    pub const fn from_code(code: u8) -> Self {
        match code {
            0 => ExitStatus::Success,
            2 => ExitStatus::BadInput,
            3 => ExitStatus::Diverged,
            4 => ExitStatus::Failed,
            5 => ExitStatus::Damaged,
            75 => ExitStatus::Stopped,
            130 => ExitStatus::Interrupted,
            other => ExitStatus::Other(other),
        }
    }

    /// Ends the process at once with this status (from a signal thread: nothing else runs).
    pub fn exit_now(self) -> ! {
        std::process::exit(i32::from(self.code()))
    }
}

/// The status an error ends the process with: `given` (the caller's reading of the error: bad
/// input for most), except that a failure of the machine rather than of the input — a full
/// disk, an I/O error, a read-only or over-quota file system, no memory or no file handles, as
/// an `io::Error` anywhere in the chain — is `Failed` (4): the input was fine, a retry elsewhere
/// may succeed, and a scheduler must not read it as the user's mistake.
pub fn status_for(error: &(dyn std::error::Error + 'static), given: ExitStatus) -> ExitStatus {
    let mut cause = Some(error);
    while let Some(e) = cause {
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && machine_failure(io)
        {
            return ExitStatus::Failed;
        }
        cause = e.source();
    }
    given
}

fn machine_failure(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(
            libc::ENOSPC
                | libc::EIO
                | libc::EDQUOT
                | libc::EROFS
                | libc::ENOMEM
                | libc::EMFILE
                | libc::ENFILE
        )
    ) || matches!(
        e.kind(),
        std::io::ErrorKind::StorageFull
            | std::io::ErrorKind::OutOfMemory
            | std::io::ErrorKind::ReadOnlyFilesystem
            | std::io::ErrorKind::QuotaExceeded
    )
}

impl fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExitStatus::Success => f.write_str("success"),
            ExitStatus::BadInput => f.write_str("bad input"),
            ExitStatus::Diverged => f.write_str("training diverged"),
            ExitStatus::Failed => f.write_str("failed"),
            ExitStatus::Damaged => f.write_str("damaged data"),
            ExitStatus::Stopped => f.write_str("stopped after saving a checkpoint (resumable)"),
            ExitStatus::Interrupted => f.write_str("interrupted"),
            ExitStatus::Other(code) => write!(f, "exit status {code}"),
        }
    }
}

impl From<ExitStatus> for std::process::ExitCode {
    fn from(status: ExitStatus) -> Self {
        std::process::ExitCode::from(status.code())
    }
}

#[cfg(test)]
mod tests {
    use super::{ExitStatus, status_for};

    #[derive(Debug, thiserror::Error)]
    #[error("writing the export")]
    struct Wrapped(#[source] std::io::Error);

    #[test]
    fn a_machine_failure_anywhere_in_the_chain_is_status_4() {
        let full = Wrapped(std::io::Error::from_raw_os_error(libc::ENOSPC));
        assert_eq!(status_for(&full, ExitStatus::BadInput), ExitStatus::Failed);
        let eio = std::io::Error::from_raw_os_error(libc::EIO);
        assert_eq!(status_for(&eio, ExitStatus::BadInput), ExitStatus::Failed);
        // A path the user named that is not there, or not theirs, is their input.
        let missing = Wrapped(std::io::Error::from_raw_os_error(libc::ENOENT));
        assert_eq!(
            status_for(&missing, ExitStatus::BadInput),
            ExitStatus::BadInput
        );
        let denied = std::io::Error::from_raw_os_error(libc::EACCES);
        assert_eq!(
            status_for(&denied, ExitStatus::BadInput),
            ExitStatus::BadInput
        );
    }

    #[test]
    fn the_documented_numbers() {
        // README, "Exit statuses".
        let table = [
            (ExitStatus::Success, 0),
            (ExitStatus::BadInput, 2),
            (ExitStatus::Diverged, 3),
            (ExitStatus::Failed, 4),
            (ExitStatus::Damaged, 5),
            (ExitStatus::Stopped, 75),
            (ExitStatus::Interrupted, 130),
        ];
        for (status, code) in table {
            assert_eq!(status.code(), code, "{status}");
            assert_eq!(ExitStatus::from_code(code), status);
        }
    }

    #[test]
    fn any_other_number_passes_through() {
        for code in [1u8, 6, 74, 101, 137, 255] {
            assert_eq!(ExitStatus::from_code(code), ExitStatus::Other(code));
            assert_eq!(ExitStatus::from_code(code).code(), code);
        }
        assert_eq!(ExitStatus::Other(137).to_string(), "exit status 137");
    }
}
