//! Resolving a run's configuration: preset, then the TOML config file, then command-line flags.
//!
//! A config file has two optional tables:
//! ```toml
//! [model]
//! preset = "tiny"      # the starting point; any field of the preset can follow
//! d_model = 64
//! [train]
//! batch = 8            # any field of TrainConfig
//! lr = 3e-4
//! [objectives]         # the loss and regularisers at the start (objective::Objectives)
//! loss = "mle"
//! cos = { enabled = true, weight = 1.0 }
//! freeze = { rare = true, until = 2000 }
//! [run]                # what the run is called (--name, --tag and --notes go on top)
//! name = "CosReg, PTB"
//! tags = ["sweep-3", "ptb"]
//! notes = "γ from Gao et al."
//! ```

use std::path::Path;

use conelab_core::choice::Choice;
use conelab_core::labels::LabelEdit;
use conelab_core::model::{ModelConfig, Preset};
use conelab_core::train_config::TrainConfig;

/// The longest `--config` file read: a run's settings are a few hundred bytes.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum ConfigFileError {
    #[error("cannot read config {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("config {path}: {message}")]
    Invalid { path: String, message: String },
}

/// The two tables of a config file, still as TOML.
#[derive(Debug, Default, Clone)]
pub struct ConfigFile {
    pub preset: Option<Preset>,
    model: toml::Table,
    train: toml::Table,
    path: String,
    /// The `[run]` table: name, tags and notes.
    pub labels: LabelEdit,
}

/// The `[run]` table of a config file.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
struct RunTable {
    name: Option<String>,
    tags: Vec<String>,
    notes: Option<String>,
}

impl ConfigFile {
    /// The file at `path`, read up to [`MAX_CONFIG_BYTES`] (`--config /dev/zero` is refused,
    /// not read for ever).
    pub fn read(path: &Path) -> Result<Self, ConfigFileError> {
        use std::io::Read;
        let name = path.display().to_string();
        let read = |source| ConfigFileError::Read {
            path: name.clone(),
            source,
        };
        let mut bytes = Vec::new();
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_CONFIG_BYTES + 1).read_to_end(&mut bytes))
            .map_err(read)?;
        if bytes.len() as u64 > MAX_CONFIG_BYTES {
            return Err(ConfigFileError::Invalid {
                path: name,
                message: format!(
                    "longer than {} KiB: not a run's settings",
                    MAX_CONFIG_BYTES / 1024
                ),
            });
        }
        let text = String::from_utf8(bytes)
            .map_err(|e| read(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))?;
        Self::parse(&text, &name)
    }

    pub fn parse(text: &str, name: &str) -> Result<Self, ConfigFileError> {
        let invalid = |message: String| ConfigFileError::Invalid {
            path: name.to_owned(),
            message,
        };
        let mut root: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| invalid(e.message().to_owned()))?;
        let mut table = |key: &str| -> Result<toml::Table, ConfigFileError> {
            match root.remove(key) {
                None => Ok(toml::Table::new()),
                Some(toml::Value::Table(t)) => Ok(t),
                Some(_) => Err(invalid(format!("`{key}` must be a table ([{key}])"))),
            }
        };
        let mut model = table("model")?;
        let mut train = table("train")?;
        let run: RunTable = toml::Value::Table(table("run")?)
            .try_into()
            .map_err(|e: toml::de::Error| invalid(format!("[run]: {}", e.message())))?;
        let labels = LabelEdit {
            name: run.name,
            add: run.tags,
            remove: Vec::new(),
            notes: run.notes,
        };
        if let Some(objectives) = root.remove("objectives") {
            if !objectives.is_table() {
                return Err(invalid(
                    "`objectives` must be a table ([objectives])".into(),
                ));
            }
            train.insert("objectives".into(), objectives);
        }
        if let Some(extra) = root.keys().next() {
            return Err(invalid(format!(
                "unknown key `{extra}` (expected the tables [model], [train], [objectives] and [run])"
            )));
        }
        let preset = match model.remove("preset") {
            None => None,
            Some(toml::Value::String(s)) => Some(
                Preset::from_name(&s)
                    .ok_or_else(|| invalid(format!("unknown model preset `{s}`")))?,
            ),
            Some(_) => return Err(invalid("model.preset must be a string".into())),
        };
        Ok(Self {
            preset,
            model,
            train,
            path: name.to_owned(),
            labels,
        })
    }

    fn invalid(&self, message: String) -> ConfigFileError {
        ConfigFileError::Invalid {
            path: self.path.clone(),
            message,
        }
    }

    /// The preset's model config with this file's `[model]` fields on top.
    pub fn model(&self, preset: Preset) -> Result<ModelConfig, ConfigFileError> {
        merge(preset.config(), &self.model).map_err(|m| self.invalid(format!("[model]: {m}")))
    }

    /// The default training config with this file's `[train]` fields on top.
    pub fn train(&self) -> Result<TrainConfig, ConfigFileError> {
        merge(TrainConfig::default(), &self.train)
            .map_err(|m| self.invalid(format!("[train]: {m}")))
    }
}

