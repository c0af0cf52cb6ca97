//! Multi30k German-English (WMT16 multimodal task 1) as torchtext distributes it: a folder
//! with `train`, `val` and `test2016`, each a `.de` and a `.en` file of UTF-8 text, one
//! sentence a line, line `i` of one language translating line `i` of the other. A file may
//! also be gzip-compressed under the same name or with `.gz` appended.
//!
//! Lines are read by [`read_lines`]'s rules (the official `train` and `val` files end with an
//! empty line, which is ignored); the two languages' files holding a different number of
//! lines is an error naming both files and the first line without a counterpart, so a
//! damaged download fails loudly instead of silently shifting every later pair.
//!
//! Sizes of the official release: 29,000 training pairs, 1,014 validation, 1,000 test2016.

use std::path::Path;

use super::lines::{find, read_lines};
use super::text::{tokenize, Vocab, EOS_ID, SOS_ID};
use super::DataError;

/// Minimum training-split frequency of a token to get its own vocabulary entry.
pub const MIN_FREQ: usize = 2;
/// File name of the saved German vocabulary in a run directory.
pub const VOCAB_DE_FILE: &str = "vocab.de.txt";
/// File name of the saved English vocabulary in a run directory.
pub const VOCAB_EN_FILE: &str = "vocab.en.txt";

/// The three splits of Multi30k task 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    Train,
    Val,
    Test2016,
}

impl Split {
    /// The file stem: `train`, `val`, `test2016`.
    pub fn stem(self) -> &'static str {
        match self {
            Split::Train => "train",
            Split::Val => "val",
            Split::Test2016 => "test2016",
        }
    }
}

/// One split's raw sentences: `de[i]` and `en[i]` are translations of each other.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Parallel {
    pub de: Vec<String>,
    pub en: Vec<String>,
}

impl Parallel {
    /// Number of sentence pairs.
    pub fn len(&self) -> usize {
        self.de.len()
    }

    pub fn is_empty(&self) -> bool {
        self.de.is_empty()
    }
}

/// Loads one split's `.de` and `.en` files from `dir` and checks they pair up line by line.
pub fn load_split(dir: &Path, split: Split) -> Result<Parallel, DataError> {
    let de_path = find(dir, &format!("{}.de", split.stem()))?;
    let en_path = find(dir, &format!("{}.en", split.stem()))?;
    let de = read_lines(&de_path)?;
    let en = read_lines(&en_path)?;
    if de.len() != en.len() {
        // Name the first line that has no counterpart, in the longer file.
        let (long, short) = if de.len() > en.len() {
            ((de_path, de.len()), (en_path, en.len()))
        } else {
            ((en_path, en.len()), (de_path, de.len()))
        };
        return Err(DataError::LineCountMismatch {
            long_path: long.0,
            long_lines: long.1,
            short_path: short.0,
            short_lines: short.1,
        });
    }
    Ok(Parallel { de, en })
}

/// The three splits of Multi30k.
#[derive(Debug, Clone, PartialEq)]
pub struct Multi30k {
    pub train: Parallel,
    pub val: Parallel,
    pub test: Parallel,
}

/// Loads train, val and test2016 from `dir`.
pub fn load_multi30k(dir: &Path) -> Result<Multi30k, DataError> {
    Ok(Multi30k {
        train: load_split(dir, Split::Train)?,
        val: load_split(dir, Split::Val)?,
        test: load_split(dir, Split::Test2016)?,
    })
}

/// Every sentence of `lines`, tokenized.
pub fn tokenize_all(lines: &[String]) -> Vec<Vec<String>> {
    lines.iter().map(|l| tokenize(l)).collect()
}

/// The German and English vocabularies of a training split (min frequency [`MIN_FREQ`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Vocabs {
    pub de: Vocab,
    pub en: Vocab,
}

impl Vocabs {
    /// Builds both vocabularies from the training split only, so that validation and test
    /// words unseen in training map to `<unk>` as they would for a deployed model.
    pub fn build(train: &Parallel) -> Vocabs {
        let vocab = |lines: &[String]| {
            let toks = tokenize_all(lines);
            Vocab::build(toks.iter().map(Vec::as_slice), MIN_FREQ)
        };
        Vocabs {
            de: vocab(&train.de),
            en: vocab(&train.en),
        }
    }

    /// Writes [`VOCAB_DE_FILE`] and [`VOCAB_EN_FILE`] into `dir` (a run directory).
    pub fn save(&self, dir: &Path) -> Result<(), DataError> {
        self.de.save(&dir.join(VOCAB_DE_FILE))?;
        self.en.save(&dir.join(VOCAB_EN_FILE))
    }

