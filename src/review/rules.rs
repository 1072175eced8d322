//! The rules a judgment keeps before it is applied, one function each.
//!
//! Form rules ([`form`]) hold for every judgment, read from a file or merged from two
//! reviewers: what each decision needs, and fields that need a decision. Rules against the set
//! ([`against_set`]): a known query and known chunks, `answerable` only for `no_answer` queries
//! (and needed by a graded one), a relevant chunk left, no text changed without `edit`.
//! [`repeats`]: one judgment per query in a batch. Each rule reports through `problem`, in the
//! order listed here, so every format gets its messages in the same order.

use super::set::{QueryLine, ReviewSet};
use super::{ChunkGrade, Decision, Judgment, Located, Location, Problem};
use crate::id::{ChunkId, QueryId};
use crate::record::QueryType;
use std::collections::{BTreeMap, HashMap};

/// The decision fields of a judgment, for [`form`].
#[derive(Clone, Copy)]
pub(crate) struct Fields<'a> {
    pub decision: Option<Decision>,
    pub reject_reason: &'a str,
    pub edited_text: &'a str,
    pub grades: &'a [ChunkGrade],
}

impl<'a> Fields<'a> {
    /// The fields of a judgment.
    pub fn of(j: &'a Judgment) -> Self {
        Self {
            decision: j.decision,
            reject_reason: j.reject_reason.as_deref().unwrap_or_default(),
            edited_text: j.edited_text.as_deref().unwrap_or_default(),
            grades: &j.grades,
        }
    }
}

/// The form rules every judgment keeps, read from a file or merged from two reviewers.
pub(crate) fn form(f: Fields<'_>, problem: &mut impl FnMut(String)) {
    decision_has_what_it_needs(f, problem);
    fields_have_their_decision(f, problem);
}

/// A rejection needs a reason, an edit a text, `answerable` a chunk graded 1–3.
fn decision_has_what_it_needs(f: Fields<'_>, problem: &mut impl FnMut(String)) {
    let answered = f.grades.iter().any(|g| g.grade >= 1);
    match f.decision {
        Some(Decision::Reject) if f.reject_reason.is_empty() => {
            problem("reject needs a reject_reason".to_owned());
        }
        Some(Decision::Edit) if f.edited_text.is_empty() => problem("edit needs an edited_text".to_owned()),
        Some(Decision::Answerable) if !answered => {
            problem("answerable needs the chunk that answers it: grade it 1–3, or list it in add".to_owned());
        }
        _ => {}
    }
}

/// An edited text needs the decision `edit`, a reject reason the decision `reject`.
fn fields_have_their_decision(f: Fields<'_>, problem: &mut impl FnMut(String)) {
    if !f.edited_text.is_empty() && f.decision != Some(Decision::Edit) {
        problem("edited_text is given but the decision is not edit".to_owned());
    }
    if !f.reject_reason.is_empty() && f.decision != Some(Decision::Reject) {
        problem("reject_reason is given but the decision is not reject".to_owned());
    }
}

/// The form rules for judgments that were not read from a file (merged from two reviewers), each
/// message naming its query: a resolved judgment cannot be what a file could not say.
pub(crate) fn resolved_form(judgments: &[Located]) -> Vec<Problem> {
    let mut problems = Vec::new();
    for Located { at, judgment: j, .. } in judgments {
        let mut problem =
            |message: String| problems.push(Problem::new(*at, format!("{}: {message}", j.query_id)));
        form(Fields::of(j), &mut problem);
    }
    problems
}

/// What the rules against the set look up.
struct Known<'s> {
    set: &'s ReviewSet,
    /// The base version's queries.
    queries: HashMap<&'s QueryId, &'s QueryLine>,
    /// Each query's grades before the batch: the machine's, then the ledger's.
    grades: HashMap<&'s QueryId, BTreeMap<&'s ChunkId, u8>>,
    /// Each query's latest decision in the ledger.
    decided: HashMap<&'s QueryId, Decision>,
}

impl<'s> Known<'s> {
    fn new(set: &'s ReviewSet) -> Self {
        let queries = set.base.queries.iter().map(|q| (&q.id, q)).collect();
        let mut grades: HashMap<&QueryId, BTreeMap<&ChunkId, u8>> = HashMap::new();
        for q in &set.base.qrels {
            grades.entry(&q.query_id).or_default().insert(&q.chunk_id, q.grade);
        }
        let mut decided = HashMap::new();
        for j in set.ledger.iter().map(|e| &e.judgment) {
            let given = grades.entry(&j.query_id).or_default();
            given.extend(j.grades.iter().map(|g| (&g.chunk_id, g.grade)));
            if let Some(decision) = j.decision {
                decided.insert(&j.query_id, decision);
            }
        }
        Self { set, queries, grades, decided }
    }
}

