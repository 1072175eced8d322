//! Stage 2, chunk: splits documents into chunks that respect their structure.
//!
//! Input: a [`Document`]. Output: its [`Chunk`]s in order. Invariants: no chunk is larger than the
//! configured size (except a single word longer than it); splits prefer headings, then
//! paragraphs, then sentences, then words; ids derive from the document id and the chunk text
//! only, so they are byte-identical across runs and processes.

mod saved;

pub use saved::{
    CHUNKING_FILE, ChunkingFile, ChunkingWriter, Digest, Lines, SavedChunking, SavedItem, document_digest,
    settings_stamp, text_digest,
};

use crate::corpus::Item;
use crate::dedup::chunk_signature;
use crate::error::{Error, Result};
use crate::id::ChunkId;
use crate::record::{Chunk, Document};
use crate::text::Language;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::ops::Range;
use text_splitter::{ChunkConfig as SplitConfig, ChunkSizer, MarkdownSplitter, TextSplitter};

/// What chunk sizes are counted in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SizeUnit {
    /// Unicode characters.
    Chars,
    /// `cl100k_base` tokens, as `OpenAI` models count them.
    Tokens,
}

/// How to chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkConfig {
    /// Largest chunk, in `unit`s.
    pub size: usize,
    /// Overlap between neighbouring chunks, in `unit`s.
    pub overlap: usize,
    /// Largest chunk of a Chinese document (a Chinese character carries about as much as an
    /// English word, so the same count of characters holds three times the text).
    pub size_zh: usize,
    /// Overlap in a Chinese document.
    pub overlap_zh: usize,
    /// What sizes count.
    pub unit: SizeUnit,
}

impl ChunkConfig {
    /// The build's chunking: `size` and `overlap` (in characters) for both languages when
    /// given, else 1000 and 100 for English and 400 and 40 for Chinese.
    #[must_use]
    pub fn with_sizes(size: Option<usize>, overlap: Option<usize>) -> Self {
        Self {
            size: size.unwrap_or(1000),
            overlap: overlap.unwrap_or(100),
            size_zh: size.unwrap_or(400),
            overlap_zh: overlap.unwrap_or(40),
            unit: SizeUnit::Chars,
        }
    }
}

#[derive(Clone, Copy)]
enum Sizer {
    Chars,
    Tokens(&'static tiktoken_rs::CoreBPE),
}

impl ChunkSizer for Sizer {
    fn size(&self, chunk: &str) -> usize {
        match self {
            Self::Chars => chunk.chars().count(),
            Self::Tokens(bpe) => bpe.encode_ordinary(chunk).len(),
        }
    }
}

/// The splitters for one size.
struct Splitters {
    markdown: MarkdownSplitter<Sizer>,
    text: TextSplitter<Sizer>,
}

/// Splits documents into chunks, with the sizes of the document's language.
pub struct Chunker {
    en: Splitters,
    zh: Splitters,
}

impl Chunker {
    /// Builds a chunker.
    ///
    /// # Errors
    /// [`Error::InvalidSetting`] if the size is 0 or the overlap is not smaller than the size.
    pub fn new(config: ChunkConfig) -> Result<Self> {
        let sizer = match config.unit {
            SizeUnit::Chars => Sizer::Chars,
            SizeUnit::Tokens => Sizer::Tokens(tiktoken_rs::cl100k_base_singleton()),
        };
        Ok(Self {
            en: splitters(config.size, config.overlap, sizer)?,
            zh: splitters(config.size_zh, config.overlap_zh, sizer)?,
        })
    }

    /// Splits one document; identical texts within it get distinct ids.
    #[must_use]
    pub fn chunk(&self, doc: &Document) -> Vec<Chunk> {
        self.chunk_reporting(doc, &mut |_| {})
    }

    /// Like [`Chunker::chunk`], calling `done(bytes)` as parts of the text are split. A document
    /// larger than 1 MiB is first cut into sections of at most 64 KiB at its top-level structure
    /// (`sections`), so that splitting stays linear in its size; smaller ones are split whole.
    pub fn chunk_reporting(&self, doc: &Document, done: &mut dyn FnMut(usize)) -> Vec<Chunk> {
        chunks_at(doc, &self.spans(doc, done))
    }

    /// Where [`Chunker::chunk_reporting`] cuts `doc`: the byte range of each chunk's text.
    pub fn spans(&self, doc: &Document, done: &mut dyn FnMut(usize)) -> Vec<Range<usize>> {
        self.spans_in(doc, Language::detect(&doc.text), done)
    }

