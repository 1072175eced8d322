//! Stage 5, filter: the round trip. Each candidate is searched with BM25; it stays only if its
//! source chunks come back in the top N.
//!
//! Input: [`Candidate`]s. Output: one [`Verdict`] per candidate. Invariants: every candidate gets
//! a status and a reason; `no_answer` queries are checked differently (rejected when the top hit
//! contains their absent term) and never dropped for missing their source.

mod terms;

use crate::dedup::ChunkGroups;
use crate::error::Result;
use crate::id::ChunkId;
use crate::index::{ChunkIndex, Hit, Retriever};
use crate::progress::StageProgress;
use crate::record::{Candidate, Difficulty, Pooled, QueryType, Reason, Status, Verdict};
use crate::runs::{PoolRuns, ROUND_TRIP_POOL};
use crate::text::{Language, Quotable};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::sync::Arc;
use terms::{SourceTerms, TermCache, each_hop_contributes, overlap};

/// What happens to a query whose sources miss the top N.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(strum::VariantArray, strum::Display)]
#[strum(serialize_all = "snake_case")]
pub enum OnMiss {
    /// Leave it out of the test set.
    Drop,
    /// Keep it, marked for review first.
    Flag,
}

/// What decides whether an answerable query stays: its sources' BM25 ranks, or the judge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(strum::VariantArray, strum::Display)]
#[strum(serialize_all = "snake_case")]
pub enum Gate {
    /// The round trip: a source must rank within the top N (`--on-miss` decides a miss).
    #[default]
    RoundTrip,
    /// The LLM judge: the source must answer the query (grade ≥ 2; each hop of a `multi_hop`
    /// query graded above 0), and `--on-miss` decides a failure. BM25 ranks are only measured,
    /// so the set does not select for what BM25 finds.
    Judge,
}

impl Gate {
    /// Whether this is the round trip (the gate the manifest leaves unwritten, as before gates).
    #[must_use]
    pub fn is_round_trip(&self) -> bool {
        *self == Self::RoundTrip
    }
}

/// Which hops of a `multi_hop` query must be in the top N.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(strum::VariantArray, strum::Display)]
#[strum(serialize_all = "snake_case")]
pub enum HopRule {
    /// Every hop.
    All,
    /// At least one hop.
    Any,
}

/// What happens to a `paraphrase` query that copies its source's wording.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(strum::VariantArray, strum::Display)]
#[strum(serialize_all = "snake_case")]
pub enum OnCopy {
    /// Keep it as a `direct` query.
    Relabel,
    /// Leave it out.
    Drop,
}

/// Settings of the round trip and the lexical controls.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FilterConfig {
    /// How deep a source may rank and still count as found.
    pub top_n: usize,
    /// What to do with a miss.
    pub on_miss: OnMiss,
    /// What decides whether a query stays; the round trip unless `--gate judge`.
    #[serde(default, skip_serializing_if = "Gate::is_round_trip")]
    pub gate: Gate,
    /// The rule for `multi_hop` queries.
    pub multi_hop_rule: HopRule,
    /// Chunks in each query's pool: the top hits that are not its sources.
    pub pool_depth: usize,
    /// A `paraphrase` query sharing more than this share of its content terms with its source
    /// copies it.
    pub max_paraphrase_overlap: f64,
    /// What happens to a copying paraphrase.
    pub on_copy: OnCopy,
}

/// What the pipeline derives for the filter from the run, not from settings: the language it
/// settled on and whether a judge checks multi_hop queries. Recorded in the manifest as
/// `filter_checks`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Checks {
    /// The language queries must be in (`None` = no check).
    pub language: Option<Language>,
    /// Reject a `multi_hop` query unless each hop contributes a query term the other hops lack
    /// (the check without a judge).
    pub hop_terms: bool,
}

/// Checks candidates against the index: the round trip.
pub struct RoundTrip<'a> {
    index: &'a ChunkIndex,
    /// What the queries are searched in: the index itself (tests put other engines here).
    retriever: &'a dyn Retriever,
    groups: &'a ChunkGroups,
    config: FilterConfig,
    checks: Checks,
    runs: Option<&'a PoolRuns>,
    threads: usize,
    terms: TermCache,
}

