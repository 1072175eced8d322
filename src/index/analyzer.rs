//! The text analyzer shared by indexing, searching and every term statistic, so that a term the
//! generator counts is exactly a term BM25 scores.

use super::segment::{MixedTokenizer, Segmenter};
use tantivy::tokenizer::{Language, LowerCaser, RemoveLongFilter, Stemmer, StopWordFilter, TextAnalyzer};

/// Name under which the analyzer is registered in the index schema.
pub(crate) const NAME: &str = "qrelgen";

/// One analyzed token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    /// The indexed term (lower-cased, stemmed).
    pub term: String,
    /// The word as written, lower-cased.
    pub surface: String,
}

/// The analyzer: Chinese segmented (see [`Segmenter`]), other words as written; then
/// lower-cased, English stop words removed, English words Snowball-stemmed.
#[derive(Clone)]
pub struct Analyzer {
    inner: TextAnalyzer,
    segmenter: Segmenter,
}

impl Default for Analyzer {
    fn default() -> Self {
        Self::new(Segmenter::default())
    }
}

impl Analyzer {
    /// The analyzer with this Chinese segmenter.
    #[must_use]
    pub fn new(segmenter: Segmenter) -> Self {
        let mut builder = TextAnalyzer::builder(MixedTokenizer(segmenter))
            .filter(RemoveLongFilter::limit(40))
            .filter(LowerCaser)
            .dynamic();
        if let Some(stop_words) = StopWordFilter::new(Language::English) {
            builder = builder.filter_dynamic(stop_words);
        }
        Self { inner: builder.filter_dynamic(Stemmer::new(Language::English)).build(), segmenter }
    }

    /// Names this analyzer's behaviour: an index built with another one must be rebuilt.
    #[must_use]
    pub fn version(&self) -> String {
        format!("qrelgen-analyzer-v2-{}", self.segmenter.label())
    }

    /// The analyzed tokens of `text`, in order.
    #[must_use]
    pub fn tokens(&self, text: &str) -> Vec<Token> {
        let mut analyzer = self.inner.clone();
        let mut stream = analyzer.token_stream(text);
        let mut tokens = Vec::new();
        while let Some(token) = stream.next() {
            let surface = text.get(token.offset_from..token.offset_to).unwrap_or(&token.text);
            tokens.push(Token { term: token.text.clone(), surface: surface.to_lowercase() });
        }
        tokens
    }

    /// The analyzed terms of `text`, in order, with repeats.
    #[must_use]
    pub fn terms(&self, text: &str) -> Vec<String> {
        self.tokens(text).into_iter().map(|t| t.term).collect()
    }

    /// The dictionary words of the Chinese in `text` (jieba's default mode, which never splits a
    /// word into its parts as the index's search mode does); `None` with the bigram segmenter.
    #[must_use]
    pub fn dictionary_words(&self, text: &str) -> Option<std::collections::HashSet<String>> {
        self.segmenter.dictionary_words(text)
    }

    pub(crate) fn inner(&self) -> TextAnalyzer {
        self.inner.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_chinese_and_mixed_text() {
        let terms = Analyzer::default().terms("配额已满时 Uploads 会暂停");
        assert!(terms.contains(&"配额".to_owned()) && terms.contains(&"upload".to_owned()), "{terms:?}");
    }

    #[test]
    fn stems_lowercases_and_drops_stop_words() {
        let tokens = Analyzer::default().tokens("The Syncing of Files");
        let got: Vec<_> = tokens.iter().map(|t| (t.term.as_str(), t.surface.as_str())).collect();
        assert_eq!(got, [("sync", "syncing"), ("file", "files")]);
    }
}
