//! Reads a JSONL corpus: `{"id", "title", "text"}` lines, or BEIR's `{"_id", "title", "text"}`.
//! A line with a title and no text is read as a document whose text is the title (BEIR indexes
//! title + text; CACM has 1,617 such documents of 3,204); only a line with neither is skipped.

use super::{Renamed, Skipped, markdown_title};
use crate::error::{Error, Result};
use crate::id::{ChunkId, DocId};
use crate::record::{Chunk, Document};
use serde::Deserialize;
use std::collections::{HashMap, HashSet};
use std::io::{BufRead, Read as _};
use std::path::Path;

/// The UTF-8 byte order mark.
const BOM: &[u8] = b"\xef\xbb\xbf";

/// One JSONL line as found in the wild: `id` or `_id`, a string or a number.
#[derive(Debug, Deserialize)]
struct Line {
    #[serde(alias = "_id")]
    id: Option<serde_json::Value>,
    #[serde(default)]
    title: Option<String>,
    text: Option<String>,
    /// Pre-chunked input may name the document a chunk belongs to…
    #[serde(default)]
    doc_id: Option<String>,
    /// …or do so in `metadata`, as qrelgen's own `corpus.jsonl` does.
    #[serde(default)]
    metadata: Option<LineMeta>,
}

#[derive(Debug, Deserialize)]
struct LineMeta {
    #[serde(default)]
    doc_id: Option<String>,
    /// The chunk's section heading, as qrelgen's `corpus.jsonl` records it.
    #[serde(default)]
    section: Option<String>,
}

/// A usable line: its id as text, title and text.
struct Record {
    id: String,
    /// The title, unless empty or used as the text.
    title: Option<String>,
    text: String,
    doc_id: Option<String>,
    section: Option<String>,
}

fn parse_line(bytes: &[u8]) -> std::result::Result<Option<Record>, String> {
    let line =
        std::str::from_utf8(bytes).map_err(|e| format!("invalid UTF-8 at byte {}", e.valid_up_to()))?;
    if line.trim().is_empty() {
        return Ok(None);
    }
    let parsed: Line = serde_json::from_str(line).map_err(|e| format!("invalid JSON: {e}"))?;
    let id = match parsed.id {
        Some(serde_json::Value::String(s)) => s,
        Some(serde_json::Value::Number(n)) => n.to_string(),
        Some(_) => return Err("\"id\" must be a string or a number".to_owned()),
        None => return Err("no \"id\" or \"_id\" field".to_owned()),
    };
    let title = parsed.title.filter(|t| !t.trim().is_empty());
    let (title, text) = match parsed.text.filter(|t| !t.trim().is_empty()) {
        Some(text) => (title, text),
        // A document with only a title is its title, as BEIR reads title + text.
        None => (None, title.ok_or("no text and no title")?),
    };
    let (meta_doc_id, section) = parsed.metadata.map_or((None, None), |m| (m.doc_id, m.section));
    let doc_id = parsed.doc_id.or(meta_doc_id);
    Ok(Some(Record { id, title, text, doc_id, section }))
}

/// The file at `path`, to read lines from.
fn open(path: &Path) -> Result<std::io::BufReader<fs_err::File>> {
    let file = fs_err::File::open(path)
        .map_err(|source| Error::CorpusUnreadable { path: path.to_owned(), source })?;
    Ok(std::io::BufReader::new(file))
}

/// Calls `each(line_number, record)` for every usable line of `input`, the file at `path`;
/// collects the rest as skipped.
fn for_each_record(
    path: &Path,
    input: impl BufRead,
    mut each: impl FnMut(usize, Record) -> Result<std::result::Result<(), String>>,
) -> Result<Vec<Skipped>> {
    let mut skipped = Vec::new();
    let mut input = input;
    let mut buffer = Vec::new();
    for index in 0.. {
        let line = index + 1;
        buffer.clear();
        let limit = crate::lines::DOCUMENT_LINE;
        let read = (&mut input).take(limit as u64 + 1).read_until(b'\n', &mut buffer);
        let read = read.map_err(|source| Error::CorpusUnreadable { path: path.to_owned(), source })?;
        if read == 0 {
            break;
        }
        if buffer.last() == Some(&b'\n') {
            buffer.pop();
        } else if read > limit {
            let source = crate::lines::too_long(line, limit);
            return Err(Error::CorpusUnreadable { path: path.to_owned(), source });
        }
        let bytes = &buffer;
        // A UTF-8 byte order mark (Windows tools write one) is not part of the first line.
        let bytes = if index == 0 { bytes.strip_prefix(BOM).unwrap_or(bytes) } else { &bytes[..] };
        let outcome = match parse_line(bytes) {
            Ok(Some(record)) => each(line, record)?,
            Ok(None) => Ok(()),
            Err(reason) => Err(reason),
        };
        if let Err(reason) = outcome {
            skipped.push(Skipped { path: path.to_owned(), line: Some(line), reason });
        }
    }
    Ok(skipped)
}

