//! The round trip's term cache: each chunk's analysed terms, kept as ids into one vocabulary
//! shared by the filter's threads, a query's terms as the same ids, and the measures on them
//! (term overlap with the sources, whether each hop of a multi-hop query contributes).

use crate::error::Result;
use crate::generate::is_query_word;
use crate::index::{Analyzer, ChunkIndex, Token};
use foldhash::HashMap;
use std::collections::HashSet;
use std::sync::{Arc, PoisonError, RwLock};

/// A chunk's analysed terms as ids of the [`TermCache`] vocabulary: in order (for shared runs)
/// and as a sorted set (for overlap).
pub(super) struct SourceTerms {
    pub(super) sequence: Vec<u32>,
    set: Vec<u32>,
}

impl SourceTerms {
    pub(super) fn contains(&self, term: u32) -> bool {
        self.set.binary_search(&term).is_ok()
    }
}

/// A query's analysed terms as vocabulary ids: in order, a term no chunk analysed so far has
/// being [`UNKNOWN`] (it matches no source); and its distinct content terms, `None` for unknown
/// ones.
pub(super) struct QueryTerms {
    pub(super) sequence: Vec<u32>,
    pub(super) content: Vec<Option<u32>>,
}

/// The id of a query term that is in no analysed chunk.
const UNKNOWN: u32 = u32::MAX;

/// Each chunk's analysed terms, computed on its first use in the run and kept as ids into one
/// vocabulary, a few bytes per term; only the chunks used take room (a round trip uses a few
/// thousand of a corpus's chunks). Shared by the threads of the round trip.
///
/// Stemming is most of the cost of analysing a text, and the chunks of a corpus share their
/// words: each distinct word is analysed once ([`Analyzer::term`]), and a chunk's terms are the
/// ids of its words ([`Analyzer::words`]), which are exactly the ids of its terms.
pub(super) struct TermCache {
    vocabulary: RwLock<Vocabulary>,
    /// By chunk position.
    chunks: RwLock<HashMap<usize, Arc<SourceTerms>>>,
}

/// Terms and words seen so far.
#[derive(Default)]
struct Vocabulary {
    /// The id of each term.
    terms: HashMap<String, u32>,
    /// The id of each word's term: `None` for a word without one (a stop word).
    words: HashMap<String, Option<u32>>,
}

/// A word of a chunk not in the [`Vocabulary`] yet.
const NEW_WORD: u32 = u32::MAX;
/// A word of a chunk without a term.
const NO_TERM: u32 = u32::MAX - 1;

impl TermCache {
    pub(super) fn new() -> Self {
        Self { vocabulary: RwLock::default(), chunks: RwLock::default() }
    }

    /// The terms of the chunk at `position`, analysed on first use.
    pub(super) fn chunk(&self, index: &ChunkIndex, position: usize) -> Result<Arc<SourceTerms>> {
        if let Some(terms) = self.chunks.read().unwrap_or_else(PoisonError::into_inner).get(&position) {
            return Ok(Arc::clone(terms));
        }
        let text = index.text(position)?;
        let words = index.analyzer().words(&text);
        // Each word's id, new words marked, words without a term marked apart.
        let mut ids: Vec<u32> = {
            let vocabulary = self.vocabulary.read().unwrap_or_else(PoisonError::into_inner);
            words
                .iter()
                .map(|w| vocabulary.words.get(*w).map_or(NEW_WORD, |id| id.unwrap_or(NO_TERM)))
                .collect()
        };
        if ids.contains(&NEW_WORD) {
            self.learn(index.analyzer(), &words, &mut ids);
        }
        let sequence: Vec<u32> = ids.into_iter().filter(|&id| id != NO_TERM).collect();
        let mut set = sequence.clone();
        set.sort_unstable();
        set.dedup();
        // Two threads may analyse the same chunk at once: they get the same ids, either is kept.
        let mut chunks = self.chunks.write().unwrap_or_else(PoisonError::into_inner);
        let terms = chunks.entry(position).or_insert_with(|| Arc::new(SourceTerms { sequence, set }));
        Ok(Arc::clone(terms))
    }

    /// Analyses the words marked new in `ids` (without holding the vocabulary), adds them to
    /// the vocabulary and puts their ids in `ids`.
    fn learn(&self, analyzer: &Analyzer, words: &[&str], ids: &mut [u32]) {
        let new: HashSet<&str> =
            words.iter().zip(&*ids).filter(|(_, id)| **id == NEW_WORD).map(|(w, _)| *w).collect();
        let new: Vec<(&str, Option<String>)> = new.into_iter().map(|w| (w, analyzer.term(w))).collect();
        let mut vocabulary = self.vocabulary.write().unwrap_or_else(PoisonError::into_inner);
        let Vocabulary { terms, words: known } = &mut *vocabulary;
        for (word, term) in new {
            let id = term.map(|term| {
                let next = terms.len() as u32;
                *terms.entry(term).or_insert(next)
            });
            // Another thread may have learnt the word meanwhile: the same term, the same id.
            known.entry(word.to_owned()).or_insert(id);
        }
        for (word, id) in words.iter().zip(ids).filter(|(_, id)| **id == NEW_WORD) {
            *id = known.get(*word).copied().flatten().unwrap_or(NO_TERM);
        }
    }

    /// The vocabulary ids of `terms`, `None` for a term of no analysed chunk.
    pub(super) fn ids<'t>(&self, terms: impl IntoIterator<Item = &'t String>) -> Vec<Option<u32>> {
        let vocabulary = self.vocabulary.read().unwrap_or_else(PoisonError::into_inner);
        terms.into_iter().map(|t| vocabulary.terms.get(t).copied()).collect()
    }

    /// A query's terms, looked up once its sources are analysed.
    pub(super) fn query(&self, tokens: &[Token]) -> QueryTerms {
        let sequence = self.ids(tokens.iter().map(|t| &t.term)).into_iter().map(|id| id.unwrap_or(UNKNOWN));
        let content = content_terms(tokens);
        QueryTerms { sequence: sequence.collect(), content: self.ids(&content) }
    }
}

/// The distinct content terms of a query's tokens: the terms of words a query would carry
/// (question words and other stop words left out).
fn content_terms(tokens: &[Token]) -> HashSet<String> {
    tokens.iter().filter(|t| is_query_word(&t.surface)).map(|t| t.term.clone()).collect()
}

/// Share of the query's distinct content terms found in the sources (0 for a query without
/// content terms).
pub(super) fn overlap(content: &[Option<u32>], sources: &[Arc<SourceTerms>]) -> f64 {
    if content.is_empty() {
        return 0.0;
    }
    let shared = content.iter().flatten().filter(|&&t| sources.iter().any(|s| s.contains(t))).count();
    shared as f64 / content.len() as f64
}

/// Whether every hop has a content term of the query that no other hop has.
pub(super) fn each_hop_contributes(content: &[Option<u32>], hops: &[Arc<SourceTerms>]) -> bool {
    hops.len() >= 2
        && (0..hops.len()).all(|i| {
            content.iter().flatten().any(|&t| {
                hops[i].contains(t) && hops.iter().enumerate().all(|(j, h)| j == i || !h.contains(t))
            })
        })
}
