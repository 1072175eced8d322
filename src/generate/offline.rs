//! The offline generator: simulated topical queries after Azzopardi, de Rijke & Balog (SIGIR
//! 2007). For each request it draws a query length, then terms from a term model of the source
//! chunk(s), optionally mixed with noise terms drawn from the whole collection.
//!
//! Answerable queries are topical, not known-item lookups: terms are weighted by tf × residual
//! IDF (words that concentrate in few chunks carry a topic; evenly spread filler weighs
//! nothing), drawn by rank (Zipf: the topic's main words most often, never only its rarest),
//! and written in their most common form in the corpus. Each comes with its topic: the chunks
//! close to its sources in the corpus's latent topic space ([`crate::topics::TopicSpace`]),
//! which are co-relevant, so a retriever that finds other chunks on the topic is not punished.
//!
//! - `direct`: topical terms of the chunk.
//! - `paraphrase`: three topical terms of the chunk (its rarest third off limits), the other two
//!   or three from the vocabulary of its topic neighbours: a less lexical query that shares at
//!   most 60 % of its terms with the source.
//! - `multi_hop`: discriminative terms (tf·idf²) that only the first chunk has plus terms that
//!   only the second has, so neither chunk alone matches the query.
//! - `no_answer`: popular terms of a chunk plus one word that occurs nowhere in the corpus
//!   (verified in the index), which names what the corpus cannot answer.

use super::terms::{TermModel, Weighting, is_query_word};
use super::{Draft, Failure, Generated, Generator, Request};
use crate::error::Result;
use crate::index::{ChunkIndex, TermStat};
use crate::progress::StageProgress;
use crate::record::{FailureKind, QueryType};
use crate::rng::{Rng, stream};
use crate::text::{Language, is_cjk};
use crate::topics::{CorpusModel, Probe};
use rand::Rng as _;
use rand::seq::{IndexedRandom, SliceRandom};
use std::collections::HashMap;
use std::ops::RangeInclusive;

/// Candidate absent words per language, one per line (`#` starts a comment).
const ABSENT_WORDS_EN: &str = include_str!("absent_terms.txt");
const ABSENT_WORDS_ZH: &str = include_str!("absent_terms_zh.txt");

/// Source terms in an offline paraphrase; the rest come from the source's neighbours.
const PARAPHRASE_ANCHORS: usize = 3;
/// Neighbouring chunks whose vocabulary a paraphrase borrows.
const NEIGHBOURS: usize = 3;
/// Requests whose neighbour searches are made together, in one scan of the topic space.
const REQUESTS_PER_SCAN: usize = 32;
/// Which chunks share an offline query's topic (and so are relevant to it).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct TopicConfig {
    /// At most this many chunks, the closest (`--topic-labels`); 0: none, and the query is
    /// graded as a known-item one (its sources only).
    pub labels: usize,
    /// A chunk is on a source's topic when their cosine in the topic space is at least this
    /// (`--topic-min-cosine`; 0.5 is an angle of 60° or less).
    pub min_cosine: f32,
}

impl Default for TopicConfig {
    fn default() -> Self {
        Self { labels: 50, min_cosine: 0.5 }
    }
}

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
    corpus: CorpusModel,
    topics: TopicConfig,
}

/// The draft of request `request`: its text, the absent term of a `no_answer` query, and the
/// chunks on the query's topic (answerable queries).
fn draft(request: usize, text: String, absent_term: Option<String>, topic: Option<Vec<usize>>) -> Draft {
    Draft { request, text, absent_term, topic, style: None, evidence: Vec::new(), answer: None }
}

impl<'a> OfflineGenerator<'a> {
    /// A generator over the chunks of `index`, writing `no_answer` queries' absent word in
    /// `language`, with the corpus's term statistics and topic space (`corpus`, the model of
    /// `index`'s chunks).
    ///
    /// # Errors
    /// [`crate::Error::Index`] when the absent-word check fails.
    pub fn new(
        index: &'a ChunkIndex,
        seed: u64,
        language: Language,
        topics: TopicConfig,
        corpus: CorpusModel,
    ) -> Result<Self> {
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
        Ok(Self { index, absent, language, seed, corpus, topics })
    }

