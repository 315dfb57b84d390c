//! The workbench's panes, each drawn from the app's state into its area.

use super::*;

/// A looked-up word's heading: `★ word · rare ×12 · step 500`, each part only when known.
pub(super) fn word_head(
    pinned: bool,
    token: &str,
    group: &str,
    count: Option<u64>,
    step: Option<u64>,
) -> String {
    let mut head = format!("{}{token}", if pinned { "★ " } else { "" });
    let about: Vec<String> = [
        (!group.is_empty()).then(|| group.to_string()),
        count.map(|c| format!("×{c}")),
    ]
    .into_iter()
    .flatten()
    .collect();
    if !about.is_empty() {
        head.push_str(&format!(" · {}", about.join(" ")));
    }
    if let Some(s) = step {
        head.push_str(&format!(" · step {s}"));
    }
    head
}

/// Search box, the selected word's top-k neighbours, the pinned words' nearest few.
pub(super) fn neighbors_pane(
    frame: &mut Frame,
    app: &App,
    groups: Option<&RowGroups>,
    area: Rect,
    pal: &Palette,
) {
    let Some(vocab) = &app.vocab else {
        frame.render_widget(Paragraph::new("no vocabulary"), area);
        return;
    };
    let nb = &app.neighbors;
    let group_name = |id: u32| match group_index(groups, id) {
        Some(0) => "freq",
        Some(1) => "med",
        Some(2) => "rare",
        _ => "",
    };
    let word_style = |id: u32| pal.group(group_index(groups, id).unwrap_or(3));
    let mut lines: Vec<Line> = Vec::new();
    let search = if nb.editing {
        Line::from(vec![
            Span::raw("/ "),
            Span::styled(
                format!("{}▏", nb.query),
                Style::default().add_modifier(Modifier::BOLD),
            ),
        ])
    } else {
        Line::styled("/ search a word · w watch/unwatch", pal.fg(Color::DarkGray))
    };
    lines.push(search);
    if nb.editing {
        if nb.matches.is_empty() && !nb.query.is_empty() {
            lines.push(Line::styled("  no match", pal.fg(Color::DarkGray)));
        }
        for (i, &id) in nb.matches.iter().enumerate() {
            let marker = if i == nb.cursor { "▸ " } else { "  " };
            let style = if i == nb.cursor {
                word_style(id).add_modifier(Modifier::REVERSED)
            } else {
                word_style(id)
            };
            lines.push(Line::from(vec![
                Span::raw(marker),
                Span::styled(vocab.token(id).to_string(), style),
                Span::styled(
                    format!(
                        "  {} {}",
                        group_name(id),
                        vocab
                            .known_count(id)
                            .map(|c| format!("×{c}"))
                            .unwrap_or_default()
                    ),
                    pal.fg(Color::DarkGray),
                ),
            ]));
        }
    }
    if nb.results.is_empty() {
        if !nb.editing {
            let hint = if app.run.projection_steps.is_empty() && app.analysis.is_none() {
                "neighbours appear with the first snapshot"
            } else {
                "type / and a word"
            };
            lines.push(Line::styled(hint, pal.fg(Color::DarkGray)));
        }
    } else {
        for (ri, (id, list)) in nb.results.iter().enumerate() {
            let pinned = nb.pinned.contains(id);
            // A foreign matrix has no groups, counts or training step: only what is known.
            let step = nb.step.filter(|&s| s > 0 || app.analysis.is_none());
            let head = word_head(
                pinned,
                vocab.token(*id),
                group_name(*id),
                vocab.known_count(*id),
                step,
            );
            lines.push(Line::styled(
                head,
                word_style(*id).add_modifier(Modifier::BOLD),
            ));
            // The selected word gets its full list; pinned ones one line each.
            if ri == 0 && nb.selected == Some(*id) {
                for (rank, n) in list.iter().enumerate() {
                    lines.push(Line::from(vec![
                        Span::raw(format!("{:>3} ", rank + 1)),
                        Span::styled(format!("{:<14}", vocab.token(n.id)), word_style(n.id)),
                        Span::raw(format!("{:>6.3} ", n.score)),
                        Span::styled(
                            format!(
                                "{:<4} {}",
                                group_name(n.id),
                                vocab
                                    .known_count(n.id)
                                    .map(|c| format!("×{c}"))
                                    .unwrap_or_default()
                            ),
                            pal.fg(Color::DarkGray),
                        ),
                    ]));
                }
            } else {
                let mut spans = vec![Span::raw("   ")];
                for n in list.iter().take(5) {
                    spans.push(Span::styled(
                        vocab.token(n.id).to_string(),
                        word_style(n.id),
                    ));
                    spans.push(Span::raw(format!(" {:.2}  ", n.score)));
                }
                lines.push(Line::from(spans));
            }
        }
    }
    frame.render_widget(Paragraph::new(lines), area);
}

