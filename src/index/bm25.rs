//! BM25 search over tantivy's postings, with canonical scores and an exact order.
//!
//! tantivy's own top-k search (block-max WAND) sums a chunk's term scores in an order that
//! depends on how documents fall into segments, so the last bits of a score, and the order of
//! chunks whose scores tie, changed with the number of writer threads. Here every term's score
//! is tantivy's own (`Bm25Weight`, from index-wide statistics: k1 = 1.2, b = 0.75), and a
//! chunk's score is their sum taken term by term in sorted term order. The same chunks give the
//! same bits whatever the segments, and the ranking is a total order: score, descending, then
//! chunk position. Scoring is term at a time into one accumulator per chunk, with exact
//! MaxScore pruning ([`search_segment`]): only the chunks of the terms that can lift a chunk to
//! the k-th score are ranked, so the result is the exhaustive one, bit for bit, ties at the k-th
//! place included (`pruning_is_exact`).

use super::Hit;
use foldhash::HashMap;
use std::cell::RefCell;
use std::cmp;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use tantivy::fastfield::AliveBitSet;
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
    /// Its live documents, when some are deleted (an index updated in place).
    alive: Option<AliveBitSet>,
}

/// The scorer of one searcher's segments.
pub(super) struct Bm25 {
    segments: Vec<Segment>,
    weights: Weights,
    /// The terms searched so far, while [`KEPT_BYTES`] lasts: `None` for a term in no chunk.
    known: RwLock<HashMap<String, Option<Arc<QueryTerm>>>>,
    /// Bytes left of [`KEPT_BYTES`].
    room: AtomicUsize,
    /// Per term, the deleted documents that hold it (their postings are still in the index).
    deleted: DeletedTerms,
}

/// Per term, how many of an index's deleted documents hold it.
pub(super) type DeletedTerms = HashMap<String, u32>;

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
    scored: Option<Postings>,
}

/// The most of a term's highest scores [`Postings`] keeps.
const LEADERS: usize = 32;

/// A term's scored postings in every segment, and its highest scores over all of them.
struct Postings {
    segments: Vec<Scored>,
    /// The term's highest scores, descending: [`LEADERS`] of them, or all.
    leaders: Box<[f32]>,
}

impl Postings {
    fn new(segments: Vec<Scored>) -> Self {
        let mut scores: Vec<f32> =
            segments.iter().flat_map(|s| s.postings.iter().map(|&(_, score)| score)).collect();
        let descending = |a: &f32, b: &f32| b.total_cmp(a);
        if scores.len() > LEADERS {
            scores.select_nth_unstable_by(LEADERS, descending);
            scores.truncate(LEADERS);
        }
        scores.sort_unstable_by(descending);
        Self { segments, leaders: scores.into_boxed_slice() }
    }

    /// The term's `k`-th highest score, when known: `k` chunks score at least that much for
    /// any query with the term (a sum of positive term scores is at least each of them).
    fn kth(&self, k: usize) -> Option<f32> {
        self.leaders.get(k.checked_sub(1)?).copied()
    }
}

/// Each thread's scores per document of a segment (all zeros between searches) and the
/// documents of essential terms.
#[derive(Default)]
struct Scratch {
    scores: Vec<f32>,
    touched: Vec<u32>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::default();
}

/// A term's postings in one segment: each document and the term's score in it, in document
/// order, and the best of those scores.
struct Scored {
    postings: Box<[(u32, f32)]>,
    best: f32,
}

impl Scored {
    fn new(postings: Vec<(u32, f32)>) -> Self {
        let best = postings.iter().map(|&(_, score)| score).fold(0.0, f32::max);
        Self { postings: postings.into_boxed_slice(), best }
    }

    fn list(&self) -> List<'_> {
        List { postings: &self.postings, best: self.best }
    }
}

