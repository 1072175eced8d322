//! The offline generator: simulated known-item queries after Azzopardi, de Rijke & Balog
//! (SIGIR 2007). For each request it draws a query length, then terms from a term model of the
//! source chunk(s), optionally mixed with noise terms drawn from the whole collection.
//!
//! - `direct`: the most discriminative terms (tf·idf²), no noise.
//! - `paraphrase`: the chunk's rarest third of terms is off limits; terms drawn by in-chunk
//!   popularity (tf), with noise: a harder, less lexical query.
//! - `multi_hop`: discriminative terms that only the first chunk has plus terms that only the
//!   second has, so neither chunk alone matches the query.
//! - `no_answer`: popular terms of a chunk plus one word that occurs nowhere in the corpus
//!   (verified in the index), which names what the corpus cannot answer.

use super::terms::{TermModel, is_query_word};
use super::{Draft, Failure, Generated, Generator, Request};
use crate::error::Result;
use crate::index::{ChunkIndex, TermStat};
use crate::progress::Stage;
use crate::record::{Chunk, QueryType};
use crate::rng::{Rng, stream};
use rand::Rng as _;
use rand::seq::IndexedRandom;
use std::ops::RangeInclusive;

/// Candidate absent words, one per line (`#` starts a comment).
const ABSENT_WORDS: &str = include_str!("absent_terms.txt");

/// Per-type settings: query length range and per-term noise probability.
struct Shape {
    length: RangeInclusive<usize>,
    noise: f64,
}

fn shape(query_type: QueryType) -> Shape {
    match query_type {
        QueryType::Direct => Shape { length: 2..=5, noise: 0.0 },
        QueryType::Paraphrase => Shape { length: 3..=6, noise: 0.2 },
        QueryType::MultiHop => Shape { length: 2..=3, noise: 0.0 },
        QueryType::NoAnswer => Shape { length: 2..=3, noise: 0.0 },
    }
}

/// Simulated known-item queries, no network.
pub struct OfflineGenerator<'a> {
    index: &'a ChunkIndex,
    chunks: &'a [Chunk],
    absent: Vec<String>,
    seed: u64,
}

impl<'a> OfflineGenerator<'a> {
    /// A generator over `chunks` (indexed in `index`).
    ///
    /// # Errors
    /// [`crate::Error::Index`] when the absent-word check fails.
    pub fn new(index: &'a ChunkIndex, chunks: &'a [Chunk], seed: u64) -> Result<Self> {
        let mut absent = Vec::new();
        for word in ABSENT_WORDS.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
            if let [term] = index.analyzer().terms(word).as_slice() {
                if index.doc_freq(term)? == 0 {
                    absent.push(word.to_owned());
                }
            }
        }
        Ok(Self { index, chunks, absent, seed })
    }

    fn write(&self, request: &Request) -> Result<std::result::Result<(String, Option<String>), String>> {
        let ids: Vec<&str> = request.sources.iter().map(|&c| self.chunks[c].id.as_str()).collect();
        let mut rng = stream(self.seed, &format!("offline/{}/{}", request.query_type, ids.join("+")));
        let shape = shape(request.query_type);
        let model = |c: usize, discriminative: bool| -> Result<TermModel> {
            let stats = self.index.term_stats(&self.chunks[c].text)?;
            Ok(TermModel::new(self.index, stats, discriminative))
        };
        let first = request.sources.first().copied().unwrap_or_default();
        let words = match request.query_type {
            QueryType::Direct => draw(&model(first, true)?, &shape, &mut rng),
            QueryType::Paraphrase => self.paraphrase(model(first, false)?, &shape, &mut rng),
            QueryType::MultiHop => {
                let second = request.sources.get(1).copied().unwrap_or(first);
                self.multi_hop(model(first, true)?, model(second, true)?, &shape, &mut rng)
            }
            QueryType::NoAnswer => return Ok(self.no_answer(&model(first, false)?, &shape, &mut rng)),
        };
        let words = words.map(|w| self.add_noise(w, shape.noise, &mut rng));
        Ok(words.map(|w| (w.join(" "), None)))
    }

    fn paraphrase(&self, model: TermModel, shape: &Shape, rng: &mut Rng) -> std::result::Result<Vec<String>, String> {
        let mut by_rarity: Vec<&TermStat> = model.top(usize::MAX);
        by_rarity.sort_by(|a, b| a.df.cmp(&b.df).then_with(|| a.term.cmp(&b.term)));
        let rare: Vec<String> = by_rarity.iter().take(model.len().div_ceil(3)).map(|s| s.term.clone()).collect();
        let common = model.filtered(|s| !rare.contains(&s.term));
        if common.len() < 2 {
            return Err("chunk has too few common terms for a paraphrase".to_owned());
        }
        draw(&common, shape, rng)
    }

    fn multi_hop(&self, a: TermModel, b: TermModel, shape: &Shape, rng: &mut Rng) -> std::result::Result<Vec<String>, String> {
        let only_a = a.clone().filtered(|s| !b.contains(&s.term));
        let only_b = b.filtered(|s| !a.contains(&s.term));
        if only_a.len() == 0 || only_b.len() == 0 {
            return Err("the two chunks share all their terms".to_owned());
        }
        let mut words = draw(&only_a, shape, rng)?;
        words.extend(draw(&only_b, shape, rng)?);
        Ok(words)
    }

    fn no_answer(&self, model: &TermModel, shape: &Shape, rng: &mut Rng) -> std::result::Result<(String, Option<String>), String> {
        let absent = self
            .absent
            .choose(rng)
            .ok_or("every built-in absent word occurs in the corpus")?
            .clone();
        let mut words = draw(model, shape, rng)?;
        let at = rng.random_range(0..=words.len());
        words.insert(at, absent.clone());
        Ok((words.join(" "), Some(absent)))
    }

    /// Replaces each word, with probability `noise`, by a word drawn from the collection model:
    /// a random token of a random chunk (chunks are of similar size, so this approximates
    /// drawing by collection frequency).
    fn add_noise(&self, mut words: Vec<String>, noise: f64, rng: &mut Rng) -> Vec<String> {
        for word in &mut words {
            if rng.random::<f64>() < noise {
                let chunk = &self.chunks[rng.random_range(0..self.chunks.len())];
                let tokens = self.index.analyzer().tokens(&chunk.text);
                let words: Vec<&str> = tokens.iter().map(|t| t.surface.as_str()).filter(|w| is_query_word(w)).collect();
                if let Some(noise) = words.choose(rng) {
                    *word = (*noise).to_owned();
                }
            }
        }
        words
    }
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
    fn name(&self) -> &str {
        "offline"
    }

    fn generate(&mut self, requests: &[Request], progress: &Stage) -> Result<Generated> {
        let mut generated = Generated::default();
        for (i, request) in requests.iter().enumerate() {
            match self.write(request)? {
                Ok((text, absent_term)) => generated.drafts.push(Draft { request: i, text, absent_term }),
                Err(reason) => generated.failures.push(Failure { request: i, reason }),
            }
            progress.inc(1);
        }
        Ok(generated)
    }
}