/// The newest evaluation's self-normalisation: μ_z, σ_z, and where (entropy, log Z) fall.
pub(super) fn self_norm(frame: &mut Frame, app: &App, area: Rect, pal: &Palette) {
    let Some(e) = &app.run.last_eval else {
        frame.render_widget(
            Paragraph::new("appears with the first validation evaluation"),
            area,
        );
        return;
    };
    let o = &e.outputs;
    let [text, plot] = Layout::vertical([Constraint::Length(2), Constraint::Min(0)]).areas(area);
    frame.render_widget(
        Paragraph::new(vec![
            Line::raw(format!(
                "step {} · μ_z {:.3} · σ_z {:.3} · corr(H, log Z) {:.3}",
                e.step, o.mu_z, o.sigma_z, o.entropy_log_z_corr
            )),
            Line::styled(
                format!(
                    "PPL {:.2} · unnormalised PPL {:.2}",
                    o.ppl, o.unnormalised_ppl
                ),
                pal.fg(Color::DarkGray),
            ),
        ]),
        text,
    );
    let h = &o.histogram;
    frame.render_widget(
        HeatMap::from_counts(&h.counts, h.log_z_bins, h.entropy_bins)
            .scale(HeatMapScale::Log)
            .x_range(h.entropy_range[0], h.entropy_range[1])
            .y_range(h.log_z_range[0], h.log_z_range[1])
            .x_title("entropy H")
            .y_title("log Z")
            .no_color(pal.no_color),
        plot,
    );
}

/// The run process's load in one line: `cpu 98% · rss 1.2G · host 10.1G/24.0G`, then its GPU's
/// where the driver reports it: `· gpu 87% 30.1G/79.6G 312W 64°C`.
pub(super) fn system_line(s: &conelab_core::events::SystemStats) -> String {
    const GIB: f64 = 1024.0 * 1024.0 * 1024.0;
    let known = |v: f64, unit: &str| {
        if v.is_finite() {
            format!("{v:.0}{unit}")
        } else {
            "–".into()
        }
    };
    let mut line = format!(
        "cpu {} · rss {:.1}G · host {:.1}G/{:.1}G",
        known(s.cpu_percent, "%"),
        s.rss_bytes as f64 / GIB,
        s.host_used_bytes as f64 / GIB,
        s.host_total_bytes as f64 / GIB
    );
    if let Some(g) = &s.gpu {
        line.push_str(&format!(
            " · gpu {} {:.1}G/{:.1}G {} {}",
            known(g.util_percent, "%"),
            g.mem_used_bytes as f64 / GIB,
            g.mem_total_bytes as f64 / GIB,
            known(g.power_watts, "W"),
            known(g.temp_c, "°C"),
        ));
    }
    line
}

