//! Word-level tokenizer and vocabulary for the Multi30k translation task.
//!
//! # Tokenizer rules
//! A hand-written rule set instead of spaCy models (the usual choice in PyTorch tutorials):
//! every rank must tokenize identically with no Python or model files around, and
//! Multi30k's captions are short and clean enough that a few rules cover them.
//!
//! 1. The line is lowercased (Unicode `to_lowercase`: `Ä` becomes `ä`, `ß` stays).
//! 2. Whitespace (Unicode White_Space, including tab and the no-break space U+00A0 that
//!    occurs in the German files) separates tokens and is dropped.
//! 3. A *word* is a maximal run of alphanumeric characters (Unicode letters and digits),
//!    where two runs are joined into one word by
//!    - a hyphen between two alphanumerics: `t-shirt`, `middle-aged`,
//!      `oklahoma-sooners-football-spieler`, `3-jährige`;
//!    - a `.`, `,` or `:` between two ASCII digits: `2.52`, `10,000`, `11:27`.
//! 4. An apostrophe (`'` or `’`) between a letter and a letter starts a *clitic* token that
//!    runs to the end of the word: `man's` gives `man` `'s`, `doesn't` gives `doesn` `'t`,
//!    `geht's` gives `geht` `'s`. Clitics are split off because `'s` is shared by every
//!    possessive; keeping `man's` whole would put each possessive in the vocabulary apart.
//! 5. Every other character is a token on its own: `.`, `,`, `"`, `„`, `“`, `–`, `(`, a
//!    stray `-` or `'`. A run such as `...` gives three `.` tokens.
//!
//! [`detokenize`] inverts rules 3-4 (words are joined with spaces, clitics are glued back),
//! which is all that sacreBLEU's 13a tokenizer needs: it splits punctuation itself, so the
//! spacing around punctuation does not change a BLEU score.
//!
//! # Vocabulary
//! [`Vocab::build`] keeps the tokens that occur at least `min_freq` times, after four special
//! tokens with fixed ids ([`PAD_ID`] = 0, [`SOS_ID`], [`EOS_ID`], [`UNK_ID`]), ordered by
//! frequency (descending) then by the token's UTF-8 bytes, so the ids are a pure function of
//! the training text. With min frequency 2 on the Multi30k training split (29,000 pairs) the
//! German vocabulary has 7,859 entries and the English one 5,927, specials included (spaCy's
//! tokenizers give about 7,853 and 5,893 in the torchtext recipe).
//! A vocabulary is saved as plain text, one token per line, line `i` (0-based) holding id `i`.

use std::collections::HashMap;
use std::path::Path;

use super::DataError;

/// Padding: fills a batch column after its sentence ends. Id 0 so a zeroed buffer is padding.
pub const PAD: &str = "<pad>";
/// Start of sentence: the decoder's first input.
pub const SOS: &str = "<sos>";
/// End of sentence: the decoder's last target; decoding stops when it is produced.
pub const EOS: &str = "<eos>";
/// Any token not in the vocabulary.
pub const UNK: &str = "<unk>";
pub const PAD_ID: u32 = 0;
pub const SOS_ID: u32 = 1;
pub const EOS_ID: u32 = 2;
pub const UNK_ID: u32 = 3;
/// The special tokens in id order; every vocabulary starts with them.
pub const SPECIALS: [&str; 4] = [PAD, SOS, EOS, UNK];

fn is_apostrophe(c: char) -> bool {
    c == '\'' || c == '\u{2019}'
}

/// Whether `mid` glues the alphanumerics `prev` and `next` into one word (rule 3).
fn joins(prev: char, mid: char, next: char) -> bool {
    match mid {
        '-' => prev.is_alphanumeric() && next.is_alphanumeric(),
        '.' | ',' | ':' => prev.is_ascii_digit() && next.is_ascii_digit(),
        _ => false,
    }
}

