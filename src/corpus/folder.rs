//! Reads a folder of `.txt`, `.md`, `.html`, `.pdf` and `.docx` files, recursively, in file-name
//! order; hidden files and folders (names starting with `.`) are not read.

use super::{Skipped, decode_text, docx, html, markdown_title, pdf};
use crate::error::Result;
use crate::id::DocId;
use crate::record::Document;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use walkdir::WalkDir;

/// The kinds of file a folder corpus may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Text,
    Markdown,
    Html,
    Pdf,
    Docx,
}

impl Format {
    fn of(path: &Path) -> Option<Self> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        match ext.as_str() {
            "txt" | "text" => Some(Self::Text),
            "md" | "markdown" => Some(Self::Markdown),
            "html" | "htm" => Some(Self::Html),
            "pdf" => Some(Self::Pdf),
            "docx" => Some(Self::Docx),
            _ => None,
        }
    }
}

/// Whether `path` names a file the folder reader reads (`.txt`, `.md`, `.html`, `.pdf` …).
#[must_use]
pub fn is_document(path: &Path) -> bool {
    Format::of(path).is_some()
}

/// Reads one `.txt`, `.md`, `.html`, `.pdf` or `.docx` file as a corpus of one document, its id
/// the file name.
///
/// # Errors
/// Only the errors of `sink`: a bad file is skipped, not fatal.
pub fn read_single(path: &Path, mut sink: impl FnMut(Document) -> Result<()>) -> Result<Vec<Skipped>> {
    let root = path.parent().unwrap_or_else(|| Path::new(""));
    match Format::of(path)
        .ok_or_else(|| "not a .txt, .md, .html, .pdf or .docx file".to_owned())
        .and_then(|f| read_file(root, path, f))
    {
        Ok(doc) => sink(doc).map(|()| Vec::new()),
        Err(reason) => Ok(vec![Skipped { path: path.to_owned(), line: None, reason }]),
    }
}

/// Files ignored for their extension, by extension (`.pdf`, or `(none)`).
pub type Ignored = BTreeMap<String, usize>;

/// Reads every usable file under `root` and hands it to `sink` as a [`Document`].
///
/// Returns the skipped inputs and the files ignored for their extension. Symbolic
/// links are followed; a link loop is skipped with a warning. The folder `exclude` (the output
/// folder, when it lies inside the corpus) is not read, nor are hidden files and folders (a
/// name starting with `.`, below `root`: `.git/`, an editor's `.notes.md.swp`, a staging
/// folder), which are not counted as ignored either. Two files whose ids clash once
/// whitespace and `#` are replaced (`a b.md`, `a#b.md`) get distinct ids (`a_b.md`, `a_b.md~2`).
///
/// # Errors
/// Only the errors of `sink`: bad files are skipped, not fatal.
pub fn read_folder(
    root: &Path,
    exclude: Option<&Path>,
    mut sink: impl FnMut(Document) -> Result<()>,
) -> Result<(Vec<Skipped>, Ignored)> {
    let mut skipped = Vec::new();
    let mut ignored = Ignored::new();
    let mut seen: HashMap<DocId, usize> = HashMap::new();
    let excluded = exclude.and_then(|p| p.canonicalize().ok());
    let is_excluded = |e: &walkdir::DirEntry| {
        e.file_type().is_dir() && excluded.is_some() && e.path().canonicalize().ok() == excluded
    };
    let walker = WalkDir::new(root)
        .follow_links(true)
        .sort_by_file_name()
        .into_iter()
        .filter_entry(|e| !is_hidden(e) && !is_excluded(e));
    for entry in walker {
        let entry = match entry {
            Ok(entry) => entry,
            Err(err) => {
                let path = err.path().unwrap_or(root).to_owned();
                skipped.push(Skipped { path, line: None, reason: err.to_string() });
                continue;
            }
        };
        if !entry.file_type().is_file() {
            continue;
        }
        let Some(format) = Format::of(entry.path()) else {
            let extension =
                entry.path().extension().map(|e| format!(".{}", e.to_string_lossy().to_lowercase()));
            *ignored.entry(extension.unwrap_or_else(|| "(none)".to_owned())).or_default() += 1;
            continue;
        };
        match read_file(root, entry.path(), format) {
            Ok(mut doc) => {
                let count = seen.entry(doc.id.clone()).or_default();
                *count += 1;
                if *count > 1 {
                    doc.id = DocId::sanitized(&format!("{}~{count}", doc.id));
                }
                sink(doc)?;
            }
            Err(reason) => skipped.push(Skipped { path: entry.path().to_owned(), line: None, reason }),
        }
    }
    Ok((skipped, ignored))
}

/// Whether `entry` lies below the root and its name starts with `.`.
fn is_hidden(entry: &walkdir::DirEntry) -> bool {
    entry.depth() > 0 && entry.file_name().as_encoded_bytes().starts_with(b".")
}

