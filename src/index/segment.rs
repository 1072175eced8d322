//! A tantivy tokenizer for Chinese, English and mixed text: runs of CJK ideographs are segmented
//! into words by jieba (search mode, so long words also yield their parts) or, with
//! [`Segmenter::Bigram`], into overlapping character pairs; everything else is split into
//! alphanumeric words as tantivy's simple tokenizer does. Punctuation of both scripts separates.

use crate::text::is_cjk;
use jieba_rs::Jieba;
use serde::{Deserialize, Serialize};
use std::sync::{Arc, PoisonError, RwLock};
use tantivy::tokenizer::{Token, TokenStream, Tokenizer};

/// jieba's dictionary (about 32 MiB in memory), loaded on first use: English-only corpora never
/// pay for it, and an English corpus with a few Chinese names pays for it only while the stages
/// that read every chunk run ([`release_dictionary`]).
static JIEBA: Dictionary = Dictionary::new();

/// A jieba dictionary loaded when a text first needs it, and dropped on request (loaded again,
/// the same, if a text needs it later).
struct Dictionary {
    loaded: RwLock<Option<Arc<Jieba>>>,
}

impl Dictionary {
    const fn new() -> Self {
        Self { loaded: RwLock::new(None) }
    }

    /// The dictionary, loaded if it is not.
    fn get(&self) -> Arc<Jieba> {
        if let Some(jieba) = &*self.loaded.read().unwrap_or_else(PoisonError::into_inner) {
            return Arc::clone(jieba);
        }
        let mut loaded = self.loaded.write().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(loaded.get_or_insert_with(|| Arc::new(Jieba::new())))
    }

    /// Drops the dictionary (its memory goes once no text is being cut with it).
    fn release(&self) {
        *self.loaded.write().unwrap_or_else(PoisonError::into_inner) = None;
    }

    #[cfg(test)]
    fn is_loaded(&self) -> bool {
        self.loaded.read().unwrap_or_else(PoisonError::into_inner).is_some()
    }
}

/// Drops jieba's dictionary if it is loaded: for a corpus with little Chinese once every chunk
/// has been analysed. A later text with Chinese loads it again, so cuts stay the same.
pub fn release_dictionary() {
    JIEBA.release();
}

/// How runs of Chinese characters become terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(strum::IntoStaticStr, strum::VariantArray)]
#[strum(serialize_all = "snake_case")]
pub enum Segmenter {
    /// Dictionary words (jieba-rs, search mode).
    #[default]
    Jieba,
    /// Overlapping character bigrams: no dictionary, robust for any vocabulary.
    Bigram,
}

impl Segmenter {
    /// The label used in flags and the index fingerprint.
    #[must_use]
    pub fn label(self) -> &'static str {
        self.into()
    }
}

impl Segmenter {
    /// The dictionary words of the Chinese runs of `text` (jieba's default mode with HMM for
    /// unknown words); `None` for [`Segmenter::Bigram`], which has no words.
    #[must_use]
    pub fn dictionary_words(self, text: &str) -> Option<std::collections::HashSet<String>> {
        match self {
            Self::Bigram => None,
            Self::Jieba => Some(
                runs(text)
                    .into_iter()
                    .filter(|(_, _, kind)| *kind == Kind::Cjk)
                    .flat_map(|(_, run, _)| {
                        JIEBA
                            .get()
                            .cut(run, true)
                            .into_iter()
                            .map(|token| token.word.to_owned())
                            .collect::<Vec<_>>()
                    })
                    .collect(),
            ),
        }
    }
}

/// The tokenizer.
#[derive(Debug, Clone, Copy)]
pub struct MixedTokenizer(pub Segmenter);

impl Tokenizer for MixedTokenizer {
    type TokenStream<'a> = VecTokenStream;

    fn token_stream<'a>(&'a mut self, text: &'a str) -> VecTokenStream {
        VecTokenStream { tokens: tokens(text, self.0), next: 0 }
    }
}

/// Tokens computed up front.
pub struct VecTokenStream {
    tokens: Vec<Token>,
    next: usize,
}

impl TokenStream for VecTokenStream {
    fn advance(&mut self) -> bool {
        self.next += 1;
        self.next <= self.tokens.len()
    }

    fn token(&self) -> &Token {
        &self.tokens[self.next - 1]
    }

    fn token_mut(&mut self) -> &mut Token {
        &mut self.tokens[self.next - 1]
    }
}

/// The kind of a character for splitting into runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Cjk,
    Word,
    Separator,
}

