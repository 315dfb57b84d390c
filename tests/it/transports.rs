//! One client interface, three transports: a viewer in the run's process (`LocalLink`), one
//! through the run's real socket server (`SocketLink`), and a finished run's folder
//! (`StoredLink`) end in the same workbench state. A command from a socket viewer comes back to it
//! as its acknowledgement and to every viewer as an event.

use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use conelab::engine::{
    AppliedCommand, Command, CommandSender, DivergencePolicy, EmbeddingStats, Envelope, Event,
    Fault, FinishReason, ProjectionFrame, StepStats,
};
use conelab::metrics::embedding::SetStats;
use conelab::objective::{ObjectiveChange, Objectives, Term};
use conelab::run::answer::Answers;
use conelab::run::client::{LocalLink, RunLink, SocketLink, handshake};
use conelab::run::hub::{Hub, HubInput};
use conelab::run::protocol::{
    ClientMessage, CommandOutcome, RunHello, ServerMessage, WordNeighbors,
};
use conelab::run::server::{self, Server};
use conelab::run::view::{RunStatus, RunView, Vocabulary};
use conelab::tui::app::{App, ViewOptions};

struct Fixed;

impl Answers for Fixed {
    fn projection(&self, step: Option<u64>) -> Result<Option<ProjectionFrame>, String> {
        Ok(Some(ProjectionFrame {
            step: step.unwrap_or(99),
            uncentred: None,
            centred: None,
        }))
    }
    fn neighbors(
        &self,
        words: &[u32],
        _k: usize,
    ) -> Result<(Option<u64>, Vec<WordNeighbors>), String> {
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
    send(Event::Started {
        step: 0,
        total_steps: 100,
        windows_per_epoch: 10,
        parameters: 42,
        device: "cpu".into(),
        run_dir: Some("runs/t".into()),
        objective: "MLE".into(),
        objectives: Box::default(),
    });
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
        command,
        before: "MLE".into(),
        after: "CosReg γ=1".into(),
        ticket: envelope.ticket,
    }));
    send(Event::Finished {
        step: 40,
        reason: FinishReason::Stopped,
    });
    let mut result = None;
    for (i, link) in [&mut local, &mut socket].into_iter().enumerate() {
        let app = &mut apps[i];
        let start = Instant::now();
        while !matches!(app.run.status, RunStatus::Finished { .. }) {
            assert!(start.elapsed() < Duration::from_secs(10));
            if let Some(m) = link.recv_timeout(Duration::from_millis(20)).expect("link") {
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