/// Reads a JSONL corpus of documents. An id with whitespace or `#` (which TREC and BEIR files
/// cannot hold) is renamed, `_` for each, and recorded in `renamed`; the document keeps the
/// original as its `source_id`.
///
/// # Errors
/// [`Error::CorpusUnreadable`] if the file cannot be read, and the errors of `sink`. Bad lines
/// and repeated ids are skipped, not fatal.
pub fn read_jsonl(
    path: &Path,
    renamed: &mut Vec<Renamed>,
    mut sink: impl FnMut(Document) -> Result<()>,
) -> Result<Vec<Skipped>> {
    let mut seen = HashSet::new();
    for_each_record(path, open(path)?, |line, record| {
        let Ok(id) = DocId::from_input(&record.id) else {
            return Ok(Err(format!("the document id {:?} is empty or only whitespace", record.id)));
        };
        let source_id = (id.as_str() != record.id).then_some(record.id);
        if !seen.insert(digest(id.as_str())) {
            let was = source_id.map_or_else(String::new, |s| format!(" (renamed from {s:?})"));
            return Ok(Err(format!("document id {id}{was} was already used on an earlier line")));
        }
        if let Some(from) = &source_id {
            renamed.push(Renamed { path: path.to_owned(), line, from: from.clone(), to: id.clone() });
        }
        let title = record.title.or_else(|| markdown_title(&record.text)).unwrap_or_else(|| id.to_string());
        sink(Document { id, source_id, title, text: record.text, markdown: true }).map(Ok)
    })
}

/// What the duplicate checks keep of each id: 128 bits of its blake3 hash (16 bytes, where the
/// id itself would take a hundred; two ids share one with a chance below 2^-100 even across a
/// billion lines).
fn digest(id: &str) -> u128 {
    let hash = blake3::hash(id.as_bytes());
    let mut head = [0; 16];
    head.copy_from_slice(&hash.as_bytes()[..16]);
    u128::from_le_bytes(head)
}

/// Reads pre-chunked JSONL: each line is one chunk and keeps its id.
///
/// # Errors
/// [`Error::DuplicateChunkId`] when an id repeats (the output would be ambiguous), plus the
/// errors of [`read_jsonl`].
pub fn read_prechunked(path: &Path, sink: impl FnMut(Chunk) -> Result<()>) -> Result<Vec<Skipped>> {
    read_prechunked_from(path, open(path)?, sink)
}

