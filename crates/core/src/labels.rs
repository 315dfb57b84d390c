//! What a researcher calls a run: a name, tags and notes. Set at `train` (`--name`, `--tag`,
//! `--notes`, or the config file's `[run]` table) and edited afterwards (`conelab tag`, `conelab
//! note`, `conelab rename`); the store keeps them in its `run.json`, the run's hello carries
//! them to its viewers, and the run index finds runs by them.

use serde::{Deserialize, Serialize};

use conelab_base::error::Invalid;

/// The longest name (characters).
pub const MAX_NAME: usize = 200;
/// The longest tag (characters).
pub const MAX_TAG: usize = 64;
/// The most tags on one run.
pub const MAX_TAGS: usize = 64;
/// The longest notes (bytes).
pub const MAX_NOTES: usize = 64 * 1024;

/// A run's name, tags and notes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunLabels {
    /// Shown instead of the folder's name where a run is listed or labelled; `None`: unnamed.
    pub name: Option<String>,
    /// In the order they were added, each once.
    pub tags: Vec<String>,
    pub notes: String,
}

/// A change to a run's labels. Applied all or nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LabelEdit {
    /// A new name; an empty one takes the name away.
    pub name: Option<String>,
    /// Tags to add (already there: nothing to do).
    pub add: Vec<String>,
    /// Tags to take off (each must be there).
    pub remove: Vec<String>,
    /// New notes, replacing the old ones; empty clears them.
    pub notes: Option<String>,
}

impl LabelEdit {
    pub fn is_empty(&self) -> bool {
        self.name.is_none() && self.add.is_empty() && self.remove.is_empty() && self.notes.is_none()
    }

    /// `+T` adds T, `-T` takes it off, a bare `T` adds it (the arguments of `conelab tag`).
    pub fn from_tag_args(args: &[String]) -> Self {
        let mut edit = Self::default();
        for a in args {
            match (a.strip_prefix('+'), a.strip_prefix('-')) {
                (Some(t), _) => edit.add.push(t.to_string()),
                (_, Some(t)) => edit.remove.push(t.to_string()),
                _ => edit.add.push(a.clone()),
            }
        }
        edit
    }
}

/// Invisible characters that change how text around them shows (bidirectional overrides and
/// isolates, zero-width spaces and joiners, the soft hyphen, the byte-order mark): in a name or
/// a tag they can make it look like another one (U+202E shows "evil" as "live").
fn is_invisible_format(c: char) -> bool {
    matches!(
        c,
        '\u{00AD}'
            | '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{2069}'
            | '\u{FEFF}'
    )
}

/// Why a tag cannot be one: it is written unquoted in tables, CSV cells and the command line.
fn check_tag(tag: &str) -> Result<(), Invalid> {
    if tag.is_empty() {
        return Err("a tag cannot be empty".into());
    }
    if tag.chars().count() > MAX_TAG {
        return Err(format!("tag `{tag}` is longer than {MAX_TAG} characters").into());
    }
    if let Some(c) = tag.chars().find(|&c| {
        c.is_whitespace()
            || c.is_control()
            || is_invisible_format(c)
            || matches!(c, ',' | '+' | '"' | '|')
    }) {
        return Err(format!(
            "tag `{tag}` contains {c:?}: tags are single words (no spaces, commas, +, \" or |)"
        )
        .into());
    }
    if tag.starts_with('-') {
        return Err(format!("tag `{tag}` cannot start with -").into());
    }
    Ok(())
}

