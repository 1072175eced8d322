//! Stage 6, sample: draws the human-review queue, stratified by query type.
//!
//! Input: the queries in the test set. Output: the ones to review, flagged first. Invariants:
//! every type gets `min(minimum, available)` items when the queue has room for the minimums; the
//! rest of the queue is split in proportion to what each type has left (largest remainder); the
//! draw is seeded and reproducible.

use crate::error::Result;
use crate::index::ChunkIndex;
use crate::record::{Checked, PoolChunk, Pooled, QueryType, ReviewItem, ReviewSource, Status};
use crate::rng::stream;
use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// How large the review queue is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SampleConfig {
    /// Items in the queue (fewer if the set is smaller).
    pub size: usize,
    /// Items per type at least, so rare types appear.
    pub min_per_type: usize,
}

/// How many items of each type the queue gets, given how many each type has.
#[must_use]
pub fn allocate(available: &BTreeMap<QueryType, usize>, config: SampleConfig) -> BTreeMap<QueryType, usize> {
    let total: usize = available.values().sum();
    if config.size >= total {
        return available.clone();
    }
    let mut alloc: BTreeMap<QueryType, usize> = available.keys().map(|&t| (t, 0)).collect();
    // Minimums, one round at a time, so a queue too small for all of them stays balanced.
    let mut left = config.size;
    for _ in 0..config.min_per_type.min(config.size) {
        if left == 0 {
            break;
        }
        for (t, n) in &mut alloc {
            if left > 0 && *n < available[t] {
                *n += 1;
                left -= 1;
            }
        }
    }
    let room: BTreeMap<QueryType, usize> = alloc.iter().map(|(t, n)| (*t, available[t] - n)).collect();
    let room_total: usize = room.values().sum();
    if left == 0 || room_total == 0 {
        return alloc;
    }
    let exact: Vec<(QueryType, f64)> =
        room.iter().map(|(t, r)| (*t, (left * r) as f64 / room_total as f64)).collect();
    for (t, x) in &exact {
        *alloc.entry(*t).or_default() += x.floor() as usize;
    }
    let given: usize = exact.iter().map(|(_, x)| x.floor() as usize).sum();
    let mut by_remainder = exact;
    by_remainder.sort_by(|a, b| (b.1 - b.1.floor()).total_cmp(&(a.1 - a.1.floor())).then(a.0.cmp(&b.0)));
    for (t, _) in by_remainder.into_iter().take(left - given) {
        *alloc.entry(t).or_default() += 1;
    }
    alloc
}

/// Draws the review queue from the queries in the set: flagged queries first within each type
/// and in the queue, the rest in a seeded random order.
#[must_use]
pub fn sample<'a>(set: &[&'a Checked], config: SampleConfig, seed: u64) -> Vec<&'a Checked> {
    let mut rng = stream(seed, "review");
    let mut by_type: BTreeMap<QueryType, Vec<&'a Checked>> = BTreeMap::new();
    for judged in set {
        by_type.entry(judged.query_type()).or_default().push(judged);
    }
    let available = by_type.iter().map(|(t, v)| (*t, v.len())).collect();
    let alloc = allocate(&available, config);
    let mut queue = Vec::new();
    for (t, mut items) in by_type {
        items.shuffle(&mut rng);
        items.sort_by_key(|j| j.verdict.status != Status::Flagged);
        queue.extend(items.into_iter().take(alloc[&t]));
    }
    queue.shuffle(&mut rng);
    queue.sort_by_key(|j| j.verdict.status != Status::Flagged);
    queue
}

