//! A table as bytes: CSV, Parquet, JSON through polars; Markdown and LaTeX written here.

use super::*;

/// Renders a table in a format.
pub fn render(table: &Exported, format: Format) -> Result<Vec<u8>, StoreError> {
    let mut df = table.frame.clone();
    let mut out = Vec::new();
    match format {
        Format::Csv => {
            CsvWriter::new(Cursor::new(&mut out)).finish(&mut df)?;
        }
        Format::Parquet => {
            // What the reads behind the table skipped, where a reader of the file sees it
            // (`pyarrow.parquet.read_metadata(f).metadata[b"conelab.damage"]`).
            let damage = (!table.warnings.is_empty()).then(|| {
                KeyValueMetadata::from_static(vec![(
                    DAMAGE_KEY.to_owned(),
                    table.warnings.join("\n"),
                )])
            });
            ParquetWriter::new(Cursor::new(&mut out))
                .with_key_value_metadata(damage)
                .finish(&mut df)?;
        }
        Format::Json => {
            JsonWriter::new(Cursor::new(&mut out))
                .with_json_format(JsonFormat::Json)
                .finish(&mut df)?;
            out.push(b'\n');
        }
        Format::Markdown => {
            out = markdown(table)?.into_bytes();
            for w in &table.warnings {
                out.extend(format!("\n<!-- {DAMAGE_KEY}: {} -->", w.replace("--", "- -")).bytes());
            }
            if !table.warnings.is_empty() {
                out.push(b'\n');
            }
        }
        Format::Latex => {
            out = latex(table)?.into_bytes();
            for w in &table.warnings {
                out.extend(format!("% {DAMAGE_KEY}: {}\n", w.replace('\n', " ")).bytes());
            }
        }
    }
    Ok(out)
}

/// The key of the damage note a table carries where its format has room for one: Parquet's
/// file metadata, a Markdown comment, a LaTeX comment (CSV and JSON have none: stderr says it,
/// and `--strict` refuses the table).
pub const DAMAGE_KEY: &str = "conelab.damage";

/// Every cell as text, with the layout's precision; `None` for a missing value.
pub(crate) fn cells(table: &Exported) -> Result<Vec<Vec<Option<String>>>, StoreError> {
    let df = &table.frame;
    let mut out = vec![Vec::with_capacity(df.width()); df.height()];
    for (ci, column) in df.columns().iter().enumerate() {
        let decimals = table.layout.decimals.get(ci).copied().flatten();
        let s = column.as_materialized_series();
        for (ri, row) in out.iter_mut().enumerate() {
            let v = s.get(ri)?;
            row.push(match v {
                AnyValue::Null => None,
                AnyValue::String(t) => Some(t.to_string()),
                AnyValue::StringOwned(t) => Some(t.to_string()),
                AnyValue::Float64(x) => format_number(x, decimals),
                AnyValue::Float32(x) => format_number(x as f64, decimals),
                other => Some(other.to_string()),
            });
        }
    }
    // Aggregated cells: `mean ± std`, and the count where it is short of the row's runs.
    let count =
        |row: &[Option<String>], ci: usize| -> Option<u64> { row.get(ci)?.as_ref()?.parse().ok() };
    let raw = |ci: usize, ri: usize| -> Option<f64> {
        match df
            .columns()
            .get(ci)?
            .as_materialized_series()
            .get(ri)
            .ok()?
        {
            AnyValue::Float64(x) => Some(x),
            AnyValue::Float32(x) => Some(x as f64),
            _ => None,
        }
    };
    for (ri, row) in out.iter_mut().enumerate() {
        let runs = table.layout.row_count.and_then(|ci| count(row, ci));
        for (&mean, &(std, n, ci)) in &table.layout.spread {
            let Some(m) = row[mean].clone() else { continue };
            let mut text = match (&row[std], raw(mean, ri), raw(std, ri)) {
                // The spread to two significant digits and the mean to the same place (never
                // fewer decimals than the column's): 10.5 ± 0.71, not 10 ± 1.
                // (A spread at rounding level, 1e-17 on equal values, is no spread.)
                (Some(_), Some(mv), Some(sv)) if sv.is_finite() && sv > 1e-9 * mv.abs() => {
                    let column = table
                        .layout
                        .decimals
                        .get(mean)
                        .copied()
                        .flatten()
                        .unwrap_or(0);
                    let d = ((1 - sv.log10().floor() as i32).clamp(0, 8) as usize).max(column);
                    // The seeds' 95 % t-interval of the mean (methods.md §4), to the same place.
                    match raw(ci, ri).filter(|h| h.is_finite()) {
                        Some(h) => format!("{mv:.d$} ± {sv:.d$} [{:.d$}, {:.d$}]", mv - h, mv + h),
                        None => format!("{mv:.d$} ± {sv:.d$}"),
                    }
                }
                (Some(sd), ..) => format!("{m} ± {sd}"),
                (None, ..) => m,
            };
            if let (Some(k), Some(runs)) = (count(row, n), runs)
                && k < runs
            {
                text.push_str(&format!(" (n={k})"));
            }
            row[mean] = Some(text);
        }
    }
    Ok(out)
}

