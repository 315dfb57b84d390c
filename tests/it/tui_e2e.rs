//! The TUI end to end, through a real terminal: tmux runs `conelab train` on a small synthetic
//! corpus; the test types keys like a user — focus the controls, switch CosReg on, freeze the
//! rare group, save a checkpoint, quit with "stop and save" — waits for each acknowledgement on
//! the screen, and then checks the saved run state records those changes with their steps.
//! Skipped (with a message) where tmux is not installed.

use std::path::Path;

use crate::harness::{Fixture, Tmux, require_tmux, s, succeeded};

#[test]
fn a_user_switches_cosreg_on_freezes_rare_saves_and_quits() {
    if !require_tmux() {
        return;
    }
    let f = Fixture::new();
    let run = f.path("run");
    let exit_file = f.path("exit-status");
    let command = format!(
        "{} train {} --config {} --run-dir {} --steps 100000000 --eval-every 0 --snapshot-every 20 --checkpoint-every 0 --log-every 10; echo $? > {}; sleep 600",
        env!("CARGO_BIN_EXE_conelab"),
        s(&f.path("corpus")),
        s(&f.path("small.toml")),
        s(&run),
        s(&exit_file),
    );
    let tmux = Tmux {
        socket: format!("conelab-e2e-{}", std::process::id()),
        session: "e2e".into(),
    };
    let out = tmux.run(&[
        "new-session",
        "-d",
        "-s",
        "e2e",
        "-x",
        "120",
        "-y",
        "40",
        &command,
    ]);
    assert!(out.status.success(), "tmux new-session: {out:?}");
    tmux.wait_for("running");
    // The corpus's reference arrived with the start: Groups has its gain row (issue #38).
    tmux.wait_for("gain KN-3");
    // Controls pane, first line (CosReg): switch on. The box is ticked only once the engine has
    // acknowledged the change (the app mirrors acknowledged changes, not requests).
    tmux.keys(&["5", "Space"]);
    tmux.wait_for("[x] CosReg");
    // Down to "freeze rare" (the ninth control) and freeze it.
    tmux.keys(&["Down"; 8]);
    tmux.keys(&["Enter"]);
    tmux.wait_for("[x] freeze rare");
    tmux.keys(&["s"]);
    tmux.wait_for("checkpoint ");
    tmux.keys(&["q"]);
    tmux.wait_for("quit?");
    tmux.keys(&["s"]);
    assert_eq!(tmux.wait_for_exit(&exit_file), "0", "exit status");

    // The run wrote train.log although its stdout was never a terminal of ours: steps, the
    // switch and the freeze, the checkpoint.
    let log = std::fs::read_to_string(run.join("train.log")).expect("train.log");
    assert!(
        log.lines().any(|l| l.contains("conelab::step: step step=")),
        "{log}"
    );
    assert!(
        log.contains("applied") && log.contains("freeze rare"),
        "{log}"
    );
    assert!(log.contains("conelab::run: checkpoint step="), "{log}");
    let state = newest_state(&run);
    let objectives = &state["objectives"];
    assert_eq!(objectives["cos"]["enabled"], true);
    assert_eq!(objectives["freeze"]["rare"], true);
    let commands = state["commands"].as_array().expect("commands");
    let afters: Vec<String> = commands
        .iter()
        .map(|c| {
            serde_json::from_value::<conelab_core::events::AppliedCommand>(c.clone())
                .expect("a command as the run logs it")
                .change
                .after_text()
        })
        .collect();
    assert_eq!(
        afters,
        [
            "CosReg γ=1",
            "CosReg γ=1 + freeze rare",
            "checkpoint",
            "stopped (save=true)"
        ]
    );
    let steps: Vec<u64> = commands
        .iter()
        .map(|c| c["step"].as_u64().expect("step"))
        .collect();
    assert!(
        steps.windows(2).all(|w| w[0] <= w[1]),
        "in order: {steps:?}"
    );
    assert!(steps[0] >= 1);

    // The metrics store holds the same interventions, at the steps the engine acknowledged, and
    // the training rows on both sides of each change.
    let st = conelab_store::load(&run).expect("the run's store");
    let kinds = st
        .events()
        .column("kind")
        .expect("kind")
        .str()
        .expect("str")
        .clone();
    let ev_steps = st
        .events()
        .column("step")
        .expect("step")
        .u64()
        .expect("u64")
        .clone();
    let events: Vec<(String, u64)> = kinds
        .iter()
        .zip(ev_steps.iter())
        .map(|(k, s)| (k.unwrap_or_default().to_string(), s.unwrap_or_default()))
        .collect();
    let find = |kind: &str| {
        events
            .iter()
            .find(|(k, _)| k == kind)
            .map(|(_, s)| *s)
            .unwrap_or_else(|| panic!("no {kind} event in {events:?}"))
    };
    assert_eq!(find("regulariser on"), steps[0]);
    assert_eq!(find("freeze"), steps[1]);
    assert_eq!(find("stop"), steps[3]);
    assert_eq!(events.first().map(|e| e.0.as_str()), Some("start"));
    assert_eq!(events.last().map(|e| e.0.as_str()), Some("finish"));
    // In the order they happened; an acknowledgement names the first step it affects (the stop
    // names the step after the last one run), so only the interventions are strictly ordered.
    assert!(
        steps[0] < steps[1] && steps[1] <= steps[3] && find("finish") + 1 >= steps[3],
        "{events:?}"
    );
    let loss =
        conelab_store::query::history(st.metrics(), "train", "total", "loss", 0).expect("history");
    for change in [steps[0], steps[1]] {
        assert!(
            loss.steps.contains(&(change - 1)) && loss.steps.contains(&change),
            "train rows at steps {} and {change}",
            change - 1
        );
    }
}

