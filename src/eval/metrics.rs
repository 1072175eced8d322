//! Retrieval metrics of one ranked list against one query's judgments, as trec_eval computes
//! them.
//!
//! Input: the grades of a run's documents in rank order ([`Label`]s: judged with a grade, or
//! unjudged) and the query's [`Judgments`]. Output: one value per [`Measure`]. Invariants:
//! a document is relevant when its grade is 1 or more (trec_eval's default relevance level);
//! nDCG's ideal DCG uses every judged document of the query, retrieved or not; Precision@k
//! divides by k even when fewer documents were retrieved; every value lies in [0, 1].
//!
//! Why not the `elinor` crate: it breaks score ties by ascending document id (trec_eval: by
//! descending id), scores nDCG 1.0 on a query without a relevant document (trec_eval: 0), and
//! brings a second `rand`, `thiserror` 1, `regex` and `nalgebra` into the build.

use serde::{Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

/// How a grade turns into gain for nDCG. The two are not comparable: every output names the one
/// used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Gain {
    /// `2^grade − 1` (Burges et al.): a grade-3 document is worth 7 grade-1 ones.
    #[default]
    Exponential,
    /// The grade itself, as trec_eval's `ndcg_cut` uses it.
    Linear,
}

impl Gain {
    /// The gain of a grade (grades below 1 give nothing).
    #[must_use]
    pub fn of(self, grade: i32) -> f64 {
        if grade < 1 {
            return 0.0;
        }
        match self {
            Self::Exponential => 2f64.powi(grade) - 1.0,
            Self::Linear => f64::from(grade),
        }
    }

    /// How the gain is written in outputs.
    #[must_use]
    pub fn describe(self) -> &'static str {
        match self {
            Self::Exponential => "exponential gain (2^grade − 1)",
            Self::Linear => "linear gain (the grade)",
        }
    }
}

/// A metric, at a rank cut-off where it has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Measure {
    /// 1 if a relevant document is in the top k (trec_eval `success_k`).
    Hit(usize),
    /// Relevant documents in the top k over all relevant ones (`recall_k`).
    Recall(usize),
    /// Relevant documents in the top k over k (`P_k`).
    Precision(usize),
    /// 1 / rank of the first relevant document, 0 below k (`recip_rank` of the top k).
    Mrr(usize),
    /// Average precision over the top k, divided by all relevant documents (`map_cut_k`); `None`:
    /// the whole ranking (`map`).
    Map(Option<usize>),
    /// DCG@k over the ideal DCG@k of all judged documents (`ndcg_cut_k`, with the chosen gain).
    Ndcg(usize),
    /// Share of the documents retrieved in the top k that have a judgment (any grade, 0
    /// included), as ir_measures' `Judged@k`.
    Judged(usize),
    /// nDCG@k of the condensed list: unjudged documents removed first (Sakai's nDCG′,
    /// trec_eval `-J`).
    NdcgCondensed(usize),
    /// Binary preference (Buckley & Voorhees), over judged documents only (trec_eval `bpref`).
    Bpref,
    /// R-precision: relevant documents in the top R over R, R the query's relevant documents
    /// (trec_eval `Rprec`).
    Rprec,
    /// Expected reciprocal rank at k (Chapelle et al. 2009) as gdeval computes it (ir_measures
    /// `ERR@k`): a document of grade g satisfies the user with probability (2^g − 1) / 2^4.
    ExpectedRr(usize),
    /// Rank-biased precision (Moffat & Zobel 2008) with persistence p: (1 − p) Σ p^(i−1) over
    /// the ranks i of relevant documents (ir_measures `RBP(rel=1,p=…)`).
    Rbp(Persistence),
    /// RBP's residual: the most that the unjudged documents the run retrieved could add (`RBP +
    /// residual` is the score were every one relevant); ranks the run left empty add nothing
    /// (as trectools' `get_rbp`, up to its p^1000).
    RbpResidual(Persistence),
    /// A binary measure counting documents of grade `level` or more as relevant (trec_eval
    /// `-l level`, ir_measures `rel=level`); the other measures count grade 1 or more.
    AtLevel(u8, Binary),
}

/// RBP's persistence p in thousandths (0 < p < 1), so that a [`Measure`] stays `Copy`, `Eq`
/// and ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Persistence(u16);

