//! Fuzzing on stable Rust: property tests that feed every parser of outside input (IDX and
//! CIFAR-10 files, text lines, vocabularies and Multi30k splits, the TOML config with its
//! `--set` overrides, mailbox messages, the parameter-server messages, safetensors model
//! files, checkpoint files and manifests, and the BLEU tokenizers) with arbitrary and with
//! structurally mutated input. The property is the same everywhere: the function returns
//! `Ok` or a clear `Err`, never panics, and never allocates what a header merely claims;
//! where it returns `Ok`, the result is consistent with its input.
//!
//! Structured mutation finds more than random bytes: each target starts from a valid input
//! (an IDX header, a CIFAR record, a mailbox message, a model file, the example config, a
//! manifest of each kind of run) and mutates lengths, dimensions and magic numbers, values
//! and list entries, truncates, inserts and deletes, so the checks past the first one are
//! reached.
//!
//! The number of cases per property is bounded for CI (see [`cases`]); `GSSP_FUZZ_CASES=N`
//! sets it for a longer local run. A failure prints the shrunk input; every finding gets a
//! regression unit test next to its fix.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use flate2::write::GzEncoder;
use flate2::Compression;
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::Config as ProptestConfig;
use toml::{Table, Value};

use gssp::checkpoint::store::{from_bytes as checkpoint_from_bytes, to_bytes as checkpoint_bytes};
use gssp::checkpoint::{FileEntry, RankMeta, Resume};
use gssp::compress::powersgd::{reconstruct, LowRankLayout, TensorShape};
use gssp::compute::backend::cpu::Cpu;
use gssp::compute::eval::bleu::{corpus_bleu, BleuStats};
use gssp::compute::eval::tok13a::tokenize_13a;
use gssp::compute::model::export::{from_bytes, to_bytes};
use gssp::compute::model::{zoo, Trainable};
use gssp::compute::pace::worker_factors;
use gssp::config::Config;
use gssp::data::lines::{read_lines, split_lines};
use gssp::data::multi30k::{load_split, Split};
use gssp::data::text::{detokenize, tokenize, Vocab, SPECIALS};
use gssp::data::{load_cifar10_files, load_idx_pair};
use gssp::protocol::layout::{Layout, Role};
use gssp::protocol::mailbox::{encode, message_words, MailboxLayout};
use gssp::protocol::wire::{
    decode_members, encode_members, Push, Reply, WireError, HEADER_WORDS, MAX_STALENESS,
};
use gssp::runtime::setup::saved_layout;

/// `default` cases per property, or `GSSP_FUZZ_CASES` when set. No failure persistence:
/// a finding becomes a unit test beside its fix instead of a file in the tree.
fn cases(default: u32) -> ProptestConfig {
    let cases = std::env::var("GSSP_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default);
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

// ---------------------------------------------------------------------------------------
// Byte mutation

/// One structural edit of a byte string; positions are relative to its current length.
#[derive(Debug, Clone)]
enum Mutation {
    /// Cut the bytes at a position.
    Truncate(Index),
    /// XOR one byte.
    Flip(Index, u8),
    /// Overwrite 4 bytes (big-endian) with an interesting value: a length, a count, a magic.
    Word(Index, u32),
    /// Overwrite 8 bytes (little-endian): the safetensors header length.
    Long(Index, u64),
    Insert(Index, Vec<u8>),
    Remove(Index, usize),
    Append(Vec<u8>),
}

/// Values that break size arithmetic: 0, 1, powers of two at the type limits, the IDX magics.
fn interesting_u32() -> impl Strategy<Value = u32> {
    prop_oneof![
        Just(0u32),
        Just(1),
        Just(u32::MAX),
        Just(u32::MAX - 1),
        Just(1 << 31),
        Just(1 << 16),
        Just(2049),
        Just(2051),
        0u32..64,
        any::<u32>(),
    ]
}

fn interesting_u64() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        Just(u64::MAX),
        Just(1 << 63),
        Just(u32::MAX as u64 + 1),
        Just(100_000_001),
        0u64..4096,
        any::<u64>(),
    ]
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let bytes = prop::collection::vec(any::<u8>(), 0..16);
    prop_oneof![
        any::<Index>().prop_map(Mutation::Truncate),
        (any::<Index>(), 1u8..=255).prop_map(|(i, x)| Mutation::Flip(i, x)),
        (any::<Index>(), interesting_u32()).prop_map(|(i, v)| Mutation::Word(i, v)),
        (any::<Index>(), interesting_u64()).prop_map(|(i, v)| Mutation::Long(i, v)),
        (any::<Index>(), bytes.clone()).prop_map(|(i, b)| Mutation::Insert(i, b)),
        (any::<Index>(), 1usize..64).prop_map(|(i, n)| Mutation::Remove(i, n)),
        bytes.prop_map(Mutation::Append),
    ]
}

fn mutations() -> impl Strategy<Value = Vec<Mutation>> {
    prop::collection::vec(mutation(), 0..4)
}

/// Overwrites `value` at `at`, clipped to the end of `b`.
fn overwrite(b: &mut [u8], at: usize, value: &[u8]) {
    let end = (at + value.len()).min(b.len());
    b[at..end].copy_from_slice(&value[..end - at]);
}

