//! Text files of one sentence a line, as the translation corpora store them.
//!
//! Rules, checked so that damaged input fails loudly and says where: the file may be
//! gzip-compressed (detected by content); a trailing `\r` is dropped (CRLF files); trailing
//! empty lines at the end of the file are ignored; any other empty line is an error, and so is
//! invalid UTF-8. Each error names the file and the 1-based line.

use std::path::{Path, PathBuf};

use super::idx::read_maybe_gzip;
use super::DataError;

/// Decodes `bytes` (the content of `path`) into lines by the rules in the module doc.
pub fn split_lines(path: &Path, bytes: &[u8]) -> Result<Vec<String>, DataError> {
    let mut lines = Vec::new();
    for (i, raw) in bytes.split(|&b| b == b'\n').enumerate() {
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        let line = std::str::from_utf8(raw).map_err(|_| DataError::BadUtf8 {
            path: path.to_path_buf(),
            line: i + 1,
        })?;
        lines.push(line.to_owned());
    }
    while lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop();
    }
    if let Some(i) = lines.iter().position(|l| l.is_empty()) {
        return Err(DataError::BadLine {
            path: path.to_path_buf(),
            line: i + 1,
            problem: "the line is empty (every line must hold one sentence)".into(),
        });
    }
    Ok(lines)
}

/// The largest text file read (Multi30k's largest split is under 2 MB): a bound, so a
/// corrupt or hostile gzip file cannot fill memory.
pub const MAX_TEXT_BYTES: u64 = 1 << 30;

/// Reads a text file (gzip or not) into lines by the rules in the module doc.
pub fn read_lines(path: &Path) -> Result<Vec<String>, DataError> {
    split_lines(
        path,
        &read_maybe_gzip(path, MAX_TEXT_BYTES, "a text file may hold")?,
    )
}

/// `dir/name`, or `dir/name.gz` when only that exists.
pub fn find(dir: &Path, name: &str) -> Result<PathBuf, DataError> {
    let plain = dir.join(name);
    let gz = dir.join(format!("{name}.gz"));
    if plain.is_file() {
        Ok(plain)
    } else if gz.is_file() {
        Ok(gz)
    } else {
        Err(DataError::Missing {
            what: format!("{name} (plain or gzip-compressed)"),
            looked_for: vec![plain, gz],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_rules() {
        let p = Path::new("x.en");
        let ok = split_lines(p, b"a b\r\nc\n\n\n").unwrap();
        assert_eq!(ok, ["a b", "c"]);
        assert_eq!(split_lines(p, b"a\nb").unwrap(), ["a", "b"]);
        assert!(split_lines(p, b"").unwrap().is_empty());
        let e = split_lines(p, b"a\n\nb\n").unwrap_err().to_string();
        assert_eq!(
            e,
            "x.en: line 2: the line is empty (every line must hold one sentence)"
        );
        let e = split_lines(p, b"a\nb\nc\xc3\n").unwrap_err().to_string();
        assert_eq!(e, "x.en: line 3 is not valid UTF-8");
    }
}
