//! Stage 2, chunk: splits documents into chunks that respect their structure.
//!
//! Input: a [`Document`]. Output: its [`Chunk`]s in order. Invariants: no chunk is larger than the
//! configured size (except a single word longer than it); splits prefer headings, then
//! paragraphs, then sentences, then words; ids derive from the document id and the chunk text
//! only, so they are byte-identical across runs and processes.

use crate::error::{Error, Result};
use crate::id::ChunkId;
use crate::record::{Chunk, Document};
use crate::text::Language;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
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
        let pieces = match Language::detect(&doc.text) {
            Language::En => self.en.split(&doc.text, doc.markdown),
            Language::Zh => self.zh.split_chinese(&doc.text, doc.markdown),
        };
        let mut seen: HashMap<&str, usize> = HashMap::new();
        let mut chunks = Vec::with_capacity(pieces.len());
        for text in pieces.into_iter().filter(|t| !t.trim().is_empty()) {
            let occurrence = seen.entry(text).or_default();
            chunks.push(Chunk {
                id: ChunkId::derive(&doc.id, text, *occurrence),
                doc_id: doc.id.clone(),
                source_id: doc.source_id.clone(),
                ordinal: u32::try_from(chunks.len()).unwrap_or(u32::MAX),
                title: doc.title.clone(),
                text: text.to_owned(),
            });
            *occurrence += 1;
        }
        chunks
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

    fn split<'t>(&self, text: &'t str, markdown: bool) -> Vec<&'t str> {
        self.indices(text, markdown).into_iter().map(|(_, chunk)| chunk).collect()
    }

    /// Like [`Splitters::split`], but a long Chinese sentence may also end a chunk at `；`: the
    /// text is split with a line break after each `；` (the splitter breaks at line breaks
    /// before sentences), and each chunk is mapped back to the original, so chunk texts stay
    /// verbatim.
    fn split_chinese<'t>(&self, text: &'t str, markdown: bool) -> Vec<&'t str> {
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
                let end = start + chunk.len();
                text.get(start - before(start)..end - before(end))
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
        Chunker::new(config).unwrap_or_else(|e| panic!("{e}"))
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
        let chunks = Chunker::new(config).unwrap_or_else(|e| panic!("{e}")).chunk(&doc(&words, false));
        assert!(chunks.len() >= 5, "{} chunks", chunks.len());
        let bpe = tiktoken_rs::cl100k_base_singleton();
        assert!(chunks.iter().all(|c| bpe.encode_ordinary(&c.text).len() <= 8));
    }

    #[test]
    fn chinese_documents_use_their_own_size_and_break_at_sentences() {
        let config =
            ChunkConfig { size: 1000, overlap: 0, size_zh: 30, overlap_zh: 0, unit: SizeUnit::Chars };
        let text = "同步会在后台自动进行，不需要手动操作。当配额用完时，上传会暂停！你可以在设置里查看用量吗？可以。";
        let chunks = Chunker::new(config).unwrap_or_else(|e| panic!("{e}")).chunk(&doc(text, false));
        assert!(chunks.len() >= 2, "{chunks:?}");
        for c in &chunks {
            assert!(c.text.chars().count() <= 30);
            assert!(c.text.ends_with(['。', '！', '？']), "chunk does not end at a sentence: {:?}", c.text);
        }
        // A sentence longer than a chunk ends its chunks at `；`, and chunk texts stay verbatim.
        let long = "第一步打开设置页面并选择同步选项；第二步输入新的带宽上限并保存；第三步重启客户端。";
        let chunks = Chunker::new(config).unwrap_or_else(|e| panic!("{e}")).chunk(&doc(long, false));
        let texts: Vec<&str> = chunks.iter().map(|c| c.text.as_str()).collect();
        assert_eq!(
            texts,
            ["第一步打开设置页面并选择同步选项；", "第二步输入新的带宽上限并保存；第三步重启客户端。"]
        );
        assert!(chunks.iter().all(|c| long.contains(&c.text)));
        let markdown = Chunker::new(config).unwrap_or_else(|e| panic!("{e}")).chunk(&doc(long, true));
        assert!(markdown.len() >= 2 && markdown[0].text.ends_with('；'), "{markdown:?}");
        assert!(markdown.iter().all(|c| long.contains(&c.text)));
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
