//! `report.md`: per-type counts, drop reasons, rank histogram, overlap, shortfalls and skipped
//! inputs, for a person to read.

use super::beir::round4;
use super::manifest::Manifest;
use crate::corpus::Skipped;
use crate::filter::Gate;
use crate::index::ChunkIndex;
use crate::record::{Checked, Difficulty, QueryType, Reason, Status};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Skipped inputs listed in the report; the rest are counted.
const SKIPPED_LISTED: usize = 20;

/// Everything the report shows.
pub struct Summary<'a> {
    /// The run's manifest.
    pub manifest: &'a Manifest<'a>,
    /// Every candidate with its verdict.
    pub judged: &'a [Checked],
    /// Inputs skipped while reading the corpus.
    pub skipped: &'a [Skipped],
    /// Groups of near-identical chunks, by position.
    pub chunk_groups: &'a [Vec<usize>],
    /// The index that names the chunks.
    pub index: &'a ChunkIndex,
    /// What the set measures.
    pub measures: &'a super::Measures,
}

/// Renders `report.md`.
#[must_use]
pub fn render_report(summary: &Summary<'_>) -> String {
    let mut out = String::new();
    header(&mut out, summary.manifest);
    counts_table(&mut out, summary.manifest);
    summary.measures.render(&mut out);
    llm_section(&mut out, summary.manifest, summary.judged);
    styles_table(&mut out, summary.judged);
    reasons_table(&mut out, summary.manifest);
    let decider = match (summary.manifest.llm.is_some(), summary.manifest.config.filter.gate) {
        (false, _) => Decider::Lexical,
        (true, Gate::Judge) => Decider::JudgeGate,
        (true, Gate::RoundTrip) => Decider::Judge,
    };
    controls_table(&mut out, summary.judged, decider);
    rank_histogram(&mut out, summary.judged, summary.manifest.config.filter.top_n);
    overlap_table(&mut out, summary.judged);
    difficulty_table(&mut out, summary.judged);
    judge_section(&mut out, summary.judged);
    groups_section(&mut out, summary.chunk_groups, summary.index, summary.judged);
    skipped_list(&mut out, summary.skipped);
    out
}

fn header(out: &mut String, m: &Manifest<'_>) {
    let c = &m.corpus;
    let _ = writeln!(out, "# qrelgen report\n");
    let _ = writeln!(
        out,
        "- corpus: `{}` ({} documents, {} skipped, {} ignored)",
        m.config.corpus.display(),
        c.documents,
        c.skipped,
        c.ignored
    );
    let _ = writeln!(out, "- chunks: {} (hash `{}`)", c.chunks, c.chunks_hash);
    let _ = writeln!(out, "- generator: {}, seed {}, {} round(s)", m.generator, m.seed, m.rounds);
    let f = &m.config.filter;
    let _ = match f.gate {
        Gate::RoundTrip => writeln!(
            out,
            "- round trip: top {}, on miss {}, multi-hop rule {}\n",
            f.top_n, f.on_miss, f.multi_hop_rule
        ),
        Gate::Judge => writeln!(
            out,
            "- gate: the judge (a source graded 2+, each hop 1+), on miss {}; round trip measured at top {}\n",
            f.on_miss, f.top_n
        ),
    };
    if m.shortfalls.is_empty() {
        let _ = writeln!(out, "Every type reached its quota.\n");
    } else {
        let _ = writeln!(out, "**Shortfall**: some types ended below their quota:\n");
        for s in &m.shortfalls {
            let _ = writeln!(out, "- {s}");
        }
        out.push('\n');
    }
}

fn counts_table(out: &mut String, m: &Manifest<'_>) {
    let _ = writeln!(
        out,
        "## Queries by type\n\nKept, flagged, dropped and relabelled count candidates by the type they \
         were generated as; \"in set\" counts the queries of each type in the set.\n"
    );
    let _ = writeln!(
        out,
        "| type | requested | planned | generated | kept | flagged | dropped | relabelled | in set |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (t, c) in &m.counts {
        let _ = writeln!(
            out,
            "| {t} | {} | {} | {} | {} | {} | {} | {} | {} |",
            c.requested,
            c.planned,
            c.generated,
            c.kept,
            c.flagged,
            c.dropped,
            c.relabelled,
            c.in_set()
        );
    }
    out.push('\n');
}

