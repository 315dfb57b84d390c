//! The control socket of a live run, spoken to by hand (JSON lines over a Unix socket): hello and
//! versions, subscriptions, commands and their acknowledgements, requests; and hostile clients —
//! malformed, unknown, oversized messages, a client that never reads, another user — none of
//! which stops or stalls the run. Also: a stale socket of a killed run is replaced; a run folder
//! whose path is too long for a socket gets one in the runtime folder.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::harness::{Fixture, conelab, process_gone, s, signal, succeeded, wait_until};
use conelab_protocol::message::PROTOCOL_VERSION;
use serde_json::{Value, json};

/// A long detached run; returns its folder, socket and pid.
fn live_run(f: &Fixture, name: &str) -> (PathBuf, PathBuf, u32) {
    let out = f.train(
        name,
        &[
            "--steps",
            "100000000",
            "--eval-every",
            "0",
            "--snapshot-every",
            "5",
            "--checkpoint-every",
            "0",
            "--detach",
        ],
    );
    succeeded(&out);
    let run = f.path(name);
    let live: Value =
        serde_json::from_slice(&std::fs::read(run.join("live.json")).expect("live")).expect("json");
    let socket = PathBuf::from(live["socket"].as_str().expect("socket"));
    let pid = live["pid"].as_u64().expect("pid") as u32;
    (run, socket, pid)
}

fn stop(pid: u32) {
    signal(pid, libc::SIGTERM);
    wait_until("the run to stop", || process_gone(pid));
}

struct Client {
    out: UnixStream,
    lines: BufReader<UnixStream>,
}

impl Client {
    fn connect(socket: &Path) -> Self {
        let out = UnixStream::connect(socket).expect("connect");
        out.set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        let lines = BufReader::new(out.try_clone().expect("clone"));
        Self { out, lines }
    }

    fn send_raw(&mut self, line: &str) {
        self.out.write_all(line.as_bytes()).expect("write");
        self.out.write_all(b"\n").expect("newline");
    }

    fn send(&mut self, v: Value) {
        self.send_raw(&v.to_string());
    }

    /// The next message; `None` at the end of the connection.
    fn recv(&mut self) -> Option<Value> {
        let mut line = String::new();
        match self.lines.read_line(&mut line) {
            Ok(0) => None,
            Ok(_) => Some(serde_json::from_str(&line).expect("the run sends JSON")),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => None,
            Err(e) => panic!("read: {e}"),
        }
    }

    /// Messages until one of type `kind` (skipping events); panics at the end of the connection.
    fn until(&mut self, kind: &str) -> Value {
        loop {
            let m = self
                .recv()
                .unwrap_or_else(|| panic!("closed before a {kind}"));
            if m["type"] == kind {
                return m;
            }
        }
    }

    fn hello(&mut self) -> Value {
        self.send(json!({"type": "hello", "protocol": PROTOCOL_VERSION, "client": "test"}));
        self.until("hello")
    }
}

/// The step of the newest event a fresh subscriber sees.
fn current_step(socket: &Path) -> u64 {
    let mut c = Client::connect(socket);
    c.hello();
    c.send(json!({"type": "subscribe"}));
    let h = c.until("history");
    let mut step = h["view"]["last_step"]["step"].as_u64().unwrap_or(0);
    // One live step too.
    loop {
        let m = c.recv().expect("events");
        if m["type"] == "event" && m["event"]["event"] == "step" {
            step = step.max(m["event"]["step"].as_u64().expect("step"));
            return step;
        }
    }
}

