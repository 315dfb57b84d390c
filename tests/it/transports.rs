//! One client interface, three transports: a viewer in the run's process (`LocalLink`), one
//! through the run's real socket server (`SocketLink`), and a finished run's folder
//! (`StoredLink`) end in the same workbench state. A command from a socket viewer comes back to it
//! as its acknowledgement and to every viewer as an event.

use std::io::Write;
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use conelab_client::link::{LINK_QUEUE, LinkError, RunLink, SocketLink, handshake};
use conelab_core::events::{
    AppliedCommand, Command, CommandSender, DivergencePolicy, EmbeddingStats, Envelope, Event,
    FinishReason, ProjectionFrame, RunStarted, SecondTierStats, StepStats,
};
use conelab_core::objective::{ObjectiveChange, Objectives, Term};
use conelab_core::run_fault::Fault;
use conelab_metrics::embedding::SetStats;
use conelab_protocol::message::{
    ClientMessage, CommandOutcome, RunHello, ServerMessage, WordNeighbors,
};
use conelab_protocol::requests::{AnswerError, Answers};
use conelab_protocol::view::{RunStatus, RunView, Vocabulary};
use conelab_protocol::wire::encode;
use conelab_run::hub::{Hub, HubInput};
use conelab_run::local_link::LocalLink;
use conelab_run::server::{self, Server};
use conelab_tui::app::{App, ViewOptions};

struct Fixed;

impl Answers for Fixed {
    fn projection(&self, step: Option<u64>) -> Result<Option<ProjectionFrame>, AnswerError> {
        Ok(Some(ProjectionFrame {
            step: step.unwrap_or(99),
            uncentred: None,
            centred: None,
            spectrum: Vec::new(),
        }))
    }
    fn neighbors(
        &self,
        words: &[u32],
        _k: usize,
    ) -> Result<(Option<u64>, Vec<WordNeighbors>), AnswerError> {
        Ok((
            Some(1),
            words
                .iter()
                .map(|&w| WordNeighbors {
                    word: w,
                    neighbors: Vec::new(),
                })
                .collect(),
        ))
    }
    fn vocabulary(&self) -> Arc<Vocabulary> {
        Arc::new(Vocabulary {
            tokens: vec!["a".into(), "b".into()],
            counts: vec![2, 1],
        })
    }
}

fn set(x: f64) -> SetStats {
    SetStats {
        rows: 3,
        i1: x,
        i2: 1.0 - x,
        mean_norm: 2.0,
        sv_norm: vec![1.0, 0.5],
        sv_max: 3.0,
        effective_rank: 1.5,
        mean_cos: x / 2.0,
        mean_cos_to_mean: x / 3.0,
        i1_unit: x / 4.0,
        i2_unit: x / 5.0,
        isoscore: x / 6.0,
        isoscore_random: x / 7.0,
        abtt_top_variance: x / 8.0,
        abtt_mean_cos: x / 9.0,
        rogue_share: x / 10.0,
    }
}

fn step(s: u64) -> Event {
    Event::Step(StepStats {
        step: s,
        epoch: s as f64 / 100.0,
        loss: 5.0 - s as f64 / 100.0,
        penalty: 0.0,
        lr: 1e-3,
        grad_norm: 0.5,
        tokens_per_sec: 1000.0,
        step_ms: 10.0,
        rare_tokens: None,
        rare_g1: None,
        rare_in_group: None,
    })
}

fn hello() -> RunHello {
    RunHello {
        run_id: "t".into(),
        dir: "t".into(),
        pid: 1,
        host: "h".into(),
        vocab_size: 2,
        group_bounds: [0.3, 0.8],
        status: RunStatus::Running,
        live: true,
        labels: Default::default(),
    }
}

/// Folds a link's messages into an app until `done` holds (10 s at most).
fn follow(link: &mut dyn RunLink, app: &mut App, done: impl Fn(&App) -> bool) {
    let start = Instant::now();
    while !done(app) {
        assert!(start.elapsed() < Duration::from_secs(10), "{:?}", app.run);
        if let Some(m) = link.recv_timeout(Duration::from_millis(20)).expect("link") {
            app.on_message(m);
        }
    }
}