fn mutate(mut b: Vec<u8>, edits: &[Mutation]) -> Vec<u8> {
    for m in edits {
        // Positions in 0..=len, so the end of the bytes is reachable too.
        let at = |i: &Index, len: usize| i.index(len + 1);
        match m {
            Mutation::Truncate(i) => b.truncate(at(i, b.len())),
            Mutation::Flip(i, x) if !b.is_empty() => {
                let i = i.index(b.len());
                b[i] ^= x;
            }
            Mutation::Flip(..) => {}
            Mutation::Word(i, v) => {
                // Word-aligned: the IDX header and the mailbox are arrays of 32-bit words.
                let i = at(i, b.len() / 4) * 4;
                overwrite(&mut b, i, &v.to_be_bytes());
            }
            Mutation::Long(i, v) => {
                // Mostly the first 8 bytes, which hold the safetensors header length.
                let i = if i.index(4) == 0 { at(i, b.len()) } else { 0 };
                overwrite(&mut b, i, &v.to_le_bytes());
            }
            Mutation::Insert(i, bytes) => {
                let i = at(i, b.len());
                b.splice(i..i, bytes.iter().copied());
            }
            Mutation::Remove(i, n) => {
                let i = at(i, b.len());
                let end = (i + n).min(b.len());
                b.drain(i..end);
            }
            Mutation::Append(bytes) => b.extend_from_slice(bytes),
        }
    }
    b
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = GzEncoder::new(Vec::new(), Compression::fast());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

/// Writes `files` (name, bytes) into a new temporary folder.
fn folder(files: &[(&str, &[u8])]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (name, bytes) in files {
        std::fs::write(dir.path().join(name), bytes).unwrap();
    }
    dir
}

// ---------------------------------------------------------------------------------------
// IDX

fn idx_file(magic: u32, shape: &[u32], payload_len: usize) -> Vec<u8> {
    let mut b: Vec<u8> = std::iter::once(magic)
        .chain(shape.iter().copied())
        .flat_map(u32::to_be_bytes)
        .collect();
    b.extend((0..payload_len).map(|i| (i * 7 % 10) as u8));
    b
}

fn idx_pair(n: usize, rows: usize, cols: usize) -> (Vec<u8>, Vec<u8>) {
    let dims = [n as u32, rows as u32, cols as u32];
    (
        idx_file(2051, &dims, n * rows * cols),
        idx_file(2049, &[n as u32], n),
    )
}

/// Loads the pair from files; `Ok` must be a consistent one-channel dataset.
fn check_idx(images: &[u8], labels: &[u8]) -> Result<(), TestCaseError> {
    let dir = folder(&[("images", images), ("labels", labels)]);
    let (ip, lp) = (dir.path().join("images"), dir.path().join("labels"));
    if let Ok(d) = load_idx_pair(&ip, &lp) {
        prop_assert_eq!(d.channels, 1);
        prop_assert_eq!(d.pixels.len(), d.labels.len() * d.height * d.width);
        prop_assert!(d.labels.iter().all(|&l| l < 10));
        prop_assert!(d.pixels.len() <= images.len().max(1) * 2000);
    }
    Ok(())
}

proptest! {
    #![proptest_config(cases(512))]

    #[test]
    fn idx_mutated_pairs_never_panic(
        n in 0usize..4, rows in 0usize..4, cols in 0usize..4,
        image_edits in mutations(), label_edits in mutations(),
        zip_images: bool, zip_labels: bool,
    ) {
        let (i, l) = idx_pair(n, rows, cols);
        let mut i = mutate(i, &image_edits);
        let mut l = mutate(l, &label_edits);
        if zip_images { i = gzip(&i); }
        if zip_labels { l = gzip(&l); }
        check_idx(&i, &l)?;
    }

    #[test]
    fn idx_arbitrary_bytes_never_panic(
        i in prop::collection::vec(any::<u8>(), 0..64),
        l in prop::collection::vec(any::<u8>(), 0..32),
    ) {
        check_idx(&i, &l)?;
    }

    /// A corrupt gzip stream (valid header, mutated body) is an error, not a panic.
    #[test]
    fn idx_mutated_gzip_never_panics(edits in mutations()) {
        let (i, l) = idx_pair(3, 2, 2);
        check_idx(&mutate(gzip(&i), &edits), &gzip(&l))?;
    }
}

/// Every strict prefix of a valid file, raw or gzip, is an error naming the file.
#[test]
fn idx_truncated_at_every_offset_is_an_error() {
    let (images, labels) = idx_pair(2, 3, 2);
    for zipped in [false, true] {
        let full = if zipped {
            gzip(&images)
        } else {
            images.clone()
        };
        for cut in 0..full.len() {
            let dir = folder(&[("images", &full[..cut]), ("labels", &labels)]);
            let e = load_idx_pair(&dir.path().join("images"), &dir.path().join("labels"));
            let e = e.expect_err("a truncated file must not load").to_string();
            assert!(e.contains("images"), "cut {cut} (gzip {zipped}): {e}");
        }
    }
}

// ---------------------------------------------------------------------------------------
// CIFAR-10

const CIFAR_RECORD: usize = gssp::data::cifar::RECORD_LEN;

fn cifar_batch(n: usize) -> Vec<u8> {
    (0..n * CIFAR_RECORD)
        .map(|i| {
            if i % CIFAR_RECORD == 0 {
                (i / CIFAR_RECORD % 10) as u8
            } else {
                (i % 251) as u8
            }
        })
        .collect()
}

proptest! {
    #![proptest_config(cases(256))]

    #[test]
    fn cifar_mutated_batches_never_panic(
        batches in prop::collection::vec((0usize..3, mutations()), 1..3),
        label_at in any::<Index>(), label in any::<u8>(),
    ) {
        let mut files: Vec<(String, Vec<u8>)> = Vec::new();
        for (k, (n, edits)) in batches.iter().enumerate() {
            let mut b = cifar_batch(*n);
            if *n > 0 {
                // A label byte of some record, to reach the label check past the length one.
                let r = label_at.index(*n) * CIFAR_RECORD;
                b[r] = label;
            }
            files.push((format!("batch_{k}.bin"), mutate(b, edits)));
        }
        let named: Vec<(&str, &[u8])> =
            files.iter().map(|(n, b)| (n.as_str(), b.as_slice())).collect();
        let dir = folder(&named);
        let paths: Vec<PathBuf> = files.iter().map(|(n, _)| dir.path().join(n)).collect();
        if let Ok(d) = load_cifar10_files(&paths) {
            let total: usize = files.iter().map(|(_, b)| b.len()).sum();
            prop_assert_eq!(d.labels.len() * CIFAR_RECORD, total);
            prop_assert_eq!(d.pixels.len(), d.labels.len() * 3 * 32 * 32);
            prop_assert!(d.labels.iter().all(|&l| l < 10));
        }
    }
}

// ---------------------------------------------------------------------------------------
// Text lines, tokenizer, vocabularies, Multi30k

/// Text with the characters line handling cares about: newlines, CRs, multi-byte UTF-8,
/// and raw bytes that make it invalid UTF-8.
fn texty_bytes() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        Just(b"\n".to_vec()),
        Just(b"\r\n".to_vec()),
        Just(b"\r".to_vec()),
        Just(b" ".to_vec()),
        Just("é€𝄞".as_bytes().to_vec()),
        Just(vec![0xc3]),
        Just(vec![0xff, 0xfe]),
        "[a-z' .,-]{1,8}".prop_map(String::into_bytes),
        any::<String>().prop_map(String::into_bytes),
    ];
    prop::collection::vec(piece, 0..12).prop_map(|v| v.concat())
}

/// A perfect score, `exp(ln(100))`, rounds to 100 plus an ulp or so, as in sacreBLEU.
const PERFECT: f64 = 100.0 + 1e-9;