impl<'a> RoundTrip<'a> {
    /// A filter over the chunks of `index`; a source's near-identical copies (`groups`) count
    /// as the source.
    #[must_use]
    pub fn new(index: &'a ChunkIndex, groups: &'a ChunkGroups, config: FilterConfig, checks: Checks) -> Self {
        Self {
            index,
            retriever: index,
            groups,
            config,
            checks,
            runs: None,
            threads: 1,
            terms: TermCache::new(),
        }
    }

    /// The same filter, judging with `threads` threads in [`RoundTrip::check_all`].
    #[must_use]
    pub fn with_threads(self, threads: usize) -> Self {
        Self { threads: threads.max(1), ..self }
    }

    /// The checks this filter makes beyond its settings.
    #[must_use]
    pub fn checks(&self) -> Checks {
        self.checks
    }

    /// The same filter, pooling the top chunks of the user's runs (`--pool-run`) too.
    #[must_use]
    pub fn with_runs(self, runs: &'a PoolRuns) -> Self {
        Self { runs: Some(runs).filter(|r| !r.is_empty()), ..self }
    }

    /// The same filter, searching `retriever` (an engine over the same chunks, by position)
    /// instead of the index.
    #[cfg(test)]
    #[must_use]
    pub fn with_retriever(self, retriever: &'a dyn Retriever) -> Self {
        Self { retriever, ..self }
    }

    /// The verdicts on `candidates`, in their order, checked by the filter's threads (all
    /// searching one index); each verdict is the one [`RoundTrip::check`] gives, whatever the
    /// number of threads. `progress` counts the candidates checked.
    ///
    /// # Errors
    /// The error of the first candidate (in order) whose search fails.
    pub fn check_all(&self, candidates: &[&Candidate], progress: &StageProgress) -> Result<Vec<Verdict>> {
        let check = |candidate: &Candidate| {
            let verdict = self.check(candidate);
            progress.inc(1);
            verdict
        };
        crate::threads::map_in_order(candidates.to_vec(), self.threads, check).into_iter().collect()
    }

    /// The verdict on one candidate.
    ///
    /// # Errors
    /// [`crate::Error::Index`] when the search fails.
    pub fn check(&self, candidate: &Candidate) -> Result<Verdict> {
        self.verdict(candidate, true)
    }

    /// The verdict on a candidate whose evidence quotes were looked up already (a refresh looks
    /// them up in the new corpus itself, and knows when they are gone): [`RoundTrip::check`]
    /// without requiring them in the sources.
    ///
    /// # Errors
    /// [`crate::Error::Index`] when the search fails.
    pub fn recheck(&self, candidate: &Candidate) -> Result<Verdict> {
        self.verdict(candidate, false)
    }