#[test]
fn the_socket_and_the_in_process_viewer_see_the_same_run() {
    let (engine_tx, engine_rx) = mpsc::channel::<Envelope>();
    let (report_tx, reports) = mpsc::channel();
    let hub = Hub::new(
        RunView::new(Objectives::default()),
        CommandSender::from_channel(engine_tx),
        DivergencePolicy::default(),
        report_tx,
    );
    let stats = hub.stats();
    let (hub_tx, hub_rx) = mpsc::channel();
    let thread = hub.spawn(hub_rx, Fault::default()).expect("hub");
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = tmp.path().join("control.sock");
    let listener = server::bind(&path).expect("bind");
    let _server = Server::start(
        listener,
        path.clone(),
        hub_tx.clone(),
        Arc::new(Fixed),
        hello(),
    )
    .expect("server");

    // History before anyone attaches.
    let send = |e: Event| hub_tx.send(HubInput::Event(e)).expect("hub");
    send(Event::Started(Box::new(RunStarted {
        step: 0,
        total_steps: 100,
        windows_per_epoch: 10,
        parameters: 42,
        device: "cpu".into(),
        run_dir: Some("runs/t".into()),
        objective: "MLE".into(),
        objectives: Default::default(),
    })));
    for s in 1..=20 {
        send(step(s));
    }
    let mut local: Box<dyn RunLink> = Box::new(LocalLink::new(
        hub_tx.clone(),
        u64::MAX,
        Arc::new(Fixed),
        hello(),
    ));
    let mut socket: Box<dyn RunLink> = Box::new(SocketLink::connect(&path).expect("connect"));
    let mut apps = Vec::new();
    for link in [&mut local, &mut socket] {
        let h = handshake(link.as_mut(), "test", Duration::from_secs(5)).expect("hello");
        assert_eq!(h, hello());
        link.send(ClientMessage::Subscribe).expect("subscribe");
        let mut app = App::new(Objectives::default(), ViewOptions::default());
        follow(link.as_mut(), &mut app, |a| a.run.step() == 20);
        apps.push(app);
    }
    wait(|| stats.viewers() == 2);
    // From here on the links hand their messages over (as to the workbench's loop) instead of
    // being asked.
    let mut inboxes = Vec::new();
    for link in [&mut local, &mut socket] {
        let (tx, rx) = mpsc::sync_channel(16);
        link.listen(Arc::new(move |m| tx.send(m).is_ok()))
            .expect("listen");
        assert!(
            link.listen(Arc::new(|_| true)).is_err(),
            "a link has one listener"
        );
        assert!(
            matches!(link.try_recv(), Ok(None)),
            "nothing is left to ask for"
        );
        inboxes.push(rx);
    }
    // Live: more steps, an embedding analysis, a command from the socket viewer.
    for s in 21..=40 {
        send(step(s));
    }
    send(Event::Embedding(Box::new(EmbeddingStats {
        step: 40,
        total: set(0.5),
        groups: [set(0.6), set(0.4), set(0.2)],
        rare_frequent_cos: 0.7,
        seconds: 0.1,
        spectral: None,
        // A NaN (a group too small for TwoNN) crosses the socket as well.
        second_tier: Some(SecondTierStats {
            same_group: vec![0.5, 0.25, 0.125],
            two_nn: vec![12.5, 20.0, f64::NAN],
            two_nn_duplicates: vec![0, 1, 2],
            stolen_at_most: vec![3, 4, 5],
            seconds: 1.5,
        }),
    })));
    let command = Command::Objective {
        change: ObjectiveChange::Enable {
            term: Term::Cos,
            on: true,
        },
    };
    socket
        .send(ClientMessage::Command {
            id: 5,
            command: command.clone(),
        })
        .expect("command");
    // The engine's part: take the command with its ticket, acknowledge it.
    let envelope = engine_rx
        .recv_timeout(Duration::from_secs(5))
        .expect("the command reaches the engine");
    assert_eq!(envelope.command, command);
    send(Event::Applied(AppliedCommand {
        step: 41,
        change: conelab_core::change::Change::from_words(&command, "MLE", "CosReg γ=1", false),
        command,
        ticket: envelope.ticket,
        coalesced: false,
    }));
    send(Event::Finished {
        step: 40,
        reason: FinishReason::Stopped,
    });
    let mut result = None;
    for (i, inbox) in inboxes.iter().enumerate() {
        let app = &mut apps[i];
        let start = Instant::now();
        while !matches!(app.run.status, RunStatus::Finished { .. }) {
            assert!(start.elapsed() < Duration::from_secs(10));
            if let Ok(m) = inbox.recv_timeout(Duration::from_millis(20)) {
                let m = m.expect("the run is still there");
                if let ServerMessage::CommandResult { id, result: r } = &m {
                    result = Some((*id, r.clone()));
                }
                app.on_message(m);
            }
        }
    }
    let (id, outcome) = result.expect("the socket viewer got its acknowledgement");
    assert_eq!(id, 5);
    assert!(matches!(outcome, CommandOutcome::Applied { applied } if applied.step == 41));
    // Both views are the same, and the hub's (as its reporter saw every event).
    let json = |a: &App| serde_json::to_value(&a.run).expect("json");
    // The same up to the last bit of a float: JSON text is parsed back to within one ulp.
    same(&json(&apps[0]), &json(&apps[1]), "view");
    assert!(apps[1].run.objectives.cos.enabled, "the change is mirrored");
    assert_eq!(apps[1].run.interventions, vec![41]);
    assert_eq!(apps[1].run.loss.len(), 40);
    assert_eq!(reports.try_iter().count(), 1 + 40 + 1 + 1 + 1);
    // The embedding event made both ask for its projection; the requests are the same.
    let req = |a: &mut App| format!("{:?}", a.take_requests());
    let (r0, r1) = (req(&mut apps[0]), req(&mut apps[1]));
    assert_eq!(r0, r1);
    assert!(r0.contains("Projection(Some(40))"), "{r0}");
    drop(thread);
}

