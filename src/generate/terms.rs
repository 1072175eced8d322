//! Term models for simulated queries (Azzopardi, de Rijke & Balog, SIGIR 2007): a chunk's terms
//! weighted as discriminative (tf·idf²), popular (tf) or topical (tf × residual IDF), and draws
//! without replacement, by weight or by rank.
//! Words a user would not type as a query term (function words, fragments such as the `re` of
//! "they're", single letters) are left out of every model.

use crate::index::{ChunkIndex, TermStat};
use crate::rng::Rng;
use crate::topics::CorpusTerms;
use rand::Rng as _;
use std::collections::HashSet;
use std::sync::LazyLock;

/// Words never used as query terms.
static STOPWORDS: LazyLock<HashSet<&'static str>> = LazyLock::new(|| {
    include_str!("query_stopwords.txt")
        .lines()
        .filter(|l| !l.starts_with('#'))
        .flat_map(str::split_whitespace)
        .collect()
});

/// Whether a word (as written, lower-cased) can be a query term: not a stop word, and at least
/// three characters (two for a Chinese word) unless it is a number of two or more digits.
#[must_use]
pub fn is_query_word(surface: &str) -> bool {
    let chars = surface.chars().count();
    let chinese = surface.chars().any(crate::text::is_cjk);
    let long_enough = chars >= 3
        || (chinese && chars >= 2)
        || (surface.len() >= 2 && surface.chars().all(|c| c.is_ascii_digit()));
    long_enough && !STOPWORDS.contains(surface)
}

/// A chunk's terms with their statistics.
#[derive(Debug, Clone)]
pub struct TermModel {
    terms: Vec<(TermStat, f64)>,
}

/// How [`TermModel::new`] weighs a chunk's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Weighting {
    /// tf·idf²: rare terms dominate, as in a known-item query.
    Discriminative,
    /// Plain tf: the chunk's most frequent terms.
    Popular,
}

impl TermModel {
    /// The model of a chunk's term statistics, weighted by `weighting`.
    pub fn new(index: &ChunkIndex, stats: Vec<TermStat>, weighting: Weighting) -> Self {
        let terms = stats
            .into_iter()
            .filter(|s| is_query_word(&s.surface))
            .map(|s| {
                let idf = match weighting {
                    Weighting::Discriminative => index.idf(s.df).powi(2),
                    Weighting::Popular => 1.0,
                };
                let weight = f64::from(s.tf) * idf;
                (s, weight)
            })
            .collect();
        Self { terms }
    }

    /// The topical model of a chunk: each term weighted by tf × residual IDF (Church & Gale 1995;
    /// words spread evenly over the corpus, such as filler verbs and numbers, weigh nothing) and
    /// written in its most common form in the corpus, as a searcher would write it rather than as
    /// this chunk inflects it. A term with a digit counts only when the chunk repeats it (the
    /// chunk is about that number, it is not a section label or a measurement).
    pub fn topical(stats: Vec<TermStat>, corpus: &CorpusTerms) -> Self {
        let terms = stats
            .into_iter()
            .filter(|s| is_query_word(&s.surface))
            .filter(|s| s.tf >= 2 || !s.surface.chars().any(|c| c.is_ascii_digit()))
            .map(|mut s| {
                let weight = f64::from(s.tf) * corpus.residual_idf(&s.term).max(0.0);
                if let Some(usage) = corpus.usage(&s.term) {
                    usage.surface.clone_into(&mut s.surface);
                }
                (s, weight)
            })
            .collect();
        Self { terms }
    }

    /// The same terms, each written in its most common form in the corpus.
    #[must_use]
    pub fn written_as(mut self, corpus: &CorpusTerms) -> Self {
        for (stat, _) in &mut self.terms {
            if let Some(usage) = corpus.usage(&stat.term) {
                usage.surface.clone_into(&mut stat.surface);
            }
        }
        self
    }

    /// Number of distinct terms.
    pub fn len(&self) -> usize {
        self.terms.len()
    }

    /// Whether no term is left.
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// Keeps only the terms for which `keep` holds.
    #[must_use]
    pub fn filtered(mut self, keep: impl Fn(&TermStat) -> bool) -> Self {
        self.terms.retain(|(s, _)| keep(s));
        self
    }

    /// Whether the model holds `term`.
    pub fn contains(&self, term: &str) -> bool {
        self.terms.iter().any(|(s, _)| s.term == term)
    }

    /// The `n` heaviest terms (ties by term), heaviest first.
    pub fn top(&self, n: usize) -> Vec<&TermStat> {
        self.ranked().into_iter().take(n).map(|(s, _)| s).collect()
    }

    /// The terms with their weights, heaviest first (ties by term).
    fn ranked(&self) -> Vec<&(TermStat, f64)> {
        let mut sorted: Vec<_> = self.terms.iter().collect();
        sorted.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.term.cmp(&b.0.term)));
        sorted
    }

    /// Draws up to `n` distinct terms of positive weight by rank: the term ranked r-th by weight
    /// (ties by term) with probability proportional to 1/r (Zipf), so the few terms that carry
    /// the topic are drawn most, and the long tail of weak ones, taken together, seldom.
    pub fn draw_by_rank(&self, n: usize, rng: &mut Rng) -> Vec<&TermStat> {
        let by_rank = (self.ranked().into_iter())
            .filter(|(_, w)| *w > 0.0)
            .enumerate()
            .map(|(r, (s, _))| (s, 1.0 / (r + 1) as f64))
            .collect();
        draw_weighted(by_rank, n, rng)
    }

    /// Draws up to `n` distinct terms, each with probability proportional to its weight.
    pub fn draw(&self, n: usize, rng: &mut Rng) -> Vec<&TermStat> {
        draw_weighted(self.terms.iter().map(|(s, w)| (s, *w)).collect(), n, rng)
    }
}

