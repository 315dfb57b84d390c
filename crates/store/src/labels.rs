//! A run's labels (`conelab_core::labels`) as the store keeps them, in `run.json` beside the
//! record of what the run is: edited by the run process itself while it is live (it owns
//! `run.json`), otherwise under the store's writer lock. Every rewrite is atomic.

use std::path::Path;
use std::sync::Mutex;

use conelab_base::error::Invalid;
use conelab_core::labels::{LabelEdit, RunLabels};

use super::{RUN_RECORD, StoreError, read_run_record};

/// One edit at a time in this process (two viewers of a live run editing at once).
static EDITING: Mutex<()> = Mutex::new(());

/// Applies `edit` to the labels in `store_dir`'s `run.json` and rewrites it atomically; the new
/// labels. The caller owns the store: the live run's own process, or one holding its writer lock.
pub fn edit_record(store_dir: &Path, edit: &LabelEdit) -> Result<RunLabels, StoreError> {
    let _one = EDITING.lock().unwrap_or_else(|p| p.into_inner());
    let mut record = read_run_record(store_dir)?;
    record.labels.apply(edit).map_err(StoreError::Invalid)?;
    let json = serde_json::to_string_pretty(&record)
        .map_err(|e| StoreError::Invalid(Invalid::because(format!("encoding {RUN_RECORD}"))(e)))?;
    conelab_base::integrity::write_recorded("labels", store_dir, RUN_RECORD, json.as_bytes())?;
    Ok(record.labels)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_written_before_labels_reads_unlabelled_and_takes_edits() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path();
        // run.json as conelab wrote it before labels existed.
        let old = r#"{"run_id":"r1","config_toml":"","corpus":"synthetic","device":"cpu",
            "conelab_version":"0.1.0","git_revision":"x","started_unix":1.0}"#;
        std::fs::write(dir.join(RUN_RECORD), old).expect("write");
        assert_eq!(
            read_run_record(dir).expect("old record").labels,
            RunLabels::default()
        );
        let edit = LabelEdit {
            name: Some("baseline".into()),
            add: vec!["ptb".into()],
            ..LabelEdit::default()
        };
        let labels = edit_record(dir, &edit).expect("edit");
        let back = read_run_record(dir).expect("record");
        assert_eq!(back.labels, labels);
        assert_eq!(
            (back.run_id.as_str(), back.started_unix),
            ("r1", 1.0),
            "the rest kept"
        );
        let text = std::fs::read_to_string(dir.join(RUN_RECORD)).expect("read");
        assert!(
            text.contains("\"name\": \"baseline\"") && text.contains("\"ptb\""),
            "{text}"
        );
    }

    #[test]
    fn a_failed_rewrite_leaves_the_record_as_it_was() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path();
        let mut record =
            super::super::RunRecord::new("r1", String::new(), "c".into(), "cpu".into());
        record.labels.tags = vec!["kept".into()];
        let before = serde_json::to_string_pretty(&record).expect("json");
        std::fs::write(dir.join(RUN_RECORD), &before).expect("write");
        let edit = LabelEdit::from_tag_args(&["-kept".into(), "+new".into()]);
        for plan in ["labels.write:1:ENOSPC", "labels.rename:1:EIO"] {
            let e =
                conelab_base::fault::with_plan(plan, || edit_record(dir, &edit)).expect_err(plan);
            assert!(e.to_string().contains(RUN_RECORD), "{plan}: {e}");
            let now = std::fs::read_to_string(dir.join(RUN_RECORD)).expect("read");
            assert_eq!(now, before, "{plan}: run.json changed");
            let leftovers = std::fs::read_dir(dir)
                .expect("dir")
                .filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
                .count();
            assert_eq!(leftovers, 0, "{plan}: a temporary file was left");
            // The manifest's pending entry keeps the old record verifying.
            assert_eq!(
                read_run_record(dir).expect("verifies").labels.tags,
                vec!["kept".to_string()],
                "{plan}"
            );
        }
        // A refused edit writes nothing either.
        let e =
            edit_record(dir, &LabelEdit::from_tag_args(&["-absent".into()])).expect_err("absent");
        assert!(e.to_string().contains("no tag `absent`"), "{e}");
        assert_eq!(
            std::fs::read_to_string(dir.join(RUN_RECORD)).expect("read"),
            before
        );
    }
}