pub(super) fn progress(frame: &mut Frame, app: &App, area: Rect, pal: &Palette) {
    // A third line for the process's load once it has been sampled, where there is room.
    let system = app
        .run
        .last_system
        .as_ref()
        .filter(|_| area.height >= 6)
        .map(system_line);
    let lines = if system.is_some() { 3 } else { 2 };
    let [text, chart] =
        Layout::vertical([Constraint::Length(lines), Constraint::Min(0)]).areas(area);
    let s = app.run.last_step;
    let valid = app
        .run
        .last_eval
        .as_ref()
        .map(|e| format!("valid ppl {:.2}", e.ppl))
        .unwrap_or_else(|| "valid ppl –".into());
    let line1 = match s {
        Some(s) => format!(
            "loss {}{}  {valid}  {} tok/s  {:.0} ms/step",
            format_loss(s.loss),
            if s.penalty != 0.0 {
                format!(" + penalty {}", format_loss(s.penalty))
            } else {
                String::new()
            },
            format_compact(s.tokens_per_sec),
            s.step_ms
        ),
        None => "waiting for the first step…".into(),
    };
    let line2 = match s {
        Some(s) => format!(
            "lr {:.2e}  grad norm {:.3}  params {}{}",
            s.lr,
            s.grad_norm,
            format_compact(app.run.info.parameters as f64),
            s.rare_tokens
                .map(|r| format!("  rare set {r}"))
                .unwrap_or_default()
                + &s.rare_in_group
                    .map(|n| format!(" ({n} in Rare)"))
                    .unwrap_or_default()
                + &s.rare_g1
                    .map(|g| format!(" (mean g1 {g:.3})"))
                    .unwrap_or_default()
        ),
        None => String::new(),
    };
    let mut text_lines = vec![Line::raw(line1), Line::raw(line2)];
    if let Some(line) = system {
        text_lines.push(Line::styled(line, pal.fg(Color::DarkGray)));
    }
    frame.render_widget(Paragraph::new(text_lines), text);
    if chart.height < 3 || app.run.loss.is_empty() {
        return;
    }
    let transform = |v: f64| if app.log_y { v.max(1e-12).ln() } else { v };
    let train: Vec<(f64, f64)> = smooth(&app.run.loss, app.smoothing)
        .into_iter()
        .map(|(x, y)| (x, transform(y)))
        .collect();
    let valid: Vec<(f64, f64)> = app
        .run
        .valid_loss
        .iter()
        .map(|&(x, y)| (x, transform(y)))
        .collect();
    let (mut lo, mut hi) = train
        .iter()
        .chain(&valid)
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), p| {
            (a.min(p.1), b.max(p.1))
        });
    if !(lo.is_finite() && hi.is_finite()) {
        return;
    }
    if hi - lo < 1e-9 {
        hi += 0.5;
        lo -= 0.5;
    }
    let x_max = (app.run.info.total_steps.max(1)) as f64;
    let marks: Vec<(f64, f64)> = app
        .run
        .interventions
        .iter()
        .flat_map(|&s| (0..8).map(move |k| (s as f64, lo + (hi - lo) * k as f64 / 7.0)))
        .collect();
    let mut datasets = vec![
        Dataset::default()
            .name("train")
            .marker(Marker::Braille)
            .graph_type(GraphType::Line)
            .style(pal.fg(Color::Cyan))
            .data(&train),
    ];
    if !valid.is_empty() {
        datasets.push(
            Dataset::default()
                .name("valid")
                .marker(Marker::Dot)
                .graph_type(GraphType::Scatter)
                .style(pal.fg(Color::Yellow))
                .data(&valid),
        );
    }
    if !marks.is_empty() {
        datasets.push(
            Dataset::default()
                .name("change")
                .marker(Marker::Dot)
                .graph_type(GraphType::Scatter)
                .style(pal.fg(Color::Magenta))
                .data(&marks),
        );
    }
    // Log scale draws ln(loss) but labels the axis in loss (what the line above says).
    let y_title = if app.log_y { "loss (log)" } else { "loss" };
    let label = |v: f64| {
        if app.log_y {
            format_compact(v.exp())
        } else if v.abs() < 1e4 {
            format!("{v:.2}")
        } else {
            format!("{v:.2e}")
        }
    };
    let chart_widget = Chart::new(datasets)
        .x_axis(
            Axis::default()
                .bounds([0.0, x_max])
                .labels(["0".to_string(), format_compact(x_max)]),
        )
        .y_axis(
            Axis::default()
                .title(y_title)
                .bounds([lo, hi])
                .labels([label(lo), label(hi)]),
        );
    frame.render_widget(chart_widget, chart);
}

