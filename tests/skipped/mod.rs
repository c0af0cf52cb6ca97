//! Tests that cannot run here (no GPU, no tmpfs) return early; `cargo test` hides what they
//! print, so each also appends a line to the file `GSSP_SKIPPED_LOG` names, and
//! scripts/test.sh lists those lines at the end of its run.

use std::io::Write;

/// Marks test `test` as skipped for `reason`: on stderr, and in `GSSP_SKIPPED_LOG`.
pub fn skip(test: &str, reason: &str) {
    eprintln!("{test}: skipped: {reason}");
    let Some(path) = std::env::var_os("GSSP_SKIPPED_LOG") else {
        return;
    };
    let line = format!("{test}: {}\n", reason.replace('\n', " "));
    let appended = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut f| f.write_all(line.as_bytes()));
    if let Err(e) = appended {
        eprintln!(
            "{test}: cannot note the skip in {}: {e}",
            path.to_string_lossy()
        );
    }
}
