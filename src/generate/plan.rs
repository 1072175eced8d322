//! Planning: how many queries of each type, and which chunks they are written from.

use super::Request;
use super::terms::{TermModel, Weighting, is_query_word};
use crate::dedup::ChunkGroups;
use crate::error::Result;
use crate::id::DocId;
use crate::index::ChunkIndex;
use crate::record::QueryType;
use crate::rng::stream;
use rand::seq::SliceRandom;
use serde::{Serialize, Serializer};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::str::FromStr;

/// A chunk needs this many distinct query words to be worth a query.
const MIN_TERMS: usize = 5;
/// Salient terms of a chunk used to retrieve its `multi_hop` partner.
const PARTNER_QUERY_TERMS: usize = 8;
/// Hits examined when looking for a `multi_hop` partner.
const PARTNER_CANDIDATES: usize = 10;

/// Queries wanted per type.
pub type Quotas = BTreeMap<QueryType, usize>;

/// The share of each query type, e.g. `direct=0.4,paraphrase=0.3,multi_hop=0.15,no_answer=0.15`.
#[derive(Debug, Clone, PartialEq)]
pub struct Mix(BTreeMap<QueryType, f64>);

impl Default for Mix {
    fn default() -> Self {
        Self(BTreeMap::from([
            (QueryType::Direct, 0.4),
            (QueryType::Paraphrase, 0.3),
            (QueryType::MultiHop, 0.15),
            (QueryType::NoAnswer, 0.15),
        ]))
    }
}

/// Parses `name=share,name=share,…`: shares are numbers ≥ 0 adding up to 1, names are unique.
///
/// # Errors
/// A sentence naming the malformed part.
pub fn parse_shares(spec: &str) -> Result<Vec<(String, f64)>, String> {
    let mut shares: Vec<(String, f64)> = Vec::new();
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, share) = part.split_once('=').ok_or_else(|| format!("{part:?} is not NAME=SHARE"))?;
        let name = name.trim();
        let share: f64 = share
            .trim()
            .parse()
            .ok()
            .filter(|v: &f64| v.is_finite() && *v >= 0.0)
            .ok_or_else(|| format!("share {share:?} of {name} is not a number ≥ 0"))?;
        if shares.iter().any(|(n, _)| n == name) {
            return Err(format!("{name} is given twice"));
        }
        shares.push((name.to_owned(), share));
    }
    let total: f64 = shares.iter().map(|(_, s)| s).sum();
    if (total - 1.0).abs() > 0.01 {
        return Err(format!("the shares add up to {total}, not 1"));
    }
    Ok(shares)
}

impl FromStr for Mix {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_shares(s)?
            .into_iter()
            .map(|(label, share)| {
                QueryType::from_label(&label).map(|t| (t, share)).ok_or_else(|| {
                    format!("unknown query type {label:?} (known: direct, paraphrase, multi_hop, no_answer)")
                })
            })
            .collect::<Result<BTreeMap<_, _>, _>>()
            .map(|shares| {
                // parse_shares allows a sum within 1 ± 0.01: make it exactly 1.
                let total: f64 = shares.values().sum();
                Self(
                    shares.into_iter().map(|(t, s)| (t, if total > 0.0 { s / total } else { 0.0 })).collect(),
                )
            })
    }
}

impl fmt::Display for Mix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(|(t, s)| format!("{t}={s}")).collect();
        f.write_str(&parts.join(","))
    }
}

impl Serialize for Mix {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.iter().map(|(t, s)| (t.label(), s)))
    }
}

impl Mix {
    /// Splits `total` queries by share, largest remainder first (ties in type order), so the
    /// quotas add up to `total` exactly.
    #[must_use]
    pub fn quotas(&self, total: usize) -> Quotas {
        let exact: Vec<(QueryType, f64)> = QueryType::ALL
            .iter()
            .map(|&t| (t, self.0.get(&t).copied().unwrap_or(0.0) * total as f64))
            .collect();
        let mut quotas: Quotas = exact.iter().map(|&(t, x)| (t, x.floor() as usize)).collect();
        let assigned: usize = quotas.values().sum();
        // Only types in the mix get the leftover queries.
        let mut by_remainder: Vec<(QueryType, f64)> =
            exact.iter().copied().filter(|(t, _)| self.0.get(t).is_some_and(|s| *s > 0.0)).collect();
        by_remainder.sort_by(|a, b| (b.1 - b.1.floor()).total_cmp(&(a.1 - a.1.floor())).then(a.0.cmp(&b.0)));
        for (t, _) in by_remainder.into_iter().take(total.saturating_sub(assigned)) {
            *quotas.entry(t).or_default() += 1;
        }
        quotas
    }
}

