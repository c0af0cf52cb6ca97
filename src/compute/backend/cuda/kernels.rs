//! The project's CUDA kernels (`kernels/*.cu`, compiled into the binary as text) and their
//! compilation: NVRTC turns each file, with `kernels/common.cuh` in front, into PTX for
//! the device's virtual architecture (`compute_XY` for an sm_XY GPU), and the PTX is cached
//! on disk under a key of the source's hash and the architecture, so a node compiles each
//! file once per version of it.

use std::path::{Path, PathBuf};

/// Prepended to every file: grid-stride loop and block reductions.
const COMMON: &str = include_str!("../../../../kernels/common.cuh");

/// One kernel file and the entry points the backend launches from it.
pub struct KernelFile {
    pub name: &'static str,
    pub source: &'static str,
    pub entries: &'static [&'static str],
}

/// Every kernel file, with its entry points.
pub const FILES: [KernelFile; 9] = [
    KernelFile {
        name: "elementwise",
        source: include_str!("../../../../kernels/elementwise.cu"),
        entries: &[
            "fill_f32",
            "add_f32",
            "scale_f32",
            "relu_forward",
            "relu_backward",
            "bias_add_rows",
            "bias_add_planes",
            "bias_grad_rows",
            "bias_grad_planes",
            "dropout_forward",
            "dropout_backward",
            "sum_squares",
        ],
    },
    KernelFile {
        name: "conv",
        source: include_str!("../../../../kernels/conv.cu"),
        entries: &["im2col", "col2im", "planes_to_rows", "rows_to_planes"],
    },
    KernelFile {
        name: "pool",
        source: include_str!("../../../../kernels/pool.cu"),
        entries: &[
            "maxpool_forward",
            "maxpool_backward",
            "avgpool_forward",
            "avgpool_backward",
            "global_avgpool_forward",
            "global_avgpool_backward",
        ],
    },
    KernelFile {
        name: "norm",
        source: include_str!("../../../../kernels/norm.cu"),
        entries: &[
            "batchnorm_stats",
            "batchnorm_apply_eval",
            "batchnorm_apply",
            "batchnorm_backward_sums",
            "batchnorm_backward_input",
        ],
    },
    KernelFile {
        name: "loss",
        source: include_str!("../../../../kernels/loss.cu"),
        entries: &["softmax_xent", "softmax_xent_masked"],
    },
    KernelFile {
        name: "embedding",
        source: include_str!("../../../../kernels/embedding.cu"),
        entries: &["embedding_forward", "embedding_backward"],
    },
    KernelFile {
        name: "lstm",
        source: include_str!("../../../../kernels/lstm.cu"),
        entries: &["lstm_cell_forward", "lstm_cell_backward"],
    },
    KernelFile {
        name: "optim",
        source: include_str!("../../../../kernels/optim.cu"),
        entries: &["sgd_step", "adam_step"],
    },
    KernelFile {
        name: "topk",
        source: include_str!("../../../../kernels/topk.cu"),
        entries: &[
            "topk_init",
            "topk_histogram",
            "topk_pick",
            "topk_block_counts",
            "topk_scan_blocks",
            "topk_write",
        ],
    },
];

/// The sparse gather/scatter file, apart so that [`FILES`] reads as the layer list.
pub const SPARSE: KernelFile = KernelFile {
    name: "sparse",
    source: include_str!("../../../../kernels/sparse.cu"),
    entries: &["gather", "scatter_add", "scatter_set"],
};

/// Every kernel file.
pub fn all() -> impl Iterator<Item = &'static KernelFile> {
    FILES.iter().chain(std::iter::once(&SPARSE))
}

#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    #[error(
        "NVRTC (libnvrtc.so.13) is not on this node's library path: run scripts/nvrtc.sh and source scripts/env.sh, or install a CUDA 13 toolkit"
    )]
    NoNvrtc,
    #[error("kernels/{file}.cu does not compile for {arch}:\n{log}")]
    Compile {
        file: String,
        arch: String,
        log: String,
    },
    #[error("PTX cache {path}: {cause}")]
    Cache {
        path: PathBuf,
        cause: std::io::Error,
    },
}

