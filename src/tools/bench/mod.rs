//! `gssp bench ...`: measured figures, each printed with what produced it.
//!
//! - `step`: images/s of one process's training step (`gpu`: on the CUDA backend),
//! - `push`: a parameter server's time per push against the memory traffic it must cause,
//! - `topk`: exact top-k selection against one summing pass over the same array,
//! - `modes` / `paper`: whole training runs, one `mpirun` job per mode, compared in one
//!   table (and `bench.json`) and a `gssp report` of their runs (`report/`),
//! - `scale`: `paper` at several cluster sizes (one config each), one table over them,
//! - `plot`: a figure of the docs drawn again from the tables `paper` and `scale` left,
//! - `configs`: every shipped config run as it is, checked against its own target accuracy.

pub mod configs;
#[cfg(feature = "cuda")]
pub mod gpu;
pub mod jobs;
pub mod plot;
pub mod push;
pub mod push_mpi;
pub mod scale;
pub mod step;
pub mod variants;

pub use step::step;

/// Top-k of `n` floats at `ratio` against one pass summing them (median of `reps`).
pub fn topk(n: usize, ratio: f64, reps: usize) -> anyhow::Result<(f64, f64)> {
    if n == 0 || !(ratio > 0.0 && ratio <= 1.0) || reps == 0 {
        anyhow::bail!("--n must be >= 1, --ratio in (0, 1], --reps >= 1");
    }
    let (topk_s, sum_s) = crate::compress::topk::topk_vs_sum_bench(n, ratio, reps, 42);
    println!(
        "n: {n}\nratio: {ratio}\nk: {}\nreps: {reps}",
        crate::compress::ratio::k_for_ratio(n, ratio)
    );
    println!(
        "topk_s: {topk_s:.6}\nsum_s: {sum_s:.6}\ntopk_over_sum: {:.2}",
        topk_s / sum_s
    );
    Ok((topk_s, sum_s))
}