/// What planning knows of each chunk, in a byte: the types it was taken for (a bit each) and,
/// once checked, whether it has enough query words. One byte a chunk, where hash sets of the
/// chunks tried took some 20–40 bytes for each chunk and type, tens of MiB on a large corpus.
struct Marks(Vec<u8>);

/// [`Marks`]: the chunk's query words were counted.
const CHECKED: u8 = 1 << 6;
/// [`Marks`]: the chunk has enough of them.
const ELIGIBLE: u8 = 1 << 7;
// A bit per type below `CHECKED`.
const _: () = assert!(QueryType::ALL.len() <= 6);

impl Marks {
    fn bit(query_type: QueryType) -> u8 {
        1 << (query_type as u8)
    }

    /// Whether `chunk` was taken for `query_type`.
    fn used(&self, query_type: QueryType, chunk: usize) -> bool {
        self.0[chunk] & Self::bit(query_type) != 0
    }

    fn use_for(&mut self, query_type: QueryType, chunk: usize) {
        self.0[chunk] |= Self::bit(query_type);
    }

    /// Whether `chunk` has enough query words, if counted.
    fn eligible(&self, chunk: usize) -> Option<bool> {
        let marks = self.0[chunk];
        (marks & CHECKED != 0).then_some(marks & ELIGIBLE != 0)
    }

    fn set_eligible(&mut self, chunk: usize, eligible: bool) {
        self.0[chunk] |= CHECKED | if eligible { ELIGIBLE } else { 0 };
    }
}

/// Picks source chunks for requests: documents in a seeded round-robin, at most `cap` queries
/// per document, each chunk used at most once per type, `multi_hop` partners found by retrieval.
pub struct Planner<'a> {
    index: &'a ChunkIndex,
    groups: &'a ChunkGroups,
    /// Each document's chunk positions (`u32`, as the index keeps them: 4 bytes a chunk).
    docs: Vec<Box<[u32]>>,
    planned_per_doc: Vec<usize>,
    cap: usize,
    marks: Marks,
    seed: u64,
}

impl<'a> Planner<'a> {
    /// A planner over the chunks of `index` allowing `cap` queries per document (`None`: twice
    /// a fair share of `total_queries`, at least 2 and at least `per_call`, so one chunk can serve a
    /// whole call). A chunk's near-identical copies (`groups`) are never its multi_hop partner.
    #[must_use]
    pub fn new(
        index: &'a ChunkIndex,
        groups: &'a ChunkGroups,
        cap: Option<usize>,
        total_queries: usize,
        per_call: usize,
        seed: u64,
    ) -> Self {
        let mut doc_of: HashMap<&DocId, usize> = HashMap::new();
        let mut docs: Vec<Vec<u32>> = Vec::new();
        for position in 0..index.len() {
            let next = docs.len();
            let doc = *doc_of.entry(index.doc_id(position)).or_insert(next);
            if doc == next {
                docs.push(Vec::new());
            }
            docs[doc].push(position as u32);
        }
        let docs: Vec<Box<[u32]>> = docs.into_iter().map(Vec::into_boxed_slice).collect();
        let planned_per_doc = vec![0; docs.len()];
        let cap = cap.unwrap_or_else(|| auto_cap(total_queries, docs.len()).max(per_call));
        Self { index, groups, docs, planned_per_doc, cap, marks: Marks(vec![0; index.len()]), seed }
    }

    /// Plans only from the chunks at `positions` (a refresh's new chunks); documents without
    /// one are left out.
    #[must_use]
    pub fn only(mut self, positions: &HashSet<usize>) -> Self {
        for doc in &mut self.docs {
            *doc = doc.iter().copied().filter(|&c| positions.contains(&(c as usize))).collect();
        }
        self.docs.retain(|doc| !doc.is_empty());
        self.planned_per_doc = vec![0; self.docs.len()];
        self
    }

    /// The per-document cap in force.
    #[must_use]
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// Plans up to `wanted` requests per type for `round`; fewer when chunks run out.
    ///
    /// With `per_call` > 1, one chunk (or one multi_hop pair) gets up to `per_call` requests, of the
    /// types with the most left to plan, so a generator can serve them with one call.
    ///
    /// # Errors
    /// [`crate::Error::Index`] when a search fails.
    pub fn plan(&mut self, wanted: &Quotas, round: u32, per_call: usize) -> Result<Vec<Request>> {
        let (mut hops, mut singles): (Quotas, Quotas) =
            wanted.iter().filter(|(_, n)| **n > 0).partition(|(t, _)| **t == QueryType::MultiHop);
        // Pairs first: they are the hardest to place, and single-chunk types must not use up
        // every document's cap before them.
        let mut requests = self.fill(&mut hops, round, per_call.clamp(1, 2), "multi_hop")?;
        requests.extend(self.fill(&mut singles, round, per_call.max(1), "single")?);
        Ok(requests)
    }