/// The queue as review items: each query with its answering chunks' and pooled chunks' texts.
///
/// # Errors
/// [`crate::Error::Index`] when a chunk's text cannot be read.
pub fn review_items(queue: &[&Checked], index: &ChunkIndex) -> Result<Vec<ReviewItem>> {
    queue
        .iter()
        .map(|j| {
            let sources = j
                .answering_chunks()
                .iter()
                .filter_map(|id| index.position(id).map(|p| (id, p)))
                .map(|(id, p)| {
                    let stored = index.stored(p)?;
                    Ok(ReviewSource {
                        chunk_id: id.clone(),
                        title: stored.title,
                        text: stored.text,
                        section: stored.section,
                    })
                })
                .collect::<Result<_>>()?;
            Ok(ReviewItem {
                query_id: j.candidate.id.clone(),
                text: j.candidate.text.clone(),
                query_type: j.query_type(),
                status: j.verdict.status,
                reason: j.verdict.reason,
                ranks: j.verdict.ranks.clone(),
                absent_term: j.candidate.absent_term.clone(),
                evidence: j.candidate.evidence.clone(),
                sources,
                pool: pool_chunks(&j.verdict.pool, index)?,
                refresh: None,
                decision: None,
            })
        })
        .collect()
}

fn pool_chunks(pool: &[Pooled], index: &ChunkIndex) -> Result<Vec<PoolChunk>> {
    pool.iter()
        .filter_map(|p| index.position(&p.chunk_id).map(|at| (p, at)))
        .map(|(p, at)| {
            let stored = index.stored(at)?;
            Ok(PoolChunk {
                pooled: p.clone(),
                title: stored.title,
                text: stored.text,
                section: stored.section,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn counts(d: usize, p: usize, m: usize, n: usize) -> BTreeMap<QueryType, usize> {
        [
            (QueryType::Direct, d),
            (QueryType::Paraphrase, p),
            (QueryType::MultiHop, m),
            (QueryType::NoAnswer, n),
        ]
        .into_iter()
        .filter(|(_, c)| *c > 0)
        .collect()
    }

    #[track_caller]
    fn check(available: (usize, usize, usize, usize), size: usize, min: usize, expected: [usize; 4]) {
        let (d, p, m, n) = available;
        let alloc = allocate(&counts(d, p, m, n), SampleConfig { size, min_per_type: min });
        let got: Vec<usize> = QueryType::ALL.iter().map(|t| alloc.get(t).copied().unwrap_or(0)).collect();
        assert_eq!(got, expected);
    }

    #[test]
    fn worked_examples() {
        // 5 each first (20), then 30 more split 75:45:5:5 (17.3, 10.4, 1.2, 1.2 → largest remainder).
        check((80, 50, 10, 10), 50, 5, [22, 16, 6, 6]);
        // A rare type gets all it has.
        check((100, 0, 0, 2), 10, 5, [8, 0, 0, 2]);
        // Queue larger than the set: everything.
        check((3, 2, 1, 0), 50, 5, [3, 2, 1, 0]);
        // Queue smaller than the minimums: balanced round by round.
        check((10, 10, 10, 10), 6, 5, [2, 2, 1, 1]);
        // No minimum: plain proportional allocation.
        check((60, 30, 10, 0), 10, 0, [6, 3, 1, 0]);
    }

    #[test]
    fn a_huge_minimum_does_not_hang() {
        let alloc = allocate(&counts(10, 10, 0, 0), SampleConfig { size: 5, min_per_type: usize::MAX });
        assert_eq!(alloc.values().sum::<usize>(), 5);
    }

    proptest! {
        #[test]
        fn allocation_invariants(d in 0usize..300, p in 0usize..300, m in 0usize..50, n in 0usize..50,
                                 size in 0usize..400, min in 0usize..10) {
            let available = counts(d, p, m, n);
            let alloc = allocate(&available, SampleConfig { size, min_per_type: min });
            let total: usize = available.values().sum();
            prop_assert_eq!(alloc.values().sum::<usize>(), size.min(total));
            let minimums: usize = available.values().map(|a| (*a).min(min)).sum();
            for (t, a) in &available {
                prop_assert!(alloc[t] <= *a);
                if size >= minimums {
                    prop_assert!(alloc[t] >= (*a).min(min), "{t}: {} < min", alloc[t]);
                }
            }
        }
    }
}