/// [`read_prechunked`] of `input`, the contents of the file at `path`.
///
/// # Errors
/// As [`read_prechunked`].
pub fn read_prechunked_from(
    path: &Path,
    input: impl BufRead,
    mut sink: impl FnMut(Chunk) -> Result<()>,
) -> Result<Vec<Skipped>> {
    let mut seen = HashSet::new();
    let mut ordinals: HashMap<DocId, u32> = HashMap::new();
    for_each_record(path, input, |line, record| {
        let id = match ChunkId::parse(&record.id) {
            Ok(id) => id,
            Err(e) => return Ok(Err(e.to_string())),
        };
        if !seen.insert(digest(id.as_str())) {
            return Err(Error::DuplicateChunkId { path: path.to_owned(), line, id: record.id });
        }
        let doc_id = match record.doc_id.as_deref().map(DocId::from_input) {
            None => DocId::sanitized(id.as_str()),
            Some(Ok(doc_id)) => doc_id,
            Some(Err(_)) => return Ok(Err("its doc_id is empty or only whitespace".to_owned())),
        };
        let ordinal = ordinals.entry(doc_id.clone()).or_default();
        let chunk = Chunk {
            id,
            source_id: None,
            title: record.title.unwrap_or_else(|| doc_id.to_string()),
            doc_id,
            ordinal: *ordinal,
            text: record.text,
            section: record.section,
        };
        *ordinal += 1;
        sink(chunk).map(Ok)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_with(lines: &str) -> tempfile::NamedTempFile {
        let file = tempfile::NamedTempFile::new().unwrap();
        fs_err::write(file.path(), lines).unwrap();
        file
    }

    #[test]
    fn reads_plain_and_beir_lines_and_skips_bad_ones() {
        let file = file_with(concat!(
            "{\"id\":\"a 1\",\"title\":\"A\",\"text\":\"alpha\"}\n",
            "{\"_id\":7,\"text\":\"# Seven\\nbody\"}\n",
            "not json\n",
            "\n",
            "{\"id\":\"b\"}\n",
            "{\"id\":\"a 1\",\"text\":\"again\"}\n",
            "{\"id\":\"a_1\",\"text\":\"not the same id\"}\n",
            "{\"id\":\"\",\"text\":\"empty id\"}\n",
            "{\"id\":\"   \",\"text\":\"blank id\"}\n",
        ));
        let (mut docs, mut renamed) = (Vec::new(), Vec::new());
        let skipped = read_jsonl(file.path(), &mut renamed, |d| {
            docs.push(d);
            Ok(())
        })
        .unwrap();
        let got: Vec<_> =
            docs.iter().map(|d| (d.id.as_str(), d.title.as_str(), d.source_id.as_deref())).collect();
        // A renamed id carries its original's hash: "a 1" and "a_1" stay two documents.
        assert_eq!(got, [("a_1-e2d8775f", "A", Some("a 1")), ("7", "Seven", None), ("a_1", "a_1", None)]);
        let renamed: Vec<_> = renamed.iter().map(|r| (r.line, r.from.as_str(), r.to.as_str())).collect();
        assert_eq!(
            renamed,
            [(1, "a 1", "a_1-e2d8775f")],
            "the repeat on line 6 is skipped, not renamed again"
        );
        let lines: Vec<_> = skipped.iter().map(|s| s.line).collect();
        assert_eq!(lines, [Some(3), Some(5), Some(6), Some(8), Some(9)]);
        assert_eq!(
            skipped[2].reason,
            "document id a_1-e2d8775f (renamed from \"a 1\") was already used on an earlier line"
        );
        assert_eq!(skipped[3].reason, "the document id \"\" is empty or only whitespace");
        assert_eq!(skipped[4].reason, "the document id \"   \" is empty or only whitespace");
        assert!(skipped[0].reason.starts_with("invalid JSON"));
        assert_eq!(skipped[1].reason, "no text and no title");
    }

    #[test]
    fn a_byte_order_mark_does_not_cost_the_first_line() {
        let file = file_with("\u{feff}{\"id\":\"a\",\"text\":\"alpha\"}\n{\"id\":\"b\",\"text\":\"beta\"}\n");
        let mut ids = Vec::new();
        let skipped = read_jsonl(file.path(), &mut Vec::new(), |d| {
            ids.push(d.id.to_string());
            Ok(())
        })
        .unwrap();
        assert_eq!((ids, skipped), (vec!["a".to_owned(), "b".to_owned()], vec![]));
        let mut chunks = Vec::new();
        read_prechunked(file.path(), |c| {
            chunks.push(c.id.to_string());
            Ok(())
        })
        .unwrap();
        assert_eq!(chunks, ["a", "b"]);
    }

    #[test]
    fn a_document_with_only_a_title_is_its_title() {
        let file = file_with(concat!(
            "{\"_id\":\"t1\",\"title\":\"Algorithm 42: the sieve\",\"text\":\"\"}\n",
            "{\"_id\":\"t2\",\"title\":\"Both\",\"text\":\"Body text.\"}\n",
            "{\"_id\":\"t3\",\"title\":\" \",\"text\":\" \"}\n",
        ));
        let mut docs = Vec::new();
        let skipped = read_jsonl(file.path(), &mut Vec::new(), |d| {
            docs.push(d);
            Ok(())
        })
        .unwrap();
        let got: Vec<_> = docs.iter().map(|d| (d.id.as_str(), d.title.as_str(), d.text.as_str())).collect();
        assert_eq!(got, [("t1", "t1", "Algorithm 42: the sieve"), ("t2", "Both", "Body text.")]);
        assert_eq!(skipped.len(), 1);
        assert_eq!((skipped[0].line, skipped[0].reason.as_str()), (Some(3), "no text and no title"));
    }

    #[test]
    fn prechunked_keeps_ids_and_rejects_repeats() {
        let file = file_with(
            "{\"_id\":\"d1-p0\",\"text\":\"x\",\"doc_id\":\"d1\"}\n{\"_id\":\"d1-p1\",\"text\":\"y\",\"doc_id\":\"d1\"}\n{\"_id\":\"bad id\",\"text\":\"z\"}\n",
        );
        let mut chunks = Vec::new();
        let skipped = read_prechunked(file.path(), |c| {
            chunks.push(c);
            Ok(())
        })
        .unwrap();
        let got: Vec<_> = chunks.iter().map(|c| (c.id.as_str(), c.doc_id.as_str(), c.ordinal)).collect();
        assert_eq!(got, [("d1-p0", "d1", 0), ("d1-p1", "d1", 1)]);
        assert_eq!(skipped.len(), 1);

        let dup = file_with("{\"_id\":\"c\",\"text\":\"x\"}\n{\"_id\":\"c\",\"text\":\"y\"}\n");
        let err = read_prechunked(dup.path(), |_| Ok(())).err().map(|e| e.to_string());
        assert!(err.is_some_and(|e| e.ends_with(":2: chunk id \"c\" was already used on an earlier line")));
    }
}