/// Problems of `judgments` against the set (known queries and chunks, decisions that fit the
/// type, a relevant chunk left, no text changed without `edit`), in file order.
pub(crate) fn against_set(set: &ReviewSet, judgments: &[Located]) -> Vec<Problem> {
    let known = Known::new(set);
    let mut problems = Vec::new();
    for located in judgments {
        let mut problem = |message: String| problems.push(Problem::new(located.at, message));
        let j = &located.judgment;
        let Some(query) = known.queries.get(&j.query_id) else {
            problem(format!("unknown query id {} (not in the set)", j.query_id));
            continue;
        };
        chunks_are_known(&known, j, &mut problem);
        answerable_is_for_no_answer(j, query.query_type, &mut problem);
        graded_no_answer_is_answerable(j, query.query_type, &mut problem);
        keeps_a_relevant_chunk(&known, j, query.query_type, &mut problem);
        text_changes_by_edit(located, query, &mut problem);
    }
    problems
}

/// Every graded chunk is in `corpus.jsonl`.
fn chunks_are_known(known: &Known<'_>, j: &Judgment, problem: &mut impl FnMut(String)) {
    for g in j.grades.iter().filter(|g| !known.set.chunks.contains(&g.chunk_id)) {
        problem(format!("unknown chunk id {} (not in corpus.jsonl)", g.chunk_id));
    }
}

/// The decision `answerable` is only for `no_answer` queries.
fn answerable_is_for_no_answer(j: &Judgment, query_type: QueryType, problem: &mut impl FnMut(String)) {
    if j.decision == Some(Decision::Answerable) && query_type != QueryType::NoAnswer {
        problem(format!("answerable is only for no_answer queries; {} is {query_type}", j.query_id));
    }
}

/// A `no_answer` query with a chunk graded 1–3 is answerable, and the decision must say so.
fn graded_no_answer_is_answerable(j: &Judgment, query_type: QueryType, problem: &mut impl FnMut(String)) {
    let answered = j.grades.iter().any(|g| g.grade >= 1);
    if query_type == QueryType::NoAnswer && answered && j.decision != Some(Decision::Answerable) {
        problem(format!(
            "{} is a no_answer query: grading a chunk 1–3 says it is answerable; choose the decision answerable",
            j.query_id
        ));
    }
}

/// A query that stays answerable (any not rejected; a `no_answer` query only once found
/// answerable) keeps a chunk graded 1–3, counting the grades and the decision given before.
fn keeps_a_relevant_chunk(
    known: &Known<'_>,
    j: &Judgment,
    query_type: QueryType,
    problem: &mut impl FnMut(String),
) {
    let decision = j.decision.or_else(|| known.decided.get(&j.query_id).copied());
    let must_answer = if query_type == QueryType::NoAnswer {
        decision == Some(Decision::Answerable)
    } else {
        decision != Some(Decision::Reject)
    };
    if !must_answer {
        return;
    }
    let mut grades: BTreeMap<&ChunkId, u8> = known.grades.get(&j.query_id).cloned().unwrap_or_default();
    grades.extend(j.grades.iter().map(|g| (&g.chunk_id, g.grade)));
    if grades.values().all(|&g| g == 0) {
        problem(format!(
            "{} would be left with no relevant chunk: grade a chunk 1–3, add one, or reject",
            j.query_id
        ));
    }
}

/// A row that shows the query's text changes it only with the decision `edit`.
fn text_changes_by_edit(located: &Located, query: &QueryLine, problem: &mut impl FnMut(String)) {
    let j = &located.judgment;
    if let Some(shown) = located.shown_text.as_deref()
        && j.decision != Some(Decision::Edit)
        && !same_words(shown, &query.text)
    {
        problem(format!(
            "the query text of {} was changed here but the decision is not edit: choose edit and put the \
             new text in edited_text",
            j.query_id
        ));
    }
}

/// Whether two texts have the same words (a spreadsheet may change spaces and line ends).
fn same_words(a: &str, b: &str) -> bool {
    a.split_whitespace().eq(b.split_whitespace())
}