impl RunLabels {
    /// `edit` applied; the labels stay as they were when it is refused.
    pub fn apply(&mut self, edit: &LabelEdit) -> Result<(), Invalid> {
        let mut next = self.clone();
        if let Some(name) = &edit.name {
            let name = name.trim();
            if name.chars().count() > MAX_NAME {
                return Err(format!("a name is at most {MAX_NAME} characters").into());
            }
            if name.chars().any(char::is_control) {
                return Err("a name is one line without control characters".into());
            }
            if let Some(c) = name.chars().find(|&c| is_invisible_format(c)) {
                return Err(format!(
                    "a name is shown as written: no invisible or direction-changing characters ({c:?})"
                )
                .into());
            }
            next.name = (!name.is_empty()).then(|| name.to_string());
        }
        for tag in &edit.remove {
            let before = next.tags.len();
            next.tags.retain(|t| t != tag);
            if next.tags.len() == before {
                let on = if self.tags.is_empty() {
                    "it has none".to_string()
                } else {
                    format!("it has {}", self.tags.join(", "))
                };
                return Err(format!("the run has no tag `{tag}` ({on})").into());
            }
        }
        for tag in &edit.add {
            check_tag(tag)?;
            if !next.tags.contains(tag) {
                next.tags.push(tag.clone());
            }
        }
        if next.tags.len() > MAX_TAGS {
            return Err(format!("a run has at most {MAX_TAGS} tags").into());
        }
        if let Some(notes) = &edit.notes {
            if notes.len() > MAX_NOTES {
                return Err(format!(
                    "notes are at most {} KiB (these are {} bytes)",
                    MAX_NOTES / 1024,
                    notes.len()
                )
                .into());
            }
            if notes
                .chars()
                .any(|c| c.is_control() && !matches!(c, '\n' | '\t'))
            {
                return Err("notes are text: no control characters but newlines and tabs".into());
            }
            next.notes = notes.trim_end().to_string();
        }
        *self = next;
        Ok(())
    }

    /// `tag, tag` or empty.
    pub fn tag_list(&self) -> String {
        self.tags.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags(args: &[&str]) -> LabelEdit {
        LabelEdit::from_tag_args(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn tags_are_added_once_in_order_and_taken_off_by_name() {
        let mut l = RunLabels::default();
        l.apply(&tags(&["+baseline", "seed1", "+baseline"]))
            .expect("add");
        assert_eq!(l.tags, ["baseline", "seed1"]);
        l.apply(&tags(&["-seed1", "+ptb"])).expect("edit");
        assert_eq!(l.tags, ["baseline", "ptb"]);
        let e = l
            .apply(&tags(&["-nope", "+x"]))
            .expect_err("absent tag")
            .to_string();
        assert!(
            e.contains("no tag `nope`") && e.contains("baseline, ptb"),
            "{e}"
        );
        assert_eq!(l.tags, ["baseline", "ptb"], "all or nothing");
    }

    #[test]
    fn bad_tags_names_and_notes_are_refused_whole() {
        let mut l = RunLabels::default();
        for bad in ["+", "+two words", "+a,b", "+x|y", "+--x", "+tab\there"] {
            assert!(l.apply(&tags(&[bad])).is_err(), "{bad} accepted");
        }
        let long = "t".repeat(MAX_TAG + 1);
        assert!(l.apply(&tags(&[&format!("+{long}")])).is_err());
        let name = |n: &str| LabelEdit {
            name: Some(n.into()),
            ..LabelEdit::default()
        };
        assert!(l.apply(&name("line\nbreak")).is_err());
        // Shown as something else: a right-to-left override, an invisible-only name, a
        // zero-width space hiding in a tag.
        for spoof in ["\u{202e}evil", "\u{200b}\u{200b}", "mle\u{2066}"] {
            let e = l.apply(&name(spoof)).expect_err(spoof);
            assert!(e.to_string().contains("invisible"), "{e}");
        }
        assert!(l.apply(&tags(&["+ab\u{200b}c"])).is_err());
        l.apply(&name("Ünïcödé → fine"))
            .expect("visible text is fine");
        assert!(l.apply(&name(&"n".repeat(MAX_NAME + 1))).is_err());
        l.apply(&name("  CosReg sweep ")).expect("name");
        assert_eq!(l.name.as_deref(), Some("CosReg sweep"));
        l.apply(&name("")).expect("unname");
        assert_eq!(l.name, None);
        let notes = |n: &str| LabelEdit {
            notes: Some(n.into()),
            ..LabelEdit::default()
        };
        assert!(l.apply(&notes("bell\u{7}")).is_err());
        assert!(l.apply(&notes(&"x".repeat(MAX_NOTES + 1))).is_err());
        l.apply(&notes("lr too high?\n\tcheck step 300\n\n"))
            .expect("notes");
        assert_eq!(l.notes, "lr too high?\n\tcheck step 300");
        assert_eq!(
            l,
            RunLabels {
                name: None,
                tags: vec![],
                notes: "lr too high?\n\tcheck step 300".into()
            }
        );
    }

    #[test]
    fn too_many_tags_are_refused() {
        let mut l = RunLabels::default();
        let many: Vec<String> = (0..=MAX_TAGS).map(|i| format!("t{i}")).collect();
        assert!(l.apply(&LabelEdit::from_tag_args(&many)).is_err());
        assert!(l.tags.is_empty());
    }
}