/// state.json of the newest checkpoint of a run directory.
fn newest_state(run: &Path) -> serde_json::Value {
    let mut steps: Vec<_> = std::fs::read_dir(run)
        .expect("run dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("step-"))
        })
        .collect();
    steps.sort();
    let newest = steps.last().expect("a checkpoint");
    serde_json::from_slice(&std::fs::read(newest.join("state.json")).expect("state.json"))
        .expect("json")
}

/// A signal to the workbench only ends the workbench, with the terminal restored; the run goes on.
/// A run that fails shows it, and the workbench leaves with the run's status.
#[test]
fn sigterm_detaches_the_workbench_and_a_failed_run_is_shown() {
    if !require_tmux() {
        return;
    }
    let f = Fixture::new();
    let run = f.path("run");
    let exit_file = f.path("exit-status");
    let tmux = Tmux {
        socket: format!("conelab-e2e-sig-{}", std::process::id()),
        session: "sig".into(),
    };
    let command = format!(
        "{} train {} --config {} --run-dir {} --steps 100000000 --eval-every 0 --checkpoint-every 0; echo exit=$? > {}; sleep 600",
        env!("CARGO_BIN_EXE_conelab"),
        s(&f.path("corpus")),
        s(&f.path("small.toml")),
        s(&run),
        s(&exit_file),
    );
    let out = tmux.run(&[
        "new-session",
        "-d",
        "-s",
        "sig",
        "-x",
        "120",
        "-y",
        "40",
        &command,
    ]);
    assert!(out.status.success());
    tmux.wait_for("running");
    let live: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join("live.json")).expect("live")).expect("json");
    let run_pid = live["pid"].as_u64().expect("pid") as u32;
    // The viewer is the pane's process (tmux runs the command itself).
    let pane = tmux.run(&["list-panes", "-t", "sig", "-F", "#{pane_pid}"]);
    let shell: u32 = String::from_utf8_lossy(&pane.stdout)
        .trim()
        .parse()
        .expect("pid");
    let viewer = std::fs::read_dir("/proc")
        .expect("proc")
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()))
        .find(|&p| {
            std::fs::read_to_string(format!("/proc/{p}/stat"))
                .ok()
                .and_then(|st| st.rsplit(')').next().map(str::to_string))
                .and_then(|r| {
                    r.split_whitespace()
                        .nth(1)
                        .and_then(|x| x.parse::<u32>().ok())
                })
                == Some(shell)
        })
        .unwrap_or(shell);
    crate::harness::signal(viewer, libc::SIGTERM);
    // The viewer leaves with 0; the alternate screen is gone and the message is there.
    assert_eq!(tmux.wait_for_exit(&exit_file), "exit=0");
    let screen = tmux.screen();
    assert!(screen.contains("detached from"), "{screen}");
    assert!(
        !screen.contains("1 Progress"),
        "the terminal is restored: {screen}"
    );
    assert!(!crate::harness::process_gone(run_pid), "the run goes on");
    crate::harness::signal(run_pid, libc::SIGTERM);
    crate::harness::wait_until("the run to stop", || crate::harness::process_gone(run_pid));
    drop(tmux);

    // A run whose backend panics: the workbench shows the failure; leaving it returns 4.
    let f = Fixture::new();
    let exit_file = f.path("exit-status");
    let tmux = Tmux {
        socket: format!("conelab-e2e-fail-{}", std::process::id()),
        session: "fail".into(),
    };
    let command = format!(
        "CONELAB_FAULT=engine.panic:30:EIO {} train {} --config {} --run-dir {} --steps 1000 --eval-every 0; echo exit=$? > {}; sleep 600",
        env!("CARGO_BIN_EXE_conelab"),
        s(&f.path("corpus")),
        s(&f.path("small.toml")),
        s(&f.path("run")),
        s(&exit_file),
    );
    let out = tmux.run(&[
        "new-session",
        "-d",
        "-s",
        "fail",
        "-x",
        "120",
        "-y",
        "40",
        &command,
    ]);
    assert!(out.status.success());
    let screen = tmux.wait_for("failed:");
    assert!(screen.contains("panicked"), "{screen}");
    assert!(
        screen.contains("step 29/1000"),
        "the step it failed at: {screen}"
    );
    tmux.keys(&["q"]);
    assert_eq!(tmux.wait_for_exit(&exit_file), "exit=4");
}