    /// The chunking of a corpus item: a document's language, spans and their near-duplicate
    /// signatures; a pre-chunked unit is one chunk. `done` is told the bytes chunked as it goes.
    /// Its lines are not made yet ([`SavedItem::lines`] is empty).
    pub fn item(&self, item: &Item, done: &mut dyn FnMut(usize)) -> SavedItem {
        let (language, spans, text) = match item {
            Item::Document(doc) => {
                let language = Language::detect(&doc.text);
                (language, self.spans_in(doc, language, done), &doc.text)
            }
            Item::Chunk(unit) => {
                (Language::detect(&unit.text), std::iter::once(0..unit.text.len()).collect(), &unit.text)
            }
        };
        let signatures = spans.iter().map(|s| chunk_signature(&text[s.clone()])).collect();
        SavedItem { language, spans, signatures, lines: Lines::default() }
    }

    /// As [`Chunker::spans`], for a document known to be in `language` (its
    /// [`Language::detect`]).
    fn spans_in(&self, doc: &Document, language: Language, done: &mut dyn FnMut(usize)) -> Vec<Range<usize>> {
        let splitters = match language {
            Language::En => (&self.en, false),
            Language::Zh => (&self.zh, true),
        };
        let mut spans = Vec::new();
        for range in sections(&doc.text, doc.markdown) {
            let (section, len) = (&doc.text[range.clone()], range.len());
            let pieces = match splitters {
                (splitters, false) => splitters.indices(section, doc.markdown),
                (splitters, true) => splitters.split_chinese(section, doc.markdown),
            };
            let pieces = pieces.into_iter().filter(|(_, text)| !text.trim().is_empty());
            spans.extend(pieces.map(|(at, text)| range.start + at..range.start + at + text.len()));
            done(len);
        }
        spans
    }
}

/// The chunks of `doc` whose texts are at `spans` (as [`Chunker::spans`] gives them, or kept
/// from an earlier run); identical texts within it get distinct ids.
///
/// # Panics
/// If a span is not a range of character boundaries of the document's text.
#[must_use]
pub fn chunks_at(doc: &Document, spans: &[Range<usize>]) -> Vec<Chunk> {
    let mut seen: HashMap<&str, usize> = HashMap::new();
    let mut chunks = Vec::with_capacity(spans.len());
    let headings = if doc.markdown { headings(&doc.text) } else { Vec::new() };
    for span in spans {
        let section = headings
            .iter()
            .take_while(|(at, _)| *at <= span.start)
            .last()
            .map(|(_, heading)| heading)
            .filter(|heading| **heading != doc.title)
            .cloned();
        let text = &doc.text[span.clone()];
        let occurrence = seen.entry(text).or_default();
        chunks.push(Chunk {
            id: ChunkId::derive(&doc.id, text, *occurrence),
            doc_id: doc.id.clone(),
            source_id: doc.source_id.clone(),
            ordinal: u32::try_from(chunks.len()).unwrap_or(u32::MAX),
            title: doc.title.clone(),
            text: text.to_owned(),
            section,
        });
        *occurrence += 1;
    }
    chunks
}

/// The ATX headings of a Markdown text outside fenced code, in order: where each line starts
/// and its text (`## Page 3` → `Page 3`, a closing `#` run dropped).
fn headings(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    let (mut fence, mut at) = (None, 0);
    for line in text.split_inclusive('\n') {
        if fence.is_none() && heading_level(line).is_some() {
            let content = line.trim().trim_start_matches('#').trim();
            let open = content.trim_end_matches('#');
            // A closing run counts only after whitespace (`# C#` keeps its `#`).
            let heading =
                if open.is_empty() || open.ends_with([' ', '\t']) { open.trim_end() } else { content };
            if !heading.is_empty() {
                found.push((at, heading.to_owned()));
            }
        }
        fence = next_fence(fence, line);
        at += line.len();
    }
    found
}

/// Documents up to this size (bytes) are split whole.
const WHOLE_MAX: usize = 1 << 20;
/// The largest section a larger document is cut into: text-splitter's cost per chunk grows with
/// the structure left in the text it is given, so a whole large document costs the square of its
/// size, while sections of this size keep it linear.
const SECTION_MAX: usize = 64 << 10;

/// Where a cut between sections may go, best first: a Markdown heading (by level), a paragraph
/// break, a line break.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Cut {
    Heading(u8),
    Paragraph,
    Line,
}