#[test]
fn hello_subscribe_command_and_requests() {
    let f = Fixture::new();
    let (run, socket, pid) = live_run(&f, "run");
    assert_eq!(
        std::fs::metadata(&socket)
            .expect("socket")
            .permissions()
            .mode()
            & 0o777,
        0o600,
        "only the run's user may connect"
    );
    let vocab = std::fs::read_to_string(run.join("vocab.tsv"))
        .expect("vocab")
        .lines()
        .count();
    let mut c = Client::connect(&socket);
    let hello = c.hello();
    assert_eq!(hello["protocol"], PROTOCOL_VERSION);
    assert_eq!(hello["run"]["run_id"], "run");
    assert_eq!(hello["run"]["pid"], pid);
    assert_eq!(hello["run"]["vocab_size"], vocab);
    c.send(json!({"type": "subscribe"}));
    let history = c.until("history");
    // The run's start is in the history, or — when the subscription beat the trainer's first
    // event (`--detach` returns once the socket listens) — it is the first live event.
    let log = history["view"]["log"].as_array().expect("a log");
    if log.is_empty() {
        let first = c.until("event");
        assert_eq!(first["event"]["event"], "started", "{first}");
    } else {
        assert!(
            log[0]["text"]
                .as_str()
                .is_some_and(|t| t.starts_with("started")),
            "{}",
            log[0]
        );
    }
    // A command: its acknowledgement to the asker, and an event for everyone.
    c.send(json!({"type": "command", "id": 7, "command": {"command": "set-lr", "lr": 0.002}}));
    let result = c.until("command-result");
    assert_eq!(result["id"], 7);
    assert_eq!(result["result"]["outcome"], "applied");
    let step = result["result"]["applied"]["step"].as_u64().expect("step");
    // An impossible one is refused with the reason.
    c.send(json!({"type": "command", "id": 8, "command": {"command": "set-lr", "lr": -1.0}}));
    let result = c.until("command-result");
    assert_eq!(result["result"]["outcome"], "rejected");
    assert!(
        result["result"]["reason"]
            .as_str()
            .expect("reason")
            .contains("learning rate")
    );
    // The steps after the change run with it.
    loop {
        let m = c.recv().expect("events");
        if m["type"] == "event"
            && m["event"]["event"] == "step"
            && m["event"]["step"].as_u64() >= Some(step)
        {
            assert_eq!(m["event"]["lr"], 0.002);
            break;
        }
    }
    // Requests only the run answers: the newest projection and neighbours in the newest
    // snapshot (the snapshot every 5 steps has been analysed by now).
    wait_until("an analysed snapshot", || {
        c.send(json!({"type": "projection", "id": 9}));
        let p = c.until("projection");
        p["frame"].is_object()
    });
    c.send(json!({"type": "projection", "id": 10}));
    let p = c.until("projection");
    assert_eq!(
        p["frame"]["uncentred"]["points"]
            .as_array()
            .expect("points")
            .len(),
        vocab
    );
    c.send(json!({"type": "neighbors", "id": 11, "words": [5, 20], "k": 4}));
    let n = c.until("neighbors");
    let results = n["results"].as_array().expect("results");
    assert_eq!(results.len(), 2);
    let first = results[0]["neighbors"].as_array().expect("neighbours");
    assert_eq!(first.len(), 4);
    let scores: Vec<f64> = first
        .iter()
        .map(|x| x["score"].as_f64().expect("score"))
        .collect();
    assert!(
        scores.windows(2).all(|w| w[0] >= w[1]),
        "nearest first: {scores:?}"
    );
    assert!(scores.iter().all(|s| (-1.0..=1.0 + 1e-6).contains(s)));
    c.send(json!({"type": "vocabulary", "id": 12}));
    let v = c.until("vocabulary");
    assert_eq!(v["tokens"].as_array().expect("tokens").len(), vocab);
    // The store records the change at the acknowledged step.
    stop(pid);
    let events = crate::harness::store_events(&run);
    assert!(
        events.iter().any(|(k, s, _)| k == "lr" && *s == step),
        "{events:?}"
    );
}

