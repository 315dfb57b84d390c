//! A viewer's end of a run: one interface ([`RunLink`]), three transports. [`SocketLink`] speaks
//! the protocol over the run's Unix socket (`conelab attach`, `conelab train` on a terminal);
//! the run crate's `LocalLink` connects to a hub in the same process (tests, benchmarks) with the
//! same messages, unserialised; [`StoredLink`] plays a run that is over from its folder (store
//! and newest checkpoint), read-only. Every pane of the workbench works the same on all three.
//!
//! A viewer reads a link in one of two ways: by asking (`try_recv`, `recv_timeout`: the
//! handshake, scripts) or, once it [`listen`](RunLink::listen)s, by being told: every message
//! is handed to its [`Deliver`] from a thread of the link's own, so the viewer's loop blocks on
//! its one channel and never polls the link. The queues are bounded end to end: a viewer that
//! falls behind blocks its link's thread, the socket fills, and the run sends it a fresh
//! history instead of queueing (the hub's rule for slow viewers).

use std::io::{BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, SyncSender, TryRecvError};
use std::time::{Duration, Instant};

use conelab_base::error::{Invalid, chain};
use conelab_protocol::message::{
    ClientMessage, CommandOutcome, MAX_SERVER_LINE, PROTOCOL_VERSION, RunHello, ServerMessage,
};
use conelab_protocol::requests::{Answers, answer};
use conelab_protocol::view::RunView;
use conelab_protocol::wire::{Line, encode, read_line_limited};

#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error("the run closed the connection")]
    Closed,
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Protocol(String),
    /// The run is there (its socket took the connection) but said nothing in time: stopped,
    /// hung, or swapped out — not the user's input (exit 4, not 2).
    #[error("the run did not answer within {0} s")]
    NoAnswer(u64),
    #[error("the link already hands its messages to a listener")]
    Listening,
}

/// Where a listening link hands what the run sends, in order; `false` once nobody listens
/// (the link's thread then ends). It may block: that is how a slow viewer slows its link.
pub type Deliver = Arc<dyn Fn(Result<ServerMessage, LinkError>) -> bool + Send + Sync>;

/// Messages a socket link reads ahead of its viewer at most.
pub const LINK_QUEUE: usize = 1_024;

/// A viewer's connection to a run.
pub trait RunLink: Send {
    fn send(&mut self, message: ClientMessage) -> Result<(), LinkError>;
    /// The next message, without waiting; `Err(Closed)` once the run is gone. Nothing once the
    /// link listens.
    fn try_recv(&mut self) -> Result<Option<ServerMessage>, LinkError>;
    /// From now on every message goes to `deliver` as it arrives, from a thread of the link's
    /// own; a link whose run goes delivers `Err(LinkError::Closed)` last. Once per link.
    fn listen(&mut self, deliver: Deliver) -> Result<(), LinkError>;
    /// The next message, waiting at most `timeout`.
    fn recv_timeout(&mut self, timeout: Duration) -> Result<Option<ServerMessage>, LinkError> {
        let start = Instant::now();
        loop {
            if let Some(m) = self.try_recv()? {
                return Ok(Some(m));
            }
            if start.elapsed() >= timeout {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// Says hello and waits (at most `timeout`) for the run's.
pub fn handshake(
    link: &mut dyn RunLink,
    client: &str,
    timeout: Duration,
) -> Result<RunHello, LinkError> {
    link.send(ClientMessage::Hello {
        protocol: PROTOCOL_VERSION,
        client: client.to_string(),
    })?;
    let start = Instant::now();
    loop {
        let left = timeout.saturating_sub(start.elapsed());
        match link.recv_timeout(left)? {
            Some(ServerMessage::Hello { protocol, run }) if protocol == PROTOCOL_VERSION => {
                return Ok(run);
            }
            Some(ServerMessage::Hello { protocol, .. }) => {
                return Err(LinkError::Protocol(format!(
                    "the run speaks protocol {protocol}, this conelab {PROTOCOL_VERSION}"
                )));
            }
            Some(ServerMessage::Error { message, .. }) => return Err(LinkError::Protocol(message)),
            Some(_) => {}
            None => return Err(LinkError::NoAnswer(timeout.as_secs())),
        }
    }
}

/// The protocol over the run's Unix socket. A reader thread parses the run's lines, so neither
/// drawing nor the keyboard waits on the socket.
pub struct SocketLink {
    stream: UnixStream,
    /// `None` once the link listens.
    incoming: Option<Receiver<Result<ServerMessage, Invalid>>>,
}

impl SocketLink {
    pub fn connect(path: &Path) -> Result<Self, LinkError> {
        let stream = UnixStream::connect(path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::PermissionDenied {
                LinkError::Protocol(format!(
                    "{}: permission denied: the run belongs to another user",
                    path.display()
                ))
            } else {
                LinkError::Protocol(format!("{}: {e}", path.display()))
            }
        })?;
        stream.set_write_timeout(Some(Duration::from_secs(5)))?;
        let reading = stream.try_clone()?;
        // Bounded: a viewer that does not keep up stops the reader, and the run's hub sees a
        // slow viewer (rather than this process growing).
        let (tx, rx) = mpsc::sync_channel(LINK_QUEUE);
        std::thread::Builder::new()
            .name("conelab-link".into())
            .spawn(move || read_lines(reading, tx))?;
        Ok(Self {
            stream,
            incoming: Some(rx),
        })
    }
}

/// A message as the socket's reader thread passes it on: one it could not read becomes an
/// error message shown to the user, not the end of the link.
fn read_item(item: Result<ServerMessage, Invalid>) -> ServerMessage {
    item.unwrap_or_else(|e| ServerMessage::Error {
        id: None,
        message: chain(&e),
    })
}

fn read_lines(stream: UnixStream, out: SyncSender<Result<ServerMessage, Invalid>>) {
    let mut reader = BufReader::new(stream);
    loop {
        let item = match read_line_limited(&mut reader, MAX_SERVER_LINE) {
            Ok(Line::Text(t)) if t.trim().is_empty() => continue,
            Ok(Line::Text(t)) => serde_json::from_str::<ServerMessage>(&t)
                .map_err(Invalid::because("unreadable message from the run")),
            Ok(Line::TooLong(n)) => {
                Err(format!("a {n}-byte message from the run was skipped").into())
            }
            Ok(Line::Eof) | Err(_) => return,
        };
        if out.send(item).is_err() {
            return;
        }
    }
}

impl RunLink for SocketLink {
    fn send(&mut self, message: ClientMessage) -> Result<(), LinkError> {
        let line = encode(&message).map_err(|e| LinkError::Protocol(e.to_string()))?;
        self.stream
            .write_all(line.as_bytes())
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset => {
                    LinkError::Closed
                }
                _ => LinkError::Io(e),
            })
    }

    fn try_recv(&mut self) -> Result<Option<ServerMessage>, LinkError> {
        let Some(incoming) = &self.incoming else {
            return Ok(None);
        };
        match incoming.try_recv() {
            Ok(item) => Ok(Some(read_item(item))),
            Err(TryRecvError::Empty) => Ok(None),
            Err(TryRecvError::Disconnected) => Err(LinkError::Closed),
        }
    }

    fn recv_timeout(&mut self, timeout: Duration) -> Result<Option<ServerMessage>, LinkError> {
        let Some(incoming) = &self.incoming else {
            return Ok(None);
        };
        match incoming.recv_timeout(timeout) {
            Ok(item) => Ok(Some(read_item(item))),
            Err(RecvTimeoutError::Timeout) => Ok(None),
            Err(RecvTimeoutError::Disconnected) => Err(LinkError::Closed),
        }
    }

    fn listen(&mut self, deliver: Deliver) -> Result<(), LinkError> {
        let incoming = self.incoming.take().ok_or(LinkError::Listening)?;
        forward(incoming, deliver, read_item, true)?;
        Ok(())
    }
}

/// Hands everything from `from` to `deliver` on a thread of its own, until either side is gone;
/// `closes`: the end of `from` is the end of the run (delivered as `Err(Closed)`).
pub fn forward<T: Send + 'static>(
    from: Receiver<T>,
    deliver: Deliver,
    convert: fn(T) -> ServerMessage,
    closes: bool,
) -> std::io::Result<()> {
    let end = deliver.clone();
    conelab_base::channel_relay::relay(
        "conelab-link-deliver",
        from,
        move |item| deliver(Ok(convert(item))),
        move || {
            if closes {
                end(Err(LinkError::Closed));
            }
        },
    )
}

