//! Runs outlive their terminal, through real terminals (tmux): the workbench's tmux session is
//! killed and the run trains on to its end, leaving no process behind; viewers attach from other
//! sessions, see the history and the live steps, steer the run, and one viewer's death changes
//! nothing for the run or the others; a finished run opens read-only; a resume shows the history.

use std::path::Path;
use std::time::Duration;

use crate::harness::{
    Fixture, Tmux, conelab_processes, process_gone, require_tmux, s, signal, store_events,
    store_losses, wait_final, wait_until,
};

/// A tmux server of its own running `command` in a 120×40 session.
fn terminal(name: &str, command: &str) -> Tmux {
    let t = Tmux {
        socket: format!("conelab-attach-{name}-{}", std::process::id()),
        session: name.into(),
    };
    let out = t.run(&[
        "new-session",
        "-d",
        "-s",
        name,
        "-x",
        "120",
        "-y",
        "40",
        command,
    ]);
    assert!(out.status.success(), "tmux new-session: {out:?}");
    t
}

/// The pid of the process a tmux session runs (its shell).
fn pane_pid(t: &Tmux) -> u32 {
    let out = t.run(&["list-panes", "-t", &t.session, "-F", "#{pane_pid}"]);
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("pane pid")
}

/// Pids of the conelab processes under a tmux pane's shell.
fn viewer_pids(shell: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc")
        .expect("proc")
        .filter_map(|e| e.ok())
    {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let ppid = stat
            .rsplit(')')
            .next()
            .and_then(|r| r.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        if ppid == Some(shell) && String::from_utf8_lossy(&cmd).contains("conelab") {
            out.push(pid);
        }
    }
    out
}

/// The step in a workbench's header line.
fn header_step(screen: &str) -> u64 {
    screen
        .lines()
        .next()
        .and_then(|l| l.split("step ").nth(1))
        .and_then(|r| r.split('/').next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// Waits until the workbench's header step has moved past `step`.
fn wait_past(t: &Tmux, step: u64) -> u64 {
    let mut now = 0;
    wait_until(
        &format!("the screen of {} to pass step {step}", t.session),
        || {
            now = header_step(&t.screen());
            now > step
        },
    );
    now
}

/// No conelab process mentions the run any more (60 s at most); else the ones left, described.
fn no_process_left(run: &Path) {
    let start = std::time::Instant::now();
    loop {
        let left = conelab_processes(s(run));
        if left.is_empty() {
            return;
        }
        if start.elapsed() > Duration::from_secs(60) {
            let described: Vec<String> = left
                .iter()
                .map(|p| {
                    let cmd = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
                    let stat =
                        std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
                    format!(
                        "{p}: {} [{stat}]",
                        String::from_utf8_lossy(&cmd).replace('\0', " ")
                    )
                })
                .collect();
            panic!("processes left for the run: {described:#?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn read_exit(path: &Path) -> String {
    // `echo $? > FILE` creates the file before it writes the line: wait for the whole line.
    wait_until(&format!("{}", path.display()), || {
        std::fs::read_to_string(path).is_ok_and(|t| t.ends_with('\n'))
    });
    std::fs::read_to_string(path)
        .expect("exit status")
        .trim()
        .to_string()
}

#[test]
fn a_run_outlives_its_terminal_and_viewers_attach_steer_and_leave() {
    if !require_tmux() {
        return;
    }
    let f = Fixture::new();
    let bin = env!("CARGO_BIN_EXE_conelab");
    let run = f.path("run");
    let exit = |n: u32| f.path(&format!("exit-{n}"));
    // 1. The workbench on a run far too long to end by itself. No periodic evaluation: at 2 ms a
    // step its events (one per 40 steps) pushed "started: MLE" out of the Events pane's last
    // lines before a second viewer had drawn its first frame.
    let first = terminal(
        "first",
        &format!(
            "{bin} train {} --config {} --run-dir {} --steps 100000000 --eval-every 0 --snapshot-every 20 --checkpoint-every 0; echo $? > {}; sleep 600",
            s(&f.path("corpus")),
            s(&f.path("small.toml")),
            s(&run),
            s(&exit(1))
        ),
    );
    first.wait_for("running");
    let first_viewer = viewer_pids(pane_pid(&first));
    assert_eq!(
        first_viewer.len(),
        1,
        "one viewer process in the first terminal"
    );

    // 2. A second viewer: the history from step 0, then live steps.
    let attach = |n: u32| {
        format!(
            "{bin} attach {}; echo $? > {}; sleep 600",
            s(&run),
            s(&exit(n))
        )
    };
    let second = terminal("second", &attach(2));
    // The history from the run's start, then the live steps.
    let screen = second.wait_for("started: MLE");
    assert!(screen.contains("running"), "{screen}");
    let at = header_step(&screen);
    wait_past(&second, at + 5);

    // 3. CosReg on from the second viewer: acknowledged there, in the first, and in a third that
    // attaches afterwards.
    second.keys(&["5", "Space"]);
    second.wait_for("[x] CosReg");
    first.wait_for("[x] CosReg");
    let third = terminal("third", &attach(3));
    third.wait_for("[x] CosReg");

    // 4. The first terminal dies (SIGHUP to what runs in it): its viewer goes, training not.
    let before = header_step(&second.screen());
    first.run(&["kill-session", "-t", "first"]);
    wait_until("the first viewer to leave", || {
        first_viewer.iter().all(|&p| process_gone(p))
    });
    wait_past(&second, before + 5);

    // 5. The third viewer is killed with SIGKILL: the second keeps updating.
    let third_viewer = viewer_pids(pane_pid(&third));
    assert_eq!(third_viewer.len(), 1);
    signal(third_viewer[0], libc::SIGKILL);
    let before = header_step(&second.screen());
    wait_past(&second, before + 5);

    // 6. Stop and save from the second viewer; it leaves with the run's status.
    second.keys(&["q"]);
    second.wait_for("quit?");
    second.keys(&["s"]);
    assert_eq!(read_exit(&exit(2)), "0", "stopped from a viewer");
    let fin = wait_final(&run);
    assert_eq!(fin["status"], "stopped");
    // The stop summary `train`'s workbench prints, with an absolute --resume (issue #58: an
    // attached viewer printed nothing).
    let said = second.wait_for("continues it");
    assert!(
        said.contains(&format!("conelab train --resume {}", s(&run))),
        "{said}"
    );
    no_process_left(&run);

    // 7. The store has the change at the step the engine acknowledged, with training rows on both
    // sides, and every step once.
    let events = store_events(&run);
    let on = events
        .iter()
        .find(|(k, _, _)| k == "regulariser on")
        .map(|(_, s, _)| *s)
        .unwrap_or_else(|| panic!("no regulariser on in {events:?}"));
    let state: serde_json::Value = serde_json::from_slice(
        &std::fs::read(
            conelab_core::run_dir::checkpoints_in(&run)
                .expect("list")
                .last()
                .expect("a checkpoint")
                .join("state.json"),
        )
        .expect("state"),
    )
    .expect("json");
    let acked = state["commands"]
        .as_array()
        .expect("commands")
        .iter()
        .find(|c| {
            serde_json::from_value::<conelab_core::events::AppliedCommand>((*c).clone())
                .is_ok_and(|a| a.change.after_text() == "CosReg γ=1")
        })
        .and_then(|c| c["step"].as_u64())
        .expect("acknowledged");
    assert_eq!(on, acked);
    let steps: Vec<u64> = store_losses(&run).iter().map(|p| p.0).collect();
    let last = fin["step"].as_u64().expect("step");
    assert_eq!(steps, (1..=last).collect::<Vec<_>>());
    assert!(steps.contains(&(on - 1)) && steps.contains(&on));

    // 8. The finished run opens read-only, with its whole history.
    let fourth = terminal("fourth", &attach(4));
    // The history comes after the first frame (a finished run's store is read first).
    let screen = fourth.wait_for("finished (stopped)");
    assert!(screen.contains("read-only"), "{screen}");
    // The whole event log, zoomed: the run's start and the intervention are there.
    fourth.keys(&["6", "z"]);
    let events = fourth.wait_for("MLE → CosReg γ=1");
    assert!(events.contains("started: MLE"), "{events}");
    fourth.keys(&["Escape"]);
    fourth.keys(&["5", "Space"]);
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        fourth.screen().contains("[x] CosReg"),
        "nothing changes a finished run"
    );
    fourth.keys(&["q"]);
    assert_eq!(read_exit(&exit(4)), "0");

    // 9. A resume opens its workbench with the history, and runs to its end.
    let fifth = terminal(
        "fifth",
        &format!(
            "{bin} train --resume {} --steps {}; echo $? > {}; sleep 600",
            s(&run),
            last + 30,
            s(&exit(5))
        ),
    );
    // Thirty steps may be over before a screen is read: the workbench is up (running or
    // finished) once its title bar is drawn.
    fifth.wait_for("conelab run ·");
    fifth.keys(&["6", "z"]);
    let screen = fifth.wait_for("MLE → CosReg γ=1");
    assert!(screen.contains("started: MLE"), "{screen}");
    fifth.wait_for("finished (completed)");
    fifth.keys(&["q"]);
    assert_eq!(read_exit(&exit(5)), "0");
    let steps: Vec<u64> = store_losses(&run).iter().map(|p| p.0).collect();
    assert_eq!(steps, (1..=last + 30).collect::<Vec<_>>());
}

#[test]
fn a_killed_tmux_session_leaves_the_run_to_finish_and_nothing_behind() {
    if !require_tmux() {
        return;
    }
    let f = Fixture::new();
    let bin = env!("CARGO_BIN_EXE_conelab");
    let run = f.path("run");
    let t = terminal(
        "workbench",
        &format!(
            "{bin} train {} --config {} --run-dir {} --steps 2000 --eval-every 100 --snapshot-every 50",
            s(&f.path("corpus")),
            s(&f.path("small.toml")),
            s(&run)
        ),
    );
    // Long enough (2,000 steps) that the session is killed while the run trains, on a fast
    // machine too.
    t.wait_for("running");
    t.run(&["kill-session", "-t", "workbench"]);
    let fin = wait_final(&run);
    assert_eq!(fin["status"], "completed");
    assert_eq!(fin["step"], 2000);
    assert!(run.join("step-002000").is_dir(), "the final checkpoint");
    no_process_left(&run);
    let steps: Vec<u64> = store_losses(&run).iter().map(|p| p.0).collect();
    assert_eq!(steps, (1..=2000).collect::<Vec<_>>());
}

/// Issue #58: on a terminal with `TERM=dumb` (an editor's shell buffer) `train` drew the
/// workbench, its cursor moves and colours coming out as escape codes. It prints plain lines
/// there, as in a pipe, and `attach` refuses in one line.
#[test]
fn a_dumb_terminal_gets_plain_lines() {
    if !require_tmux() {
        return;
    }
    let f = Fixture::new();
    let bin = env!("CARGO_BIN_EXE_conelab");
    let run = f.path("run");
    let exit = f.path("exit");
    let t = terminal(
        "dumb",
        &format!(
            "TERM=dumb {bin} train {} --config {} --run-dir {} --steps 5 --eval-every 0; echo $? > {}; TERM=dumb {bin} attach {}; sleep 600",
            s(&f.path("corpus")),
            s(&f.path("small.toml")),
            s(&run),
            s(&exit),
            s(&run)
        ),
    );
    assert_eq!(read_exit(&exit), "0");
    let screen = t.wait_for("attach needs a terminal that can draw");
    assert!(screen.contains("finished step=5"), "{screen}");
    assert!(
        !screen.contains("conelab run ·"),
        "the workbench was drawn: {screen}"
    );
}
