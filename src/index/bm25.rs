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
use std::cell::RefCell;
use std::sync::Arc;
use tantivy::fieldnorm::FieldNormReader;
use tantivy::query::Bm25Weight;
use tantivy::schema::{Field, IndexRecordOption};
use tantivy::{DocAddress, InvertedIndexReader, Searcher, Term};

/// One segment's postings, field lengths and chunk positions.
struct Segment {
    postings: Arc<InvertedIndexReader>,
    fieldnorms: FieldNormReader,
    /// The chunk position of each document of the segment.
    positions: Vec<u32>,
}

/// The scorer of one searcher's segments.
pub(super) struct Bm25 {
    field: Field,
    segments: Vec<Segment>,
    documents: u64,
    average_length: f32,
}

thread_local! {
    /// Each thread's score per chunk position: all zeros between searches.
    static SCORES: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
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
        Ok(Self { field, segments, documents, average_length })
    }

    /// The chunk position of a document.
    pub(super) fn position(&self, address: DocAddress) -> usize {
        self.segments[address.segment_ord as usize].positions[address.doc_id as usize] as usize
    }

    /// The top `limit` chunks for `terms` (distinct, sorted), by score then position.
    pub(super) fn search(&self, terms: &[&String], limit: usize) -> tantivy::Result<Vec<Hit>> {
        let chunks = self.segments.iter().map(|s| s.positions.len()).sum();
        SCORES.with_borrow_mut(|scores| {
            if scores.len() < chunks {
                scores.resize(chunks, 0.0);
            }
            let mut touched: Vec<u32> = Vec::new();
            let added = terms.iter().try_for_each(|term| self.add(term, scores, &mut touched));
            let mut hits: Vec<Hit> =
                touched.iter().map(|&p| Hit { chunk: p as usize, score: scores[p as usize] }).collect();
            for &p in &touched {
                scores[p as usize] = 0.0;
            }
            added?;
            Ok(top(hits.as_mut_slice(), limit))
        })
    }

    /// Adds one term's BM25 score to the score of every chunk that contains it, noting the
    /// chunks scored for the first time.
    fn add(&self, term: &str, scores: &mut [f32], touched: &mut Vec<u32>) -> tantivy::Result<()> {
        let term = Term::from_field_text(self.field, term);
        let infos =
            self.segments.iter().map(|s| s.postings.get_term_info(&term)).collect::<Result<Vec<_>, _>>()?;
        let df: u64 = infos.iter().flatten().map(|info| u64::from(info.doc_freq)).sum();
        if df == 0 {
            return Ok(());
        }
        let weight = Bm25Weight::for_one_term_without_explain(df, self.documents, self.average_length);
        for (segment, info) in self.segments.iter().zip(&infos) {
            let Some(info) = info else { continue };
            let mut block =
                segment.postings.read_block_postings_from_terminfo(info, IndexRecordOption::WithFreqs)?;
            while !block.docs().is_empty() {
                for (&doc, &tf) in block.docs().iter().zip(block.freqs()) {
                    let position = segment.positions[doc as usize];
                    let score = &mut scores[position as usize];
                    // Every term score is positive: a zero is a chunk not yet scored.
                    if *score == 0.0 {
                        touched.push(position);
                    }
                    *score += weight.score(segment.fieldnorms.fieldnorm_id(doc), tf);
                }
                block.advance();
            }
        }
        Ok(())
    }
}

/// The first `limit` hits in ranking order: score descending, then position.
fn top(hits: &mut [Hit], limit: usize) -> Vec<Hit> {
    let order = |a: &Hit, b: &Hit| b.score.total_cmp(&a.score).then(a.chunk.cmp(&b.chunk));
    let limit = limit.min(hits.len());
    if limit == 0 {
        return Vec::new();
    }
    if limit < hits.len() {
        hits.select_nth_unstable_by(limit - 1, order);
    }
    let top = &mut hits[..limit];
    top.sort_unstable_by(order);
    top.to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_top_is_a_prefix_of_the_full_order() {
        let scores = [2.0, 3.0, 2.0, 1.0, 3.0, 2.0];
        let hits: Vec<Hit> = scores.iter().enumerate().map(|(chunk, &score)| Hit { chunk, score }).collect();
        let order = |limit| top(&mut hits.clone(), limit).iter().map(|h| h.chunk).collect::<Vec<_>>();
        assert_eq!(order(10), [1, 4, 0, 2, 5, 3]);
        assert_eq!(order(3), [1, 4, 0]);
        assert_eq!(order(1), [1]);
        assert!(order(0).is_empty());
    }
}
