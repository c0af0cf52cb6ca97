//! Multi30k as users download it: loading, vocabularies, bucketed batches and BLEU on the
//! real files. These tests fail (never skip) when the files are absent.

mod common;

use common::multi30k_dir;
use gssp::compute::eval::{corpus_bleu, tokenize_13a};
use gssp::data::bucket::{padding_fraction, BucketSampler, TextBatch};
use gssp::data::multi30k::{
    load_multi30k, load_split, Direction, EncodedPairs, Split, Vocabs, VOCAB_DE_FILE,
};
use gssp::data::text::{detokenize, tokenize, SPECIALS};

#[test]
fn loads_all_splits_with_official_sizes() {
    let m = load_multi30k(&multi30k_dir()).unwrap();
    assert_eq!(
        (m.train.len(), m.val.len(), m.test.len()),
        (29000, 1014, 1000)
    );
    for p in [&m.train, &m.val, &m.test] {
        assert_eq!(p.de.len(), p.en.len());
    }
    assert_eq!(
        m.train.de[0],
        "Zwei junge weiße Männer sind im Freien in der Nähe vieler Büsche."
    );
    assert_eq!(
        m.train.en[0],
        "Two young, White males are outside near many bushes."
    );
    assert_eq!(
        m.test.en[999],
        "A girl at the shore of a beach with a mountain in the distance."
    );
}

#[test]
fn vocab_sizes_and_save_load() {
    let train = load_split(&multi30k_dir(), Split::Train).unwrap();
    let v = Vocabs::build(&train);
    eprintln!("vocab sizes: de {} en {}", v.de.len(), v.en.len());
    assert_eq!((v.de.len(), v.en.len()), (VOCAB_DE, VOCAB_EN));
    for vocab in [&v.de, &v.en] {
        assert_eq!(vocab.tokens()[..4], SPECIALS);
    }
    // The most frequent tokens, by the order rule (count desc, then bytes).
    assert_eq!(v.en.tokens()[4..8], ["a", ".", "in", "the"]);
    let tmp = tempfile::tempdir().unwrap();
    v.save(tmp.path()).unwrap();
    let text = std::fs::read_to_string(tmp.path().join(VOCAB_DE_FILE)).unwrap();
    assert_eq!(text.lines().count(), VOCAB_DE);
    assert_eq!(Vocabs::load(tmp.path()).unwrap(), v);
}

/// German and English vocabulary sizes with min frequency 2 on the training split.
const VOCAB_DE: usize = 7859;
const VOCAB_EN: usize = 5927;

#[test]
fn bucketing_cuts_padding_and_serves_every_pair_once() {
    let train = load_split(&multi30k_dir(), Split::Train).unwrap();
    let v = Vocabs::build(&train);
    let pairs = EncodedPairs::encode(&train, &v, Direction::DeEn);
    let all: Vec<usize> = (0..pairs.len()).collect();
    let bucketed = BucketSampler::new(&pairs, all.clone(), 128, 100, 42).unwrap();
    let plain = BucketSampler::new(&pairs, all.clone(), 128, 1, 42).unwrap();
    let epoch = bucketed.epoch(0);
    assert_eq!(epoch.len(), 227);
    let mut seen = epoch.concat();
    seen.sort_unstable();
    assert_eq!(seen, all);
    assert_eq!(epoch, bucketed.epoch(0));
    assert_ne!(epoch, bucketed.epoch(1));
    let (b, p) = (
        padding_fraction(&pairs, &epoch),
        padding_fraction(&pairs, &plain.epoch(0)),
    );
    eprintln!("padding: bucketed {b:.4}, plain shuffle {p:.4}");
    // Measured: 8.0% bucketed, 50.6% plain (seed 42).
    assert!(b < 0.1 && p > 0.4, "bucketed {b} vs plain {p}");
    let batch = TextBatch::new(&pairs, &epoch[0]);
    assert_eq!(batch.src.len(), batch.src_len * batch.size());
}

/// Our tokenizer followed by `detokenize` gives back what sacreBLEU's 13a sees in the
/// lowercased reference, so a model's output is scored fairly against raw references.
#[test]
fn detokenized_references_score_like_the_references() {
    let test = load_split(&multi30k_dir(), Split::Test2016).unwrap();
    let round: Vec<String> = test.en.iter().map(|l| detokenize(&tokenize(l))).collect();
    let differ: Vec<&String> = round
        .iter()
        .zip(&test.en)
        .filter(|(r, l)| tokenize_13a(r) != tokenize_13a(&l.to_lowercase()))
        .map(|(_, l)| l)
        .collect();
    eprintln!(
        "13a differs after the round trip on {} lines: {differ:?}",
        differ.len()
    );
    assert!(differ.len() <= 5, "{differ:?}");
    let bleu = corpus_bleu(&round, &test.en, true).score();
    assert!(bleu > 99.5, "{bleu}");
}

/// Expected: sacreBLEU 2.6.0 (CPython 3.11.7), `BLEU(lowercase=lc).corpus_score(hyps,
/// [refs])` over all 1,000 test2016.en lines, with
/// `hyps = [" ".join(w for j, w in enumerate(r.split(" ")) if (i + j) % 4 != 1).lower()
/// for i, r in enumerate(refs)]`.
#[test]
fn bleu_on_test2016_matches_sacrebleu() {
    let test = load_split(&multi30k_dir(), Split::Test2016).unwrap();
    let hyps: Vec<String> = test
        .en
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let kept: Vec<&str> = r
                .split(' ')
                .enumerate()
                .filter(|(j, _)| (i + j) % 4 != 1)
                .map(|(_, w)| w)
                .collect();
            kept.join(" ").to_lowercase()
        })
        .collect();
    let cased = corpus_bleu(&hyps, &test.en, false);
    assert_eq!(cased.matches, [9000, 5677, 2746, 315]);
    assert_eq!(cased.totals, [9729, 8729, 7729, 6729]);
    assert_eq!((cased.hyp_len, cased.ref_len), (9729, 12955));
    assert!(
        (cased.score() - 22.701812272364723).abs() < 1e-9,
        "{}",
        cased.score()
    );
    let lower = corpus_bleu(&hyps, &test.en, true);
    assert_eq!(lower.matches, [9729, 6262, 3056, 332]);
    assert!(
        (lower.score() - 24.687981343837194).abs() < 1e-9,
        "{}",
        lower.score()
    );
}

#[test]
fn missing_or_unpaired_files_are_named() {
    let tmp = tempfile::tempdir().unwrap();
    let e = load_multi30k(tmp.path()).unwrap_err().to_string();
    assert!(e.contains("train.de") && e.contains("not found"), "{e}");
    let src = multi30k_dir();
    std::fs::copy(src.join("val.de"), tmp.path().join("val.de")).unwrap();
    let en = std::fs::read_to_string(src.join("val.en")).unwrap();
    let short: String = en.lines().take(1000).map(|l| format!("{l}\n")).collect();
    std::fs::write(tmp.path().join("val.en"), short).unwrap();
    let e = load_split(tmp.path(), Split::Val).unwrap_err().to_string();
    assert!(
        e.contains("val.de holds 1014 lines")
            && e.contains("val.en holds 1000")
            && e.contains("line 1001 has no counterpart"),
        "{e}"
    );
}