    /// The verdict on one candidate; its evidence quotes are looked up in its sources when
    /// `look_up`.
    fn verdict(&self, candidate: &Candidate, look_up: bool) -> Result<Verdict> {
        if let Some(reason) = self.precheck(candidate, look_up)? {
            return Ok(Verdict::dropped(reason));
        }
        let answerable = candidate.query_type != QueryType::NoAnswer;
        let relevant = self.relevant(candidate);
        // Each source comes first among its copies.
        let sources: Vec<usize> = relevant.iter().filter_map(|members| members.first().copied()).collect();
        let tokens = self.index.analyzer().tokens(&candidate.text);
        let query_terms: Vec<String> = tokens.iter().map(|t| t.term.clone()).collect();
        // The ranks look at the top N; the pool takes `pool_depth` hits that are not excluded.
        let excluded_count = if answerable { relevant.iter().map(Vec::len).sum::<usize>() } else { 0 };
        let depth = self.config.top_n.max(self.config.pool_depth + excluded_count);
        let hits = self.retriever.search_terms(&query_terms, depth)?;
        let ranks = ranks(&relevant, &hits[..hits.len().min(self.config.top_n)]);
        // A no_answer query's sources are not relevant, so they belong in its pool.
        let excluded: BTreeSet<usize> =
            if answerable { relevant.iter().flatten().copied().collect() } else { BTreeSet::new() };
        let (status, reason) = match candidate.query_type {
            QueryType::NoAnswer => self.no_answer_rule(candidate, hits.first().map(|h| h.chunk))?,
            QueryType::MultiHop => self.miss_rule(self.hops_found(&ranks), Reason::HopNotInTopN),
            QueryType::Direct | QueryType::Paraphrase => {
                let found = self.miss_rule(ranks.iter().all(Option::is_some), Reason::SourceNotInTopN);
                // A topical query is about its topic: finding any chunk on it is finding an answer.
                if found.0 != Status::Kept
                    && self.on_topic(candidate, &hits[..hits.len().min(self.config.top_n)])
                {
                    (Status::Kept, Reason::TopicInTopN)
                } else {
                    found
                }
            }
        };
        let source_terms =
            sources.iter().map(|&p| self.terms.chunk(self.index, p)).collect::<Result<Vec<_>>>()?;
        let query = self.terms.query(&tokens);
        let overlap = overlap(&query.content, &source_terms);
        let mut verdict = Verdict {
            status,
            reason,
            top_hit: hits.first().map(|h| self.index.chunk_id(h.chunk)),
            difficulty: answerable.then(|| Difficulty::measure(&ranks, overlap)),
            ranks,
            overlap,
            longest_shared: source_terms
                .iter()
                .map(|s| longest_run(&query.sequence, &s.sequence))
                .max()
                .unwrap_or(0),
            relabelled: None,
            copies: excluded.iter().filter(|p| !sources.contains(p)).map(|&p| self.id(p)).collect(),
            duplicate_of: None,
            pool: self.pool(candidate.id.as_str(), &hits, &excluded),
        };
        if verdict.status != Status::Dropped {
            self.lexical_controls(candidate, &query.content, &source_terms, &mut verdict);
        }
        Ok(verdict)
    }

    /// Each source with its near-identical copies: any of them found counts as the source.
    fn relevant(&self, candidate: &Candidate) -> Vec<Vec<usize>> {
        let with_copies = |p: usize| std::iter::once(p).chain(self.groups.copies(p));
        candidate
            .sources
            .iter()
            .map(|id| self.index.position(id).into_iter().flat_map(with_copies).collect())
            .collect()
    }

    /// The first `pool_depth` hits that are not `excluded`, with their ranks; with runs, then
    /// each run's top chunks for `query` that are not `excluded`, every entry naming the
    /// sources that pooled it.
    fn pool(&self, query: &str, hits: &[Hit], excluded: &BTreeSet<usize>) -> Vec<Pooled> {
        let others = (1..).zip(hits).filter(|(_, h)| !excluded.contains(&h.chunk));
        let mut pool: Vec<Pooled> = others
            .take(self.config.pool_depth)
            .map(|(rank, h)| Pooled { chunk_id: self.id(h.chunk), rank, grade: None, pooled_by: Vec::new() })
            .collect();
        let Some(runs) = self.runs else { return pool };
        for entry in &mut pool {
            entry.pooled_by.push(format!("{ROUND_TRIP_POOL}:{}", entry.rank));
        }
        for hit in runs.hits(query).iter().filter(|h| !excluded.contains(&h.chunk)) {
            let id = self.id(hit.chunk);
            let source = format!("{}:{}", hit.run, hit.rank);
            match pool.iter_mut().find(|p| p.chunk_id == id) {
                Some(entry) => entry.pooled_by.push(source),
                None => {
                    pool.push(Pooled { chunk_id: id, rank: hit.rank, grade: None, pooled_by: vec![source] });
                }
            }
        }
        pool
    }

    fn id(&self, position: usize) -> ChunkId {
        self.index.chunk_id(position)
    }

    /// The copy rule for `paraphrase` queries and, without a judge, the hop-terms rule for
    /// `multi_hop` ones.
    fn lexical_controls(
        &self,
        candidate: &Candidate,
        content: &[Option<u32>],
        sources: &[Arc<SourceTerms>],
        verdict: &mut Verdict,
    ) {
        match candidate.query_type {
            QueryType::Paraphrase if verdict.overlap > self.config.max_paraphrase_overlap => {
                match self.config.on_copy {
                    OnCopy::Relabel => verdict.relabelled = Some(QueryType::Direct),
                    OnCopy::Drop => verdict.mark(Status::Dropped, Reason::CopiesSource),
                }
            }
            QueryType::MultiHop if self.checks.hop_terms && !each_hop_contributes(content, sources) => {
                verdict.mark(Status::Dropped, Reason::OneChunkAnswers);
            }
            _ => {}
        }
    }

