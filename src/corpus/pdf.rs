//! PDF files: the text layer of each page (`pdf-extract`, pure Rust over `lopdf`), as Markdown
//! with one `## Page N` section per page, so chunks split at pages and a reviewer sees which
//! page a chunk comes from. A PDF without a text layer (scanned), an encrypted or a broken one
//! is skipped with its reason.

use super::Extracted;
use std::fmt::Write as _;

/// A page with fewer characters than this holds no text worth indexing.
const EMPTY_PAGE: usize = 3;

/// The text of a PDF file's pages.
///
/// # Errors
/// Why the file cannot be read: damaged or encrypted, or no page with a text layer.
pub fn to_text(bytes: &[u8]) -> Result<Extracted, String> {
    // pdf-extract panics on some malformed files: a panic is that file's error, not the build's.
    let pages = std::panic::catch_unwind(|| pdf_extract::extract_text_from_mem_by_pages(bytes))
        .map_err(|_| "unreadable PDF: the parser gave up on its structure".to_owned())?
        .map_err(|e| describe(&e.to_string()))?;
    let with_text = pages.iter().filter(|p| p.trim().chars().count() >= EMPTY_PAGE).count();
    if with_text == 0 {
        return Err(format!(
            "no text layer in its {} page(s) (a scanned PDF?): run OCR first (e.g. ocrmypdf)",
            pages.len()
        ));
    }
    let mut text = String::new();
    for (number, page) in (1..).zip(&pages) {
        let page = tidy(page);
        if !page.is_empty() {
            let _ = write!(text, "## Page {number}\n\n{page}\n\n");
        }
    }
    Ok(Extracted { title: None, text: text.trim_end().to_owned() })
}

/// A page's text with runs of blank lines cut to one and trailing spaces removed.
fn tidy(page: &str) -> String {
    let mut out = Vec::new();
    for line in page.lines().map(str::trim_end) {
        if !(line.is_empty() && out.last().is_none_or(|l: &&str| l.is_empty())) {
            out.push(line);
        }
    }
    out.join("\n").trim().to_owned()
}

/// The parser's error, said for a user.
fn describe(error: &str) -> String {
    let lower = error.to_ascii_lowercase();
    if ["encrypt", "decrypt", "password"].iter().any(|w| lower.contains(w)) {
        format!("encrypted PDF ({error}): decrypt it first (e.g. qpdf --decrypt)")
    } else {
        format!("unreadable PDF: {error}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blank_lines_collapse_and_garbage_is_an_error_not_a_panic() {
        assert_eq!(tidy("  a  \n\n\n\nb\n\n"), "a\n\nb");
        let err = to_text(b"%PDF-1.4\n1 0 obj << /Type /Catalog").err().unwrap_or_default();
        assert!(err.starts_with("unreadable PDF"), "{err}");
        assert!(describe("file is Encrypted").starts_with("encrypted PDF"));
    }
}
