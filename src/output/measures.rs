//! "What this set measures", computed from the set itself: whether its queries are exact-word
//! lookups of one chunk (a known-item lexical set, which any exact-match ranker wins and which
//! punishes a semantic retriever for every other chunk on the topic it finds), how common
//! their words are in the corpus, how many chunks each query has relevant, and how its pools
//! were made.

use super::beir::qrels;
use crate::error::Result;
use crate::generate::is_query_word;
use crate::id::QueryId;
use crate::index::ChunkIndex;
use crate::record::{Checked, QueryType};
use crate::runs::is_run_source;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;

/// A set whose queries average fewer relevant chunks than this is a known-item set …
const KNOWN_ITEM_LABELS: f64 = 1.5;
/// … and a lexical one when its source is the only chunk with all the query's words this often.
const LEXICAL_UNIQUE: f64 = 0.5;

/// The figures of the section.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Measures {
    /// Answerable queries in the set.
    pub answerable: usize,
    /// Of those, the ones whose sources (or their copies) are the only chunks holding all of
    /// the query's content words.
    pub unique_match: usize,
    /// Chunks in the corpus.
    pub chunks: usize,
    /// Document frequency (chunks) of every content term of every answerable query.
    pub query_term_df: Vec<u64>,
    /// Relevant chunks (grade ≥ 1) per answerable query.
    pub labels: Vec<usize>,
    /// Relevant rows by where they come from.
    pub by_provenance: BTreeMap<&'static str, usize>,
    /// The round trip's pool depth (`--pool-depth`).
    pub pool_depth: usize,
    /// `--pool-run` runs that added chunks to pools, with how many (query, chunk) entries.
    pub runs: BTreeMap<String, usize>,
    /// Pooled chunks graded by the judge.
    pub judged: usize,
}

impl Measures {
    /// Computes the figures for the queries in `set`.
    ///
    /// # Errors
    /// [`crate::Error::Index`] when a search fails.
    pub fn compute(set: &[&Checked], index: &ChunkIndex, pool_depth: usize) -> Result<Self> {
        let mut m = Self { chunks: index.len(), pool_depth, ..Self::default() };
        let rows = qrels(set.iter().copied());
        let mut relevant: HashMap<&QueryId, usize> = HashMap::new();
        for row in rows.iter().filter(|q| q.grade >= 1) {
            *relevant.entry(&row.query_id).or_default() += 1;
        }
        for judged in set.iter().filter(|j| j.query_type() != QueryType::NoAnswer) {
            m.answerable += 1;
            let terms: BTreeSet<String> = index
                .analyzer()
                .tokens(&judged.candidate.text)
                .into_iter()
                .filter(|t| is_query_word(&t.surface))
                .map(|t| t.term)
                .collect();
            let terms: Vec<String> = terms.into_iter().collect();
            for term in &terms {
                m.query_term_df.push(index.doc_freq(term)?);
            }
            let answering: BTreeSet<usize> = judged
                .answering_chunks()
                .iter()
                .chain(&judged.verdict.copies)
                .filter_map(|id| index.position(id))
                .collect();
            let holding = index.containing_all(&terms, answering.len() + 1)?;
            if !holding.is_empty() && holding.iter().all(|c| answering.contains(c)) {
                m.unique_match += 1;
            }
            m.labels.push(relevant.get(&judged.candidate.id).copied().unwrap_or(0));
        }
        for row in rows.iter().filter(|q| q.grade >= 1) {
            *m.by_provenance.entry(row.provenance.label()).or_default() += 1;
        }
        for pooled in set.iter().flat_map(|j| &j.verdict.pool) {
            m.judged += usize::from(pooled.grade.is_some());
            for source in pooled.pooled_by.iter().filter(|s| is_run_source(s)) {
                let name = source.rsplit_once(':').map_or(source.as_str(), |(name, _)| name);
                *m.runs.entry(name.to_owned()).or_default() += 1;
            }
        }
        Ok(m)
    }

    /// Whether the set is a known-item set: about one relevant chunk per query.
    #[must_use]
    pub fn known_item(&self) -> bool {
        self.answerable > 0 && mean(&self.labels) < KNOWN_ITEM_LABELS
    }

    /// Whether its queries are mostly exact-word lookups: the source is the only chunk holding
    /// all their words.
    #[must_use]
    pub fn lexical(&self) -> bool {
        self.answerable > 0 && self.unique_match as f64 / self.answerable as f64 >= LEXICAL_UNIQUE
    }

