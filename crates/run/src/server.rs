//! The run's control server: a Unix socket in the run directory (mode 0600, and a peer of another
//! user is refused even where file modes are bypassed), one thread per connection reading
//! [`ClientMessage`]s and one writing that viewer's queue. Nothing a client does can stall or
//! crash the run: lines are read with a bound, malformed or unknown messages get an error reply
//! and a log line, a client that does not read is disconnected when a write times out (and its
//! queue is bounded in bytes meanwhile, `hub::LineQueue`), one that says hello and then nothing
//! that needs the connection is closed after `IDLE_TIMEOUT` (or at once when a new client needs
//! its place), and the hub never waits for any of them.

use std::io::{BufReader, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::Sender;
use std::thread::JoinHandle;
use std::time::Duration;

use conelab_protocol::message::{
    ClientMessage, MAX_CLIENT_LINE, PROTOCOL_VERSION, RunHello, ServerMessage,
};
use conelab_protocol::requests::{Answers, answer};
use conelab_protocol::wire::{Line, encode, read_line_bounded};

use crate::hub::{HubInput, LineQueue, Sink, VIEWER_QUEUE_BYTES};

/// The socket's name in the run directory.
pub const SOCKET_NAME: &str = "control.sock";
/// Longest socket path bound in place (the kernel's limit is 107 bytes plus the NUL).
pub const MAX_SOCKET_PATH: usize = 100;
/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 64;
/// A client must say hello within this time.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(30);
/// A client that said hello and then neither subscribed nor sent a command (a request only
/// renews it) for this long is disconnected; when the connections are all taken, the oldest
/// such idle one makes room for a new client at once.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(5);
/// A viewer that does not take what is written to it for this long is disconnected.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// Messages a connection may send per second (commands and requests; a burst of as many is
/// taken at once). A client that sends faster is read more slowly — its own writes wait — so no
/// client can grow the run's queues or keep its cores answering (`conelab bench chaos`).
pub const MESSAGES_PER_SECOND: f64 = 1_000.0;
/// What one request (projection, neighbours, vocabulary) counts for against
/// [`MESSAGES_PER_SECOND`]: at most 50 a second per connection.
pub const REQUEST_COST: f64 = 20.0;

/// Requests the run answers per second from all its connections together: each connection's own
/// pace bounds one client, this bounds many (60 clients flooding projections took the run from
/// 36 steps in 10 s to 3, and its memory from 0.6 to 2.2 GB). A few viewers ask a few a second.
pub const REQUESTS_PER_SECOND: f64 = 100.0;

/// New connections served per second per client process (after a burst of
/// [`ACCEPT_BURST`]): each
/// costs two threads and, subscribed, a copy of the history. A process that connects faster has
/// the extra connections closed at once with an error, while other processes' connections go
/// on being served: pacing every connection in one queue (as before) let a 1,000-connection
/// flood keep a new viewer waiting in the socket's backlog for 20 s.
pub const ACCEPTS_PER_SECOND: f64 = 20.0;

/// The connections one process may open at once before its pace applies: twice the run's
/// connections, so a tool opening many viewers at once (a test, a script filling every place)
/// is served, while a flood of thousands is not.
pub const ACCEPT_BURST: f64 = 2.0 * MAX_CONNECTIONS as f64;

/// Connections accepted per second from all clients together, served or refused: what a
/// connect loop can cost the run (an accept and a close are microseconds; a loop of 268,534
/// connections in 170 s once took 3× the run's CPU; refusing 2,000 a second still added 9-20 %
/// to a `tiny` step's CPU under `bench chaos --phased`). At this pace the socket's backlog
/// ([`BACKLOG`]) drains in well under the 2 s a new viewer may wait.
pub const ACCEPTS_PER_SECOND_ALL: f64 = 500.0;

/// Connections waiting in the socket to be accepted: at [`ACCEPTS_PER_SECOND_ALL`] a new client
/// behind a full backlog waits about 0.5 s (behind the system's 4,096, a flood kept one waiting
/// 2 s at 2,000 a second).
pub const BACKLOG: i32 = 256;

/// Commands the run takes per second from all its connections together, as requests are
/// paced ([`REQUESTS_PER_SECOND`]): 20 clients each sending `set-lr` as fast as they could got
/// 6,336 applied in 10 s and cut training from 27 to 9.8 steps/s. A person steers with a few a
/// second; a script changing the rate every step fits.
pub const COMMANDS_PER_SECOND: f64 = 30.0;

/// Client processes whose connection pace is remembered at once (the oldest forgotten first).
const PACED_PROCESSES: usize = 1_024;

/// Each client process's connection pace, by process id (a platform that cannot tell the peer's
/// process paces all of them as one).
struct ProcessPaces {
    paces: std::collections::HashMap<Option<u32>, Pace>,
}

impl ProcessPaces {
    fn new() -> Self {
        Self {
            paces: std::collections::HashMap::new(),
        }
    }

    /// Whether a new connection of `pid` may be served now (spending its token), never waiting.
    fn admit(&mut self, pid: Option<u32>) -> bool {
        if self.paces.len() >= PACED_PROCESSES && !self.paces.contains_key(&pid) {
            // Forget the processes with a full bucket (not connecting lately); all, if none.
            self.paces.retain(|_, p| p.available() < p.burst);
            if self.paces.len() >= PACED_PROCESSES {
                self.paces.clear();
            }
        }
        self.paces
            .entry(pid)
            .or_insert_with(|| Pace::with_burst(ACCEPTS_PER_SECOND, ACCEPT_BURST))
            .try_take(1.0)
    }
}

/// A token bucket: `rate` a second, at most `burst` (by default `rate`) saved up. Taking waits
/// for what is missing, so what is paced is simply served later (the client's own writes or
/// connects wait).
struct Pace {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: std::time::Instant,
}

impl Pace {
    fn new(rate: f64) -> Self {
        Self::with_burst(rate, rate)
    }

    fn with_burst(rate: f64, burst: f64) -> Self {
        Self {
            rate,
            burst,
            tokens: burst,
            last: std::time::Instant::now(),
        }
    }

    fn refill(&mut self) {
        let now = std::time::Instant::now();
        self.tokens =
            (self.tokens + now.duration_since(self.last).as_secs_f64() * self.rate).min(self.burst);
        self.last = now;
    }

    /// Waits until `cost` may be spent, then spends it.
    fn take(&mut self, cost: f64) {
        self.refill();
        if self.tokens < cost {
            std::thread::sleep(Duration::from_secs_f64((cost - self.tokens) / self.rate));
            self.refill();
        }
        self.tokens -= cost;
    }

    /// Spends `cost` if it may be spent now; never waits.
    fn try_take(&mut self, cost: f64) -> bool {
        self.refill();
        if self.tokens < cost {
            return false;
        }
        self.tokens -= cost;
        true
    }

    /// Tokens saved up now.
    fn available(&mut self) -> f64 {
        self.refill();
        self.tokens
    }
}

/// Lines of one kind the control server logs per minute at most; the rest are counted, and the
/// count said with the next line of that kind once the minute is over (a client flooding the
/// socket cannot flood the run's log: 76,250 "refused" lines in 20 s before this).
pub const LOG_LINES_PER_MINUTE: u32 = 20;

/// What the log does with one line of a kind ([`LogLimiter::admit`]).
#[derive(Debug, PartialEq)]
pub enum Admit {
    /// Log it; `Some(n)`: say first that `n` more like it were left out in the minute before.
    Line(Option<u64>),
    /// Leave it out (counted).
    Drop,
}

/// Per kind of line: how many were logged and left out in the current minute.
#[derive(Debug, Default)]
pub struct LogLimiter {
    kinds: std::collections::HashMap<&'static str, (std::time::Instant, u32, u64)>,
}

impl LogLimiter {
    pub fn admit(&mut self, kind: &'static str, now: std::time::Instant) -> Admit {
        let (start, logged, dropped) = self.kinds.entry(kind).or_insert((now, 0, 0));
        let mut left_out = None;
        if now.duration_since(*start) >= Duration::from_secs(60) {
            left_out = (*dropped > 0).then_some(*dropped);
            (*start, *logged, *dropped) = (now, 0, 0);
        }
        if *logged < LOG_LINES_PER_MINUTE {
            *logged += 1;
            Admit::Line(left_out)
        } else {
            *dropped += 1;
            Admit::Drop
        }
    }
}

static LOG_LIMITER: Mutex<Option<LogLimiter>> = Mutex::new(None);

/// A line of the run's log about its clients, of `kind`, rate-limited per kind.
fn log_as(kind: &'static str, line: &str) {
    let admit = {
        let mut guard = LOG_LIMITER.lock().unwrap_or_else(|e| e.into_inner());
        guard
            .get_or_insert_with(LogLimiter::default)
            .admit(kind, std::time::Instant::now())
    };
    if let Admit::Line(left_out) = admit {
        if let Some(n) = left_out {
            conelab_base::stderr::say(&format!(
                "conelab: control: … {n} more like the next in the last minute (not logged)"
            ));
        }
        conelab_base::stderr::say(&format!("conelab: control: {line}"));
    }
}

fn log(line: &str) {
    log_as("other", line);
}

/// Where the socket of the run in `run_dir` lives: `control.sock` in the run directory when its
/// path is short enough, else `$XDG_RUNTIME_DIR/conelab/<hash>.sock` (or a 0700 per-user folder
/// in the temp dir). The run directory records the choice (`live.json`).
pub fn socket_path(run_dir: &Path) -> std::io::Result<PathBuf> {
    let abs = std::fs::canonicalize(run_dir)?;
    let direct = abs.join(SOCKET_NAME);
    if direct.as_os_str().len() <= MAX_SOCKET_PATH {
        return Ok(direct);
    }
    let uid = conelab_base::platform::own_uid();
    let base = match std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from) {
        Some(d) if d.is_dir() => d.join("conelab"),
        _ => std::env::temp_dir().join(format!("conelab-{uid}")),
    };
    std::fs::create_dir_all(&base)?;
    let meta = std::fs::metadata(&base)?;
    if meta.uid() != uid {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!("{} belongs to another user", base.display()),
        ));
    }
    if meta.mode() & 0o077 != 0 {
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o700))?;
    }
    let name = format!(
        "{:016x}.sock",
        conelab_base::hash::fnv1a(abs.as_os_str().as_encoded_bytes())
    );
    let path = base.join(name);
    if path.as_os_str().len() > MAX_SOCKET_PATH + 7 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{}: too long for a Unix socket", path.display()),
        ));
    }
    Ok(path)
}