fn llm_section(out: &mut String, m: &Manifest<'_>, judged: &[Checked]) {
    let Some(llm) = &m.llm else { return };
    let in_set = judged.iter().filter(|j| j.in_set()).count().max(1) as f64;
    let u = &llm.usage;
    let _ = writeln!(out, "## LLM\n");
    let _ = writeln!(
        out,
        "- endpoint: {} model `{}`, response format {}",
        llm.base_url,
        llm.model,
        llm.json_mode.label()
    );
    let _ = writeln!(
        out,
        "- calls (generation and judge): {} replies, {} prompt + {} completion tokens (cached replies included)",
        u.replies, u.prompt_tokens, u.completion_tokens
    );
    let _ = writeln!(
        out,
        "- per query in the set: {:.2} replies, {:.0} prompt tokens",
        u.replies as f64 / in_set,
        u.prompt_tokens as f64 / in_set
    );
    if u.abandoned > 0 {
        let attempts = if u.abandoned == 1 { "attempt" } else { "attempts" };
        let _ = writeln!(
            out,
            "- {} {attempts} abandoned on a timeout (may still be billed): about {} prompt + at most {} \
             completion tokens (estimate)",
            u.abandoned, u.abandoned_prompt_tokens, u.abandoned_completion_tokens
        );
    }
    if u.batch_replies > 0 {
        let discount = llm.batch_discount.unwrap_or(crate::llm::DEFAULT_DISCOUNT);
        let _ = writeln!(
            out,
            "- through batch inference: {} replies, {} prompt + {} completion tokens, priced at {discount} × the \
             online price (`--batch-discount`)",
            u.batch_replies, u.batch_prompt_tokens, u.batch_completion_tokens
        );
    }
    match (llm.cost, llm.abandoned_cost) {
        (Some(cost), Some(abandoned)) => {
            let _ = writeln!(
                out,
                "- cost at the given prices: {cost:.4} (+ at most {abandoned:.4} for abandoned attempts, estimate)"
            );
        }
        (Some(cost), None) => {
            let _ = writeln!(out, "- cost at the given prices: {cost:.4}");
        }
        _ => {}
    }
    let _ =
        writeln!(out, "- requests sent, retries and 429s of each run: `manifest.json` → `run.llm_network`\n");
}

fn styles_table(out: &mut String, judged: &[Checked]) {
    let mut rows: BTreeMap<(QueryType, &str), usize> = BTreeMap::new();
    for j in judged.iter().filter(|j| j.in_set()) {
        if let Some(style) = &j.candidate.style {
            *rows.entry((j.query_type(), style.as_str())).or_default() += 1;
        }
    }
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "## Queries in the set by type and style\n\n| type | style | queries |\n|---|---|---:|"
    );
    for ((t, style), n) in rows {
        let _ = writeln!(out, "| {t} | {style} | {n} |");
    }
    out.push('\n');
}

fn reasons_table(out: &mut String, m: &Manifest<'_>) {
    let rows: Vec<(QueryType, &str, &str, usize)> = m
        .counts
        .iter()
        .flat_map(|(t, c)| {
            let dropped = c.dropped_by_label().into_iter().map(move |(r, n)| (*t, "dropped", r, n));
            let failed =
                c.generation_failures.iter().map(move |(kind, n)| (*t, "not generated", kind.label(), *n));
            dropped.chain(failed)
        })
        .collect();
    let _ = writeln!(out, "## Dropped and not generated, by reason\n");
    if rows.is_empty() {
        let _ = writeln!(out, "None.\n");
        return;
    }
    let _ = writeln!(out, "| type | outcome | reason | count |\n|---|---|---|---:|");
    let not_generated = rows.iter().any(|r| r.1 == "not generated");
    for (t, outcome, reason, n) in rows {
        let _ = writeln!(out, "| {t} | {outcome} | {reason} | {n} |");
    }
    out.push('\n');
    if not_generated {
        let _ = writeln!(
            out,
            "Requests not generated are counted by kind of failure; each one's message (and reply) is in \
             `rejects.jsonl`.\n"
        );
    }
}

