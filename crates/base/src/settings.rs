//! The user's settings: `$XDG_CONFIG_HOME/conelab/config.toml` (else `~/.config/conelab/…`),
//! overridden by the environment, each resolved value knowing where it came from (`conelab config
//! show` prints them so).
//!
//! ```toml
//! data_roots = ["~/corpora"]      # `conelab train NAME` finds corpus NAME in these folders
//! run_roots = ["/scratch/me/runs"] # runs looked for here, besides the index and ./checkpoints
//! theme = "light"                  # or "dark": the workbench's colours
//! color = "never"                  # or "auto": glyphs alone, as NO_COLOR does
//! ```
//!
//! Later work adds keys here; an unknown key is an error (a typo must not pass silently), named
//! with its line.

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde::Deserialize;
use toml::Spanned;

/// Extra corpus folders, `:`-separated, looked in before the config file's `data_roots`.
pub const DATASETS_ENV: &str = "CONELAB_DATASETS";
/// Extra run folders, `:`-separated, looked in before the config file's `run_roots`.
pub const RUNS_ENV: &str = "CONELAB_RUNS";
/// The config file itself, instead of the XDG place (tests, a shared setup).
pub const CONFIG_ENV: &str = "CONELAB_CONFIG";

/// Where a resolved value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SettingSource {
    Default,
    Env(&'static str),
    File { path: PathBuf, line: usize },
}

impl fmt::Display for SettingSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SettingSource::Default => f.write_str("default"),
            SettingSource::Env(name) => write!(f, "${name}"),
            SettingSource::File { path, line } => write!(f, "{}:{line}", path.display()),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ThemeChoice {
    Dark,
    Light,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ColorChoice {
    /// Colours unless `NO_COLOR` is set.
    Auto,
    /// Glyphs alone.
    Never,
}

/// One resolved value and its origin.
#[derive(Debug, Clone, PartialEq)]
pub struct Setting<T> {
    pub value: T,
    pub from: SettingSource,
}

/// The resolved settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// The config file read, or the place it would be read from (`exists` says which).
    pub file: PathBuf,
    pub file_exists: bool,
    /// Folders holding corpora by name, in the order they are searched.
    pub data_roots: Vec<Setting<PathBuf>>,
    /// Folders holding runs (and sweep folders), besides the index; `./checkpoints` last.
    pub run_roots: Vec<Setting<PathBuf>>,
    /// The per-user index of runs (a folder of one small file per run).
    pub index_dir: Setting<PathBuf>,
    /// What can be computed again (`runs`' rows of runs that are over): `$XDG_CACHE_HOME/conelab`.
    pub cache_dir: Setting<PathBuf>,
    pub theme: Setting<ThemeChoice>,
    pub color: Setting<ColorChoice>,
    /// The device a new run trains on when `--device` is not given (`cpu`, `libtorch-cpu`,
    /// `cuda[:N]`; checked where a run starts, which names this setting's line when it is wrong).
    pub device: Setting<Option<String>>,
    /// What could not be read (a config file behind a folder this user cannot enter): said,
    /// then done without.
    pub warnings: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("config file {path} line {line}: {message}")]
    Malformed {
        path: PathBuf,
        line: usize,
        message: String,
    },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SettingsFile {
    data_roots: Option<Spanned<Vec<String>>>,
    run_roots: Option<Spanned<Vec<String>>>,
    theme: Option<Spanned<ThemeChoice>>,
    color: Option<Spanned<ColorChoice>>,
    device: Option<Spanned<String>>,
}

/// The line (1-based) of byte `offset` of `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// `~/x` under `home`; a relative path under the config file's folder (as a sweep file's are).
fn expand(raw: &str, home: Option<&Path>, base: &Path) -> PathBuf {
    if let (Some(rest), Some(home)) = (raw.strip_prefix("~/"), home) {
        return home.join(rest);
    }
    if raw == "~"
        && let Some(home) = home
    {
        return home.to_path_buf();
    }
    let p = PathBuf::from(raw);
    if p.is_absolute() { p } else { base.join(p) }
}

/// The folders of a `:`-separated variable, each absolute (relative ones from `cwd`: a run found
/// by name must not depend on where the command runs).
fn env_paths(
    env: &dyn Fn(&str) -> Option<OsString>,
    name: &'static str,
    cwd: &Path,
) -> Vec<Setting<PathBuf>> {
    let raw = env(name).unwrap_or_default();
    std::env::split_paths(&raw)
        .filter(|p| !p.as_os_str().is_empty())
        .map(|p| Setting {
            value: cwd.join(p),
            from: SettingSource::Env(name),
        })
        .collect()
}

impl Settings {
    /// The settings from the environment `env` (a lookup, so tests pass their own), the config
    /// file it points to, and `cwd` (for `./checkpoints`).
    pub fn load_with(
        env: &dyn Fn(&str) -> Option<OsString>,
        cwd: &Path,
    ) -> Result<Settings, SettingsError> {
        Self::resolve(env, cwd, true)
    }