/// Binds the socket with mode 0600. A socket file already there is stale (the caller holds the
/// run's lock, so no process serves it) unless something answers on it.
pub fn bind(path: &Path) -> std::io::Result<UnixListener> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {
            if UnixStream::connect(path).is_ok() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::AddrInUse,
                    format!("{}: another process serves this socket", path.display()),
                ));
            }
            std::fs::remove_file(path)?;
        }
        Ok(_) => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!("{}: exists and is not a socket", path.display()),
            ));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    // The socket is created with the process's umask: no window in which another user could
    // connect. umask is process-wide; the run binds before it starts any thread that creates
    // files.
    let listener = conelab_base::platform::with_umask(0o177, || UnixListener::bind(path))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    conelab_base::platform::set_backlog(&listener, BACKLOG)?;
    Ok(listener)
}

/// The uid of the process at the other end of a Unix socket (`SO_PEERCRED`, or `getpeereid`
/// off Linux: `conelab_base::platform`).
pub fn peer_uid(stream: &UnixStream) -> std::io::Result<u32> {
    conelab_base::platform::peer_uid(stream)
}

/// The running server.
pub struct Server {
    path: PathBuf,
    _accept: JoinHandle<()>,
}

impl Server {
    /// Serves `listener` on a thread of its own.
    pub fn start(
        listener: UnixListener,
        path: PathBuf,
        hub: Sender<HubInput>,
        answers: Arc<dyn Answers>,
        hello: RunHello,
    ) -> std::io::Result<Self> {
        let accept = std::thread::Builder::new()
            .name("conelab-control".into())
            .spawn(move || accept_loop(listener, hub, answers, hello))?;
        Ok(Self {
            path,
            _accept: accept,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Removes the socket file (the accept thread ends with the process).
    pub fn close(self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A connection being served, as the accept loop sees it: for making room.
struct Open {
    id: u64,
    /// A handle on the socket, to shut it down.
    stream: UnixStream,
    /// It subscribed or sent a command: never evicted.
    active: Arc<std::sync::atomic::AtomicBool>,
}

/// The connections being served.
#[derive(Clone, Default)]
struct Connections(Arc<Mutex<Vec<Open>>>);

impl Connections {
    fn add(&self, open: Open) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(open);
    }

    fn remove(&self, id: u64) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|o| o.id != id);
    }

    /// Shuts the oldest idle connection down (its thread then ends) and forgets it, so the next
    /// eviction takes another one (evicting the same one again while its thread wound down let
    /// 200 idle clients hold 200 connections, `conelab bench chaos`); whether there was one.
    fn evict_oldest_idle(&self) -> Option<u64> {
        let mut list = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let at = list
            .iter()
            .enumerate()
            .filter(|(_, o)| !o.active.load(Ordering::SeqCst))
            .min_by_key(|(_, o)| o.id)
            .map(|(i, _)| i)?;
        let oldest = list.swap_remove(at);
        let _ = oldest.stream.shutdown(std::net::Shutdown::Both);
        Some(oldest.id)
    }
}

fn accept_loop(
    listener: UnixListener,
    hub: Sender<HubInput>,
    answers: Arc<dyn Answers>,
    hello: RunHello,
) {
    let next_id = Arc::new(AtomicU64::new(1));
    let open = Arc::new(AtomicUsize::new(0));
    let connections = Connections::default();
    let own_uid = conelab_base::platform::own_uid();
    let mut all = Pace::new(ACCEPTS_PER_SECOND_ALL);
    let mut processes = ProcessPaces::new();
    let requests = Arc::new(std::sync::Mutex::new(Pace::new(REQUESTS_PER_SECOND)));
    let commands = Arc::new(std::sync::Mutex::new(Pace::new(COMMANDS_PER_SECOND)));
    for stream in listener.incoming() {
        let Ok(mut stream) = stream else {
            // Out of file descriptors (EMFILE) and the like: not a reason to spin.
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        // A client gone before it was accepted costs nothing and is not paced: a burst of
        // connect-and-close once held every later client in the backlog for minutes.
        if conelab_base::platform::peer_hung_up(&stream) {
            continue;
        }
        all.take(1.0);
        use conelab_base::platform::{Refusal, admit_peer};
        match admit_peer(peer_uid(&stream), own_uid) {
            Ok(()) => {}
            Err(Refusal::OtherUser(uid)) => {
                log_as(
                    "refused",
                    &format!("refused a client of uid {uid} (the run belongs to uid {own_uid})"),
                );
                refuse(
                    &mut stream,
                    "permission denied: the run belongs to another user",
                );
                continue;
            }
            Err(Refusal::Unknown(e)) => {
                log_as(
                    "refused",
                    &format!("refused a client whose credentials are unknown: {e}"),
                );
                continue;
            }
        }
        // A process connecting faster than its pace: this connection is closed now, and the
        // next process's is served without waiting behind its flood.
        if !processes.admit(conelab_base::platform::peer_pid(&stream)) {
            log_as(
                "refused",
                "refused a client: its process connects faster than 20 a second (after a burst of 128)",
            );
            refuse(
                &mut stream,
                "too many connections from this process: at most 20 a second after a burst of 128",
            );
            continue;
        }
        if open.load(Ordering::SeqCst) >= MAX_CONNECTIONS {
            // Idle connections never lock a viewer out: the oldest makes room.
            match connections.evict_oldest_idle() {
                Some(old) => log_as(
                    "evicted",
                    &format!("viewer {old}: idle, closed to make room for a new client"),
                ),
                None => {
                    log_as("refused", "refused a client: too many connections");
                    refuse(&mut stream, "too many connections");
                    continue;
                }
            }
        }
        let id = next_id.fetch_add(1, Ordering::SeqCst);
        let active = Arc::new(std::sync::atomic::AtomicBool::new(false));
        if let Ok(handle) = stream.try_clone() {
            connections.add(Open {
                id,
                stream: handle,
                active: active.clone(),
            });
        }
        let (hub, answers, hello, open, connections) = (
            hub.clone(),
            answers.clone(),
            hello.clone(),
            open.clone(),
            connections.clone(),
        );
        let paces = SharedPaces {
            requests: requests.clone(),
            commands: commands.clone(),
        };
        open.fetch_add(1, Ordering::SeqCst);
        let spawned = std::thread::Builder::new()
            .name(format!("conelab-viewer-{id}"))
            .spawn(move || {
                serve_connection(id, stream, &hub, answers.as_ref(), &hello, &active, &paces);
                connections.remove(id);
                open.fetch_sub(1, Ordering::SeqCst);
            });
        if spawned.is_err() {
            log("refused a client: no thread for it");
        }
    }
}

/// The paces every connection shares: requests and commands, each a run-wide bucket.
struct SharedPaces {
    requests: Arc<Mutex<Pace>>,
    commands: Arc<Mutex<Pace>>,
}

/// The connection's reads, failing once `deadline` has passed: before hello, a client that
/// trickles a byte now and then would otherwise renew a per-read timeout for ever.
struct Deadlined<'a> {
    stream: &'a UnixStream,
    deadline: Option<std::time::Instant>,
}

impl std::io::Read for Deadlined<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let no_hello = || {
            std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no hello within {} s", HELLO_TIMEOUT.as_secs()),
            )
        };
        let Some(deadline) = self.deadline else {
            return std::io::Read::read(&mut &*self.stream, buf);
        };
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(no_hello());
        }
        self.stream.set_read_timeout(Some(left))?;
        // The socket's timeout ending the last read is the deadline passing too (Linux says
        // EAGAIN for it, not ETIMEDOUT): the same error either way.
        match std::io::Read::read(&mut &*self.stream, buf) {
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                Err(no_hello())
            }
            other => other,
        }
    }
}