/// A run's end of a socket, for a link to connect to.
fn fake_run() -> (tempfile::TempDir, SocketLink, UnixStream) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = tmp.path().join("control.sock");
    let listener = UnixListener::bind(&path).expect("bind");
    let link = SocketLink::connect(&path).expect("connect");
    let (run, _) = listener.accept().expect("accept");
    (tmp, link, run)
}

#[test]
fn a_listening_socket_link_hands_over_in_order_and_says_when_the_run_goes() {
    let (_tmp, mut link, mut run) = fake_run();
    let (tx, rx) = mpsc::channel();
    let tx = std::sync::Mutex::new(tx);
    link.listen(Arc::new(move |m| tx.lock().expect("lock").send(m).is_ok()))
        .expect("listen");
    for id in 1..=3 {
        let line = encode(&ServerMessage::Error {
            id: Some(id),
            message: "m".into(),
        })
        .expect("encode");
        run.write_all(line.as_bytes()).expect("write");
    }
    // A line that is not a message is said, and the link goes on.
    run.write_all(b"{not json\n").expect("write");
    drop(run);
    let got: Vec<_> = rx.iter().take(5).collect();
    let ids: Vec<_> = got[..3]
        .iter()
        .map(|m| match m {
            Ok(ServerMessage::Error { id, .. }) => *id,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(ids, vec![Some(1), Some(2), Some(3)]);
    assert!(
        matches!(&got[3], Ok(ServerMessage::Error { id: None, message }) if message.contains("unreadable")),
        "{:?}",
        got[3]
    );
    assert!(matches!(got[4], Err(LinkError::Closed)), "{:?}", got[4]);
}

#[test]
fn a_listener_that_falls_behind_backs_the_socket_up_instead_of_growing() {
    let (_tmp, mut link, mut run) = fake_run();
    // The listener takes one message and then does not return until released.
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let release_rx = std::sync::Mutex::new(release_rx);
    link.listen(Arc::new(move |_| {
        release_rx.lock().expect("lock").recv().is_ok()
    }))
    .expect("listen");
    // The run writes 1 KiB messages as fast as the socket takes them: 20 MiB in all.
    let line = encode(&ServerMessage::Error {
        id: None,
        message: "x".repeat(1_000),
    })
    .expect("encode");
    let written = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = written.clone();
    let writer = std::thread::spawn(move || {
        for _ in 0..20_000 {
            if run.write_all(line.as_bytes()).is_err() {
                return;
            }
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    });
    // Wait until the writer stops getting anywhere (or has written everything).
    let mut last = usize::MAX;
    let start = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(300));
        let now = written.load(std::sync::atomic::Ordering::SeqCst);
        if now == last || now == 20_000 || start.elapsed() > Duration::from_secs(20) {
            break;
        }
        last = now;
    }
    let taken = written.load(std::sync::atomic::Ordering::SeqCst);
    // What the viewer's process holds: the link's queue, the one in the listener's hands and
    // what the socket buffers (a few hundred KiB on Linux) — not the 20 000 sent.
    assert!(
        taken < LINK_QUEUE + 2 + 2_000,
        "{taken} messages left the run although the listener took one"
    );
    // Closing the link ends the writer (broken pipe) and the link's threads.
    drop(release_tx);
    drop(link);
    writer.join().expect("writer");
}

fn wait(ok: impl Fn() -> bool) {
    let start = Instant::now();
    while !ok() {
        assert!(start.elapsed() < Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Equal JSON trees, numbers equal to 1e-15 relative.
fn same(a: &serde_json::Value, b: &serde_json::Value, at: &str) {
    use serde_json::Value;
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            let (x, y) = (x.as_f64().expect("f64"), y.as_f64().expect("f64"));
            assert!(
                (x - y).abs() <= 1e-15 * x.abs().max(y.abs()),
                "{at}: {x} vs {y}"
            );
        }
        (Value::Array(x), Value::Array(y)) => {
            assert_eq!(x.len(), y.len(), "{at}: lengths");
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                same(p, q, &format!("{at}[{i}]"));
            }
        }
        (Value::Object(x), Value::Object(y)) => {
            assert_eq!(
                x.keys().collect::<Vec<_>>(),
                y.keys().collect::<Vec<_>>(),
                "{at}: keys"
            );
            for (k, v) in x {
                same(v, &y[k], &format!("{at}.{k}"));
            }
        }
        _ => assert_eq!(a, b, "{at}"),
    }
}

/// A hub and the socket server on it, with nothing happening: (folder, socket path, the hub's
/// sender kept alive).
fn quiet_server() -> (
    tempfile::TempDir,
    std::path::PathBuf,
    mpsc::Sender<HubInput>,
) {
    let (engine_tx, _engine_rx) = mpsc::channel::<Envelope>();
    let (report_tx, _reports) = mpsc::channel();
    let hub = Hub::new(
        RunView::new(Objectives::default()),
        CommandSender::from_channel(engine_tx),
        DivergencePolicy::default(),
        report_tx,
    );
    let (hub_tx, hub_rx) = mpsc::channel();
    hub.spawn(hub_rx, Fault::default()).expect("hub");
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = tmp.path().join("control.sock");
    let listener = server::bind(&path).expect("bind");
    let server = Server::start(
        listener,
        path.clone(),
        hub_tx.clone(),
        Arc::new(Fixed),
        hello(),
    )
    .expect("server");
    std::mem::forget(server);
    (tmp, path, hub_tx)
}

/// A raw connection that said hello and got the run's.
fn greeted(path: &std::path::Path) -> std::io::BufReader<UnixStream> {
    use std::io::BufRead;
    let mut s = UnixStream::connect(path).expect("connect");
    let hi = serde_json::to_string(&ClientMessage::Hello {
        protocol: conelab_protocol::message::PROTOCOL_VERSION,
        client: "idle test".into(),
    })
    .expect("json");
    s.write_all(format!("{hi}\n").as_bytes()).expect("hello");
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let mut r = std::io::BufReader::new(s);
    let mut line = String::new();
    r.read_line(&mut line).expect("the run's hello");
    assert!(line.contains("\"hello\""), "{line}");
    r
}

/// Whether the server closed the connection (end of stream) within `within`.
fn closed(r: &mut std::io::BufReader<UnixStream>, within: Duration) -> bool {
    use std::io::BufRead;
    r.get_mut().set_read_timeout(Some(within)).expect("timeout");
    let mut line = String::new();
    match r.read_line(&mut line) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => !matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
    }
}