    /// Visits documents in a seeded round-robin, giving each picked chunk up to `per_call`
    /// requests, until `remaining` is planned or no document can give more.
    fn fill(
        &mut self,
        remaining: &mut Quotas,
        round: u32,
        per_call: usize,
        label: &str,
    ) -> Result<Vec<Request>> {
        let mut requests = Vec::new();
        let wanted = remaining.clone();
        let mut rng = stream(self.seed, &format!("plan/{round}/{label}"));
        let mut order: Vec<usize> = (0..self.docs.len()).collect();
        order.shuffle(&mut rng);
        loop {
            let mut progressed = false;
            for &doc in &order {
                let Some(first) = most_wanted(remaining, &wanted) else { return Ok(requests) };
                if self.planned_per_doc[doc] >= self.cap {
                    continue;
                }
                let Some(sources) = self.take(doc, first, &mut rng)? else { continue };
                for _ in 0..per_call {
                    let Some(query_type) = most_wanted(remaining, &wanted) else { break };
                    if self.planned_per_doc[doc] >= self.cap {
                        break;
                    }
                    self.marks.use_for(query_type, sources[0]);
                    self.planned_per_doc[doc] += 1;
                    *remaining.entry(query_type).or_default() -= 1;
                    requests.push(Request { query_type, sources: sources.clone(), round });
                }
                progressed = true;
            }
            if !progressed {
                return Ok(requests);
            }
        }
    }

    fn take(
        &mut self,
        doc: usize,
        query_type: QueryType,
        rng: &mut crate::rng::Rng,
    ) -> Result<Option<Vec<usize>>> {
        let mut options: Vec<usize> =
            self.docs[doc].iter().map(|&c| c as usize).filter(|&c| !self.marks.used(query_type, c)).collect();
        options.shuffle(rng);
        for chunk in options {
            self.marks.use_for(query_type, chunk);
            if !self.is_eligible(chunk)? {
                continue;
            }
            if query_type != QueryType::MultiHop {
                return Ok(Some(vec![chunk]));
            }
            if let Some(partner) = self.partner(chunk)? {
                return Ok(Some(vec![chunk, partner]));
            }
        }
        Ok(None)
    }

    fn is_eligible(&mut self, chunk: usize) -> Result<bool> {
        if let Some(known) = self.marks.eligible(chunk) {
            return Ok(known);
        }
        let tokens = self.index.analyzer().tokens(&self.index.text(chunk)?);
        let words: HashSet<&str> =
            tokens.iter().filter(|t| is_query_word(&t.surface)).map(|t| t.term.as_str()).collect();
        let eligible = words.len() >= MIN_TERMS;
        self.marks.set_eligible(chunk, eligible);
        Ok(eligible)
    }

    /// The best-ranked chunk that this chunk's salient terms retrieve, from another document or
    /// at least two chunks away in the same one, and not a copy of it.
    fn partner(&mut self, chunk: usize) -> Result<Option<usize>> {
        let model = TermModel::new(
            self.index,
            self.index.term_stats(&self.index.text(chunk)?)?,
            Weighting::Discriminative,
        );
        let terms: Vec<String> = model.top(PARTNER_QUERY_TERMS).into_iter().map(|s| s.term.clone()).collect();
        for hit in self.index.search_terms(&terms, PARTNER_CANDIDATES)? {
            let far = self.index.doc_id(hit.chunk) != self.index.doc_id(chunk)
                || self.index.ordinal(hit.chunk).abs_diff(self.index.ordinal(chunk)) >= 2;
            let copy = self.groups.copies(chunk).any(|c| c == hit.chunk);
            if hit.chunk != chunk && far && !copy && self.is_eligible(hit.chunk)? {
                return Ok(Some(hit.chunk));
            }
        }
        Ok(None)
    }
}

/// The type with the largest share of its requests still to plan (ties in type order), if any:
/// types are served in proportion, so when chunks run short every type gets its part.
fn most_wanted(remaining: &Quotas, wanted: &Quotas) -> Option<QueryType> {
    let share =
        |t: &QueryType, left: usize| left as f64 / wanted.get(t).copied().unwrap_or(left).max(1) as f64;
    remaining
        .iter()
        .filter(|(_, left)| **left > 0)
        .fold(None, |best: Option<(QueryType, f64)>, (t, left)| {
            let s = share(t, *left);
            match best {
                Some((_, b)) if b >= s => best,
                _ => Some((*t, s)),
            }
        })
        .map(|(t, _)| t)
}