/// Queries judged more than once in one batch (by two reviewers: that is for `review agree`).
pub(crate) fn repeats(judgments: &[Located]) -> Vec<Problem> {
    let mut seen: HashMap<&QueryId, (Location, &str)> = HashMap::new();
    let mut problems = Vec::new();
    for Located { at, judgment: j, .. } in judgments {
        if let Some((first, reviewer)) = seen.insert(&j.query_id, (*at, &j.reviewer)) {
            let message = format!(
                "{} is judged by {} here and by {reviewer} ({first}); two reviewers' judgments are merged \
                 by review agree --resolve",
                j.query_id, j.reviewer
            );
            problems.push(Problem::new(*at, message));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Provenance, Qrel, Status};
    use crate::review::set::{SetManifest, Version};

    fn query(id: &str, query_type: QueryType, line: usize) -> QueryLine {
        let (id, text) = (QueryId::parse(id).unwrap(), format!("what is {id}?"));
        QueryLine { id, text, query_type, status: Status::Kept, raw: String::new(), line }
    }

    /// A set of a direct query answered by `a:1` and a no_answer query, over chunks `a:1`, `b:2`.
    fn set() -> ReviewSet {
        let qrel = Qrel {
            query_id: QueryId::parse("direct-1").unwrap(),
            chunk_id: ChunkId::parse("a:1").unwrap(),
            grade: 3,
            provenance: Provenance::Source,
        };
        let base = Version {
            queries: vec![
                query("direct-1", QueryType::Direct, 1),
                query("no_answer-2", QueryType::NoAnswer, 2),
            ],
            qrels: vec![qrel],
        };
        ReviewSet {
            dir: "set".into(),
            manifest: SetManifest { rest: serde_json::Map::new(), review: None },
            current: base.clone(),
            base,
            queue: Vec::new(),
            chunks: ["a:1", "b:2"].into_iter().map(|c| ChunkId::parse(c).unwrap()).collect(),
            ledger: Vec::new(),
            earlier_ledger: Vec::new(),
        }
    }

    /// A judgment of `query` read at line `line`, with `decision` and `grades` (chunk, grade).
    fn judged(line: usize, query: &str, decision: Option<Decision>, grades: &[(&str, u8)]) -> Located {
        let grades =
            grades.iter().map(|&(c, grade)| ChunkGrade { chunk_id: ChunkId::parse(c).unwrap(), grade });
        let judgment = Judgment {
            query_id: QueryId::parse(query).unwrap(),
            reviewer: "ann".into(),
            decision,
            reject_reason: None,
            edited_text: None,
            grades: grades.collect(),
        };
        Located::new(Location::Line(line), judgment)
    }

    fn messages(problems: &[Problem]) -> Vec<String> {
        problems.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn each_rule_against_the_set_names_its_problem() {
        let set = set();
        let mut edited = judged(7, "direct-1", Some(Decision::Accept), &[]);
        edited.shown_text = Some("what is  direct-1?\n".into());
        let mut changed = judged(8, "direct-1", Some(Decision::Accept), &[]);
        changed.shown_text = Some("what else?".into());
        let judgments = [
            judged(1, "direct-9", Some(Decision::Accept), &[]),
            judged(2, "direct-1", Some(Decision::Accept), &[("c:3", 2)]),
            judged(3, "direct-1", Some(Decision::Answerable), &[]),
            judged(4, "no_answer-2", Some(Decision::Accept), &[("b:2", 2)]),
            judged(5, "direct-1", None, &[("a:1", 0)]),
            judged(6, "no_answer-2", Some(Decision::Answerable), &[("b:2", 0)]),
            edited,
            changed,
        ];
        assert_eq!(
            messages(&against_set(&set, &judgments)),
            [
                "line 1: unknown query id direct-9 (not in the set)",
                "line 2: unknown chunk id c:3 (not in corpus.jsonl)",
                "line 3: answerable is only for no_answer queries; direct-1 is direct",
                "line 4: no_answer-2 is a no_answer query: grading a chunk 1–3 says it is answerable; choose the \
                 decision answerable",
                "line 5: direct-1 would be left with no relevant chunk: grade a chunk 1–3, add one, or reject",
                "line 6: no_answer-2 would be left with no relevant chunk: grade a chunk 1–3, add one, or reject",
                "line 8: the query text of direct-1 was changed here but the decision is not edit: choose edit and \
                 put the new text in edited_text",
            ],
            "line 7 only changes spaces"
        );
        let fine = [
            judged(1, "direct-1", Some(Decision::Reject), &[("a:1", 0)]),
            judged(2, "no_answer-2", None, &[]),
        ];
        assert_eq!(messages(&against_set(&set, &fine)), Vec::<String>::new());
    }

    #[test]
    fn form_rules_and_repeats() {
        let mut rejected = judged(1, "direct-1", Some(Decision::Reject), &[]);
        rejected.judgment.edited_text = Some("new".into());
        let mut accepted = judged(2, "no_answer-2", Some(Decision::Accept), &[]);
        accepted.judgment.reject_reason = Some("off topic".into());
        let judgments = [rejected, accepted, judged(3, "direct-1", Some(Decision::Edit), &[])];
        assert_eq!(
            messages(&resolved_form(&judgments)),
            [
                "line 1: direct-1: reject needs a reject_reason",
                "line 1: direct-1: edited_text is given but the decision is not edit",
                "line 2: no_answer-2: reject_reason is given but the decision is not reject",
                "line 3: direct-1: edit needs an edited_text",
            ]
        );
        assert_eq!(
            messages(&repeats(&judgments)),
            [
                "line 3: direct-1 is judged by ann here and by ann (line 1); two reviewers' judgments are merged by \
              review agree --resolve"
            ]
        );
    }
}