/// Draws up to `n` distinct items of positive weight, each with probability proportional to
/// its weight among those left.
fn draw_weighted<'a>(pool: Vec<(&'a TermStat, f64)>, n: usize, rng: &mut Rng) -> Vec<&'a TermStat> {
    let mut pool: Vec<(&TermStat, f64)> = pool.into_iter().filter(|(_, w)| *w > 0.0).collect();
    let mut drawn = Vec::with_capacity(n);
    while drawn.len() < n && !pool.is_empty() {
        let total: f64 = pool.iter().map(|(_, w)| w).sum();
        let mut target = rng.random::<f64>() * total;
        let mut pick = pool.len() - 1;
        for (i, (_, w)) in pool.iter().enumerate() {
            if target < *w {
                pick = i;
                break;
            }
            target -= w;
        }
        drawn.push(pool.swap_remove(pick).0);
    }
    drawn
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::stream;

    fn stat(term: &str, tf: u32) -> (TermStat, f64) {
        let s = TermStat { term: term.into(), surface: term.into(), tf, df: 1 };
        (s, f64::from(tf))
    }

    #[test]
    fn draws_are_distinct_and_follow_weights() {
        let model = TermModel { terms: vec![stat("heavy", 90), stat("light", 10), stat("zero", 0)] };
        let mut rng = stream(1, "t");
        let mut heavy_first = 0;
        for _ in 0..1000 {
            let drawn = model.draw(3, &mut rng);
            assert_eq!(drawn.len(), 2, "zero-weight terms are never drawn");
            assert_ne!(drawn[0].term, drawn[1].term);
            heavy_first += usize::from(drawn[0].term == "heavy");
        }
        assert!((850..=950).contains(&heavy_first), "heavy drawn first {heavy_first}/1000");
    }

    #[test]
    fn query_words_exclude_stop_words_and_fragments() {
        for word in ["quota", "4012", "sso", "harbor"] {
            assert!(is_query_word(word), "{word}");
        }
        assert!(is_query_word("配额") && is_query_word("同步文件"));
        for word in ["re", "l", "the", "see", "7", "using", "的", "如何", "库"] {
            assert!(!is_query_word(word), "{word}");
        }
    }

    #[test]
    fn rank_draws_follow_zipf_and_skip_weightless_terms() {
        // Ranks 1, 2, 3: the first draw picks rank 1 with probability 1/(1 + 1/2 + 1/3) = 6/11.
        let model = TermModel { terms: vec![stat("c", 1), stat("a", 9), stat("b", 5), stat("z", 0)] };
        let mut rng = stream(3, "t");
        let mut first = std::collections::BTreeMap::new();
        for _ in 0..11_000 {
            let drawn = model.draw_by_rank(4, &mut rng);
            assert_eq!(drawn.len(), 3, "the weightless term is never drawn");
            *first.entry(drawn[0].term.clone()).or_insert(0) += 1;
        }
        let share = |t: &str| f64::from(first[t]) / 11_000.0;
        assert!((share("a") - 6.0 / 11.0).abs() < 0.02, "{first:?}");
        assert!((share("b") - 3.0 / 11.0).abs() < 0.02, "{first:?}");
        assert!((share("c") - 2.0 / 11.0).abs() < 0.02, "{first:?}");
    }

    #[test]
    fn topical_weights_favour_bursty_terms_and_write_the_common_form() {
        let dir = tempfile::tempdir().unwrap();
        // "renal" is in every chunk once (spread), "kidneys" bursts in two of them.
        let texts =
            ["renal kidneys kidneys kidneys", "renal kidney kidneys", "renal note", "renal memo", "renal 37"];
        let (index, _) = crate::index::from_chunks(dir.path(), &crate::index::test_chunks(&texts));
        let corpus = crate::topics::CorpusModel::build(&index).unwrap();
        let stats = index.term_stats("Renal kidney section 37").unwrap();
        let model = TermModel::topical(stats, &corpus.terms);
        let top: Vec<(&str, &str)> =
            model.top(5).iter().map(|s| (s.term.as_str(), s.surface.as_str())).collect();
        assert_eq!(top[0], ("kidney", "kidneys"), "{top:?}");
        assert!(!model.contains("37"), "a number said once is not a query term");
        let renal = model.ranked().into_iter().find(|(s, _)| s.term == "renal").map(|(_, w)| *w);
        assert!(renal.is_some_and(|w| w < 1e-9), "an evenly spread term weighs nothing: {renal:?}");
    }

    #[test]
    fn top_orders_by_weight_then_term() {
        let model = TermModel { terms: vec![stat("b", 2), stat("a", 2), stat("c", 5)] };
        let top: Vec<_> = model.top(2).iter().map(|s| s.term.as_str()).collect();
        assert_eq!(top, ["c", "a"]);
    }
}
