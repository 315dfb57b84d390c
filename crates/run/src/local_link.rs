//! A viewer in the run's own process (tests, benchmarks): the hub's messages, unserialised, with
//! the same [`RunLink`] interface a socket viewer has.

use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, Sender, SyncSender, TryRecvError};

use conelab_client::link::{Deliver, LinkError, Replies, RunLink, forward};
use conelab_protocol::message::{ClientMessage, PROTOCOL_VERSION, RunHello, ServerMessage};
use conelab_protocol::requests::{Answers, answer};

use crate::hub::{HubInput, Sink, VIEWER_QUEUE};

/// A viewer in the run's own process: the hub's messages, unserialised.
pub struct LocalLink {
    hub: Sender<HubInput>,
    viewer: u64,
    answers: Arc<dyn Answers>,
    hello: RunHello,
    /// Answers made here, in this process (hello, neighbours, the vocabulary).
    own: Replies,
    tx: SyncSender<ServerMessage>,
    /// The hub's messages; `None` once the link listens.
    incoming: Option<Receiver<ServerMessage>>,
    subscribed: bool,
}

impl LocalLink {
    /// `viewer` must differ from every other viewer of the hub (socket viewers count from 1; use
    /// numbers from `u64::MAX` down).
    pub fn new(
        hub: Sender<HubInput>,
        viewer: u64,
        answers: Arc<dyn Answers>,
        hello: RunHello,
    ) -> Self {
        let (tx, incoming) = mpsc::sync_channel(VIEWER_QUEUE);
        Self {
            hub,
            viewer,
            answers,
            hello,
            own: Replies::new(),
            tx,
            incoming: Some(incoming),
            subscribed: false,
        }
    }
}

impl RunLink for LocalLink {
    fn send(&mut self, message: ClientMessage) -> Result<(), LinkError> {
        let closed = |_| LinkError::Closed;
        match message {
            ClientMessage::Hello { .. } => self.own.push(ServerMessage::Hello {
                protocol: PROTOCOL_VERSION,
                run: self.hello.clone(),
            }),
            ClientMessage::Subscribe => {
                if !self.subscribed {
                    self.subscribed = true;
                    self.hub
                        .send(HubInput::Subscribe {
                            viewer: self.viewer,
                            sink: Sink::Messages(self.tx.clone()),
                        })
                        .map_err(closed)?;
                }
            }
            ClientMessage::Command { id, command } => self
                .hub
                .send(HubInput::Command {
                    viewer: self.viewer,
                    id,
                    command,
                    reply: Sink::Messages(self.tx.clone()),
                })
                .map_err(closed)?,
            ClientMessage::Bye => {
                let _ = self.hub.send(HubInput::Unsubscribe {
                    viewer: self.viewer,
                });
                self.subscribed = false;
            }
            request => {
                if let Some(r) = answer(self.answers.as_ref(), &request) {
                    self.own.push(r);
                }
            }
        }
        Ok(())
    }

    fn try_recv(&mut self) -> Result<Option<ServerMessage>, LinkError> {
        if let Some(m) = self.own.pop() {
            return Ok(Some(m));
        }
        let Some(incoming) = &self.incoming else {
            return Ok(None);
        };
        match incoming.try_recv() {
            Ok(m) => Ok(Some(m)),
            Err(TryRecvError::Empty) => Ok(None),
            Err(TryRecvError::Disconnected) => Err(LinkError::Closed),
        }
    }

    fn listen(&mut self, deliver: Deliver) -> Result<(), LinkError> {
        let incoming = self.incoming.take().ok_or(LinkError::Listening)?;
        self.own.listen(deliver.clone())?;
        forward(incoming, deliver, |m| m, true)?;
        Ok(())
    }
}

impl Drop for LocalLink {
    fn drop(&mut self) {
        if self.subscribed {
            let _ = self.hub.send(HubInput::Unsubscribe {
                viewer: self.viewer,
            });
        }
    }
}
