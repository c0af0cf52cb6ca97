#!/usr/bin/env python3
"""GFLOP/s of the system OpenBLAS's single-precision GEMM on one thread: the peak a training
step's GEMMs can reach on this machine, and that of the shapes ResNet-18's convolutions give
it (row-major, as gssp calls it). Loads the same libopenblas gssp links (ctypes, no numpy),
with the same kernels: where OpenBLAS is older than the CPU and falls back to its SSE3
("Prescott") kernels, the script restarts itself with OPENBLAS_CORETYPE set, as gssp does
(src/compute/backend/cpu/blas_core.rs); a value the user set is kept.

    OPENBLAS_NUM_THREADS=1 python3 scripts/gemm_peak.py
"""

import ctypes
import ctypes.util
import os
import sys
import time

LIB = os.environ.get("OPENBLAS", "/usr/lib/x86_64-linux-gnu/libopenblas.so.0")
ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112

# (name, m, n, k, trans_a, trans_b)
SHAPES = [
    ("square 1024", 1024, 1024, 1024, False, False),
    ("conv fwd 64ch 32x32 (im2col)", 64, 1024, 576, False, False),
    ("conv dW 64ch 32x32 (im2col)", 64, 576, 1024, False, True),
    ("conv dX 64ch 32x32 (im2col)", 576, 1024, 64, True, False),
    ("conv fwd 512ch 4x4 x32 (im2col)", 512, 512, 4608, False, False),
    ("winograd point 64ch, 1024 tiles", 64, 1024, 64, False, False),
    ("winograd point 512ch, 128 tiles", 512, 128, 512, False, False),
]


AVX512_CORES = ("skylakex", "cooperlake", "sapphirerapids")
AVX2_CORES = ("haswell", "zen", "skylakex", "cooperlake")


def better_core(chosen):
    """The core type gssp would request when OpenBLAS chose `chosen` on this CPU, or None."""
    with open("/proc/cpuinfo") as f:
        flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    if "avx512f" in flags and chosen not in AVX512_CORES:
        return "SkylakeX"
    if "avx2" in flags and "fma" in flags and "avx512f" not in flags and chosen not in AVX2_CORES:
        return "Haswell"
    return None


def main():
    blas = ctypes.CDLL(LIB)
    blas.openblas_get_corename.restype = ctypes.c_char_p
    chosen = blas.openblas_get_corename().decode().lower()
    better = None if "OPENBLAS_CORETYPE" in os.environ else better_core(chosen)
    if better:
        # OpenBLAS reads the variable only when it loads: start again with it set.
        os.execve(sys.executable, [sys.executable] + sys.argv,
                  {**os.environ, "OPENBLAS_CORETYPE": better})
    print(f"OpenBLAS kernels: {chosen}")
    fp = ctypes.POINTER(ctypes.c_float)
    blas.cblas_sgemm.argtypes = [ctypes.c_int] * 6 + [ctypes.c_float, fp, ctypes.c_int, fp,
                                                      ctypes.c_int, ctypes.c_float, fp,
                                                      ctypes.c_int]
    blas.openblas_set_num_threads(1)
    print(f"{'shape':<34} {'m':>5} {'n':>5} {'k':>5} {'GFLOP/s':>8}")
    for name, m, n, k, ta, tb in SHAPES:
        a = (ctypes.c_float * (m * k))(*([0.5] * (m * k)))
        b = (ctypes.c_float * (k * n))(*([0.25] * (k * n)))
        c = (ctypes.c_float * (m * n))()
        lda, ldb = (m if ta else k), (k if tb else n)
        args = (ROW_MAJOR, TRANS if ta else NO_TRANS, TRANS if tb else NO_TRANS, m, n, k, 1.0,
                a, lda, b, ldb, 0.0, c, n)
        blas.cblas_sgemm(*args)
        reps = max(3, int(2e9 / (2 * m * n * k)))
        best = float("inf")
        for _ in range(3):
            t = time.perf_counter()
            for _ in range(reps):
                blas.cblas_sgemm(*args)
            best = min(best, (time.perf_counter() - t) / reps)
        print(f"{name:<34} {m:>5} {n:>5} {k:>5} {2 * m * n * k / best / 1e9:>8.1f}")


if __name__ == "__main__":
    main()