/// End (exclusive) of the word that starts at `start` (rule 3).
fn word_end(chars: &[char], start: usize) -> usize {
    let mut i = start;
    loop {
        match chars.get(i) {
            Some(c) if c.is_alphanumeric() => i += 1,
            Some(&mid) if i > start => match chars.get(i + 1) {
                Some(&next) if joins(chars[i - 1], mid, next) => i += 2,
                _ => return i,
            },
            _ => return i,
        }
    }
}

/// Splits a sentence into lowercase tokens by the rules in the module doc.
pub fn tokenize(line: &str) -> Vec<String> {
    let chars: Vec<char> = line.to_lowercase().chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let end = if c.is_whitespace() {
            i += 1;
            continue;
        } else if c.is_alphanumeric() {
            word_end(&chars, i)
        } else if is_apostrophe(c)
            && i > 0
            && chars[i - 1].is_alphabetic()
            && chars.get(i + 1).is_some_and(|n| n.is_alphabetic())
        {
            word_end(&chars, i + 1)
        } else {
            i + 1
        };
        tokens.push(chars[i..end].iter().collect());
        i = end;
    }
    tokens
}

/// Joins tokens into a sentence for BLEU: single spaces, clitics (`'s`) glued to the word
/// before them, so that `tokenize` then `detokenize` gives back the lowercased words.
pub fn detokenize<S: AsRef<str>>(tokens: &[S]) -> String {
    let mut out = String::new();
    for t in tokens {
        let t = t.as_ref();
        let mut cs = t.chars();
        let clitic = cs.next().is_some_and(is_apostrophe) && cs.next().is_some();
        if !out.is_empty() && !clitic {
            out.push(' ');
        }
        out.push_str(t);
    }
    out
}

/// A token <-> id mapping with the four specials first.
#[derive(Debug, Clone, PartialEq)]
pub struct Vocab {
    tokens: Vec<String>,
    ids: HashMap<String, u32>,
}

impl Vocab {
    fn from_tokens(tokens: Vec<String>) -> Vocab {
        let ids = tokens
            .iter()
            .enumerate()
            .map(|(i, t)| (t.clone(), i as u32))
            .collect();
        Vocab { tokens, ids }
    }

    /// The specials, then every token of `sentences` seen at least `min_freq` times, by
    /// frequency (descending) then bytes (ascending). A token spelled like a special is not
    /// added twice (the tokenizer cannot produce one: `<` is punctuation).
    pub fn build<'a, I, S>(sentences: I, min_freq: usize) -> Vocab
    where
        I: IntoIterator<Item = &'a [S]>,
        S: AsRef<str> + 'a,
    {
        let mut counts: HashMap<&str, usize> = HashMap::new();
        for sentence in sentences {
            for t in sentence {
                *counts.entry(t.as_ref()).or_default() += 1;
            }
        }
        let mut kept: Vec<(&str, usize)> = counts
            .into_iter()
            .filter(|&(t, c)| c >= min_freq.max(1) && !SPECIALS.contains(&t))
            .collect();
        kept.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        let tokens = SPECIALS
            .iter()
            .copied()
            .chain(kept.into_iter().map(|(t, _)| t))
            .map(str::to_owned)
            .collect();
        Vocab::from_tokens(tokens)
    }

    /// Entries, specials included.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Never true for a built or loaded vocabulary (it holds the specials).
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The id of `token`, [`UNK_ID`] if it is not in the vocabulary.
    pub fn id(&self, token: &str) -> u32 {
        self.ids.get(token).copied().unwrap_or(UNK_ID)
    }

    /// The token of `id`, `None` if `id >= len()`.
    pub fn token(&self, id: u32) -> Option<&str> {
        self.tokens.get(id as usize).map(String::as_str)
    }

    /// All tokens in id order.
    pub fn tokens(&self) -> &[String] {
        &self.tokens
    }

    /// Ids of `tokens`, unknown ones as [`UNK_ID`]; no `<sos>` / `<eos>` added.
    pub fn encode<S: AsRef<str>>(&self, tokens: &[S]) -> Vec<u32> {
        tokens.iter().map(|t| self.id(t.as_ref())).collect()
    }