    /// The draft of `request` (the `i`th), or why none could be written.
    fn write(&self, i: usize, request: &Request, near: &Near) -> Result<std::result::Result<Draft, String>> {
        let ids: Vec<String> =
            request.sources.iter().map(|&c| self.index.chunk_id_str(c).to_owned()).collect();
        let mut rng = stream(self.seed, &format!("offline/{}/{}", request.query_type, ids.join("+")));
        let shape = shape(request.query_type);
        let text = |c: usize| self.index.text(c);
        let topical = |t: &str| -> Result<TermModel> {
            Ok(self.in_language(TermModel::topical(self.index.term_stats(t)?, &self.corpus.terms), t))
        };
        let first = request.sources.first().copied().unwrap_or_default();
        let words = match request.query_type {
            QueryType::Direct => draw(&topical(&text(first)?)?, &shape, &mut rng),
            QueryType::Paraphrase => {
                let source = topical(&text(first)?)?;
                let neighbours = self.neighbour_model(first, &source, near)?;
                paraphrase(source, &neighbours, &shape, &mut rng)
            }
            QueryType::MultiHop => {
                // Discriminative terms: a hop's own words must pinpoint it, or the query finds
                // neither hop (topical ones seldom find both); written in the corpus's forms.
                let salient = |c: usize| -> Result<TermModel> {
                    let t = text(c)?;
                    let model =
                        TermModel::new(self.index, self.index.term_stats(&t)?, Weighting::Discriminative);
                    Ok(self.in_language(model.written_as(&self.corpus.terms), &t))
                };
                let second = request.sources.get(1).copied().unwrap_or(first);
                multi_hop(&salient(first)?, &salient(second)?, &shape, &mut rng)
            }
            QueryType::NoAnswer => {
                let t = text(first)?;
                let popular = self.in_language(
                    TermModel::new(self.index, self.index.term_stats(&t)?, Weighting::Popular),
                    &t,
                );
                return Ok(self
                    .no_answer(&popular, &shape, &mut rng)
                    .map(|(q, absent)| draft(i, q, Some(absent), None)));
            }
        };
        match words {
            Ok(words) => {
                let query = self.add_noise(words, shape.noise, &mut rng)?.join(" ");
                let topic =
                    (self.topics.labels > 0).then(|| self.topic(&request.sources, near)).transpose()?;
                Ok(Ok(draft(i, query, None, topic)))
            }
            Err(reason) => Ok(Err(reason)),
        }
    }

    /// The chunks on the topic of `sources`: those within the minimum cosine of any source in
    /// the topic space, closest first (ties by position), as many as the config allows, the
    /// sources left out.
    fn topic(&self, sources: &[usize], found: &Near) -> Result<Vec<usize>> {
        let labels = self.topics.labels;
        let mut near: Vec<(usize, f32)> = Vec::new();
        for probe in self.topic_probes(sources) {
            for (chunk, cosine) in found.get(&self.corpus, probe)? {
                match near.iter_mut().find(|(c, _)| *c == chunk) {
                    Some(entry) => entry.1 = entry.1.max(cosine),
                    None => near.push((chunk, cosine)),
                }
            }
        }
        near.retain(|(c, _)| !sources.contains(c));
        near.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        Ok(near.into_iter().take(labels).map(|(c, _)| c).collect())
    }

    /// The neighbour searches of a query's topic: each source's closest chunks.
    fn topic_probes(&self, sources: &[usize]) -> Vec<Probe> {
        let TopicConfig { labels, min_cosine } = self.topics;
        sources.iter().map(|&chunk| Probe { chunk, min_cosine, cap: labels + sources.len() }).collect()
    }

    /// The neighbour searches writing `request` may make (a request that fails makes fewer).
    fn probes(&self, request: &Request) -> Vec<Probe> {
        let mut probes = Vec::new();
        if request.query_type == QueryType::NoAnswer {
            return probes;
        }
        if request.query_type == QueryType::Paraphrase
            && let Some(&chunk) = request.sources.first()
        {
            probes.push(paraphrase_probe(chunk));
        }
        if self.topics.labels > 0 {
            probes.extend(self.topic_probes(&request.sources));
        }
        probes
    }

    fn no_answer(
        &self,
        model: &TermModel,
        shape: &Shape,
        rng: &mut Rng,
    ) -> std::result::Result<(String, String), String> {
        let absent =
            self.absent.choose(rng).ok_or("every built-in absent word occurs in the corpus")?.clone();
        let mut words = draw_weighted(model, shape, rng)?;
        let at = rng.random_range(0..=words.len());
        words.insert(at, absent.clone());
        Ok((words.join(" "), absent))
    }