    /// Reads what [`Vocabs::save`] wrote into `dir`.
    pub fn load(dir: &Path) -> Result<Vocabs, DataError> {
        Ok(Vocabs {
            de: Vocab::load(&dir.join(VOCAB_DE_FILE))?,
            en: Vocab::load(&dir.join(VOCAB_EN_FILE))?,
        })
    }
}

/// Translation direction: which language is the source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// German to English, the usual Multi30k task.
    DeEn,
    EnDe,
}

/// A split as id sequences, each wrapped as `<sos> w1 .. wn <eos>` on both sides: the target
/// needs both (decoder input starts with `<sos>`, the last label is `<eos>`), and the source
/// gets them too, as in the common PyTorch Multi30k recipe, so the encoder sees where the
/// sentence starts and ends.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct EncodedPairs {
    pub src: Vec<Vec<u32>>,
    pub tgt: Vec<Vec<u32>>,
}

impl EncodedPairs {
    /// Tokenizes and encodes `split` in direction `dir` with the vocabularies `vocabs`.
    pub fn encode(split: &Parallel, vocabs: &Vocabs, dir: Direction) -> EncodedPairs {
        let wrap = |vocab: &Vocab, lines: &[String]| -> Vec<Vec<u32>> {
            lines
                .iter()
                .map(|l| {
                    let toks = tokenize(l);
                    let mut ids = Vec::with_capacity(toks.len() + 2);
                    ids.push(SOS_ID);
                    ids.extend(toks.iter().map(|t| vocab.id(t)));
                    ids.push(EOS_ID);
                    ids
                })
                .collect()
        };
        let de = wrap(&vocabs.de, &split.de);
        let en = wrap(&vocabs.en, &split.en);
        let (src, tgt) = match dir {
            Direction::DeEn => (de, en),
            Direction::EnDe => (en, de),
        };
        EncodedPairs { src, tgt }
    }

    /// Number of pairs.
    pub fn len(&self) -> usize {
        self.src.len()
    }

    pub fn is_empty(&self) -> bool {
        self.src.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::idx::tests::gzip;
    use crate::data::text::UNK_ID;

    fn write(dir: &Path, name: &str, bytes: &[u8]) {
        std::fs::write(dir.join(name), bytes).unwrap();
    }

    #[test]
    fn load_split_checks_pairing_and_names_files() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        write(d, "train.de", "Ein Hund.\nZwei Männer.\n\n".as_bytes());
        write(d, "train.en", &gzip(b"A dog.\nTwo men.\n"));
        let p = load_split(d, Split::Train).unwrap();
        assert_eq!(p.de, ["Ein Hund.", "Zwei Männer."]);
        assert_eq!(p.en, ["A dog.", "Two men."]);
        assert_eq!(p.len(), 2);

        write(d, "val.de", b"a\nb\nc\n");
        write(d, "val.en.gz", &gzip(b"a\nb\n"));
        let e = load_split(d, Split::Val).unwrap_err().to_string();
        assert!(e.contains("val.de") && e.contains("val.en.gz"), "{e}");
        assert!(e.contains("line 3 has no counterpart"), "{e}");

        let e = load_split(d, Split::Test2016).unwrap_err().to_string();
        assert!(e.contains("test2016.de") && e.contains("not found"), "{e}");

        write(d, "test2016.de", b"a\n\xff\n");
        write(d, "test2016.en", b"a\nb\n");
        let e = load_split(d, Split::Test2016).unwrap_err().to_string();
        assert!(e.ends_with("test2016.de: line 2 is not valid UTF-8"), "{e}");
    }

    #[test]
    fn encode_wraps_and_maps_unknowns() {
        let train = Parallel {
            de: vec!["ein hund".into(), "ein Hund.".into()],
            en: vec!["a dog".into(), "a cat".into()],
        };
        let v = Vocabs::build(&train);
        assert_eq!(v.de.tokens()[4..], ["ein", "hund"]);
        assert_eq!(v.en.tokens()[4..], ["a"]);
        let e = EncodedPairs::encode(&train, &v, Direction::DeEn);
        assert_eq!(e.src[1], [SOS_ID, 4, 5, UNK_ID, EOS_ID]);
        assert_eq!(e.tgt[0], [SOS_ID, 4, UNK_ID, EOS_ID]);
        let r = EncodedPairs::encode(&train, &v, Direction::EnDe);
        assert_eq!((r.src.clone(), r.tgt.clone()), (e.tgt, e.src));

        let tmp = tempfile::tempdir().unwrap();
        v.save(tmp.path()).unwrap();
        assert!(tmp.path().join(VOCAB_DE_FILE).is_file());
        assert_eq!(Vocabs::load(tmp.path()).unwrap(), v);
    }
}
