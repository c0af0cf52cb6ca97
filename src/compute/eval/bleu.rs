//! Corpus BLEU-4 exactly as sacreBLEU's `BLEU().corpus_score` computes it by default, so the
//! numbers compare with published Multi30k results.
//!
//! sacreBLEU 2.x defaults: `13a` tokenization ([`tokenize_13a`]), case-sensitive (optional
//! lowercasing, sacreBLEU's `lowercase=True`), n-grams of order 1-4, `smooth_method='exp'`,
//! `effective_order=False`. Per segment: the hypothesis n-grams, their matches clipped by the
//! reference counts (the maximum over references), the hypothesis length and the length of
//! the reference closest to it (the shorter one on a tie). The corpus sums these statistics,
//! then (`BLEU.compute_bleu`):
//! - brevity penalty `exp(1 - ref_len / hyp_len)` when `hyp_len < ref_len` (0 when
//!   `hyp_len` is 0), else 1;
//! - score 0 when no n-gram of any order matches;
//! - precision `p_n = 100 * matches / total`; when `matches` is 0, the "exp" smoothing gives
//!   `100 / (2^k * total)` for the `k`-th such order;
//! - when no hypothesis has `n` tokens (`total` of order `n` is 0) the orders from `n` on have
//!   precision 0, whose log sacreBLEU floors at -9999999999 (so the score is 0);
//! - `BLEU = bp * exp(sum(log p_n) / 4)`, on a 0-100 scale.

use std::collections::HashMap;

use super::tok13a::tokenize_13a;

/// Highest n-gram order.
pub const MAX_ORDER: usize = 4;
/// sacreBLEU's `my_log(0)`.
const LOG_ZERO: f64 = -9_999_999_999.0;

/// BLEU's sufficient statistics; sums over segments (and over ranks) give the corpus's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BleuStats {
    /// Hypothesis tokens.
    pub hyp_len: u64,
    /// Tokens of the closest reference of each segment.
    pub ref_len: u64,
    /// Clipped n-gram matches, order 1 to 4.
    pub matches: [u64; MAX_ORDER],
    /// Hypothesis n-grams, order 1 to 4.
    pub totals: [u64; MAX_ORDER],
}

fn ngram_counts(tokens: &[String]) -> HashMap<&[String], u64> {
    let mut counts = HashMap::new();
    for n in 1..=MAX_ORDER {
        for g in tokens.windows(n) {
            *counts.entry(g).or_insert(0) += 1;
        }
    }
    counts
}

fn prepare(segment: &str, lowercase: bool) -> Vec<String> {
    if lowercase {
        tokenize_13a(&segment.to_lowercase())
    } else {
        tokenize_13a(segment)
    }
}

impl BleuStats {
    /// Statistics of one hypothesis against its references (one or more).
    pub fn segment<R: AsRef<str>>(hyp: &str, refs: &[R], lowercase: bool) -> BleuStats {
        let hyp = prepare(hyp, lowercase);
        let mut ref_counts: HashMap<Vec<String>, u64> = HashMap::new();
        let mut closest: Option<usize> = None;
        for r in refs {
            let toks = prepare(r.as_ref(), lowercase);
            let len = toks.len();
            closest = Some(match closest {
                Some(c) if (c.abs_diff(hyp.len()), c) <= (len.abs_diff(hyp.len()), len) => c,
                _ => len,
            });
            for (g, k) in ngram_counts(&toks) {
                let e = ref_counts.entry(g.to_vec()).or_insert(0);
                *e = (*e).max(k);
            }
        }
        let mut s = BleuStats {
            hyp_len: hyp.len() as u64,
            ref_len: closest.unwrap_or(0) as u64,
            ..BleuStats::default()
        };
        for (g, k) in ngram_counts(&hyp) {
            let n = g.len() - 1;
            s.totals[n] += k;
            s.matches[n] += k.min(ref_counts.get(g).copied().unwrap_or(0));
        }
        s
    }

    /// Adds another segment's (or rank's) statistics.
    pub fn add(&mut self, other: &BleuStats) {
        self.hyp_len += other.hyp_len;
        self.ref_len += other.ref_len;
        for n in 0..MAX_ORDER {
            self.matches[n] += other.matches[n];
            self.totals[n] += other.totals[n];
        }
    }

    /// Brevity penalty.
    pub fn brevity_penalty(&self) -> f64 {
        if self.hyp_len >= self.ref_len {
            1.0
        } else if self.hyp_len == 0 {
            0.0
        } else {
            (1.0 - self.ref_len as f64 / self.hyp_len as f64).exp()
        }
    }

