//! The exit status a failed command ends with, read from its error's chain (README, "Exit
//! statuses"): damaged data (5) wherever a checksum or a decoder found it, the machine's failure
//! (4) wherever the OS refused, a run's own reading of its error, else bad input (2).

use std::error::Error;

use conelab_base::exit::{ExitStatus, status_for};
use conelab_base::integrity::IntegrityError;
use conelab_catalog::RunError;
use conelab_client::open::OpenError;
use conelab_core::run_dir::CheckpointError;
use conelab_core::run_dir::live::LiveError;
use conelab_store::StoreError;

/// The status `error` ends the process with.
pub fn of(error: &anyhow::Error) -> ExitStatus {
    let root: &(dyn Error + 'static) = error.as_ref();
    let no_answer = |e: &(dyn Error + 'static)| {
        matches!(
            e.downcast_ref::<conelab_client::link::LinkError>(),
            Some(conelab_client::link::LinkError::NoAnswer(_))
        )
    };
    let given = if chain(root).any(is_damage) {
        ExitStatus::Damaged
    } else if chain(root).any(no_answer) {
        // A run that is there and does not answer: not the input's fault (exit 4).
        ExitStatus::Failed
    } else {
        error
            .downcast_ref::<RunError>()
            .map_or(ExitStatus::BadInput, RunError::exit_status)
    };
    status_for(root, given)
}

fn chain<'a>(e: &'a (dyn Error + 'static)) -> impl Iterator<Item = &'a (dyn Error + 'static)> {
    std::iter::successors(Some(e), |&e| e.source())
}

/// Whether `e` itself is damage found in a file. Errors that wrap another transparently hide it
/// from the chain (their `source` is the inner error's source), so they are opened here.
fn is_damage(e: &(dyn Error + 'static)) -> bool {
    let boxed = |b: &(dyn Error + Send + Sync + 'static)| chain(b).any(is_damage);
    if let Some(e) = e.downcast_ref::<IntegrityError>() {
        return matches!(e, IntegrityError::Damaged { .. });
    }
    if let Some(e) = e.downcast_ref::<CheckpointError>() {
        return match e {
            CheckpointError::Corrupt { .. } => true,
            CheckpointError::Engine(inner) => boxed(inner.as_ref()),
            _ => false,
        };
    }
    if let Some(e) = e.downcast_ref::<StoreError>() {
        return match e {
            StoreError::Corrupt { .. } => true,
            StoreError::BadInput(inner) => boxed(inner.as_ref()),
            _ => false,
        };
    }
    if let Some(e) = e.downcast_ref::<LiveError>() {
        return matches!(e, LiveError::Corrupt { .. });
    }
    if let Some(e) = e.downcast_ref::<OpenError>() {
        return match e {
            OpenError::Checkpoint(inner) => is_damage(inner),
            OpenError::Live(inner) => is_damage(inner),
            OpenError::Archive(inner) | OpenError::BadInput(inner) => boxed(inner.as_ref()),
            OpenError::Usage(_) => false,
        };
    }
    if let Some(e) = e.downcast_ref::<RunError>() {
        return match e {
            RunError::Damaged(_) => true,
            RunError::Checkpoint(inner) => is_damage(inner),
            RunError::Live(inner) => is_damage(inner),
            RunError::Store(inner) => is_damage(inner),
            RunError::Open(inner) => is_damage(inner),
            RunError::BadInput(inner) => boxed(inner.as_ref()),
            _ => false,
        };
    }
    false
}

#[cfg(test)]
mod tests {
    use super::of;
    use conelab_base::exit::ExitStatus;
    use std::path::PathBuf;

    fn corrupt() -> conelab_store::StoreError {
        conelab_store::StoreError::Corrupt {
            path: PathBuf::from("store/run.json"),
            reason: "a flipped byte".into(),
        }
    }

    /// Damage is 5 however deep and however wrapped: bare, under context, inside a run's
    /// error (transparent, so not in the chain as itself), boxed as a viewer's archive error.
    #[test]
    fn damage_is_status_5_through_every_wrapper() {
        assert_eq!(of(&anyhow::Error::new(corrupt())), ExitStatus::Damaged);
        let context = anyhow::Error::new(corrupt()).context("exporting");
        assert_eq!(of(&context), ExitStatus::Damaged);
        let run = conelab_catalog::RunError::Store(corrupt());
        assert_eq!(of(&anyhow::Error::new(run)), ExitStatus::Damaged);
        let open = conelab_client::open::OpenError::Archive(Box::new(corrupt()));
        let run = conelab_catalog::RunError::Open(open);
        assert_eq!(of(&anyhow::Error::new(run)), ExitStatus::Damaged);
        // Not damage: a missing store is the user's input; a full disk the machine's.
        let missing = conelab_store::StoreError::NoStore(PathBuf::from("r"));
        assert_eq!(of(&anyhow::Error::new(missing)), ExitStatus::BadInput);
        let full = conelab_store::StoreError::Io {
            path: PathBuf::from("r"),
            source: std::io::Error::from_raw_os_error(libc::ENOSPC),
        };
        assert_eq!(of(&anyhow::Error::new(full)), ExitStatus::Failed);
    }
}
