//! A trained model as a safetensors file that PyTorch loads as it is.
//!
//! Every tensor of the flat parameter and state buffers is written under the name and in
//! the shape PyTorch gives the same tensor in the `state_dict()` of the matching module of
//! `scripts/pytorch_reference.py` (`0.weight [6, 1, 5, 5]`, `3.body.1.running_mean
//! [16]`, ...), little-endian f32, so that
//! `model.load_state_dict(safetensors.torch.load_file(path))` needs neither renaming nor
//! `strict=False`. For that, each batch norm also gets PyTorch's `num_batches_tracked`
//! buffer (an int64 scalar): gssp does not count batches, so it is written as 0, which
//! PyTorch reads only with `momentum=None` (a cumulative average), never in evaluation.
//!
//! The header's `__metadata__` says what the file holds (model, width, hidden widths,
//! dataset, input shape and classes or seq2seq's vocabulary sizes, gssp version), so that [`load_into`] can tell a file of
//! another model or dataset from a damaged one, and name the difference. A file without
//! those keys (saved by PyTorch, say) is checked by its tensors alone.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use safetensors::tensor::{Dtype, SafeTensors, TensorView};

use crate::compute::backend::Backend;
use crate::config::Config;
use crate::telemetry::files::write_atomic;

use super::{TensorSpec, Trainable};

/// The exported model's name in a run directory.
pub const MODEL_FILE: &str = "model.safetensors";

/// The metadata keys [`load_into`] compares with the config, in the order it reports them.
const CHECKED_KEYS: [&str; 4] = ["model", "width", "mlp_hidden", "dataset"];

const BN_COUNTER: &str = "num_batches_tracked";
/// `num_batches_tracked` of every batch norm: int64 0 (see the module docs).
const ZERO_I64: [u8; 8] = [0; 8];

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    // The I/O error is part of the message, not a `source`: printed once with `{:#}`.
    #[error("cannot write model file {path}: {cause}")]
    Write {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("cannot read model file {path}: {cause}")]
    Read {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("{path}: not a readable safetensors file (truncated or corrupt?): {reason}")]
    Corrupt { path: PathBuf, reason: String },
    #[error("{path}: the file holds {key} {file}, the config has {key} {config}")]
    Mismatch {
        path: PathBuf,
        key: String,
        file: String,
        config: String,
    },
    #[error("{path}: no tensor {name}, which model {model} needs")]
    Missing {
        path: PathBuf,
        name: String,
        model: String,
    },
    #[error("{path}: tensor {name} has shape {file:?}, model {model} needs {want:?}")]
    Shape {
        path: PathBuf,
        name: String,
        model: String,
        file: Vec<usize>,
        want: Vec<usize>,
    },
    #[error("{path}: tensor {name} is {file}, gssp reads F32")]
    Dtype {
        path: PathBuf,
        name: String,
        file: String,
    },
    #[error("{path}: tensor {name} is not part of model {model}")]
    Unexpected {
        path: PathBuf,
        name: String,
        model: String,
    },
}

/// The header metadata of `net` trained as `cfg` says. Values are strings, as the format
/// requires; `width` and `mlp_hidden` are written as the config's TOML writes them.
pub fn metadata<B: Backend>(cfg: &Config, net: &impl Trainable<B>) -> BTreeMap<String, String> {
    let hidden: Vec<String> = cfg.model.mlp_hidden.iter().map(|h| h.to_string()).collect();
    let mut m = BTreeMap::from([
        ("format".to_string(), "gssp".to_string()),
        (
            "gssp_version".to_string(),
            env!("CARGO_PKG_VERSION").to_string(),
        ),
        ("model".to_string(), net.name().to_string()),
        ("width".to_string(), cfg.model.width.to_string()),
        ("dataset".to_string(), cfg.data.dataset.to_string()),
    ]);
    m.extend(net.data_metadata());
    // Only the MLP reads its hidden widths; for the others they would be a spurious
    // difference between two configs of the same model.
    if net.name() == "mlp" {
        m.insert("mlp_hidden".to_string(), format!("[{}]", hidden.join(", ")));
    }
    m
}

/// The `num_batches_tracked` name of each batch norm in `state` (one per
/// `running_mean`).
fn bn_counters(state: &[TensorSpec]) -> Vec<String> {
    state
        .iter()
        .filter_map(|s| s.name.strip_suffix(".running_mean"))
        .map(|prefix| format!("{prefix}.{BN_COUNTER}"))
        .collect()
}

fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// The safetensors bytes of `net`'s parameters and state, with `meta` in the header.
pub fn to_bytes<B: Backend>(
    net: &impl Trainable<B>,
    meta: &BTreeMap<String, String>,
) -> Result<Vec<u8>, safetensors::SafeTensorError> {
    let mut params = vec![0.0; net.num_params()];
    net.params_to_host(&mut params);
    let mut state = vec![0.0; net.num_state()];
    net.state_to_host(&mut state);
    let bytes: Vec<(&TensorSpec, Vec<u8>)> = net
        .param_specs()
        .iter()
        .map(|s| (s, f32_bytes(&params[s.range.clone()])))
        .chain(
            net.state_specs()
                .iter()
                .map(|s| (s, f32_bytes(&state[s.range.clone()]))),
        )
        .collect();
    let counters = bn_counters(net.state_specs());
    let mut views = Vec::with_capacity(bytes.len() + counters.len());
    for (spec, data) in &bytes {
        views.push((
            spec.name.clone(),
            TensorView::new(Dtype::F32, spec.shape.clone(), data)?,
        ));
    }
    for name in counters {
        views.push((name, TensorView::new(Dtype::I64, vec![], &ZERO_I64)?));
    }
    let meta: HashMap<String, String> = meta.clone().into_iter().collect();
    safetensors::serialize(views, Some(meta))
}

/// Writes `net` to `path` with `meta` in the header. Atomic: the bytes go to a temporary
/// file in the same directory, are synced, and replace `path` by a rename, so a crash
/// or a full disk never leaves a truncated model under the final name.
pub fn save<B: Backend>(
    net: &impl Trainable<B>,
    meta: &BTreeMap<String, String>,
    path: &Path,
) -> Result<(), ExportError> {
    let bytes = to_bytes(net, meta).map_err(|e| ExportError::Write {
        path: path.to_path_buf(),
        cause: std::io::Error::other(e),
    })?;
    write_atomic(path, &bytes).map_err(|cause| ExportError::Write {
        path: path.to_path_buf(),
        cause,
    })
}

/// Loads the model in `path` into `net`, whose build says which tensors and shapes it
/// needs; `expected` (from [`metadata`] of the config) is compared with the file's
/// metadata first, so a file of another model or dataset is named as such rather than as
/// a shape error. Returns the file's metadata. `net` is untouched on error.
pub fn load_into<B: Backend>(
    net: &mut impl Trainable<B>,
    expected: &BTreeMap<String, String>,
    path: &Path,
) -> Result<BTreeMap<String, String>, ExportError> {
    let bytes = std::fs::read(path).map_err(|cause| ExportError::Read {
        path: path.to_path_buf(),
        cause,
    })?;
    from_bytes(net, expected, &bytes, path)
}