    /// The vocabulary of a chunk's topic: the topical terms of its closest chunks in the topic
    /// space, without the chunk's own terms (`own`, its model).
    fn neighbour_model(&self, chunk: usize, own: &TermModel, near: &Near) -> Result<TermModel> {
        let mut text = String::new();
        for (neighbour, _) in near.get(&self.corpus, paraphrase_probe(chunk))? {
            text.push_str(&self.index.text(neighbour)?);
            text.push('\n');
        }
        let model = TermModel::topical(self.index.term_stats(&text)?, &self.corpus.terms);
        Ok(self.in_language(model.filtered(|s| !own.contains(&s.term)), &text))
    }

    /// The model's terms in the generator's language (Chinese terms for Chinese, others for
    /// English), when the chunk has at least two of them; otherwise all its terms. Chinese terms
    /// are dictionary words of `text` (jieba's default mode), never the fragments that search
    /// mode indexes besides them (数据库, not 据库).
    fn in_language(&self, model: TermModel, text: &str) -> TermModel {
        let chinese = |s: &TermStat| s.surface.chars().any(is_cjk);
        let want_chinese = self.language == Language::Zh;
        let words =
            if text.chars().any(is_cjk) { self.index.analyzer().dictionary_words(text) } else { None };
        let whole = |s: &TermStat| !chinese(s) || words.as_ref().is_none_or(|w| w.contains(&s.term));
        let model = model.filtered(whole);
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

/// The neighbour search of a paraphrase of `chunk`: its closest chunks, whatever their cosine.
fn paraphrase_probe(chunk: usize) -> Probe {
    Probe { chunk, min_cosine: f32::MIN, cap: NEIGHBOURS }
}

/// The neighbours found for a few requests' probes, in one scan of the topic space.
#[derive(Default)]
struct Near {
    found: HashMap<(usize, u32, usize), Vec<(usize, f32)>>,
}

impl Near {
    /// The neighbours of `probes` (repeats searched once).
    fn search(corpus: &CorpusModel, mut probes: Vec<Probe>) -> Result<Self> {
        let key = |p: &Probe| (p.chunk, p.min_cosine.to_bits(), p.cap);
        probes.sort_by_key(key);
        probes.dedup_by_key(|p| key(p));
        let found = corpus.space.neighbours_of(&probes)?;
        Ok(Self { found: probes.iter().map(key).zip(found).collect() })
    }

    /// The neighbours of `probe`: found already, or searched now.
    fn get(&self, corpus: &CorpusModel, probe: Probe) -> Result<Vec<(usize, f32)>> {
        match self.found.get(&(probe.chunk, probe.min_cosine.to_bits(), probe.cap)) {
            Some(found) => Ok(found.clone()),
            None => Ok(corpus.space.neighbours(probe.chunk, probe.min_cosine, probe.cap)?),
        }
    }
}

/// Three anchor terms of the chunk (its rarest third excluded, drawn by topical rank), the other
/// two or three in the words of the chunk's topic neighbours: a reworded query that shares at
/// most 60 % of its terms with the source.
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
        common.draw_by_rank(PARAPHRASE_ANCHORS, rng).into_iter().map(|s| s.surface.clone()).collect();
    let borrowed = neighbours.draw_by_rank(length - PARAPHRASE_ANCHORS, rng);
    words.extend(borrowed.into_iter().map(|s| s.surface.clone()));
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
    let mut words = draw_weighted(&only_a, shape, rng)?;
    words.extend(draw_weighted(&only_b, shape, rng)?);
    Ok(words)
}

/// Draws a query length from the shape, then that many distinct terms from the model by rank.
fn draw(model: &TermModel, shape: &Shape, rng: &mut Rng) -> std::result::Result<Vec<String>, String> {
    let length = rng.random_range(shape.length.clone()).min(model.len());
    let words: Vec<String> = model.draw_by_rank(length, rng).into_iter().map(|s| s.surface.clone()).collect();
    if words.is_empty() {
        return Err("chunk has no topical terms".to_owned());
    }
    Ok(words)
}

/// Draws a query length from the shape, then that many distinct terms by weight.
fn draw_weighted(
    model: &TermModel,
    shape: &Shape,
    rng: &mut Rng,
) -> std::result::Result<Vec<String>, String> {
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

    fn generate(&mut self, requests: &[Request], progress: &StageProgress) -> Result<Generated> {
        let mut generated = Generated::default();
        let mut near = Near::default();
        for (i, request) in requests.iter().enumerate() {
            if i % REQUESTS_PER_SCAN == 0 {
                let batch = &requests[i..(i + REQUESTS_PER_SCAN).min(requests.len())];
                near = Near::search(&self.corpus, batch.iter().flat_map(|r| self.probes(r)).collect())?;
            }
            match self.write(i, request, &near)? {
                Ok(draft) => generated.drafts.push(draft),
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