impl Drop for SocketLink {
    fn drop(&mut self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }
}

/// The answers a link makes itself (hello, answers to requests), in order, for whoever reads the
/// link. Unbounded, but one per request the viewer sent.
pub struct Replies {
    tx: Sender<ServerMessage>,
    /// `None` once the link listens.
    rx: Option<Receiver<ServerMessage>>,
}

impl Replies {
    pub fn new() -> Self {
        let (tx, rx) = mpsc::channel();
        Self { tx, rx: Some(rx) }
    }

    pub fn push(&self, message: ServerMessage) {
        // The receiver lives as long as the link or its listener; a listener that is gone
        // wants nothing.
        let _ = self.tx.send(message);
    }

    pub fn pop(&self) -> Option<ServerMessage> {
        self.rx.as_ref().and_then(|rx| rx.try_recv().ok())
    }

    pub fn listen(&mut self, deliver: Deliver) -> Result<(), LinkError> {
        let rx = self.rx.take().ok_or(LinkError::Listening)?;
        forward(rx, deliver, |m| m, false)?;
        Ok(())
    }
}

impl Default for Replies {
    fn default() -> Self {
        Self::new()
    }
}

/// A run that is over, played from its folder: its history, its stored projections, W of its
/// newest checkpoint for neighbours. Commands are refused: the view is read-only.
pub struct StoredLink {
    hello: RunHello,
    view: RunView,
    answers: Arc<dyn Answers>,
    own: Replies,
    why: String,
}

impl StoredLink {
    /// `why` says why the run takes no commands (shown in the Controls pane).
    pub fn new(hello: RunHello, view: RunView, answers: Arc<dyn Answers>, why: String) -> Self {
        Self {
            hello,
            view,
            answers,
            own: Replies::new(),
            why,
        }
    }
}

impl RunLink for StoredLink {
    fn send(&mut self, message: ClientMessage) -> Result<(), LinkError> {
        match message {
            ClientMessage::Hello { .. } => self.own.push(ServerMessage::Hello {
                protocol: PROTOCOL_VERSION,
                run: self.hello.clone(),
            }),
            ClientMessage::Subscribe => self.own.push(ServerMessage::History {
                view: Box::new(self.view.clone()),
            }),
            ClientMessage::Command { id, .. } => self.own.push(ServerMessage::CommandResult {
                id,
                result: CommandOutcome::Rejected {
                    reason: self.why.clone(),
                },
            }),
            ClientMessage::Bye => {}
            request => {
                if let Some(r) = answer(self.answers.as_ref(), &request) {
                    self.own.push(r);
                }
            }
        }
        Ok(())
    }

    fn try_recv(&mut self) -> Result<Option<ServerMessage>, LinkError> {
        Ok(self.own.pop())
    }

    fn listen(&mut self, deliver: Deliver) -> Result<(), LinkError> {
        self.own.listen(deliver)
    }
}