    /// Tokens of `ids` up to the first `<eos>` (excluded), skipping `<sos>` and `<pad>`: what
    /// a decoder's output means as a sentence. Ids out of range read as `<unk>`.
    pub fn decode(&self, ids: &[u32]) -> Vec<&str> {
        ids.iter()
            .take_while(|&&id| id != EOS_ID)
            .filter(|&&id| id != SOS_ID && id != PAD_ID)
            .map(|&id| self.token(id).unwrap_or(UNK))
            .collect()
    }

    /// Writes one token per line (line `i` = id `i`), newline-terminated.
    pub fn save(&self, path: &Path) -> Result<(), DataError> {
        let mut text = String::with_capacity(self.tokens.iter().map(|t| t.len() + 1).sum());
        for t in &self.tokens {
            text.push_str(t);
            text.push('\n');
        }
        std::fs::write(path, text).map_err(|cause| DataError::Io {
            path: path.to_path_buf(),
            cause,
        })
    }

    /// Reads what [`Vocab::save`] wrote. Fails, naming the file and line, on invalid UTF-8,
    /// missing or misplaced specials, an empty or whitespace-holding token, or a duplicate.
    pub fn load(path: &Path) -> Result<Vocab, DataError> {
        let lines = super::lines::read_lines(path)?;
        let bad = |line: usize, problem: String| DataError::BadLine {
            path: path.to_path_buf(),
            line,
            problem,
        };
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for (i, t) in lines.iter().enumerate() {
            if let Some(&want) = SPECIALS.get(i) {
                if t != want {
                    return Err(bad(
                        i + 1,
                        format!("expected the special {want}, got {t:?}"),
                    ));
                }
            }
            if t.is_empty() || t.chars().any(char::is_whitespace) {
                return Err(bad(
                    i + 1,
                    format!("token {t:?} is empty or holds whitespace"),
                ));
            }
            if let Some(first) = seen.insert(t, i + 1) {
                return Err(bad(i + 1, format!("token {t:?} repeats line {first}")));
            }
        }
        if lines.len() < SPECIALS.len() {
            return Err(bad(
                lines.len() + 1,
                format!("the file ends before the specials {SPECIALS:?} are all listed"),
            ));
        }
        Ok(Vocab::from_tokens(lines))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tok(line: &str) -> Vec<String> {
        tokenize(line)
    }

    /// Real lines of Multi30k (train.en line 1, train.de line 1, train.de line 5169,
    /// test2016.en line 2), copied verbatim.
    #[test]
    fn tokenizes_real_lines() {
        assert_eq!(
            tok("Two young, White males are outside near many bushes."),
            [
                "two", "young", ",", "white", "males", "are", "outside", "near", "many", "bushes",
                "."
            ]
        );
        assert_eq!(
            tok("Zwei junge weiße Männer sind im Freien in der Nähe vieler Büsche."),
            [
                "zwei", "junge", "weiße", "männer", "sind", "im", "freien", "in", "der", "nähe",
                "vieler", "büsche", "."
            ]
        );
        // The space before "28" is a no-break space (U+00A0) in the file.
        assert_eq!(
            tok("Ein Oklahoma-Sooners-Football-Spieler trägt sein Trikot mit der Nummer\u{a0}28."),
            [
                "ein",
                "oklahoma-sooners-football-spieler",
                "trägt",
                "sein",
                "trikot",
                "mit",
                "der",
                "nummer",
                "28",
                "."
            ]
        );
        assert_eq!(
            tok("A Boston Terrier is running on lush green grass in front of a white fence."),
            [
                "a", "boston", "terrier", "is", "running", "on", "lush", "green", "grass", "in",
                "front", "of", "a", "white", "fence", "."
            ]
        );
    }

    #[test]
    fn clitics_numbers_hyphens_and_punctuation() {
        assert_eq!(tok("A man's T-shirt"), ["a", "man", "'s", "t-shirt"]);
        assert_eq!(tok("It doesn’t"), ["it", "doesn", "’t"]);
        assert_eq!(
            tok("'Hi' rock 'n' roll"),
            ["'", "hi", "'", "rock", "'", "n", "'", "roll"]
        );
        assert_eq!(
            tok("2.52 m, 10,000 at 11:27, 3-Jährige"),
            ["2.52", "m", ",", "10,000", "at", "11:27", ",", "3-jährige"]
        );
        assert_eq!(tok("end. 2."), ["end", ".", "2", "."]);
        assert_eq!(tok("a - b -c d-"), ["a", "-", "b", "-", "c", "d", "-"]);
        assert_eq!(
            tok("„Hallo“ (ja)... – \"x\"\t!"),
            ["„", "hallo", "“", "(", "ja", ")", ".", ".", ".", "–", "\"", "x", "\"", "!"]
        );
        assert!(tok(" \t\u{a0}").is_empty());
    }

    #[test]
    fn detokenize_glues_clitics_only() {
        let t = tok("A man's dog, doesn't bark.");
        assert_eq!(detokenize(&t), "a man's dog , doesn't bark .");
        assert_eq!(detokenize(&["'", "x", "'"]), "' x '");
        assert_eq!(detokenize::<&str>(&[]), "");
    }

    fn sentences(lines: &[&str]) -> Vec<Vec<String>> {
        lines.iter().map(|l| tokenize(l)).collect()
    }

    #[test]
    fn vocab_order_ids_and_round_trip() {
        let s = sentences(&["b a c a", "a b d", "c"]);
        let v = Vocab::build(s.iter().map(Vec::as_slice), 2);
        // a:3, b:2, c:2 (b before c by bytes), d:1 dropped.
        assert_eq!(
            v.tokens(),
            ["<pad>", "<sos>", "<eos>", "<unk>", "a", "b", "c"]
        );
        assert_eq!((v.id("<pad>"), v.id("<sos>"), v.id("<eos>")), (0, 1, 2));
        assert_eq!((v.id("a"), v.id("d"), v.id("<unk>")), (4, UNK_ID, UNK_ID));
        assert_eq!(v.encode(&["c", "zz"]), [6, UNK_ID]);
        assert_eq!(
            v.decode(&[SOS_ID, 4, 99, 5, EOS_ID, 6]),
            ["a", "<unk>", "b"]
        );
        assert_eq!(v.decode(&[4, PAD_ID]), ["a"]);
        let all = Vocab::build(s.iter().map(Vec::as_slice), 1);
        assert_eq!(all.len(), 8);

        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("vocab.en.txt");
        v.save(&p).unwrap();
        assert_eq!(
            std::fs::read_to_string(&p).unwrap(),
            "<pad>\n<sos>\n<eos>\n<unk>\na\nb\nc\n"
        );
        assert_eq!(Vocab::load(&p).unwrap(), v);
    }

    #[test]
    fn vocab_load_names_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("v.txt");
        let cases: [(&[u8], &str); 6] = [
            (
                b"<pad>\n<sos>\n<unk>\n<eos>\n",
                "line 3: expected the special <eos>",
            ),
            (
                b"<pad>\n<sos>\n<eos>\n<unk>\na\nb\na\n",
                "line 7: token \"a\" repeats line 5",
            ),
            (
                b"<pad>\n<sos>\n<eos>\n<unk>\na b\n",
                "line 5: token \"a b\" is empty",
            ),
            (
                b"<pad>\n<sos>\n",
                "line 3: the file ends before the specials",
            ),
            (
                b"<pad>\n<sos>\n<eos>\n<unk>\n\xff\n",
                "line 5 is not valid UTF-8",
            ),
            (
                b"<pad>\n<sos>\n<eos>\n<unk>\n\nx\n",
                "line 5: the line is empty",
            ),
        ];
        for (bytes, want) in cases {
            std::fs::write(&p, bytes).unwrap();
            let e = Vocab::load(&p).unwrap_err().to_string();
            assert!(e.contains("v.txt") && e.contains(want), "{e}");
        }
        let e = Vocab::load(&dir.path().join("none.txt"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("none.txt: cannot read"), "{e}");
    }
}
