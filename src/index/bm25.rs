//! BM25 search over tantivy's postings, with canonical scores and an exact order.
//!
//! tantivy's own top-k search (block-max WAND) sums a chunk's term scores in an order that
//! depends on how documents fall into segments, so the last bits of a score, and the order of
//! chunks whose scores tie, changed with the number of writer threads. Here every term's score
//! is tantivy's own (`Bm25Weight`, from index-wide statistics: k1 = 1.2, b = 0.75), and a
//! chunk's score is their sum taken term by term in sorted term order. The same chunks give the
//! same bits whatever the segments, and the ranking is a total order: score, descending, then
//! chunk position. Scoring is exhaustive (term at a time into one accumulator per chunk), which
//! for the few, topical terms of a generated query is cheaper than tantivy's pruning.

use super::Hit;
use foldhash::HashMap;
use std::cell::RefCell;
use std::cmp;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use tantivy::fieldnorm::FieldNormReader;
use tantivy::postings::TermInfo;
use tantivy::schema::{Field, IndexRecordOption};
use tantivy::{DocAddress, InvertedIndexReader, Searcher};

/// BM25's term saturation and length normalisation parameters, tantivy's.
const K1: f32 = 1.2;
const B: f32 = 0.75;
/// Term frequencies up to this one score from a table (most postings have small ones).
const TABLED_TF: usize = 8;

/// One segment's postings, field lengths and chunk positions.
struct Segment {
    postings: Arc<InvertedIndexReader>,
    fieldnorms: FieldNormReader,
    /// The chunk position of each document of the segment.
    positions: Vec<u32>,
}

/// The scorer of one searcher's segments.
pub(super) struct Bm25 {
    segments: Vec<Segment>,
    weights: Weights,
    /// The most documents of one segment.
    widest: usize,
    /// The terms searched so far, while [`KEPT_BYTES`] lasts: `None` for a term in no chunk.
    known: RwLock<HashMap<String, Option<Arc<QueryTerm>>>>,
    /// Bytes left of [`KEPT_BYTES`].
    room: AtomicUsize,
}

/// The most bytes [`Bm25`] spends on the terms it keeps (weights, postings addresses, scored
/// postings), whatever the corpus: queries share their terms, and a kept term is searched again
/// without its dictionary lookups, and a scored posting without decoding or scoring it.
const KEPT_BYTES: usize = 16 << 20;

/// tantivy's [`Bm25Weight`](tantivy::query::Bm25Weight) arithmetic, with what it computes per term (a length normalisation
/// table) computed once for the index: the same operations in the same order, so the same bits
/// (`weights_are_tantivys_bit_for_bit`).
struct Weights {
    documents: u64,
    /// `K1 * (1 - B + B * length / average length)` per field-norm id.
    norms: [f32; 256],
    /// `tf / (tf + norm)` for tf 1..=[`TABLED_TF`], per field-norm id.
    factors: Box<[[f32; 256]; TABLED_TF]>,
}

impl Weights {
    fn new(documents: u64, average_length: f32) -> Self {
        let mut norms = [0.0; 256];
        for (id, norm) in (0..=u8::MAX).zip(&mut norms) {
            *norm = K1 * (1.0 - B + B * FieldNormReader::id_to_fieldnorm(id) as f32 / average_length);
        }
        let mut factors = Box::new([[0.0; 256]; TABLED_TF]);
        for (tf, row) in (1..).zip(factors.iter_mut()) {
            for (factor, norm) in row.iter_mut().zip(&norms) {
                *factor = Self::factor(tf, *norm);
            }
        }
        Self { documents, norms, factors }
    }

    fn factor(tf: u32, norm: f32) -> f32 {
        let tf = tf as f32;
        tf / (tf + norm)
    }

    /// The weight of a term found in `df` documents: its inverse document frequency times
    /// `1 + K1`.
    fn weight(&self, df: u64) -> f32 {
        let x = ((self.documents - df) as f32 + 0.5) / (df as f32 + 0.5);
        (1.0 + x).ln() * (1.0 + K1)
    }

    /// The score of a term of weight `weight` found `tf` times in a document of field-norm id
    /// `fieldnorm`.
    #[inline]
    fn score(&self, weight: f32, fieldnorm: u8, tf: u32) -> f32 {
        let factor = match self.factors.get(tf as usize - 1) {
            Some(row) => row[usize::from(fieldnorm)],
            None => Self::factor(tf, self.norms[usize::from(fieldnorm)]),
        };
        weight * factor
    }
}

/// A query term: its weight and, per segment, where its postings are and, while
/// [`KEPT_BYTES`] lasts, each posting's document and score.
struct QueryTerm {
    weight: f32,
    infos: Vec<Option<TermInfo>>,
    scored: Option<Vec<Scored>>,
}

/// A term's postings in one segment: each document and the term's score in it.
type Scored = Box<[(u32, f32)]>;