/// A connection that says hello and then neither subscribes nor commands is closed after
/// `IDLE_TIMEOUT`; one that subscribed stays. And a full house of idle connections never locks
/// a viewer out: the oldest idle one makes room at once.
#[test]
fn idle_connections_are_closed_and_never_lock_a_viewer_out() {
    let (_tmp, path, _hub) = quiet_server();
    let start = Instant::now();
    let mut idle = greeted(&path);
    let mut watching = greeted(&path);
    let sub = serde_json::to_string(&ClientMessage::Subscribe).expect("json");
    watching
        .get_mut()
        .write_all(format!("{sub}\n").as_bytes())
        .expect("subscribe");
    assert!(
        closed(&mut idle, Duration::from_secs(20)),
        "the idle connection is closed"
    );
    let after = start.elapsed();
    assert!(
        after >= server::IDLE_TIMEOUT - Duration::from_millis(500)
            && after < server::IDLE_TIMEOUT + Duration::from_secs(5),
        "closed after {after:?}"
    );
    // The subscriber got its history and is still served.
    watching
        .get_mut()
        .set_read_timeout(Some(Duration::from_millis(300)))
        .expect("timeout");
    let mut line = String::new();
    use std::io::BufRead;
    watching.read_line(&mut line).expect("history");
    assert!(line.contains("\"history\""), "{line}");

    // Every other place taken by an idle connection (the subscriber holds one).
    let mut crowd: Vec<_> = (1..server::MAX_CONNECTIONS)
        .map(|_| greeted(&path))
        .collect();
    let newcomer = greeted(&path);
    assert!(
        closed(&mut crowd[0], Duration::from_secs(2)),
        "the oldest idle connection made room at once"
    );
    drop(newcomer);
    drop(crowd);
}