proptest! {
    #![proptest_config(cases(1000))]

    #[test]
    fn split_lines_never_panics(bytes in texty_bytes()) {
        if let Ok(lines) = split_lines(Path::new("x.en"), &bytes) {
            for l in &lines {
                prop_assert!(!l.is_empty() && !l.contains('\n'), "{:?}", l);
            }
        }
    }

    /// Tokens are non-empty and hold no whitespace; detokenizing and tokenizing again gives
    /// the same tokens (what BLEU on detokenized output relies on).
    #[test]
    fn tokenize_arbitrary_unicode(s in any::<String>(), t in "[A-Za-z0-9'’ .,:;!?-]{0,40}") {
        for s in [s.as_str(), t.as_str()] {
            let toks = tokenize(s);
            for tok in &toks {
                prop_assert!(!tok.is_empty() && !tok.chars().any(char::is_whitespace), "{:?}", tok);
            }
            prop_assert_eq!(tokenize(&detokenize(&toks)), toks);
        }
    }

    /// sacreBLEU's tokenizer and BLEU itself take any text: the score is in [0, 100].
    #[test]
    fn bleu_of_arbitrary_unicode(
        pairs in prop::collection::vec((any::<String>(), "[a-z .,&;-]{0,30}"), 0..4),
        lowercase: bool,
    ) {
        for (a, b) in &pairs {
            for t in tokenize_13a(a).iter().chain(&tokenize_13a(b)) {
                prop_assert!(!t.is_empty());
            }
            let s = BleuStats::segment(a, &[b.as_str(), a.as_str()], lowercase);
            prop_assert!((0.0..=PERFECT).contains(&s.score()), "{:?}", s);
        }
        let hyps: Vec<&str> = pairs.iter().map(|(a, _)| a.as_str()).collect();
        let refs: Vec<&str> = pairs.iter().map(|(_, b)| b.as_str()).collect();
        let score = corpus_bleu(&hyps, &refs, lowercase).score();
        prop_assert!((0.0..=PERFECT).contains(&score), "{}", score);
        let self_score = corpus_bleu(&refs, &refs, lowercase).score();
        prop_assert!((0.0..=PERFECT).contains(&self_score), "{}", self_score);
    }
}

/// A valid vocabulary file: the specials, then `tokens`.
fn vocab_text(tokens: &[String]) -> Vec<u8> {
    let mut s = String::new();
    for t in SPECIALS
        .iter()
        .copied()
        .chain(tokens.iter().map(String::as_str))
    {
        s.push_str(t);
        s.push('\n');
    }
    s.into_bytes()
}

proptest! {
    #![proptest_config(cases(512))]

    /// A loaded vocabulary saves and loads back equal.
    #[test]
    fn vocab_load_never_panics(
        tokens in prop::collection::vec("[a-zé<>'.-]{1,4}|\\PC{1,3}", 0..8),
        edits in mutations(),
        noise in texty_bytes(),
        zipped: bool,
    ) {
        for text in [mutate(vocab_text(&tokens), &edits), noise.clone()] {
            let text = if zipped { gzip(&text) } else { text };
            let dir = folder(&[("vocab.txt", &text)]);
            let path = dir.path().join("vocab.txt");
            if let Ok(v) = Vocab::load(&path) {
                prop_assert!(v.len() >= SPECIALS.len());
                let again = dir.path().join("again.txt");
                v.save(&again).unwrap();
                prop_assert_eq!(Vocab::load(&again).unwrap(), v);
            }
        }
    }

    /// Multi30k splits from arbitrary, possibly compressed, files: `Ok` pairs line for line.
    #[test]
    fn multi30k_split_never_panics(
        de in texty_bytes(), en in texty_bytes(),
        de_gz: bool, en_gz: bool,
    ) {
        let de = if de_gz { gzip(&de) } else { de };
        let en = if en_gz { gzip(&en) } else { en };
        let de_name = if de_gz { "val.de.gz" } else { "val.de" };
        let dir = folder(&[(de_name, &de), ("val.en", &en)]);
        if let Ok(p) = load_split(dir.path(), Split::Val) {
            prop_assert_eq!(p.de.len(), p.en.len());
            prop_assert_eq!(read_lines(&dir.path().join("val.en")).unwrap(), p.en);
        }
    }
}

// ---------------------------------------------------------------------------------------
// Config and `--set` overrides

fn example_text() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/example.toml");
    std::fs::read_to_string(path).unwrap()
}

/// Every dotted key of the example config (it sets every key), with its value there.
fn example_keys() -> Vec<(String, Value)> {
    fn walk(t: &Table, prefix: &str, out: &mut Vec<(String, Value)>) {
        for (k, v) in t {
            let key = format!("{prefix}{k}");
            match v {
                Value::Table(sub) => walk(sub, &format!("{key}."), out),
                _ => out.push((key, v.clone())),
            }
        }
    }
    let root: Table = toml::from_str(&example_text()).unwrap();
    let mut out = Vec::new();
    walk(&root, "", &mut out);
    out
}

/// Every name a config enum accepts, and then some that it does not.
const WORDS: &[&str] = &[
    "mnist",
    "fashion-mnist",
    "cifar10",
    "synthetic",
    "none",
    "crop-flip",
    "lenet5",
    "mlp",
    "resnet18",
    "vgg19",
    "constant",
    "step",
    "cosine",
    "inverse",
    "single",
    "bsp",
    "asp",
    "ssp",
    "gssp",
    "allreduce",
    "auto",
    "profile",
    "static",
    "mailbox",
    "accumulate",
    "dense",
    "topk",
    "uniform",
    "speed",
    "cpu",
    "cuda",
    "",
    " ",
    "..",
    "a/b",
    "GSSP",
];

fn toml_int() -> impl Strategy<Value = i64> {
    prop_oneof![
        4 => -2i64..12,
        1 => Just(i64::MAX),
        1 => Just(i64::MIN),
        1 => Just(i64::MAX / 2),
        1 => Just(1 << 32),
        1 => any::<i64>(),
    ]
}

fn toml_float() -> impl Strategy<Value = f64> {
    prop_oneof![
        4 => -1.0f64..5.0,
        1 => Just(f64::NAN),
        1 => Just(f64::INFINITY),
        1 => Just(f64::NEG_INFINITY),
        1 => Just(0.0),
        1 => Just(-0.0),
        1 => Just(1e308),
        1 => Just(f64::MIN_POSITIVE),
        1 => Just(1.0),
    ]
}