/// A loss as the Progress line shows it: four decimals while it is a loss, scientific once it
/// has diverged (a loss of 4·10¹⁷ must not print as eighteen digits).
pub(super) fn format_loss(v: f64) -> String {
    if !v.is_finite() {
        return format_compact(v);
    }
    if v.abs() < 1e4 {
        format!("{v:.4}")
    } else {
        format!("{v:.3e}")
    }
}

/// TensorBoard's debiased smoothing with weight `w` (the compare view's), raw at 0.
pub(super) fn smooth(points: &[(f64, f64)], w: f64) -> Vec<(f64, f64)> {
    if w <= 0.0 {
        return points.to_vec();
    }
    let ys: Vec<f64> = points.iter().map(|p| p.1).collect();
    points
        .iter()
        .zip(crate::compare::smooth_debiased(&ys, w))
        .map(|(&(x, _), y)| (x, y))
        .collect()
}

pub(super) fn groups_pane(frame: &mut Frame, app: &App, area: Rect, pal: &Palette) {
    let [table_area, sparks] =
        Layout::horizontal([Constraint::Length(52), Constraint::Min(0)]).areas(area);
    let eval = app.run.last_eval.as_ref();
    let emb = app.run.last_embedding.as_ref();
    // Scrubbed back in time: the embedding rows are the shown snapshot's (from the history;
    // PPL and Uniq stay the newest evaluation's, which the header cell says).
    let scrubbed = app
        .scrub
        .and_then(|_| app.shown_step())
        .and_then(|step| app.run.embedding.iter().rev().find(|p| p.step <= step));
    let cell = |v: Option<f64>, digits: usize| match v {
        Some(v) if v.is_finite() => format!("{v:.digits$}"),
        _ => "–".into(),
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
                cell(v, digits)
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
    let ppl: Vec<String> = (0..4).map(|g| cell(ppl_of(g), 1)).collect();
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
                .map(|g| cell(emb.map(|e| e.set(g).isoscore_random), 3))
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
                .map(|g| cell(emb.map(|e| e.set(g).abtt_top_variance), 3))
                .collect(),
        ),
        (
            "cos -top D",
            (0..4)
                .map(|g| cell(emb.map(|e| e.set(g).abtt_mean_cos), 3))
                .collect(),
        ),
        (
            "rogue 3",
            (0..4)
                .map(|g| cell(emb.map(|e| e.set(g).rogue_share), 3))
                .collect(),
        ),
        // The hidden states W is trained against (valid's fixed sample): each input group's
        // self-similarity, the sample's mean cosine, whether it lies on one side of a hyperplane
        // (with its margin), and Gao's uniformly negative direction against the Rare rows.
        (
            "h self-sim",
            (0..4)
                .map(|g| cell(hidden.and_then(|h| h.self_sim.get(g).copied()), 3))
                .collect(),
        ),
        (
            "h mean cos",
            total_only(hidden.map(|h| cell(Some(h.mean_cos), 3))),
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
                .map(|g| cell(tier.and_then(|t| t.same_group.get(g).copied()), 3))
                .collect(),
        ),
        (
            "TwoNN dim",
            (0..4)
                .map(|g| cell(tier.and_then(|t| t.two_nn.get(g).copied()), 1))
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
                    2 => cell(hidden.map(|h| h.neg_u_rare_cos), 3),
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
        [
            Constraint::Length(10),
            Constraint::Length(10),
            Constraint::Length(10),
            Constraint::Length(10),
            Constraint::Length(10),
        ],
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
                format!("{:.3}", i1[g].last().copied().unwrap_or(f64::NAN)),
            )
            .delta(delta(&i1[g]))
            .spark_style(pal.group(g))
        })
        .collect();
    rows.push(
        SparkRow::new(
            "cos Total",
            &cos,
            format!("{:.3}", cos.last().copied().unwrap_or(f64::NAN)),
        )
        .delta(delta(&cos)),
    );
    // The hidden states' history, one point per validation (no "since the intervention": their
    // steps are the evaluations', not the snapshots').
    let h_cos: Vec<f64> = app.run.hidden.iter().map(|h| h.mean_cos).collect();
    let margin: Vec<f64> = app.run.hidden.iter().map(|h| h.margin).collect();
    if !app.run.hidden.is_empty() {
        for (name, series) in [("h cos", &h_cos), ("h margin", &margin)] {
            let now = format!("{:.3}", series.last().copied().unwrap_or(f64::NAN));
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

pub(super) fn scatter(
    frame: &mut Frame,
    app: &App,
    groups: Option<&RowGroups>,
    area: Rect,
    pal: &Palette,
) {
    let Some(shown) = app.scatter_frame() else {
        frame.render_widget(Paragraph::new("no snapshot yet"), area);
        return;
    };
    let projection = if app.centred {
        shown.centred.as_ref().or(shown.uncentred.as_ref())
    } else {
        shown.uncentred.as_ref()
    };
    let Some(projection) = projection else {
        frame.render_widget(Paragraph::new("no projection"), area);
        return;
    };
    let group_of = |i: usize| -> u8 { group_index(groups, i as u32).unwrap_or(0) as u8 };
    let points: Vec<ScatterPoint> = projection
        .points
        .iter()
        .enumerate()
        .map(|(i, p)| (f64::from(p[0]), f64::from(p[1]), group_of(i)))
        .collect();
    let [title, plot] = Layout::vertical([Constraint::Length(1), Constraint::Min(0)]).areas(area);
    frame.render_widget(
        Paragraph::new(format!(
            "step {} · {:?} · axes {:.0}%/{:.0}%{}",
            shown.step,
            projection.mode,
            100.0 * projection.explained[0],
            100.0 * projection.explained[1],
            match app.scrub {
                Some(i) => format!(" · {}/{}", i + 1, app.run.projection_steps.len()),
                None if app.run.projection_steps.len() > 1 => " · live".to_string(),
                None => String::new(),
            }
        ))
        .style(pal.fg(Color::DarkGray)),
        title,
    );
    let layers = match groups {
        Some(_) => vec![
            Layer::new("freq", pal.group(0)).glyph('f').priority(0),
            Layer::new("med", pal.group(1)).glyph('m').priority(1),
            // Rare on top: it is the group that drifts.
            Layer::new("rare", pal.group(2)).glyph('r').priority(2),
        ],
        // No counts (a foreign matrix): one set, named as such.
        None => vec![Layer::new("all", pal.group(3)).glyph('o').priority(0)],
    };
    frame.render_widget(
        Scatter::new(&points)
            .layers(layers)
            .highlight(
                app.neighbors
                    .selected
                    .map(|i| i as usize)
                    .filter(|&i| i < points.len()),
            )
            .mode(if app.view.ascii {
                ScatterMode::Ascii
            } else {
                ScatterMode::Braille
            })
            .legend(true)
            .no_color(pal.no_color),
        plot,
    );
}

pub(super) fn spectrum(frame: &mut Frame, app: &App, area: Rect, pal: &Palette) {
    // Scrubbed back in time: the shown snapshot's spectrum (it travels with its projections),
    // labelled with its step.
    let scrubbed = app
        .scrub
        .and_then(|_| app.scatter_frame())
        .filter(|f| !f.spectrum.is_empty())
        .map(|f| (format!("step {}", f.step), &f.spectrum));
    let newest = match (&app.analysis, &app.run.last_embedding) {
        (Some(a), _) => Some(&a.panel.total.sv_norm),
        (None, Some(e)) if !e.total.sv_norm.is_empty() => Some(&e.total.sv_norm),
        _ => None,
    };
    let Some((label, now)) = scrubbed.or_else(|| newest.map(|n| ("now".to_string(), n))) else {
        frame.render_widget(Paragraph::new("no snapshot yet"), area);
        return;
    };
    let mut series = vec![Series::new(label.as_str(), now).style(pal.fg(Color::Green))];
    if let Some((label, values)) = &app.spectrum_reference {
        series.push(Series::new(label.as_str(), values).style(pal.fg(Color::Yellow)));
    }
    if let Some(first) = &app.run.first_spectrum {
        series.push(Series::new("start", first).style(pal.fg(Color::DarkGray)));
    }
    // Under spectrum control: the prior's shape beside W's, and one line of numbers saying
    // whether σ reached it and whether σ still are W's singular values.
    let spectral = app
        .run
        .last_embedding
        .as_ref()
        .and_then(|e| e.spectral.as_ref());
    let prior: Vec<f64> = spectral
        .and_then(|s| {
            let t1 = *s.targets.first()?;
            (t1 > 0.0).then(|| s.targets.iter().map(|t| t / t1).collect())
        })
        .unwrap_or_default();
    if !prior.is_empty() {
        series.push(Series::new("prior", &prior).style(pal.fg(Color::Magenta)));
    }
    let area = match spectral {
        Some(s) if area.height >= 5 => {
            let [top, rest] =
                Layout::vertical([Constraint::Length(2), Constraint::Min(0)]).areas(area);
            frame.render_widget(Paragraph::new(spectral_lines(s)), top);
            rest
        }
        _ => area,
    };
    frame.render_widget(
        SpectrumPlot::new(series)
            .legend(true)
            .no_color(pal.no_color),
        area,
    );
}

/// Spectrum control in two lines: σ's distance from the prior, from W's own singular values, and
/// U's from orthonormal columns.
fn spectral_lines(s: &conelab_core::events::SpectralStats) -> String {
    let first = |v: &[f64]| v.first().map_or("–".to_string(), |x| format_compact(*x));
    format!(
        "σ₁ {} → prior {} · off prior {}\nσ vs W {} · ‖UᵀU−I‖ {} · σ {}",
        first(&s.sigma),
        first(&s.targets),
        percent(s.prior_gap()),
        percent(s.sigma_vs_w),
        format_compact(s.u_orth),
        s.update
    )
}

fn percent(x: f64) -> String {
    if x.is_finite() {
        format!("{:.1}%", 100.0 * x)
    } else {
        "–".into()
    }
}

pub(super) fn controls(frame: &mut Frame, app: &App, area: Rect) {
    // A run that takes no commands says why first; its settings stay visible below, dimmed.
    let (area, dim) = match &app.read_only {
        Some(why) => {
            let text = Paragraph::new(why.as_str())
                .wrap(ratatui::widgets::Wrap { trim: true })
                .style(Style::default().fg(Color::Yellow));
            let lines = (wrapped_lines(why, area.width) as u16).min(area.height);
            let [top, rest] =
                Layout::vertical([Constraint::Length(lines), Constraint::Min(0)]).areas(area);
            frame.render_widget(text, top);
            (rest, true)
        }
        None => (area, false),
    };
    let o = &app.run.objectives;
    let check = |on: bool| if on { "[x]" } else { "[ ]" };
    // A value sent and not acknowledged: what was asked, beside what is in force.
    let pending = |c: Control| match app.pending {
        Some((p, v)) if p == c => Some(format_compact(v)),
        _ => None,
    };
    let typed = |c: Control| match &app.typing {
        Some((p, text)) if *p == c => Some(text.clone()),
        _ => None,
    };
    let lines: Vec<Line> = Control::ALL
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let text = match c {
                Control::Term(t) => {
                    let (on, w) = o.term(*t);
                    let name = match t {
                        Term::Cos => "CosReg γ",
                        Term::Lap => "LapReg λ",
                        Term::Agg => "AGG α",
                        Term::Spectrum => "Spectrum λ",
                        Term::Dev => "DEV α",
                        Term::Ul => "Unlikelihood α",
                    };
                    match (typed(Control::Term(*t)), pending(Control::Term(*t))) {
                        (Some(text), _) => format!("{} {name} = {text}_", check(on)),
                        (None, Some(asked)) => format!("{} {name} → {asked} pending", check(on)),
                        (None, None) => {
                            format!("{} {name:<15}{:>9}", check(on), format_compact(w))
                        }
                    }
                }
                Control::Freeze(g) => {
                    format!("{} freeze {g}", check(o.freeze.is_frozen(*g)))
                }
                Control::GateFreeze => format!("    gate-freeze: {}", o.gate_freeze.name()),
                Control::Pause => match app.run.status {
                    RunStatus::Paused => "    resume".into(),
                    _ => "    pause".into(),
                },
                Control::Checkpoint => "    checkpoint now".into(),
                Control::Loss => {
                    let current = LossChoice::of(o).name();
                    match app.pending_loss {
                        Some(choice) => {
                            let arrow = if app.view.ascii { "->" } else { "→" };
                            format!("    loss: {current} {arrow} {}?", choice.name())
                        }
                        None => format!("    loss: {current}"),
                    }
                }
                Control::LearningRate => {
                    match (typed(Control::LearningRate), pending(Control::LearningRate)) {
                        (Some(text), _) => format!("    lr = {text}_"),
                        (None, Some(asked)) => format!("    lr → {asked} pending"),
                        (None, None) => format!(
                            "    lr {:>19}",
                            app.run
                                .lr
                                .map(|l| format!("{l:.3e}"))
                                .unwrap_or_else(|| "–".into())
                        ),
                    }
                }
            };
            let selected = app.focus == Pane::Controls && i == app.controls_cursor && !dim;
            let style = if selected {
                Style::default().add_modifier(Modifier::REVERSED)
            } else if dim {
                Style::default().add_modifier(Modifier::DIM)
            } else {
                Style::default()
            };
            Line::styled(text, style)
        })
        .collect();
    // Below the controls (never between them: the cursor counts lines): a changed lr has
    // switched its schedule off.
    let mut lines = lines;
    if let Some(step) = app.run.lr_fixed_from {
        lines.push(Line::styled(
            format!("lr schedule off from step {step}"),
            Style::default().add_modifier(Modifier::DIM),
        ));
    }
    // Keep the cursor visible in a short pane.
    let height = area.height as usize;
    let offset = app.controls_cursor.saturating_sub(height.saturating_sub(1));
    frame.render_widget(Paragraph::new(lines).scroll((offset as u16, 0)), area);
}

