//! `conelab inspect PATH` on a terminal: the workbench's embedding panes (scatter, neighbour
//! search, spectrum, group metrics) for a saved checkpoint or a foreign matrix, and with
//! `--compare OTHER` two of them side by side — the same word looked up in both, each spectrum
//! drawn against the other's.

use std::sync::Arc;

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use super::app::{Action, App, Pane, ViewOptions};
use conelab_core::analysis::EmbeddingAnalysis;
use conelab_core::events::EmbeddingStats;
use conelab_core::events::{Event, FinishReason, Snapshot};
use conelab_core::objective::Objectives;
use conelab_core::run_dir::matrix::LoadedMatrix;
use conelab_data::GroupBounds;
use conelab_metrics::embedding::SetStats;
use conelab_metrics::{
    EmbeddingPanel, Embeddings, MatrixError, PanelOptions, ProjectionMode, RowGroups, Threads,
};
use conelab_protocol::view::{RunStatus, Vocabulary};

/// The panes the browser has, in focus order.
pub const PANES: [Pane; 4] = [Pane::Scatter, Pane::Neighbors, Pane::Spectrum, Pane::Groups];

/// One matrix and its view.
#[derive(Debug, Clone)]
pub struct Side {
    pub app: App,
    pub rows: Option<RowGroups>,
    /// What was loaded: a file, or a run and step.
    pub source: String,
}

impl Side {
    /// Analyses `m` (metrics, both projections, groups from its counts) for the browser.
    pub fn new(
        m: &LoadedMatrix,
        bounds: GroupBounds,
        view: ViewOptions,
    ) -> Result<Self, MatrixError> {
        let w = Embeddings::new(m.n, m.d, &m.data)?;
        let rows = m
            .counts
            .as_deref()
            .map(|c| RowGroups::from_counts(c, bounds));
        let panel = EmbeddingPanel::compute(
            w,
            rows.as_ref(),
            &PanelOptions {
                projection: Some(ProjectionMode::Uncentred),
                also_centred: true,
                scale_free: true,
                threads: Threads::All,
            },
        )?;
        let step = m.step.unwrap_or(0);
        let vocab = Vocabulary {
            tokens: m
                .tokens
                .clone()
                .unwrap_or_else(|| (0..m.n).map(|i| format!("#{i}")).collect()),
            counts: m.counts.clone().unwrap_or_else(|| vec![0; m.n]),
        };
        let mut app = App::new(Objectives::default(), view).with_vocabulary(Arc::new(vocab));
        // Without counts there are no groups, but the whole matrix's numbers are still worth a
        // column (the Groups pane's Total).
        let stats =
            EmbeddingStats::from_panel(step, &panel, 0.0).unwrap_or_else(|| EmbeddingStats {
                step,
                total: panel.total.clone(),
                groups: [
                    SetStats::unknown(),
                    SetStats::unknown(),
                    SetStats::unknown(),
                ],
                rare_frequent_cos: f64::NAN,
                seconds: 0.0,
                spectral: None,
                second_tier: None,
            });
        app.on_event(Event::Embedding(Box::new(stats)));
        app.on_analysis(Arc::new(EmbeddingAnalysis {
            snapshot: Arc::new(Snapshot {
                step,
                n: m.n,
                d: m.d,
                weights: m.data.clone(),
                spectral: None,
            }),
            panel,
        }));
        // One snapshot: there is no "start" to compare the spectrum with (unless --compare).
        app.run.first_spectrum = None;
        app.run.status = RunStatus::Finished {
            reason: FinishReason::Completed,
        };
        app.focus = Pane::Scatter;
        Ok(Self {
            app,
            rows,
            source: m.source.clone(),
        })
    }

    pub fn describe(&self) -> String {
        let (n, d, step) = self
            .app
            .analysis
            .as_ref()
            .map(|a| (a.snapshot.n, a.snapshot.d, a.snapshot.step))
            .unwrap_or_default();
        let step = if step > 0 {
            format!(", step {step}")
        } else {
            String::new()
        };
        format!("{} ({n}×{d}{step})", self.source)
    }
}

#[derive(Debug, Clone)]
pub struct Browser {
    pub sides: Vec<Side>,
    pub focus: Pane,
    pub zoom: bool,
    /// The keys overlay (`?`).
    pub help: bool,
    pub exit: bool,
}

/// The browser's keys, as its `?` overlay lists them.
pub const HELP: [(&str, &str); 9] = [
    ("Tab / Shift-Tab", "next / previous pane"),
    (
        "2 3 4 7",
        "Groups, Embedding, Spectrum, Neighbours (the workbench's numbers)",
    ),
    ("z", "zoom the focused pane (each side's, with --compare)"),
    ("/", "search a word (in both matrices): type, ↑↓, Enter"),
    ("w", "in Neighbours: watch the selected word, or stop"),
    ("c", "in Embedding: centred / uncentred projection"),
    ("?", "this help"),
    ("Esc", "close the help, leave the zoom, then leave"),
    ("q Ctrl-C", "leave"),
];