    /// The smoothed n-gram precisions in percent, as sacreBLEU reports them.
    pub fn precisions(&self) -> [f64; MAX_ORDER] {
        let mut p = [0.0; MAX_ORDER];
        if self.matches.iter().all(|&m| m == 0) {
            return p;
        }
        let mut smooth = 1.0;
        for ((p_n, &matches), &total) in p.iter_mut().zip(&self.matches).zip(&self.totals) {
            if total == 0 {
                break;
            }
            *p_n = if matches == 0 {
                smooth *= 2.0;
                100.0 / (smooth * total as f64)
            } else {
                100.0 * matches as f64 / total as f64
            };
        }
        p
    }

    /// BLEU-4 on a 0-100 scale.
    pub fn score(&self) -> f64 {
        if self.matches.iter().all(|&m| m == 0) {
            return 0.0;
        }
        let log_sum: f64 = self
            .precisions()
            .iter()
            .map(|&p| if p == 0.0 { LOG_ZERO } else { p.ln() })
            .sum();
        self.brevity_penalty() * (log_sum / MAX_ORDER as f64).exp()
    }
}

/// Corpus statistics of `hyps[i]` against the single reference `refs[i]` (sacreBLEU's
/// `corpus_score(hyps, [refs])`); `.score()` is the BLEU.
///
/// # Panics
/// If `hyps` and `refs` differ in length (a caller bug: one translation per test sentence).
pub fn corpus_bleu<H: AsRef<str>, R: AsRef<str>>(
    hyps: &[H],
    refs: &[R],
    lowercase: bool,
) -> BleuStats {
    assert_eq!(
        hyps.len(),
        refs.len(),
        "corpus_bleu: {} hypotheses but {} references",
        hyps.len(),
        refs.len()
    );
    let mut total = BleuStats::default();
    for (h, r) in hyps.iter().zip(refs) {
        total.add(&BleuStats::segment(h.as_ref(), &[r.as_ref()], lowercase));
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first 8 lines of Multi30k's test2016.en, verbatim.
    const REFS: [&str; 8] = [
        "A man in an orange hat starring at something.",
        "A Boston Terrier is running on lush green grass in front of a white fence.",
        "A girl in karate uniform breaking a stick with a front kick.",
        "Five people wearing winter jackets and helmets stand in the snow, with snowmobiles in the background.",
        "People are fixing the roof of a house.",
        "A man in light colored clothing photographs a group of men wearing dark suits and hats standing around a woman dressed in a strapless gown.",
        "A group of people standing in front of an igloo.",
        "A boy in a red uniform is attempting to avoid getting out at home plate, while the catcher in the blue uniform is attempting to catch him.",
    ];

    /// Python: `" ".join(w for j, w in enumerate(r.split(" ")) if (i + j) % 4 != 1)`.
    fn drop_words(i: usize, r: &str) -> String {
        let kept: Vec<&str> = r
            .split(' ')
            .enumerate()
            .filter(|(j, _)| (i + j) % 4 != 1)
            .map(|(_, w)| w)
            .collect();
        kept.join(" ")
    }

    /// Python: `w = r.split(" "); w[0], w[1] = w[1], w[0]; " ".join(w)`.
    fn swap_first(r: &str) -> String {
        let mut w: Vec<&str> = r.split(' ').collect();
        w.swap(0, 1);
        w.join(" ")
    }

    /// Python: `" ".join(r.split(" ")[: len(r.split(" ")) // 2])`.
    fn half(r: &str) -> String {
        let w: Vec<&str> = r.split(' ').collect();
        w[..w.len() / 2].join(" ")
    }

    struct Want {
        score: f64,
        matches: [u64; 4],
        totals: [u64; 4],
        hyp_len: u64,
        ref_len: u64,
    }

    fn check(name: &str, got: BleuStats, want: Want) {
        assert_eq!(got.matches, want.matches, "{name}: matches");
        assert_eq!(got.totals, want.totals, "{name}: totals");
        assert_eq!(
            (got.hyp_len, got.ref_len),
            (want.hyp_len, want.ref_len),
            "{name}: lengths"
        );
        let s = got.score();
        assert!(
            (s - want.score).abs() < 1e-9,
            "{name}: BLEU {s} vs sacreBLEU {}",
            want.score
        );
    }

    /// Expected values: sacreBLEU 2.6.0 under CPython 3.11.7,
    /// `sacrebleu.metrics.BLEU(lowercase=lc).corpus_score(hyps, [refs])` (all defaults
    /// otherwise: 13a, exp smoothing, no effective order); `.score`, `.counts`, `.totals`,
    /// `.sys_len`, `.ref_len` printed with `repr`.
    #[test]
    fn matches_sacrebleu_corpus_scores() {
        let refs = &REFS[..];
        let w = |score, matches, totals, hyp_len, ref_len| Want {
            score,
            matches,
            totals,
            hyp_len,
            ref_len,
        };
        let full = [132, 124, 116, 108];
        check(
            "perfect",
            corpus_bleu(refs, refs, false),
            w(100.00000000000004, full, full, 132, 132),
        );
        let dropped: Vec<String> = refs
            .iter()
            .enumerate()
            .map(|(i, r)| drop_words(i, r))
            .collect();
        check(
            "dropped_words",
            corpus_bleu(&dropped, refs, false),
            w(
                16.915760065371188,
                [96, 62, 30, 1],
                [96, 88, 80, 72],
                96,
                132,
            ),
        );
        let swapped: Vec<String> = refs.iter().map(|r| swap_first(r)).collect();
        check(
            "swapped_first_words",
            corpus_bleu(&swapped, refs, false),
            w(89.42872484562966, [132, 108, 100, 92], full, 132, 132),
        );
        let halves: Vec<String> = refs.iter().map(|r| half(r)).collect();
        check(
            "half_length (brevity penalty)",
            corpus_bleu(&halves, refs, false),
            w(
                29.017005375805706,
                [59, 51, 43, 35],
                [59, 51, 43, 35],
                59,
                132,
            ),
        );
        check(
            "empty",
            corpus_bleu(&[""; 8], refs, false),
            w(0.0, [0; 4], [0; 4], 0, 132),
        );
        let lower: Vec<String> = refs.iter().map(|r| r.to_lowercase()).collect();
        check(
            "lowercase hyps, cased BLEU",
            corpus_bleu(&lower, refs, false),
            w(91.61779083036865, [122, 114, 106, 98], full, 132, 132),
        );
        check(
            "lowercase hyps, lowercase=True",
            corpus_bleu(&lower, refs, true),
            w(100.00000000000004, full, full, 132, 132),
        );
        let punct = [
            "A man in an orange hat, starring at something!",
            "A Boston Terrier is running on lush green grass in front of a white fence",
            "A girl in \"karate\" uniform breaking a stick with a front-kick.",
        ];
        check(
            "punctuation",
            corpus_bleu(&punct, &refs[..3], false),
            w(
                71.41361578226305,
                [35, 28, 23, 18],
                [40, 37, 34, 31],
                40,
                39,
            ),
        );
        check(
            "no 2-, 3-, 4-gram match (exp smoothing)",
            corpus_bleu(
                &["hat orange an in man A", "fence white a of front in grass"],
                &refs[..2],
                false,
            ),
            w(2.5349956355133996, [13, 0, 0, 0], [13, 11, 9, 7], 13, 26),
        );
        check(
            "no 4-gram in the hypotheses",
            corpus_bleu(&["A man", "A dog ."], &refs[..2], false),
            w(0.0, [4, 1, 0, 0], [5, 3, 1, 0], 5, 26),
        );
        let longer: Vec<String> = refs[..4]
            .iter()
            .map(|r| format!("{r} and a red ball in the background ."))
            .collect();
        check(
            "longer than the references",
            corpus_bleu(&longer, &refs[..4], false),
            w(
                61.29762679655949,
                [57, 53, 49, 45],
                [89, 85, 81, 77],
                89,
                57,
            ),
        );
        // `BLEU().corpus_score(["the small dog runs fast ."],
        //     [["a small dog runs quickly ."], ["the little dog is running fast ."]])`
        let multi = BleuStats::segment(
            "the small dog runs fast .",
            &[
                "a small dog runs quickly .",
                "the little dog is running fast .",
            ],
            false,
        );
        check(
            "two references",
            multi,
            w(39.76353643835254, [6, 3, 1, 0], [6, 5, 4, 3], 6, 6),
        );
    }

    #[test]
    fn stats_add_up_and_closest_reference_prefers_shorter() {
        let mut sum = BleuStats::default();
        for (h, r) in REFS.iter().zip(REFS.iter().rev()) {
            sum.add(&BleuStats::segment(h, &[r], false));
        }
        let reversed: Vec<&str> = REFS.iter().rev().copied().collect();
        assert_eq!(sum, corpus_bleu(&REFS, &reversed, false));
        // Hypothesis of 3 tokens, references of 2 and 4: equally close, the shorter wins.
        let s = BleuStats::segment("a b c", &["a b d e", "a b"], false);
        assert_eq!(s.ref_len, 2);
        assert_eq!(s.brevity_penalty(), 1.0);
        assert!((s.precisions()[0] - 100.0 * 2.0 / 3.0).abs() < 1e-12);
    }

    #[test]
    #[should_panic(expected = "2 hypotheses but 1 references")]
    fn corpus_bleu_rejects_unpaired_lists() {
        corpus_bleu(&["a", "b"], &["a"], false);
    }
}