    /// The settings without the file's (what a process whose file is malformed falls back to
    /// after saying so).
    pub fn without_file(env: &dyn Fn(&str) -> Option<OsString>, cwd: &Path) -> Settings {
        match Self::resolve(env, cwd, false) {
            Ok(c) => c,
            Err(_) => unreachable!("only the file's reading fails"),
        }
    }

    fn resolve(
        env: &dyn Fn(&str) -> Option<OsString>,
        cwd: &Path,
        read_file: bool,
    ) -> Result<Settings, SettingsError> {
        let home = env("HOME").map(PathBuf::from);
        let xdg = |var: &str, fallback: &str| {
            env(var)
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
                .or_else(|| home.as_ref().map(|h| h.join(fallback)))
                .unwrap_or_else(|| cwd.join(fallback))
        };
        let file = env(CONFIG_ENV)
            .map(|f| cwd.join(f))
            .unwrap_or_else(|| xdg("XDG_CONFIG_HOME", ".config").join("conelab/config.toml"));
        let mut config = Settings {
            file_exists: false,
            data_roots: env_paths(env, DATASETS_ENV, cwd),
            run_roots: env_paths(env, RUNS_ENV, cwd),
            index_dir: Setting {
                value: xdg("XDG_STATE_HOME", ".local/state").join("conelab/runs"),
                from: if env("XDG_STATE_HOME").is_some() {
                    SettingSource::Env("XDG_STATE_HOME")
                } else {
                    SettingSource::Default
                },
            },
            cache_dir: Setting {
                value: xdg("XDG_CACHE_HOME", ".cache").join("conelab"),
                from: if env("XDG_CACHE_HOME").is_some() {
                    SettingSource::Env("XDG_CACHE_HOME")
                } else {
                    SettingSource::Default
                },
            },
            theme: Setting {
                value: ThemeChoice::Dark,
                from: SettingSource::Default,
            },
            color: Setting {
                value: ColorChoice::Auto,
                from: SettingSource::Default,
            },
            device: Setting {
                value: None,
                from: SettingSource::Default,
            },
            file: file.clone(),
            warnings: Vec::new(),
        };
        let text = match std::fs::read_to_string(&file) {
            _ if !read_file => None,
            Ok(t) => Some(t),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => {
                config.warnings.push(format!(
                    "config file {}: {e} (read without it)",
                    file.display()
                ));
                None
            }
        };
        if let Some(text) = text {
            config.file_exists = true;
            let parsed: SettingsFile =
                toml::from_str(&text).map_err(|e| SettingsError::Malformed {
                    path: file.clone(),
                    line: e.span().map_or(1, |s| line_of(&text, s.start)),
                    message: e.message().trim().to_owned(),
                })?;
            let base = file.parent().unwrap_or(cwd).to_path_buf();
            let from = |span: std::ops::Range<usize>| SettingSource::File {
                path: file.clone(),
                line: line_of(&text, span.start),
            };
            let paths = |list: Spanned<Vec<String>>| {
                let src = from(list.span());
                list.into_inner()
                    .iter()
                    .map(|raw| Setting {
                        value: expand(raw, home.as_deref(), &base),
                        from: src.clone(),
                    })
                    .collect::<Vec<_>>()
            };
            if let Some(list) = parsed.data_roots {
                config.data_roots.extend(paths(list));
            }
            if let Some(list) = parsed.run_roots {
                config.run_roots.extend(paths(list));
            }
            if let Some(theme) = parsed.theme {
                config.theme = Setting {
                    from: from(theme.span()),
                    value: theme.into_inner(),
                };
            }
            if let Some(color) = parsed.color {
                config.color = Setting {
                    from: from(color.span()),
                    value: color.into_inner(),
                };
            }
            if let Some(device) = parsed.device {
                config.device = Setting {
                    from: from(device.span()),
                    value: Some(device.into_inner()),
                };
            }
        }
        if env("NO_COLOR").is_some_and(|v| !v.is_empty()) {
            config.color = Setting {
                value: ColorChoice::Never,
                from: SettingSource::Env("NO_COLOR"),
            };
        }
        config.run_roots.push(Setting {
            value: cwd.join("checkpoints"),
            from: SettingSource::Default,
        });
        Ok(config)
    }

    /// The settings of this process (its environment and working folder).
    pub fn load() -> Result<Settings, SettingsError> {
        let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
        Self::load_with(&|k| std::env::var_os(k), &cwd)
    }

    /// Folders of runs, without where they came from.
    pub fn run_root_paths(&self) -> Vec<PathBuf> {
        self.run_roots.iter().map(|s| s.value.clone()).collect()
    }
}

static CURRENT: OnceLock<Result<Settings, SettingsError>> = OnceLock::new();