impl Persistence {
    /// The persistence `p`, to three decimals; `None` outside (0, 1).
    #[must_use]
    pub fn new(p: f64) -> Option<Self> {
        let thousandths = (p * 1000.0).round();
        (p > 0.0 && p < 1.0 && (1.0..1000.0).contains(&thousandths)).then_some(Self(thousandths as u16))
    }

    /// Its value.
    #[must_use]
    pub fn value(self) -> f64 {
        f64::from(self.0) / 1000.0
    }
}

impl fmt::Display for Persistence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = format!("{:.3}", self.value());
        f.write_str(text.trim_end_matches('0'))
    }
}

/// The binary measures, which a relevance level applies to ([`Measure::AtLevel`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Binary {
    /// [`Measure::Hit`].
    Hit(usize),
    /// [`Measure::Recall`].
    Recall(usize),
    /// [`Measure::Precision`].
    Precision(usize),
    /// [`Measure::Mrr`].
    Mrr(usize),
    /// [`Measure::Map`].
    Map(Option<usize>),
    /// [`Measure::Bpref`].
    Bpref,
    /// [`Measure::Rprec`].
    Rprec,
    /// [`Measure::Rbp`].
    Rbp(Persistence),
}

impl Binary {
    /// The measure at relevance level `level` (1: the plain measure).
    #[must_use]
    pub fn at(self, level: u8) -> Measure {
        if level > 1 { Measure::AtLevel(level, self) } else { self.plain() }
    }

    /// The same measure at grade 1.
    #[must_use]
    pub fn plain(self) -> Measure {
        match self {
            Self::Hit(k) => Measure::Hit(k),
            Self::Recall(k) => Measure::Recall(k),
            Self::Precision(k) => Measure::Precision(k),
            Self::Mrr(k) => Measure::Mrr(k),
            Self::Map(k) => Measure::Map(k),
            Self::Bpref => Measure::Bpref,
            Self::Rprec => Measure::Rprec,
            Self::Rbp(p) => Measure::Rbp(p),
        }
    }
}

impl Measure {
    /// The metric families with a cut-off, in output order.
    pub const FAMILIES: [&'static str; 6] = ["hit", "recall", "p", "mrr", "map", "ndcg"];

    /// Every measure of the standard set for `cutoffs`: each family at each cut-off, MAP over the
    /// whole ranking, then Judged@k, nDCG′@k, bpref, R-precision, ERR@k and RBP(p=0.8) with its
    /// residual; the binary ones at relevance level `level` (1: grade 1 or more).
    #[must_use]
    pub fn standard(cutoffs: &[usize], level: u8) -> Vec<Self> {
        let binary = |b: Binary| b.at(level);
        let mut all = Vec::new();
        for family in [Binary::Hit, Binary::Recall, Binary::Precision, Binary::Mrr] {
            all.extend(cutoffs.iter().map(|&k| binary(family(k))));
        }
        all.extend(cutoffs.iter().map(|&k| binary(Binary::Map(Some(k)))));
        all.push(binary(Binary::Map(None)));
        all.extend(cutoffs.iter().map(|&k| Self::Ndcg(k)));
        all.extend(cutoffs.iter().map(|&k| Self::Judged(k)));
        all.extend(cutoffs.iter().map(|&k| Self::NdcgCondensed(k)));
        all.push(binary(Binary::Bpref));
        all.push(binary(Binary::Rprec));
        all.extend(cutoffs.iter().map(|&k| Self::ExpectedRr(k)));
        let p = Persistence(800);
        all.push(binary(Binary::Rbp(p)));
        all.push(Self::RbpResidual(p));
        all
    }

    /// The measure's rank cut-off, if it has one.
    #[must_use]
    pub fn cutoff(self) -> Option<usize> {
        match self {
            Self::Hit(k)
            | Self::Recall(k)
            | Self::Precision(k)
            | Self::Mrr(k)
            | Self::Map(Some(k))
            | Self::Ndcg(k)
            | Self::Judged(k)
            | Self::NdcgCondensed(k)
            | Self::ExpectedRr(k) => Some(k),
            Self::Map(None) | Self::Bpref | Self::Rprec | Self::Rbp(_) | Self::RbpResidual(_) => None,
            Self::AtLevel(_, b) => b.plain().cutoff(),
        }
    }

    /// Whether the measure scores only judged documents (a condensed-list variant or Judged@k).
    #[must_use]
    pub fn is_condensed(self) -> bool {
        matches!(self, Self::Judged(_) | Self::NdcgCondensed(_) | Self::Bpref)
    }
}

impl fmt::Display for Measure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Hit(k) => write!(f, "hit@{k}"),
            Self::Recall(k) => write!(f, "recall@{k}"),
            Self::Precision(k) => write!(f, "p@{k}"),
            Self::Mrr(k) => write!(f, "mrr@{k}"),
            Self::Map(Some(k)) => write!(f, "map@{k}"),
            Self::Map(None) => f.write_str("map"),
            Self::Ndcg(k) => write!(f, "ndcg@{k}"),
            Self::Judged(k) => write!(f, "judged@{k}"),
            Self::NdcgCondensed(k) => write!(f, "ndcg'@{k}"),
            Self::Bpref => f.write_str("bpref"),
            Self::Rprec => f.write_str("rprec"),
            Self::ExpectedRr(k) => write!(f, "err@{k}"),
            Self::Rbp(p) => write!(f, "rbp(p={p})"),
            Self::RbpResidual(p) => write!(f, "rbp_residual(p={p})"),
            Self::AtLevel(level, b) => {
                let plain = b.plain().to_string();
                let (name, rest) = match plain.find(['@', '(']) {
                    Some(at) => plain.split_at(at),
                    None => (plain.as_str(), ""),
                };
                match rest.strip_prefix('(') {
                    Some(params) => write!(f, "{name}(rel={level},{params}"),
                    None => write!(f, "{name}(rel={level}){rest}"),
                }
            }
        }
    }
}