fn refuse(stream: &mut UnixStream, message: &str) {
    let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
    if let Ok(line) = encode(&ServerMessage::Error {
        id: None,
        message: message.into(),
    }) {
        let _ = stream.write_all(line.as_bytes());
    }
    let _ = stream.shutdown(std::net::Shutdown::Both);
}

fn serve_connection(
    viewer: u64,
    stream: UnixStream,
    hub: &Sender<HubInput>,
    answers: &dyn Answers,
    hello: &RunHello,
    active: &std::sync::atomic::AtomicBool,
    shared: &SharedPaces,
) {
    let Ok(mut out) = stream.try_clone() else {
        return;
    };
    let _ = out.set_write_timeout(Some(WRITE_TIMEOUT));
    let (tx, rx) = LineQueue::new();
    // Set when nothing more can reach the client: the reader stops at once, however many
    // requests the client left in the socket before it went (each one's answer would be
    // computed for nobody: 59 threads encoding projections for closed sockets, bench chaos).
    let output_closed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let closed = output_closed.clone();
    let writer = std::thread::Builder::new()
        .name(format!("conelab-viewer-{viewer}-out"))
        .spawn(move || {
            for line in rx {
                if out.write_all(line.as_bytes()).is_err() {
                    // Gone, or not reading: disconnect (the reader sees the end).
                    closed.store(true, Ordering::SeqCst);
                    let _ = out.shutdown(std::net::Shutdown::Both);
                    break;
                }
            }
            closed.store(true, Ordering::SeqCst);
        });
    let Ok(writer) = writer else {
        return;
    };
    let reply = |message: ServerMessage| {
        if let Ok(line) = encode(&message)
            && tx.try_send(Arc::from(line)).is_err()
        {
            log_as(
                "reply dropped",
                &format!("viewer {viewer}: reply dropped (it does not read)"),
            );
        }
    };
    let mut reader = BufReader::new(Deadlined {
        stream: &stream,
        deadline: Some(std::time::Instant::now() + HELLO_TIMEOUT),
    });
    let mut greeted = false;
    let mut subscribed = false;
    let mut pace = Pace::new(MESSAGES_PER_SECOND);
    loop {
        if output_closed.load(Ordering::SeqCst) {
            break;
        }
        // A line over the limit ends the connection, so it is not read to its end.
        let line = match read_line_bounded(&mut reader, MAX_CLIENT_LINE) {
            Ok(Line::Text(t)) => t,
            Ok(Line::Eof) => break,
            Ok(Line::TooLong(n)) => {
                log_as(
                    "too long",
                    &format!(
                        "viewer {viewer}: a message past {n} bytes (limit {MAX_CLIENT_LINE}): disconnected"
                    ),
                );
                reply(ServerMessage::Error {
                    id: None,
                    message: format!(
                        "message past {n} bytes is longer than the limit of {MAX_CLIENT_LINE}: disconnecting"
                    ),
                });
                break;
            }
            Err(e) => {
                if !greeted {
                    log_as(
                        "no hello",
                        &format!("viewer {viewer}: no hello ({e}): disconnected"),
                    );
                } else if !active.load(Ordering::SeqCst) {
                    log_as(
                        "idle",
                        &format!(
                            "viewer {viewer}: idle {}s after hello (no subscription, no command): disconnected",
                            IDLE_TIMEOUT.as_secs()
                        ),
                    );
                }
                break;
            }
        };
        if line.trim().is_empty() {
            continue;
        }
        let message: ClientMessage = match serde_json::from_str(&line) {
            Ok(m) => m,
            Err(e) => {
                log_as(
                    "malformed",
                    &format!("viewer {viewer}: malformed or unknown message: {e}"),
                );
                reply(ServerMessage::Error {
                    id: None,
                    message: format!("malformed or unknown message: {e}"),
                });
                // Before hello it is not a viewer at all: no second chance.
                if !greeted {
                    break;
                }
                continue;
            }
        };
        if !greeted {
            match message {
                ClientMessage::Hello { protocol, client } if protocol == PROTOCOL_VERSION => {
                    greeted = true;
                    reader.get_mut().deadline = None;
                    // Until it subscribes or sends a command (`active`).
                    let _ = stream.set_read_timeout(Some(IDLE_TIMEOUT));
                    if !client.is_empty() {
                        log_as("attached", &format!("viewer {viewer}: {client} attached"));
                    }
                    reply(ServerMessage::Hello {
                        protocol: PROTOCOL_VERSION,
                        run: hello.clone(),
                    });
                    continue;
                }
                ClientMessage::Hello { protocol, .. } => {
                    log_as(
                        "protocol",
                        &format!("viewer {viewer}: protocol {protocol} refused"),
                    );
                    reply(ServerMessage::Error {
                        id: None,
                        message: format!(
                            "protocol version {protocol} is not supported (this run speaks {PROTOCOL_VERSION}): use the conelab that started the run"
                        ),
                    });
                    break;
                }
                _ => {
                    reply(ServerMessage::Error {
                        id: None,
                        message: "say hello first".into(),
                    });
                    break;
                }
            }
        }
        match message {
            ClientMessage::Hello { .. } => reply(ServerMessage::Error {
                id: None,
                message: "hello twice".into(),
            }),
            ClientMessage::Subscribe => {
                if !active.swap(true, Ordering::SeqCst) {
                    let _ = stream.set_read_timeout(None);
                }
                if !subscribed {
                    subscribed = true;
                    let _ = hub.send(HubInput::Subscribe {
                        viewer,
                        sink: Sink::Lines(tx.clone()),
                    });
                }
            }
            ClientMessage::Command { id, command } => {
                if !active.swap(true, Ordering::SeqCst) {
                    let _ = stream.set_read_timeout(None);
                }
                pace.take(1.0);
                // The run's share for all connections, as for requests.
                if let Ok(mut all) = shared.commands.lock() {
                    all.take(1.0);
                }
                let _ = hub.send(HubInput::Command {
                    viewer,
                    id,
                    command,
                    reply: Sink::Lines(tx.clone()),
                });
            }
            ClientMessage::Bye => break,
            request => {
                pace.take(REQUEST_COST);
                // The run's share for all connections: waiting here holds the lock, so the
                // others wait their turn behind it.
                if let Ok(mut all) = shared.requests.lock() {
                    all.take(1.0);
                }
                // A client that does not read would have its answer dropped: it is not
                // computed (a neighbours answer costs the run milliseconds of a core).
                if tx.queued_bytes() > VIEWER_QUEUE_BYTES / 2 {
                    log_as(
                        "reply dropped",
                        &format!(
                            "viewer {viewer}: request not answered (its earlier replies are unread)"
                        ),
                    );
                    continue;
                }
                if let Some(r) = answer(answers, &request) {
                    reply(r);
                }
            }
        }
    }
    if subscribed {
        let _ = hub.send(HubInput::Unsubscribe { viewer });
    }
    // The writer delivers what is queued (a last error reply) and ends once the hub has let go
    // of its end too; then the connection closes.
    drop(tx);
    let _ = writer.join();
    let _ = stream.shutdown(std::net::Shutdown::Both);
}

