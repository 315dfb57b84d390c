//! `conelab tag`, `note` and `rename`: a run's labels changed where they live. A live run owns its
//! `run.json`, so the change goes to it over its control socket and it rewrites the file; a run
//! that is over is edited here, under its store's writer lock (so a resume cannot start midway).

use std::path::Path;
use std::time::{Duration, Instant};

use conelab_base::lockfile::host_name;
use conelab_client::link::LinkError;
use conelab_core::labels::{LabelEdit, RunLabels};
use conelab_core::run_dir::live::{self, Liveness};
use conelab_protocol::message::{ClientMessage, ServerMessage};
use conelab_store::labels::edit_record;
use conelab_store::{self as store, writer::lock_store};

use crate::RunError;

/// How long a live run has to answer.
const ANSWER_WITHIN: Duration = Duration::from_secs(10);

/// Applies `edit` to the run in `dir` (an empty edit changes nothing); the run's labels after it.
pub fn edit(dir: &Path, edit: &LabelEdit) -> Result<RunLabels, RunError> {
    let store_dir = store::store_dir(dir);
    if !dir.is_dir() {
        return Err(RunError::Usage(
            format!("{}: no such run directory", dir.display()).into(),
        ));
    }
    // Not a run at all: say so before anything else.
    let record = store::read_run_record(&store_dir)?;
    if edit.is_empty() {
        return Ok(record.labels);
    }
    let labels = change(dir, &store_dir, edit)?;
    // The index keeps the name and tags too (a failure there changes nothing the run holds).
    let _ = crate::index::register(dir, &labels);
    Ok(labels)
}

fn change(dir: &Path, store_dir: &Path, edit: &LabelEdit) -> Result<RunLabels, RunError> {
    match live::liveness(dir)? {
        Liveness::Live {
            record: Some(rec), ..
        } => {
            let here = host_name();
            if rec.host != here {
                return Err(RunError::Usage(
                    format!(
                        "{} is live on host {} (pid {}): change its labels there",
                        dir.display(),
                        rec.host,
                        rec.pid
                    )
                    .into(),
                ));
            }
            ask_the_run(&rec.socket, edit)
        }
        Liveness::Live {
            holder,
            record: None,
        } => Err(RunError::Usage(
            format!(
                "{} is starting ({holder}): try again in a moment",
                dir.display()
            )
            .into(),
        )),
        Liveness::Ended(_) | Liveness::EndedDamaged(_) | Liveness::Crashed => {
            let _lock = lock_store(store_dir)?;
            Ok(edit_record(store_dir, edit)?)
        }
    }
}

fn ask_the_run(socket: &Path, edit: &LabelEdit) -> Result<RunLabels, RunError> {
    let at_socket = || RunError::bad_input_at::<LinkError>(socket.display().to_string());
    let mut link = conelab_client::open::connect(socket)?.link;
    const ID: u64 = 1;
    link.send(ClientMessage::Labels {
        id: ID,
        edit: edit.clone(),
    })
    .map_err(at_socket())?;
    let start = Instant::now();
    loop {
        let left = ANSWER_WITHIN.saturating_sub(start.elapsed());
        match link.recv_timeout(left).map_err(at_socket())? {
            Some(ServerMessage::Labels { id: ID, labels }) => {
                let _ = link.send(ClientMessage::Bye);
                return Ok(labels);
            }
            Some(ServerMessage::Error {
                id: Some(ID) | None,
                message,
            }) => return Err(RunError::Usage(message.into())),
            Some(_) => {}
            // Not the user's input: the run is there and does not answer (exit 4).
            None => {
                return Err(RunError::internal_says(format!(
                    "{}: the run did not answer within 10 s",
                    socket.display()
                )));
            }
        }
    }
}
