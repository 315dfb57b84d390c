//! The neighbours table (Yu et al. Table 13): top-k neighbours of words at a checkpoint, runs side by side.

use super::*;

/// Top-k neighbours from each run's checkpoint at the chosen step.
pub(crate) fn neighbors(req: &ExportRequest) -> Result<Exported, StoreError> {
    if req.words.is_empty() {
        return Err(StoreError::Invalid(
            "--table neighbors needs --words WORD,WORD,…".into(),
        ));
    }
    if req.k == 0 {
        return Err(StoreError::Invalid("-k must be at least 1".into()));
    }
    let mut run_names = Vec::new();
    let mut ids = Vec::new();
    let mut warnings: Vec<String> = Vec::new();
    // table[run][word] = [(neighbour, cosine, group)]
    let mut table: Vec<Vec<Vec<(String, f32, String)>>> = Vec::new();
    for run in &req.runs {
        let checkpoint = checkpoint_for(run, req)?;
        let m = load_matrix(&checkpoint, None).map_err(StoreError::bad_input)?;
        let tokens = m.tokens.as_deref().ok_or_else(|| {
            StoreError::Invalid(
                format!("{}: checkpoint has no vocabulary", checkpoint.display()).into(),
            )
        })?;
        let w = Embeddings::new(m.n, m.d, &m.data).map_err(StoreError::bad_input)?;
        let groups = row_groups(&m);
        let index = NeighborIndex::new(w, Threads::All);
        let mut per_word = Vec::new();
        for word in &req.words {
            let id = conelab_core::words::resolve_word(word, Some(tokens), m.n)
                .map_err(|e| StoreError::Invalid(Invalid::because(run.display().to_string())(e)))?;
            per_word.push(
                index
                    .query(id, req.k, Similarity::Cosine)
                    .into_iter()
                    .map(|nb| {
                        (
                            tokens[nb.id as usize].clone(),
                            nb.score,
                            groups
                                .as_ref()
                                .map(|g| g.group_of(nb.id as usize).name().to_string())
                                .unwrap_or_default(),
                        )
                    })
                    .collect(),
            );
        }
        table.push(per_word);
        let (label, id) = match conelab_store::load(run) {
            Ok(store) => {
                let step = m.step.unwrap_or(0);
                // The label comes from the store (its name, its objectives at the step): what
                // the read skipped may have changed it, and is said (the campaign of #61 found
                // a run relabelled by its folder's name without a word).
                warnings.extend(store.warnings().iter().cloned());
                (run_label(&store, step)?, store.run().run_id.clone())
            }
            // A run from before the store existed still has checkpoints; one whose store
            // cannot be read is named by its folder, and says so.
            Err(e) => {
                if conelab_store::store_dir(run).exists() {
                    warnings.push(format!(
                        "{}: its store cannot be read ({e}); the run is named by its folder",
                        run.display()
                    ));
                }
                let id = run
                    .file_name()
                    .map(|n| n.to_string_lossy().to_string())
                    .unwrap_or_default();
                (id.clone(), id)
            }
        };
        run_names.push(label);
        ids.push(id);
    }
    let names = unique_names(run_names, &ids);
    if matches!(req.format, Format::Markdown | Format::Latex) {
        // Side by side: word, rank, then one "neighbour (cos)" column per run.
        let mut word_col = Vec::new();
        let mut rank_col = Vec::new();
        let mut run_cols: Vec<Vec<String>> = vec![Vec::new(); names.len()];
        for (wi, word) in req.words.iter().enumerate() {
            // As many ranks as any run found: `-k` may exceed the rows (a huge -k once made a
            // row per rank asked, until memory ran out).
            let ranks = table.iter().map(|per_word| per_word[wi].len()).max();
            for rank in 0..ranks.unwrap_or(0) {
                word_col.push(if rank == 0 {
                    word.clone()
                } else {
                    String::new()
                });
                rank_col.push((rank + 1) as u64);
                for (ri, per_word) in table.iter().enumerate() {
                    run_cols[ri].push(
                        per_word[wi]
                            .get(rank)
                            .map(|(t, cos, _)| format!("{t} ({cos:.3})"))
                            .unwrap_or_default(),
                    );
                }
            }
        }
        let height = word_col.len();
        let mut columns = vec![
            Column::new("word".into(), word_col),
            Column::new("rank".into(), rank_col),
        ];
        for (name, values) in names.iter().zip(run_cols) {
            columns.push(Column::new(name.as_str().into(), values));
        }
        let mut out = plain(DataFrame::new(height, columns)?);
        out.warnings = warnings;
        return Ok(out);
    }
    // Long: one row per (run, word, rank), for other tools.
    let (mut r_id, mut r_name, mut r_word, mut r_rank, mut r_nb, mut r_cos, mut r_group) =
        (vec![], vec![], vec![], vec![], vec![], vec![], vec![]);
    for (ri, per_word) in table.iter().enumerate() {
        for (wi, rows) in per_word.iter().enumerate() {
            for (rank, (t, cos, g)) in rows.iter().enumerate() {
                r_id.push(ids[ri].clone());
                r_name.push(names[ri].clone());
                r_word.push(req.words[wi].clone());
                r_rank.push(rank as u64 + 1);
                r_nb.push(t.clone());
                r_cos.push(*cos as f64);
                r_group.push(g.clone());
            }
        }
    }
    let height = r_id.len();
    let mut out = plain(DataFrame::new(
        height,
        vec![
            Column::new(c::RUN_ID.into(), r_id),
            Column::new("run".into(), r_name),
            Column::new("word".into(), r_word),
            Column::new("rank".into(), r_rank),
            Column::new("neighbor".into(), r_nb),
            Column::new("cosine".into(), r_cos),
            Column::new(c::GROUP.into(), r_group),
        ],
    )?);
    out.warnings = warnings;
    Ok(out)
}

/// The checkpoint folder of a run for the chosen step.
pub(crate) fn checkpoint_for(run: &Path, req: &ExportRequest) -> Result<PathBuf, StoreError> {
    held_out(req)?;
    checkpoint_at(run, req.step.unwrap_or(StepChoice::Last))
}

/// The checkpoint of `run` at `step`.
pub(crate) fn checkpoint_at(run: &Path, step: StepChoice) -> Result<PathBuf, StoreError> {
    use conelab_core::run_dir::{CheckpointChoice, RunDir};
    let dir = RunDir::open(run).map_err(StoreError::bad_input)?;
    let choice = match step {
        StepChoice::Last => CheckpointChoice::Last,
        StepChoice::At(n) => CheckpointChoice::At(n),
        // best/ is the best on validation, whatever split the table reads; a run written before
        // best/ was kept: the step-N of its best validation (if it was kept).
        StepChoice::Best => match dir.best_checkpoint() {
            Ok(best) => return Ok(best),
            Err(_) => {
                let store = conelab_store::load(run)?;
                CheckpointChoice::At(resolve_step(&store, split::VALID, StepChoice::Best)?)
            }
        },
    };
    dir.checkpoint(choice).map_err(StoreError::bad_input)
}