pub(super) fn events(frame: &mut Frame, app: &App, area: Rect, pal: &Palette) {
    let height = area.height as usize;
    let lines: Vec<Line> = app
        .run
        .log
        .iter()
        .rev()
        .take(height)
        .rev()
        .map(|l| {
            let color = match l.kind {
                LogKind::Info => Color::Gray,
                LogKind::Intervention => Color::Magenta,
                LogKind::Eval => Color::Cyan,
                LogKind::Checkpoint => Color::Green,
                LogKind::Warning => Color::Yellow,
                LogKind::Error => Color::Red,
            };
            Line::from(vec![
                Span::styled(format!("{:>6} ", l.step), pal.fg(Color::DarkGray)),
                Span::styled(l.text.clone(), pal.fg(color)),
            ])
        })
        .collect();
    frame.render_widget(Paragraph::new(lines), area);
}

/// Lines `text` takes when word-wrapped at `width` (greedy, as the Paragraph wraps).
pub(super) fn wrapped_lines(text: &str, width: u16) -> usize {
    let width = usize::from(width.max(1));
    let mut lines = 1;
    let mut used = 0;
    for word in text.split_whitespace() {
        let w = word.chars().count();
        let need = if used == 0 { w } else { used + 1 + w };
        if need <= width {
            used = need;
        } else {
            lines += 1 + w.saturating_sub(1) / width;
            used = w % width;
        }
    }
    lines
}

pub(super) fn group_index(groups: Option<&RowGroups>, id: u32) -> Option<usize> {
    groups
        .filter(|g| (id as usize) < g.len())
        .map(|g| match g.group_of(id as usize) {
            Group::Frequent => 0,
            Group::Medium => 1,
            Group::Rare => 2,
        })
}