fn kind(c: char) -> Kind {
    if is_cjk(c) {
        Kind::Cjk
    } else if c.is_alphanumeric() {
        Kind::Word
    } else {
        Kind::Separator
    }
}

fn tokens(text: &str, segmenter: Segmenter) -> Vec<Token> {
    spans(text, segmenter)
        .into_iter()
        .enumerate()
        .map(|(position, (from, to))| Token {
            offset_from: from,
            offset_to: to,
            position,
            text: text[from..to].to_owned(),
            position_length: 1,
        })
        .collect()
}

/// The byte spans of the words of `text`, in order: what the tokenizer makes tokens of.
pub(super) fn spans(text: &str, segmenter: Segmenter) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    // Fetched once per text, at its first Chinese run.
    let mut jieba: Option<Arc<Jieba>> = None;
    for (start, run, kind) in runs(text) {
        match kind {
            Kind::Word => out.push((start, start + run.len())),
            Kind::Cjk => match segmenter {
                Segmenter::Jieba => {
                    let words = jieba.get_or_insert_with(|| JIEBA.get()).cut_for_search(run, true);
                    out.extend(words.iter().map(|w| (start + w.byte_start, start + w.byte_end)));
                }
                Segmenter::Bigram => {
                    let bounds: Vec<usize> = run.char_indices().map(|(i, _)| i).chain([run.len()]).collect();
                    if bounds.len() == 2 {
                        out.push((start, start + run.len()));
                    }
                    out.extend(bounds.windows(3).map(|pair| (start + pair[0], start + pair[2])));
                }
            },
            Kind::Separator => {}
        }
    }
    out
}

/// Maximal runs of characters of one kind: `(byte offset, text, kind)`.
fn runs(text: &str) -> Vec<(usize, &str, Kind)> {
    let mut runs = Vec::new();
    let mut current: Option<(usize, Kind)> = None;
    for (i, c) in text.char_indices() {
        let k = kind(c);
        match current {
            Some((_, kind)) if kind == k => {}
            Some((start, kind)) => {
                runs.push((start, &text[start..i], kind));
                current = Some((i, k));
            }
            None => current = Some((i, k)),
        }
    }
    if let Some((start, kind)) = current {
        runs.push((start, &text[start..], kind));
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str, segmenter: Segmenter) -> Vec<String> {
        tokens(text, segmenter).into_iter().map(|t| t.text).collect()
    }

    #[test]
    fn segments_chinese_and_keeps_english_words() {
        let got = words("运行 harbor sync 命令，同步文件夹。HS-4012", Segmenter::Jieba);
        for expected in ["运行", "harbor", "sync", "命令", "同步", "文件夹", "HS", "4012"] {
            assert!(got.iter().any(|w| w == expected), "{expected} missing from {got:?}");
        }
        assert!(!got.iter().any(|w| w.contains('，') || w.contains('。')), "{got:?}");
    }

    #[test]
    fn bigrams_overlap_and_offsets_point_into_the_text() {
        assert_eq!(words("同步文件", Segmenter::Bigram), ["同步", "步文", "文件"]);
        assert_eq!(words("库 a", Segmenter::Bigram), ["库", "a"]);
        let text = "配置 mirror 的方法";
        for token in tokens(text, Segmenter::Jieba) {
            assert_eq!(&text[token.offset_from..token.offset_to], token.text);
        }
    }

    #[test]
    fn a_released_dictionary_is_loaded_again_and_cuts_the_same() {
        let text = "运行 harbor sync 命令，同步文件夹。研究生命起源";
        let dictionary = Dictionary::new();
        assert!(!dictionary.is_loaded(), "loaded before any text needs it");
        let first: Vec<String> =
            dictionary.get().cut_for_search(text, true).into_iter().map(|t| t.word.to_owned()).collect();
        assert!(dictionary.is_loaded());
        dictionary.release();
        assert!(!dictionary.is_loaded(), "released");
        let again: Vec<String> =
            dictionary.get().cut_for_search(text, true).into_iter().map(|t| t.word.to_owned()).collect();
        assert_eq!(first, again);
        assert!(first.iter().any(|w| w == "文件夹"), "{first:?}");
        // The process-wide dictionary: released between two cuts, the tokens are the same.
        let before = tokens(text, Segmenter::Jieba);
        release_dictionary();
        assert_eq!(before, tokens(text, Segmenter::Jieba));
        assert_eq!(Segmenter::Jieba.dictionary_words(text), {
            release_dictionary();
            Segmenter::Jieba.dictionary_words(text)
        });
    }

    #[test]
    fn labels_are_serdes_names() {
        crate::testing::labels_are_serde_names(Segmenter::label);
    }
}