/// A TOML value of any type, weighted to the types and ranges configs use.
fn toml_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        toml_int().prop_map(Value::Integer),
        toml_float().prop_map(Value::Float),
        any::<bool>().prop_map(Value::Boolean),
        prop::sample::select(WORDS).prop_map(|w| Value::String(w.into())),
        any::<String>().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(
                prop::sample::select(&["factor", "workers", "at_s", "worker", "train", "x"][..]),
                inner,
                0..3
            )
            .prop_map(|m| Value::Table(m.into_iter().map(|(k, v)| (k.to_string(), v)).collect())),
        ]
    })
}

/// A value of the same TOML type as `like` (the example's value of that key), so that
/// deserialisation passes and validation is reached.
fn same_type(like: &Value) -> BoxedStrategy<Value> {
    match like {
        Value::Integer(_) => toml_int().prop_map(Value::Integer).boxed(),
        Value::Float(_) => toml_float().prop_map(Value::Float).boxed(),
        Value::Boolean(_) => any::<bool>().prop_map(Value::Boolean).boxed(),
        Value::String(_) => prop::sample::select(WORDS)
            .prop_map(|w| Value::String(w.into()))
            .boxed(),
        _ => toml_value().boxed(),
    }
}

/// Lists for the array keys, shaped as each expects.
fn list_for(key: &str) -> BoxedStrategy<Value> {
    let ints = |r: std::ops::Range<i64>| {
        prop::collection::vec(prop_oneof![4 => r, 1 => toml_int()], 0..4)
            .prop_map(|v| Value::Array(v.into_iter().map(Value::Integer).collect()))
    };
    let floats = prop::collection::vec(toml_float(), 0..4)
        .prop_map(|v| Value::Array(v.into_iter().map(Value::Float).collect()));
    let table = |fields: &'static [(&'static str, bool)]| {
        let one = fields
            .iter()
            .map(|&(name, int)| {
                let v: BoxedStrategy<Value> = if int {
                    prop_oneof![4 => 0i64..4, 1 => toml_int()]
                        .prop_map(Value::Integer)
                        .boxed()
                } else {
                    prop_oneof![4 => 1.0f64..4.0, 1 => toml_float()]
                        .prop_map(Value::Float)
                        .boxed()
                };
                v.prop_map(move |v| (name.to_string(), v))
            })
            .collect::<Vec<_>>()
            .prop_map(|kv| Value::Table(kv.into_iter().collect()));
        prop::collection::vec(one, 0..4).prop_map(Value::Array)
    };
    match key {
        "sync.gssp.static_groups" => prop::collection::vec(ints(0..8), 0..4)
            .prop_map(Value::Array)
            .boxed(),
        "model.mlp_hidden" => ints(0..8).boxed(),
        "heterogeneity.tiers" => table(&[("factor", false), ("workers", true)]).boxed(),
        "heterogeneity.changes" => {
            table(&[("at_s", false), ("worker", true), ("factor", false)]).boxed()
        }
        _ => floats.boxed(),
    }
}

/// One `KEY=VALUE` override: a real key with a value of its type (mostly), of another type,
/// or as bare text; now and then a misspelt or nested key.
fn override_text() -> impl Strategy<Value = String> {
    let keys = example_keys();
    let n = keys.len();
    (0..n, 0u8..10, toml_value(), any::<String>(), any::<u32>()).prop_flat_map(
        move |(k, how, other, text, salt)| {
            let (key, like) = keys[k].clone();
            let value: BoxedStrategy<Value> = match (how, &like) {
                (0..=6, Value::Array(_)) => list_for(&key),
                (0..=6, _) => same_type(&like),
                _ => Just(other).boxed(),
            };
            value.prop_map(move |v| match how {
                // Bare text, as a shell user types it.
                8 => format!("{key}={text}"),
                // A key one level too deep, or one that does not exist.
                9 if salt % 2 == 0 => format!("{key}.x={v}"),
                9 => format!("{key}{}={v}", salt % 7),
                _ => format!("{key}={v}"),
            })
        },
    )
}

/// Loads `text` with `overrides`; where that succeeds, validation (for several world sizes)
/// and the resolved-config round trip must not panic either.
fn check_config(text: &str, overrides: &[String], world: usize) -> Result<(), TestCaseError> {
    let Ok(cfg) = Config::from_str_with_overrides(text, "fuzz.toml", overrides) else {
        return Ok(());
    };
    if cfg.validate().is_ok() {
        // What a validated config sizes: the gssp mailbox rings (k of a mid-sized model),
        // which must hold the messages, not a size that wrapped.
        let (k, messages) = (1 << 20, cfg.sync.gssp.mailbox_messages);
        let ring = MailboxLayout::new(cfg.num_servers(), k, messages);
        prop_assert!(ring.cap as u128 >= messages as u128 * message_words(k) as u128);
    }
    for w in [0, 1, 2, world, usize::MAX] {
        let workers = cfg.num_workers(w);
        if cfg.validate_for_world(w).is_err() || w > 64 {
            continue;
        }
        let h = &cfg.heterogeneity;
        if !h.tiers.is_empty() {
            let total: u128 = h.tiers.iter().map(|t| t.workers as u128).sum();
            prop_assert_eq!(total, workers as u128);
        }
        prop_assert_eq!(worker_factors(h, workers).len(), workers);
    }
    let again = Config::from_str_with_overrides(&cfg.to_toml_string(), "resolved", &[]);
    prop_assert!(again.is_ok(), "{:?}", again);
    Ok(())
}

/// The example config with an edit at a character boundary: a syntax error's line and
/// column are computed from the error's byte offset.
fn edited_example() -> impl Strategy<Value = String> {
    let text = example_text();
    (
        any::<Index>(),
        0usize..8,
        prop_oneof![
            Just(String::new()),
            "[=\\[\\]\"'.#\n]{1,3}",
            Just("é€𝄞".to_string()),
            any::<String>(),
        ],
    )
        .prop_map(move |(at, cut, insert)| {
            let chars: Vec<char> = text.chars().collect();
            let i = at.index(chars.len());
            let end = (i + cut).min(chars.len());
            chars[..i]
                .iter()
                .chain(insert.chars().collect::<Vec<_>>().iter())
                .chain(&chars[end..])
                .collect()
        })
}