#[test]
fn hostile_clients_get_errors_and_the_run_goes_on() {
    let f = Fixture::new();
    let (_run, socket, pid) = live_run(&f, "run");
    // Another version: an error, and the door closes.
    let mut c = Client::connect(&socket);
    c.send(json!({"type": "hello", "protocol": 999}));
    let e = c.recv().expect("an error");
    assert_eq!(e["type"], "error");
    assert!(
        e["message"].as_str().expect("message").contains("999"),
        "{e}"
    );
    assert!(c.recv().is_none(), "closed");
    // No hello first: an error, closed.
    let mut c = Client::connect(&socket);
    c.send(json!({"type": "subscribe"}));
    assert_eq!(c.recv().expect("error")["type"], "error");
    assert!(c.recv().is_none());
    // Garbage before hello: an error, closed (no second chance before it is a viewer).
    let mut c = Client::connect(&socket);
    c.send_raw("{not json at all");
    assert_eq!(c.recv().expect("error")["type"], "error");
    assert!(c.recv().is_none());
    // Malformed JSON and an unknown message after hello: errors, and the connection stays
    // usable.
    let mut c = Client::connect(&socket);
    c.hello();
    c.send_raw("{not json at all");
    let e = c.until("error");
    assert!(
        e["message"].as_str().expect("m").contains("malformed"),
        "{e}"
    );
    c.send(json!({"type": "launch-missiles", "id": 1}));
    assert_eq!(c.until("error")["type"], "error");
    c.send(json!({"type": "vocabulary", "id": 2}));
    assert_eq!(c.until("vocabulary")["id"], 2);
    // A 100 MB message: refused without being held, then disconnected.
    let before = current_step(&socket);
    let mut big = Client::connect(&socket);
    big.hello();
    let chunk = vec![b'x'; 1 << 20];
    // The run stops reading once the limit is passed (the rest is not read to its end), so the
    // client's later writes may fail: the connection is closed under it.
    let sent = (0..100)
        .take_while(|_| big.out.write_all(&chunk).is_ok())
        .count();
    if sent == 100 {
        let _ = big.out.write_all(b"\n");
    }
    let e = big.until("error");
    assert!(
        e["message"]
            .as_str()
            .expect("m")
            .contains("longer than the limit"),
        "{e}"
    );
    assert!(big.recv().is_none(), "disconnected");
    // A client that subscribes and never reads: the run does not wait for it.
    let mut sleeper = Client::connect(&socket);
    sleeper.hello();
    sleeper.send(json!({"type": "subscribe"}));
    std::thread::sleep(Duration::from_secs(3));
    let after = current_step(&socket);
    assert!(after > before + 10, "training went on: {before} → {after}");
    drop(sleeper);
    // A burst of clients that connect and hang up at once: not paced like live ones (at 20 a
    // second, 1,000 of them held every later client in the backlog for 50 s).
    for _ in 0..1000 {
        drop(std::os::unix::net::UnixStream::connect(&socket).expect("connect"));
    }
    let mut after_burst = Client::connect(&socket);
    after_burst
        .out
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    after_burst.hello();
    after_burst.send(json!({"type": "vocabulary", "id": 3}));
    assert_eq!(after_burst.until("vocabulary")["id"], 3);
    // Many clients asking at once share the run's answers: within a second, no more than its
    // rate and a burst of as many, however many connections ask (each one alone may ask 50 a
    // second after a burst of 50: six would get 600).
    use conelab_run::server::REQUESTS_PER_SECOND;
    let mut askers: Vec<Client> = (0..6)
        .map(|_| {
            let mut c = Client::connect(&socket);
            c.hello();
            c
        })
        .collect();
    let asked_at = Instant::now();
    for (n, c) in askers.iter_mut().enumerate() {
        for i in 0..100 {
            c.send(json!({"type": "vocabulary", "id": 1000 * n + i}));
        }
    }
    let answered = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let readers: Vec<_> = askers
        .into_iter()
        .map(|mut c| {
            let answered = answered.clone();
            std::thread::spawn(move || {
                c.out
                    .set_read_timeout(Some(Duration::from_millis(100)))
                    .expect("timeout");
                let mut line = String::new();
                while asked_at.elapsed() < Duration::from_secs(1) {
                    match c.lines.read_line(&mut line) {
                        Ok(0) => break,
                        Ok(_) => {
                            if line.contains("\"vocabulary\"") {
                                answered.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                            }
                            line.clear();
                        }
                        // A timeout keeps what was read of the line.
                        Err(_) => {}
                    }
                }
            })
        })
        .collect();
    for r in readers {
        r.join().expect("reader");
    }
    let answered = answered.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        answered as f64 <= 2.0 * REQUESTS_PER_SECOND + 6.0,
        "{answered} answers in the first second"
    );
    assert!(answered > 0);
    assert!(!process_gone(pid));
    stop(pid);
}

#[test]
fn a_client_of_another_user_is_refused() {
    if !Path::new("/usr/bin/setpriv").exists() && !Path::new("/bin/setpriv").exists() {
        crate::harness::skip_or_fail("setpriv (util-linux) not found");
        return;
    }
    let f = Fixture::new();
    let (run, socket, pid) = live_run(&f, "run");
    // The folders above the socket must be traversable for the other user to try at all.
    let mut p = run.clone();
    while let Some(parent) = p.parent() {
        if let Ok(meta) = std::fs::metadata(&p) {
            let mode = meta.permissions().mode();
            let _ = std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode | 0o711));
        }
        p = parent.to_path_buf();
    }
    let out = std::process::Command::new("setpriv")
        .args(["--reuid", "65534", "--regid", "65534", "--clear-groups"])
        .arg(env!("CARGO_BIN_EXE_conelab"))
        .args(["attach", "--socket", s(&socket)])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("setpriv");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("permission denied"), "{stderr}");
    assert!(!process_gone(pid), "the run goes on");
    stop(pid);
}