/// [`load_into`] from the file's bytes (`path` names it in errors).
pub fn from_bytes<B: Backend>(
    net: &mut impl Trainable<B>,
    expected: &BTreeMap<String, String>,
    bytes: &[u8],
    path: &Path,
) -> Result<BTreeMap<String, String>, ExportError> {
    let corrupt = |e: safetensors::SafeTensorError| ExportError::Corrupt {
        path: path.to_path_buf(),
        reason: e.to_string(),
    };
    let file = SafeTensors::deserialize(bytes).map_err(corrupt)?;
    let (_, header) = SafeTensors::read_metadata(bytes).map_err(corrupt)?;
    let meta: BTreeMap<String, String> = header
        .metadata()
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    for key in CHECKED_KEYS {
        if let (Some(file), Some(config)) = (meta.get(key), expected.get(key)) {
            if file != config {
                return Err(ExportError::Mismatch {
                    path: path.to_path_buf(),
                    key: key.to_string(),
                    file: file.clone(),
                    config: config.clone(),
                });
            }
        }
    }

    let model = net.name().to_string();
    let read = |specs: &[TensorSpec], host: &mut [f32]| -> Result<(), ExportError> {
        for s in specs {
            let t = file.tensor(&s.name).map_err(|_| ExportError::Missing {
                path: path.to_path_buf(),
                name: s.name.clone(),
                model: model.clone(),
            })?;
            if t.dtype() != Dtype::F32 {
                return Err(ExportError::Dtype {
                    path: path.to_path_buf(),
                    name: s.name.clone(),
                    file: t.dtype().to_string(),
                });
            }
            if t.shape() != s.shape.as_slice() {
                return Err(ExportError::Shape {
                    path: path.to_path_buf(),
                    name: s.name.clone(),
                    model: model.clone(),
                    file: t.shape().to_vec(),
                    want: s.shape.clone(),
                });
            }
            // The shape fixes the byte count (the crate checks offsets against it).
            for (dst, src) in host[s.range.clone()]
                .iter_mut()
                .zip(t.data().chunks_exact(4))
            {
                *dst = f32::from_le_bytes([src[0], src[1], src[2], src[3]]);
            }
        }
        Ok(())
    };
    let mut params = vec![0.0; net.num_params()];
    read(net.param_specs(), &mut params)?;
    let mut state = vec![0.0; net.num_state()];
    read(net.state_specs(), &mut state)?;

    // Anything else is another model's: say so rather than drop it silently. The batch-norm
    // counters are optional (a file written without them loads as well).
    let counters = bn_counters(net.state_specs());
    let known = |name: &str| {
        net.param_specs()
            .iter()
            .chain(net.state_specs())
            .any(|s| s.name == name)
            || counters.iter().any(|c| c == name)
    };
    let mut names = file.names();
    names.sort_unstable();
    if let Some(name) = names.into_iter().find(|n| !known(n)) {
        return Err(ExportError::Unexpected {
            path: path.to_path_buf(),
            name: name.to_string(),
            model,
        });
    }
    net.params_from_host(&params);
    net.state_from_host(&state);
    Ok(meta)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compute::backend::cpu::Cpu;
    use crate::compute::model::{zoo, Network};

    fn cfg(model: &str, extra: &str) -> Config {
        Config::from_str_with_overrides(
            &format!("[data]\ndataset = \"cifar10\"\n[model]\nname = \"{model}\"\n{extra}"),
            "test.toml",
            &[],
        )
        .expect("a valid config")
    }

    fn resnet(seed: u64) -> Network<Cpu> {
        zoo::resnet18(Cpu, zoo::CIFAR_INPUT, 10, 0.125, 1, seed)
    }

    fn specs(net: &Network<Cpu>) -> Vec<(String, Vec<usize>)> {
        net.param_specs()
            .iter()
            .chain(net.state_specs())
            .map(|s| (s.name.clone(), s.shape.clone()))
            .collect()
    }

    #[test]
    fn shapes_are_pytorchs_and_cover_the_flat_buffers() {
        let lenet = zoo::lenet5(Cpu, (1, 28, 28), 10, 1, 0);
        let want = [
            ("0.weight", vec![6, 1, 5, 5]),
            ("0.bias", vec![6]),
            ("3.weight", vec![16, 6, 5, 5]),
            ("3.bias", vec![16]),
            ("7.weight", vec![120, 400]),
            ("7.bias", vec![120]),
            ("9.weight", vec![84, 120]),
            ("9.bias", vec![84]),
            ("11.weight", vec![10, 84]),
            ("11.bias", vec![10]),
        ];
        let got = specs(&lenet);
        assert_eq!(got.len(), want.len());
        for ((name, shape), (wn, ws)) in got.iter().zip(&want) {
            assert_eq!((name.as_str(), shape), (*wn, ws));
        }
        for net in [
            lenet,
            resnet(0),
            zoo::vgg19(Cpu, zoo::CIFAR_INPUT, 10, 0.25, 1, 0),
        ] {
            for s in net.param_specs().iter().chain(net.state_specs()) {
                assert_eq!(
                    s.range.len(),
                    s.shape.iter().product::<usize>(),
                    "{}",
                    s.name
                );
            }
        }
        let r = specs(&resnet(0));
        assert!(r.contains(&("0.weight".into(), vec![8, 3, 3, 3])));
        assert!(r.contains(&("5.skip.0.weight".into(), vec![16, 8, 1, 1])));
        assert!(r.contains(&("5.body.1.running_var".into(), vec![16])));
        assert!(r.contains(&("13.weight".into(), vec![10, 64])));
    }

    #[test]
    fn a_saved_model_loads_back_bit_for_bit_with_pytorchs_batch_norm_counters() {
        let c = cfg("resnet18", "width = 0.125\n");
        let mut trained = resnet(1);
        // Non-default state, so that the state round trip is visible.
        let state: Vec<f32> = (0..trained.num_state()).map(|i| i as f32 * 0.01).collect();
        trained.state_from_host(&state);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(MODEL_FILE);
        save(&trained, &metadata(&c, &trained), &path).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let file = SafeTensors::deserialize(&bytes).unwrap();
        let counter = file.tensor("1.num_batches_tracked").unwrap();
        assert_eq!((counter.dtype(), counter.shape()), (Dtype::I64, &[][..]));
        assert!(file.tensor("3.body.4.num_batches_tracked").is_ok());

        let mut fresh = resnet(2);
        assert_ne!(fresh.params(), trained.params());
        let expected = metadata(&c, &fresh);
        let meta = load_into(&mut fresh, &expected, &path).unwrap();
        assert_eq!(fresh.params(), trained.params());
        assert_eq!(fresh.state(), trained.state());
        assert_eq!(meta["model"], "resnet18");
        assert_eq!(meta["width"], "0.125");
        assert_eq!(meta["dataset"], "cifar10");
        assert_eq!(meta["gssp_version"], env!("CARGO_PKG_VERSION"));
        // No temporary file is left behind.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    fn err_of(net: &mut Network<Cpu>, c: &Config, bytes: &[u8]) -> String {
        let expected = metadata(c, net);
        let before = net.params().to_vec();
        let e = from_bytes(net, &expected, bytes, Path::new("m.safetensors"))
            .expect_err("a bad file")
            .to_string();
        assert_eq!(
            net.params(),
            before,
            "a failed load leaves the network alone"
        );
        assert!(e.starts_with("m.safetensors: "), "{e}");
        e
    }

    #[test]
    fn a_damaged_or_foreign_file_is_an_error_naming_the_difference() {
        let c = cfg("resnet18", "width = 0.125\n");
        let net = resnet(1);
        let good = to_bytes(&net, &metadata(&c, &net)).unwrap();
        let mut target = resnet(2);

        for cut in [0, 5, 100, good.len() - 1] {
            let e = err_of(&mut target, &c, &good[..cut]);
            assert!(e.contains("truncated or corrupt"), "{e}");
        }
        let mut flipped = good.clone();
        flipped[10] = b'!';
        assert!(err_of(&mut target, &c, &flipped).contains("corrupt"));

        let wide = cfg("resnet18", "width = 0.25\n");
        let e = err_of(&mut target, &wide, &good);
        assert!(
            e.contains("holds width 0.125, the config has width 0.25"),
            "{e}"
        );
        let vgg = zoo::vgg19(Cpu, zoo::CIFAR_INPUT, 10, 0.125, 1, 0);
        let e = err_of(
            &mut target,
            &c,
            &to_bytes(&vgg, &metadata(&cfg("vgg19", ""), &vgg)).unwrap(),
        );
        assert!(
            e.contains("holds model vgg19, the config has model resnet18"),
            "{e}"
        );
        let mnist = Config::from_str_with_overrides(
            "[data]\ndataset = \"mnist\"\n[model]\nname = \"resnet18\"\nwidth = 0.125\n",
            "t.toml",
            &[],
        )
        .unwrap();
        let e = err_of(&mut target, &mnist, &good);
        assert!(
            e.contains("holds dataset cifar10, the config has dataset mnist"),
            "{e}"
        );

        // Without metadata (a file PyTorch wrote) the tensors decide.
        let bare = |net: &Network<Cpu>| to_bytes(net, &BTreeMap::new()).unwrap();
        let e = err_of(&mut target, &c, &bare(&resnet18_with(0.25)));
        assert!(
            e.contains(
                "tensor 0.weight has shape [16, 3, 3, 3], model resnet18 needs [8, 3, 3, 3]"
            ),
            "{e}"
        );
        let e = err_of(&mut target, &c, &bare(&vgg));
        assert!(
            e.contains("no tensor 3.body.0.weight, which model resnet18 needs"),
            "{e}"
        );

        // A tensor of another type, and one the model does not have.
        let mut lenet = zoo::lenet5(Cpu, (1, 28, 28), 10, 1, 0);
        let lc = cfg("lenet5", "");
        let lenet_specs = lenet.param_specs().to_vec();
        let raw = |extra: (&str, Dtype, Vec<usize>, Vec<u8>)| {
            let mut t: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = lenet_specs
                .iter()
                .map(|s| {
                    (
                        s.name.clone(),
                        Dtype::F32,
                        s.shape.clone(),
                        vec![0; 4 * s.range.len()],
                    )
                })
                .filter(|t| t.0 != extra.0)
                .collect();
            t.push((extra.0.to_string(), extra.1, extra.2, extra.3));
            let views = t
                .iter()
                .map(|(n, d, s, b)| (n.clone(), TensorView::new(*d, s.clone(), b).unwrap()));
            safetensors::serialize(views, None).unwrap()
        };
        let e = err_of(
            &mut lenet,
            &lc,
            &raw(("0.bias", Dtype::F64, vec![6], vec![0; 48])),
        );
        assert!(e.contains("tensor 0.bias is F64, gssp reads F32"), "{e}");
        let e = err_of(
            &mut lenet,
            &lc,
            &raw(("fc9.weight", Dtype::F32, vec![1], vec![0; 4])),
        );
        assert!(
            e.contains("tensor fc9.weight is not part of model lenet5"),
            "{e}"
        );
    }

    fn resnet18_with(width: f64) -> Network<Cpu> {
        zoo::resnet18(Cpu, zoo::CIFAR_INPUT, 10, width, 1, 0)
    }
}
