//! Rendering: a pure function of [`App`] into a frame. No state changes, no I/O, so every pane is
//! snapshot-tested on a `TestBackend`.

mod browser;
mod header;
mod overlays;
mod pane;

pub use browser::render_browser;
pub use overlays::help_max_scroll;

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

use crate::app::{App, Pane};
use crate::chrome::{self, MIN_HEIGHT, MIN_WIDTH, Screen, compact, screen, too_small};
use crate::style::Palette;
use conelab_metrics::RowGroups;
use header::header_line;
use overlays::{help_overlay, quit_dialog};
use pane::render_pane;

/// Where each visible pane goes on a screen of `area` (empty when the screen is too small): the
/// layout the renderer draws and the mouse hit-tests.
pub fn pane_areas(area: Rect, app: &App) -> Vec<(Pane, Rect)> {
    if area.width < MIN_WIDTH || area.height < MIN_HEIGHT {
        return Vec::new();
    }
    let body = screen(area, 0).body;
    if app.zoom || compact(area) {
        return vec![(app.focus, body)];
    }
    // The Groups table's ten lines on a tall terminal (50 rows up: the panes below keep room);
    // below, its first five rows show (zoom shows all).
    let groups_height = if body.height >= 48 { 12 } else { 8 };
    let [top, middle, bottom] = Layout::vertical([
        Constraint::Percentage(36),
        Constraint::Length(groups_height),
        Constraint::Min(6),
    ])
    .areas(body);
    let [progress, controls] =
        Layout::horizontal([Constraint::Min(30), Constraint::Length(34)]).areas(top);
    let [scatter, neighbors, right] = Layout::horizontal([
        Constraint::Percentage(36),
        Constraint::Percentage(30),
        Constraint::Percentage(34),
    ])
    .areas(bottom);
    let mut out = vec![
        (Pane::Progress, progress),
        (Pane::Controls, controls),
        (Pane::Groups, middle),
        (Pane::Scatter, scatter),
        (Pane::Neighbors, neighbors),
    ];
    // Spectrum and self-normalisation share a slot: the one with the focus shows.
    let spectral = if app.focus == Pane::SelfNorm {
        Pane::SelfNorm
    } else {
        Pane::Spectrum
    };
    if right.height >= 24 {
        // Tall enough for all three: self-normalisation gets a slot of its own.
        let [spectrum, self_norm, events] = Layout::vertical([
            Constraint::Percentage(40),
            Constraint::Percentage(30),
            Constraint::Percentage(30),
        ])
        .areas(right);
        out.push((Pane::Spectrum, spectrum));
        out.push((Pane::SelfNorm, self_norm));
        out.push((Pane::Events, events));
    } else if right.height >= 14 {
        let [top_right, bottom_right] =
            Layout::vertical([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(right);
        out.push((spectral, top_right));
        out.push((Pane::Events, bottom_right));
    } else {
        // Too short for two panes: the events, unless a spectral pane has the focus.
        let pane = if matches!(app.focus, Pane::Spectrum | Pane::SelfNorm) {
            spectral
        } else {
            Pane::Events
        };
        out.push((pane, right));
    }
    out
}

/// The footer of a compact screen: the panes as tabs, the focused one marked.
fn tab_line(app: &App, pal: &Palette) -> Line<'static> {
    // The focused pane by its title, the others short, so that all eight fit in 80 columns.
    let short = |pane: Pane| match pane {
        Pane::Progress => "1 Prog",
        Pane::Groups => "2 Grps",
        Pane::Scatter => "3 Emb",
        Pane::Spectrum => "4 Spec",
        Pane::Controls => "5 Ctrl",
        Pane::Events => "6 Evts",
        Pane::Neighbors => "7 Nbrs",
        Pane::SelfNorm => "8 Norm",
    };
    let mut spans = Vec::new();
    for pane in Pane::ALL {
        let (text, style) = if pane == app.focus {
            (
                pane.title(),
                pal.fg(Color::LightGreen).add_modifier(Modifier::REVERSED),
            )
        } else {
            (short(pane), pal.fg(Color::DarkGray))
        };
        spans.push(Span::styled(format!(" {text} "), style));
    }
    spans.push(Span::styled(" Tab · ? help", pal.fg(Color::DarkGray)));
    Line::from(spans)
}

/// Draws the whole screen.
pub fn render(frame: &mut Frame, app: &App, groups: Option<&RowGroups>) {
    let area = frame.area();
    if too_small(frame, area) {
        return;
    }
    let pal = Palette {
        no_color: app.view.no_color,
    };
    let Screen { header, footer, .. } = screen(area, 0);
    frame.render_widget(header_line(app, &pal, header.width), header);
    if compact(area) && !app.zoom {
        frame.render_widget(Paragraph::new(tab_line(app, &pal)), footer);
    } else {
        chrome::footer(
            frame,
            footer,
            "? help · q quit · d detach · p pause · s save · Tab/1-8 pane · z zoom · / search · l log-y · m smooth",
            pal.fg(Color::DarkGray),
        );
    }
    for (pane, rect) in pane_areas(area, app) {
        render_pane(frame, app, groups, pane, rect, &pal);
    }
    if app.help {
        help_overlay(frame, area, app.help_scroll);
    }
    if app.confirm_quit {
        quit_dialog(frame, area, &pal);
    }
    if app.view.light {
        conelab_widgets::light_theme(frame.buffer_mut());
    }
}

#[cfg(test)]
mod tests {
    //! Every pane rendered from a fixed state at two sizes (120×40, the default layout, and
    //! 80×24, the smallest comfortable one), zoomed, with the overlays, and too small.

    use std::sync::Arc;

    use ratatui::Terminal;
    use ratatui::backend::TestBackend;

    use super::*;
    use crate::app::Control;
    use crate::app::{Action, ViewOptions};
    use crate::help::HELP;
    use conelab_core::analysis::EmbeddingAnalysis;
    use conelab_core::events::EmbeddingStats;
    use conelab_core::events::{
        AppliedCommand, Command, EvalStats, Event, FinishReason, RunStarted, Snapshot, StepStats,
    };
    use conelab_core::objective::{ObjectiveChange, Objectives, Term};
    use conelab_data::{FrequencyGroups, GroupBounds};
    use conelab_metrics::{
        EmbeddingPanel, Embeddings, OutputAccumulator, OutputBatch, PanelOptions, RowGroups,
        Threads,
    };
    use conelab_protocol::message::ServerMessage;
    use conelab_protocol::view::RunStatus;
    use conelab_protocol::view::Vocabulary;

    const N: usize = 60;
    const D: usize = 8;

    fn groups() -> FrequencyGroups {
        FrequencyGroups::new(N, GroupBounds::new(0.3, 0.8).expect("bounds"))
    }

    fn step(step: u64, loss: f64) -> Event {
        Event::Step(StepStats {
            step,
            epoch: step as f64 / 100.0,
            loss,
            penalty: if step > 40 { 0.0123 } else { 0.0 },
            lr: 1e-3,
            grad_norm: 0.8,
            tokens_per_sec: 2_345.0,
            step_ms: 436.0,
            rare_tokens: None,
            rare_g1: None,
            rare_in_group: None,
        })
    }

    fn eval(step: u64) -> Event {
        let g = groups();
        let mut acc = OutputAccumulator::new(g);
        let targets: Vec<u32> = (0..N as u32).collect();
        let lp: Vec<f32> = (0..N).map(|i| -1.0 - i as f32 * 0.05).collect();
        let log_z: Vec<f32> = (0..N).map(|i| 0.1 * i as f32).collect();
        let entropy: Vec<f32> = (0..N).map(|i| 2.0 + 0.01 * i as f32).collect();
        let argmax: Vec<u32> = (0..N as u32).map(|i| i % 7).collect();
        let prob_sum = vec![1.0f32; N];
        acc.add(OutputBatch {
            targets: &targets,
            target_log_probs: &lp,
            log_z: &log_z,
            entropy: &entropy,
            argmax: &argmax,
            prob_sum: &prob_sum,
        })
        .expect("batch");
        let outputs = acc.finish(N, 0.0);
        Event::Eval(EvalStats {
            step,
            split: "valid".into(),
            loss: outputs.loss,
            ppl: outputs.ppl,
            groups: [
                (outputs.groups[0].ppl, outputs.groups[0].positions),
                (outputs.groups[1].ppl, outputs.groups[1].positions),
                (outputs.groups[2].ppl, outputs.groups[2].positions),
            ],
            positions: N as u64,
            seconds: 1.0,
            outputs: Box::new(outputs),
            hidden: None,
        })
    }

    /// A W with a cone whose rare rows sit further out, at two "times".
    fn analysis(step: u64, spread: f32) -> Arc<EmbeddingAnalysis> {
        let weights: Vec<f32> = (0..N * D)
            .map(|k| {
                let (i, j) = (k / D, k % D);
                let wave = ((i * 7 + j * 3) % 11) as f32 / 11.0 - 0.5;
                let cone = if j == 0 {
                    0.5 + spread * i as f32 / N as f32
                } else {
                    0.0
                };
                wave + cone
            })
            .collect();
        let w = Embeddings::new(N, D, &weights).expect("finite");
        let panel = EmbeddingPanel::compute(
            w,
            Some(&RowGroups::from_ranks(&groups())),
            &PanelOptions {
                threads: Threads::Sequential,
                also_centred: true,
                scale_free: true,
                ..PanelOptions::default()
            },
        )
        .expect("panel");
        Arc::new(EmbeddingAnalysis {
            snapshot: Arc::new(Snapshot {
                step,
                n: N,
                d: D,
                weights,
                spectral: None,
            }),
            panel,
        })
    }

    fn stats(a: &EmbeddingAnalysis) -> Event {
        let stats = EmbeddingStats::from_panel(a.snapshot.step, &a.panel, 0.01).expect("groups");
        Event::Embedding(Box::new(stats))
    }

    /// A run 80 steps in: losses, two evaluations, three snapshots, CosReg switched on at 41.
    /// Issue #37: the ETA counts the evaluations left at the measured time of one and does
    /// not run while paused; the header says an evaluation is under way, and how far.
    #[test]
    fn the_eta_counts_evaluations_and_the_header_says_evaluating() {
        let mut app = app();
        let eta = |app: &App| app.eta_seconds().expect("an ETA");
        // 120 steps left at 436 ms, then the final validation and test passes (1 s each, as
        // the fixture's evaluation measured).
        assert!(
            (eta(&app) - (120.0 * 0.436 + 2.0)).abs() < 1e-9,
            "{}",
            eta(&app)
        );
        // Validation every 50 steps: at 100, 150 and 200 (the final one), then the test pass.
        app.run.info.eval_every = 50;
        assert!(
            (eta(&app) - (120.0 * 0.436 + 4.0)).abs() < 1e-9,
            "{}",
            eta(&app)
        );
        app.on_event(Event::EvalProgress {
            step: 80,
            split: "valid".into(),
            done: 25,
            total: 100,
        });
        assert!(
            (eta(&app) - (120.0 * 0.436 + 4.75)).abs() < 1e-9,
            "{}",
            eta(&app)
        );
        let text = draw(&app, 120, 40);
        let header = text.lines().next().expect("header");
        assert!(header.contains("evaluating valid 25 %"), "{header}");
        assert!(!header.contains("running"), "{header}");
        // Paused: no ETA ticking, the header says paused.
        app.on_event(Event::Paused { step: 80 });
        assert_eq!(app.eta_seconds(), None);
        let header = draw(&app, 120, 40)
            .lines()
            .next()
            .expect("header")
            .to_string();
        assert!(
            header.contains("paused") && !header.contains("ETA"),
            "{header}"
        );
        // Its result ends the evaluation.
        app.on_event(Event::Resumed { step: 80 });
        app.on_event(eval(80));
        assert!(app.run.evaluating.is_none());
        let header = draw(&app, 120, 40)
            .lines()
            .next()
            .expect("header")
            .to_string();
        assert!(header.contains("running"), "{header}");
    }

    /// Issue #37: the time scrub moved the scatter only, and Home/End did nothing. The Groups
    /// table's embedding rows follow it (its corner says the step); Home and End jump.
    #[test]
    fn the_time_scrub_moves_the_groups_table_too_and_home_end_jump() {
        use ratatui::crossterm::event::{KeyCode, KeyEvent};
        let mut app = app();
        app.focus = Pane::Groups;
        let press = |app: &mut App, code: KeyCode| {
            let a = crate::keys::action_for(app, KeyEvent::from(code));
            app.apply(a)
        };
        let newest = draw(&app, 120, 40);
        assert!(!newest.contains("@1 "), "{newest}");
        press(&mut app, KeyCode::Home);
        assert_eq!(app.scrub, Some(0));
        let first = app.run.embedding[0];
        let text = draw(&app, 120, 40);
        assert!(text.contains(&format!("@{}", first.step)), "{text}");
        // The first snapshot's total I1, as the history holds it.
        assert!(text.contains(&format!("{:.3}", first.i1[3])), "{text}");
        press(&mut app, KeyCode::End);
        assert_eq!(app.scrub, None, "End follows the live snapshot again");
        press(&mut app, KeyCode::Char('['));
        assert!(app.scrub.is_some(), "[ steps back from the Groups pane");
        press(&mut app, KeyCode::End);
        press(&mut app, KeyCode::Left);
        assert!(app.scrub.is_some(), "← too");
    }

    /// Issue #37: "Groups and Spectrum stay on the newest snapshot" while scrubbing. The
    /// spectrum shown is the scrubbed snapshot's, labelled with its step.
    #[test]
    fn the_time_scrub_moves_the_spectrum_too() {
        use ratatui::crossterm::event::{KeyCode, KeyEvent};
        let mut app = app();
        app.focus = Pane::Spectrum;
        let newest = draw(&app, 120, 40);
        assert!(newest.contains("── now"), "{newest}");
        let a = crate::keys::action_for(&app, KeyEvent::from(KeyCode::Home));
        app.apply(a);
        assert_eq!(app.scrub, Some(0), "Home from the Spectrum pane");
        // The first snapshot's spectrum, as the run's first analysis computed it.
        let first = app.run.first_spectrum.clone().expect("a first spectrum");
        let frame = app.scatter_frame().expect("the first frame");
        assert_eq!((frame.step, &frame.spectrum), (1, &first));
        let newest_sv = &app
            .analysis
            .as_ref()
            .expect("an analysis")
            .panel
            .total
            .sv_norm;
        assert_ne!(
            &first, newest_sv,
            "the snapshots differ, so the test can tell"
        );
        let text = draw(&app, 120, 40);
        assert!(text.contains("── step 1"), "{text}");
        assert!(!text.contains("── now"), "{text}");
        let a = crate::keys::action_for(&app, KeyEvent::from(KeyCode::End));
        app.apply(a);
        assert!(draw(&app, 120, 40).contains("── now"));
    }

    /// Issue #39 part 1: the process's load in a Progress sub-line once it has been sampled.
    #[test]
    fn the_progress_pane_shows_the_process_load() {
        use conelab_core::events::SystemStats;
        let mut app = app();
        assert!(!draw(&app, 120, 40).contains("rss"));
        const GIB: u64 = 1 << 30;
        app.on_event(Event::System(SystemStats {
            step: 80,
            cpu_percent: 197.6,
            rss_bytes: 3 * GIB / 2,
            host_used_bytes: 10 * GIB,
            host_total_bytes: 24 * GIB,
            gpu: None,
        }));
        let text = draw(&app, 120, 40);
        assert!(
            text.contains("cpu 198% · rss 1.5G · host 10.0G/24.0G"),
            "{text}"
        );
        assert!(!text.contains("gpu"), "a CPU run has no GPU part: {text}");
        // A CUDA run: the device's load after the process's; a board without a power sensor.
        app.on_event(Event::System(SystemStats {
            step: 90,
            cpu_percent: 99.0,
            rss_bytes: 2 * GIB,
            host_used_bytes: 10 * GIB,
            host_total_bytes: 24 * GIB,
            gpu: Some(conelab_core::events::GpuStats {
                util_percent: 87.4,
                mem_used_bytes: 30 * GIB,
                mem_total_bytes: 80 * GIB,
                power_watts: f64::NAN,
                temp_c: 64.0,
            }),
        }));
        let text = draw(&app, 120, 40);
        assert!(
            text.contains("cpu 99% · rss 2.0G · host 10.0G/24.0G · gpu 87% 30.0G/80.0G – 64°C"),
            "{text}"
        );
    }

    /// Issue #39 part 6: a run watched while it trains rings the bell once when it ends; a view
    /// of a run that has ended already does not.
    #[test]
    fn the_bell_rings_once_when_a_watched_run_ends() {
        use conelab_core::events::FinishReason;
        let mut app = app();
        assert!(!app.bell, "training: no bell");
        app.on_event(Event::Finished {
            step: 80,
            reason: FinishReason::Completed,
        });
        assert!(std::mem::take(&mut app.bell), "the end rings");
        app.on_event(Event::Finished {
            step: 80,
            reason: FinishReason::Completed,
        });
        assert!(!app.bell, "once");
        let mut ended = App::new(Objectives::default(), app.view);
        ended.on_event(Event::Finished {
            step: 80,
            reason: FinishReason::Completed,
        });
        assert!(!ended.bell, "a run seen only after it ended");
    }

    /// Issue #38 part 5: under spectrum control the Spectrum pane draws the prior's shape and
    /// says σ₁ against t₁, the prior gap, σ against W and U's orthogonality.
    #[test]
    fn the_spectrum_pane_shows_spectrum_control_against_its_prior() {
        use conelab_core::events::SpectralStats;
        let mut app = app();
        app.focus = Pane::Spectrum;
        assert!(!draw(&app, 120, 40).contains("prior"));
        let a = app.analysis.clone().expect("an analysis");
        let Event::Embedding(mut stats) = stats(&a) else {
            unreachable!("stats() makes an Embedding event")
        };
        // σ = (3, 1) against t = (4, 2): ‖σ − t‖/‖t‖ = √2/√20 = 31.6 %.
        stats.spectral = Some(SpectralStats {
            update: "proximal".into(),
            u_orth: 0.02,
            v_orth: 0.01,
            sigma: vec![3.0, 1.0],
            targets: vec![4.0, 2.0],
            sigma_vs_w: 0.005,
        });
        app.on_event(Event::Embedding(stats));
        let text = draw(&app, 120, 40);
        for needle in [
            "σ₁ 3 → prior 4",
            "off prior 31.6%",
            "σ vs W 0.5%",
            "σ proximal",
            "prior",
        ] {
            assert!(text.contains(needle), "{needle:?} missing in:\n{text}");
        }
    }

    /// Issue #38: the Groups pane shows the context gain over the corpus's KN-3 trigram,
    /// ln(PPL_KN3 / PPL), per group, once the run has announced its reference.
    /// The hidden states of the newest validation and the newest second tier reach the Groups
    /// pane's rows, in the columns they belong to, and their histories its sparklines.
    #[test]
    fn the_groups_pane_shows_the_hidden_states_and_the_second_tier() {
        use conelab_core::events::SecondTierStats;
        use conelab_metrics::hidden::HiddenStats;
        let mut a = app();
        a.zoom = true;
        a.focus = Pane::Groups;
        let mut eval = a.run.last_eval.clone().expect("an evaluation");
        eval.step += 1;
        eval.hidden = Some(Box::new(HiddenStats {
            positions: 4096,
            mean_cos: 0.625,
            isoscore: 0.25,
            self_sim: vec![0.111, 0.222, 0.333],
            self_sim_types: [64; 3],
            separable: true,
            margin: 0.0625,
            certificate: 0.0625,
            proven: true,
            support: 2,
            neg_u_rare_cos: 0.875,
            direction: Vec::new(),
            weights: Vec::new(),
        }));
        a.on_event(Event::Eval(eval));
        let mut emb = a.run.last_embedding.clone().expect("an analysis");
        emb.step += 1;
        emb.second_tier = Some(SecondTierStats {
            same_group: vec![0.444, 0.555, 0.666],
            two_nn: vec![12.5, 20.0, 31.5],
            two_nn_duplicates: vec![0, 0, 0],
            stolen_at_most: vec![7, 8, 9],
            seconds: 1.0,
        });
        a.on_event(Event::Embedding(Box::new(emb)));
        let text = draw(&a, 120, 60);
        let row = |label: &str| -> Vec<String> {
            text.lines()
                .find(|l| l.contains(label))
                .unwrap_or_else(|| panic!("no {label} row in {text}"))
                .split('│')
                .nth(1)
                .unwrap_or_default()
                .trim_start_matches(label)
                .split_whitespace()
                .map(str::to_string)
                .collect()
        };
        assert_eq!(row("h self-sim")[..3], ["0.111", "0.222", "0.333"]);
        assert_eq!(row("h mean cos"), ["–", "–", "–", "0.625"]);
        assert_eq!(row("h separ."), ["–", "–", "–", "yes", "0.062"]);
        assert_eq!(row("cos(-u,R)"), ["–", "–", "0.875", "–"]);
        assert_eq!(row("nbr same g")[..3], ["0.444", "0.555", "0.666"]);
        assert_eq!(row("TwoNN dim")[..3], ["12.5", "20.0", "31.5"]);
        assert_eq!(row("stolen ≤"), ["7", "8", "9", "24"]);
        assert!(text.contains("h margin"), "the margin's history: {text}");
    }

    #[test]
    fn the_groups_pane_shows_the_gain_over_kn3() {
        use conelab_core::events::{ReferencePpl, SplitReferencePpl};
        let mut app = app();
        let before = draw(&app, 120, 40);
        let row = |text: &str| {
            text.lines()
                .find(|l| l.contains("gain KN-3"))
                .map(str::to_string)
                .expect("a gain row")
        };
        assert!(
            !before.contains("gain KN-3"),
            "no reference, no row: {before}"
        );
        let eval = app.run.last_eval.clone().expect("an evaluation");
        // References chosen so the gains are known: twice the frequent PPL, half the rare one.
        let kn3 = vec![
            2.0 * eval.groups[0].0,
            eval.groups[1].0,
            0.5 * eval.groups[2].0,
            eval.ppl * 1.5f64.exp(),
        ];
        app.on_event(Event::Reference(Box::new(ReferencePpl {
            step: 0,
            splits: vec![SplitReferencePpl {
                split: "valid".into(),
                kn3,
                unigram: vec![f64::NAN; 4],
            }],
        })));
        let line = row(&draw(&app, 120, 40));
        let cells: Vec<&str> = line.split_whitespace().collect();
        let want = [
            format!("{:+.2}", 2f64.ln()),
            "+0.00".to_string(),
            format!("{:+.2}", 0.5f64.ln()),
            "+1.50".to_string(),
        ];
        for w in &want {
            assert!(cells.contains(&w.as_str()), "{w} in {line}");
        }
    }

    /// Issue #37: a foreign matrix's word read "#12 · ×0 · step 0": only what is known.
    #[test]
    fn a_words_heading_says_only_what_is_known() {
        use super::pane::word_head;
        assert_eq!(word_head(false, "#12", "", None, None), "#12");
        assert_eq!(
            word_head(true, "house", "rare", Some(12), Some(500)),
            "★ house · rare ×12 · step 500"
        );
        assert_eq!(word_head(false, "house", "", Some(3), None), "house · ×3");
    }

    /// Issue #37: at 80×24 the loss plot and the scatter got 2–3 rows: the focused pane takes
    /// the body and the footer lists the panes as tabs. On a tall screen Self-norm has a slot
    /// of its own (it showed only while focused, in Spectrum's).
    #[test]
    fn a_small_terminal_shows_one_pane_with_tabs_and_a_tall_one_shows_self_norm() {
        let mut app = app();
        let areas = pane_areas(Rect::new(0, 0, 80, 24), &app);
        assert_eq!(areas.len(), 1);
        assert_eq!(areas[0].0, Pane::Progress);
        assert_eq!(areas[0].1.height, 22, "all but the header and the footer");
        let text = draw(&app, 80, 24);
        let footer = text.lines().last().expect("footer");
        assert!(
            footer.contains("1 Progress") && footer.contains("2 Grps") && footer.contains("8 Norm"),
            "{footer}"
        );
        app.apply(Action::FocusNext);
        let areas = pane_areas(Rect::new(0, 0, 80, 24), &app);
        assert_eq!((areas.len(), areas[0].0), (1, Pane::Groups));
        // 120×40 keeps the full layout; 120×60 gives Self-norm its own slot beside Spectrum.
        assert!(pane_areas(Rect::new(0, 0, 120, 40), &app).len() >= 6);
        let tall: Vec<Pane> = pane_areas(Rect::new(0, 0, 120, 60), &app)
            .into_iter()
            .map(|(p, _)| p)
            .collect();
        assert!(
            tall.contains(&Pane::Spectrum) && tall.contains(&Pane::SelfNorm),
            "{tall:?}"
        );
    }

    /// Issue #37: at 80×24 the help dropped its last lines silently: it says how many are
    /// below and scrolls to them.
    #[test]
    fn a_help_taller_than_the_terminal_scrolls() {
        let mut app = app();
        app.apply(Action::ToggleHelp);
        let text = draw(&app, 80, 24);
        assert!(text.contains("more (↑↓ scroll)"), "{text}");
        assert!(!text.contains("In the quit dialog"), "{text}");
        for _ in 0..200 {
            app.apply(crate::keys::action_for(
                &app,
                ratatui::crossterm::event::KeyEvent::from(ratatui::crossterm::event::KeyCode::Down),
            ));
        }
        assert!(app.help, "scrolling keeps the help open");
        let text = draw(&app, 80, 24);
        assert!(text.contains("In the quit dialog"), "the last line: {text}");
        assert!(text.contains("↓ 0 more"), "{text}");
        assert!(
            !text.contains("this help (↑↓"),
            "the first line scrolled away: {text}"
        );
        // Any other key closes it; opened again it starts at the top.
        app.apply(crate::keys::action_for(
            &app,
            ratatui::crossterm::event::KeyEvent::from(ratatui::crossterm::event::KeyCode::Char(
                'x',
            )),
        ));
        assert!(!app.help);
        app.apply(Action::ToggleHelp);
        assert!(draw(&app, 80, 24).contains("this help (↑↓"));
        // Tall enough: no scroll marks, nothing to scroll.
        assert!(!draw(&app, 120, 60).contains("more (↑↓ scroll)"));
        assert_eq!(help_max_scroll(Rect::new(0, 0, 120, 60)), 0);
        // At 80×24 it scrolls by exactly what is hidden: the 22 rows hold 20 of its lines.
        let max = help_max_scroll(Rect::new(0, 0, 80, 24));
        assert!(max > 0 && max < 20, "{max}");
        app.help_scroll = max;
        assert!(draw(&app, 80, 24).contains("↓ 0 more"));
        app.help_scroll = max - 1;
        assert!(draw(&app, 80, 24).contains("↓ 1 more"));
    }

    /// Issue #37: at 80 columns the header cut the state word ("finishe…"): the run's name and
    /// the status's tail give way first.
    #[test]
    fn the_header_never_cuts_the_state_word() {
        for (status, word) in [
            (
                RunStatus::Finished {
                    reason: FinishReason::Completed,
                },
                "finished (completed)",
            ),
            (
                RunStatus::Diverged {
                    step: 12345,
                    loss: f64::NAN,
                    weights_broken: false,
                },
                "diverged at step 12345",
            ),
            (
                RunStatus::Failed {
                    message: "a very long failure message that cannot fit anywhere at all".into(),
                },
                "failed:",
            ),
        ] {
            let mut app = app();
            app.hello = None;
            app.run.info.name = "a-run-with-a-rather-long-name-of-forty-characters".into();
            app.run.status = status;
            for width in [80u16, 60] {
                let header = draw(&app, width, 24)
                    .lines()
                    .next()
                    .expect("header")
                    .to_string();
                assert!(header.contains(word), "{width}: {header}");
            }
        }
    }

    /// Issue #58 item 3: a diverged run's header gives the one advice its Events pane gives —
    /// the lr while the weights are sound, a checkpoint once they are broken — whole, before
    /// the name and the progress (it was dropped first at 120 columns).
    #[test]
    fn the_diverged_header_says_the_events_advice_whole() {
        use conelab_core::events::diverged_advice;
        for broken in [false, true] {
            let mut app = app();
            app.hello = None;
            app.run.info.name = "a-run-with-a-rather-long-name-of-forty-characters".into();
            app.run.info.total_steps = 2000;
            app.run.on_event(&Event::Diverged {
                step: 353,
                loss: f64::NAN,
            });
            if broken {
                app.run.on_event(&Event::WeightsBroken {
                    step: 352,
                    reason: "max |w| 1e30".into(),
                });
            }
            let advice = diverged_advice(broken);
            for width in [100u16, 120, 200] {
                let header = draw(&app, width, 40)
                    .lines()
                    .next()
                    .expect("header")
                    .to_string();
                assert!(
                    header.contains(&format!("diverged at step 353 — {advice}")),
                    "{width}: {header}"
                );
            }
            assert!(
                app.run.log.iter().any(|l| l.text.contains(advice)),
                "{:?}",
                app.run.log
            );
        }
    }

    /// Issue #58 item 6: the Events pane cut a long entry at its edge. Each entry now wraps
    /// under its step: every word of the newest is on screen, in order, at 80 and 120 columns.
    #[test]
    fn the_events_pane_wraps_long_entries_whole() {
        let mut a = app();
        a.zoom = true;
        a.focus = Pane::Events;
        let long = "the weights did not survive the steps before the divergence (max |w| 3.1e30 at row 417): resuming here diverges again whatever the lr; weights broken: stop (q), resume from a checkpoint";
        a.run.on_event(&Event::Warning {
            step: 4242,
            message: long.into(),
        });
        for (w, h) in [(80u16, 24u16), (120, 40)] {
            let text = draw(&a, w, h);
            let shown: Vec<&str> = text
                .split(|c: char| c.is_whitespace() || "\"│┌┐└┘─".contains(c))
                .filter(|t| !t.is_empty())
                .collect();
            let words: Vec<&str> = long.split(' ').collect();
            let start = shown
                .windows(words.len())
                .position(|win| win == words.as_slice());
            assert!(start.is_some(), "{w}x{h}: not whole:\n{text}");
            assert!(text.contains("  4242 "), "{w}x{h}: the step\n{text}");
        }
    }

    /// Issue #58 item 1, on the workbench's screen: every number of the Groups table's PPL, I1,
    /// mean norm and IsoScore rows, at 80×24 (the pane zoomed), 120×40 and 200×50, for values
    /// from 1e-30 to 1e300 (either sign), ±0, NaN and ±∞, reads back from the screen as its value
    /// within the precision it shows, or is `…` where no form fits — never a prefix of it.
    #[test]
    fn every_number_of_the_workbench_groups_reads_back_at_three_sizes() {
        use conelab_base::number::{parse_shown, shown_precision};
        let mut values = vec![0.0, -0.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY];
        let mut x = 1e-30f64;
        while x < 1e300 {
            values.extend([x * 1.234_567, -x * 4.999_96, x * 9.999_95]);
            x *= 1e7;
        }
        let rows = ["PPL", "I1", "mean norm", "IsoScore"];
        let (mut checked, mut marked) = (0, 0);
        for (w, h, zoom) in [(80u16, 24u16, true), (120, 40, false), (200, 50, false)] {
            for (n, chunk) in values.chunks(4).enumerate() {
                let mut app = app();
                app.zoom = zoom;
                app.focus = Pane::Groups;
                // Row r, group g: a value of the sweep, each row its own rotation of it.
                let want = |r: usize, g: usize| chunk[(g + r) % chunk.len()];
                let eval = app.run.last_eval.as_mut().expect("eval");
                for g in 0..3 {
                    eval.groups[g].0 = want(0, g);
                }
                eval.ppl = want(0, 3);
                let emb = app.run.last_embedding.as_mut().expect("embedding");
                for g in 0..4 {
                    let set = if g < 3 {
                        &mut emb.groups[g]
                    } else {
                        &mut emb.total
                    };
                    set.i1 = want(1, g);
                    set.mean_norm = want(2, g);
                    set.isoscore = want(3, g);
                }
                let screen = draw(&app, w, h);
                for (r, name) in rows.iter().enumerate() {
                    let line = screen
                        .lines()
                        .find_map(|l| {
                            let inner = l.trim_matches('"').strip_prefix('│')?;
                            inner
                                .strip_prefix(name)
                                .filter(|rest| rest.starts_with(' '))
                        })
                        .unwrap_or_else(|| panic!("no {name} row at {w}×{h}:\n{screen}"));
                    // The table's four columns come first; a history sparkline may follow.
                    let cells: Vec<&str> = line.split_whitespace().take(4).collect();
                    assert_eq!(cells.len(), 4, "{name}: {line}");
                    for (g, cell) in cells.iter().enumerate() {
                        let want = want(r, g);
                        let what = format!("{name}[{g}] = {want} at {w}×{h} (sweep {n}): {line}");
                        if *cell == "…" {
                            marked += 1;
                            continue;
                        }
                        let shown = parse_shown(cell).unwrap_or_else(|| panic!("{what}"));
                        if want.is_nan() {
                            assert!(shown.is_nan(), "{what}");
                        } else if want.is_infinite() {
                            assert_eq!(shown, want, "{what}");
                        } else {
                            let within = shown_precision(cell).expect("finite");
                            assert!((shown - want).abs() <= within * (1.0 + 1e-9), "{what}");
                            assert!(want == 0.0 || shown != 0.0, "{what}");
                        }
                        checked += 1;
                    }
                }
            }
        }
        assert!(
            checked > 500 && marked * 10 < checked,
            "{checked} read, {marked} `…`"
        );
    }

    /// Issue #58: a model worse than a uniform guess is said in Progress, in red, and in
    /// Events.
    #[test]
    fn progress_says_when_the_model_is_worse_than_uniform() {
        let mut app = app();
        app.run.on_event(&Event::WorseThanUniform {
            step: 51,
            measure: conelab_core::events::UniformMeasure::TrainLoss,
            value: 128.05,
            bound: 152f64.ln(),
            steps: 50,
        });
        let screen = draw(&app, 120, 40);
        assert!(
            screen.contains("step 51: worse than uniform: the training loss 128.05"),
            "{screen}"
        );
        assert!(
            app.run
                .log
                .iter()
                .any(|l| l.text.contains("worse than uniform"))
        );
    }

    /// Issue #58: at 80 columns a finished run's header lost its name
    /// (`conelab cpu · finished (completed) — q to l…`): the status's tail and the step's
    /// percentage give way before the name's first 16 characters.
    #[test]
    fn a_finished_runs_header_keeps_its_name_at_80_columns() {
        let mut app = app();
        app.hello = None;
        app.run.info.name = "tiny-ptb-20261128-153000".into();
        app.run.info.total_steps = 2000;
        app.run.status = RunStatus::Finished {
            reason: FinishReason::Completed,
        };
        app.read_only = Some("read-only: the run completed".into());
        let header = draw(&app, 80, 24)
            .lines()
            .next()
            .expect("header")
            .to_string();
        assert!(header.contains("tiny-ptb-20"), "{header}");
        // A hint is whole or absent, never `— q t…`.
        assert!(!header.contains("— q t…"), "{header}");
        assert!(header.contains("finished (completed)"), "{header}");
        assert!(header.contains("step "), "{header}");
    }

    /// Before the history arrives an attached viewer's header says it is coming — not the empty
    /// view's "starting · step 0/1", which a finished run's viewer showed while its store was
    /// read (the attach end-to-end test caught that frame under load).
    #[test]
    fn the_header_says_the_history_is_coming() {
        let full = app();
        let mut app = App::new(Objectives::default(), full.view);
        app.awaiting_history = true;
        let header = |app: &App| {
            draw(app, 80, 24)
                .lines()
                .next()
                .expect("header")
                .to_string()
        };
        let connecting = header(&app);
        assert!(
            connecting.contains("connecting…") && !connecting.contains("starting"),
            "{connecting}"
        );
        app.read_only = Some("read-only: the run was stopped at step 480".into());
        assert!(
            header(&app).contains("loading its history…"),
            "{}",
            header(&app)
        );
        app.on_message(ServerMessage::History {
            view: Box::new(full.run),
        });
        assert!(!app.awaiting_history);
        // The history's own status from then on (this one's run is still running).
        let after = header(&app);
        assert!(
            after.contains("running") && !after.contains("loading"),
            "{after}"
        );
    }

    /// Issue #37: the penalty after the loss is labelled, a diverged loss is not eighteen
    /// digits, and the log scale labels its axis in loss, not in ln(loss).
    #[test]
    fn the_progress_numbers_say_what_they_are() {
        let mut app = app();
        let text = draw(&app, 120, 40);
        assert!(text.contains("loss 5.0000 + penalty 0.0123"), "{text}");
        app.on_event(step(81, 4.2e17));
        let text = draw(&app, 120, 40);
        assert!(text.contains("loss 4.200e17"), "{text}");
        assert!(!text.contains("420000000000000000"), "{text}");
        let mut app = self::app();
        app.log_y = true;
        let text = draw(&app, 120, 40);
        // The highest training loss is 8 − 3·√(1/80) = 7.6646: labelled 7.66, not ln = 2.04.
        assert!(text.contains("7.66"), "{text}");
        assert!(!text.contains("2.04"), "{text}");
        assert!(text.contains("loss (log)"), "{text}");
    }

    fn app() -> App {
        let mut app = App::new(
            Objectives::default(),
            ViewOptions {
                no_color: true,
                ascii: false,
                no_mouse: false,
                light: false,
                true_color: false,
            },
        );
        app.on_event(Event::Started(Box::new(RunStarted {
            step: 0,
            total_steps: 200,
            windows_per_epoch: 100,
            parameters: 1_045_248,
            device: "cpu".into(),
            run_dir: Some("checkpoints/tiny-synthetic-test".into()),
            objective: "MLE".into(),
            objectives: Objectives::default(),
        })));
        for s in 1..=80u64 {
            app.on_event(step(s, 8.0 - 3.0 * (s as f64 / 80.0).sqrt()));
            if s == 40 {
                app.on_event(eval(40));
                app.on_event(Event::Applied(AppliedCommand {
                    step: 41,
                    command: Command::Objective {
                        change: ObjectiveChange::Enable {
                            term: Term::Cos,
                            on: true,
                        },
                    },
                    change: conelab_core::change::Change::Objectives {
                        before: Box::new(Objectives::default().into()),
                        after: Box::new({
                            let mut cos = Objectives::default();
                            let _ = cos.apply(
                                &ObjectiveChange::Enable {
                                    term: Term::Cos,
                                    on: true,
                                },
                                [usize::MAX; 3],
                            );
                            cos.into()
                        }),
                    },
                    ticket: None,
                    coalesced: false,
                }));
            }
            if s % 30 == 0 || s == 1 {
                let a = analysis(s, 1.0 + s as f32 / 20.0);
                app.on_event(stats(&a));
                app.on_analysis(a);
            }
        }
        app.on_event(eval(80));
        app.on_event(Event::Checkpoint {
            step: 80,
            path: "checkpoints/tiny-synthetic-test/step-000080".into(),
        });
        // The neighbour search: "w1" watched, "w5" looked up.
        let vocab = Vocabulary {
            tokens: (0..N).map(|i| format!("w{i}")).collect(),
            counts: (0..N).map(|i| (1_000 / (i + 1)) as u64).collect(),
        };
        let mut app = app.with_vocabulary(Arc::new(vocab));
        for (word, pin) in [("w1", true), ("w5", false)] {
            app.apply(Action::SearchStart);
            for c in word.chars() {
                app.apply(Action::SearchInput(c));
            }
            app.apply(Action::SearchAccept);
            if pin {
                app.apply(Action::TogglePin);
            }
        }
        app.focus = Pane::Progress;
        app
    }

    fn draw(app: &App, width: u16, height: u16) -> String {
        let mut terminal = Terminal::new(TestBackend::new(width, height)).expect("backend");
        let rows = RowGroups::from_ranks(&groups());
        terminal
            .draw(|frame| render(frame, app, Some(&rows)))
            .expect("draw");
        terminal.backend().to_string()
    }

    /// The per-group validation PPL of `eval()`, computed here from its definition: the target
    /// of row i has log-probability −1 − 0.05·i, so a group's PPL is exp(1 + 0.05·mean i) over its
    /// rows (frequent 0–17, medium 18–47, rare 48–59 of 60), and the total over all 60.
    fn expected_ppl() -> [f64; 4] {
        let ppl = |rows: std::ops::Range<usize>| {
            let n = rows.len() as f64;
            (1.0 + 0.05 * rows.map(|i| i as f64).sum::<f64>() / n).exp()
        };
        [ppl(0..18), ppl(18..48), ppl(48..60), ppl(0..60)]
    }

    /// The Groups pane's PPL row shows the independently computed values.
    fn assert_group_ppl(text: &str) {
        let row = text
            .lines()
            .find(|l| l.contains("│PPL "))
            .unwrap_or_else(|| panic!("no PPL row:\n{text}"));
        for p in expected_ppl() {
            let shown = format!("{p:.1}");
            assert!(row.contains(&shown), "PPL {shown} missing from {row}");
        }
    }

    /// Each cell's foreground as a letter: ANSI colours by initial (bright ones in capitals),
    /// `.` the terminal's own.
    fn colour_map(app: &App, width: u16, height: u16) -> (String, ratatui::buffer::Buffer) {
        let mut terminal = Terminal::new(TestBackend::new(width, height)).expect("backend");
        let rows = RowGroups::from_ranks(&groups());
        terminal
            .draw(|frame| render(frame, app, Some(&rows)))
            .expect("draw");
        let buf = terminal.backend().buffer().clone();
        let letter = |c: Color| match c {
            Color::Reset => '.',
            Color::Black => 'k',
            Color::Red => 'r',
            Color::Green => 'g',
            Color::Yellow => 'y',
            Color::Blue => 'b',
            Color::Magenta => 'm',
            Color::Cyan => 'c',
            Color::Gray => 'w',
            Color::DarkGray => 'K',
            Color::LightRed => 'R',
            Color::LightGreen => 'G',
            Color::LightYellow => 'Y',
            Color::LightBlue => 'B',
            Color::LightMagenta => 'M',
            Color::LightCyan => 'C',
            Color::White => 'W',
            _ => '?',
        };
        let map = (0..height)
            .map(|y| {
                (0..width)
                    .map(|x| letter(buf[(x, y)].fg))
                    .collect::<String>()
                    + "\n"
            })
            .collect();
        (map, buf)
    }

    #[test]
    fn light_theme_snapshot() {
        let mut a = app();
        a.view.no_color = false;
        a.view.light = true;
        a.focus = Pane::Groups;
        let (map, buf) = colour_map(&a, 120, 40);
        insta::assert_snapshot!(map);
        // No colour made for a black background is left: no white, no pale cyan or yellow, no
        // bright variants.
        let pale = [
            Color::White,
            Color::Gray,
            Color::Cyan,
            Color::Yellow,
            Color::LightCyan,
            Color::LightYellow,
            Color::LightGreen,
            Color::LightRed,
            Color::LightBlue,
            Color::LightMagenta,
        ];
        assert!(buf.content().iter().all(|c| !pale.contains(&c.fg)));
        // The group headers: Freq blue, Med red, Rare magenta, Total black (dark: cyan, yellow,
        // magenta, white).
        let text = draw(&a, 120, 40);
        let (y, line) = text
            .lines()
            .enumerate()
            .find(|(_, l)| l.contains("Freq") && l.contains("Total"))
            .unwrap_or_else(|| panic!("no group header:\n{text}"));
        let colour_of = |name: &str| {
            let x = line.chars().collect::<Vec<_>>();
            let at = x
                .windows(name.len())
                .position(|w| w.iter().collect::<String>() == name)
                .unwrap_or_else(|| panic!("{name} not in {line}"));
            buf[(at as u16, y as u16)].fg
        };
        assert_eq!(
            ["Freq", "Med", "Rare", "Total"].map(colour_of),
            [Color::Blue, Color::Red, Color::Magenta, Color::Black]
        );
        a.view.light = false;
        let (dark, _) = colour_map(&a, 120, 40);
        assert!(
            dark.contains('c') && dark.contains('W'),
            "the dark theme keeps its colours"
        );
    }

    #[test]
    fn snapshot_default_layout_120x40() {
        let text = draw(&app(), 120, 40);
        insta::assert_snapshot!(text);
        assert_group_ppl(&text);
        // The last training loss is 8 − 3·√(80/80) = 5; the total validation PPL e^2.475.
        assert!(text.contains("loss 5.0000"), "{text}");
        assert!(
            text.contains(&format!("valid ppl {:.2}", expected_ppl()[3])),
            "{text}"
        );
        assert!(text.contains("step 80/200 (40 %)"), "{text}");
    }

    /// A run that failed with a long message, and whose process has gone: the header still
    /// shows the step it stopped at (the message is what gets cut), and it says read-only, not
    /// disconnected. A CI run caught the step cut off when the viewer noticed the socket close.
    #[test]
    fn a_long_failure_keeps_the_step_on_the_header() {
        let mut a = app();
        a.run.status = RunStatus::Failed {
            message: "the training backend panicked: injected backend panic at step 30 while \
                      it was writing a checkpoint to a very slow disk"
                .into(),
        };
        a.connection_lost = true;
        for width in [80u16, 120] {
            let text = draw(&a, width, 40);
            let header = text.lines().next().expect("a header line");
            assert!(header.contains("step 80/200 (40 %)"), "{header}");
            assert!(header.contains("failed: "), "{header}");
            assert!(header.contains("…"), "the message is cut: {header}");
            assert!(header.contains("read-only"), "{header}");
            assert!(!header.contains("disconnected"), "{header}");
        }
        // A live run that lost its socket says so.
        let mut a = app();
        a.connection_lost = true;
        let header = draw(&a, 120, 40).lines().next().map(str::to_string);
        let header = header.expect("a header line");
        assert!(header.contains("· disconnected"), "{header}");
        assert!(header.contains("step 80/200 (40 %) · epoch"), "{header}");
        // At 120 columns the failure's first words are there.
        let mut a = app();
        a.run.status = RunStatus::Failed {
            message: "the training backend panicked: injected backend panic at step 30".into(),
        };
        let header = draw(&a, 120, 40).lines().next().map(str::to_string);
        let header = header.expect("a header line");
        assert!(header.contains("failed: the training backend"), "{header}");
    }

    #[test]
    fn snapshot_default_layout_80x24() {
        let text = draw(&app(), 80, 24);
        insta::assert_snapshot!(text);
        assert!(text.contains("loss 5.0000"), "{text}");
    }

    #[test]
    fn snapshot_every_pane_zoomed_at_two_sizes() {
        let mut a = app();
        a.zoom = true;
        for pane in Pane::ALL {
            a.focus = pane;
            for (w, h) in [(120, 40), (80, 24)] {
                let name = format!(
                    "zoom_{}_{w}x{h}",
                    pane.title()
                        .split_whitespace()
                        .last()
                        .unwrap_or("pane")
                        .to_lowercase()
                );
                let text = draw(&a, w, h);
                insta::assert_snapshot!(name.clone(), text);
                // Something each pane must show, known without the snapshot.
                let must: Vec<String> = match pane {
                    Pane::Progress => vec!["loss 5.0000".into()],
                    Pane::Groups => vec![format!("{:.1}", expected_ppl()[2])],
                    Pane::Scatter => vec!["step 60 · Uncentred".into()],
                    Pane::Spectrum => vec!["now".into()],
                    Pane::Controls => vec!["[x] CosReg".into(), "loss: mle".into()],
                    Pane::Events => vec!["MLE → CosReg γ=1".into()],
                    Pane::Neighbors => vec!["w5".into()],
                    // μ_z = 0.1·mean(0..60) = 2.95; σ_z = 0.1·√((60² − 1)/12); H and log Z are
                    // both linear in the row: correlation 1.
                    Pane::SelfNorm => vec![
                        "μ_z 2.950".into(),
                        format!("σ_z {:.3}", 0.1 * ((3600.0f64 - 1.0) / 12.0).sqrt()),
                        "corr(H, log Z) 1.000".into(),
                    ],
                };
                for m in must {
                    assert!(text.contains(&m), "{name}: {m:?} missing:\n{text}");
                }
            }
        }
    }

    #[test]
    fn a_chosen_loss_shows_beside_the_one_in_force_until_applied() {
        let mut a = app();
        a.focus = Pane::Controls;
        a.zoom = true;
        a.controls_cursor = Control::count() - 1;
        a.apply(Action::ControlsScale(2.0));
        a.apply(Action::ControlsScale(2.0));
        let text = draw(&a, 100, 30);
        assert!(text.contains("loss: mle → nce-r?"), "{text}");
        a.view.ascii = true;
        assert!(draw(&a, 100, 30).contains("loss: mle -> nce-r?"));
        a.apply(Action::ControlsToggle);
        let text = draw(&a, 100, 30);
        assert!(
            text.contains("loss: mle") && !text.contains("nce-r?"),
            "{text}"
        );
    }

    #[test]
    fn snapshot_help_and_quit_dialog() {
        let mut a = app();
        a.apply(Action::ToggleHelp);
        let help = draw(&a, 100, 30);
        insta::assert_snapshot!("help_overlay", help);
        assert!(help.contains("detach"), "{help}");
        // On an 80-column terminal every description is there in full, wrapped, not cut.
        let narrow = draw(&a, 80, 40);
        for (key, what) in HELP {
            for word in what.split(' ') {
                assert!(narrow.contains(word), "{key}: {word:?} cut off:\n{narrow}");
            }
        }
        let mut a = app();
        a.apply(Action::Quit);
        assert!(a.confirm_quit);
        let quit = draw(&a, 80, 24);
        insta::assert_snapshot!("quit_dialog", quit);
        for choice in [
            "d detach",
            "s stop and save",
            "x stop without saving",
            "c cancel",
        ] {
            assert!(quit.contains(choice), "{choice}: {quit}");
        }
    }

    #[test]
    fn the_neighbour_pane_lists_the_selected_words_neighbours_by_cosine() {
        let a = app();
        assert_eq!(a.neighbors.selected, Some(5));
        assert_eq!(a.neighbors.pinned, vec![1]);
        // Independent check: the cosine of w5 with every other row of the snapshot, in f64.
        let snap = &a.analysis.as_ref().expect("analysis").snapshot;
        let row = |i: usize| &snap.weights[i * D..(i + 1) * D];
        let cos = |i: usize, j: usize| {
            let dot: f64 = row(i)
                .iter()
                .zip(row(j))
                .map(|(x, y)| *x as f64 * *y as f64)
                .sum();
            let n = |r: &[f32]| r.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
            dot / (n(row(i)) * n(row(j)))
        };
        let mut want: Vec<(f64, usize)> =
            (0..N).filter(|&j| j != 5).map(|j| (cos(5, j), j)).collect();
        want.sort_by(|x, y| y.0.total_cmp(&x.0));
        let (_, got) = &a.neighbors.results[0];
        assert_eq!(got.len(), crate::neighbors::K);
        for (g, w) in got.iter().zip(&want) {
            assert!(
                (g.score as f64 - w.0).abs() < 1e-5,
                "{} vs {}",
                g.score,
                w.0
            );
        }
        let text = draw(&a, 120, 40);
        let best = format!("w{}", want[0].1);
        assert!(text.contains(&best), "the nearest word is shown: {text}");
        assert!(text.contains("★ w1"), "the pinned word is shown: {text}");
    }

    #[test]
    fn the_scrub_walks_back_through_snapshots_and_centring_switches_the_projection() {
        let mut a = app();
        a.focus = Pane::Scatter;
        assert_eq!(
            a.run.projection_steps,
            vec![1, 30, 60],
            "snapshots at steps 1, 30 and 60"
        );
        let live = draw(&a, 120, 40);
        assert!(
            live.contains("step 60 · Uncentred") && live.contains("· live"),
            "{live}"
        );
        a.apply(Action::Scrub(-1));
        let text = draw(&a, 120, 40);
        assert!(
            text.contains("step 30 · Uncentred · axes") && text.contains(" · 2/3"),
            "{text}"
        );
        assert_eq!(a.scrub, Some(1));
        for _ in 0..10 {
            a.apply(Action::Scrub(-1));
        }
        assert_eq!(a.scrub, Some(0), "stops at the first snapshot");
        for _ in 0..10 {
            a.apply(Action::Scrub(1));
        }
        assert_eq!(a.scrub, None, "past the newest: live again");
        a.apply(Action::ToggleCentred);
        let text = draw(&a, 120, 40);
        assert!(text.contains("step 60 · Centred"), "{text}");
        // The centred axes are the covariance's: their explained shares add up to at most 1.
        let c = a
            .scatter_frame()
            .and_then(|f| f.centred.clone())
            .expect("centred");
        assert!(c.explained[0] + c.explained[1] <= 1.0 + 1e-9 && c.explained[0] >= c.explained[1]);
    }

    #[test]
    fn a_tiny_terminal_gets_a_message_not_garbage() {
        let text = draw(&app(), 40, 10);
        assert!(text.contains("terminal too small"), "{text}");
        assert!(text.contains("40×10"), "{text}");
    }

    #[test]
    fn finished_runs_say_so_and_the_curve_marks_the_intervention() {
        let mut a = app();
        a.on_event(Event::Finished {
            step: 80,
            reason: FinishReason::Completed,
        });
        let text = draw(&a, 120, 40);
        assert!(text.contains("finished (completed)"), "{text}");
        // The Events pane, zoomed (its entries wrap: at 120×40 unzoomed it holds the last few).
        a.zoom = true;
        a.focus = Pane::Events;
        let events = draw(&a, 120, 40);
        a.zoom = false;
        assert!(
            events.contains("MLE → CosReg γ=1"),
            "the event log shows the change: {events}"
        );
        assert!(
            a.run.objectives.cos.enabled,
            "the app mirrors the acknowledged change"
        );
        assert_eq!(a.run.interventions, vec![41]);
    }
}
