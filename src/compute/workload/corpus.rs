//! The data of a run, images or sentence pairs, loaded the same way on every rank.

use std::path::Path;

use crate::config::{DataConfig, DatasetKind};
use crate::data::multi30k::{load_multi30k, Direction, EncodedPairs, Vocabs};
use crate::data::{DataError, Dataset};

/// What a run trains and evaluates on.
pub enum Corpus {
    /// An image classification set: training images and the test set.
    Images { train: Dataset, test: Dataset },
    /// Translation pairs (Multi30k German to English).
    Text(TextCorpus),
}

/// Multi30k encoded with vocabularies built from its training split.
pub struct TextCorpus {
    pub vocabs: Vocabs,
    pub train: EncodedPairs,
    pub val: EncodedPairs,
    pub test: EncodedPairs,
    /// test2016's English sentences as they are in the file: BLEU's references.
    pub test_refs: Vec<String>,
}

impl TextCorpus {
    /// Tokens (with `<sos>`/`<eos>`) of the longest source and target sentence of every
    /// split: the model's workspace is sized to them.
    pub fn longest(&self) -> (usize, usize) {
        let long = |seqs: &[Vec<u32>]| seqs.iter().map(Vec::len).max().unwrap_or(0);
        let sets = [&self.train, &self.val, &self.test];
        (
            sets.iter().map(|p| long(&p.src)).max().unwrap_or(0),
            sets.iter().map(|p| long(&p.tgt)).max().unwrap_or(0),
        )
    }
}

impl Corpus {
    /// Loads the configured dataset; `data.train_limit` and `data.test_limit` (0 = all)
    /// cut the training set and the evaluation sets (val and test2016 for text). `seed`
    /// only matters for the synthetic set.
    pub fn load(cfg: &DataConfig, seed: u64) -> Result<Corpus, DataError> {
        if cfg.dataset != DatasetKind::Multi30k {
            let (train, test) = crate::data::load(cfg, seed)?;
            return Ok(Corpus::Images { train, test });
        }
        cfg.validate()?;
        let mut raw = load_multi30k(Path::new(&cfg.resolved_dir()))?;
        // The vocabulary comes from the whole training split, whatever the limits, so
        // that a short test run uses the same ids as a full one.
        let vocabs = Vocabs::build(&raw.train);
        let cut = |p: &mut crate::data::multi30k::Parallel, limit: usize| {
            if limit > 0 {
                p.de.truncate(limit);
                p.en.truncate(limit);
            }
        };
        cut(&mut raw.train, cfg.train_limit);
        cut(&mut raw.val, cfg.test_limit);
        cut(&mut raw.test, cfg.test_limit);
        let encode = |p| EncodedPairs::encode(p, &vocabs, Direction::DeEn);
        let text = TextCorpus {
            train: encode(&raw.train),
            val: encode(&raw.val),
            test: encode(&raw.test),
            test_refs: raw.test.en,
            vocabs,
        };
        Ok(Corpus::Text(text))
    }

    /// What evaluating a saved model needs: for images the test set alone (CIFAR-10's
    /// training images are 150 MB), standing in for the training set too, which only
    /// gives the model its input shape; for text the whole corpus (the vocabularies come
    /// from the training split).
    pub fn load_for_eval(cfg: &DataConfig, seed: u64) -> Result<Corpus, DataError> {
        if cfg.dataset == DatasetKind::Multi30k {
            return Corpus::load(cfg, seed);
        }
        let test = crate::data::load_test(cfg, seed)?;
        Ok(Corpus::Images {
            train: test.clone(),
            test,
        })
    }

    /// Held-out samples the evaluation scores (test images, or test2016 pairs).
    pub fn test_len(&self) -> usize {
        match self {
            Corpus::Images { test, .. } => test.len(),
            Corpus::Text(t) => t.test.len(),
        }
    }

    /// Training samples (images or sentence pairs).
    pub fn train_len(&self) -> usize {
        match self {
            Corpus::Images { train, .. } => train.len(),
            Corpus::Text(t) => t.train.len(),
        }
    }

    /// One line for the log: sizes and shapes.
    pub fn describe(&self) -> String {
        match self {
            Corpus::Images { train, test } => format!(
                "{} train / {} test images of {}x{}x{}",
                train.len(),
                test.len(),
                train.channels,
                train.height,
                train.width
            ),
            Corpus::Text(t) => format!(
                "{} train / {} val / {} test2016 sentence pairs, de->en, vocabularies {} de / {} en",
                t.train.len(),
                t.val.len(),
                t.test.len(),
                t.vocabs.de.len(),
                t.vocabs.en.len()
            ),
        }
    }

    /// Writes what a reader of the run needs to interpret it (the vocabularies of a text
    /// run) into the run directory.
    pub fn save_to(&self, run_dir: &Path) -> Result<(), DataError> {
        match self {
            Corpus::Images { .. } => Ok(()),
            Corpus::Text(t) => t.vocabs.save(run_dir),
        }
    }
}