/// Each thread's scores per document of a segment (all zeros between searches) and the
/// documents scored so far.
#[derive(Default)]
struct Scratch {
    scores: Vec<f32>,
    touched: Vec<u32>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::default();
}

impl Bm25 {
    /// The scorer of `searcher`'s `field`; `positions` gives, per segment, each document's chunk
    /// position; `exact_tokens`, the field's token count when tantivy's is an estimate (an index
    /// updated in place, see `update.rs`).
    pub(super) fn new(
        searcher: &Searcher,
        field: Field,
        positions: Vec<Vec<u32>>,
        exact_tokens: Option<u64>,
    ) -> tantivy::Result<Self> {
        let mut segments = Vec::with_capacity(positions.len());
        let mut tokens = 0u64;
        for (reader, positions) in searcher.segment_readers().iter().zip(positions) {
            let postings = reader.inverted_index(field)?;
            tokens += postings.total_num_tokens();
            segments.push(Segment { postings, fieldnorms: reader.get_fieldnorms_reader(field)?, positions });
        }
        let tokens = exact_tokens.unwrap_or(tokens);
        let documents: u64 = searcher.segment_readers().iter().map(|r| u64::from(r.max_doc())).sum();
        // tantivy's average field length, computed as tantivy does.
        let average_length = tokens as f32 / documents as f32;
        let widest = segments.iter().map(|s| s.positions.len()).max().unwrap_or(0);
        let weights = Weights::new(documents, average_length);
        let room = AtomicUsize::new(KEPT_BYTES);
        Ok(Self { segments, weights, widest, known: RwLock::default(), room })
    }

    /// The chunk position of a document.
    pub(super) fn position(&self, address: DocAddress) -> usize {
        self.segments[address.segment_ord as usize].positions[address.doc_id as usize] as usize
    }

    /// The top `limit` chunks for `terms` (distinct, sorted), by score then position.
    pub(super) fn search(&self, terms: &[&String], limit: usize) -> tantivy::Result<Vec<Hit>> {
        let terms =
            terms.iter().filter_map(|t| self.term(t).transpose()).collect::<tantivy::Result<Vec<_>>>()?;
        let mut top = Top::new(limit);
        SCRATCH.with_borrow_mut(|scratch| {
            if scratch.scores.len() < self.widest {
                scratch.scores.resize(self.widest, 0.0);
            }
            // A chunk lives in one segment: segment by segment, each chunk's term scores are
            // still summed in sorted term order.
            for (at, segment) in self.segments.iter().enumerate() {
                let added = terms.iter().try_for_each(|term| self.add(segment, at, term, scratch));
                let Scratch { scores, touched } = scratch;
                for doc in touched.drain(..) {
                    let score = std::mem::take(&mut scores[doc as usize]);
                    top.offer(Hit { chunk: segment.positions[doc as usize] as usize, score });
                }
                added?;
            }
            Ok(top.into_sorted())
        })
    }

    /// The weight and postings of an analysed term, looked up in each segment's term dictionary
    /// on its first search; `None` for a term in no chunk.
    fn term(&self, term: &str) -> tantivy::Result<Option<Arc<QueryTerm>>> {
        if let Some(known) = self.known.read().unwrap_or_else(PoisonError::into_inner).get(term) {
            return Ok(known.clone());
        }
        let infos = self
            .segments
            .iter()
            .map(|s| s.postings.terms().get(term.as_bytes()))
            .collect::<Result<Vec<_>, _>>()?;
        let df: u64 = infos.iter().flatten().map(|info| u64::from(info.doc_freq)).sum();
        let cost = size_of::<(String, QueryTerm)>() + term.len() + size_of_val(infos.as_slice());
        let keep = self.reserve(cost);
        let found = if df == 0 { None } else { Some(Arc::new(self.query_term(df, infos, keep)?)) };
        if keep {
            self.known.write().unwrap_or_else(PoisonError::into_inner).insert(term.to_owned(), found.clone());
        }
        Ok(found)
    }