proptest! {
    #![proptest_config(cases(1000))]

    #[test]
    fn config_overrides_of_real_keys_never_panic(
        overrides in prop::collection::vec(override_text(), 1..6),
        world in 0usize..24,
        minimal: bool,
    ) {
        let text = if minimal {
            "[data]\ndataset = \"synthetic\"\n[model]\nname = \"mlp\"\n".to_string()
        } else {
            example_text()
        };
        check_config(&text, &overrides, world)?;
    }

    /// gssp's world-size checks: a gssp config of few ranks with a grouping, tiers and
    /// speed changes drawn near their valid values.
    #[test]
    fn config_gssp_world_checks_never_panic(
        groups in prop_oneof![4 => 0i64..5, 1 => toml_int()],
        grouping in prop::sample::select(&["static", "profile"][..]),
        lists in list_for("sync.gssp.static_groups"),
        tiers in list_for("heterogeneity.tiers"),
        changes in list_for("heterogeneity.changes"),
        slowdown in list_for("heterogeneity.slowdown"),
        world in 0usize..12,
    ) {
        let overrides = vec![
            "sync.mode=gssp".to_string(),
            format!("sync.gssp.groups={groups}"),
            format!("sync.gssp.grouping={grouping}"),
            format!("sync.gssp.static_groups={lists}"),
            format!("heterogeneity.tiers={tiers}"),
            format!("heterogeneity.changes={changes}"),
            format!("heterogeneity.slowdown={slowdown}"),
        ];
        check_config(&example_text(), &overrides, world)?;
    }

    /// Tier worker counts near `usize::MAX` must not wrap: a config passes exactly when the
    /// true sum is the number of workers, and an error reports the true sum.
    #[test]
    fn config_tier_sums_are_exact(
        counts in prop::collection::vec(
            prop_oneof![3 => 1i64..4, 1 => Just(i64::MAX), 1 => Just(i64::MAX / 2 + 1)],
            1..5,
        ),
        world in 1usize..8,
    ) {
        let tiers: Vec<String> =
            counts.iter().map(|c| format!("{{factor = 1.0, workers = {c}}}")).collect();
        let overrides = vec![
            "sync.mode=allreduce".to_string(),
            format!("heterogeneity.tiers=[{}]", tiers.join(",")),
        ];
        let cfg = Config::from_str_with_overrides(&example_text(), "f", &overrides).unwrap();
        let total: u128 = counts.iter().map(|&c| c as u128).sum();
        match cfg.validate_for_world(world) {
            Ok(()) => prop_assert_eq!(total, world as u128),
            Err(e) => {
                let e = e.to_string();
                prop_assert!(e.contains(&format!("got {total} workers in total")), "{}", e);
            }
        }
    }

    #[test]
    fn config_edited_text_never_panics(text in edited_example()) {
        check_config(&text, &[], 4)?;
    }

    #[test]
    fn config_arbitrary_text_and_overrides_never_panic(
        text in any::<String>(),
        overrides in prop::collection::vec(any::<String>(), 0..3),
    ) {
        check_config(&text, &overrides, 4)?;
    }
}

// ---------------------------------------------------------------------------------------
// Parameter-server messages

/// Words as a message carries them: bit patterns at the edges, NaNs and infinities among
/// them (integer words travel as `f32` bits).
fn wire_word() -> impl Strategy<Value = f32> {
    prop_oneof![
        interesting_u32(),
        Just(0x7f80_0001),
        Just(0xffc0_0000),
        Just(2),
        Just(3)
    ]
    .prop_map(f32::from_bits)
}

fn wire_bits(words: &[f32]) -> Vec<u32> {
    words.iter().map(|w| w.to_bits()).collect()
}

/// Every kind of reply, at edge versions and staleness.
fn reply() -> impl Strategy<Value = Reply> {
    prop_oneof![
        (interesting_u64(), interesting_u64())
            .prop_map(|(version, staleness)| Reply::Weights { version, staleness }),
        (interesting_u64(), interesting_u64())
            .prop_map(|(version, staleness)| Reply::Stop { version, staleness }),
        any::<u16>().prop_map(|tag| Reply::Regroup { tag }),
    ]
}

proptest! {
    #![proptest_config(cases(2000))]

    /// Arbitrary words of any length around the header's decode or are refused, never
    /// panic; what decodes has the rest of the message as its payload, within the bound, and
    /// encodes back to the same header words.
    #[test]
    fn wire_arbitrary_messages_never_panic(
        words in prop::collection::vec(wire_word(), 0..8),
        max in 0usize..6,
    ) {
        match Push::decode(&words) {
            Ok((push, payload)) => {
                prop_assert_eq!(payload.len(), words.len() - HEADER_WORDS);
                prop_assert_eq!(wire_bits(&push.encode()), wire_bits(&words[..HEADER_WORDS]));
            }
            Err(e) => prop_assert_eq!(e, WireError::Short { words: words.len() }),
        }
        if let Ok((reply, payload)) = Reply::decode(&words, max) {
            prop_assert_eq!(payload.len(), words.len() - HEADER_WORDS);
            prop_assert!(payload.len() <= max);
            prop_assert_eq!(wire_bits(&reply.encode()), wire_bits(&words[..HEADER_WORDS]));
        }
    }

    /// Every push and reply comes back as it was sent (a staleness past the bound as the
    /// bound), its payload bit for bit.
    #[test]
    fn wire_messages_round_trip(
        clock in interesting_u64(),
        loss in wire_word(),
        sent in reply(),
        members in prop::collection::vec(any::<u32>(), 1..5),
        payload in prop::collection::vec(wire_word(), 0..5),
    ) {
        let mut m = Push { clock, loss }.encode().to_vec();
        m.extend_from_slice(&payload);
        let (push, got) = Push::decode(&m).unwrap();
        prop_assert_eq!((push.clock, push.loss.to_bits()), (clock, loss.to_bits()));
        prop_assert_eq!(wire_bits(got), wire_bits(&payload));

        let members: Vec<usize> = members.iter().map(|&r| r as usize).collect();
        let body = match sent {
            Reply::Weights { .. } => payload.clone(),
            Reply::Stop { .. } => Vec::new(),
            Reply::Regroup { .. } => encode_members(&members).unwrap(),
        };
        let mut m = sent.encode().to_vec();
        m.extend_from_slice(&body);
        let (reply, got) = Reply::decode(&m, body.len().max(1)).unwrap();
        let capped = |s: u64| s.min(MAX_STALENESS);
        let expected = match sent {
            Reply::Weights { version, staleness } => Reply::Weights { version, staleness: capped(staleness) },
            Reply::Stop { version, staleness } => Reply::Stop { version, staleness: capped(staleness) },
            regroup => regroup,
        };
        prop_assert_eq!(reply, expected);
        prop_assert_eq!(wire_bits(got), wire_bits(&body));
        if let Reply::Regroup { .. } = reply {
            prop_assert_eq!(decode_members(got), members);
        }
    }
}