impl Serialize for Measure {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl FromStr for Measure {
    type Err = String;

    /// Reads a measure in qrelgen's names (`ndcg@10`, `map`, `p@5`, `rbp(p=0.8)`) or in
    /// ir_measures' syntax (`nDCG@10`, `AP`, `RR@10`, `R@100`, `P(rel=2)@10`, `RBP(p=0.8)`,
    /// `Judged@10`, `Success@1`, `Rprec`, `ERR@20`), case-insensitively.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let text = s.trim().to_ascii_lowercase();
        let (head, k) = match text.rsplit_once('@') {
            Some((head, k)) => {
                let k: usize =
                    k.parse().ok().filter(|&k| k > 0).ok_or_else(|| format!("{s:?}: bad cut-off"))?;
                (head, Some(k))
            }
            None => (text.as_str(), None),
        };
        let (name, params) = match head.split_once('(') {
            Some((name, rest)) => {
                let params = rest.strip_suffix(')').ok_or_else(|| format!("{s:?}: unclosed parameters"))?;
                (name.trim(), Params::parse(params).map_err(|e| format!("{s:?}: {e}"))?)
            }
            None => (head.trim(), Params::default()),
        };
        let need =
            |k: Option<usize>| k.ok_or_else(|| format!("{s:?}: {name} needs a cut-off, e.g. {name}@10"));
        let p = params.p.unwrap_or(Persistence(800));
        let binary = match name {
            "hit" | "success" => Binary::Hit(need(k)?),
            "recall" | "r" => Binary::Recall(need(k)?),
            "p" | "precision" => Binary::Precision(need(k)?),
            "mrr" | "rr" => Binary::Mrr(need(k)?),
            "map" | "ap" => Binary::Map(k),
            "bpref" => Binary::Bpref,
            "rprec" | "r-prec" | "r_prec" => Binary::Rprec,
            "rbp" => Binary::Rbp(p),
            _ => {
                if params.rel.is_some() {
                    return Err(format!("{s:?}: rel= applies to binary measures only"));
                }
                return Ok(match name {
                    "ndcg" => Self::Ndcg(need(k)?),
                    "judged" => Self::Judged(need(k)?),
                    "ndcg'" | "ndcg_prime" => Self::NdcgCondensed(need(k)?),
                    "err" => Self::ExpectedRr(need(k)?),
                    "rbp_residual" => Self::RbpResidual(p),
                    _ => {
                        return Err(format!(
                            "{s:?}: unknown measure (ndcg@k, p@k, recall@k, mrr@k, map, hit@k, judged@k, ndcg'@k, bpref, rprec, err@k, rbp(p=0.8), rbp_residual(p=0.8); ir_measures names such as nDCG@10, AP, RR@10, R@100, P(rel=2)@10, Success@1 too)"
                        ));
                    }
                });
            }
        };
        if k.is_some() && matches!(binary, Binary::Bpref | Binary::Rprec | Binary::Rbp(_)) {
            return Err(format!("{s:?}: {name} takes no cut-off"));
        }
        Ok(match params.rel {
            Some(level) if level > 1 => Self::AtLevel(level, binary),
            _ => binary.plain(),
        })
    }
}