    /// Takes `bytes` from the room left for kept terms, if they fit.
    fn reserve(&self, bytes: usize) -> bool {
        self.room.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |room| room.checked_sub(bytes)).is_ok()
    }

    /// A term found in `df` documents, its postings scored if it is `kept` and there is room
    /// for them.
    fn query_term(&self, df: u64, infos: Vec<Option<TermInfo>>, kept: bool) -> tantivy::Result<QueryTerm> {
        let weight = self.weights.weight(df);
        let postings = usize::try_from(df).unwrap_or(usize::MAX).saturating_mul(size_of::<(u32, f32)>());
        let scored = if kept && self.reserve(postings) {
            Some(
                self.segments
                    .iter()
                    .zip(&infos)
                    .map(|(segment, info)| {
                        let mut scored = Vec::with_capacity(info.as_ref().map_or(0, |i| i.doc_freq as usize));
                        self.postings(segment, info.as_ref(), weight, |doc, score| {
                            scored.push((doc, score));
                        })?;
                        Ok(scored.into_boxed_slice())
                    })
                    .collect::<tantivy::Result<Vec<_>>>()?,
            )
        } else {
            None
        };
        Ok(QueryTerm { weight, infos, scored })
    }

    /// Each document of a segment that contains a term (at `info`; none without it), with the
    /// term's score in it, in document order.
    fn postings(
        &self,
        segment: &Segment,
        info: Option<&TermInfo>,
        weight: f32,
        mut each: impl FnMut(u32, f32),
    ) -> tantivy::Result<()> {
        let Some(info) = info else { return Ok(()) };
        let mut block =
            segment.postings.read_block_postings_from_terminfo(info, IndexRecordOption::WithFreqs)?;
        while !block.docs().is_empty() {
            for (&doc, &tf) in block.docs().iter().zip(block.freqs()) {
                each(doc, self.weights.score(weight, segment.fieldnorms.fieldnorm_id(doc), tf));
            }
            block.advance();
        }
        Ok(())
    }

    /// Adds one term's BM25 score to the score of every document of a segment that contains
    /// it, noting the documents scored for the first time.
    fn add(
        &self,
        segment: &Segment,
        at: usize,
        term: &QueryTerm,
        scratch: &mut Scratch,
    ) -> tantivy::Result<()> {
        let Scratch { scores, touched } = scratch;
        let mut add = |doc: u32, term_score: f32| {
            let score = &mut scores[doc as usize];
            // Every term score is positive: a zero is a document not yet scored.
            if *score == 0.0 {
                touched.push(doc);
            }
            *score += term_score;
        };
        match &term.scored {
            Some(scored) => {
                scored[at].iter().for_each(|&(doc, score)| add(doc, score));
                Ok(())
            }
            None => self.postings(segment, term.infos[at].as_ref(), term.weight, add),
        }
    }
}

/// A hit in ranking order: `Less` ranks first (score descending, then position).
#[derive(PartialEq)]
struct Ranked(Hit);

impl Eq for Ranked {}

impl Ord for Ranked {
    fn cmp(&self, other: &Self) -> cmp::Ordering {
        other.0.score.total_cmp(&self.0.score).then(self.0.chunk.cmp(&other.0.chunk))
    }
}

impl PartialOrd for Ranked {
    fn partial_cmp(&self, other: &Self) -> Option<cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// The first `limit` hits offered, in ranking order: a heap whose top is the last of them.
struct Top {
    limit: usize,
    heap: BinaryHeap<Ranked>,
}

impl Top {
    fn new(limit: usize) -> Self {
        Self { limit, heap: BinaryHeap::with_capacity(limit.min(1024) + 1) }
    }

    fn offer(&mut self, hit: Hit) {
        let hit = Ranked(hit);
        if self.heap.len() < self.limit {
            self.heap.push(hit);
        } else if let Some(mut last) = self.heap.peek_mut()
            && hit < *last
        {
            *last = hit;
        }
    }

    fn into_sorted(self) -> Vec<Hit> {
        self.heap.into_sorted_vec().into_iter().map(|r| r.0).collect()
    }
}

/// The first `limit` hits in ranking order: score descending, then position.
#[cfg(test)]
fn top(hits: &[Hit], limit: usize) -> Vec<Hit> {
    let mut top = Top::new(limit);
    for &hit in hits {
        top.offer(hit);
    }
    top.into_sorted()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tantivy::query::Bm25Weight;

    #[test]
    fn the_top_is_a_prefix_of_the_full_order() {
        let scores = [2.0, 3.0, 2.0, 1.0, 3.0, 2.0];
        let hits: Vec<Hit> = scores.iter().enumerate().map(|(chunk, &score)| Hit { chunk, score }).collect();
        let order = |limit| top(&hits, limit).iter().map(|h| h.chunk).collect::<Vec<_>>();
        assert_eq!(order(10), [1, 4, 0, 2, 5, 3]);
        assert_eq!(order(3), [1, 4, 0]);
        assert_eq!(order(1), [1]);
        assert!(order(0).is_empty());
    }

    #[test]
    fn weights_are_tantivys_bit_for_bit() {
        for (documents, average_length) in [(10, 3.7f32), (9_905, 182.43), (380_000, 96.1), (2, 1.0)] {
            let weights = Weights::new(documents, average_length);
            for df in [1, 2, 3, documents / 7 + 1, documents / 2, documents - 1, documents]
                .into_iter()
                .filter(|&df| df <= documents)
            {
                let theirs = Bm25Weight::for_one_term_without_explain(df, documents, average_length);
                let weight = weights.weight(df);
                for fieldnorm in 0..=u8::MAX {
                    for tf in (1..=40).chain([1_000, 2_013_265_944]) {
                        let (ours, theirs) =
                            (weights.score(weight, fieldnorm, tf), theirs.score(fieldnorm, tf));
                        assert_eq!(ours.to_bits(), theirs.to_bits(), "{documents} {df} {fieldnorm} {tf}");
                    }
                }
            }
        }
    }
}