/// Why a table's fields cannot go on top of the defaults.
#[derive(Debug, thiserror::Error)]
enum MergeError {
    #[error("`arch` comes from the preset; choose another preset instead")]
    Arch,
    /// The field's error, kept whole; only its one-line message is shown (toml's `Display` spans
    /// lines and quotes the file, which the config error already names).
    #[error("{}", .0.message())]
    Field(toml::de::Error),
    #[error(transparent)]
    Encode(#[from] toml::ser::Error),
}

/// Serialises `base`, overwrites the given keys, deserialises again (unknown keys are errors
/// because the config types deny them).
fn merge<T: serde::Serialize + serde::de::DeserializeOwned>(
    base: T,
    overrides: &toml::Table,
) -> Result<T, MergeError> {
    let mut table = toml::Table::try_from(base)?;
    for (k, v) in overrides {
        if k == "arch" {
            return Err(MergeError::Arch);
        }
        table.insert(k.clone(), v.clone());
    }
    toml::Value::Table(table)
        .try_into()
        .map_err(MergeError::Field)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_fields_override_the_preset() {
        let f = ConfigFile::parse(
            "[model]\npreset = \"small\"\nd_model = 64\n[train]\nbatch = 3\nlr = 0.5\n",
            "t.toml",
        )
        .expect("parses");
        assert_eq!(f.preset, Some(Preset::Small));
        let ModelConfig::Transformer(t) = f.model(Preset::Small).expect("model") else {
            panic!("small is a Transformer");
        };
        assert_eq!((t.d_model, t.layers), (64, 4));
        let train = f.train().expect("train");
        assert_eq!((train.batch, train.lr), (3, 0.5));
        assert_eq!(train.steps, TrainConfig::default().steps);
        let f = ConfigFile::parse(
            "[objectives]\nloss = \"nce\"\nfreeze = { rare = true }\n[objectives.cos]\nenabled = true\nweight = 2.0\n",
            "t.toml",
        )
        .expect("parses");
        let o = f.train().expect("train").objectives;
        assert_eq!(o.loss, conelab_core::objective::LossKind::Nce);
        assert!(o.freeze.rare && o.cos.enabled);
        assert_eq!(o.cos.weight, 2.0);
    }

    #[test]
    fn and_is_configured_by_its_own_table() {
        let f = ConfigFile::parse(
            "[objectives]\nloss = \"and\"\nand = { alpha = 0.1, gamma = 0.25, squash = true }\n",
            "t.toml",
        )
        .expect("parses");
        let o = f.train().expect("train").objectives;
        assert_eq!(o.loss, conelab_core::objective::LossKind::And);
        assert_eq!((o.and_lm.alpha, o.and_lm.gamma), (0.1, 0.25));
        assert!(o.squashed_scores());
        assert_eq!(o.label(), "AND α=0.1 γ=0.25 squash");
        let bad =
            ConfigFile::parse("[objectives]\nand = { gamma = 0 }\n", "t.toml").expect("parses");
        let e = bad
            .train()
            .expect("train")
            .objectives
            .validate([1, 1, 1])
            .unwrap_err()
            .to_string();
        assert!(e.contains("and fraction"), "{e}");
        let typo =
            ConfigFile::parse("[objectives]\nand = { gama = 0.1 }\n", "t.toml").expect("parses");
        assert!(typo.train().is_err(), "unknown key in [objectives.and]");
    }

    #[test]
    fn unknown_keys_and_bad_types_are_errors_naming_them() {
        let f = ConfigFile::parse("[model]\nd_modle = 64\n", "t.toml").expect("parses");
        let e = f.model(Preset::Tiny).unwrap_err().to_string();
        assert!(e.contains("d_modle"), "{e}");
        let f = ConfigFile::parse("[train]\nbatch = \"big\"\n", "t.toml").expect("parses");
        assert!(f.train().is_err());
        assert!(ConfigFile::parse("steps = 3\n", "t.toml").is_err());
        let f = ConfigFile::parse(
            "[objectives]\ncos = { enabled = true, weght = 1 }\n",
            "t.toml",
        )
        .expect("parses");
        assert!(f.train().unwrap_err().to_string().contains("weght"));
        assert!(ConfigFile::parse("[model\n", "t.toml").is_err());
        assert!(ConfigFile::parse("[model]\npreset = \"huge\"\n", "t.toml").is_err());
    }
}
