//! Stage 1, corpus: reads documents from a folder or a JSONL file, one at a time.
//!
//! Input: a path. Output: a stream of [`Document`]s (or, for `--prechunked`, of [`Chunk`]s) and a
//! list of [`Skipped`] inputs. Invariants: documents come in a deterministic order (folders are
//! walked in file-name order, JSONL in line order); a bad file or line is skipped with a reason,
//! never an abort; the corpus is never held in memory as a whole.

mod docx;
mod folder;
mod html;
mod jsonl;
mod pdf;

use crate::error::{Error, Result};
use crate::id::DocId;
use crate::record::{Chunk, Document};
use serde::Serialize;
use std::path::{Path, PathBuf};

pub use folder::{Ignored, read_folder};
pub use jsonl::{read_jsonl, read_prechunked, read_prechunked_from};

/// The text of a binary document (PDF, DOCX) as Markdown, with its title when it has one.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Extracted {
    title: Option<String>,
    text: String,
}

/// An input file or line that was not used, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Skipped {
    /// The file.
    pub path: PathBuf,
    /// The 1-based line, for JSONL input.
    pub line: Option<usize>,
    /// Why it was skipped.
    pub reason: String,
}

impl std::fmt::Display for Skipped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{line}: {}", self.path.display(), self.reason),
            None => write!(f, "{}: {}", self.path.display(), self.reason),
        }
    }
}

/// A JSONL document id that had to be renamed to be usable in TREC and BEIR files.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Renamed {
    /// The file.
    pub path: PathBuf,
    /// The 1-based line.
    pub line: usize,
    /// The id as the file has it.
    pub from: String,
    /// The id it is written as.
    pub to: DocId,
}

impl std::fmt::Display for Renamed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}: document id {:?} is written as {} (ids cannot hold whitespace or '#'); corpus.jsonl keeps \
             the original as metadata.source_id",
            self.path.display(),
            self.line,
            self.from,
            self.to
        )
    }
}

/// What reading the corpus found besides documents.
#[derive(Debug, Default, Clone, Serialize)]
pub struct ReadReport {
    /// Inputs skipped with a warning.
    pub skipped: Vec<Skipped>,
    /// Document ids renamed, with a warning each.
    pub renamed: Vec<Renamed>,
    /// Files ignored because of their extension.
    pub ignored: usize,
    /// The same, by extension.
    pub ignored_by_extension: Ignored,
    /// Documents (or pre-chunked chunks) read.
    pub documents: usize,
}

/// One item of the corpus stream.
#[derive(Debug)]
pub enum Item {
    /// A document to chunk.
    Document(Document),
    /// A pre-chunked unit, used as-is.
    Chunk(Chunk),
}

/// Reads `path` (a folder or a JSONL file) and hands each item to `sink`, in a deterministic order.
/// A folder `exclude` inside the corpus (the output folder) is not read.
/// A folder `exclude` inside the corpus (the output folder) is not read.
///
/// # Errors
/// [`Error::CorpusUnreadable`] if `path` cannot be opened, [`Error::EmptyCorpus`] if no item is
/// usable, and the errors of `sink`.
pub fn read(
    path: &Path,
    prechunked: bool,
    exclude: Option<&Path>,
    mut sink: impl FnMut(Item) -> Result<()>,
) -> Result<ReadReport> {
    let meta =
        fs_err::metadata(path).map_err(|source| Error::CorpusUnreadable { path: path.to_owned(), source })?;
    let mut report = ReadReport::default();
    let mut renamed = Vec::new();
    let mut count = |item: Item| {
        report.documents += 1;
        sink(item)
    };
    let (skipped, ignored) = match (meta.is_dir(), prechunked) {
        (true, true) => return Err(Error::PrechunkedFolder(path.to_owned())),
        (true, false) => read_folder(path, exclude, |d| count(Item::Document(d)))?,
        // A single .txt/.md/.html file is read by its extension, anything else as JSONL.
        (false, false) if folder::is_document(path) => {
            (folder::read_single(path, |d| count(Item::Document(d)))?, Ignored::new())
        }
        (false, false) => (read_jsonl(path, &mut renamed, |d| count(Item::Document(d)))?, Ignored::new()),
        (false, true) => (read_prechunked(path, |c| count(Item::Chunk(c)))?, Ignored::new()),
    };
    report.skipped = skipped;
    report.renamed = renamed;
    report.ignored = ignored.values().sum();
    report.ignored_by_extension = ignored;
    if report.documents == 0 {
        return Err(Error::EmptyCorpus {
            path: path.to_owned(),
            skipped: report.skipped.len(),
            ignored: report.ignored,
            details: empty_details(&report),
        });
    }
    Ok(report)
}

/// Skipped inputs listed at most.
const LISTED: usize = 10;

/// Why an empty corpus is empty: each skipped input's reason (the first few, then a count) and
/// the extensions ignored.
fn empty_details(report: &ReadReport) -> String {
    let mut lines: Vec<String> = report.skipped.iter().take(LISTED).map(|s| format!("\n  {s}")).collect();
    if let Some(more) = report.skipped.len().checked_sub(LISTED).filter(|&n| n > 0) {
        lines.push(format!("\n  … and {more} more"));
    }
    if report.ignored > 0 {
        lines.push(format!("\n  ignored for their extension: {}", extensions(&report.ignored_by_extension)));
    }
    lines.concat()
}

/// `.rst (2), .pdf (1)`: the extensions ignored, most files first.
#[must_use]
pub fn extensions(ignored: &Ignored) -> String {
    let mut by_count: Vec<(&String, &usize)> = ignored.iter().collect();
    by_count.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    by_count.iter().map(|(extension, n)| format!("{extension} ({n})")).collect::<Vec<_>>().join(", ")
}

/// Decodes file bytes as text, or says why they are not usable text.
pub(crate) fn decode_text(bytes: Vec<u8>) -> std::result::Result<String, String> {
    if bytes[..bytes.len().min(8192)].contains(&0) {
        return Err("binary file (contains NUL bytes)".to_owned());
    }
    let text = String::from_utf8(bytes)
        .map_err(|e| format!("invalid UTF-8 at byte {}", e.utf8_error().valid_up_to()))?;
    if text.trim().is_empty() {
        return Err("empty file".to_owned());
    }
    Ok(text.strip_prefix('\u{feff}').map(str::to_owned).unwrap_or(text))
}

/// The first Markdown `# ` heading of a text, if any.
pub(crate) fn markdown_title(text: &str) -> Option<String> {
    text.lines()
        .find_map(|line| line.strip_prefix("# "))
        .map(|t| t.trim().to_owned())
        .filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_rejects_binary_invalid_and_empty() {
        assert_eq!(decode_text(b"ab\0c".to_vec()), Err("binary file (contains NUL bytes)".into()));
        assert_eq!(decode_text(vec![b'o', b'k', 0xff]), Err("invalid UTF-8 at byte 2".into()));
        assert_eq!(decode_text(b" \n\t".to_vec()), Err("empty file".into()));
        assert_eq!(decode_text("\u{feff}hi".as_bytes().to_vec()), Ok("hi".into()));
    }

    #[test]
    fn title_is_first_level_one_heading() {
        assert_eq!(markdown_title("intro\n# Billing \n## Plans"), Some("Billing".into()));
        assert_eq!(markdown_title("## Only level two"), None);
    }
}