#[test]
fn a_stale_socket_is_replaced_and_a_long_folder_gets_its_socket_elsewhere() {
    let f = Fixture::new();
    let (run, socket, pid) = live_run(&f, "run");
    signal(pid, libc::SIGKILL);
    wait_until("the kill", || process_gone(pid));
    assert!(socket.exists(), "a killed run leaves its socket file");
    let out = conelab(&["train", "--resume", s(&run), "--detach"]);
    succeeded(&out);
    let live: Value =
        serde_json::from_slice(&std::fs::read(run.join("live.json")).expect("live")).expect("json");
    let mut c = Client::connect(Path::new(live["socket"].as_str().expect("socket")));
    assert_eq!(c.hello()["run"]["run_id"], "run");
    stop(live["pid"].as_u64().expect("pid") as u32);

    // A folder whose path is too long for a Unix socket (~107 bytes).
    let long = format!("{}/{}", "d".repeat(60), "e".repeat(60));
    let (run, socket, pid) = live_run(&f, &long);
    assert!(!socket.starts_with(&run), "{}", socket.display());
    let mut c = Client::connect(&socket);
    assert_eq!(c.hello()["run"]["run_id"], "e".repeat(60));
    let start = Instant::now();
    stop(pid);
    assert!(start.elapsed() < Duration::from_secs(60));
    assert!(!socket.exists(), "the socket is removed when the run ends");
}

/// A run whose stderr has gone — the starter of a detached run exits as the run announces
/// itself, a `2>&1 | tee` dies — still serves viewers and still stops on a signal with a
/// checkpoint: the lines it says on stderr (a viewer attached, a signal received) are dropped,
/// never a panic of the thread that says them. Before, the connection's thread died on the
/// "viewer attached" line and the client saw the socket close before a hello.
#[test]
fn a_run_whose_stderr_is_gone_serves_viewers_and_stops_on_a_signal() {
    let f = Fixture::new();
    let run = f.path("run");
    let mut child = crate::harness::spawn_train(
        &f,
        "run",
        &[
            "--steps",
            "100000000",
            "--eval-every",
            "0",
            "--checkpoint-every",
            "0",
        ],
    );
    // The read end closes at once: every write to the run's stderr fails with EPIPE.
    drop(child.stderr.take());
    crate::harness::drain(&mut child);
    let live = run.join("live.json");
    wait_until("the live record", || live.is_file());
    let live: Value = serde_json::from_slice(&std::fs::read(&live).expect("live")).expect("json");
    let socket = PathBuf::from(live["socket"].as_str().expect("socket"));
    wait_until("the socket", || UnixStream::connect(&socket).is_ok());
    for _ in 0..3 {
        let mut c = Client::connect(&socket);
        assert_eq!(c.hello()["run"]["run_id"], "run");
    }
    let step = current_step(&socket);
    assert!(step >= 1, "the run trains: step {step}");
    signal(child.id(), libc::SIGTERM);
    let status = child.wait().expect("wait");
    assert_eq!(status.code(), Some(75), "stopped by a signal after saving");
    let checkpoints: Vec<_> = std::fs::read_dir(&run)
        .expect("run folder")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("step-"))
        .collect();
    assert_eq!(checkpoints.len(), 1, "one checkpoint, from the stop");
}

/// Issue #37: a run stopped without saving (`x` in the workbench) read `stopped` like one that
/// saved; its final record says what a resume starts from, and `runs` shows it.
#[test]
fn a_stop_without_saving_says_there_is_nothing_to_resume() {
    let f = Fixture::new();
    let (run, socket, pid) = live_run(&f, "unsaved");
    let mut c = Client::connect(&socket);
    c.hello();
    c.send(json!({"type": "command", "id": 1, "command": {"command": "stop", "save": false}}));
    wait_until("the run to stop", || process_gone(pid));
    let fin = crate::harness::wait_final(&run);
    assert_eq!(fin["status"], "stopped");
    let message = fin["message"].as_str().unwrap_or("");
    assert!(message.contains("stopped without saving"), "{fin}");
    assert!(message.contains("no checkpoint"), "{fin}");
    let out = crate::harness::conelab(&["runs", s(&f.path("")), "--json"]);
    let rows: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert!(
        rows[0]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("stopped without saving")),
        "{rows}"
    );
    let table = String::from_utf8_lossy(&crate::harness::conelab(&["runs", s(&f.path(""))]).stdout)
        .to_string();
    assert!(table.contains("stopped (not saved)"), "{table}");
}
