//! OpenBLAS's kernel choice. OpenBLAS picks its GEMM kernels by CPU model when it loads,
//! and a release older than the CPU falls back to generic SSE3 ("Prescott") kernels:
//! Debian 12's OpenBLAS 0.3.21 does so on Emerald Rapids, which runs AVX-512. The
//! `OPENBLAS_CORETYPE` environment variable overrides the choice, but only before the
//! library loads, so [`reexec_with_better_kernels`] restarts the program once with it set,
//! to the best kernel family the CPU runs. A value the user set is always kept.

use std::ffi::{c_char, CStr};

extern "C" {
    fn openblas_get_corename() -> *const c_char;
}

const OVERRIDE: &str = "OPENBLAS_CORETYPE";

/// The kernel family OpenBLAS chose (lower case, e.g. `prescott`, `skylakex`).
pub fn corename() -> String {
    // SAFETY: OpenBLAS returns a pointer to a static NUL-terminated string.
    let name = unsafe { CStr::from_ptr(openblas_get_corename()) };
    name.to_string_lossy().to_lowercase()
}

/// The core type to request when OpenBLAS chose `chosen` on a CPU with the given
/// features, or `None` when its choice already uses them.
pub fn better_core(chosen: &str, avx512: bool, avx2_fma: bool) -> Option<&'static str> {
    const AVX512_CORES: [&str; 3] = ["skylakex", "cooperlake", "sapphirerapids"];
    const AVX2_CORES: [&str; 4] = ["haswell", "zen", "skylakex", "cooperlake"];
    if avx512 && !AVX512_CORES.contains(&chosen) {
        Some("SkylakeX")
    } else if avx2_fma && !avx512 && !AVX2_CORES.contains(&chosen) {
        Some("Haswell")
    } else {
        None
    }
}

/// Restarts this program with `OPENBLAS_CORETYPE` set when OpenBLAS chose kernels below
/// what the CPU runs and the user set none; returns when there is nothing to do (or the
/// restart failed, which is logged). Call it first in `main`, before MPI starts.
pub fn reexec_with_better_kernels() {
    if std::env::var_os(OVERRIDE).is_some() {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    let (avx512, avx2_fma) = (
        std::is_x86_feature_detected!("avx512f"),
        std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma"),
    );
    #[cfg(not(target_arch = "x86_64"))]
    let (avx512, avx2_fma) = (false, false);
    let chosen = corename();
    let Some(core) = better_core(&chosen, avx512, avx2_fma) else {
        return;
    };
    let Ok(exe) = std::env::current_exe() else {
        return;
    };
    use std::os::unix::process::CommandExt;
    let mut args = std::env::args_os();
    let arg0 = args.next().unwrap_or_else(|| exe.clone().into_os_string());
    let err = std::process::Command::new(&exe)
        .arg0(arg0)
        .args(args)
        .env(OVERRIDE, core)
        .exec();
    log::warn!("OpenBLAS chose {chosen} kernels; restarting with {OVERRIDE}={core} failed: {err}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generic_kernels_are_upgraded_to_what_the_cpu_runs() {
        assert_eq!(better_core("prescott", true, true), Some("SkylakeX"));
        assert_eq!(better_core("haswell", true, true), Some("SkylakeX"));
        assert_eq!(better_core("prescott", false, true), Some("Haswell"));
        assert_eq!(better_core("skylakex", true, true), None);
        assert_eq!(better_core("zen", false, true), None);
        assert_eq!(better_core("prescott", false, false), None);
    }

    #[test]
    fn openblas_reports_its_core() {
        assert!(!corename().is_empty());
    }
}