#[cfg(test)]
mod connection_tests {
    use super::*;
    use std::io::Write;

    /// Before hello the read deadline holds however the client trickles bytes (a per-read
    /// timeout was renewed by every byte); after it is lifted, reads wait as before.
    #[test]
    fn the_hello_deadline_is_a_deadline() {
        let (server, mut client) = UnixStream::pair().expect("pair");
        let trickle = std::thread::spawn(move || {
            for _ in 0..40 {
                if client.write_all(b" ").is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(25));
            }
        });
        let started = std::time::Instant::now();
        let mut reader = BufReader::new(Deadlined {
            stream: &server,
            deadline: Some(started + Duration::from_millis(300)),
        });
        let e = read_line_bounded(&mut reader, MAX_CLIENT_LINE).expect_err("timed out");
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut, "{e}");
        let took = started.elapsed();
        assert!(took < Duration::from_millis(900), "{took:?}");
        drop(reader);
        drop(server);
        trickle.join().expect("trickle");
    }

    /// A peer that connected and closed without a word is seen as gone (and skipped unpaced);
    /// one that is there, or sent something before closing, is not.
    #[test]
    fn a_peer_that_hung_up_is_told_apart() {
        let (a, b) = UnixStream::pair().expect("pair");
        let hung_up = |s: &UnixStream| conelab_base::platform::peer_hung_up(s);
        assert!(!hung_up(&a));
        drop(b);
        assert!(hung_up(&a));
        let (c, mut d) = UnixStream::pair().expect("pair");
        d.write_all(b"{").expect("write");
        drop(d);
        assert!(!hung_up(&c), "it has something to read");
        // The byte is still there to read.
        let mut byte = [0u8; 1];
        assert_eq!(std::io::Read::read(&mut &c, &mut byte).expect("read"), 1);
    }
}