impl Bm25 {
    /// The scorer of `searcher`'s `field`; `positions` gives, per segment, each document's chunk
    /// position; `exact_tokens`, the field's token count when tantivy's is an estimate or counts
    /// deleted documents, and `deleted`, the terms of those (an index updated in place, see
    /// `update.rs`): deleted documents are in no statistic and no result.
    pub(super) fn new(
        searcher: &Searcher,
        field: Field,
        positions: Vec<Vec<u32>>,
        exact_tokens: Option<u64>,
        deleted: DeletedTerms,
    ) -> tantivy::Result<Self> {
        let mut segments = Vec::with_capacity(positions.len());
        let mut tokens = 0u64;
        for (reader, positions) in searcher.segment_readers().iter().zip(positions) {
            let postings = reader.inverted_index(field)?;
            tokens += postings.total_num_tokens();
            let fieldnorms = reader.get_fieldnorms_reader(field)?;
            let alive = reader.alive_bitset().cloned();
            segments.push(Segment { postings, fieldnorms, positions, alive });
        }
        let tokens = exact_tokens.unwrap_or(tokens);
        let documents: u64 = searcher.segment_readers().iter().map(|r| u64::from(r.num_docs())).sum();
        // tantivy's average field length, computed as tantivy does.
        let average_length = tokens as f32 / documents as f32;
        let weights = Weights::new(documents, average_length);
        let room = AtomicUsize::new(KEPT_BYTES);
        Ok(Self { segments, weights, known: RwLock::default(), room, deleted })
    }

    /// How many deleted documents hold `term` (tantivy's document frequencies count them).
    pub(super) fn deleted_holding(&self, term: &str) -> u64 {
        self.deleted.get(term).copied().map_or(0, u64::from)
    }

    /// The chunk position of a document.
    pub(super) fn position(&self, address: DocAddress) -> usize {
        self.segments[address.segment_ord as usize].positions[address.doc_id as usize] as usize
    }

    /// The top `limit` chunks for `terms` (distinct, sorted), by score then position.
    pub(super) fn search(&self, terms: &[&String], limit: usize) -> tantivy::Result<Vec<Hit>> {
        let terms =
            terms.iter().filter_map(|t| self.term(t).transpose()).collect::<tantivy::Result<Vec<_>>>()?;
        // The postings of a term not kept are scored for this search alone.
        let fresh = terms
            .iter()
            .map(|term| match term.scored {
                Some(_) => Ok(None),
                None => self.all_postings(&term.infos, term.weight).map(Some),
            })
            .collect::<tantivy::Result<Vec<_>>>()?;
        let postings: Vec<&Postings> = terms
            .iter()
            .zip(&fresh)
            .filter_map(|(term, fresh)| term.scored.as_ref().or(fresh.as_ref()))
            .collect();
        Ok(top_hits(&postings, self.segments.iter().map(|s| s.positions.as_slice()), limit))
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
        let df: u64 = infos
            .iter()
            .flatten()
            .map(|info| u64::from(info.doc_freq))
            .sum::<u64>()
            .saturating_sub(self.deleted_holding(term));
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
        let postings = usize::try_from(df)
            .unwrap_or(usize::MAX)
            .saturating_mul(size_of::<(u32, f32)>())
            .saturating_add(self.segments.len() * size_of::<Scored>() + LEADERS * size_of::<f32>());
        let scored =
            if kept && self.reserve(postings) { Some(self.all_postings(&infos, weight)?) } else { None };
        Ok(QueryTerm { weight, infos, scored })
    }

    /// A term's scored postings (at `infos`, per segment) in every segment.
    fn all_postings(&self, infos: &[Option<TermInfo>], weight: f32) -> tantivy::Result<Postings> {
        let segments = self
            .segments
            .iter()
            .zip(infos)
            .map(|(segment, info)| self.scored(segment, info.as_ref(), weight))
            .collect::<tantivy::Result<Vec<_>>>()?;
        Ok(Postings::new(segments))
    }

    /// A term's scored postings in one segment (at `info`; none without it).
    fn scored(&self, segment: &Segment, info: Option<&TermInfo>, weight: f32) -> tantivy::Result<Scored> {
        let mut scored = Vec::with_capacity(info.map_or(0, |i| i.doc_freq as usize));
        self.postings(segment, info, weight, |doc, score| scored.push((doc, score)))?;
        Ok(Scored::new(scored))
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
                if segment.alive.as_ref().is_none_or(|alive| alive.is_alive(doc)) {
                    each(doc, self.weights.score(weight, segment.fieldnorms.fieldnorm_id(doc), tf));
                }
            }
            block.advance();
        }
        Ok(())
    }
}