/// Byte ranges that cover `text` in order: the whole text when it is at most [`WHOLE_MAX`],
/// else sections of at most [`SECTION_MAX`], each cut before the best boundary in the last
/// three quarters of its window (a heading of the highest level, then a paragraph, then a line
/// break; never inside a fenced code block; in a text without any, at whitespace or a character
/// boundary). One pass over each window: linear in the size of the text.
fn sections(text: &str, markdown: bool) -> Vec<std::ops::Range<usize>> {
    let mut cuts = Vec::new();
    if text.len() <= WHOLE_MAX {
        cuts.push(0..text.len());
        return cuts;
    }
    let mut start = 0;
    while text.len() - start > SECTION_MAX {
        let end = best_cut(text, start, markdown);
        cuts.push(start..end);
        start = end;
    }
    cuts.push(start..text.len());
    cuts
}

/// Where the section starting at `start` ends.
fn best_cut(text: &str, start: usize, markdown: bool) -> usize {
    let limit = start + SECTION_MAX;
    let earliest = start + SECTION_MAX / 4;
    let mut best: Option<(Cut, usize)> = None;
    let mut fence: Option<(u8, usize)> = None;
    let mut previous_blank = false;
    let mut at = start;
    for line in text[start..].split_inclusive('\n') {
        if at > limit {
            break;
        }
        let kind = if fence.is_some() {
            None
        } else if markdown && let Some(level) = heading_level(line) {
            Some(Cut::Heading(level))
        } else if previous_blank {
            Some(Cut::Paragraph)
        } else {
            Some(Cut::Line)
        };
        if let Some(kind) = kind.filter(|_| at > earliest)
            && best.is_none_or(|(b, _)| kind <= b)
        {
            best = Some((kind, at));
        }
        if markdown {
            fence = next_fence(fence, line);
        }
        previous_blank = line.trim().is_empty();
        at += line.len();
    }
    if let Some((_, cut)) = best {
        return cut;
    }
    // One long line: at the last whitespace, or a character boundary.
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[earliest..end].rfind(char::is_whitespace).map_or(end, |i| {
        let cut = earliest + i;
        cut + text[cut..].chars().next().map_or(0, char::len_utf8)
    })
}

/// The level of an ATX heading line (`# ` to `###### `, up to three spaces before).
fn heading_level(line: &str) -> Option<u8> {
    let trimmed =
        line.strip_prefix("   ").or_else(|| line.strip_prefix("  ")).or_else(|| line.strip_prefix(' '));
    let rest = trimmed.unwrap_or(line);
    let hashes = rest.bytes().take_while(|&b| b == b'#').count();
    let after = rest.as_bytes().get(hashes).copied();
    ((1..=6).contains(&hashes) && matches!(after, None | Some(b' ' | b'\t' | b'\n' | b'\r')))
        .then_some(hashes as u8)
}

/// The fence state after `line`: `(fence character, length)` while inside a fenced code block.
fn next_fence(fence: Option<(u8, usize)>, line: &str) -> Option<(u8, usize)> {
    let rest = line.trim_start_matches(' ');
    if line.len() - rest.len() > 3 {
        return fence;
    }
    let Some(&c) = rest.as_bytes().first().filter(|&&c| c == b'`' || c == b'~') else { return fence };
    let run = rest.bytes().take_while(|&b| b == c).count();
    match fence {
        None if run >= 3 => Some((c, run)),
        Some((open, len)) if open == c && run >= len && rest[run..].trim().is_empty() => None,
        other => other,
    }
}

/// Chinese clause punctuation that Unicode sentence rules do not end a sentence at.
const CLAUSE_BREAK: char = '；';

impl Splitters {
    /// `(byte offset, chunk)` pairs of `text`.
    fn indices<'t>(&self, text: &'t str, markdown: bool) -> Vec<(usize, &'t str)> {
        if markdown {
            self.markdown.chunk_indices(text).collect()
        } else {
            self.text.chunk_indices(text).collect()
        }
    }

    /// Like [`Splitters::indices`], but a long Chinese sentence may also end a chunk at `；`:
    /// the text is split with a line break after each `；` (the splitter breaks at line breaks
    /// before sentences), and each chunk is mapped back to the original, so chunk texts stay
    /// verbatim.
    fn split_chinese<'t>(&self, text: &'t str, markdown: bool) -> Vec<(usize, &'t str)> {
        let mut marked = String::with_capacity(text.len() + 64);
        let mut inserted = Vec::new();
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            marked.push(c);
            if c == CLAUSE_BREAK && chars.peek().is_some_and(|next| !next.is_whitespace()) {
                inserted.push(marked.len());
                marked.push('\n');
            }
        }
        let before = |at: usize| inserted.partition_point(|&i| i < at);
        self.indices(&marked, markdown)
            .into_iter()
            .filter_map(|(start, chunk)| {
                let (start, end) = (start - before(start), start + chunk.len() - before(start + chunk.len()));
                Some((start, text.get(start..end)?))
            })
            .collect()
    }
}