    /// Checks made before the round trip: evidence quotes must occur in the sources (when
    /// `look_up`), and the query must be in the requested language.
    fn precheck(&self, candidate: &Candidate, look_up: bool) -> Result<Option<Reason>> {
        if look_up && !candidate.evidence.is_empty() {
            let mut sources = Vec::new();
            for id in &candidate.sources {
                if let Some(position) = self.index.position(id) {
                    sources.push(Quotable::new(&self.index.text(position)?));
                }
            }
            // Every quote is in some source, and every source (each hop) is quoted.
            let quoted = |s: &Quotable| candidate.evidence.iter().any(|q| s.holds(q));
            let found = |q: &String| sources.iter().any(|s| s.holds(q));
            if !candidate.evidence.iter().all(found) || !sources.iter().all(quoted) {
                return Ok(Some(Reason::EvidenceNotInSource));
            }
        }
        if self.checks.language.is_some_and(|language| !language.matches(&candidate.text)) {
            return Ok(Some(Reason::WrongLanguage));
        }
        Ok(None)
    }

    fn hops_found(&self, ranks: &[Option<u32>]) -> bool {
        match self.config.multi_hop_rule {
            HopRule::All => !ranks.is_empty() && ranks.iter().all(Option::is_some),
            HopRule::Any => ranks.iter().any(Option::is_some),
        }
    }

    /// Whether a chunk on the candidate's topic is in `top_n` (topical queries only): the hits'
    /// ids are looked up in the topic, not the topic's ids (dozens) in the index.
    fn on_topic(&self, candidate: &Candidate, top_n: &[Hit]) -> bool {
        let Some(topic) = &candidate.topic else { return false };
        top_n.iter().any(|h| {
            let id = self.index.chunk_id_str(h.chunk);
            topic.iter().any(|t| t.as_str() == id)
        })
    }

    /// A found source passes; a miss goes as `--on-miss` says, or, when the judge is the gate,
    /// stays for the judge to decide (the miss recorded as the reason).
    fn miss_rule(&self, found: bool, miss: Reason) -> (Status, Reason) {
        match (found, self.config.on_miss) {
            (true, _) => (Status::Kept, Reason::SourceInTopN),
            (false, _) if self.config.gate == Gate::Judge => (Status::Kept, miss),
            (false, OnMiss::Drop) => (Status::Dropped, miss),
            (false, OnMiss::Flag) => (Status::Flagged, miss),
        }
    }

    fn no_answer_rule(&self, candidate: &Candidate, top: Option<usize>) -> Result<(Status, Reason)> {
        let Some(absent) = &candidate.absent_term else {
            return Ok((Status::Flagged, Reason::NoAnswerUnchecked));
        };
        let found = match top {
            Some(chunk) => {
                let top_terms = self.terms.chunk(self.index, chunk)?;
                let absent = self.index.analyzer().terms(absent);
                self.terms.ids(&absent).into_iter().flatten().any(|t| top_terms.contains(t))
            }
            None => false,
        };
        Ok(if found {
            (Status::Dropped, Reason::AbsentTermFound)
        } else {
            (Status::Kept, Reason::NoAnswerConfirmed)
        })
    }
}

/// The 1-based rank of each source (or a copy of it) within `top_n`; `None` when missing.
fn ranks(relevant: &[Vec<usize>], top_n: &[Hit]) -> Vec<Option<u32>> {
    let rank = |members: &Vec<usize>| {
        let at = top_n.iter().position(|h| members.contains(&h.chunk))?;
        u32::try_from(at + 1).ok()
    };
    relevant.iter().map(rank).collect()
}