// ---------------------------------------------------------------------------------------
// Mailbox messages

/// Ring capacities: the powers of two `MailboxLayout::new` makes, 0, and others.
fn ring_cap() -> impl Strategy<Value = usize> {
    prop_oneof![
        4 => (0u32..7).prop_map(|e| 1usize << e),
        1 => Just(0usize),
        1 => 1usize..40,
    ]
}

/// Counters near the u32 wrap, and anywhere.
fn counter() -> impl Strategy<Value = u32> {
    prop_oneof![Just(0u32), (u32::MAX - 70..=u32::MAX), any::<u32>()]
}

proptest! {
    #![proptest_config(cases(2000))]

    /// Arbitrary ring words and counters: `Ok` returns `to` and applies only indices below
    /// `n`, at most as many values as there are pending words.
    #[test]
    fn mailbox_decode_arbitrary_rings(
        cap in ring_cap(),
        words in prop::collection::vec(interesting_u32(), 64),
        ring_len_off in prop_oneof![4 => Just(0i64), 1 => -2i64..3],
        from in counter(), span in prop_oneof![0u32..70, any::<u32>()],
        n in prop_oneof![0usize..16, Just(usize::MAX)],
    ) {
        let layout = MailboxLayout { groups: 2, cap };
        let len = (cap as i64 + ring_len_off).clamp(0, 64) as usize;
        let ring = &words[..len];
        let to = from.wrapping_add(span);
        let mut applied = 0usize;
        let mut bad = None;
        let r = layout.decode(1, ring, from, to, n, |i, _| {
            applied += 1;
            if i >= n { bad = Some(i); }
        });
        prop_assert_eq!(bad, None);
        if let Ok(end) = r {
            prop_assert_eq!(end, to);
            prop_assert!(2 * applied <= span as usize);
        }
    }

    /// Valid messages written through the wrapping ring decode back exactly; with one word
    /// corrupted (a count, an index, a counter) decoding is `Ok` or an `Err`, never a panic.
    #[test]
    fn mailbox_valid_and_corrupted_messages(
        msgs in prop::collection::vec(prop::collection::vec((0u32..50, any::<f32>()), 0..4), 1..4),
        start in counter(),
        corrupt in prop::option::of((any::<Index>(), interesting_u32())),
        to_skew in prop_oneof![4 => Just(0i32), 1 => -3i32..4],
    ) {
        let k_max = msgs.iter().map(Vec::len).max().unwrap_or(0).max(1);
        let layout = MailboxLayout::new(2, k_max, msgs.len());
        let mut ring = vec![0u32; layout.cap];
        let mut written = start;
        let mut sent = Vec::new();
        let mut msg = Vec::new();
        for m in &msgs {
            let (idx, val): (Vec<u32>, Vec<f32>) = m.iter().copied().unzip();
            encode(&idx, &val, &mut msg);
            prop_assert_eq!(msg.len(), message_words(m.len()));
            prop_assert!(layout.room(written, start) >= msg.len());
            for (at, off, len) in layout.pieces(written, msg.len()) {
                ring[at..at + len].copy_from_slice(&msg[off..off + len]);
            }
            written = written.wrapping_add(msg.len() as u32);
            sent.extend(m.iter().map(|&(i, v)| (i as usize, v.to_bits())));
        }
        let mut got = Vec::new();
        let r = layout.decode(0, &ring, start, written, 50, |i, v: f32| got.push((i, v.to_bits())));
        prop_assert_eq!(r, Ok(written));
        prop_assert_eq!(&got, &sent);

        if let Some((at, word)) = corrupt {
            if !ring.is_empty() {
                let i = at.index(ring.len());
                ring[i] = word;
            }
        }
        let to = written.wrapping_add(to_skew as u32);
        let _ = layout.decode(0, &ring, start, to, 50, |i, _| assert!(i < 50));
    }
}

proptest! {
    #![proptest_config(cases(500))]

    /// A low-rank message's rank and payload come from a peer's memory: any rank against
    /// any payload length rebuilds the plan's values or is refused, never panics, and an
    /// accepted payload writes inside the model only.
    #[test]
    fn low_rank_payload_of_any_rank_and_length(
        rank in prop_oneof![0usize..6, any::<u32>().prop_map(|r| r as usize)],
        len_skew in prop_oneof![3 => Just(0i64), 1 => -3i64..4],
        dims in prop::collection::vec((1usize..12, 1usize..12), 1..4),
    ) {
        let mut tensors = Vec::new();
        let mut n = 0;
        for &(rows, cols) in &dims {
            tensors.push(TensorShape::new(n..n + rows * cols, &[rows, cols]));
            n += rows * cols;
            tensors.push(TensorShape::new(n..n + rows, &[rows]));
            n += rows;
        }
        let plan = LowRankLayout::new(&tensors, n, rank);
        let len = (plan.payload_len() as i64 + len_skew).max(0) as usize;
        let payload = vec![0.5f32; len];
        let mut covered = 0;
        let r = reconstruct(&plan, &payload, &mut Vec::new(), |offset, values| {
            assert!(offset + values.len() <= n);
            covered += values.len();
        });
        prop_assert_eq!(r.is_ok(), len_skew == 0);
        if r.is_ok() {
            prop_assert_eq!(covered, n, "every value rebuilt once");
        }
    }
}

// ---------------------------------------------------------------------------------------
// safetensors model files

