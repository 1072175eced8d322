//! The text analyzer shared by indexing, searching and every term statistic, so that a term the
//! generator counts is exactly a term BM25 scores.

use super::segment::{self, MixedTokenizer, Segmenter};
use tantivy::tokenizer::{
    Language, LowerCaser, RawTokenizer, RemoveLongFilter, Stemmer, StopWordFilter, TextAnalyzer, Tokenizer,
};

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
    /// The same filters over one word: each filter maps a token to at most one token by its
    /// text alone, so a word's term does not depend on the words around it.
    filters: TextAnalyzer,
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
        Self {
            inner: filtered(MixedTokenizer(segmenter)),
            filters: filtered(RawTokenizer::default()),
            segmenter,
        }
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

    /// The analyzed tokens of a chunk as the index holds it: its title's, then its text's.
    #[must_use]
    pub fn chunk_tokens(&self, title: &str, text: &str) -> Vec<Token> {
        let mut tokens = self.tokens(title);
        tokens.extend(self.tokens(text));
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

    /// The words of `text`, in order, before any filter: [`Analyzer::terms`] is their
    /// [`Analyzer::term`]s. Callers that analyse many texts map each distinct word once.
    #[must_use]
    pub fn words<'t>(&self, text: &'t str) -> Vec<&'t str> {
        segment::spans(text, self.segmenter).into_iter().map(|(from, to)| &text[from..to]).collect()
    }

    /// The indexed term of one word of [`Analyzer::words`]; `None` for a word the filters drop
    /// (a stop word, a word of 40 bytes or more).
    #[must_use]
    pub fn term(&self, word: &str) -> Option<String> {
        let mut filters = self.filters.clone();
        let mut stream = filters.token_stream(word);
        stream.next().map(|token| token.text.clone())
    }

    pub(crate) fn inner(&self) -> TextAnalyzer {
        self.inner.clone()
    }
}

/// An [`Analyzer`] that remembers the term of each distinct word it met, for callers that
/// analyse many texts: the filters (the stemmer above all) run once per word, not once per
/// occurrence.
pub struct WordTerms<'a> {
    analyzer: &'a Analyzer,
    /// Each word met, and its term (`None`: a word without one).
    known: foldhash::HashMap<String, Option<String>>,
}

impl<'a> WordTerms<'a> {
    /// No word known yet.
    #[must_use]
    pub fn new(analyzer: &'a Analyzer) -> Self {
        Self { analyzer, known: foldhash::HashMap::default() }
    }

    /// Calls `each` with the term and the word as written of every token of `text`, in order,
    /// with repeats: the tokens of [`Analyzer::tokens`] (whose surface is the word, lower-cased).
    pub fn each(&mut self, text: &str, mut each: impl FnMut(&str, &str)) {
        for word in self.analyzer.words(text) {
            if !self.known.contains_key(word) {
                self.known.insert(word.to_owned(), self.analyzer.term(word));
            }
            if let Some(Some(term)) = self.known.get(word) {
                each(term, word);
            }
        }
    }
}

/// `tokenizer`'s tokens, cut at 40 bytes, lower-cased, English stop words removed, English
/// words Snowball-stemmed.
fn filtered<T: Tokenizer>(tokenizer: T) -> TextAnalyzer {
    let mut builder =
        TextAnalyzer::builder(tokenizer).filter(RemoveLongFilter::limit(40)).filter(LowerCaser).dynamic();
    if let Some(stop_words) = StopWordFilter::new(Language::English) {
        builder = builder.filter_dynamic(stop_words);
    }
    builder.filter_dynamic(Stemmer::new(Language::English)).build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_remembered_give_the_tokens_of_the_analyzer() {
        let texts = [
            "The Uploads stopped: 配额已满时 uploads 会暂停, a an the HS-4012 running runs",
            "RUNNING runs run, Running again: the same words, remembered",
            "averyverylongidentifierthatisfarlongerthanfortybytesinall ÉCOLES",
        ];
        for analyzer in [Analyzer::new(Segmenter::Jieba), Analyzer::new(Segmenter::Bigram)] {
            let mut remembered = WordTerms::new(&analyzer);
            for text in texts {
                let mut tokens = Vec::new();
                remembered.each(text, |term, word| {
                    tokens.push(Token { term: term.to_owned(), surface: word.to_lowercase() });
                });
                assert_eq!(tokens, analyzer.tokens(text), "{text}");
            }
            assert!(remembered.known.len() > 10);
        }
    }

    #[test]
    fn handles_chinese_and_mixed_text() {
        let terms = Analyzer::default().terms("配额已满时 Uploads 会暂停");
        assert!(terms.contains(&"配额".to_owned()) && terms.contains(&"upload".to_owned()), "{terms:?}");
    }

    #[test]
    fn the_terms_of_a_text_are_the_terms_of_its_words() {
        let texts = [
            "The Syncing of Files: RUNNING harbor-sync --pause, and ÉCOLES élèves",
            "配额已满时 Uploads 会暂停，中华人民共和国的数据库 mirror 配置",
            "averyverylongidentifierthatisfarlongerthanfortybytesinall short",
            "",
        ];
        for segmenter in [Segmenter::Jieba, Segmenter::Bigram] {
            let analyzer = Analyzer::new(segmenter);
            for text in texts {
                let by_word: Vec<String> =
                    analyzer.words(text).into_iter().filter_map(|w| analyzer.term(w)).collect();
                assert_eq!(by_word, analyzer.terms(text), "{segmenter:?}: {text}");
            }
        }
        assert_eq!(Analyzer::default().term("the"), None);
        assert_eq!(Analyzer::default().term("Syncing").as_deref(), Some("sync"));
        assert_eq!(
            Analyzer::default().term("averyverylongidentifierthatisfarlongerthanfortybytesinall"),
            None
        );
    }

    proptest::proptest! {
        /// Any text, any script: analysing word by word gives the text's terms.
        #[test]
        fn word_by_word_analysis_is_the_analysis(text in "[a-zA-Zé 0-9,.中文数据库配置同步的是了-]{0,60}") {
            for segmenter in [Segmenter::Jieba, Segmenter::Bigram] {
                let analyzer = Analyzer::new(segmenter);
                let by_word: Vec<String> =
                    analyzer.words(&text).into_iter().filter_map(|w| analyzer.term(w)).collect();
                proptest::prop_assert_eq!(by_word, analyzer.terms(&text));
            }
        }
    }

    #[test]
    fn stems_lowercases_and_drops_stop_words() {
        let tokens = Analyzer::default().tokens("The Syncing of Files");
        let got: Vec<_> = tokens.iter().map(|t| (t.term.as_str(), t.surface.as_str())).collect();
        assert_eq!(got, [("sync", "syncing"), ("file", "files")]);
    }
}
