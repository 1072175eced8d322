//! The one-shot labeller (MacAvaney & Soldaini, SIGIR 2023, "One-Shot Labeling for Automatic
//! Relevance Estimation"): each answerable query has at least one chunk known to be relevant
//! (its source, copies, a reviewer's labels); an unjudged pooled chunk is graded by how close it
//! is to them, here in the corpus's latent topic space (LSA, `crate::topics`): its cosine with
//! the nearest known relevant chunk (MaxRep's rule: the best match among the known relevant).
//!
//! The cut-off is read off the data, not tuned to a collection: the larger of
//!
//! - **Otsu's threshold** of the pooled pairs' similarities: the split of their distribution into
//!   two classes with the most variance between them (the similarities of pooled chunks are a
//!   mixture of chunks on the query's subject and chunks that only share words with it); and
//! - **the chance level**: the 95th percentile of the similarities of the same known relevant
//!   chunks with chunks drawn at random from the corpus, so that a chunk no closer than a random
//!   one is never called relevant.
//!
//! A chunk at or above the cut-off gets grade 1 (provenance `one_shot`), any other grade 0.
//! With fewer than [`MIN_PAIRS`] similarities there is no distribution to read: nothing is
//! graded (the pairs stay unjudged, and say so).

use crate::error::Result;
use crate::topics::TopicSpace;
use rand::Rng as _;

/// Below this many pooled similarities no cut-off is drawn.
pub const MIN_PAIRS: usize = 10;
/// Random chunks drawn per query for the chance level.
const CHANCE_DRAWS: usize = 20;
/// The share of chance similarities a relevant chunk must beat.
const CHANCE_QUANTILE: f64 = 0.95;
/// The grade a chunk close enough to a known relevant one gets.
pub const RELATED: u8 = 1;

/// The labeller's cut-off, and where it came from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cutoff {
    /// The similarity a chunk needs to be graded relevant.
    pub threshold: f32,
    /// Otsu's threshold of the pooled similarities.
    pub otsu: f32,
    /// The chance level.
    pub chance: f32,
    /// How many pooled similarities it was read from.
    pub pairs: usize,
}

/// One query's pooled chunks to grade, with its known relevant chunks (positions in the index).
#[derive(Debug, Clone)]
pub struct Query {
    /// Chunks known to be relevant.
    pub known: Vec<usize>,
    /// Every chunk the runs pooled for it (judged or not): the distribution the cut-off is read
    /// from.
    pub pooled: Vec<usize>,
}

/// Similarities (MaxRep: the best over the known relevant chunks) of each query's pooled
/// chunks, in order.
///
/// # Errors
/// [`crate::Error::Index`] when the space's scratch file cannot be read.
pub fn similarities(space: &TopicSpace, queries: &[Query]) -> Result<Vec<Vec<f32>>> {
    queries.iter().map(|q| q.pooled.iter().map(|&c| max_cosine(space, &q.known, c)).collect()).collect()
}

/// The cut-off for `similarities` (every pooled pair, flattened), with the chance level drawn
/// from `space` around each query's known chunks; `None` with fewer than [`MIN_PAIRS`] pairs.
///
/// # Errors
/// [`crate::Error::Index`] when the space's scratch file cannot be read.
pub fn cutoff(
    space: &TopicSpace,
    queries: &[Query],
    similarities: &[f32],
    seed: u64,
) -> Result<Option<Cutoff>> {
    let Some(otsu) = otsu(similarities) else { return Ok(None) };
    let mut rng = crate::rng::stream(seed, "pool/one_shot/chance");
    let mut chance = Vec::new();
    let chunks = space.len();
    for q in queries.iter().filter(|q| !q.known.is_empty()) {
        for _ in 0..CHANCE_DRAWS.min(chunks) {
            let other = rng.random_range(0..chunks);
            if !q.known.contains(&other) {
                chance.push(max_cosine(space, &q.known, other)?);
            }
        }
    }
    let chance = quantile(&mut chance, CHANCE_QUANTILE).unwrap_or(f32::MIN);
    Ok(Some(Cutoff { threshold: otsu.max(chance), otsu, chance, pairs: similarities.len() }))
}

/// The best cosine of `chunk` with any of `known` (−1 without any).
fn max_cosine(space: &TopicSpace, known: &[usize], chunk: usize) -> Result<f32> {
    known.iter().try_fold(-1.0_f32, |best, &k| Ok(best.max(space.cosine(k, chunk)?)))
}