/// The chart's cells (braille) of a captured screen, everything else blanked.
fn plot(screen: &str) -> String {
    screen
        .chars()
        .map(|c| {
            if ('\u{2801}'..='\u{28ff}').contains(&c) || c == '\n' {
                c
            } else {
                ' '
            }
        })
        .collect()
}

/// The step a legend line of the compare view shows for run `n` (`■ n label  status  step S`).
fn legend_step(screen: &str, n: usize) -> Option<u64> {
    let line = screen
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("■ {n} ")))?;
    let after = line.split("step ").nth(1)?;
    after.split_whitespace().next()?.parse().ok()
}

#[test]
fn compare_overlays_a_finished_and_a_live_run_and_smoothing_changes_the_curve() {
    if !require_tmux() {
        return;
    }
    let f = Fixture::new();
    let out = f.train(
        "mle",
        &[
            "--headless",
            "--steps",
            "60",
            "--eval-every",
            "20",
            "--snapshot-every",
            "20",
            "--name",
            "baseline",
        ],
    );
    succeeded(&out);
    // A live run with another objective: it trains until the test stops it.
    let mut live = crate::harness::spawn_train(
        &f,
        "cos",
        &[
            "--headless",
            "--steps",
            "100000000",
            "--eval-every",
            "20",
            "--snapshot-every",
            "20",
            "--checkpoint-every",
            "0",
            "--log-every",
            "100000000",
            "--reg",
            "cos=1",
            "--name",
            "cosreg",
        ],
    );
    // Its reports are read and dropped: a pipe left full would block the run's last lines, and
    // the run would never exit after the SIGTERM below.
    crate::harness::drain(&mut live);
    crate::harness::wait_until("the live run's folder", || {
        f.path("cos").join("run.toml").exists()
    });
    let exit_file = f.path("exit-status");
    let command = format!(
        "{} compare {} {}; echo $? > {}; sleep 600",
        env!("CARGO_BIN_EXE_conelab"),
        s(&f.path("mle")),
        s(&f.path("cos")),
        s(&exit_file),
    );
    let tmux = Tmux {
        socket: format!("conelab-compare-{}", std::process::id()),
        session: "cmp".into(),
    };
    let out = tmux.run(&[
        "new-session",
        "-d",
        "-s",
        "cmp",
        "-x",
        "120",
        "-y",
        "40",
        &command,
    ]);
    assert!(out.status.success(), "tmux new-session: {out:?}");
    // The legend: both runs by name, the finished one with its status, the live one live.
    tmux.wait_for("■ 1 baseline");
    let screen = tmux.wait_for("■ 2 cosreg");
    assert!(screen.contains("compare · 2 runs"), "{screen}");
    tmux.wait_for("completed");
    tmux.wait_for("live");
    // Live runs update live: run 2's step grows on screen while run 1's stays at 60.
    let mut first = None;
    crate::harness::wait_until("run 2's step to grow on screen", || {
        let screen = tmux.screen();
        let step = legend_step(&screen, 2);
        match (first, step) {
            (None, Some(s)) => {
                first = Some(s);
                false
            }
            (Some(a), Some(b)) => b > a,
            _ => false,
        }
    });
    assert_eq!(legend_step(&tmux.screen(), 1), Some(60));
    // Stop the live run; once the view says so, its curves are final and can be compared.
    crate::harness::signal(live.id(), libc::SIGTERM);
    let _ = live.wait();
    tmux.wait_for("stopped");
    std::thread::sleep(std::time::Duration::from_millis(2500));
    let both = plot(&tmux.screen());
    // Each capture waits for the legend of the same frame to say what is shown.
    let shown = |one: bool, two: bool| {
        let want = [
            if one { "■ 1 " } else { "□ 1 " },
            if two { "■ 2 " } else { "□ 2 " },
        ];
        let mut screen = String::new();
        crate::harness::wait_until("the legend to say which runs are shown", || {
            screen = tmux.screen();
            want.iter().all(|w| screen.contains(w))
        });
        plot(&screen)
    };
    tmux.keys(&["1"]);
    let only_cos = shown(false, true);
    tmux.keys(&["1", "2"]);
    let only_mle = shown(true, false);
    tmux.keys(&["2"]);
    shown(true, true);
    assert!(only_cos.trim() != "" && only_mle.trim() != "", "{both}");
    assert_ne!(only_cos, only_mle, "each run draws its own curve");
    assert_ne!(
        both, only_cos,
        "the baseline's curve is drawn with the other"
    );
    assert_ne!(both, only_mle, "cosreg's curve is drawn with the other");
    // The smoothing key changes the drawn curve (raw at 0, heavily smoothed at 0.9).
    tmux.keys(&["0"]);
    tmux.wait_for("no smoothing");
    let raw = plot(&tmux.screen());
    tmux.keys(&["+"; 9]);
    tmux.wait_for("smoothing 0.90");
    let smooth = plot(&tmux.screen());
    assert_ne!(raw, smooth, "smoothing changed nothing on screen");
    // Another curve: the validation PPL of the rare group, both runs evaluated.
    tmux.keys(&["Down"; 4]);
    let screen = tmux.wait_for("▶ valid PPL rare");
    assert!(!screen.contains("no valid PPL rare yet"), "{screen}");
    // Any stored series (issue #37): found by its letters, then read from the stores.
    tmux.keys(&["/", "v", "r", "h", "u"]);
    tmux.wait_for("/vrhu_");
    tmux.keys(&["Enter"]);
    tmux.wait_for("▶ valid/rare/human_uniq");
    let mut screen = String::new();
    crate::harness::wait_until("the picked series' points", || {
        screen = tmux.screen();
        !screen.contains("no valid/rare/human_uniq yet") && !plot(&screen).trim().is_empty()
    });
    tmux.keys(&["q"]);
    assert_eq!(tmux.wait_for_exit(&exit_file), "0", "exit status");
}
