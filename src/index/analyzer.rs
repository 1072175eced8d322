//! The text analyzer shared by indexing, searching and every term statistic, so that a term the
//! generator counts is exactly a term BM25 scores.

use tantivy::tokenizer::{
    Language, LowerCaser, RemoveLongFilter, SimpleTokenizer, Stemmer, StopWordFilter, TextAnalyzer,
};

/// Name under which the analyzer is registered in the index.
pub(crate) const NAME: &str = "qrelgen_en_v1";

/// One analyzed token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    /// The indexed term (lower-cased, stemmed).
    pub term: String,
    /// The word as written, lower-cased.
    pub surface: String,
}

/// English analyzer: words, lower-cased, stop words removed, Snowball-stemmed.
#[derive(Clone)]
pub struct Analyzer(TextAnalyzer);

impl Default for Analyzer {
    fn default() -> Self {
        let mut builder = TextAnalyzer::builder(SimpleTokenizer::default())
            .filter(RemoveLongFilter::limit(40))
            .filter(LowerCaser)
            .dynamic();
        if let Some(stop_words) = StopWordFilter::new(Language::English) {
            builder = builder.filter_dynamic(stop_words);
        }
        Self(builder.filter_dynamic(Stemmer::new(Language::English)).build())
    }
}

impl Analyzer {
    /// The analyzed tokens of `text`, in order.
    #[must_use]
    pub fn tokens(&self, text: &str) -> Vec<Token> {
        let mut analyzer = self.0.clone();
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

    pub(crate) fn inner(&self) -> TextAnalyzer {
        self.0.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stems_lowercases_and_drops_stop_words() {
        let tokens = Analyzer::default().tokens("The Syncing of Files");
        let got: Vec<_> = tokens.iter().map(|t| (t.term.as_str(), t.surface.as_str())).collect();
        assert_eq!(got, [("sync", "syncing"), ("file", "files")]);
    }
}