/// The text NVRTC compiles for `file`: the common header, then the file.
pub fn full_source(file: &KernelFile) -> String {
    format!("{COMMON}\n#line 1 \"{}.cu\"\n{}", file.name, file.source)
}

/// The virtual architecture NVRTC targets for a device of compute capability
/// `major.minor`: PTX for `compute_XY`, which the driver finishes for the exact GPU.
pub fn arch_for(major: u32, minor: u32) -> String {
    format!("compute_{major}{minor}")
}

/// The cache key of `source` compiled for `arch`: FNV-1a (64-bit) over both, in hex.
/// Stable across builds and platforms (unlike `std`'s hasher), so a cache survives an
/// upgrade that leaves the kernels alone.
pub fn cache_key(source: &str, arch: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in source.bytes().chain([0]).chain(arch.bytes()) {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// Where cached PTX goes: `$GSSP_PTX_CACHE`, else `$XDG_CACHE_HOME/gssp/ptx`, else
/// `~/.cache/gssp/ptx`, else a folder under the system's temporary directory.
pub fn default_cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("GSSP_PTX_CACHE") {
        return PathBuf::from(d);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("gssp").join("ptx")
}

/// Whether NVRTC can be loaded on this node.
pub fn nvrtc_available() -> bool {
    // SAFETY: only tries to load the library by its usual names.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// The architectures CI compiles every kernel for: A100 (sm_80) and H100/H200 (sm_90).
pub const CI_ARCHES: [&str; 2] = ["compute_80", "compute_90"];

/// Compiles `file` for `arch` (a `compute_XY` name) to PTX text.
pub fn compile(file: &KernelFile, arch: &str) -> Result<String, KernelError> {
    if !nvrtc_available() {
        return Err(KernelError::NoNvrtc);
    }
    // The architecture goes in as an option: cudarc's `arch` field wants a static string.
    let opts = cudarc::nvrtc::CompileOptions {
        name: Some(format!("{}.cu", file.name)),
        options: vec![
            "--std=c++17".to_string(),
            format!("--gpu-architecture={arch}"),
        ],
        ..Default::default()
    };
    let ptx = cudarc::nvrtc::compile_ptx_with_opts(full_source(file), opts).map_err(|e| {
        let log = match &e {
            cudarc::nvrtc::CompileError::CompileError { log, .. } => {
                log.to_string_lossy().into_owned()
            }
            other => format!("{other:?}"),
        };
        KernelError::Compile {
            file: file.name.to_string(),
            arch: arch.to_string(),
            log,
        }
    })?;
    Ok(ptx.to_src())
}

/// The PTX of `file` for `arch`, from the cache in `dir` when there, else compiled and
/// stored (written to a temporary file and renamed, so concurrent ranks never read half
/// a file).
pub fn cached_ptx(dir: &Path, file: &KernelFile, arch: &str) -> Result<String, KernelError> {
    let key = cache_key(&full_source(file), arch);
    let path = dir.join(format!("{}-{arch}-{key}.ptx", file.name));
    let cache_err = |path: &Path| {
        let path = path.to_path_buf();
        move |cause| KernelError::Cache { path, cause }
    };
    if let Ok(ptx) = std::fs::read_to_string(&path) {
        return Ok(ptx);
    }
    let ptx = compile(file, arch)?;
    std::fs::create_dir_all(dir).map_err(cache_err(dir))?;
    // Unique across the nodes of a shared file system too: ranks on two nodes can share a pid.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let host = std::env::var("HOSTNAME").unwrap_or_default();
    let tmp = dir.join(format!(
        ".{}.{host}.{}.{nanos}.tmp",
        file.name,
        std::process::id()
    ));
    std::fs::write(&tmp, &ptx).map_err(cache_err(&tmp))?;
    std::fs::rename(&tmp, &path).map_err(cache_err(&path))?;
    Ok(ptx)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// NVRTC present, or the test is skipped with the reason, unless `GSSP_REQUIRE_NVRTC`
    /// is set (scripts/test.sh, hence CI), where its absence fails.
    fn nvrtc_or_skip(test: &str) -> bool {
        if nvrtc_available() {
            return true;
        }
        assert!(
            std::env::var_os("GSSP_REQUIRE_NVRTC").is_none(),
            "{test}: GSSP_REQUIRE_NVRTC is set but {}",
            KernelError::NoNvrtc
        );
        eprintln!("{test}: skipped: {}", KernelError::NoNvrtc);
        false
    }

    /// The `.entry` names of a PTX module.
    fn entries(ptx: &str) -> Vec<String> {
        ptx.lines()
            .filter_map(|l| l.split(".entry ").nth(1))
            .map(|rest| {
                rest.split(|c: char| c == '(' || c.is_whitespace())
                    .next()
                    .unwrap_or("")
                    .to_string()
            })
            .collect()
    }

    #[test]
    fn every_kernel_compiles_for_sm80_and_sm90_with_its_entry_points() {
        if !nvrtc_or_skip("every_kernel_compiles") {
            return;
        }
        for arch in CI_ARCHES {
            for file in all() {
                let ptx = compile(file, arch).unwrap_or_else(|e| panic!("{e}"));
                let target = arch.replace("compute", "sm");
                assert!(
                    ptx.contains(&format!(".target {target}")),
                    "{}: PTX not for {target}",
                    file.name
                );
                let found = entries(&ptx);
                let mut want: Vec<String> = file.entries.iter().map(|s| s.to_string()).collect();
                let mut got = found.clone();
                want.sort();
                got.sort();
                assert_eq!(got, want, "kernels/{}.cu for {arch}", file.name);
            }
        }
    }

    #[test]
    fn a_broken_kernel_is_an_error_naming_the_file_and_the_line() {
        if !nvrtc_or_skip("a_broken_kernel_is_an_error") {
            return;
        }
        let broken = KernelFile {
            name: "broken",
            source: "extern \"C\" __global__ void k(float* x) {\n    x[0] = undefined_name;\n}\n",
            entries: &["k"],
        };
        let err = compile(&broken, "compute_90").unwrap_err().to_string();
        assert!(
            err.contains("kernels/broken.cu does not compile for compute_90"),
            "{err}"
        );
        assert!(
            err.contains("broken.cu(2)") && err.contains("undefined_name"),
            "{err}"
        );
    }

    #[test]
    fn the_cache_is_keyed_by_source_and_architecture_and_reused() {
        assert_ne!(cache_key("a", "compute_80"), cache_key("a", "compute_90"));
        assert_ne!(cache_key("a", "compute_80"), cache_key("b", "compute_80"));
        assert_ne!(cache_key("ab", "c"), cache_key("a", "bc"));
        assert_eq!(cache_key("a", "compute_80"), cache_key("a", "compute_80"));
        assert_eq!(arch_for(9, 0), "compute_90");
        if !nvrtc_or_skip("the_cache_is_reused") {
            return;
        }
        let dir = tempfile::tempdir().expect("temporary directory");
        let first = cached_ptx(dir.path(), &SPARSE, "compute_80").unwrap_or_else(|e| panic!("{e}"));
        let files: Vec<_> = std::fs::read_dir(dir.path())
            .expect("cache dir")
            .map(|e| e.expect("entry").path())
            .collect();
        assert_eq!(files.len(), 1, "{files:?}");
        // A cached file is what is served, not a fresh compile.
        std::fs::write(&files[0], "cached").expect("overwrite");
        let again = cached_ptx(dir.path(), &SPARSE, "compute_80").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(again, "cached");
        assert!(first.contains(".entry scatter_add"));
    }
}