proptest! {
    #![proptest_config(cases(1000))]

    /// A mutated model file loads or is refused; a refused one leaves the network as it was,
    /// and one that loads must be a valid safetensors file the crate itself can re-read.
    #[test]
    fn model_file_mutations_never_panic(edits in mutations(), noise in prop::collection::vec(any::<u8>(), 0..64)) {
        let source = zoo::mlp(Cpu, (1, 2, 2), &[3], 2, 1, 1);
        let mut meta = BTreeMap::new();
        meta.insert("model".to_string(), "mlp".to_string());
        let valid = to_bytes(&source, &meta).unwrap();
        for bytes in [mutate(valid, &edits), noise] {
            let mut net = zoo::mlp(Cpu, (1, 2, 2), &[3], 2, 1, 2);
            let before = net.params().to_vec();
            match from_bytes(&mut net, &meta, &bytes, Path::new("fuzz.safetensors")) {
                Ok(_) => prop_assert_eq!(net.params().len(), before.len()),
                Err(e) => {
                    prop_assert_eq!(net.params(), &before[..]);
                    prop_assert!(e.to_string().contains("fuzz.safetensors"), "{}", e);
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// checkpoint rank files

proptest! {
    #![proptest_config(cases(1000))]

    /// A mutated checkpoint rank file parses or is refused naming the file; what parses
    /// holds only f32 tensors whose lengths match their bytes.
    #[test]
    fn checkpoint_file_mutations_never_panic(edits in mutations(), noise in prop::collection::vec(any::<u8>(), 0..64)) {
        let meta = RankMeta { steps: 7, worker_clocks: vec![3, 4], ..Default::default() };
        let valid = checkpoint_bytes(&[("weights", &[1.0, 2.0, 3.0]), ("momentum", &[0.5])], &meta).unwrap();
        for bytes in [mutate(valid, &edits), noise] {
            match checkpoint_from_bytes::<RankMeta>(&bytes, Path::new("fuzz-rank.safetensors")) {
                Ok(file) => prop_assert!(file.tensors.values().all(|t| t.len() < bytes.len())),
                Err(e) => prop_assert!(e.to_string().contains("fuzz-rank.safetensors"), "{}", e),
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// checkpoint manifests

/// The minimal config the manifests' runs start from.
const MINIMAL: &str = "[data]\ndataset = \"synthetic\"\n[model]\nname = \"mlp\"\n";

/// The runs whose manifests the mutations start from, each as its run lays its `world`
/// ranks out: gssp with two static groups, gssp with `groups = "auto"` (an idle rank, per
/// group bounds, a profile), bsp with balanced batches, async-localsgd with local steps,
/// and allreduce.
fn saved_runs() -> Vec<(Config, Layout)> {
    let run = |sets: &[&str], world: usize, lay: &dyn Fn(&mut Layout)| {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        let cfg = Config::from_str_with_overrides(MINIMAL, "fuzz.toml", &sets).unwrap();
        let mut layout = Layout::from_config(&cfg, world);
        lay(&mut layout);
        (cfg, layout)
    };
    let static_gssp = [
        "sync.mode=gssp",
        "sync.gssp.groups=2",
        "sync.gssp.grouping=static",
        "sync.gssp.static_groups=[[2,3],[4,5]]",
        "sync.gssp.staleness=2",
    ];
    let auto_gssp = [
        "sync.mode=gssp",
        "sync.gssp.groups=auto",
        "sync.gssp.max_groups=3",
        "sync.gssp.staleness=auto",
    ];
    let balanced_bsp = [
        "sync.mode=bsp",
        "optim.batch_size=16",
        "sync.balance.batches=static",
        "sync.balance.static_batches=[8, 24, 16]",
    ];
    vec![
        run(&static_gssp, 6, &|l| {
            l.groups = vec![vec![2, 3], vec![4, 5]];
            l.staleness = vec![2, 2];
        }),
        run(&auto_gssp, 8, &|l| {
            l.keep_servers(2);
            l.groups = vec![vec![3, 5, 7], vec![4, 6]];
            l.staleness = vec![1, 3];
            l.profiled_s = Some(vec![0.01, 0.02, 0.01, 0.02, 0.01]);
            l.profiled_spread_s = Some(vec![0.001; 5]);
            l.profiled_worst_s = Some(vec![0.03; 5]);
            l.profile_cost_s = Some(0.4);
        }),
        run(&balanced_bsp, 4, &|l| l.batches = vec![0, 8, 24, 16]),
        run(&["sync.mode=async-localsgd"], 4, &|l| {
            l.local_steps = vec![4, 2, 1]
        }),
        run(&["sync.mode=allreduce"], 3, &|_| {}),
    ]
}

/// The manifest of checkpoint 3 of `cfg` laid out as `layout`, as JSON.
fn manifest_of(cfg: &Config, layout: &Layout) -> serde_json::Value {
    let files = (0..layout.world_size)
        .map(|r| FileEntry {
            name: format!("rank-{r}.safetensors"),
            bytes: 64,
            crc32: 0,
        })
        .collect();
    let world = layout.world_size;
    let layout = serde_json::to_value(layout).ok();
    let m = gssp::checkpoint::manifest(cfg, 3, (12.5, 0.5), world, layout, files);
    serde_json::to_value(&m).unwrap()
}

/// What `gssp train --resume` does with the manifest `bytes` before any rank trains (in
/// main.rs and runtime::setup, less MPI), on `world` ranks: open the checkpoint, read its
/// config, fit the run to the world, take up the saved layout. `Err`: what a rank prints.
fn resume_with_manifest(run: &Path, bytes: &[u8], world: usize) -> Result<Option<Layout>, String> {
    let dir = run.join("checkpoints").join("000003");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(run.join("checkpoints").join("latest"), "000003\n").unwrap();
    std::fs::write(dir.join("manifest.json"), bytes).unwrap();
    let mut resume = Resume::open(run).map_err(|e| e.to_string())?;
    let name = resume.manifest_path().display().to_string();
    let mut cfg = Config::from_str_with_overrides(&resume.manifest.config, &name, &[])
        .map_err(|e| e.to_string())?;
    resume.fit_to_world(&mut cfg, world)?;
    saved_layout(Some(&resume), &cfg, world).map_err(|e| e.to_string())
}

/// Every index the ranks take in a layout they took up is in range: each rank's role, its
/// group's server, workers and bound, its batch slice.
fn use_layout(layout: &Layout, world: usize) -> Result<(), TestCaseError> {
    prop_assert_eq!(layout.world_size, world);
    prop_assert_eq!(layout.slowdown.len(), world);
    for rank in 0..world {
        match layout.role(rank) {
            Role::Server { group } => {
                prop_assert_eq!(layout.servers[group], rank);
                prop_assert!(!layout.groups[group].is_empty());
                let _ = layout.staleness[group];
            }
            Role::Worker { group } => {
                prop_assert!(layout.groups[group].contains(&rank), "rank {}", rank);
                prop_assert!(layout.servers[group] < world);
                let _ = layout.staleness[group];
            }
            Role::Shard { group, shard } => {
                prop_assert_eq!(layout.shards[group][shard - 1], rank);
            }
            Role::Collective | Role::Idle => {}
        }
        if let Some(slice) = layout.batch_slice(rank) {
            prop_assert!(slice.end <= layout.batches.iter().sum::<usize>());
        }
    }
    let workers = layout.worker_ranks().len();
    prop_assert!(layout.local_steps.is_empty() || layout.local_steps.len() == workers);
    Ok(())
}

/// Resumes from manifest `bytes` on `world` ranks: a failure names the checkpoint; a layout
/// taken up is safe to index.
fn check_manifest(bytes: &[u8], world: usize) -> Result<(), TestCaseError> {
    let run = tempfile::tempdir().unwrap();
    let checkpoint = run.path().join("checkpoints").join("000003");
    match resume_with_manifest(run.path(), bytes, world) {
        Err(e) => prop_assert!(e.contains(&checkpoint.display().to_string()), "{}", e),
        Ok(Some(layout)) => use_layout(&layout, world)?,
        Ok(None) => {}
    }
    Ok(())
}

/// One edit of a manifest's JSON at a node (picked among all of them): set to another value,
/// removed, repeated beside itself, or emptied.
#[derive(Debug, Clone)]
enum JsonEdit {
    Set(Index, serde_json::Value),
    Remove(Index),
    Repeat(Index),
    Empty(Index),
}

/// Values a hand edit leaves: small counts and ranks, negatives, the limits, fractions,
/// other types, empty and nested lists.
fn json_value() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::json;
    prop_oneof![
        4 => (0u64..10).prop_map(|n| json!(n)),
        1 => Just(json!(-1)),
        1 => Just(json!(u64::MAX)),
        1 => Just(json!(1e300)),
        1 => Just(json!(0.5)),
        1 => Just(json!(null)),
        1 => Just(json!("gssp")),
        1 => Just(json!("allreduce")),
        1 => Just(json!([])),
        1 => Just(json!([0])),
        1 => Just(json!([[2], [3, 4]])),
        1 => Just(json!({})),
    ]
}

fn json_edits() -> impl Strategy<Value = Vec<JsonEdit>> {
    let edit = prop_oneof![
        4 => (any::<Index>(), json_value()).prop_map(|(i, v)| JsonEdit::Set(i, v)),
        2 => any::<Index>().prop_map(JsonEdit::Remove),
        2 => any::<Index>().prop_map(JsonEdit::Repeat),
        1 => any::<Index>().prop_map(JsonEdit::Empty),
    ];
    prop::collection::vec(edit, 1..4)
}

/// The JSON pointers of every node below `v` (at pointer `at`), in document order. The
/// manifests' keys hold no `~` or `/`, so they need no escaping.
fn pointers(v: &serde_json::Value, at: &str, out: &mut Vec<String>) {
    let children: Vec<(String, &serde_json::Value)> = match v {
        serde_json::Value::Object(m) => m.iter().map(|(k, x)| (k.clone(), x)).collect(),
        serde_json::Value::Array(a) => a
            .iter()
            .enumerate()
            .map(|(i, x)| (i.to_string(), x))
            .collect(),
        _ => Vec::new(),
    };
    for (key, child) in children {
        let p = format!("{at}/{key}");
        out.push(p.clone());
        pointers(child, &p, out);
    }
}

fn edit_json(mut doc: serde_json::Value, edits: &[JsonEdit]) -> serde_json::Value {
    use serde_json::Value as J;
    for edit in edits {
        let mut all = Vec::new();
        pointers(&doc, "", &mut all);
        let (JsonEdit::Set(i, _) | JsonEdit::Remove(i) | JsonEdit::Repeat(i) | JsonEdit::Empty(i)) =
            edit;
        let Some(at) = (!all.is_empty()).then(|| all[i.index(all.len())].clone()) else {
            break;
        };
        let (parent, key) = at.rsplit_once('/').unwrap();
        let parent = parent.to_string();
        match (edit, doc.pointer_mut(&parent)) {
            (JsonEdit::Set(_, v), _) => {
                if let Some(node) = doc.pointer_mut(&at) {
                    *node = v.clone();
                }
            }
            (JsonEdit::Remove(_), Some(J::Object(m))) => {
                m.remove(key);
            }
            (JsonEdit::Remove(_), Some(J::Array(a))) => {
                a.remove(key.parse::<usize>().unwrap());
            }
            (JsonEdit::Repeat(_), Some(J::Array(a))) => {
                let i = key.parse::<usize>().unwrap();
                a.insert(i, a[i].clone());
            }
            (JsonEdit::Empty(_), _) => {
                if let Some(node) = doc.pointer_mut(&at) {
                    *node = match node {
                        J::Array(_) => J::Array(Vec::new()),
                        J::Object(_) => J::Object(Default::default()),
                        J::String(_) => J::String(String::new()),
                        _ => J::from(0),
                    };
                }
            }
            _ => {}
        }
    }
    doc
}

/// Every manifest the mutations start from resumes, taking up its layout as saved: the
/// fuzzing below starts from valid input, so its edits reach every check.
#[test]
fn every_saved_run_resumes_from_its_own_manifest() {
    for (cfg, layout) in saved_runs() {
        let run = tempfile::tempdir().unwrap();
        let bytes = serde_json::to_vec_pretty(&manifest_of(&cfg, &layout)).unwrap();
        let taken = resume_with_manifest(run.path(), &bytes, layout.world_size);
        assert_eq!(taken, Ok(Some(layout.clone())), "{}", cfg.sync.mode);
    }
}

proptest! {
    #![proptest_config(cases(1000))]

    /// A hand-edited manifest (values, lists and fields changed, removed or repeated) resumes
    /// on its rank count or another, or is refused naming the checkpoint; what is taken up
    /// is safe to index on every rank.
    #[test]
    fn manifest_edits_never_panic(
        run in 0usize..5,
        edits in json_edits(),
        world in prop_oneof![4 => Just(None), 1 => (1usize..10).prop_map(Some)],
    ) {
        let (cfg, layout) = saved_runs().swap_remove(run);
        let doc = edit_json(manifest_of(&cfg, &layout), &edits);
        let bytes = serde_json::to_vec(&doc).unwrap();
        check_manifest(&bytes, world.unwrap_or(layout.world_size))?;
    }

    /// Mutated manifest bytes, and noise: refused naming the checkpoint, never a panic.
    #[test]
    fn manifest_byte_mutations_never_panic(
        run in 0usize..5,
        edits in mutations(),
        noise in prop::collection::vec(any::<u8>(), 0..64),
    ) {
        let (cfg, layout) = saved_runs().swap_remove(run);
        let valid = serde_json::to_vec_pretty(&manifest_of(&cfg, &layout)).unwrap();
        for bytes in [mutate(valid, &edits), noise] {
            check_manifest(&bytes, layout.world_size)?;
        }
    }
}