fn read_file(root: &Path, path: &Path, format: Format) -> std::result::Result<Document, String> {
    let bytes = fs_err::read(path).map_err(|e| e.to_string())?;
    let relative = path.strip_prefix(root).unwrap_or(path);
    let id_text =
        relative.components().map(|c| c.as_os_str().to_string_lossy()).collect::<Vec<_>>().join("/");
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let (title, text, markdown) = match format {
        Format::Html => {
            let page = html::to_text(&decode_text(bytes)?);
            (page.title, page.text, true)
        }
        Format::Markdown => {
            let raw = decode_text(bytes)?;
            (markdown_title(&raw), raw, true)
        }
        Format::Text => (None, decode_text(bytes)?, false),
        Format::Pdf => {
            let pdf = pdf::to_text(&bytes)?;
            (pdf.title, pdf.text, true)
        }
        Format::Docx => {
            let docx = docx::to_text(&bytes)?;
            (docx.title, docx.text, true)
        }
    };
    if text.trim().is_empty() {
        return Err("no text left after removing markup".to_owned());
    }
    Ok(Document {
        id: DocId::sanitized(&id_text),
        source_id: None,
        title: title.unwrap_or(stem),
        text,
        markdown,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(root: &Path) -> (Vec<Document>, Vec<Skipped>, Ignored) {
        let mut docs = Vec::new();
        let (skipped, ignored) = read_folder(root, None, |d| {
            docs.push(d);
            Ok(())
        })
        .unwrap();
        (docs, skipped, ignored)
    }

    #[test]
    fn reads_sorted_and_skips_bad_files() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, bytes: &[u8]| {
            let path = dir.path().join(name);
            fs_err::create_dir_all(path.parent().unwrap_or(dir.path())).unwrap();
            fs_err::write(path, bytes).unwrap();
        };
        write("b.md", b"# Bee\nBees make honey.");
        write("a/x y.txt", b"Plain text file.");
        write("c.html", b"<html><title>Sea</title><body><nav>Home</nav><p>Salt water.</p></body></html>");
        write("empty.txt", b"  \n");
        write("bad.md", &[b'h', 0xc3, 0x28]);
        write("bin.txt", b"\0\0\0");
        write("image.png", b"\x89PNG");

        let (docs, skipped, ignored) = read_all(dir.path());
        let ids: Vec<_> = docs.iter().map(|d| d.id.as_str()).collect();
        assert_eq!(ids, ["a/x_y.txt", "b.md", "c.html"]);
        assert_eq!(docs[1].title, "Bee");
        assert_eq!(docs[2].title, "Sea");
        assert!(!docs[2].text.contains("Home"), "navigation kept: {:?}", docs[2].text);
        let reasons: Vec<_> = skipped.iter().map(|s| s.reason.as_str()).collect();
        assert_eq!(reasons, ["invalid UTF-8 at byte 1", "binary file (contains NUL bytes)", "empty file"]);
        assert_eq!(ignored, Ignored::from([(".png".to_owned(), 1)]));
    }

    #[test]
    fn clashing_ids_are_made_distinct_and_the_output_folder_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["a b.md", "a#b.md", "out/report.md"] {
            let path = dir.path().join(name);
            fs_err::create_dir_all(path.parent().unwrap_or(dir.path())).unwrap_or_default();
            fs_err::write(path, "Some words here.").unwrap();
        }
        let out = dir.path().join("out");
        let mut ids = Vec::new();
        read_folder(dir.path(), Some(&out), |d| {
            ids.push(d.id.to_string());
            Ok(())
        })
        .unwrap();
        assert_eq!(ids, ["a_b.md", "a_b.md~2"]);
    }

    #[test]
    fn hidden_files_and_folders_are_not_read_nor_counted_but_a_hidden_root_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join(".corpus");
        let names =
            ["a.md", ".hidden.md", ".git/HEAD", ".staging/corpus.md", "sub/.cache/b.txt", "sub/c.txt"];
        for name in names {
            let path = root.join(name);
            fs_err::create_dir_all(path.parent().unwrap_or(&root)).unwrap();
            fs_err::write(path, "Some words here.").unwrap();
        }
        let (docs, skipped, ignored) = read_all(&root);
        let ids: Vec<_> = docs.iter().map(|d| d.id.as_str()).collect();
        assert_eq!(ids, ["a.md", "sub/c.txt"]);
        assert!(skipped.is_empty(), "{skipped:?}");
        assert!(ignored.is_empty(), "{ignored:?}");
    }

    #[cfg(unix)]
    #[test]
    fn symlink_loops_do_not_hang() {
        let dir = tempfile::tempdir().unwrap();
        fs_err::write(dir.path().join("a.txt"), "Some words here.").unwrap();
        std::os::unix::fs::symlink(dir.path(), dir.path().join("loop")).unwrap();
        let (docs, skipped, _) = read_all(dir.path());
        assert_eq!(docs.len(), 1);
        assert_eq!(skipped.len(), 1);
        assert!(skipped[0].reason.contains("File system loop found"), "{:?}", skipped[0]);
    }
}