/// Top-up rounds plan at most this many requests per missing query, except the last round
/// ([`top_up`]).
const MAX_TOP_UP_FACTOR: f64 = 4.0;

/// The one-sided z-score of the chance that the last round fills a type (2: about 97.5 %).
const LAST_ROUND_Z: f64 = 2.0;

/// How far beyond the expected need a round plans ([`top_up`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Margin {
    /// A later round can still make up for a shortfall: the expected need.
    Expected,
    /// The last round: enough to fill with about 97.5 % probability.
    Safe,
}

impl Margin {
    /// The margin of round `round` out of `max_rounds`: safe in the last one.
    #[must_use]
    pub fn of_round(round: u32, max_rounds: u32) -> Self {
        if round == max_rounds { Self::Safe } else { Self::Expected }
    }
}

/// Requests to plan for `deficit` missing queries of a type whose requests joined the set at
/// `keep_rate` so far (1 before any round).
///
/// A round that a later round can still make up for ([`Margin::Expected`]) plans the expected
/// need, `deficit / keep_rate` (at most four times the deficit). Planning the expected need
/// falls short about half the time, so the last round ([`Margin::Safe`]) plans enough that the
/// kept requests, binomial with the keep rate, reach the deficit with about 97.5 % probability:
/// the least `n` with `n·p − z·√(n·p·(1−p)) ≥ deficit` (normal approximation).
#[must_use]
pub fn top_up(deficit: usize, keep_rate: f64, margin: Margin) -> usize {
    let p = planned_yield(keep_rate);
    if margin == Margin::Expected || p >= 1.0 {
        return (deficit as f64 * (1.0 / p).min(MAX_TOP_UP_FACTOR)).ceil() as usize;
    }
    // With m = n·p: √m = (z·√(1−p) + √(z²·(1−p) + 4·deficit)) / 2.
    let spread = LAST_ROUND_Z * (1.0 - p).sqrt();
    let root = f64::midpoint(spread, (spread * spread + 4.0 * deficit as f64).sqrt());
    (root * root / p - 1e-9).ceil().max(deficit as f64) as usize
}

/// The share of a top-up round's requests that planning counts on joining the set: the keep
/// rate so far, but at least `1 / MAX_TOP_UP_FACTOR` (so a top-up plans at most four times its
/// deficit).
#[must_use]
pub fn planned_yield(keep_rate: f64) -> f64 {
    keep_rate.clamp(1.0 / MAX_TOP_UP_FACTOR, 1.0)
}

/// A top-up round whose yield is this unlikely under the planned one stalls its type.
const STALL_P: f64 = 0.025;

/// Whether a top-up round stalled: `added` of its `planned` requests joined the set, far fewer
/// than `planned_yield` of `keep_rate` lets one expect (a one-sided binomial test at
/// `STALL_P`, the same 97.5 % the last round plans for). A stalled type is not planned again:
/// more of the same requests would mostly pay for queries that do not join the set.
#[must_use]
pub fn stalled(planned: usize, added: usize, keep_rate: f64) -> bool {
    let Ok(yields) = statrs::distribution::Binomial::new(planned_yield(keep_rate), planned as u64) else {
        return false;
    };
    planned > 0 && statrs::distribution::DiscreteCDF::cdf(&yields, added as u64) < STALL_P
}