impl Browser {
    /// One matrix, or two side by side (each spectrum drawn against the other's).
    pub fn new(mut sides: Vec<Side>) -> Self {
        if sides.len() == 2 {
            let spectra: Vec<Option<Vec<f64>>> = sides
                .iter()
                .map(|s| {
                    s.app
                        .analysis
                        .as_ref()
                        .map(|a| a.panel.total.sv_norm.clone())
                })
                .collect();
            for (i, side) in sides.iter_mut().enumerate() {
                side.app.spectrum_reference = spectra[1 - i].clone().map(|v| ("other".into(), v));
            }
        }
        Self {
            sides,
            focus: Pane::Scatter,
            zoom: false,
            help: false,
            exit: false,
        }
    }

    fn editing(&self) -> bool {
        self.sides.first().is_some_and(|s| s.app.neighbors.editing)
    }

    /// Applies an action to every side; a word looked up or pinned on the first side is looked
    /// up or pinned on the others by its spelling.
    fn apply_all(&mut self, action: Action) {
        let Some((first, rest)) = self.sides.split_first_mut() else {
            return;
        };
        first.app.apply(action.clone());
        let word = |s: &Side| {
            s.app
                .neighbors
                .selected
                .and_then(|id| s.app.vocab.as_ref().map(|v| v.token(id).to_string()))
        };
        match action {
            Action::SearchAccept | Action::TogglePin => {
                let Some(w) = word(first) else {
                    return;
                };
                for side in rest {
                    let id = side
                        .app
                        .vocab
                        .as_ref()
                        .and_then(|v| v.tokens.iter().position(|t| *t == w));
                    if let Some(id) = id {
                        let analysis = side.app.analysis.clone();
                        let nb = &mut side.app.neighbors;
                        nb.selected = Some(id as u32);
                        if action == Action::TogglePin {
                            nb.toggle_pin(analysis.as_deref());
                        } else {
                            nb.refresh(analysis.as_deref());
                        }
                    }
                }
            }
            Action::ToggleCentred => {
                for side in rest {
                    side.app.apply(Action::ToggleCentred);
                }
            }
            _ => {}
        }
    }

    pub fn on_key(&mut self, key: KeyEvent) {
        if key.kind == KeyEventKind::Release {
            return;
        }
        if key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c') {
            self.exit = true;
            return;
        }
        if self.editing() {
            let action = super::app::search_action(key.code);
            if action != Action::None {
                self.apply_all(action);
            }
            return;
        }
        if self.help {
            // Any key closes the help (q and Esc only that); ? toggles it.
            self.help = false;
            if !matches!(
                key.code,
                KeyCode::Char('q') | KeyCode::Esc | KeyCode::Char('?')
            ) {
                self.on_key(key);
            }
            return;
        }
        let i = PANES.iter().position(|p| *p == self.focus).unwrap_or(0);
        match key.code {
            KeyCode::Char('?') => self.help = true,
            KeyCode::Char('q') => self.exit = true,
            KeyCode::Esc if self.zoom => self.zoom = false,
            KeyCode::Esc => self.exit = true,
            KeyCode::Tab => self.focus = PANES[(i + 1) % PANES.len()],
            KeyCode::BackTab => self.focus = PANES[(i + PANES.len() - 1) % PANES.len()],
            // The live workbench's numbers: 2 Groups, 3 Embedding, 4 Spectrum, 7 Neighbours.
            KeyCode::Char(c @ '1'..='8') => {
                let pane = Pane::ALL[(c as u8 - b'1') as usize];
                if PANES.contains(&pane) {
                    self.focus = pane;
                }
            }
            KeyCode::Char('z') => self.zoom = !self.zoom,
            KeyCode::Char('/') => {
                self.focus = Pane::Neighbors;
                self.apply_all(Action::SearchStart);
            }
            KeyCode::Char('w') => self.apply_all(Action::TogglePin),
            KeyCode::Char('c') => self.apply_all(Action::ToggleCentred),
            _ => {}
        }
        for side in &mut self.sides {
            side.app.focus = self.focus;
        }
    }
}

#[cfg(test)]
mod tests {
    use ratatui::Terminal;
    use ratatui::backend::TestBackend;

    use super::*;

    const N: usize = 40;
    const D: usize = 6;

    /// A matrix whose rows drift further from a common direction with their rank.
    fn matrix(source: &str, drift: f32) -> LoadedMatrix {
        let data = (0..N * D)
            .map(|k| {
                let (i, j) = (k / D, k % D);
                let wave = ((i * 5 + j * 3) % 7) as f32 / 7.0 - 0.5;
                wave + if j == 0 {
                    drift * i as f32 / N as f32
                } else {
                    0.0
                }
            })
            .collect();
        LoadedMatrix {
            source: source.into(),
            n: N,
            d: D,
            data,
            tokens: Some((0..N).map(|i| format!("w{i}")).collect()),
            counts: Some((0..N as u64).map(|i| 1_000 / (i + 1)).collect()),
            classes: None,
            bias: None,
            step: Some(500),
            group_bounds: None,
        }
    }