/// This process's settings, read once. A config file that cannot be read counts as none here
/// (the binary checks it first with [`check`] and stops with its error).
pub fn current() -> &'static Settings {
    static FALLBACK: OnceLock<Settings> = OnceLock::new();
    match CURRENT.get_or_init(Settings::load) {
        Ok(c) => c,
        Err(_) => FALLBACK.get_or_init(|| {
            let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
            Settings::without_file(&|k| std::env::var_os(k), &cwd)
        }),
    }
}

/// The config file's error, if it has one (read once, as [`current`] reads it).
pub fn check() -> Result<&'static Settings, &'static SettingsError> {
    CURRENT.get_or_init(Settings::load).as_ref()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> + use<> {
        let map: HashMap<String, OsString> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), OsString::from(v)))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn defaults_follow_xdg_and_home() {
        let c = Settings::load_with(&env_of(&[("HOME", "/home/u")]), Path::new("/w")).unwrap();
        assert_eq!(c.file, Path::new("/home/u/.config/conelab/config.toml"));
        assert!(!c.file_exists);
        assert_eq!(
            c.index_dir.value,
            Path::new("/home/u/.local/state/conelab/runs")
        );
        assert_eq!(c.run_root_paths(), vec![PathBuf::from("/w/checkpoints")]);
        assert_eq!(c.cache_dir.value, Path::new("/home/u/.cache/conelab"));
        assert!(c.data_roots.is_empty());
        let c = Settings::load_with(
            &env_of(&[
                ("HOME", "/home/u"),
                ("XDG_CONFIG_HOME", "/cfg"),
                ("XDG_STATE_HOME", "/st"),
                ("CONELAB_RUNS", "/a:rel"),
                ("CONELAB_DATASETS", "/d"),
                ("NO_COLOR", "1"),
            ]),
            Path::new("/w"),
        )
        .unwrap();
        assert_eq!(c.file, Path::new("/cfg/conelab/config.toml"));
        assert_eq!(c.index_dir.value, Path::new("/st/conelab/runs"));
        assert_eq!(c.index_dir.from, SettingSource::Env("XDG_STATE_HOME"));
        assert_eq!(
            c.run_root_paths(),
            ["/a", "/w/rel", "/w/checkpoints"]
                .map(PathBuf::from)
                .to_vec()
        );
        assert_eq!(c.data_roots[0].from, SettingSource::Env("CONELAB_DATASETS"));
        assert_eq!(c.color.value, ColorChoice::Never);
    }

    #[test]
    fn file_values_name_their_line_and_follow_the_environment() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config.toml");
        std::fs::write(
            &file,
            "# mine\ndata_roots = [\"~/corpora\", \"rel\"]\n\ntheme = \"light\"\nrun_roots = [\"/r\"]\n",
        )
        .unwrap();
        let c = Settings::load_with(
            &env_of(&[
                ("HOME", "/home/u"),
                ("CONELAB_CONFIG", file.to_str().unwrap()),
                ("CONELAB_DATASETS", "/env-data"),
            ]),
            Path::new("/w"),
        )
        .unwrap();
        assert!(c.file_exists);
        let data: Vec<_> = c.data_roots.iter().map(|s| s.value.clone()).collect();
        assert_eq!(
            data,
            vec![
                PathBuf::from("/env-data"),
                PathBuf::from("/home/u/corpora"),
                dir.path().join("rel"),
            ]
        );
        assert_eq!(
            c.data_roots[1].from,
            SettingSource::File {
                path: file.clone(),
                line: 2
            }
        );
        assert_eq!(c.theme.value, ThemeChoice::Light);
        assert_eq!(c.theme.from.to_string(), format!("{}:4", file.display()));
        assert_eq!(
            c.run_root_paths(),
            vec![PathBuf::from("/r"), PathBuf::from("/w/checkpoints")]
        );
    }

    #[test]
    fn a_malformed_file_is_one_line_naming_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config.toml");
        let env = env_of(&[("CONELAB_CONFIG", file.to_str().unwrap())]);
        for (text, line, says) in [
            ("theme = \"dark\"\n\nthme = \"light\"\n", 3, "unknown field"),
            ("data_roots = \"/one\"\n", 1, "sequence"),
            (
                "theme = \"dark\"\ncolor = \"sometimes\"\n",
                2,
                "unknown variant",
            ),
            ("run_roots = [\"/x\"\n", 1, ""),
        ] {
            std::fs::write(&file, text).unwrap();
            let e = Settings::load_with(&env, Path::new("/w")).unwrap_err();
            let msg = e.to_string();
            let SettingsError::Malformed { line: l, .. } = e;
            assert_eq!(l, line, "{text:?}: {msg}");
            assert!(msg.contains(says), "{msg}");
            assert!(!msg.contains('\n'), "{msg:?}");
            assert!(msg.starts_with(&format!("config file {}", file.display())));
        }
    }
}
