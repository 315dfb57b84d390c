//! The control protocol between a run and its viewers: one message enum each way, serde types
//! shared by both sides, JSON lines (one message per line) over the run's Unix socket.
//!
//! A session: the client sends [`ClientMessage::Hello`] with the protocol version; the run
//! answers [`ServerMessage::Hello`] (or an error, and closes, on another version). The client may
//! then [`ClientMessage::Subscribe`]: the run sends the history ([`ServerMessage::History`]) and
//! from then on every engine event; a viewer that falls behind gets [`ServerMessage::Gap`] and a
//! fresh history. Commands are the engine's own ([`Command`]); the reply to one is its
//! acknowledgement ([`ServerMessage::CommandResult`]), and every viewer sees the applied change
//! as an event. Requests that only the run can answer cheaply — the newest 2-D projection, the
//! neighbours of words in the newest snapshot, the vocabulary — are answered to the asker only.
//!
//! A client line longer than [`MAX_CLIENT_LINE`], malformed JSON, an unknown message or a wrong
//! version gets an [`ServerMessage::Error`]; the run goes on. Floats that may be NaN travel as
//! `null` (see `conelab_base::jsonfloat`).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::view::{RunStatus, RunView};
use conelab_core::events::{AppliedCommand, Command, Event, ProjectionFrame};
use conelab_core::labels::{LabelEdit, RunLabels};
use conelab_metrics::Neighbor;

/// The protocol's version; a client of another version is refused. 2: the AND data term (a loss
/// kind and a `squash` in loss changes) that a version-1 run could not take. 3: the
/// `eval-progress` event (an evaluation under way) that a version-2 viewer cannot read. 4: the
/// `reference` event (the corpus's KN-3 and unigram PPL per group). 5: the `system` event (the
/// run process's CPU and memory, the host's memory). 6: typed changes — an applied command's
/// `change` (the new lr and the step its schedule stopped, the objectives before and after) and
/// a resume's `config-changed` values, where 5 sent the log's words. 7: the
/// `worse-than-uniform` event (a model worse than a uniform guess), which a version-6 viewer
/// cannot read. 8: the `weights-broken` event and the diverged status's `weights_broken` (one
/// advice in header and events), which a version-7 viewer cannot read.
pub const PROTOCOL_VERSION: u32 = 8;
/// The longest line a client may send (commands and requests are small).
pub const MAX_CLIENT_LINE: usize = 1 << 20;
/// The longest line a client accepts from a run (a history or a projection of a big vocabulary).
pub const MAX_SERVER_LINE: usize = 1 << 30;

/// Client → run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case", deny_unknown_fields)]
pub enum ClientMessage {
    Hello {
        protocol: u32,
        /// Who is asking, for the run's log (`conelab attach`, a script).
        #[serde(default)]
        client: String,
    },
    /// The history, then every event.
    Subscribe,
    Command {
        id: u64,
        command: Command,
    },
    /// The 2-D projections of the snapshot at `step` (`None`: the newest).
    Projection {
        id: u64,
        #[serde(default)]
        step: Option<u64>,
    },
    /// The `k` nearest neighbours (cosine) of each word id in the newest snapshot.
    Neighbors {
        id: u64,
        words: Vec<u32>,
        k: usize,
    },
    /// The run's vocabulary (tokens and training counts, in id order).
    Vocabulary {
        id: u64,
    },
    /// Change the run's name, tags or notes (`conelab tag`, `note`, `rename`): the run rewrites
    /// its `run.json` and answers with the labels it now has.
    Labels {
        id: u64,
        edit: LabelEdit,
    },
    /// The client leaves (closing the socket does the same).
    Bye,
}

/// What a run says about itself in its hello.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunHello {
    pub run_id: String,
    pub dir: PathBuf,
    pub pid: u32,
    pub host: String,
    pub vocab_size: usize,
    /// Where the medium and the rare group start (rank fractions).
    pub group_bounds: [f64; 2],
    pub status: RunStatus,
    /// The run takes commands (false for a run that is over: its view is read-only).
    pub live: bool,
    /// Name, tags and notes when the viewer attached.
    #[serde(default)]
    pub labels: RunLabels,
}

/// One word's neighbours.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WordNeighbors {
    pub word: u32,
    pub neighbors: Vec<Neighbor>,
}

/// The outcome of a command.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "kebab-case")]
pub enum CommandOutcome {
    Applied { applied: AppliedCommand },
    Rejected { reason: String },
}

/// Run → client.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum ServerMessage {
    Hello {
        protocol: u32,
        run: RunHello,
    },
    History {
        view: Box<RunView>,
    },
    Event {
        event: Event,
    },
    /// `dropped` messages were not delivered (the viewer fell behind); a history follows.
    Gap {
        dropped: u64,
    },
    CommandResult {
        id: u64,
        result: CommandOutcome,
    },
    Projection {
        id: u64,
        frame: Option<ProjectionFrame>,
    },
    Neighbors {
        id: u64,
        /// The snapshot the neighbours come from.
        step: Option<u64>,
        results: Vec<WordNeighbors>,
    },
    Vocabulary {
        id: u64,
        tokens: Vec<String>,
        counts: Vec<u64>,
    },
    /// The labels after a `Labels` edit.
    Labels {
        id: u64,
        labels: RunLabels,
    },
    Error {
        #[serde(default)]
        id: Option<u64>,
        message: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::encode;

    #[test]
    fn messages_round_trip_and_strangers_are_errors() {
        let m = ClientMessage::Command {
            id: 7,
            command: Command::SetLr { lr: 0.5 },
        };
        let line = encode(&m).expect("encode");
        assert!(line.ends_with('\n'));
        let back: ClientMessage = serde_json::from_str(line.trim()).expect("decode");
        assert_eq!(back, m);
        let hello: ClientMessage =
            serde_json::from_str(r#"{"type":"hello","protocol":1}"#).expect("hello");
        assert_eq!(
            hello,
            ClientMessage::Hello {
                protocol: 1,
                client: String::new()
            }
        );
        assert!(serde_json::from_str::<ClientMessage>(r#"{"type":"launch-missiles"}"#).is_err());
        assert!(serde_json::from_str::<ClientMessage>("{not json").is_err());
    }

    #[test]
    fn an_event_with_nan_travels_as_null_and_comes_back_nan() {
        let m = ServerMessage::Event {
            event: Event::Diverged {
                step: 9,
                loss: f64::NAN,
            },
        };
        let line = encode(&m).expect("encode");
        assert!(line.contains("null"), "{line}");
        match serde_json::from_str::<ServerMessage>(line.trim()).expect("decode") {
            ServerMessage::Event {
                event: Event::Diverged { step: 9, loss },
            } => assert!(loss.is_nan()),
            other => panic!("{other:?}"),
        }
    }
}