    /// Renders the section.
    pub fn render(&self, out: &mut String) {
        let _ = writeln!(out, "## What this set measures\n");
        if self.answerable == 0 {
            let _ = writeln!(out, "No answerable query in the set.\n");
            return;
        }
        let share = |n: usize| 100.0 * n as f64 / self.answerable as f64;
        let df = quartiles(&self.query_term_df);
        let pct = |x: f64| 100.0 * x / self.chunks.max(1) as f64;
        let labels: Vec<u64> = self.labels.iter().map(|&n| n as u64).collect();
        let l = quartiles(&labels);
        let _ = writeln!(out, "| measure | value |\n|---|---|");
        let _ = writeln!(
            out,
            "| queries whose sources are the only chunks holding all their words | {} of {} ({:.0} %) |",
            self.unique_match,
            self.answerable,
            share(self.unique_match)
        );
        let _ = writeln!(
            out,
            "| document frequency of a query word (median, quartiles) | {:.0} chunks ({:.2} % of {}), {:.0}–{:.0} |",
            df[1],
            pct(df[1]),
            self.chunks,
            df[0],
            df[2]
        );
        let _ = writeln!(
            out,
            "| relevant chunks per query (mean; median, quartiles; max) | {:.1}; {:.0}, {:.0}–{:.0}; {} |",
            mean(&self.labels),
            l[1],
            l[0],
            l[2],
            self.labels.iter().max().unwrap_or(&0)
        );
        let provenance: Vec<String> = self.by_provenance.iter().map(|(p, n)| format!("{p} {n}")).collect();
        let _ = writeln!(out, "| relevant rows by provenance | {} |", provenance.join(", "));
        let runs: Vec<String> = self.runs.iter().map(|(r, n)| format!("{r} ({n})")).collect();
        let pooled = if runs.is_empty() { "none".to_owned() } else { runs.join(", ") };
        let _ = writeln!(
            out,
            "| pools | BM25 top {} of the round trip; runs pooled: {pooled}; pooled chunks graded by the judge: {} |\n",
            self.pool_depth, self.judged
        );
        if self.known_item() {
            let (kind, lookup) = if self.lexical() {
                (
                    "known-item lexical set",
                    "most often the only chunk that holds all their words: any exact-match ranker finds it, and ",
                )
            } else {
                ("known-item set", "")
            };
            let _ = writeln!(
                out,
                "**This is a {kind}.** Its queries have about one relevant chunk each, {lookup}a \
                 retriever that finds other chunks on the same topic is counted wrong. Do not use it to \
                 compare lexical with semantic retrievers (it ranks them backwards). For a set that can: \
                 the offline generator's topical labels (`--topic-labels`, on by default), or your \
                 systems' runs pooled and judged (`qrelgen pool --set SET --run RUN`, once per \
                 system).\n"
            );
        } else {
            let _ = writeln!(
                out,
                "Queries have several relevant chunks: a retriever that finds other chunks on a \
                 query's topic gets credit for them. Unjudged chunks still count as not relevant; \
                 judge pools that include your systems' runs (`qrelgen pool --set SET --run RUN`) to \
                 close that gap.\n"
            );
        }
    }
}

fn mean(values: &[usize]) -> f64 {
    if values.is_empty() { 0.0 } else { values.iter().sum::<usize>() as f64 / values.len() as f64 }
}

/// First quartile, median and third quartile (nearest rank); zeros for no values.
fn quartiles(values: &[u64]) -> [f64; 3] {
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    let at = |q: f64| {
        if sorted.is_empty() {
            return 0.0;
        }
        let rank = (q * sorted.len() as f64).ceil().max(1.0) as usize;
        sorted[rank.min(sorted.len()) - 1] as f64
    };
    [at(0.25), at(0.5), at(0.75)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quartiles_by_nearest_rank() {
        let close = |got: [f64; 3], want: [f64; 3]| got.iter().zip(want).all(|(g, w)| (g - w).abs() < 1e-12);
        assert!(close(quartiles(&[5, 1, 3, 2, 4]), [2.0, 3.0, 4.0]));
        assert!(close(quartiles(&[]), [0.0; 3]));
    }

    #[test]
    fn a_set_of_single_unique_labels_is_known_item() {
        let m = Measures {
            answerable: 4,
            unique_match: 3,
            labels: vec![1, 1, 1, 2],
            chunks: 10,
            ..Measures::default()
        };
        assert!(m.known_item() && m.lexical());
        let mut out = String::new();
        m.render(&mut out);
        assert!(
            out.contains("| 3 of 4 (75 %) |") && out.contains("**This is a known-item lexical set.**"),
            "{out}"
        );
        let mut out = String::new();
        Measures { unique_match: 1, ..m.clone() }.render(&mut out);
        assert!(out.contains("**This is a known-item set.**"), "{out}");
        let topical = Measures { labels: vec![12, 30, 8, 1], ..m };
        assert!(!topical.known_item());
        let mut out = String::new();
        topical.render(&mut out);
        assert!(out.contains("| 12.8; 8, 1–12; 30 |") && !out.contains("known-item lexical set."), "{out}");
    }
}