/// The top `limit` chunks of the documents of `postings` (one per query term, in sorted term
/// order), segment by segment (`positions`: each segment's chunk positions).
fn top_hits<'p>(
    postings: &[&Postings],
    positions: impl Iterator<Item = &'p [u32]>,
    limit: usize,
) -> Vec<Hit> {
    // The k-th score is at least any term's own k-th score: a start for pruning.
    let floor = postings.iter().filter_map(|p| p.kth(limit)).reduce(f32::max);
    let mut top = Top::new(limit);
    // A chunk lives in one segment: segment by segment, each chunk's term scores are still
    // summed in sorted term order, and the k-th score so far prunes the next segments too.
    SCRATCH.with_borrow_mut(|scratch| {
        for (at, positions) in positions.enumerate() {
            let lists: Vec<List<'_>> = postings
                .iter()
                .map(|p| p.segments[at].list())
                .filter(|list| !list.postings.is_empty())
                .collect();
            search_segment(&lists, positions, floor, &mut top, scratch);
        }
    });
    top.into_sorted()
}

/// One term's scored postings in a segment, in document order, and the best score among them.
#[derive(Clone, Copy)]
struct List<'p> {
    postings: &'p [(u32, f32)],
    best: f32,
}

/// Offers `top` every document of a segment (the documents of `lists`, one per query term in
/// sorted term order) that may rank among its hits, each scored as the sum of its term scores
/// in that order (term at a time, into `scratch`); `positions` gives each document's chunk,
/// `floor` a score the k-th hit of the whole search reaches.
///
/// MaxScore: the terms whose best scores together stay below the k-th score so far are
/// "non-essential", and a document that only they contain cannot rank: their postings are
/// still added to the scores, in term order, so a document that an essential term also has gets
/// its exact sum, but only the documents of essential terms are looked at. The bound of a set
/// of terms is the sum of their best scores taken in sorted term order too: floating-point
/// addition is monotone, so it is at least the score of any document with only those terms,
/// to the bit; it must be below the k-th score (a tie may still rank by position).
fn search_segment(
    lists: &[List<'_>],
    positions: &[u32],
    floor: Option<f32>,
    top: &mut Top,
    scratch: &mut Scratch,
) {
    let essential = essential(lists, top.threshold(floor));
    let Scratch { scores, touched } = scratch;
    if scores.len() < positions.len() {
        scores.resize(positions.len(), 0.0);
    }
    for (list, &essential) in lists.iter().zip(&essential) {
        if essential {
            for &(doc, score) in list.postings {
                scores[doc as usize] += score;
                touched.push(doc);
            }
        } else {
            for &(doc, score) in list.postings {
                scores[doc as usize] += score;
            }
        }
    }
    let mut threshold = top.threshold(floor);
    for doc in touched.drain(..) {
        let score = std::mem::take(&mut scores[doc as usize]);
        // Every term score is positive: a zero is a document taken already.
        if score != 0.0 && threshold.is_none_or(|threshold| score >= threshold) {
            top.offer(Hit { chunk: positions[doc as usize] as usize, score });
            threshold = top.threshold(floor);
        }
    }
    for (list, _) in lists.iter().zip(&essential).filter(|(_, essential)| !**essential) {
        for &(doc, _) in list.postings {
            scores[doc as usize] = 0.0;
        }
    }
}

/// Which of `lists` are essential for a search whose k-th score will reach `threshold`: all
/// but the most terms of the lowest best scores whose bound stays below it.
fn essential(lists: &[List<'_>], threshold: Option<f32>) -> Vec<bool> {
    let mut essential = vec![true; lists.len()];
    let Some(threshold) = threshold else { return essential };
    let mut by_best: Vec<usize> = (0..lists.len()).collect();
    by_best.sort_by(|&a, &b| lists[a].best.total_cmp(&lists[b].best).then(a.cmp(&b)));
    for i in by_best {
        essential[i] = false;
        let bound =
            lists.iter().zip(&essential).filter(|(_, e)| !**e).fold(0.0, |sum, (list, _)| sum + list.best);
        if bound >= threshold {
            essential[i] = true;
            break;
        }
    }
    essential
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

    /// The score a hit must reach to be kept: the last one's once `limit` hits are in, or
    /// `floor` if higher (a score the last hit will reach).
    fn threshold(&self, floor: Option<f32>) -> Option<f32> {
        let last = self.heap.peek().filter(|_| self.heap.len() == self.limit).map(|last| last.0.score);
        match (last, floor) {
            (Some(last), Some(floor)) => Some(last.max(floor)),
            (last, floor) => last.or(floor),
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

    /// A segment for the scorer: per query term, its scored postings; each document's chunk.
    type TestSegment = (Vec<Vec<(u32, f32)>>, Vec<u32>);

    /// What the pruned search must give: every document of every list scored (term at a time,
    /// the sum in term order) and offered.
    fn exhaustive(segments: &[TestSegment], limit: usize) -> Vec<Hit> {
        let mut top = Top::new(limit);
        for (lists, positions) in segments {
            let mut scores = vec![0.0f32; positions.len()];
            for list in lists {
                for &(doc, score) in list {
                    scores[doc as usize] += score;
                }
            }
            for (doc, &score) in scores.iter().enumerate().filter(|(_, s)| **s != 0.0) {
                top.offer(Hit { chunk: positions[doc] as usize, score });
            }
        }
        top.into_sorted()
    }

    fn pruned(segments: &[TestSegment], limit: usize) -> Vec<Hit> {
        let terms = segments.first().map_or(0, |(lists, _)| lists.len());
        let postings: Vec<Postings> = (0..terms)
            .map(|t| Postings::new(segments.iter().map(|(lists, _)| Scored::new(lists[t].clone())).collect()))
            .collect();
        let postings: Vec<&Postings> = postings.iter().collect();
        top_hits(&postings, segments.iter().map(|(_, positions)| positions.as_slice()), limit)
    }

    /// Term scores from a handful of values whose sums round differently in different orders:
    /// many documents tie, at the k-th place too.
    const SCORES: [f32; 5] = [0.1, 0.2, 0.3, 1.7, 3.3];

    /// Per segment, per term, per document: the index of its score in [`SCORES`], or absent.
    fn postings_strategy() -> impl proptest::strategy::Strategy<Value = Vec<Vec<Vec<Option<u8>>>>> {
        use proptest::collection::vec;
        use proptest::strategy::Strategy as _;
        (1..7usize).prop_flat_map(|terms| {
            vec(
                (1..60usize).prop_flat_map(move |docs| {
                    vec(vec(proptest::option::weighted(0.4, 0..SCORES.len() as u8), docs), terms)
                }),
                1..5,
            )
        })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(400))]

        /// MaxScore gives the exhaustive top k, the same chunks in the same order with the same
        /// bits, whatever k, the postings, the ties and how chunks fall into segments.
        #[test]
        fn pruning_is_exact(postings in postings_strategy(), limit in 1..30usize, shuffle in 0..u64::MAX) {
            let total: usize = postings.iter().map(|terms| terms[0].len()).sum();
            // Chunk positions: a permutation of 0..total.
            let mut order: Vec<u32> = (0..total as u32).collect();
            order.sort_by_key(|&g| (u64::from(g) ^ shuffle).wrapping_mul(0x9E37_79B9_7F4A_7C15));
            let mut next = order.into_iter();
            let segments: Vec<TestSegment> = postings
                .iter()
                .map(|terms| {
                    let lists = terms
                        .iter()
                        .map(|docs| {
                            (0..).zip(docs).filter_map(|(doc, s)| s.map(|s| (doc, SCORES[s as usize]))).collect()
                        })
                        .collect();
                    (lists, next.by_ref().take(terms[0].len()).collect())
                })
                .collect();
            for limit in [limit, 1, total + 1] {
                let bits = |hits: Vec<Hit>| hits.into_iter().map(|h| (h.chunk, h.score.to_bits())).collect::<Vec<_>>();
                proptest::prop_assert_eq!(bits(pruned(&segments, limit)), bits(exhaustive(&segments, limit)), "top {}", limit);
            }
        }
    }

    #[test]
    fn a_tie_at_the_kth_place_goes_to_the_first_chunk() {
        // The second term's own second score, 1.0, is a floor of the k-th score, and exactly its
        // best score: its documents 1 (chunk 9) and 2 (chunk 5) can still tie at the second
        // place, where chunk 5 ranks first, so the term stays essential.
        let lists = vec![vec![(0, 2.0)], vec![(1, 1.0), (2, 1.0)]];
        let segments = vec![(lists, vec![0, 9, 5])];
        let hits = pruned(&segments, 2);
        assert_eq!(hits.iter().map(|h| h.chunk).collect::<Vec<_>>(), [0, 5]);
        assert_eq!(hits, exhaustive(&segments, 2));
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