/// The rank histogram's column of a source rank (1, 2, 3, 4–5, 6–10, 11–N, not in the top N).
pub(super) fn bucket(rank: Option<u32>) -> usize {
    match rank {
        Some(1) => 0,
        Some(2) => 1,
        Some(3) => 2,
        Some(4..=5) => 3,
        Some(6..=10) => 4,
        Some(_) => 5,
        None => 6,
    }
}

fn rank_histogram(out: &mut String, judged: &[Checked], top_n: usize) {
    let mut columns: Vec<String> = ["1", "2", "3", "4–5", "6–10"].map(String::from).to_vec();
    if top_n > 10 {
        columns.push(format!("11–{top_n}"));
    }
    columns.push(format!("not in top {top_n}"));
    let mut rows: BTreeMap<QueryType, [usize; 7]> = BTreeMap::new();
    for j in judged.iter().filter(|j| j.in_set() && j.query_type() != QueryType::NoAnswer) {
        let row = rows.entry(j.query_type()).or_default();
        for rank in &j.verdict.ranks {
            row[bucket(*rank)] += 1;
        }
    }
    let _ = writeln!(out, "## BM25 rank of the sources of queries in the set\n");
    let _ = writeln!(out, "| type | {} |", columns.join(" | "));
    let _ = writeln!(out, "|---|{}", "---:|".repeat(columns.len()));
    for (t, row) in rows {
        let cells: Vec<String> = row
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != 5 || top_n > 10)
            .map(|(_, n)| n.to_string())
            .collect();
        let _ = writeln!(out, "| {t} | {} |", cells.join(" | "));
    }
    out.push('\n');
}

fn overlap_table(out: &mut String, judged: &[Checked]) {
    let mut by_type: BTreeMap<QueryType, Vec<(f64, u32)>> = BTreeMap::new();
    for j in judged.iter().filter(|j| j.in_set()) {
        by_type.entry(j.query_type()).or_default().push((j.verdict.overlap, j.verdict.longest_shared));
    }
    let _ = writeln!(
        out,
        "## Lexical overlap with the source\n\nShare of the query's content terms found in its \
         sources, and the longest run of query terms found there as written.\n"
    );
    let _ = writeln!(
        out,
        "| type | queries | mean | min | median | max | longest run: mean | max |\n|---|---:|---:|---:|---:|---:|---:|---:|"
    );
    for (t, mut values) in by_type {
        values.sort_by(|a, b| a.0.total_cmp(&b.0));
        let n = values.len() as f64;
        let mean = values.iter().map(|v| v.0).sum::<f64>() / n;
        let run_mean = values.iter().map(|v| f64::from(v.1)).sum::<f64>() / n;
        let run_max = values.iter().map(|v| v.1).max().unwrap_or(0);
        let (min, max, median) = (values[0].0, values[values.len() - 1].0, values[values.len() / 2].0);
        let _ = writeln!(
            out,
            "| {t} | {} | {} | {} | {} | {} | {:.1} | {run_max} |",
            values.len(),
            round4(mean),
            round4(min),
            round4(median),
            round4(max),
            run_mean
        );
    }
    out.push('\n');
}

/// The controls, in the order a candidate meets them; one that drops a candidate is the last
/// it meets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Control {
    Repeat,
    Evidence,
    Language,
    RoundTrip,
    SourceJudge,
    AbsentTerm,
    Copy,
    OneChunk,
    NoAnswerJudge,
    JudgeFailed,
    Quota,
    NearDuplicate,
}

impl Control {
    const ALL: [Self; 12] = [
        Self::Repeat,
        Self::Evidence,
        Self::Language,
        Self::RoundTrip,
        Self::SourceJudge,
        Self::AbsentTerm,
        Self::Copy,
        Self::OneChunk,
        Self::NoAnswerJudge,
        Self::JudgeFailed,
        Self::Quota,
        Self::NearDuplicate,
    ];

