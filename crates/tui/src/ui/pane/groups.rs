//! The Groups pane: the per-group table (PPL, Uniq, I(W) and its companions, hidden states) with each row's history.

use conelab_widgets::{SparkRow, SparklineTable};
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier};
use ratatui::widgets::{Cell, Row, Table};

use crate::app::{App, EmbeddingMetric};
use crate::style::{GROUP_NAMES, Palette};

pub(in crate::ui) fn groups_pane(frame: &mut Frame, app: &App, area: Rect, pal: &Palette) {
    // A blank column between the table and the history: a Total value that fills its column
    // ran into the next label ("-5.000e-30cos Tot…", issue #58).
    let [table_area, _gap, sparks] = Layout::horizontal([
        Constraint::Length(52),
        Constraint::Length(1),
        Constraint::Min(0),
    ])
    .areas(area);
    let eval = app.run.last_eval.as_ref();
    let emb = app.run.last_embedding.as_ref();
    // Scrubbed back in time: the embedding rows are the shown snapshot's (from the history;
    // PPL and Uniq stay the newest evaluation's, which the header cell says).
    let scrubbed = app
        .scrub
        .and_then(|_| app.shown_step())
        .and_then(|step| app.run.embedding.iter().rev().find(|p| p.step <= step));
    let constraints = [
        Constraint::Length(10),
        Constraint::Length(10),
        Constraint::Length(10),
        Constraint::Length(10),
        Constraint::Length(10),
    ];
    // Each value written for the width its column gets (a narrow pane shrinks them): in full
    // or visibly abbreviated, never cut to its first digits. `g` is the group's column.
    let widths = crate::format::column_widths(table_area.width, &constraints);
    let cell = |g: usize, v: Option<f64>, digits: usize| {
        crate::format::number_cell(v, widths[g + 1], digits)
    };
    let emb_row = |name: &'static str, metric: EmbeddingMetric, digits: usize| {
        let values: Vec<String> = (0..4)
            .map(|g| {
                let v = match scrubbed {
                    Some(p) => Some(match metric {
                        EmbeddingMetric::I1 => p.i1[g],
                        EmbeddingMetric::I2 => p.i2[g],
                        EmbeddingMetric::MeanCos => p.mean_cos[g],
                        EmbeddingMetric::MeanNorm => p.mean_norm[g],
                        EmbeddingMetric::I1Unit => p.i1_unit[g],
                        EmbeddingMetric::I2Unit => p.i2_unit[g],
                        EmbeddingMetric::IsoScore => p.isoscore[g],
                    }),
                    None => emb.map(|e| {
                        let s = e.set(g);
                        match metric {
                            EmbeddingMetric::I1 => s.i1,
                            EmbeddingMetric::I2 => s.i2,
                            EmbeddingMetric::MeanCos => s.mean_cos,
                            EmbeddingMetric::MeanNorm => s.mean_norm,
                            EmbeddingMetric::I1Unit => s.i1_unit,
                            EmbeddingMetric::I2Unit => s.i2_unit,
                            EmbeddingMetric::IsoScore => s.isoscore,
                        }
                    }),
                };
                cell(g, v, digits)
            })
            .collect();
        (name, values)
    };
    let ppl_of = |g: usize| eval.map(|e| if g < 3 { e.groups[g].0 } else { e.ppl });
    let hidden = eval.and_then(|e| e.hidden.as_deref());
    let tier = app.run.last_second_tier.as_ref().map(|(_, t)| t);
    // A row with a number for the whole sample only.
    let total_only = |v: Option<String>| -> Vec<String> {
        let mut row = vec!["–".to_string(); 3];
        row.push(v.unwrap_or_else(|| "–".into()));
        row
    };
    let ppl: Vec<String> = (0..4).map(|g| cell(g, ppl_of(g), 1)).collect();
    let uniq: Vec<String> = (0..4)
        .map(|g| {
            eval.map(|e| {
                if g < 3 {
                    e.outputs.groups[g].uniq.to_string()
                } else {
                    e.outputs.uniq.to_string()
                }
            })
            .unwrap_or_else(|| "–".into())
        })
        .collect();
    // The context gain over the corpus's KN-3 trigram, ln(PPL_KN3 / PPL): above 0 where the model
    // beats it (methods.md §4's bar), per group. A run without a reference (one from before
    // references, a foreign matrix) has no gain row.
    let gain_row = app.run.reference_valid.as_ref().map(|reference| {
        let gain = (0..4)
            .map(|g| match (ppl_of(g), reference.get(g)) {
                (Some(p), Some(&r)) if p > 0.0 && r > 0.0 && (r / p).ln().is_finite() => {
                    format!("{:+.2}", (r / p).ln())
                }
                _ => "–".into(),
            })
            .collect();
        ("gain KN-3", gain)
    });
    // I(W) is scale-dependent: the mean norm and IsoScore (scale-free) come right after it, in
    // the rows a short pane still shows; the rest on a tall terminal or zoomed.
    let rows = [("PPL", ppl)].into_iter().chain(gain_row).chain([
        ("Uniq", uniq),
        emb_row("I1", EmbeddingMetric::I1, 3),
        emb_row("mean norm", EmbeddingMetric::MeanNorm, 3),
        emb_row("IsoScore", EmbeddingMetric::IsoScore, 3),
        emb_row("mean cos", EmbeddingMetric::MeanCos, 3),
        // IsoScore's value for a random matrix of the group's size (fixed by the sizes): a
        // group reading it has not moved from its initialisation.
        (
            "Iso random",
            (0..4)
                .map(|g| cell(g, emb.map(|e| e.set(g).isoscore_random), 3))
                .collect(),
        ),
        emb_row("I1 unit", EmbeddingMetric::I1Unit, 3),
        emb_row("I2", EmbeddingMetric::I2, 3),
        emb_row("I2 unit", EmbeddingMetric::I2Unit, 3),
        // The later literature's view of the cone: the top ⌈d/100⌉ components' share of the
        // variance, the mean cosine once they are removed, and the share of the mean cosine
        // three coordinates carry.
        (
            "top-D var",
            (0..4)
                .map(|g| cell(g, emb.map(|e| e.set(g).abtt_top_variance), 3))
                .collect(),
        ),
        (
            "cos -top D",
            (0..4)
                .map(|g| cell(g, emb.map(|e| e.set(g).abtt_mean_cos), 3))
                .collect(),
        ),
        (
            "rogue 3",
            (0..4)
                .map(|g| cell(g, emb.map(|e| e.set(g).rogue_share), 3))
                .collect(),
        ),
        // The hidden states W is trained against (valid's fixed sample): each input group's
        // self-similarity, the sample's mean cosine, whether it lies on one side of a hyperplane
        // (with its margin), and Gao's uniformly negative direction against the Rare rows.
        (
            "h self-sim",
            (0..4)
                .map(|g| cell(g, hidden.and_then(|h| h.self_sim.get(g).copied()), 3))
                .collect(),
        ),
        (
            "h mean cos",
            total_only(hidden.map(|h| cell(3, Some(h.mean_cos), 3))),
        ),
        (
            "h separ.",
            total_only(hidden.map(|h| match (h.separable, h.proven) {
                (true, _) => format!("yes {:.3}", h.margin),
                (false, true) => "no".into(),
                // Wolfe stopped at its cap: "not separable" is not proven.
                (false, false) => "no?".into(),
            })),
        ),
        // The second tier (all pairs of rows: computed on some snapshots only).
        (
            "nbr same g",
            (0..4)
                .map(|g| cell(g, tier.and_then(|t| t.same_group.get(g).copied()), 3))
                .collect(),
        ),
        (
            "TwoNN dim",
            (0..4)
                .map(|g| cell(g, tier.and_then(|t| t.two_nn.get(g).copied()), 1))
                .collect(),
        ),
        (
            "stolen ≤",
            (0..4)
                .map(|g| match tier {
                    Some(t) if g < 3 => t
                        .stolen_at_most
                        .get(g)
                        .map_or_else(|| "–".into(), |c| c.to_string()),
                    Some(t) => t.stolen_at_most.iter().sum::<usize>().to_string(),
                    None => "–".into(),
                })
                .collect(),
        ),
        (
            "cos(-u,R)",
            (0..4)
                .map(|g| match g {
                    2 => cell(2, hidden.map(|h| h.neg_u_rare_cos), 3),
                    _ => "–".into(),
                })
                .collect(),
        ),
    ]);
    let corner = match scrubbed {
        Some(p) => Cell::from(format!("@{}", p.step)).style(pal.fg(Color::Yellow)),
        None => Cell::from(""),
    };
    let header = Row::new(
        std::iter::once(corner).chain(
            GROUP_NAMES
                .iter()
                .enumerate()
                .map(|(g, n)| Cell::from(*n).style(pal.group(g).add_modifier(Modifier::BOLD))),
        ),
    );
    let table = Table::new(
        rows.into_iter().map(|(name, values)| {
            Row::new(std::iter::once(Cell::from(name)).chain(values.into_iter().map(Cell::from)))
        }),
        constraints,
    )
    .header(header);
    frame.render_widget(table, table_area);
    if sparks.width < 20 || app.run.embedding.is_empty() {
        return;
    }
    // Histories of the isotropy per group and the total mean cosine, with the change since the
    // last intervention.
    let since = app.since_intervention();
    let i1: Vec<Vec<f64>> = (0..4)
        .map(|g| app.embedding_metric(EmbeddingMetric::I1, g))
        .collect();
    let cos = app.embedding_metric(EmbeddingMetric::MeanCos, 3);
    let delta = |h: &[f64]| -> String {
        match (since, h.last()) {
            (Some(i), Some(last)) if i < h.len() => format!("{:+.3}", last - h[i]),
            _ => String::new(),
        }
    };
    // A group nothing is known of (a matrix without counts) gets no history row.
    let mut rows: Vec<SparkRow> = (0..4)
        .filter(|&g| i1[g].iter().any(|v| v.is_finite()))
        .map(|g| {
            SparkRow::new(
                format!("I1 {}", GROUP_NAMES[g]),
                &i1[g],
                conelab_base::number::fit(i1[g].last().copied().unwrap_or(f64::NAN), 6, 3),
            )
            .delta(delta(&i1[g]))
            .spark_style(pal.group(g))
        })
        .collect();
    rows.push(
        SparkRow::new(
            "cos Total",
            &cos,
            conelab_base::number::fit(cos.last().copied().unwrap_or(f64::NAN), 6, 3),
        )
        .delta(delta(&cos)),
    );
    // The hidden states' history, one point per validation (no "since the intervention": their
    // steps are the evaluations', not the snapshots').
    let h_cos: Vec<f64> = app.run.hidden.iter().map(|h| h.mean_cos).collect();
    let margin: Vec<f64> = app.run.hidden.iter().map(|h| h.margin).collect();
    if !app.run.hidden.is_empty() {
        for (name, series) in [("h cos", &h_cos), ("h margin", &margin)] {
            let now = conelab_base::number::fit(series.last().copied().unwrap_or(f64::NAN), 6, 3);
            rows.push(SparkRow::new(name, series, now));
        }
    }
    frame.render_widget(
        SparklineTable::new(rows)
            .header("", "history", "now", "Δ change")
            .no_color(pal.no_color),
        sparks,
    );
}
