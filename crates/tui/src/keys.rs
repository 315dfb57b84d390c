//! Keys → actions. A pure function of the key and the little state that changes a key's meaning
//! (a dialog or the help overlay open, which pane has focus), so it is tested without a terminal.

use ratatui::crossterm::event::{
    KeyCode, KeyEvent, KeyEventKind, KeyModifiers, MouseButton, MouseEvent, MouseEventKind,
};
use ratatui::layout::{Position, Rect};

use super::app::{
    Action, App, Pane, controls_key, neighbors_key, search_action, time_scrub_key, typing_key,
};

/// Mouse → action: a click focuses the pane under the pointer; the wheel moves through the
/// controls, the snapshots of the embedding pane, or the search matches. `panes` is the layout
/// of the screen (`ui::pane_areas`).
pub fn mouse_action(app: &App, mouse: MouseEvent, panes: &[(Pane, Rect)]) -> Action {
    if app.confirm_quit || app.help {
        return Action::None;
    }
    let at = Position::new(mouse.column, mouse.row);
    let Some(&(pane, _)) = panes.iter().find(|(_, r)| r.contains(at)) else {
        return Action::None;
    };
    let step = match mouse.kind {
        MouseEventKind::Down(MouseButton::Left) => return Action::Focus(pane),
        MouseEventKind::ScrollUp => -1,
        MouseEventKind::ScrollDown => 1,
        _ => return Action::None,
    };
    match pane {
        Pane::Controls if step < 0 => Action::ControlsUp,
        Pane::Controls => Action::ControlsDown,
        Pane::Scatter => Action::Scrub(step),
        Pane::Neighbors if app.neighbors.editing => Action::SearchMove(step),
        _ => Action::None,
    }
}

pub fn action_for(app: &App, key: KeyEvent) -> Action {
    if key.kind == KeyEventKind::Release {
        return Action::None;
    }
    let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
    if ctrl && matches!(key.code, KeyCode::Char('c')) {
        // Like q: asks; a second Ctrl-C is the dialog's default, stop and save — what Ctrl-C
        // does to a headless run (issue #58: it cancelled the dialog, so Ctrl-C Ctrl-C never
        // quit).
        return if app.confirm_quit {
            Action::StopAndSave
        } else {
            Action::Quit
        };
    }
    if app.confirm_quit {
        return match key.code {
            KeyCode::Char('d') | KeyCode::Char('D') => Action::Detach,
            KeyCode::Char('s') | KeyCode::Char('S') | KeyCode::Enter => Action::StopAndSave,
            KeyCode::Char('x') | KeyCode::Char('X') => Action::StopWithoutSaving,
            KeyCode::Char('c') | KeyCode::Char('C') | KeyCode::Esc | KeyCode::Char('q') => {
                Action::Cancel
            }
            _ => Action::None,
        };
    }
    if app.help {
        // ↑↓ scroll a help taller than the terminal; any other key closes it.
        return match key.code {
            KeyCode::Up | KeyCode::Char('k') => Action::HelpScroll(-1),
            KeyCode::Down | KeyCode::Char('j') => Action::HelpScroll(1),
            KeyCode::PageUp => Action::HelpScroll(-10),
            KeyCode::PageDown => Action::HelpScroll(10),
            _ => Action::ToggleHelp,
        };
    }
    if app.neighbors.editing {
        // The search box has the keyboard: letters are letters, not commands.
        return search_action(key.code);
    }
    if app.typing.is_some() {
        // So does a value being typed.
        return typing_key(key.code);
    }
    // The workbench's keys first (so `s`, `d`, `p` beat any pane), then the focused pane's,
    // then the loss curve's smoothing and the search, which a pane's keys may take.
    global_key(key.code)
        .or_else(|| pane_key(app.focus, key.code))
        .unwrap_or_else(|| match key.code {
            // Outside Controls, the loss curve's smoothing, as in `conelab compare`.
            KeyCode::Char('+') => Action::Smoothing(0.1),
            KeyCode::Char('-') => Action::Smoothing(-0.1),
            KeyCode::Char('0') => Action::Smoothing(-1.0),
            KeyCode::Char('/') => Action::SearchStart,
            _ => Action::None,
        })
}