    fn name(self) -> &'static str {
        match self {
            Self::Repeat => "exact repeat",
            Self::Evidence => "evidence quotes",
            Self::Language => "language",
            Self::RoundTrip => "round trip (sources in top N)",
            Self::SourceJudge => "judge: the source answers (--gate judge)",
            Self::AbsentTerm => "absent term not in top hit",
            Self::Copy => "copy (paraphrase overlap)",
            Self::OneChunk => "one chunk answers (judge, or hop terms offline)",
            Self::NoAnswerJudge => "judge: answered in the corpus",
            Self::JudgeFailed => "judge gave a grade",
            Self::Quota => "quota",
            Self::NearDuplicate => "near-duplicate (--dedup-threshold)",
        }
    }

    /// The control that gives `reason`; `None` for the reasons of a pass.
    fn of(reason: Reason) -> Option<Self> {
        match reason {
            Reason::SourceInTopN | Reason::TopicInTopN | Reason::NoAnswerConfirmed | Reason::JudgeAnswers => {
                None
            }
            Reason::Duplicate => Some(Self::Repeat),
            Reason::EvidenceNotInSource => Some(Self::Evidence),
            Reason::WrongLanguage => Some(Self::Language),
            Reason::SourceNotInTopN | Reason::HopNotInTopN => Some(Self::RoundTrip),
            Reason::SourceNotAnswering | Reason::HopNotRelevant => Some(Self::SourceJudge),
            Reason::AbsentTermFound | Reason::NoAnswerUnchecked => Some(Self::AbsentTerm),
            Reason::CopiesSource => Some(Self::Copy),
            Reason::OneChunkAnswers => Some(Self::OneChunk),
            Reason::AnsweredInCorpus | Reason::Reclassified => Some(Self::NoAnswerJudge),
            Reason::JudgeFailed => Some(Self::JudgeFailed),
            Reason::OverQuota => Some(Self::Quota),
            Reason::NearDuplicate => Some(Self::NearDuplicate),
        }
    }

    /// Whether the control examines `j`, when `decider` decided the no_answer and multi_hop
    /// questions.
    fn applies(self, j: &Checked, decider: Decider) -> bool {
        let (asked, judge) = (j.candidate.query_type, decider != Decider::Lexical);
        let gated = decider == Decider::JudgeGate;
        match self {
            Self::Evidence => !j.candidate.evidence.is_empty(),
            Self::RoundTrip => asked != QueryType::NoAnswer && !gated,
            Self::SourceJudge => asked != QueryType::NoAnswer && gated,
            Self::AbsentTerm => asked == QueryType::NoAnswer && !judge,
            Self::Copy => asked == QueryType::Paraphrase,
            Self::OneChunk => asked == QueryType::MultiHop,
            Self::NoAnswerJudge => judge && asked == QueryType::NoAnswer,
            Self::JudgeFailed => gated || judge && matches!(asked, QueryType::MultiHop | QueryType::NoAnswer),
            Self::Repeat | Self::Language | Self::Quota | Self::NearDuplicate => true,
        }
    }

    /// Whether the control changed the type of `j`.
    fn relabelled(self, j: &Checked) -> bool {
        let by = if j.is_reclassified() { Self::NoAnswerJudge } else { Self::Copy };
        j.verdict.relabelled.is_some() && by == self
    }
}

/// Who decided whether a no_answer query is answered and a multi_hop query needs its hops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decider {
    /// The LLM judge (LLM generator), the round trip as the gate.
    Judge,
    /// The LLM judge, also as the gate (`--gate judge`).
    JudgeGate,
    /// The lexical checks: the absent term, each hop's terms (offline generator).
    Lexical,
}

/// What one control did to the candidates of one type.
#[derive(Debug, Default)]
struct ControlCounts {
    examined: usize,
    passed: usize,
    flagged: usize,
    relabelled: usize,
    dropped: usize,
}

/// What the controls did, per control and type (the type a candidate was generated as).
fn controls_table(out: &mut String, judged: &[Checked], decider: Decider) {
    let mut rows: BTreeMap<(Control, QueryType), ControlCounts> = BTreeMap::new();
    for j in judged {
        let caught_by = Control::of(j.verdict.reason);
        for control in Control::ALL.into_iter().filter(|c| c.applies(j, decider)) {
            let row = rows.entry((control, j.candidate.query_type)).or_default();
            row.examined += 1;
            let caught = caught_by == Some(control);
            match j.verdict.status {
                _ if control.relabelled(j) => row.relabelled += 1,
                Status::Dropped if caught => {
                    row.dropped += 1;
                    break;
                }
                Status::Flagged if caught => row.flagged += 1,
                _ => row.passed += 1,
            }
        }
    }
    let _ = writeln!(out, "## Quality controls\n");
    let _ = writeln!(
        out,
        "Each candidate meets the controls in this order, by the type it was generated as; a \
         control that drops it is the last it meets.\n"
    );
    let _ = writeln!(
        out,
        "| control | type | examined | passed | flagged | relabelled | dropped |\n|---|---|---:|---:|---:|---:|---:|"
    );
    for ((control, t), c) in rows {
        let _ = writeln!(
            out,
            "| {} | {t} | {} | {} | {} | {} | {} |",
            control.name(),
            c.examined,
            c.passed,
            c.flagged,
            c.relabelled,
            c.dropped
        );
    }
    out.push('\n');
}