/// The parameters of a measure name: `rel=N`, `p=X`.
#[derive(Default)]
struct Params {
    rel: Option<u8>,
    p: Option<Persistence>,
}

impl Params {
    fn parse(text: &str) -> Result<Self, String> {
        let mut params = Self::default();
        for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, value) =
                pair.split_once('=').ok_or_else(|| format!("parameter {pair:?} is not key=value"))?;
            match key.trim() {
                "rel" => {
                    let level = value.trim().parse::<u8>().ok().filter(|&l| l >= 1);
                    params.rel = Some(level.ok_or_else(|| format!("rel={value}: a grade of 1 or more"))?);
                }
                "p" => {
                    let p = value.trim().parse::<f64>().ok().and_then(Persistence::new);
                    params.p = Some(p.ok_or_else(|| format!("p={value}: a persistence between 0 and 1"))?);
                }
                other => return Err(format!("unknown parameter {other:?} (rel, p)")),
            }
        }
        Ok(params)
    }
}

/// What the judgments say about one retrieved document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Label {
    /// Judged, with this grade (0 or less: not relevant).
    Judged(i32),
    /// Not judged: counts as not relevant, and is left out of condensed lists.
    Unjudged,
}

impl Label {
    fn grade(self) -> i32 {
        match self {
            Self::Judged(g) => g,
            Self::Unjudged => 0,
        }
    }

    fn relevant(self) -> bool {
        self.grade() >= 1
    }
}

/// One query's judgments, summarised for the metrics.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Judgments {
    /// Documents graded 1 or more.
    pub relevant: usize,
    /// Documents judged and graded below 1.
    pub nonrelevant: usize,
    /// The grades of the relevant documents, best first (the ideal ranking).
    pub ideal: Vec<i32>,
}

impl Judgments {
    /// Summarises the grades of every judged document of a query.
    #[must_use]
    pub fn from_grades(grades: impl IntoIterator<Item = i32>) -> Self {
        let mut ideal: Vec<i32> = Vec::new();
        let mut nonrelevant = 0;
        for g in grades {
            if g >= 1 {
                ideal.push(g);
            } else {
                nonrelevant += 1;
            }
        }
        ideal.sort_unstable_by(|a, b| b.cmp(a));
        Self { relevant: ideal.len(), nonrelevant, ideal }
    }

    /// The judgments with grade `level` or more as relevant (grade 1) and the rest judged
    /// non-relevant (grade 0).
    #[must_use]
    pub fn at_level(&self, level: u8) -> Self {
        let level = i32::from(level);
        let relevant = self.ideal.iter().filter(|&&g| g >= level).count();
        Self {
            relevant,
            nonrelevant: self.nonrelevant + self.ideal.len() - relevant,
            ideal: vec![1; relevant],
        }
    }
}

/// The labels of a ranking with grade `level` or more as relevant (grade 1), the rest judged
/// non-relevant (grade 0) or unjudged as they were.
fn labels_at_level(labels: &[Label], level: u8) -> Vec<Label> {
    labels
        .iter()
        .map(|l| match l {
            Label::Judged(g) => Label::Judged(i32::from(*g >= i32::from(level))),
            Label::Unjudged => Label::Unjudged,
        })
        .collect()
}

/// The value of each of `measures` for a ranking whose documents carry `labels`, in rank order.
/// A query without a relevant document scores 0 everywhere (as in trec_eval).
#[must_use]
pub fn score(labels: &[Label], judgments: &Judgments, measures: &[Measure], gain: Gain) -> Vec<f64> {
    let ranking = Ranking::new(labels, judgments, gain);
    measures
        .iter()
        .map(|&m| match m {
            Measure::AtLevel(level, binary) => {
                let (labels, judgments) = (labels_at_level(labels, level), judgments.at_level(level));
                Ranking::new(&labels, &judgments, gain).value(binary.plain())
            }
            m => ranking.value(m),
        })
        .collect()
}

