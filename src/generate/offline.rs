//! The offline generator: simulated known-item queries after Azzopardi, de Rijke & Balog
//! (SIGIR 2007). For each request it draws a query length, then terms from a term model of the
//! source chunk(s), optionally mixed with noise terms drawn from the whole collection.
//!
//! - `direct`: the most discriminative terms (tf·idf²), no noise.
//! - `paraphrase`: three terms of the chunk (its rarest third off limits), the other two or
//!   three from the vocabulary of its neighbours (the chunks its own terms retrieve): a harder,
//!   less lexical query that shares at most 60 % of its terms with the source.
//! - `multi_hop`: discriminative terms that only the first chunk has plus terms that only the
//!   second has, so neither chunk alone matches the query.
//! - `no_answer`: popular terms of a chunk plus one word that occurs nowhere in the corpus
//!   (verified in the index), which names what the corpus cannot answer.

use super::terms::{TermModel, is_query_word};
use super::{Draft, Failure, Generated, Generator, Request};
use crate::error::Result;
use crate::index::{ChunkIndex, TermStat};
use crate::progress::Stage;
use crate::record::{FailureKind, QueryType};
use crate::rng::{Rng, stream};
use crate::text::{Language, is_cjk};
use rand::Rng as _;
use rand::seq::{IndexedRandom, SliceRandom};
use std::ops::RangeInclusive;

/// Candidate absent words per language, one per line (`#` starts a comment).
const ABSENT_WORDS_EN: &str = include_str!("absent_terms.txt");
const ABSENT_WORDS_ZH: &str = include_str!("absent_terms_zh.txt");

/// Source terms in an offline paraphrase; the rest come from the source's neighbours.
const PARAPHRASE_ANCHORS: usize = 3;
/// Discriminative source terms searched to find its neighbours.
const NEIGHBOUR_PROBE: usize = 8;
/// Neighbouring chunks whose vocabulary a paraphrase borrows.
const NEIGHBOURS: usize = 3;

/// Per-type settings: query length range and per-term noise probability.
struct Shape {
    length: RangeInclusive<usize>,
    noise: f64,
}

fn shape(query_type: QueryType) -> Shape {
    match query_type {
        QueryType::Direct => Shape { length: 2..=5, noise: 0.0 },
        QueryType::Paraphrase => Shape { length: 5..=6, noise: 0.0 },
        QueryType::MultiHop | QueryType::NoAnswer => Shape { length: 2..=3, noise: 0.0 },
    }
}

/// Simulated known-item queries, no network.
pub struct OfflineGenerator<'a> {
    index: &'a ChunkIndex,
    absent: Vec<String>,
    language: Language,
    seed: u64,
}

impl<'a> OfflineGenerator<'a> {
    /// A generator over the chunks of `index`, writing `no_answer` queries' absent word in
    /// `language`.
    ///
    /// # Errors
    /// [`crate::Error::Index`] when the absent-word check fails.
    pub fn new(index: &'a ChunkIndex, seed: u64, language: Language) -> Result<Self> {
        let words = match language {
            Language::En => ABSENT_WORDS_EN,
            Language::Zh => ABSENT_WORDS_ZH,
        };
        let mut absent = Vec::new();
        for word in words.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
            if let [term] = index.analyzer().terms(word).as_slice()
                && index.doc_freq(term)? == 0
            {
                absent.push(word.to_owned());
            }
        }
        Ok(Self { index, absent, language, seed })
    }

    fn write(&self, request: &Request) -> Result<std::result::Result<(String, Option<String>), String>> {
        let ids: Vec<&str> = request.sources.iter().map(|&c| self.index.meta(c).id.as_str()).collect();
        let mut rng = stream(self.seed, &format!("offline/{}/{}", request.query_type, ids.join("+")));
        let shape = shape(request.query_type);
        let model = |c: usize, discriminative: bool| -> Result<TermModel> {
            let stats = self.index.term_stats(&self.index.text(c)?)?;
            Ok(self.in_language(TermModel::new(self.index, stats, discriminative)))
        };
        let first = request.sources.first().copied().unwrap_or_default();
        let words = match request.query_type {
            QueryType::Direct => draw(&model(first, true)?, &shape, &mut rng),
            QueryType::Paraphrase => {
                let source = model(first, true)?;
                let neighbours = self.neighbour_model(first, &source)?;
                paraphrase(source, &neighbours, &shape, &mut rng)
            }
            QueryType::MultiHop => {
                let second = request.sources.get(1).copied().unwrap_or(first);
                multi_hop(&model(first, true)?, &model(second, true)?, &shape, &mut rng)
            }
            QueryType::NoAnswer => return Ok(self.no_answer(&model(first, false)?, &shape, &mut rng)),
        };
        match words {
            Ok(words) => Ok(Ok((self.add_noise(words, shape.noise, &mut rng)?.join(" "), None))),
            Err(reason) => Ok(Err(reason)),
        }
    }

    fn no_answer(
        &self,
        model: &TermModel,
        shape: &Shape,
        rng: &mut Rng,
    ) -> std::result::Result<(String, Option<String>), String> {
        let absent =
            self.absent.choose(rng).ok_or("every built-in absent word occurs in the corpus")?.clone();
        let mut words = draw(model, shape, rng)?;
        let at = rng.random_range(0..=words.len());
        words.insert(at, absent.clone());
        Ok((words.join(" "), Some(absent)))
    }

    /// The vocabulary of a chunk's neighbours: terms of the chunks its most discriminative
    /// terms retrieve, weighted by tf·idf², without the chunk's own terms (`own`, its
    /// discriminative model).
    fn neighbour_model(&self, chunk: usize, own: &TermModel) -> Result<TermModel> {
        let terms: Vec<String> = own.top(NEIGHBOUR_PROBE).into_iter().map(|s| s.term.clone()).collect();
        let hits = self.index.search_terms(&terms, NEIGHBOURS + 1)?;
        let mut text = String::new();
        for hit in hits.iter().filter(|h| h.chunk != chunk).take(NEIGHBOURS) {
            text.push_str(&self.index.text(hit.chunk)?);
            text.push('\n');
        }
        let model = TermModel::new(self.index, self.index.term_stats(&text)?, true);
        Ok(self.in_language(model.filtered(|s| !own.contains(&s.term))))
    }

    /// The model's terms in the generator's language (Chinese terms for Chinese, others for
    /// English), when the chunk has at least two of them; otherwise all its terms.
    fn in_language(&self, model: TermModel) -> TermModel {
        let chinese = |s: &TermStat| s.surface.chars().any(is_cjk);
        let want_chinese = self.language == Language::Zh;
        let narrowed = model.clone().filtered(|s| chinese(s) == want_chinese);
        if narrowed.len() >= 2 { narrowed } else { model }
    }

    /// Replaces each word, with probability `noise`, by a word drawn from the collection model:
    /// a random token of a random chunk (chunks are of similar size, so this approximates
    /// drawing by collection frequency).
    fn add_noise(&self, mut words: Vec<String>, noise: f64, rng: &mut Rng) -> Result<Vec<String>> {
        for word in &mut words {
            if rng.random::<f64>() < noise {
                let text = self.index.text(rng.random_range(0..self.index.len()))?;
                let tokens = self.index.analyzer().tokens(&text);
                let candidates: Vec<&str> =
                    tokens.iter().map(|t| t.surface.as_str()).filter(|w| is_query_word(w)).collect();
                if let Some(noise) = candidates.choose(rng) {
                    (*noise).clone_into(word);
                }
            }
        }
        Ok(words)
    }
}