fn difficulty_table(out: &mut String, judged: &[Checked]) {
    let mut rows: BTreeMap<QueryType, BTreeMap<Difficulty, usize>> = BTreeMap::new();
    for j in judged.iter().filter(|j| j.in_set()) {
        if let Some(d) = j.verdict.difficulty {
            *rows.entry(j.query_type()).or_default().entry(d).or_default() += 1;
        }
    }
    let _ = writeln!(
        out,
        "## Difficulty: type label versus measured\n\nMeasured from the sources' BM25 ranks and the \
         overlap (easy: sources on top, overlap ≥ 0.8; hard: a source below the top 3 places or \
         overlap < 0.5).\n"
    );
    let _ = writeln!(out, "| type | easy | medium | hard |\n|---|---:|---:|---:|");
    for (t, row) in rows {
        let cells: Vec<String> =
            Difficulty::ALL.iter().map(|d| row.get(d).copied().unwrap_or(0).to_string()).collect();
        let _ = writeln!(out, "| {t} | {} |", cells.join(" | "));
    }
    out.push('\n');
}

/// The judge's grades of the pools of answerable queries in the set (`--judge-pool`), per
/// type, and the qrels rows they added.
fn judge_section(out: &mut String, judged: &[Checked]) {
    let mut rows: BTreeMap<QueryType, [usize; 4]> = BTreeMap::new();
    for j in judged.iter().filter(|j| j.in_set() && !j.is_reclassified()) {
        for g in j.verdict.pool.iter().filter_map(|p| p.grade) {
            rows.entry(j.query_type()).or_default()[usize::from(g.min(3))] += 1;
        }
    }
    rows.remove(&QueryType::NoAnswer);
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "## Judged pools\n\nPooled chunks of the queries in the set, by the judge's grade; grades ≥ 1 \
         are qrels rows (provenance `judge` in `qrels/provenance.tsv`, where grade 0 is kept too).\n"
    );
    let _ = writeln!(out, "| type | 0 | 1 | 2 | 3 | qrels rows added |\n|---|---:|---:|---:|---:|---:|");
    for (t, [g0, g1, g2, g3]) in rows {
        let _ = writeln!(out, "| {t} | {g0} | {g1} | {g2} | {g3} | {} |", g1 + g2 + g3);
    }
    out.push('\n');
}

/// Groups of near-identical chunks listed in the report; all are in `chunk_groups.jsonl`.
const GROUPS_LISTED: usize = 10;
/// Members listed per group.
const MEMBERS_LISTED: usize = 4;

fn groups_section(out: &mut String, groups: &[Vec<usize>], index: &ChunkIndex, judged: &[Checked]) {
    let _ = writeln!(out, "## Near-identical chunks\n");
    if groups.is_empty() {
        let _ = writeln!(out, "None found (`--chunk-dup-threshold`).\n");
        return;
    }
    let chunks: usize = groups.iter().map(Vec::len).sum();
    let _ = writeln!(
        out,
        "{} groups, {chunks} chunks: a query written from one member has every member relevant \
         (provenance `duplicate`), and the round trip counts any member found.\n",
        groups.len()
    );
    let mut with_copies: BTreeMap<QueryType, usize> = BTreeMap::new();
    for j in judged.iter().filter(|j| j.in_set() && !j.verdict.copies.is_empty()) {
        *with_copies.entry(j.query_type()).or_default() += 1;
    }
    let per_type: Vec<String> = with_copies.iter().map(|(t, n)| format!("{t} {n}")).collect();
    let _ = writeln!(
        out,
        "Queries in the set whose sources have copies (relevant too): {}.\n",
        if per_type.is_empty() { "none".to_owned() } else { per_type.join(", ") }
    );
    for group in groups.iter().take(GROUPS_LISTED) {
        let mut ids: Vec<String> =
            group.iter().take(MEMBERS_LISTED).map(|&c| format!("`{}`", index.chunk_id(c))).collect();
        if group.len() > MEMBERS_LISTED {
            ids.push(format!("… {} chunks in all", group.len()));
        }
        let _ = writeln!(out, "- {}", ids.join(", "));
    }
    if groups.len() > GROUPS_LISTED {
        let _ = writeln!(out, "- … and {} more in `chunk_groups.jsonl`", groups.len() - GROUPS_LISTED);
    }
    out.push('\n');
}