/// Running sums over one ranking, from which every measure is read.
struct Ranking<'a> {
    labels: &'a [Label],
    judgments: &'a Judgments,
    gain: Gain,
    /// Relevant documents within the first i ranks (`relevant_upto[i]`, i = 0..=n).
    relevant_upto: Vec<usize>,
    /// Sum of precision at each relevant rank within the first i ranks.
    precision_sum_upto: Vec<f64>,
    /// Judged documents within the first i ranks.
    judged_upto: Vec<usize>,
}

impl<'a> Ranking<'a> {
    fn new(labels: &'a [Label], judgments: &'a Judgments, gain: Gain) -> Self {
        let n = labels.len();
        let (mut relevant_upto, mut precision_sum_upto, mut judged_upto) =
            (Vec::with_capacity(n + 1), Vec::with_capacity(n + 1), Vec::with_capacity(n + 1));
        relevant_upto.push(0);
        precision_sum_upto.push(0.0);
        judged_upto.push(0);
        let (mut rel, mut sum, mut judged) = (0, 0.0, 0);
        for (i, label) in labels.iter().enumerate() {
            if label.relevant() {
                rel += 1;
                sum += rel as f64 / (i + 1) as f64;
            }
            judged += usize::from(matches!(label, Label::Judged(_)));
            relevant_upto.push(rel);
            precision_sum_upto.push(sum);
            judged_upto.push(judged);
        }
        Self { labels, judgments, gain, relevant_upto, precision_sum_upto, judged_upto }
    }

    /// Ranks 1..=k that exist.
    fn depth(&self, k: usize) -> usize {
        k.min(self.labels.len())
    }

    fn value(&self, measure: Measure) -> f64 {
        let r = self.judgments.relevant;
        if r == 0 {
            return 0.0;
        }
        match measure {
            Measure::Hit(k) => f64::from(u8::from(self.relevant_upto[self.depth(k)] > 0)),
            Measure::Recall(k) => self.relevant_upto[self.depth(k)] as f64 / r as f64,
            Measure::Precision(k) => self.relevant_upto[self.depth(k)] as f64 / k as f64,
            Measure::Mrr(k) => {
                let first = self.labels.iter().take(k).position(|l| l.relevant());
                first.map_or(0.0, |i| 1.0 / (i + 1) as f64)
            }
            Measure::Map(k) => {
                let k = k.map_or(self.labels.len(), |k| self.depth(k));
                self.precision_sum_upto[k] / r as f64
            }
            Measure::Ndcg(k) => {
                ndcg(self.labels.iter().map(|l| l.grade()), &self.judgments.ideal, k, self.gain)
            }
            Measure::Judged(k) => match self.depth(k) {
                0 => 0.0,
                depth => self.judged_upto[depth] as f64 / depth as f64,
            },
            Measure::NdcgCondensed(k) => {
                let condensed = self.labels.iter().filter_map(|l| match l {
                    Label::Judged(g) => Some(*g),
                    Label::Unjudged => None,
                });
                ndcg(condensed, &self.judgments.ideal, k, self.gain)
            }
            Measure::Bpref => bpref(self.labels, self.judgments),
            Measure::Rprec => self.relevant_upto[self.depth(r)] as f64 / r as f64,
            Measure::ExpectedRr(k) => err(self.labels.iter().take(k).map(|l| l.grade())),
            Measure::Rbp(p) => {
                let p = p.value();
                let weights = self.labels.iter().zip(rank_weights(p));
                // A fold from +0: an empty sum of f64 is −0, which outputs would print as such.
                (1.0 - p) * weights.filter(|(l, _)| l.relevant()).fold(0.0, |sum, (_, w)| sum + w)
            }
            Measure::RbpResidual(p) => {
                let p = p.value();
                let weights = self.labels.iter().zip(rank_weights(p));
                let unjudged =
                    weights.filter(|(l, _)| matches!(l, Label::Unjudged)).fold(0.0, |sum, (_, w)| sum + w);
                (1.0 - p) * unjudged
            }
            // Scored by `score`, which relabels the ranking at the level first.
            Measure::AtLevel(..) => f64::NAN,
        }
    }
}

