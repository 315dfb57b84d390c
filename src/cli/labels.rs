//! `conelab tag | note | rename`: a run's labels in its run.json.

use std::path::Path;

use anyhow::{Context, Result};

use conelab_core::labels::LabelEdit;

use super::print_stdout;

pub fn tag(run: &Path, changes: &[String]) -> Result<()> {
    let labels = conelab_catalog::labels::edit(run, &LabelEdit::from_tag_args(changes))?;
    print_stdout(&format!("tags: {}\n", labels.tag_list()))
}

pub fn note(run: &Path, text: String) -> Result<()> {
    let text = if text == "-" {
        let mut all = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin().lock(), &mut all)
            .context("reading the notes from stdin")?;
        all
    } else {
        text
    };
    let edit = LabelEdit {
        notes: Some(text),
        ..LabelEdit::default()
    };
    let labels = conelab_catalog::labels::edit(run, &edit)?;
    print_stdout(&match labels.notes.len() {
        0 => "notes cleared\n".to_string(),
        n => format!("notes saved ({n} bytes)\n"),
    })
}

pub fn rename(run: &Path, name: String) -> Result<()> {
    let edit = LabelEdit {
        name: Some(name),
        ..LabelEdit::default()
    };
    let labels = conelab_catalog::labels::edit(run, &edit)?;
    print_stdout(&match labels.name {
        Some(n) => format!("{} is now called {n}\n", run.display()),
        None => format!("{} has no name now\n", run.display()),
    })
}