fn splitters(size: usize, overlap: usize, sizer: Sizer) -> Result<Splitters> {
    if size == 0 {
        return Err(invalid("--chunk-size", "must be at least 1".to_owned()));
    }
    let split = || -> Result<SplitConfig<Sizer>> {
        let overlap_error =
            |_| invalid("--chunk-overlap", format!("{overlap} must be smaller than --chunk-size {size}"));
        Ok(SplitConfig::new(size).with_overlap(overlap).map_err(overlap_error)?.with_sizer(sizer))
    };
    Ok(Splitters { markdown: MarkdownSplitter::new(split()?), text: TextSplitter::new(split()?) })
}

fn invalid(flag: &'static str, message: String) -> Error {
    Error::InvalidSetting { flag, message }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::DocId;
    use proptest::prelude::*;

    fn doc(text: &str, markdown: bool) -> Document {
        Document {
            id: DocId::sanitized("d.md"),
            source_id: None,
            title: "T".into(),
            text: text.into(),
            markdown,
        }
    }

    fn chunker(size: usize, overlap: usize) -> Chunker {
        let config = ChunkConfig { size, overlap, size_zh: size, overlap_zh: overlap, unit: SizeUnit::Chars };
        Chunker::new(config).unwrap()
    }

    #[test]
    fn a_chunk_knows_the_section_it_starts_in() {
        let pages = "## Page 1\n\nAlpha one. Alpha two.\n\n## Page 2\n\nBeta one. Beta two. Beta three.";
        let chunks = chunker(30, 0).chunk(&doc(pages, true));
        assert!(chunks.len() > 2);
        for chunk in &chunks {
            let page = if chunk.text.contains("Alpha") || chunk.text.contains("Page 1") {
                "Page 1"
            } else {
                "Page 2"
            };
            assert_eq!(chunk.section.as_deref(), Some(page), "{chunk:?}");
        }
        // The title's own heading is no section; a heading in code is none; closing runs go.
        let text = "# T\n\nIntro words here.\n\n## Use C# ##\n\n```\n# not one\n```\nSharp.";
        let chunks = chunker(40, 0).chunk(&doc(text, true));
        let sections: Vec<_> = chunks.iter().map(|c| c.section.as_deref()).collect();
        assert_eq!(sections, [None, Some("Use C#")], "{chunks:#?}");
        assert_eq!(
            headings("# C#\n#\n```\n# no\n```\n### Mid ###\n"),
            [(0, "C#".to_owned()), (20, "Mid".to_owned())]
        );
        // Plain text has no sections.
        assert!(chunker(30, 0).chunk(&doc(pages, false)).iter().all(|c| c.section.is_none()));
    }

    #[test]
    fn markdown_splits_at_headings_first() {
        let text = "# A\n\nAlpha one. Alpha two.\n\n# B\n\nBeta one. Beta two.";
        let chunks = chunker(30, 0).chunk(&doc(text, true));
        let texts: Vec<_> = chunks.iter().map(|c| c.text.as_str()).collect();
        assert_eq!(texts, ["# A\n\nAlpha one. Alpha two.", "# B\n\nBeta one. Beta two."]);
        assert_eq!(chunks[1].ordinal, 1);
    }

    #[test]
    fn ids_are_identical_across_chunkers_and_distinct_for_repeats() {
        let text = "Same words.\n\nSame words.\n\nOther words.";
        let a = chunker(12, 0).chunk(&doc(text, false));
        let b = chunker(12, 0).chunk(&doc(text, false));
        assert_eq!(a, b);
        assert_eq!(a.len(), 3);
        assert_eq!(a[0].text, a[1].text);
        assert_ne!(a[0].id, a[1].id);
    }

    #[test]
    fn rejects_overlap_not_below_size() {
        let err = Chunker::new(ChunkConfig {
            size: 10,
            overlap: 10,
            size_zh: 10,
            overlap_zh: 5,
            unit: SizeUnit::Chars,
        });
        assert!(err.is_err_and(|e| e.to_string().contains("--chunk-overlap")));
    }

    #[test]
    fn token_unit_counts_tokens() {
        let config = ChunkConfig { size: 8, overlap: 0, size_zh: 8, overlap_zh: 0, unit: SizeUnit::Tokens };
        let words = "sync ".repeat(40);
        let chunks = Chunker::new(config).unwrap().chunk(&doc(&words, false));
        assert!(chunks.len() >= 5, "{} chunks", chunks.len());
        let bpe = tiktoken_rs::cl100k_base_singleton();
        assert!(chunks.iter().all(|c| bpe.encode_ordinary(&c.text).len() <= 8));
    }

    #[test]
    fn chinese_documents_use_their_own_size_and_break_at_sentences() {
        let config =
            ChunkConfig { size: 1000, overlap: 0, size_zh: 30, overlap_zh: 0, unit: SizeUnit::Chars };
        let text = "同步会在后台自动进行，不需要手动操作。当配额用完时，上传会暂停！你可以在设置里查看用量吗？可以。";
        let chunks = Chunker::new(config).unwrap().chunk(&doc(text, false));
        assert!(chunks.len() >= 2, "{chunks:?}");
        for c in &chunks {
            assert!(c.text.chars().count() <= 30);
            assert!(c.text.ends_with(['。', '！', '？']), "chunk does not end at a sentence: {:?}", c.text);
        }
        // A sentence longer than a chunk ends its chunks at `；`, and chunk texts stay verbatim.
        let long = "第一步打开设置页面并选择同步选项；第二步输入新的带宽上限并保存；第三步重启客户端。";
        let chunks = Chunker::new(config).unwrap().chunk(&doc(long, false));
        let texts: Vec<&str> = chunks.iter().map(|c| c.text.as_str()).collect();
        assert_eq!(
            texts,
            ["第一步打开设置页面并选择同步选项；", "第二步输入新的带宽上限并保存；第三步重启客户端。"]
        );
        assert!(chunks.iter().all(|c| long.contains(&c.text)));
        let markdown = Chunker::new(config).unwrap().chunk(&doc(long, true));
        assert!(markdown.len() >= 2 && markdown[0].text.ends_with('；'), "{markdown:?}");
        assert!(markdown.iter().all(|c| long.contains(&c.text)));
    }

    #[test]
    fn a_large_document_is_cut_into_sections_at_headings_outside_code() {
        // 40 pages of ~40 KB: a heading, a fence with a `# comment` inside, paragraphs.
        let page = |i: usize| {
            let para = format!("Paragraph {i} words here and there. ").repeat(20);
            format!("# Page {i}\n\n```sh\n# not a heading {i}\n```\n\n{}", format!("{para}\n\n").repeat(50))
        };
        let text: String = (0..40).map(page).collect();
        assert!(text.len() > WHOLE_MAX);
        let cuts = sections(&text, true);
        assert_eq!(cuts.first().map(|r| r.start), Some(0));
        assert_eq!(cuts.last().map(|r| r.end), Some(text.len()));
        assert!(cuts.windows(2).all(|w| w[0].end == w[1].start), "sections are contiguous");
        assert!(
            cuts.iter().all(|r| r.len() <= SECTION_MAX),
            "{:?}",
            cuts.iter().map(ExactSizeIterator::len).max()
        );
        for r in &cuts[1..] {
            assert!(
                text[r.clone()].starts_with("# Page") || text[..r.start].ends_with("\n\n"),
                "cut at {}",
                r.start
            );
            assert!(!text[r.clone()].starts_with("# not"), "cut inside a code block");
        }
        // Every chunk is verbatim and within size; a small document is split whole, as before.
        let chunks = chunker(1000, 100).chunk(&doc(&text, true));
        assert!(chunks.iter().all(|c| text.contains(&c.text) && c.text.chars().count() <= 1000));
        let small = page(1);
        assert_eq!(sections(&small, true), std::iter::once(0..small.len()).collect::<Vec<_>>());
    }

    proptest! {
        #[test]
        fn chunks_fit_and_cover_every_word(words in proptest::collection::vec("[a-z]{1,8}", 1..200),
                                           size in 10usize..80, overlap_pct in 0usize..50) {
            let text = words.join(" ");
            let overlap = size * overlap_pct / 100;
            let chunks = chunker(size, overlap).chunk(&doc(&text, false));
            for c in &chunks {
                prop_assert!(c.text.chars().count() <= size, "chunk too large: {:?}", c.text);
            }
            let joined: std::collections::HashSet<&str> =
                chunks.iter().flat_map(|c| c.text.split_whitespace()).collect();
            for w in &words {
                prop_assert!(joined.contains(w.as_str()), "word {w} lost");
            }
        }
    }
}
