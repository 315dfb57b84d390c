//! Reading an embedding matrix for `conelab inspect`: from a conelab run (its newest or a given
//! checkpoint, with the run's vocabulary, training counts and — for the synthetic corpus or a
//! corpus folder with `classes.tsv` — word classes), or a foreign matrix in `.safetensors` or
//! `.npy`, with optional vocabulary and counts files.

use std::fs;
use std::path::{Path, PathBuf};

use rustc_hash::FxHashMap;
use safetensors::{Dtype, SafeTensors};

use super::{CorpusSpec, RunDir};
use conelab_data::SyntheticCorpus;

#[derive(Debug, thiserror::Error)]
pub enum MatrixFileError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {reason}", path.display())]
    Invalid { path: PathBuf, reason: String },
    #[error(transparent)]
    Checkpoint(#[from] super::CheckpointError),
    #[error("{}", path.display())]
    Matrix {
        path: PathBuf,
        #[source]
        source: conelab_metrics::MatrixError,
    },
}

fn invalid(path: &Path, reason: impl Into<String>) -> MatrixFileError {
    MatrixFileError::Invalid {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

fn read(path: &Path) -> Result<Vec<u8>, MatrixFileError> {
    fs::read(path).map_err(|source| MatrixFileError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// A row-major `n × d` matrix and what is known about its rows.
#[derive(Debug, Clone)]
pub struct LoadedMatrix {
    /// What was read, for headers (file, or run and step).
    pub source: String,
    pub n: usize,
    pub d: usize,
    pub data: Vec<f32>,
    /// Row i's token.
    pub tokens: Option<Vec<String>>,
    /// Row i's training count.
    pub counts: Option<Vec<u64>>,
    /// Row i's ground-truth class (synthetic corpus, or a corpus with `classes.tsv`).
    pub classes: Option<Vec<Option<u32>>>,
    /// Training step of a conelab checkpoint.
    pub step: Option<u64>,
    /// Group boundaries of a conelab run (the run's own, which may differ from the default).
    pub group_bounds: Option<[f64; 2]>,
    /// The output layer's bias b (logits h·Wᵀ + b), where a conelab checkpoint has one: what
    /// decides which rows can win the argmax (stolen probability).
    pub bias: Option<Vec<f32>>,
}

/// Loads `path`: a conelab run directory or its `step-NNNNNN` or `best` folder, a `.safetensors` file or a
/// `.npy` file. `tensor` names the tensor inside a safetensors file (required when it holds more
/// than one 2-D tensor).
pub fn load_matrix(path: &Path, tensor: Option<&str>) -> Result<LoadedMatrix, MatrixFileError> {
    if path.is_dir() {
        return load_run(path);
    }
    if !path.exists() {
        return Err(MatrixFileError::Io {
            path: path.to_path_buf(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such file or directory"),
        });
    }
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase();
    let bytes = read(path)?;
    let (n, d, data, name) = match ext.as_str() {
        "safetensors" => {
            let (n, d, data, name) = read_safetensors(path, &bytes, tensor)?;
            (n, d, data, Some(name))
        }
        "npy" => {
            let (n, d, data) = read_npy(path, &bytes)?;
            (n, d, data, None)
        }
        _ => {
            return Err(invalid(
                path,
                "not a conelab run, .safetensors or .npy file",
            ));
        }
    };
    check_finite(path, d, &data)?;
    Ok(LoadedMatrix {
        source: match name {
            Some(t) => format!("{} [{t}]", path.display()),
            None => path.display().to_string(),
        },
        n,
        d,
        data,
        tokens: None,
        counts: None,
        classes: None,
        bias: None,
        step: None,
        group_bounds: None,
    })
}

fn check_finite(path: &Path, d: usize, data: &[f32]) -> Result<(), MatrixFileError> {
    match data.iter().position(|v| !v.is_finite()) {
        Some(i) => Err(invalid(
            path,
            format!(
                "row {} has a non-finite value (NaN or infinity)",
                i / d.max(1)
            ),
        )),
        None => Ok(()),
    }
}

fn load_run(path: &Path) -> Result<LoadedMatrix, MatrixFileError> {
    let run = RunDir::open(path)?;
    let step_dir = if path.join("model.safetensors").is_file() {
        path.to_path_buf()
    } else {
        run.latest_checkpoint()?
    };
    // Nothing is decoded from bytes that are not the ones written.
    super::verify_run_files(run.path())?;
    conelab_base::integrity::verify_folder(&step_dir).map_err(super::CheckpointError::from)?;
    let vocab_path = run.path().join(super::VOCAB_TSV);
    let text =
        String::from_utf8(read(&vocab_path)?).map_err(|_| invalid(&vocab_path, "not UTF-8"))?;
    let mut tokens = Vec::new();
    let mut counts = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let (token, count) = line.rsplit_once('\t').ok_or_else(|| {
            invalid(
                &vocab_path,
                format!("line {}: expected token<TAB>count", i + 1),
            )
        })?;
        tokens.push(token.to_owned());
        counts.push(
            count.parse().map_err(|_| {
                invalid(&vocab_path, format!("line {}: bad count {count:?}", i + 1))
            })?,
        );
    }
    let model_path = step_dir.join("model.safetensors");
    let bytes = read(&model_path)?;
    let st = SafeTensors::deserialize(&bytes).map_err(|e| invalid(&model_path, e.to_string()))?;
    let name = st
        .names()
        .into_iter()
        .find(|n| n.ends_with("embedding.weight"))
        .map(str::to_owned)
        .ok_or_else(|| invalid(&model_path, "no embedding.weight tensor"))?;
    let (n, d, data, _) = read_safetensors(&model_path, &bytes, Some(&name))?;
    if n != tokens.len() {
        return Err(invalid(
            &model_path,
            format!(
                "W has {n} rows but the run's vocabulary {} tokens",
                tokens.len()
            ),
        ));
    }
    check_finite(&model_path, d, &data)?;
    let bias = output_bias(&model_path, &st, n)?;
    let step = super::checkpoint_step(&step_dir);
    let classes = run_classes(&run, &tokens);
    Ok(LoadedMatrix {
        source: step_dir.display().to_string(),
        n,
        d,
        data,
        tokens: Some(tokens),
        counts: Some(counts),
        classes,
        bias,
        step,
        group_bounds: Some(run.spec().group_bounds),
    })
}

/// The checkpoint's output bias (a tensor named `…output_bias`, f32, one per row), if it has one.
fn output_bias(
    path: &Path,
    st: &SafeTensors<'_>,
    n: usize,
) -> Result<Option<Vec<f32>>, MatrixFileError> {
    let Some(name) = st.names().into_iter().find(|t| t.ends_with("output_bias")) else {
        return Ok(None);
    };
    let view = st
        .tensor(name)
        .map_err(|e| invalid(path, format!("tensor {name:?}: {e}")))?;
    if view.shape() != [n] || view.dtype() != Dtype::F32 {
        return Err(invalid(
            path,
            format!(
                "tensor {name:?} has shape {:?} and dtype {:?}; expected [{n}] F32",
                view.shape(),
                view.dtype()
            ),
        ));
    }
    let bias: Vec<f32> = view
        .data()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    if bias.iter().any(|b| !b.is_finite()) {
        return Err(invalid(
            path,
            format!("tensor {name:?} holds a non-finite value"),
        ));
    }
    Ok(Some(bias))
}

/// The normalised singular values of another run's newest checkpoint (or a matrix file),
/// labelled by its folder or file name: the reference curve `--compare` puts in the Spectrum
/// pane.
pub fn reference_spectrum(path: &Path) -> Result<(String, Vec<f64>), MatrixFileError> {
    use conelab_metrics::{EmbeddingPanel, Embeddings, PanelOptions, Threads};
    let matrix_error = |source| MatrixFileError::Matrix {
        path: path.to_path_buf(),
        source,
    };
    let m = load_matrix(path, None)?;
    let w = Embeddings::new(m.n, m.d, &m.data).map_err(matrix_error)?;
    let panel = EmbeddingPanel::compute(
        w,
        None,
        &PanelOptions {
            projection: None,
            also_centred: false,
            scale_free: true,
            threads: Threads::All,
        },
    )
    .map_err(matrix_error)?;
    let label = path
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_else(|| "other".into());
    Ok((label, panel.total.sv_norm))
}

/// Word classes of a run's vocabulary: regenerated for the synthetic corpus (it is a pure
/// function of its configuration), read from `classes.tsv` for a corpus folder that has one.
pub fn run_classes(run: &RunDir, tokens: &[String]) -> Option<Vec<Option<u32>>> {
    let map: FxHashMap<String, u32> = match &run.spec().corpus {
        CorpusSpec::Synthetic(config) => {
            let synth = SyntheticCorpus::generate(config).ok()?;
            synth
                .words()
                .iter()
                .cloned()
                .zip(synth.class_of().iter().copied())
                .collect()
        }
        CorpusSpec::Dir { path, .. } => {
            parse_classes(&fs::read_to_string(path.join("classes.tsv")).ok()?)
        }
    };
    Some(tokens.iter().map(|t| map.get(t).copied()).collect())
}

/// `token<TAB>class` lines; a non-numeric header line is skipped.
pub fn parse_classes(text: &str) -> FxHashMap<String, u32> {
    text.lines()
        .filter_map(|l| {
            let (t, c) = l.rsplit_once('\t')?;
            Some((t.to_owned(), c.trim().parse().ok()?))
        })
        .collect()
}

fn read_safetensors(
    path: &Path,
    bytes: &[u8],
    tensor: Option<&str>,
) -> Result<(usize, usize, Vec<f32>, String), MatrixFileError> {
    let st = SafeTensors::deserialize(bytes).map_err(|e| invalid(path, e.to_string()))?;
    let name = match tensor {
        Some(t) => t.to_owned(),
        None => {
            let mut two_d: Vec<String> = st
                .tensors()
                .into_iter()
                .filter(|(_, v)| v.shape().len() == 2)
                .map(|(n, _)| n)
                .collect();
            two_d.sort();
            match two_d.len() {
                1 => two_d.remove(0),
                0 => return Err(invalid(path, "holds no 2-D tensor")),
                _ => {
                    return Err(invalid(
                        path,
                        format!(
                            "holds {} 2-D tensors; pick one with --tensor (e.g. {})",
                            two_d.len(),
                            two_d.iter().take(5).cloned().collect::<Vec<_>>().join(", ")
                        ),
                    ));
                }
            }
        }
    };
    let view = st.tensor(&name).map_err(|_| {
        let mut names: Vec<String> = st.names().into_iter().map(str::to_owned).collect();
        names.sort();
        invalid(
            path,
            format!(
                "no tensor {name:?} (it has: {})",
                names.iter().take(8).cloned().collect::<Vec<_>>().join(", ")
            ),
        )
    })?;
    let [n, d] = view.shape() else {
        return Err(invalid(
            path,
            format!(
                "tensor {name:?} has shape {:?}, not [rows, columns]",
                view.shape()
            ),
        ));
    };
    let (n, d) = (*n, *d);
    let raw = view.data();
    let data: Vec<f32> = match view.dtype() {
        Dtype::F32 => raw
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
        Dtype::F64 => raw
            .chunks_exact(8)
            .map(|b| f64::from_le_bytes(b.try_into().expect("8 bytes")) as f32)
            .collect(),
        Dtype::F16 => raw
            .chunks_exact(2)
            .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
        Dtype::BF16 => raw
            .chunks_exact(2)
            .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
        other => {
            return Err(invalid(
                path,
                format!("tensor {name:?} has dtype {other:?}; expected F32, F64, F16 or BF16"),
            ));
        }
    };
    if Some(data.len()) != n.checked_mul(d) || n == 0 || d == 0 {
        return Err(invalid(
            path,
            format!("tensor {name:?} is empty or truncated"),
        ));
    }
    Ok((n, d, data, name))
}

fn read_npy(path: &Path, bytes: &[u8]) -> Result<(usize, usize, Vec<f32>), MatrixFileError> {
    // npyz multiplies the header's shape out unchecked: an overflow panics in a debug build
    // (and wraps in a release one, which the count below catches).
    let npy = conelab_base::integrity::catch_panic(|| npyz::NpyFile::new(bytes))
        .map_err(|panic| {
            invalid(
                path,
                format!("not a .npy file: its header is unreadable ({panic})"),
            )
        })?
        .map_err(|e| invalid(path, format!("not a .npy file: {e}")))?;
    let shape = npy.shape().to_vec();
    let [n, d] = shape[..] else {
        return Err(invalid(
            path,
            format!("array has shape {shape:?}, not [rows, columns]"),
        ));
    };
    let (n, d) = (n as usize, d as usize);
    if n == 0 || d == 0 {
        return Err(invalid(path, format!("array is empty ({n} × {d})")));
    }
    // A header's shape is anybody's number: its product must exist before it is compared.
    let Some(count) = n.checked_mul(d) else {
        return Err(invalid(
            path,
            format!("array shape {n} × {d} has more values than memory can address"),
        ));
    };
    let fortran = npy.order() == npyz::Order::Fortran;
    let descr = npy.dtype().descr();
    let type_str = descr.trim_matches(|c| c == '\'' || c == '"');
    let values: Vec<f32> = if type_str.ends_with("f4") {
        npy.into_vec::<f32>()
            .map_err(|e| invalid(path, format!("reading f32 data: {e}")))?
    } else if type_str.ends_with("f8") {
        npy.into_vec::<f64>()
            .map_err(|e| invalid(path, format!("reading f64 data: {e}")))?
            .into_iter()
            .map(|x| x as f32)
            .collect()
    } else {
        return Err(invalid(
            path,
            format!("dtype {type_str} is not supported; expected float32 or float64"),
        ));
    };
    if values.len() != count {
        return Err(invalid(path, "truncated array data"));
    }
    let data = if fortran {
        // Column-major on disk: transpose to row-major.
        let mut out = vec![0f32; n * d];
        for j in 0..d {
            for i in 0..n {
                out[i * d + j] = values[j * n + i];
            }
        }
        out
    } else {
        values
    };
    Ok((n, d, data))
}

/// One token per line (line i = row i).
pub fn read_vocab_file(path: &Path, n: usize) -> Result<Vec<String>, MatrixFileError> {
    let text = String::from_utf8(read(path)?).map_err(|_| invalid(path, "not UTF-8"))?;
    let tokens: Vec<String> = text
        .lines()
        .map(|l| l.trim_end_matches('\r').to_owned())
        .collect();
    if tokens.len() != n {
        return Err(invalid(
            path,
            format!(
                "{} lines but the matrix has {n} rows (line i must name row i)",
                tokens.len()
            ),
        ));
    }
    Ok(tokens)
}

/// One count per line (line i = row i); `token<TAB>count` lines are accepted too.
pub fn read_counts_file(path: &Path, n: usize) -> Result<Vec<u64>, MatrixFileError> {
    let text = String::from_utf8(read(path)?).map_err(|_| invalid(path, "not UTF-8"))?;
    let counts = text
        .lines()
        .enumerate()
        .map(|(i, l)| {
            let field = l.rsplit(['\t', ' ']).next().unwrap_or("").trim();
            field
                .parse::<u64>()
                .map_err(|_| invalid(path, format!("line {}: {field:?} is not a count", i + 1)))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if counts.len() != n {
        return Err(invalid(
            path,
            format!("{} counts but the matrix has {n} rows", counts.len()),
        ));
    }
    Ok(counts)
}