/// The weights p^(i−1) of ranks i = 1, 2, …
fn rank_weights(p: f64) -> impl Iterator<Item = f64> {
    std::iter::successors(Some(1.0), move |w| Some(w * p))
}

/// gdeval's largest grade: ERR's stopping probability of grade g is (2^g − 1) / 2^4.
const ERR_MAX_GRADE: i32 = 4;

/// ERR of the grades in rank order: Σ R_i / i · Π_{j<i} (1 − R_j).
fn err(grades: impl Iterator<Item = i32>) -> f64 {
    let mut score = 0.0;
    let mut still = 1.0;
    for (i, g) in grades.enumerate() {
        let r = (2f64.powi(g.clamp(0, ERR_MAX_GRADE)) - 1.0) / 2f64.powi(ERR_MAX_GRADE);
        score += r * still / (i + 1) as f64;
        still *= 1.0 - r;
    }
    score
}

/// DCG of the first k grades over the DCG of the first k ideal grades.
fn ndcg(grades: impl Iterator<Item = i32>, ideal: &[i32], k: usize, gain: Gain) -> f64 {
    let dcg = |grades: &mut dyn Iterator<Item = i32>| -> f64 {
        grades.take(k).enumerate().map(|(i, g)| gain.of(g) / ((i + 2) as f64).log2()).sum()
    };
    let best = dcg(&mut ideal.iter().copied());
    if best > 0.0 { dcg(&mut { grades }) / best } else { 0.0 }
}

