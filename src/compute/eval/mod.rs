//! Evaluation of translations: corpus BLEU as sacreBLEU computes it, and perplexity.
//!
//! Pure logic; a rank can compute [`bleu::BleuStats`] on its part of the test set and the
//! sums of all ranks give the corpus score.

pub mod bleu;
pub mod tok13a;

pub use bleu::{corpus_bleu, BleuStats};
pub use tok13a::tokenize_13a;

/// Perplexity from a summed negative log-likelihood (natural log) over `tokens` predicted
/// tokens: `exp(nll / tokens)`. NaN when `tokens` is 0 (nothing was predicted).
pub fn perplexity(nll_sum: f64, tokens: u64) -> f64 {
    if tokens == 0 {
        return f64::NAN;
    }
    (nll_sum / tokens as f64).exp()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perplexity_of_uniform_guess_is_the_vocabulary_size() {
        let v = 6191f64;
        let p = perplexity(10.0 * v.ln(), 10);
        assert!((p - v).abs() < 1e-6 * v, "{p}");
        assert_eq!(perplexity(0.0, 3), 1.0);
        assert!(perplexity(1.0, 0).is_nan());
    }
}