/// The keys that mean the same whatever pane has the focus.
fn global_key(code: KeyCode) -> Option<Action> {
    Some(match code {
        KeyCode::Char('q') => Action::Quit,
        KeyCode::Char('d') => Action::Detach,
        KeyCode::Char('?') => Action::ToggleHelp,
        KeyCode::Tab => Action::FocusNext,
        KeyCode::BackTab => Action::FocusPrev,
        KeyCode::Char(c @ '1'..='8') => {
            let i = (c as u8 - b'1') as usize;
            Action::Focus(Pane::ALL[i])
        }
        KeyCode::Char('z') => Action::ToggleZoom,
        KeyCode::Esc => Action::Cancel,
        KeyCode::Char('p') => Action::TogglePause,
        KeyCode::Char('s') => Action::SaveCheckpoint,
        KeyCode::Char('l') => Action::ToggleLogY,
        KeyCode::Char('m') => Action::ToggleSmoothing,
        KeyCode::Char('M') => Action::ToggleMouse,
        _ => return None,
    })
}

/// The focused pane's own keys (each pane's part of the app says them).
fn pane_key(focus: Pane, code: KeyCode) -> Option<Action> {
    match focus {
        Pane::Controls => controls_key(code),
        Pane::Neighbors => neighbors_key(code),
        Pane::Scatter => time_scrub_key(code, true),
        Pane::Groups | Pane::Spectrum => time_scrub_key(code, false),
        Pane::Progress | Pane::Events | Pane::SelfNorm => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::{Effect, ViewOptions};
    use conelab_core::events::Command;
    use conelab_core::objective::{ObjectiveChange, Objectives, Term};
    use conelab_protocol::view::RunStatus;

    fn key(code: KeyCode) -> KeyEvent {
        KeyEvent::new(code, KeyModifiers::NONE)
    }

    fn running() -> App {
        let mut app = App::new(Objectives::default(), ViewOptions::default());
        app.run.status = RunStatus::Running;
        app
    }

    fn press(app: &mut App, code: KeyCode) -> Effect {
        let action = action_for(app, key(code));
        app.apply(action)
    }

    /// `=` and `text` typed into the selected control (not yet accepted).
    fn type_in(app: &mut App, text: &str) {
        press(app, KeyCode::Char('='));
        for c in text.chars() {
            press(app, KeyCode::Char(c));
        }
    }

    /// The newest line of the run's log.
    fn last_said(app: &App) -> String {
        app.run
            .log
            .back()
            .map(|l| l.text.clone())
            .unwrap_or_default()
    }

    /// Issue #58: `m` smoothed the workbench's loss at 0.9 where the compare view's default is
    /// 0.6: one curve, one weight, in both views.
    #[test]
    fn the_workbench_smooths_with_the_compare_views_weight() {
        let mut app = running();
        press(&mut app, KeyCode::Char('m'));
        let compare = crate::compare::CompareOptions::default().smoothing;
        assert_eq!(app.smoothing, compare);
        assert_eq!(compare, 0.6, "TensorBoard's default");
    }

    /// Issue #58: an empty search listed nothing; `/` now offers the most frequent words.
    #[test]
    fn a_new_search_offers_the_most_frequent_words() {
        let mut app = running();
        app.vocab = Some(std::sync::Arc::new(conelab_protocol::view::Vocabulary {
            tokens: ["rare", "the", "of", "cone"].map(String::from).to_vec(),
            counts: vec![1, 500, 300, 2],
        }));
        press(&mut app, KeyCode::Char('/'));
        assert!(app.neighbors.editing);
        assert_eq!(app.neighbors.matches[..3], [1, 2, 3]);
    }

    #[test]
    fn shift_m_hands_the_mouse_to_the_terminal_and_back() {
        let mut app = running();
        assert!(app.mouse, "captured by default");
        press(&mut app, KeyCode::Char('M'));
        assert!(!app.mouse);
        assert!(last_said(&app).contains("mouse off"), "{}", last_said(&app));
        press(&mut app, KeyCode::Char('m'));
        assert!(
            !app.mouse && app.smoothing == crate::format::DEFAULT_SMOOTHING,
            "m is smoothing, not the mouse"
        );
        // Outside Controls, + and - step the weight as compare's do; m turns it off and back.
        press(&mut app, KeyCode::Char('-'));
        let lowered = app.smoothing;
        assert!((lowered - 0.5).abs() < 1e-9, "{lowered}");
        press(&mut app, KeyCode::Char('m'));
        assert_eq!(app.smoothing, 0.0);
        press(&mut app, KeyCode::Char('m'));
        assert_eq!(app.smoothing, lowered);
        press(&mut app, KeyCode::Char('0'));
        assert_eq!(app.smoothing, 0.0);
        press(&mut app, KeyCode::Char('m'));
        assert_eq!(app.smoothing, lowered, "m after 0: the weight it had");
        press(&mut app, KeyCode::Char('M'));
        assert!(app.mouse && last_said(&app).contains("mouse on"));
        let app = App::new(
            Objectives::default(),
            ViewOptions {
                no_mouse: true,
                ..ViewOptions::default()
            },
        );
        assert!(!app.mouse, "--no-mouse starts without capture");
    }

    #[test]
    fn quitting_a_running_training_asks_first() {
        let mut app = running();
        assert_eq!(press(&mut app, KeyCode::Char('q')), Effect::None);
        assert!(app.confirm_quit);
        assert_eq!(press(&mut app, KeyCode::Esc), Effect::None);
        assert!(!app.confirm_quit, "cancel closes the dialog");
        press(&mut app, KeyCode::Char('q'));
        assert_eq!(
            press(&mut app, KeyCode::Char('s')),
            Effect::Send(Command::Stop { save: true })
        );
        assert!(!app.should_exit(), "waits for the engine to finish");
        app.run.status = RunStatus::Finished {
            reason: conelab_core::events::FinishReason::Stopped,
        };
        assert!(app.should_exit());
        let mut app = running();
        press(&mut app, KeyCode::Char('q'));
        assert_eq!(
            press(&mut app, KeyCode::Char('x')),
            Effect::Send(Command::Stop { save: false })
        );
    }

    #[test]
    fn a_finished_run_quits_at_once_and_ctrl_c_asks_like_q() {
        let mut app = running();
        app.run.status = RunStatus::Finished {
            reason: conelab_core::events::FinishReason::Completed,
        };
        assert_eq!(press(&mut app, KeyCode::Char('q')), Effect::Exit);
        let mut app = running();
        let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
        let action = action_for(&app, ctrl_c);
        assert_eq!(app.apply(action), Effect::None);
        assert!(app.confirm_quit, "Ctrl-C asks");
        assert_eq!(press(&mut app, KeyCode::Char('d')), Effect::Detach);
        assert!(!app.exit_when_finished, "detaching leaves the run alone");
        // Ctrl-C Ctrl-C: stop and save, as Ctrl-C does to a headless run.
        let mut app = running();
        let action = action_for(&app, ctrl_c);
        app.apply(action);
        let action = action_for(&app, ctrl_c);
        assert_eq!(action, Action::StopAndSave);
        app.apply(action);
        assert!(!app.confirm_quit, "the dialog is answered");
    }

    #[test]
    fn d_detaches_a_live_run_at_once_and_leaves_a_read_only_one() {
        let mut app = running();
        assert_eq!(press(&mut app, KeyCode::Char('d')), Effect::Detach);
        let mut app = running();
        app.read_only = Some("read-only: the run completed".into());
        app.run.status = RunStatus::Finished {
            reason: conelab_core::events::FinishReason::Completed,
        };
        assert_eq!(press(&mut app, KeyCode::Char('d')), Effect::Exit);
        assert_eq!(press(&mut app, KeyCode::Char('q')), Effect::Exit);
        // No command leaves a read-only view.
        app.focus = Pane::Controls;
        assert_eq!(press(&mut app, KeyCode::Char(' ')), Effect::None);
        assert_eq!(press(&mut app, KeyCode::Char('p')), Effect::None);
    }

    fn applied(step: u64, command: Command) -> conelab_core::events::Event {
        conelab_core::events::Event::Applied(conelab_core::events::AppliedCommand {
            step,
            change: conelab_core::change::Change::from_words(&command, "", "", false),
            command,
            ticket: None,
            coalesced: false,
        })
    }

    fn controls_text(app: &App) -> String {
        use ratatui::{Terminal, backend::TestBackend};
        let mut t = Terminal::new(TestBackend::new(200, 60)).expect("backend");
        t.draw(|f| crate::ui::render(f, app, None)).expect("draw");
        t.backend().to_string()
    }

    fn select(app: &mut App, control: crate::app::Control) {
        app.focus = Pane::Controls;
        app.controls_cursor = crate::app::Control::ALL
            .iter()
            .position(|c| *c == control)
            .expect("a control");
    }

    /// Issue #37: a paused run's lr is changed from the value the run acknowledged (not the
    /// last step's), shows "pending" until the run answers, can be typed, and a change to what
    /// is in force — or to a term that is off — is not sent.
    #[test]
    fn values_step_from_the_acknowledged_one_show_pending_and_can_be_typed() {
        use crate::app::Control;
        let mut app = running();
        app.run.status = RunStatus::Paused;
        app.run.lr = Some(9943.0);
        select(&mut app, Control::LearningRate);
        let half = |lr: f64| Effect::Send(Command::SetLr { lr });
        assert_eq!(press(&mut app, KeyCode::Char('-')), half(4971.5));
        assert_eq!(app.pending, Some((Control::LearningRate, 4971.5)));
        let text = controls_text(&app);
        assert!(text.contains("lr → 4972 pending"), "{text}");
        // Another viewer's change of another line leaves it pending.
        app.on_event(applied(
            1048,
            Command::Objective {
                change: ObjectiveChange::Enable {
                    term: Term::Dev,
                    on: true,
                },
            },
        ));
        assert_eq!(app.pending, Some((Control::LearningRate, 4971.5)));
        // Acknowledged while paused (no step comes): the line shows it, the next press halves it.
        let mut ack = applied(1048, Command::SetLr { lr: 4971.5 });
        if let conelab_core::events::Event::Applied(a) = &mut ack {
            a.change = conelab_core::change::Change::Lr {
                before: 9943.0,
                after: 4971.5,
                schedule_off_from: Some(1048),
            };
        }
        app.on_event(ack);
        assert_eq!(app.pending, None);
        assert_eq!(app.run.lr, Some(4971.5));
        let text = controls_text(&app);
        assert!(text.contains("lr             4.972e3"), "{text}");
        assert!(text.contains("│lr schedule off from step 1048"), "{text}");
        assert!(!text.contains("pending"), "{text}");
        assert_eq!(press(&mut app, KeyCode::Char('-')), half(2485.75));
        app.on_event(applied(1048, Command::SetLr { lr: 2485.75 }));
        // Typed: `=`, the number, Enter.
        type_in(&mut app, "1e-3");
        assert!(controls_text(&app).contains("lr = 1e-3_"));
        // Letters are input while typing, not commands (`p` would pause), and said not taken.
        assert_eq!(press(&mut app, KeyCode::Char('p')), Effect::None);
        let said = last_said(&app);
        assert!(said.contains("'p' not taken"), "{said}");
        assert_eq!(press(&mut app, KeyCode::Enter), half(1e-3));
        // A number written out in full is taken whole (cut at 24 characters, 0.000…1 was 0).
        type_in(&mut app, &format!("0.{}1", "0".repeat(44)));
        assert_eq!(press(&mut app, KeyCode::Enter), half(1e-45));
        app.on_event(applied(1048, Command::SetLr { lr: 1e-45 }));
        type_in(&mut app, "1e-3");
        assert_eq!(press(&mut app, KeyCode::Enter), half(1e-3));
        assert_eq!(app.typing, None);
        app.on_event(applied(1048, Command::SetLr { lr: 1e-3 }));
        // The value in force: nothing sent. Garbage: nothing sent, said. Esc: nothing.
        type_in(&mut app, "0.001");
        assert_eq!(press(&mut app, KeyCode::Enter), Effect::None);
        assert_eq!(app.pending, None);
        type_in(&mut app, "1e");
        assert_eq!(press(&mut app, KeyCode::Enter), Effect::None);
        let said = last_said(&app);
        assert!(said.contains("not a finite number"), "{said}");
        press(&mut app, KeyCode::Char('='));
        press(&mut app, KeyCode::Char('5'));
        assert_eq!(press(&mut app, KeyCode::Esc), Effect::None);
        assert_eq!(app.typing, None);
        // A refusal ends the pending state too.
        assert_eq!(press(&mut app, KeyCode::Char('+')), half(2e-3));
        app.on_event(conelab_core::events::Event::Rejected {
            step: 1048,
            command: Command::SetLr { lr: 2e-3 },
            reason: "no".into(),
            ticket: None,
        });
        assert_eq!(app.pending, None);
        assert_eq!(app.run.lr, Some(1e-3));
        // A term that is off: its weight is not sent (the change would be recorded nowhere).
        select(&mut app, Control::Term(Term::Lap));
        assert_eq!(press(&mut app, KeyCode::Char('+')), Effect::None);
        let said = last_said(&app);
        assert!(said.contains("is off"), "{said}");
    }

    /// AGG switched on from the Controls with the paper's α is scaled to the run's tokens per
    /// update (issue #37: at 1,024 tokens the paper's 0.03 made 4,737 of 5,002 tokens rare).
    #[test]
    fn agg_switched_on_with_the_papers_alpha_is_scaled_to_the_run() {
        use crate::app::Control;
        let mut app = running();
        app.run.info.tokens_per_update = 1024;
        select(&mut app, Control::Term(Term::Agg));
        let scaled = 0.03 * 1024.0 / 32768.0;
        assert_eq!(
            press(&mut app, KeyCode::Char(' ')),
            Effect::SendAll(vec![
                Command::Objective {
                    change: ObjectiveChange::Enable {
                        term: Term::Agg,
                        on: true
                    }
                },
                Command::Objective {
                    change: ObjectiveChange::Weight {
                        term: Term::Agg,
                        weight: scaled
                    }
                },
            ])
        );
        let said = last_said(&app);
        assert!(said.contains("9.4e-4") && said.contains("1024"), "{said}");
        // At the paper's own size, or with α set by hand, Space only switches it on.
        let mut app = running();
        app.run.info.tokens_per_update = 32768;
        select(&mut app, Control::Term(Term::Agg));
        assert_eq!(
            press(&mut app, KeyCode::Char(' ')),
            Effect::Send(Command::Objective {
                change: ObjectiveChange::Enable {
                    term: Term::Agg,
                    on: true
                }
            })
        );
        let mut app = running();
        app.run.info.tokens_per_update = 1024;
        app.run.objectives.agg.alpha = 0.01;
        select(&mut app, Control::Term(Term::Agg));
        assert!(matches!(
            press(&mut app, KeyCode::Char(' ')),
            Effect::Send(Command::Objective { .. })
        ));
    }

    /// A run that ended as the connection went (its last events unread) is shown as its final
    /// record says, not as crashed.
    #[test]
    fn a_lost_connection_reads_how_the_run_ended() {
        let tmp = tempfile::tempdir().expect("tmp");
        let hello = |dir: &std::path::Path| conelab_protocol::message::RunHello {
            run_id: "r".into(),
            dir: dir.to_path_buf(),
            pid: 1,
            host: "h".into(),
            vocab_size: 10,
            group_bounds: [0.3, 0.8],
            status: RunStatus::Running,
            live: true,
            labels: Default::default(),
        };
        let mut app = running();
        app.hello = Some(hello(tmp.path()));
        conelab_core::run_dir::live::conclude(
            tmp.path(),
            &conelab_core::run_dir::live::FinalRecord {
                status: "failed".into(),
                step: 29,
                total_steps: 1000,
                exit_code: 4,
                message: "the training backend panicked".into(),
                by_signal: false,
                finished_unix: 0.0,
                host: "h".into(),
            },
        )
        .expect("final record");
        app.on_disconnect();
        assert_eq!(
            app.run.status,
            RunStatus::Failed {
                message: "the training backend panicked".into()
            }
        );
        // Without a final record: crashed, as before.
        let empty = tempfile::tempdir().expect("tmp");
        let mut app = running();
        app.hello = Some(hello(empty.path()));
        app.on_disconnect();
        assert_eq!(app.run.status, RunStatus::Crashed);
    }

    #[test]
    fn controls_turn_objectives_into_commands() {
        let mut app = running();
        press(&mut app, KeyCode::Char('5'));
        assert_eq!(app.focus, Pane::Controls);
        // The first control is CosReg: space switches it on.
        assert_eq!(
            press(&mut app, KeyCode::Char(' ')),
            Effect::Send(Command::Objective {
                change: ObjectiveChange::Enable {
                    term: Term::Cos,
                    on: true
                }
            })
        );
        // A weight steps from what the run acknowledged: CosReg on (the run's answer).
        app.on_event(applied(
            3,
            Command::Objective {
                change: ObjectiveChange::Enable {
                    term: Term::Cos,
                    on: true,
                },
            },
        ));
        assert_eq!(
            press(&mut app, KeyCode::Char('+')),
            Effect::Send(Command::Objective {
                change: ObjectiveChange::Weight {
                    term: Term::Cos,
                    weight: 2.0
                }
            })
        );
        // Down to the rare group's freeze (controls 7–9 are the groups).
        for _ in 0..8 {
            press(&mut app, KeyCode::Down);
        }
        assert_eq!(
            press(&mut app, KeyCode::Enter),
            Effect::Send(Command::Objective {
                change: ObjectiveChange::Freeze {
                    group: conelab_data::Group::Rare,
                    frozen: true
                }
            })
        );
        // Up wraps around to the last control: the loss. `+`/`-` choose a data term without
        // sending anything (nothing trains with the ones passed on the way); Enter applies it.
        app.controls_cursor = 0;
        press(&mut app, KeyCode::Up);
        assert_eq!(app.controls_cursor, crate::app::Control::count() - 1);
        let loss = |kind, squash| {
            Effect::Send(Command::Objective {
                change: ObjectiveChange::Loss { kind, squash },
            })
        };
        use conelab_core::objective::LossKind;
        assert_eq!(
            press(&mut app, KeyCode::Enter),
            Effect::None,
            "nothing chosen"
        );
        for _ in 0..4 {
            assert_eq!(press(&mut app, KeyCode::Char('+')), Effect::None);
        }
        assert_eq!(press(&mut app, KeyCode::Enter), loss(LossKind::And, true));
        assert_eq!(app.pending_loss, None, "applied, no longer pending");
        // `-` from mle goes back round to and:squash; back to the one in force is no choice.
        assert_eq!(press(&mut app, KeyCode::Char('-')), Effect::None);
        assert_eq!(press(&mut app, KeyCode::Enter), loss(LossKind::And, true));
        press(&mut app, KeyCode::Char('+'));
        press(&mut app, KeyCode::Char('-'));
        assert_eq!(app.pending_loss, None);
        assert_eq!(press(&mut app, KeyCode::Enter), Effect::None);
        // The cycle starts from the term in force; moving away forgets a choice.
        app.run.objectives.loss = LossKind::NceR;
        press(&mut app, KeyCode::Char('+'));
        assert_eq!(press(&mut app, KeyCode::Enter), loss(LossKind::And, false));
        press(&mut app, KeyCode::Char('+'));
        press(&mut app, KeyCode::Up);
        press(&mut app, KeyCode::Down);
        assert_eq!(press(&mut app, KeyCode::Enter), Effect::None);
    }

    #[test]
    fn the_search_box_takes_letters_and_enter_selects_a_match() {
        use conelab_protocol::view::Vocabulary;
        let vocab = Vocabulary {
            tokens: ["the", "of", "quantum", "quasar"]
                .map(String::from)
                .to_vec(),
            counts: vec![9, 8, 2, 1],
        };
        let mut app = running().with_vocabulary(std::sync::Arc::new(vocab));
        press(&mut app, KeyCode::Char('/'));
        assert_eq!(app.focus, Pane::Neighbors);
        assert!(app.neighbors.editing);
        // 'q' and 'p' are quit and pause elsewhere; here they are letters.
        for c in ['q', 'u', 'a'] {
            assert_eq!(press(&mut app, KeyCode::Char(c)), Effect::None);
        }
        assert!(!app.confirm_quit);
        assert_eq!(app.neighbors.query, "qua");
        assert_eq!(app.neighbors.matches, vec![2, 3]);
        press(&mut app, KeyCode::Down);
        press(&mut app, KeyCode::Enter);
        assert!(!app.neighbors.editing);
        assert_eq!(app.neighbors.selected, Some(3), "the second match");
        press(&mut app, KeyCode::Char('w'));
        assert_eq!(app.neighbors.pinned, vec![3]);
        press(&mut app, KeyCode::Char('/'));
        assert_eq!(app.neighbors.query, "", "a new search starts empty");
        press(&mut app, KeyCode::Char('o'));
        press(&mut app, KeyCode::Char('x'));
        press(&mut app, KeyCode::Backspace);
        assert_eq!(app.neighbors.query, "o");
        assert_eq!(app.neighbors.matches, vec![1]);
        assert_eq!(press(&mut app, KeyCode::Esc), Effect::None);
        assert!(!app.neighbors.editing);
        assert_eq!(
            press(&mut app, KeyCode::Char('p')),
            Effect::Send(Command::Pause),
            "keys are commands again"
        );
    }

    #[test]
    fn a_click_focuses_the_pane_under_it_and_the_wheel_scrolls_it() {
        let app = running();
        let panes = crate::ui::pane_areas(Rect::new(0, 0, 120, 40), &app);
        let centre = |pane: Pane| {
            let r = panes
                .iter()
                .find(|(p, _)| *p == pane)
                .map(|(_, r)| *r)
                .expect("shown");
            (r.x + r.width / 2, r.y + r.height / 2)
        };
        let mouse = |kind, (column, row): (u16, u16)| MouseEvent {
            kind,
            column,
            row,
            modifiers: KeyModifiers::NONE,
        };
        let click = MouseEventKind::Down(MouseButton::Left);
        for pane in [
            Pane::Controls,
            Pane::Scatter,
            Pane::Neighbors,
            Pane::Events,
            Pane::Groups,
        ] {
            assert_eq!(
                mouse_action(&app, mouse(click, centre(pane)), &panes),
                Action::Focus(pane)
            );
        }
        assert_eq!(
            mouse_action(
                &app,
                mouse(MouseEventKind::ScrollDown, centre(Pane::Controls)),
                &panes
            ),
            Action::ControlsDown
        );
        assert_eq!(
            mouse_action(
                &app,
                mouse(MouseEventKind::ScrollUp, centre(Pane::Scatter)),
                &panes
            ),
            Action::Scrub(-1)
        );
        // The header line is no pane.
        assert_eq!(
            mouse_action(&app, mouse(click, (5, 0)), &panes),
            Action::None
        );
        // A too-small screen has no panes to click.
        assert!(crate::ui::pane_areas(Rect::new(0, 0, 40, 10), &app).is_empty());
    }

    #[test]
    fn keys_outside_their_pane_do_nothing_and_help_swallows_the_next_key() {
        let mut app = running();
        assert_eq!(action_for(&app, key(KeyCode::Char(' '))), Action::None);
        assert_eq!(press(&mut app, KeyCode::Char('?')), Effect::None);
        assert!(app.help);
        assert_eq!(press(&mut app, KeyCode::Char('p')), Effect::None);
        assert!(!app.help, "any key closes the help, and does nothing else");
        assert_eq!(
            press(&mut app, KeyCode::Char('p')),
            Effect::Send(Command::Pause)
        );
        app.run.status = RunStatus::Paused;
        assert_eq!(
            press(&mut app, KeyCode::Char('p')),
            Effect::Send(Command::Resume)
        );
        app.run.status = RunStatus::Finished {
            reason: conelab_core::events::FinishReason::Completed,
        };
        assert_eq!(
            press(&mut app, KeyCode::Char('s')),
            Effect::None,
            "no engine to save"
        );
    }
}