/// Otsu's threshold of `values`: the smallest value of the upper class in the split (between two
/// consecutive distinct sorted values) that maximizes the between-class variance
/// `w₀·w₁·(μ₀ − μ₁)²`; the first such split on a tie. `None` with fewer than [`MIN_PAIRS`]
/// values or when they are all equal (nothing to split).
#[must_use]
pub fn otsu(values: &[f32]) -> Option<f32> {
    if values.len() < MIN_PAIRS {
        return None;
    }
    let mut sorted: Vec<f64> = values.iter().map(|&v| f64::from(v)).collect();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len() as f64;
    let total: f64 = sorted.iter().sum();
    let mut below = 0.0;
    let mut best: Option<(f64, f64)> = None;
    for (i, pair) in sorted.windows(2).enumerate() {
        below += pair[0];
        // Sorted: no split between equal values.
        if pair[1] <= pair[0] {
            continue;
        }
        let w0 = (i + 1) as f64 / n;
        let w1 = 1.0 - w0;
        let (mu0, mu1) = (below / (i + 1) as f64, (total - below) / (n - (i + 1) as f64));
        let between = w0 * w1 * (mu0 - mu1).powi(2);
        if best.is_none_or(|(b, _)| between > b) {
            best = Some((between, pair[1]));
        }
    }
    #[expect(clippy::cast_possible_truncation, reason = "a similarity read from f32")]
    best.map(|(_, upper)| upper as f32)
}

/// The `q` quantile of `values` (the nearest rank, `⌈q·n⌉`-th smallest); `None` when empty.
fn quantile(values: &mut [f32], q: f64) -> Option<f32> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f32::total_cmp);
    #[expect(clippy::cast_possible_truncation, clippy::cast_sign_loss, reason = "a rank in 1..=n")]
    let rank = ((q * values.len() as f64).ceil() as usize).clamp(1, values.len());
    Some(values[rank - 1])
}

/// The grade of a pooled chunk with similarity `similarity` under `cutoff`.
#[must_use]
pub fn grade(similarity: f32, cutoff: &Cutoff) -> u8 {
    if similarity >= cutoff.threshold { RELATED } else { 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn otsu_splits_two_clusters_between_them() {
        // Low cluster 0.1…0.2 (6 values), high cluster 0.8, 0.9 (4 values): by hand, the split
        // after 0.2 gives w₀ = 0.6, w₁ = 0.4, μ₀ = 0.15, μ₁ = 0.85, 0.24 · 0.49 = 0.1176, more
        // than any other split (after 0.1: 0.2·0.8·(0.1−0.5375)², 0.0306).
        let values = [0.1, 0.1, 0.15, 0.15, 0.2, 0.2, 0.8, 0.8, 0.9, 0.9];
        assert_eq!(otsu(&values), Some(0.8));
    }

    #[test]
    fn otsu_needs_enough_distinct_values() {
        assert_eq!(otsu(&[0.1, 0.9, 0.5]), None, "too few");
        assert_eq!(otsu(&[0.5; 12]), None, "nothing to split");
        // One outlier above nine equal values: the only split.
        let mut values = vec![0.3; 9];
        values.push(0.7);
        assert_eq!(otsu(&values), Some(0.7));
    }

    #[test]
    fn quantile_is_the_nearest_rank() {
        let mut values: Vec<f32> = (1..=20).map(|i| i as f32 / 20.0).collect();
        assert_eq!(quantile(&mut values, 0.95), Some(0.95), "the 19th of 20");
        assert_eq!(quantile(&mut [0.4, 0.2], 0.95), Some(0.4));
        assert_eq!(quantile(&mut [], 0.95), None);
    }

    proptest::proptest! {
        #[test]
        fn otsu_splits_between_two_distinct_values(values in proptest::collection::vec(-1.0f32..1.0, 10..60)) {
            let Some(t) = otsu(&values) else {
                proptest::prop_assert!(values.iter().all(|v| v.total_cmp(&values[0]).is_eq()));
                return Ok(());
            };
            proptest::prop_assert!(values.contains(&t), "the cut-off is one of the values");
            proptest::prop_assert!(values.iter().any(|v| *v < t), "something below it");
        }
    }

    #[test]
    fn a_chunk_at_the_cutoff_is_related() {
        let cutoff = Cutoff { threshold: 0.6, otsu: 0.6, chance: 0.3, pairs: 10 };
        assert_eq!([0.59, 0.6, 0.95].map(|s| grade(s, &cutoff)), [0, 1, 1]);
    }
}
