//! The entry points of a CUDA C source: the names of its `extern "C" __global__ void`
//! functions, in source order.
//!
//! build.rs generates the backend's kernel lists with it from kernels/*.cu, so a kernel's
//! name is written once, in its `.cu` file; the crate's tests check it on small sources.
//! It reads text only: building needs no CUDA toolkit.

/// The `extern "C" __global__ void NAME(` names of `source` in order, comments skipped
/// (an optional `__launch_bounds__(...)` may precede the name); or, naming the line, why
/// a `__global__` function does not have that form. `extern "C"` is required: NVRTC
/// mangles the names of other kernels, and the backend loads each by its plain name.
pub fn entry_points(source: &str) -> Result<Vec<String>, String> {
    let tokens = tokens(source);
    let text = |i: usize| tokens.get(i).map_or("", |t| t.1);
    let mut names = Vec::new();
    for (i, &(offset, token)) in tokens.iter().enumerate() {
        if token != "__global__" {
            continue;
        }
        let line = source[..offset].matches('\n').count() + 1;
        let malformed = || {
            format!("line {line}: a kernel is declared `extern \"C\" __global__ void NAME(...)`")
        };
        let declared = i >= 2 && text(i - 2) == "extern" && text(i - 1) == "\"C\"";
        if !declared || text(i + 1) != "void" {
            return Err(malformed());
        }
        let mut at = i + 2;
        if text(at) == "__launch_bounds__" {
            at = after_parentheses(&tokens, at + 1).ok_or_else(malformed)?;
        }
        if !is_identifier(text(at)) || text(at + 1) != "(" {
            return Err(malformed());
        }
        names.push(text(at).to_string());
    }
    Ok(names)
}

/// The tokens of C source with their byte offsets: identifiers and numbers, string
/// literals, and single punctuation characters; comments and whitespace left out.
fn tokens(source: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(c) = source[i..].chars().next() {
        let rest = &source[i..];
        let start = i;
        if c.is_whitespace() {
            i += c.len_utf8();
            continue;
        } else if rest.starts_with("//") {
            i += rest.find('\n').unwrap_or(rest.len());
            continue;
        } else if rest.starts_with("/*") {
            i += rest.find("*/").map_or(rest.len(), |end| end + 2);
            continue;
        } else if c == '_' || c.is_ascii_alphanumeric() {
            i += rest
                .find(|c: char| c != '_' && !c.is_ascii_alphanumeric())
                .unwrap_or(rest.len());
        } else if c == '"' {
            i += string_literal_len(rest);
        } else {
            i += c.len_utf8();
        }
        out.push((start, &source[start..i]));
    }
    out
}

/// The length in bytes of the string literal `rest` starts with, its quotes included
/// (to the end of `rest` where it is not closed).
fn string_literal_len(rest: &str) -> usize {
    let mut escaped = false;
    for (at, c) in rest.char_indices().skip(1) {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '"' => return at + 1,
            _ => {}
        }
    }
    rest.len()
}

/// The index after the parenthesised group starting at `tokens[open]`, if one does.
fn after_parentheses(tokens: &[(usize, &str)], open: usize) -> Option<usize> {
    if tokens.get(open)?.1 != "(" {
        return None;
    }
    let mut depth = 0usize;
    for (i, &(_, t)) in tokens.iter().enumerate().skip(open) {
        match t {
            "(" => depth += 1,
            ")" => {
                depth -= 1;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

fn is_identifier(token: &str) -> bool {
    token.starts_with(|c: char| c == '_' || c.is_ascii_alphabetic())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_are_found_in_order_whatever_the_layout() {
        let src = "#include \"common.cuh\"\n\
            extern \"C\" __global__ void fill(float* x, unsigned long long n) {}\n\
            __device__ float helper(float x) { return x; }\n\
            extern  \"C\"\n__global__\tvoid\n  add_f32 (const float* a) {}\n\
            extern \"C\" __global__ void __launch_bounds__(256, 2) reduce(double* t) {}\n";
        assert_eq!(
            entry_points(src).unwrap(),
            vec!["fill", "add_f32", "reduce"]
        );
    }

    #[test]
    fn commented_out_kernels_and_strings_are_not_kernels() {
        let src = "// extern \"C\" __global__ void old(float* x) {}\n\
            /* extern \"C\" __global__ void older(float* x) {}\n */\n\
            const char* s = \"__global__ \\\" void\";\n\
            extern \"C\" __global__ void kept(float* x) {}\n";
        assert_eq!(entry_points(src).unwrap(), vec!["kept"]);
    }

    #[test]
    fn a_kernel_without_extern_c_is_refused_with_its_line() {
        let err = entry_points("\n\n__global__ void mangled(float* x) {}\n").unwrap_err();
        assert!(err.starts_with("line 3: "), "{err}");
        let err = entry_points("extern \"C\" __global__ int bad(float* x) {}").unwrap_err();
        assert!(err.starts_with("line 1: "), "{err}");
        assert!(entry_points("extern \"C\" __global__ void").is_err());
        assert!(entry_points("extern \"C\" __global__ void __launch_bounds__(256").is_err());
    }
}