/// A number with sensible precision: `decimals` when given; otherwise integers as integers, four
/// significant digits (two decimals at least above 1), scientific below 10⁻³ — and five
/// significant digits in scientific notation from 10⁷ (10¹⁵ for an integer) whatever was asked.
/// NaN is missing.
pub fn format_number(x: f64, decimals: Option<usize>) -> Option<String> {
    if x.is_nan() {
        return None;
    }
    if x.is_infinite() {
        return Some(if x > 0.0 { "inf" } else { "-inf" }.into());
    }
    let a = x.abs();
    // A diverged run's PPL of 10¹¹² is `1.2346e112` in a paper's table, never 113 digits.
    if a >= 1e15 || (a >= 1e7 && x != x.trunc()) {
        return Some(format!("{x:.4e}"));
    }
    if let Some(d) = decimals {
        return Some(format!("{x:.d$}"));
    }
    Some(if x == x.trunc() && a < 1e15 {
        format!("{x:.0}")
    } else if a >= 1000.0 {
        format!("{x:.1}")
    } else if a >= 1.0 {
        format!("{x:.2}")
    } else if a >= 1e-3 {
        let d = (3 - a.log10().floor() as i32).max(0) as usize;
        format!("{x:.d$}")
    } else {
        format!("{x:.3e}")
    })
}

pub(crate) fn headers(table: &Exported) -> Vec<String> {
    let names: Vec<String> = table
        .frame
        .get_column_names()
        .iter()
        .map(|s| s.to_string())
        .collect();
    if table.layout.headers.len() == names.len() {
        table.layout.headers.clone()
    } else {
        names
    }
}

/// Columns the presentation formats leave out: the run ids (the name says it) in `groups`, `run_uuid` everywhere, and
/// the std and count columns that an aggregated cell already shows beside its mean.
pub(crate) fn shown(table: &Exported) -> Vec<usize> {
    let names = table.frame.get_column_names();
    let partners: Vec<usize> = table
        .layout
        .spread
        .values()
        .flat_map(|&(std, n, ci)| [std, n, ci])
        .collect();
    (0..names.len())
        .filter(|&i| {
            let id = matches!(names[i].as_str(), c::RUN_ID | RUN_IDS);
            // A UUID is for joins, not for reading: CSV, JSON and Parquet keep it.
            let hidden_id = (table.layout.groups.len() > 1 && id) || names[i] == RUN_UUID;
            !hidden_id && !partners.contains(&i)
        })
        .collect()
}

pub(crate) fn is_numeric(table: &Exported, ci: usize) -> bool {
    table.frame.columns()[ci].dtype().is_primitive_numeric()
}

pub(crate) fn markdown(table: &Exported) -> Result<String, StoreError> {
    let cells = cells(table)?;
    let headers = headers(table);
    let cols = shown(table);
    let group_of = group_labels(table);
    let mut s = String::new();
    let head: Vec<String> = cols
        .iter()
        .map(|&ci| match &group_of[ci] {
            Some(g) if !g.is_empty() => format!("{g} {}", headers[ci]),
            _ => headers[ci].clone(),
        })
        .map(|h| md_escape(&h))
        .collect();
    s.push_str(&format!("| {} |\n", head.join(" | ")));
    let rule: Vec<&str> = cols
        .iter()
        .map(|&ci| if is_numeric(table, ci) { "---:" } else { "---" })
        .collect();
    s.push_str(&format!("|{}|\n", rule.join("|")));
    for line in body_rows(table, &cells, &cols, md_escape, "–", |t| {
        format!("**{t}**")
    }) {
        s.push_str(&format!("| {} |\n", line.join(" | ")));
    }
    Ok(s)
}