#[cfg(test)]
mod log_tests {
    use super::*;
    use std::time::Instant;

    /// Each eviction closes another idle connection (never the same one twice) and never an
    /// active one; the evicted socket is shut down.
    #[test]
    fn evictions_close_distinct_idle_connections_oldest_first() {
        let c = Connections::default();
        let mut peers = Vec::new();
        for id in 1..=4u64 {
            let (ours, theirs) = UnixStream::pair().expect("pair");
            peers.push(theirs);
            c.add(Open {
                id,
                stream: ours,
                active: Arc::new(std::sync::atomic::AtomicBool::new(id == 2)),
            });
        }
        assert_eq!(c.evict_oldest_idle(), Some(1));
        assert_eq!(
            c.evict_oldest_idle(),
            Some(3),
            "not 1 again, never active 2"
        );
        assert_eq!(c.evict_oldest_idle(), Some(4));
        assert_eq!(c.evict_oldest_idle(), None, "only the active one is left");
        use std::io::Read;
        let mut buf = [0u8; 1];
        assert_eq!(
            peers[0].read(&mut buf).expect("eof"),
            0,
            "evicted: shut down"
        );
    }

    /// A burst of `rate` is taken at once; beyond it, `rate` a second.
    #[test]
    fn a_pace_takes_a_burst_then_its_rate() {
        let mut pace = Pace::new(200.0);
        let start = Instant::now();
        for _ in 0..200 {
            pace.take(1.0);
        }
        assert!(
            start.elapsed() < Duration::from_millis(100),
            "the burst waits"
        );
        let start = Instant::now();
        for _ in 0..100 {
            pace.take(1.0);
        }
        let took = start.elapsed().as_secs_f64();
        assert!((0.45..1.5).contains(&took), "100 at 200/s took {took} s");
    }