/// The default per-document cap: twice a fair share, at least 2.
#[must_use]
pub(crate) fn auto_cap(total_queries: usize, documents: usize) -> usize {
    (2 * total_queries).div_ceil(documents.max(1)).max(2)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[track_caller]
    fn check_mix_error(input: &str, expected: &str) {
        let err = input.parse::<Mix>().err().unwrap_or_default();
        assert!(err.contains(expected), "{input:?}: {err}");
    }

    #[test]
    fn parses_mix_and_rejects_mistakes() {
        let mix: Mix = "direct=0.5, no_answer=0.5".parse().unwrap_or_default();
        assert_eq!(mix.to_string(), "direct=0.5,no_answer=0.5");
        check_mix_error("direct=0.5", "add up to 0.5");
        check_mix_error("direct", "not NAME=SHARE");
        check_mix_error("drect=1", "unknown query type");
        check_mix_error("direct=-1,paraphrase=2", "not a number");
        check_mix_error("direct=0.5,direct=0.5", "given twice");
    }

    #[test]
    fn a_round_stalls_when_its_yield_is_far_below_the_planned_one() {
        // Planned at p = 0.5: 100 requests expect 50; P(X ≤ 39) ≈ 0.018, P(X ≤ 40) ≈ 0.028.
        assert!(stalled(100, 39, 0.5));
        assert!(!stalled(100, 40, 0.5));
        // The planned yield is at least 1/4: 776 requests that add 2 queries stall.
        assert!(stalled(776, 2, 0.01));
        // A few requests that add nothing prove little: P(X = 0) = 0.75² ≈ 0.56.
        assert!(!stalled(2, 0, 0.1));
        assert!(!stalled(0, 0, 0.5), "nothing planned, nothing stalled");
        assert!((planned_yield(0.01) - 0.25).abs() < 1e-12 && (planned_yield(0.6) - 0.6).abs() < 1e-12);
    }

    #[test]
    fn quotas_worked_example() {
        let quotas = Mix::default().quotas(10);
        // 4, 3, 1.5, 1.5: one leftover goes to the first type with the largest remainder.
        let got: Vec<_> = quotas.values().copied().collect();
        assert_eq!(got, [4, 3, 2, 1]);
        assert_eq!(Mix::default().quotas(0).values().sum::<usize>(), 0);
    }

    #[test]
    fn types_are_served_in_proportion() {
        let wanted: Quotas = [(QueryType::Direct, 40), (QueryType::NoAnswer, 10)].into_iter().collect();
        let mut remaining = wanted.clone();
        let mut order = Vec::new();
        while let Some(t) = most_wanted(&remaining, &wanted) {
            *remaining.entry(t).or_default() -= 1;
            order.push(t);
        }
        // Of the first 10, about a fifth are no_answer, not none.
        let early = order.iter().take(10).filter(|t| **t == QueryType::NoAnswer).count();
        assert_eq!(early, 2, "{order:?}");
        assert_eq!(order.len(), 50);
    }

    #[test]
    fn top_up_plans_the_expected_need_then_a_safe_margin_in_the_last_round() {
        // Before any round (rate 1) and at a rate of 1/2: the expected need.
        assert_eq!(top_up(10, 1.0, Margin::Expected), 10);
        assert_eq!(top_up(10, 0.5, Margin::Expected), 20);
        // At most four times the deficit.
        assert_eq!(top_up(10, 0.1, Margin::Expected), 40);
        // A sure keep needs no margin, even in the last round.
        assert_eq!(top_up(10, 1.0, Margin::Safe), 10);
        // p = 0.4, deficit 1: √m = (2·√0.6 + √(2.4 + 4)) / 2 = 2.0396…, m = 4.160, n = 10.4 → 11;
        // P(none of 11 kept) = 0.6^11 = 0.4 %.
        assert_eq!(top_up(1, 0.4, Margin::Safe), 11);
        // Deficit 45: √m = (1.549 + √(2.4 + 180)) / 2 = 7.527, m = 56.66, n = 141.6 → 142.
        assert_eq!(top_up(45, 0.4, Margin::Safe), 142);
    }

    #[test]
    fn auto_cap_examples() {
        assert_eq!(auto_cap(100, 40), 5);
        assert_eq!(auto_cap(10, 1000), 2);
        assert_eq!(auto_cap(10, 0), 20);
    }

    proptest! {
        #[test]
        fn quotas_sum_to_total_and_stay_within_one(a in 0u32..100, b in 0u32..100, c in 0u32..100,
                                                     total in 0usize..5000, slack in -0.009f64..0.009) {
            prop_assume!(a + b + c > 0);
            // Shares may add up to 1 ± 0.01, as users round them.
            let sum = f64::from(a + b + c) / (1.0 + slack);
            let spec = format!("direct={},paraphrase={},multi_hop={}", f64::from(a) / sum, f64::from(b) / sum, f64::from(c) / sum);
            let mix: Mix = spec.parse().map_err(TestCaseError::fail)?;
            let quotas = mix.quotas(total);
            prop_assert_eq!(quotas.values().sum::<usize>(), total);
            prop_assert_eq!(quotas.get(&QueryType::NoAnswer).copied().unwrap_or(0), 0, "no_answer is not in the mix");
            for (t, n) in &quotas {
                let exact = mix.0.get(t).copied().unwrap_or(0.0) * total as f64;
                prop_assert!((*n as f64 - exact).abs() < 1.0 + 1e-9, "{t}: {n} vs {exact}");
            }
        }
    }
}