/// Answers that count the projections asked of them.
struct Counting(std::sync::atomic::AtomicUsize);

impl Answers for Counting {
    fn projection(&self, step: Option<u64>) -> Result<Option<ProjectionFrame>, AnswerError> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Fixed.projection(step)
    }
    fn neighbors(
        &self,
        words: &[u32],
        k: usize,
    ) -> Result<(Option<u64>, Vec<WordNeighbors>), AnswerError> {
        Fixed.neighbors(words, k)
    }
    fn vocabulary(&self) -> Arc<Vocabulary> {
        Fixed.vocabulary()
    }
}

/// A client that sends 300 requests in one write and hangs up: once the run cannot write to it
/// any more, the requests it left in the socket are not answered for nobody (before: each was
/// computed and encoded at the connection's pace, 59 threads at once under `bench chaos`).
#[test]
fn requests_left_behind_by_a_client_that_hung_up_are_not_answered() {
    use std::io::Write;
    let (hub_tx, _hub_rx) = std::sync::mpsc::channel::<HubInput>();
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = tmp.path().join("control.sock");
    let listener = server::bind(&path).expect("bind");
    let counting = Arc::new(Counting(std::sync::atomic::AtomicUsize::new(0)));
    let _server =
        Server::start(listener, path.clone(), hub_tx, counting.clone(), hello()).expect("server");
    let mut text = encode(&ClientMessage::Hello {
        protocol: conelab_protocol::message::PROTOCOL_VERSION,
        client: "test".into(),
    })
    .expect("hello");
    for id in 0..300 {
        text.push_str(&encode(&ClientMessage::Projection { id, step: None }).expect("request"));
    }
    let mut client = std::os::unix::net::UnixStream::connect(&path).expect("connect");
    client.write_all(text.as_bytes()).expect("write");
    drop(client);
    // At the connection's pace (50 requests a second after a burst of 50) the old reader
    // answered ~200 of them in these 3 s.
    std::thread::sleep(Duration::from_secs(3));
    let answered = counting.0.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        answered < 100,
        "{answered} of 300 answered for a closed socket"
    );
}

/// Issue #61: a thousand connections that said hello and nothing more, from one process, kept a
/// new viewer in the socket's backlog for ~20 s. Now that process is paced alone (the rest of its
/// flood refused at once), and a viewer of another process — `conelab bench hello-probe`, once a
/// second — is answered within 2 s throughout.
#[test]
fn a_flood_of_idle_connections_from_one_process_never_keeps_another_waiting() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let (_tmp, path, _hub) = quiet_server();
    let stop = Arc::new(AtomicBool::new(false));
    let opened = Arc::new(AtomicU64::new(0));
    let flood = {
        let (stop, opened, path) = (stop.clone(), opened.clone(), path.clone());
        std::thread::spawn(move || {
            let hi = format!(
                "{}\n",
                serde_json::to_string(&ClientMessage::Hello {
                    protocol: conelab_protocol::message::PROTOCOL_VERSION,
                    client: "flood".into(),
                })
                .expect("json")
            );
            let mut held: std::collections::VecDeque<UnixStream> = Default::default();
            while !stop.load(Ordering::SeqCst) {
                if let Ok(mut s) = UnixStream::connect(&path) {
                    let _ = s.write_all(hi.as_bytes());
                    opened.fetch_add(1, Ordering::SeqCst);
                    held.push_back(s);
                    if held.len() > 1_000 {
                        held.pop_front();
                    }
                }
            }
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    let out = crate::harness::conelab(&[
        "bench",
        "hello-probe",
        crate::harness::s(&path),
        "--seconds",
        "4",
    ]);
    stop.store(true, Ordering::SeqCst);
    flood.join().expect("flood");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let probe: serde_json::Value = serde_json::from_slice(&out.stdout).expect("probe json");
    let flooded = opened.load(Ordering::SeqCst);
    assert!(
        flooded > 1_000,
        "the flood opened only {flooded} connections"
    );
    assert_eq!(probe["unanswered"], 0, "{probe}");
    assert!(
        probe["answered"].as_u64().is_some_and(|n| n >= 3),
        "{probe}"
    );
    assert!(
        probe["worst_s"].as_f64().is_some_and(|w| w <= 2.0),
        "a viewer waited: {probe} (the flood opened {flooded})"
    );
}