    fn browser() -> Browser {
        let view = ViewOptions {
            no_color: true,
            ascii: false,
            no_mouse: false,
            light: false,
            true_color: false,
        };
        let sides = vec![
            Side::new(&matrix("runs/mle", 0.5), GroupBounds::default(), view).expect("side"),
            Side::new(&matrix("runs/cosreg", 3.0), GroupBounds::default(), view).expect("side"),
        ];
        Browser::new(sides)
    }

    fn key(b: &mut Browser, code: KeyCode) {
        b.on_key(KeyEvent::new(code, KeyModifiers::NONE));
    }

    fn draw(b: &Browser) -> String {
        let mut t = Terminal::new(TestBackend::new(120, 40)).expect("backend");
        t.draw(|f| super::super::ui::render_browser(f, b))
            .expect("draw");
        t.backend().to_string()
    }

    #[test]
    fn a_word_is_looked_up_and_watched_in_both_matrices() {
        let mut b = browser();
        key(&mut b, KeyCode::Char('/'));
        for c in ['w', '1', '2'] {
            key(&mut b, KeyCode::Char(c));
        }
        key(&mut b, KeyCode::Enter);
        for side in &b.sides {
            assert_eq!(side.app.neighbors.selected, Some(12));
            assert_eq!(side.app.neighbors.results.len(), 1);
        }
        // Different matrices, different neighbours (the second one drifts more).
        assert_ne!(
            b.sides[0].app.neighbors.results[0].1,
            b.sides[1].app.neighbors.results[0].1
        );
        key(&mut b, KeyCode::Char('w'));
        assert!(b.sides.iter().all(|s| s.app.neighbors.pinned == vec![12]));
        key(&mut b, KeyCode::Char('c'));
        assert!(b.sides.iter().all(|s| s.app.centred));
        let text = draw(&b);
        assert!(
            text.contains("runs/mle (40×6, step 500)  vs  runs/cosreg"),
            "{text}"
        );
        assert!(text.contains("Centred"), "{text}");
        assert!(
            text.contains("other"),
            "each spectrum is drawn against the other: {text}"
        );
        insta::assert_snapshot!("browser_compare_120x40", text);
        key(&mut b, KeyCode::Char('q'));
        assert!(b.exit);
    }

    #[test]
    fn help_opens_and_closes_and_a_matrix_without_counts_has_a_total_column() {
        let view = ViewOptions {
            no_color: true,
            ..ViewOptions::default()
        };
        let mut m = matrix("foreign.npy", 1.0);
        m.counts = None;
        let mut b = Browser::new(vec![
            Side::new(&m, GroupBounds::default(), view).expect("side"),
        ]);
        let text = draw(&b);
        // The whole matrix's mean row norm, computed here, in the Total column; the groups are
        // unknown ("–").
        let mean_norm = m
            .data
            .chunks(m.d)
            .map(|r| r.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt())
            .sum::<f64>()
            / m.n as f64;
        let row = text
            .lines()
            .find(|l| l.contains("│mean norm "))
            .unwrap_or_else(|| panic!("no mean norm row:\n{text}"));
        assert!(row.contains(&format!("{mean_norm:.3}")), "{row}");
        // (NaN, the groups' value here, is `—`; a value never computed `–`.)
        assert_eq!(row.matches(['–', '—']).count(), 3, "{row}");
        // The scatter's legend names one set, not three groups of which two are empty.
        assert!(
            text.contains(&format!("all {}", m.n)) && !text.contains("med 0"),
            "{text}"
        );
        key(&mut b, KeyCode::Char('?'));
        let help = draw(&b);
        assert!(
            help.contains("keys") && help.contains("watch the selected word"),
            "{help}"
        );
        key(&mut b, KeyCode::Esc);
        assert!(!b.help && !b.exit, "Esc closes the help first");
        key(&mut b, KeyCode::Char('?'));
        key(&mut b, KeyCode::Char('z'));
        assert!(
            !b.help && b.zoom,
            "another key closes the help and does its work"
        );
    }

    #[test]
    fn one_matrix_shows_its_group_table_and_zoom_shows_one_pane() {
        let view = ViewOptions {
            no_color: true,
            ascii: false,
            no_mouse: false,
            light: false,
            true_color: false,
        };
        let mut b = Browser::new(vec![
            Side::new(&matrix("w.npy", 1.0), GroupBounds::default(), view).expect("side"),
        ]);
        let text = draw(&b);
        assert!(
            // A short Groups pane shows I(W) with the mean norm and IsoScore beside it.
            text.contains("2 Groups") && text.contains("mean norm") && text.contains("IsoScore"),
            "{text}"
        );
        assert!(!text.contains("other"), "{text}");
        key(&mut b, KeyCode::Char('4'));
        key(&mut b, KeyCode::Char('z'));
        let zoomed = draw(&b);
        assert!(
            zoomed.contains("4 Spectrum") && !zoomed.contains("3 Embedding"),
            "{zoomed}"
        );
        key(&mut b, KeyCode::Esc);
        assert!(!b.zoom && !b.exit, "Esc leaves the zoom first");
        key(&mut b, KeyCode::Esc);
        assert!(b.exit);
    }
}