    /// Issue #61: one process's flood of connections is refused past its pace, never waited
    /// for — another process is admitted at once — and the processes remembered are bounded.
    #[test]
    fn a_process_is_paced_alone_and_never_waited_for() {
        let mut paces = ProcessPaces::new();
        let start = Instant::now();
        let admitted = (0..1_000).filter(|_| paces.admit(Some(7))).count();
        assert_eq!(
            admitted, ACCEPT_BURST as usize,
            "a burst of 128, then refused"
        );
        assert!(paces.admit(Some(8)), "another process is served");
        assert!(paces.admit(None), "and one of unknown process");
        assert!(
            start.elapsed() < Duration::from_millis(200),
            "refusing is not waiting: {:?}",
            start.elapsed()
        );
        std::thread::sleep(Duration::from_millis(120));
        assert!(paces.admit(Some(7)), "its pace refills");
        for pid in 0..(3 * PACED_PROCESSES as u32) {
            paces.admit(Some(1_000 + pid));
        }
        assert!(
            paces.paces.len() <= PACED_PROCESSES,
            "{}",
            paces.paces.len()
        );
    }

    /// Twenty lines of a kind a minute; the rest counted and said with the first line of the
    /// next minute; kinds apart.
    #[test]
    fn the_log_keeps_twenty_lines_of_a_kind_a_minute_and_counts_the_rest() {
        let mut l = LogLimiter::default();
        let t0 = Instant::now();
        let logged = (0..1_000)
            .filter(|i| l.admit("refused", t0 + Duration::from_millis(*i)) != Admit::Drop)
            .count();
        assert_eq!(logged, LOG_LINES_PER_MINUTE as usize);
        assert_eq!(
            l.admit("malformed", t0 + Duration::from_secs(1)),
            Admit::Line(None)
        );
        assert_eq!(
            l.admit("refused", t0 + Duration::from_secs(61)),
            Admit::Line(Some(1_000 - u64::from(LOG_LINES_PER_MINUTE)))
        );
        assert_eq!(
            l.admit("refused", t0 + Duration::from_secs(62)),
            Admit::Line(None)
        );
    }
}