/// Three anchor terms of the chunk (its rarest third excluded, drawn by tf·idf² so they still
/// find it), the other two or three in the words of the chunk's neighbours: a reworded query
/// that shares at most 60 % of its terms with the source.
fn paraphrase(
    model: TermModel,
    neighbours: &TermModel,
    shape: &Shape,
    rng: &mut Rng,
) -> std::result::Result<Vec<String>, String> {
    let mut by_rarity: Vec<&TermStat> = model.top(usize::MAX);
    by_rarity.sort_by(|a, b| a.df.cmp(&b.df).then_with(|| a.term.cmp(&b.term)));
    let rare: Vec<String> = by_rarity.iter().take(model.len().div_ceil(3)).map(|s| s.term.clone()).collect();
    let common = model.filtered(|s| !rare.contains(&s.term));
    if common.len() < PARAPHRASE_ANCHORS || neighbours.len() < PARAPHRASE_ANCHORS {
        return Err("chunk has too few common terms or neighbours for a paraphrase".to_owned());
    }
    let length = rng.random_range(shape.length.clone());
    let mut words: Vec<String> =
        common.draw(PARAPHRASE_ANCHORS, rng).into_iter().map(|s| s.surface.clone()).collect();
    words.extend(neighbours.draw(length - PARAPHRASE_ANCHORS, rng).into_iter().map(|s| s.surface.clone()));
    words.shuffle(rng);
    Ok(words)
}

/// Terms only the first chunk has, then terms only the second has.
fn multi_hop(
    a: &TermModel,
    b: &TermModel,
    shape: &Shape,
    rng: &mut Rng,
) -> std::result::Result<Vec<String>, String> {
    let only_a = a.clone().filtered(|s| !b.contains(&s.term));
    let only_b = b.clone().filtered(|s| !a.contains(&s.term));
    if only_a.is_empty() || only_b.is_empty() {
        return Err("the two chunks share all their terms".to_owned());
    }
    let mut words = draw(&only_a, shape, rng)?;
    words.extend(draw(&only_b, shape, rng)?);
    Ok(words)
}

/// Draws a query length from the shape, then that many distinct terms from the model.
fn draw(model: &TermModel, shape: &Shape, rng: &mut Rng) -> std::result::Result<Vec<String>, String> {
    let length = rng.random_range(shape.length.clone()).min(model.len());
    if length == 0 {
        return Err("chunk has no content terms".to_owned());
    }
    Ok(model.draw(length, rng).into_iter().map(|s| s.surface.clone()).collect())
}

impl Generator for OfflineGenerator<'_> {
    fn name(&self) -> &'static str {
        "offline"
    }

    fn generate(&mut self, requests: &[Request], progress: &Stage) -> Result<Generated> {
        let mut generated = Generated::default();
        for (i, request) in requests.iter().enumerate() {
            match self.write(request)? {
                Ok((text, absent_term)) => generated.drafts.push(Draft {
                    request: i,
                    text,
                    absent_term,
                    style: None,
                    evidence: Vec::new(),
                    answer: None,
                }),
                Err(reason) => generated.failures.push(Failure {
                    request: i,
                    kind: FailureKind::TooFewTerms,
                    reason,
                    reply: None,
                }),
            }
            progress.inc(1);
        }
        Ok(generated)
    }
}