/// trec_eval's bpref: each relevant retrieved document scores 1 − (judged non-relevant documents
/// above it, at most R) / min(R, N), averaged over the R relevant documents; N = judged
/// non-relevant documents of the query. Unjudged documents are skipped.
fn bpref(labels: &[Label], judgments: &Judgments) -> f64 {
    let (r, n) = (judgments.relevant, judgments.nonrelevant);
    let mut nonrelevant_above = 0usize;
    let mut sum = 0.0;
    for label in labels {
        match label {
            Label::Unjudged => {}
            Label::Judged(g) if *g >= 1 => {
                sum += if nonrelevant_above == 0 {
                    1.0
                } else {
                    1.0 - nonrelevant_above.min(r) as f64 / r.min(n) as f64
                };
            }
            Label::Judged(_) => nonrelevant_above += 1,
        }
    }
    sum / r as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const J: fn(i32) -> Label = Label::Judged;
    const U: Label = Label::Unjudged;

    fn one(labels: &[Label], grades: &[i32], measure: Measure, gain: Gain) -> f64 {
        score(labels, &Judgments::from_grades(grades.iter().copied()), &[measure], gain)[0]
    }

    #[track_caller]
    fn close(actual: f64, expected: f64) {
        assert!((actual - expected).abs() < 1e-12, "{actual} != {expected}");
    }

    /// Ranking: relevant (3), unjudged, judged 0, relevant (1); the query has a third relevant
    /// document (grade 2) that is not retrieved and two more judged non-relevant.
    const LABELS: [Label; 4] = [Label::Judged(3), Label::Unjudged, Label::Judged(0), Label::Judged(1)];
    const GRADES: [i32; 6] = [3, 2, 1, 0, 0, 0];

    #[test]
    fn worked_example_by_hand() {
        let m = |measure| one(&LABELS, &GRADES, measure, Gain::Exponential);
        close(m(Measure::Hit(1)), 1.0);
        close(m(Measure::Recall(3)), 1.0 / 3.0);
        close(m(Measure::Recall(10)), 2.0 / 3.0);
        close(m(Measure::Precision(4)), 0.5);
        close(m(Measure::Precision(10)), 0.2);
        close(m(Measure::Mrr(10)), 1.0);
        // AP: (1/1 + 2/4) / 3 relevant.
        close(m(Measure::Map(None)), 0.5);
        close(m(Measure::Map(Some(3))), 1.0 / 3.0);
        // DCG@4 = 7/log2(2) + 1/log2(5); IDCG@4 = 7 + 3/log2(3) + 1/log2(4).
        let idcg = 7.0 + 3.0 / 3f64.log2() + 0.5;
        close(m(Measure::Ndcg(4)), (7.0 + 1.0 / 5f64.log2()) / idcg);
        close(m(Measure::Judged(4)), 0.75);
        close(m(Measure::Judged(10)), 0.75);
        // Condensed: 3, 0, 1 → DCG = 7 + 1/log2(4).
        close(m(Measure::NdcgCondensed(4)), (7.0 + 0.5) / idcg);
        // bpref: R = 3, N = 3: first relevant 1, second 1 − 1/3; over 3.
        close(m(Measure::Bpref), (1.0 + 2.0 / 3.0) / 3.0);
        // R = 3: one relevant document in the top 3.
        close(m(Measure::Rprec), 1.0 / 3.0);
        // ERR: R = 7/16 at rank 1, then 1/16 at rank 4 after (1 − 7/16).
        close(m(Measure::ExpectedRr(10)), 7.0 / 16.0 + (1.0 - 7.0 / 16.0) / 16.0 / 4.0);
        close(m(Measure::ExpectedRr(1)), 7.0 / 16.0);
        // RBP(0.5): relevant at ranks 1 and 4 → 0.5 · (1 + 0.125); residual: rank 2 unjudged
        // (0.5 · 0.5).
        let half = Persistence(500);
        close(m(Measure::Rbp(half)), 0.5 * 1.125);
        close(m(Measure::RbpResidual(half)), 0.25);
        // At level 2 only the grade-3 document is relevant (of R = 2: grades 3 and 2).
        close(m(Measure::AtLevel(2, Binary::Precision(4))), 0.25);
        close(m(Measure::AtLevel(2, Binary::Map(None))), 0.5);
        close(m(Measure::AtLevel(2, Binary::Recall(10))), 0.5);
        close(m(Measure::AtLevel(3, Binary::Hit(1))), 1.0);
        // bpref at level 2: R = 2, N = 4 (the grade-1 documents join the non-relevant).
        close(m(Measure::AtLevel(2, Binary::Bpref)), 1.0 / 2.0);
        let linear = one(&LABELS, &GRADES, Measure::Ndcg(4), Gain::Linear);
        close(linear, (3.0 + 1.0 / 5f64.log2()) / (3.0 + 2.0 / 3f64.log2() + 0.5));
    }

    #[test]
    fn a_query_without_relevant_documents_scores_zero() {
        for measure in Measure::standard(&[1, 10], 2).into_iter().chain(Measure::standard(&[1, 10], 1)) {
            close(one(&[J(0), U], &[0], measure, Gain::Exponential), 0.0);
        }
    }

    #[test]
    fn names_round_trip() {
        for measure in Measure::standard(&[1, 5, 100], 1).into_iter().chain(Measure::standard(&[10], 2)) {
            assert_eq!(measure.to_string().parse::<Measure>(), Ok(measure));
        }
        // ir_measures' names, as a paper lists them.
        let p8 = Persistence::new(0.8).unwrap_or_else(|| panic!("p"));
        for (name, measure) in [
            ("nDCG@10", Measure::Ndcg(10)),
            ("AP", Measure::Map(None)),
            ("AP@100", Measure::Map(Some(100))),
            ("RR@10", Measure::Mrr(10)),
            ("R@100", Measure::Recall(100)),
            ("P@5", Measure::Precision(5)),
            ("P(rel=2)@10", Measure::AtLevel(2, Binary::Precision(10))),
            ("P(rel=1)@10", Measure::Precision(10)),
            ("RBP(p=0.8)", Measure::Rbp(p8)),
            ("RBP(rel=2,p=0.5)", Measure::AtLevel(2, Binary::Rbp(Persistence(500)))),
            ("Judged@10", Measure::Judged(10)),
            ("Success@1", Measure::Hit(1)),
            ("Rprec", Measure::Rprec),
            ("ERR@20", Measure::ExpectedRr(20)),
            ("Bpref", Measure::Bpref),
        ] {
            assert_eq!(name.parse::<Measure>(), Ok(measure), "{name}");
        }
        assert_eq!(Measure::AtLevel(2, Binary::Precision(10)).to_string(), "p(rel=2)@10");
        assert_eq!(Measure::Rbp(p8).to_string(), "rbp(p=0.8)");
        assert_eq!(Measure::AtLevel(3, Binary::Rbp(p8)).to_string(), "rbp(rel=3,p=0.8)");
        for bad in ["RR", "nDCG", "RBP(p=1.5)", "P(rel=0)@10", "nDCG(rel=2)@10", "Rprec@10", "P(x=1)@3"] {
            assert!(bad.parse::<Measure>().is_err(), "{bad}");
        }
        assert!("ndcg@0".parse::<Measure>().is_err());
        assert!("foo@3".parse::<Measure>().is_err());
    }

    fn labels_strategy() -> impl Strategy<Value = (Vec<Label>, Vec<i32>)> {
        // Up to 12 judged documents with grades 0–3 and up to 8 unjudged, in some order.
        (prop::collection::vec(0..=3i32, 1..12), 0..8usize, any::<u64>()).prop_map(
            |(grades, unjudged, seed)| {
                let mut labels: Vec<Label> = grades.iter().copied().map(Label::Judged).collect();
                labels.extend(std::iter::repeat_n(Label::Unjudged, unjudged));
                let mut rng = crate::rng::stream(seed, "test");
                rand::seq::SliceRandom::shuffle(labels.as_mut_slice(), &mut rng);
                (labels, grades)
            },
        )
    }

    proptest! {
        #[test]
        fn every_value_lies_in_the_unit_interval((labels, grades) in labels_strategy()) {
            let judgments = Judgments::from_grades(grades.iter().copied());
            for gain in [Gain::Exponential, Gain::Linear] {
                for v in score(&labels, &judgments, &Measure::standard(&[1, 3, 10], 2), gain) {
                    prop_assert!((0.0..=1.0 + 1e-12).contains(&v), "{v}");
                }
            }
        }

        #[test]
        fn the_ideal_ranking_scores_one(grades in prop::collection::vec(0..=3i32, 1..12)) {
            prop_assume!(grades.iter().any(|&g| g >= 1));
            let mut sorted = grades.clone();
            sorted.sort_unstable_by(|a, b| b.cmp(a));
            let labels: Vec<Label> = sorted.iter().copied().map(Label::Judged).collect();
            let judgments = Judgments::from_grades(grades.iter().copied());
            let r = judgments.relevant;
            let perfect = [Measure::Hit(1), Measure::Recall(r), Measure::Mrr(1), Measure::Map(None),
                Measure::Ndcg(1), Measure::Ndcg(5), Measure::Ndcg(100), Measure::NdcgCondensed(5),
                Measure::Bpref, Measure::Precision(r)];
            for (m, v) in perfect.iter().zip(score(&labels, &judgments, &perfect, Gain::Exponential)) {
                prop_assert!((v - 1.0).abs() < 1e-12, "{m}: {v}");
            }
        }

        #[test]
        fn reversing_the_ideal_ranking_never_raises_ndcg(grades in prop::collection::vec(0..=3i32, 1..12)) {
            let mut sorted = grades.clone();
            sorted.sort_unstable_by(|a, b| b.cmp(a));
            let labels: Vec<Label> = sorted.iter().copied().map(Label::Judged).collect();
            let reversed: Vec<Label> = labels.iter().rev().copied().collect();
            let judgments = Judgments::from_grades(grades.iter().copied());
            for k in [1, 3, 10] {
                let m = [Measure::Ndcg(k)];
                let best = score(&labels, &judgments, &m, Gain::Exponential)[0];
                let worst = score(&reversed, &judgments, &m, Gain::Exponential)[0];
                prop_assert!(worst <= best + 1e-12);
            }
        }

        #[test]
        fn unjudged_documents_never_change_the_ideal((labels, grades) in labels_strategy(), extra in 0..5usize) {
            // Appending unjudged documents changes neither the judgments nor nDCG at any depth
            // the original ranking fills, and never raises it.
            let judgments = Judgments::from_grades(grades.iter().copied());
            let mut longer = labels.clone();
            longer.extend(std::iter::repeat_n(Label::Unjudged, extra));
            let m = [Measure::Ndcg(labels.len()), Measure::NdcgCondensed(5), Measure::Bpref];
            let a = score(&labels, &judgments, &m, Gain::Exponential);
            let b = score(&longer, &judgments, &m, Gain::Exponential);
            prop_assert_eq!(a, b);
        }
    }
}