/// The shown cells of every row, escaped, a missing value spelled `missing`, the best values
/// wrapped by `bold`.
pub(crate) fn body_rows(
    table: &Exported,
    cells: &[Vec<Option<String>>],
    cols: &[usize],
    escape: fn(&str) -> String,
    missing: &str,
    bold: impl Fn(&str) -> String,
) -> Vec<Vec<String>> {
    cells
        .iter()
        .enumerate()
        .map(|(ri, row)| {
            cols.iter()
                .map(|&ci| {
                    let text = row[ci]
                        .as_deref()
                        .map(escape)
                        .unwrap_or_else(|| missing.to_string());
                    if bold_at(table, ri, ci) {
                        bold(&text)
                    } else {
                        text
                    }
                })
                .collect()
        })
        .collect()
}

pub(crate) fn bold_at(table: &Exported, ri: usize, ci: usize) -> bool {
    table
        .layout
        .bold
        .get(ri)
        .and_then(|r| r.get(ci))
        .copied()
        .unwrap_or(false)
}

/// The spanning header each column falls under.
pub(crate) fn group_labels(table: &Exported) -> Vec<Option<String>> {
    let width = table.frame.width();
    let mut out = vec![None; width];
    let mut at = 0;
    for (label, span) in &table.layout.groups {
        for slot in out.iter_mut().skip(at).take(*span) {
            *slot = Some(label.clone());
        }
        at += span;
    }
    out
}

pub(crate) fn md_escape(s: &str) -> String {
    s.replace('|', "\\|")
}

/// A booktabs `tabular`: spanning headers with `\cmidrule`s, numbers right-aligned, the best
/// value of each column in bold.
pub(crate) fn latex(table: &Exported) -> Result<String, StoreError> {
    let cells = cells(table)?;
    let headers = headers(table);
    let cols = shown(table);
    let spec: String = cols
        .iter()
        .map(|&ci| if is_numeric(table, ci) { 'r' } else { 'l' })
        .collect();
    let mut s = format!("\\begin{{tabular}}{{{spec}}}\n\\toprule\n");
    if table.layout.groups.len() > 1 {
        // Spans over the shown columns only.
        let group_of = group_labels(table);
        let mut spans: Vec<(String, usize)> = Vec::new();
        for &ci in &cols {
            let g = group_of[ci].clone().unwrap_or_default();
            match spans.last_mut() {
                Some((label, n)) if *label == g => *n += 1,
                _ => spans.push((g, 1)),
            }
        }
        let mut parts = Vec::new();
        let mut rules = Vec::new();
        let mut at = 1;
        for (label, n) in &spans {
            if label.is_empty() {
                parts.push(vec![""; *n].join(" & "));
            } else {
                parts.push(format!(
                    "\\multicolumn{{{n}}}{{c}}{{{}}}",
                    latex_escape(label)
                ));
                rules.push(format!("\\cmidrule(lr){{{at}-{}}}", at + n - 1));
            }
            at += n;
        }
        s.push_str(&format!(
            "{} \\\\\n{}\n",
            parts.join(" & "),
            rules.join(" ")
        ));
    }
    let head: Vec<String> = cols.iter().map(|&ci| latex_escape(&headers[ci])).collect();
    s.push_str(&format!("{} \\\\\n\\midrule\n", head.join(" & ")));
    for line in body_rows(table, &cells, &cols, latex_escape, "--", |t| {
        format!("\\textbf{{{t}}}")
    }) {
        s.push_str(&format!("{} \\\\\n", line.join(" & ")));
    }
    s.push_str("\\bottomrule\n\\end{tabular}\n");
    Ok(s)
}

/// Escapes LaTeX's special characters and spells the Greek letters and signs our labels use in
/// math mode, so the table compiles without a Unicode engine.
pub fn latex_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '\\' => out.push_str("\\textbackslash{}"),
            '&' | '%' | '$' | '#' | '_' | '{' | '}' => {
                out.push('\\');
                out.push(ch);
            }
            '~' => out.push_str("\\textasciitilde{}"),
            '^' => out.push_str("\\textasciicircum{}"),
            'α' => out.push_str("$\\alpha$"),
            'β' => out.push_str("$\\beta$"),
            'γ' => out.push_str("$\\gamma$"),
            'λ' => out.push_str("$\\lambda$"),
            'μ' => out.push_str("$\\mu$"),
            'σ' => out.push_str("$\\sigma$"),
            'τ' => out.push_str("$\\tau$"),
            '×' => out.push_str("$\\times$"),
            '±' => out.push_str("$\\pm$"),
            '≤' => out.push_str("$\\le$"),
            '≥' => out.push_str("$\\ge$"),
            '−' => out.push('-'),
            '–' => out.push_str("--"),
            '…' => out.push_str("\\ldots{}"),
            '→' => out.push_str("$\\to$"),
            c if c.is_ascii() => out.push(c),
            // Anything else would stop pdflatex: keep the table compiling.
            _ => out.push('?'),
        }
    }
    out
}