fn skipped_list(out: &mut String, skipped: &[Skipped]) {
    let _ = writeln!(out, "## Skipped inputs\n");
    if skipped.is_empty() {
        let _ = writeln!(out, "None.");
        return;
    }
    for s in skipped.iter().take(SKIPPED_LISTED) {
        let _ = writeln!(out, "- `{s}`");
    }
    if skipped.len() > SKIPPED_LISTED {
        let _ = writeln!(out, "- … and {} more", skipped.len() - SKIPPED_LISTED);
    }
}

/// A section a later command adds to `report.md`, in the order the sections stand there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LaterSection {
    /// The machine judges against the reviewers (`review apply`, `pool`).
    JudgeAgreement,
    /// The last refresh (`refresh`).
    Refresh,
}

impl LaterSection {
    const ALL: [Self; 2] = [Self::JudgeAgreement, Self::Refresh];

    fn heading(self) -> &'static str {
        match self {
            Self::JudgeAgreement => "\n## Machine judge vs reviewers\n",
            Self::Refresh => "\n## Refresh\n",
        }
    }
}

/// `md` with `section`, its text `body`, in place of an earlier one (up to the next `## `
/// heading), or else before the first section that stands after it, or else at the end.
#[must_use]
pub fn with_section(md: &str, section: LaterSection, body: &str) -> String {
    let md = md.trim_end();
    let heading = section.heading();
    let (before, after) = if let Some(start) = md.find(heading) {
        let rest = start + heading.len();
        let end = md[rest..].find("\n## ").map_or(md.len(), |at| rest + at);
        (&md[..start], &md[end..])
    } else {
        let later = LaterSection::ALL.into_iter().filter(|&s| s > section);
        let next = later.filter_map(|s| md.find(s.heading())).min();
        next.map_or((md, ""), |at| (&md[..at], &md[at..]))
    };
    let (before, body, after) = (before.trim_end(), body.trim_end(), after.trim());
    if after.is_empty() {
        format!("{before}\n{heading}\n{body}\n")
    } else {
        format!("{before}\n{heading}\n{body}\n\n{after}\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_later_section_replaces_its_earlier_self_and_keeps_the_order_of_sections() {
        let judge =
            |md: &str, n: u32| with_section(md, LaterSection::JudgeAgreement, &format!("Version {n}.\n"));
        let build = "# Set\n\n## Counts\n\nrows\n";
        let once = judge(build, 2);
        assert_eq!(once, "# Set\n\n## Counts\n\nrows\n\n## Machine judge vs reviewers\n\nVersion 2.\n");
        let twice = judge(&once, 3);
        assert_eq!(twice, once.replace("Version 2", "Version 3"));
        let refreshed = with_section(&twice, LaterSection::Refresh, "refreshed\n");
        assert_eq!(refreshed, format!("{twice}\n## Refresh\n\nrefreshed\n"));
        assert_eq!(
            judge(&refreshed, 5),
            "# Set\n\n## Counts\n\nrows\n\n## Machine judge vs reviewers\n\nVersion 5.\n\n## Refresh\n\nrefreshed\n"
        );
        let again = with_section(&refreshed, LaterSection::Refresh, "again\n");
        assert_eq!(again, refreshed.replace("refreshed", "again"));
        assert_eq!(
            judge("# Set\n\n## Refresh\n\nx\n", 1),
            "# Set\n\n## Machine judge vs reviewers\n\nVersion 1.\n\n## Refresh\n\nx\n"
        );
        assert_eq!(
            with_section("", LaterSection::Refresh, "x\n"),
            "\n\n## Refresh\n\nx\n",
            "no report before"
        );
    }
}