/// Length of the longest run of consecutive terms that `a` and `b` share (longest common
/// substring over terms, by dynamic programming over one row).
fn longest_run<T: PartialEq>(a: &[T], b: &[T]) -> u32 {
    let mut row = vec![0u32; b.len() + 1];
    let mut best = 0;
    for x in a {
        let mut diagonal = 0;
        for (j, y) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = if x == y { diagonal + 1 } else { 0 };
            best = best.max(row[j + 1]);
            diagonal = above;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::ChunkId;
    use crate::index::{from_chunks, test_chunks};

    const TEXTS: [&str; 4] = [
        "quota exceeded error when the workspace storage is full",
        "sharing links expire after thirty days unless a password is set",
        "recovery key for encrypted folders is stored offline",
        "bandwidth limits slow the upload of large files",
    ];

    fn candidate(query_type: QueryType, text: &str, sources: &[usize], absent: Option<&str>) -> Candidate {
        let ids: Vec<String> = sources.iter().map(|i| format!("c{i}")).collect();
        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        Candidate { absent_term: absent.map(str::to_owned), ..Candidate::sample(query_type, text, &ids) }
    }

    fn with_filter(config: FilterConfig, check: impl FnOnce(&RoundTrip<'_>)) {
        with_checks(config, Checks::default(), check);
    }

    fn with_checks(config: FilterConfig, checks: Checks, check: impl FnOnce(&RoundTrip<'_>)) {
        let dir = tempfile::tempdir().unwrap();
        let (index, _) = from_chunks(dir.path(), &test_chunks(&TEXTS));
        check(&RoundTrip::new(&index, &ChunkGroups::new(1.0), config, checks));
    }

    fn config(top_n: usize, on_miss: OnMiss, multi_hop_rule: HopRule) -> FilterConfig {
        FilterConfig {
            top_n,
            on_miss,
            gate: Gate::RoundTrip,
            multi_hop_rule,
            pool_depth: 2,
            max_paraphrase_overlap: 1.0,
            on_copy: OnCopy::Relabel,
        }
    }

    #[track_caller]
    fn check(filter: &RoundTrip<'_>, c: &Candidate, status: Status, reason: Reason, ranks: &[Option<u32>]) {
        let verdict = filter.check(c).unwrap();
        assert_eq!((verdict.status, verdict.reason, verdict.ranks.as_slice()), (status, reason, ranks));
    }

    #[test]
    fn single_source_rules() {
        with_filter(config(1, OnMiss::Drop, HopRule::All), |f| {
            let hit = candidate(QueryType::Direct, "quota exceeded", &[0], None);
            check(f, &hit, Status::Kept, Reason::SourceInTopN, &[Some(1)]);
            let miss = candidate(QueryType::Paraphrase, "password links", &[0], None);
            check(f, &miss, Status::Dropped, Reason::SourceNotInTopN, &[None]);
        });
        with_filter(config(1, OnMiss::Flag, HopRule::All), |f| {
            let miss = candidate(QueryType::Direct, "password links", &[0], None);
            check(f, &miss, Status::Flagged, Reason::SourceNotInTopN, &[None]);
        });
        let judged = FilterConfig { gate: Gate::Judge, ..config(1, OnMiss::Drop, HopRule::All) };
        with_filter(judged, |f| {
            let miss = candidate(QueryType::Direct, "password links", &[0], None);
            check(f, &miss, Status::Kept, Reason::SourceNotInTopN, &[None]);
        });
    }

    #[test]
    fn a_topical_query_passes_when_a_chunk_on_its_topic_is_in_the_top_n() {
        with_filter(config(1, OnMiss::Drop, HopRule::All), |f| {
            // "password links" finds chunk 1, not the source 0.
            let mut topical = candidate(QueryType::Direct, "password links", &[0], None);
            topical.topic = Some(vec![ChunkId::parse("c1").unwrap()]);
            check(f, &topical, Status::Kept, Reason::TopicInTopN, &[None]);
            topical.topic = Some(vec![ChunkId::parse("c2").unwrap()]);
            check(f, &topical, Status::Dropped, Reason::SourceNotInTopN, &[None]);
        });
    }

    #[test]
    fn multi_hop_rules() {
        let query = candidate(QueryType::MultiHop, "quota storage recovery", &[0, 3], None);
        with_filter(config(2, OnMiss::Drop, HopRule::All), |f| {
            check(f, &query, Status::Dropped, Reason::HopNotInTopN, &[Some(1), None]);
        });
        with_filter(config(2, OnMiss::Drop, HopRule::Any), |f| {
            check(f, &query, Status::Kept, Reason::SourceInTopN, &[Some(1), None]);
        });
    }

    #[test]
    fn no_answer_rules() {
        with_filter(config(3, OnMiss::Drop, HopRule::All), |f| {
            let absent = candidate(QueryType::NoAnswer, "walrus storage quota", &[0], Some("walrus"));
            check(f, &absent, Status::Kept, Reason::NoAnswerConfirmed, &[Some(1)]);
            let present = candidate(QueryType::NoAnswer, "password expiry", &[0], Some("password"));
            check(f, &present, Status::Dropped, Reason::AbsentTermFound, &[None]);
            let unchecked = candidate(QueryType::NoAnswer, "storage", &[0], None);
            check(f, &unchecked, Status::Flagged, Reason::NoAnswerUnchecked, &[Some(1)]);
        });
    }

    #[test]
    fn evidence_and_language_are_checked_first() {
        let english = Checks { language: Some(Language::En), hop_terms: false };
        with_checks(config(3, OnMiss::Drop, HopRule::All), english, |f| {
            let mut quoted = candidate(QueryType::Direct, "when do links expire", &[1], None);
            quoted.evidence = vec!["Links  EXPIRE after thirty days".into()];
            check(f, &quoted, Status::Kept, Reason::SourceInTopN, &[Some(1)]);
            quoted.evidence = vec!["links expire after 30 days".into()];
            check(f, &quoted, Status::Dropped, Reason::EvidenceNotInSource, &[]);
            let chinese = candidate(QueryType::Direct, "链接什么时候过期", &[1], None);
            check(f, &chinese, Status::Dropped, Reason::WrongLanguage, &[]);
        });
    }

    #[test]
    fn a_copying_paraphrase_is_relabelled_or_dropped() {
        let mut relabel = config(3, OnMiss::Drop, HopRule::All);
        relabel.max_paraphrase_overlap = 0.6;
        let copy = candidate(QueryType::Paraphrase, "bandwidth limits slow uploads", &[3], None);
        let reworded =
            candidate(QueryType::Paraphrase, "bandwidth throttling sluggish transfers", &[3], None);
        with_filter(relabel, |f| {
            let verdict = f.check(&copy).unwrap();
            assert_eq!((verdict.status, verdict.relabelled), (Status::Kept, Some(QueryType::Direct)));
            // "bandwidth limits slow (the) upload": one run of four terms ("the" is a stop word).
            assert_eq!(verdict.longest_shared, 4);
            let verdict = f.check(&reworded).unwrap();
            assert_eq!((verdict.relabelled, verdict.longest_shared), (None, 1));
            assert!((verdict.overlap - 0.25).abs() < 1e-9, "{}", verdict.overlap);
        });
        with_filter(FilterConfig { on_copy: OnCopy::Drop, ..relabel }, |f| {
            check(f, &copy, Status::Dropped, Reason::CopiesSource, &[Some(1)]);
        });
    }

    #[test]
    fn without_a_judge_each_hop_must_contribute_a_term() {
        let hop_terms = Checks { language: None, hop_terms: true };
        with_checks(config(3, OnMiss::Drop, HopRule::Any), hop_terms, |f| {
            let both = candidate(QueryType::MultiHop, "quota recovery", &[0, 2], None);
            check(f, &both, Status::Kept, Reason::SourceInTopN, &[Some(2), Some(1)]);
            let one = candidate(QueryType::MultiHop, "quota exceeded workspace", &[0, 2], None);
            check(f, &one, Status::Dropped, Reason::OneChunkAnswers, &[Some(1), None]);
        });
    }

    #[test]
    fn a_copy_of_the_source_in_the_top_n_counts_as_the_source() {
        // Chunks 0 and 1 are copies; a query about them ranks chunk 1 first (it repeats
        // "quota" more) and the source, chunk 0, second.
        let texts = [
            "quota exceeded when storage is full",
            "quota quota exceeded when storage is full",
            "links expire",
        ];
        let dir = tempfile::tempdir().unwrap();
        let (index, _) = from_chunks(dir.path(), &test_chunks(&texts));
        let mut groups = ChunkGroups::new(0.5);
        for text in texts {
            groups.add(text);
        }
        assert_eq!(groups.groups(), [vec![0, 1]]);
        let filter =
            RoundTrip::new(&index, &groups, config(1, OnMiss::Drop, HopRule::All), Checks::default());
        let query = candidate(QueryType::Direct, "quota exceeded", &[0], None);
        let verdict = filter.check(&query).unwrap();
        assert_eq!((verdict.status, verdict.ranks.as_slice()), (Status::Kept, &[Some(1)][..]));
        assert_eq!(verdict.copies.iter().map(ChunkId::as_str).collect::<Vec<_>>(), ["c1"]);
        assert!(verdict.pool.iter().all(|p| p.chunk_id.as_str() != "c1"), "a copy is not pooled");
        let no_groups = ChunkGroups::new(1.0);
        let alone =
            RoundTrip::new(&index, &no_groups, config(1, OnMiss::Drop, HopRule::All), Checks::default());
        let verdict = alone.check(&query).unwrap();
        assert_eq!((verdict.status, verdict.ranks.as_slice()), (Status::Dropped, &[None][..]));
    }

    #[test]
    fn longest_run_is_the_longest_common_substring_of_terms() {
        let terms = |s: &str| s.split(' ').map(str::to_owned).collect::<Vec<_>>();
        assert_eq!(longest_run(&terms("a b c d"), &terms("x b c d y a")), 3);
        assert_eq!(longest_run(&terms("a c"), &terms("a b c")), 1);
        assert_eq!(longest_run(&terms("q"), &terms("r s")), 0);
    }

    #[test]
    fn difficulty_from_ranks_and_overlap() {
        assert_eq!(Difficulty::measure(&[Some(1)], 0.9), Difficulty::Easy);
        assert_eq!(Difficulty::measure(&[Some(1), Some(2)], 0.8), Difficulty::Easy);
        assert_eq!(Difficulty::measure(&[Some(2)], 0.9), Difficulty::Medium);
        assert_eq!(Difficulty::measure(&[Some(1)], 0.6), Difficulty::Medium);
        assert_eq!(Difficulty::measure(&[Some(4)], 0.9), Difficulty::Hard);
        assert_eq!(Difficulty::measure(&[Some(1)], 0.4), Difficulty::Hard);
        assert_eq!(Difficulty::measure(&[None], 1.0), Difficulty::Hard);
    }

    #[test]
    fn overlap_counts_distinct_query_terms_in_sources() {
        with_filter(config(3, OnMiss::Drop, HopRule::All), |f| {
            let c = candidate(QueryType::Direct, "quota quota walrus", &[0], None);
            let verdict = f.check(&c).unwrap();
            assert!((verdict.overlap - 0.5).abs() < 1e-9, "{}", verdict.overlap);
        });
    }

    /// A retriever that finds nothing: a round trip through it misses every source.
    struct Blind;

    impl Retriever for Blind {
        fn search_terms(
            &self,
            _: &[String],
            _: usize,
        ) -> std::result::Result<Vec<Hit>, crate::index::IndexError> {
            Ok(Vec::new())
        }
    }

    #[test]
    fn the_round_trip_searches_through_its_retriever() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let (index, _) = from_chunks(dir.path(), &test_chunks(&TEXTS));
        let groups = ChunkGroups::new(1.0);
        let filter =
            RoundTrip::new(&index, &groups, config(1, OnMiss::Drop, HopRule::All), Checks::default());
        let hit = candidate(QueryType::Direct, "quota exceeded", &[0], None);
        check(&filter, &hit, Status::Kept, Reason::SourceInTopN, &[Some(1)]);
        let blind = filter.with_retriever(&Blind);
        check(&blind, &hit, Status::Dropped, Reason::SourceNotInTopN, &[None]);
    }

    #[test]
    fn labels_are_serdes_names() {
        crate::testing::labels_are_serde_names(|v: OnMiss| v.to_string());
        crate::testing::labels_are_serde_names(|v: Gate| v.to_string());
        crate::testing::labels_are_serde_names(|v: HopRule| v.to_string());
        crate::testing::labels_are_serde_names(|v: OnCopy| v.to_string());
    }
}
