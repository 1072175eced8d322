//! What a refresh tells: `refresh/changelog.jsonl` (a line per chunk change and per query) and
//! its section in `report.md` and `report.html` (replacing an earlier refresh's).

use super::RefreshSummary;
use super::map::{ChunkChange, ChunkMap};
use super::recheck::{Lost, Moved, PoolGrade, QueryChange, Rechecked};
use crate::error::{Error, Result};
use crate::html::escape as escape_html;
use crate::id::{ChunkId, QueryId};
use crate::output::layout::{REPORT_HTML, REPORT_MD};
use crate::output::report::{LaterSection, with_section};
use crate::output::{self, CorpusSummary, Staging};
use crate::record::{Checked, QueryType};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

/// Why a new query was written: the reason its changelog line and its review item give.
pub(super) const NEW_REASON: &str = "written for a chunk new to the corpus";

/// One line of `refresh/changelog.jsonl`.
#[derive(Debug, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Line<'a> {
    /// An old chunk that did not stay as it was, or an added one.
    Chunk {
        /// What happened.
        change: ChunkChange,
        /// The old id (none for an added chunk).
        #[serde(skip_serializing_if = "Option::is_none")]
        old: Option<&'a ChunkId>,
        /// The new ids, with their similarity.
        new: Vec<(&'a ChunkId, f64)>,
    },
    /// A query of the set, old or new.
    Query {
        /// The query.
        query_id: &'a QueryId,
        /// Its type.
        #[serde(rename = "type")]
        query_type: QueryType,
        /// What the refresh did.
        change: QueryChange,
        /// Why.
        #[serde(skip_serializing_if = "str::is_empty")]
        reason: &'a str,
        /// Rows moved to new chunk ids (old id, new id, provenance).
        #[serde(skip_serializing_if = "<[_]>::is_empty")]
        moved: &'a [Moved],
        /// Human labels that no longer apply.
        #[serde(skip_serializing_if = "<[_]>::is_empty")]
        human_not_carried: &'a [Lost],
        /// Chunks new to the corpus in its pool, unjudged.
        #[serde(skip_serializing_if = "<[_]>::is_empty")]
        new_pool: &'a [ChunkId],
        /// Chunks new to the corpus in its pool, as the judge graded them.
        #[serde(skip_serializing_if = "<[_]>::is_empty")]
        pool_grades: &'a [PoolGrade],
    },
}

/// The changelog: chunk changes in corpus order, then every query in file order, then the new ones.
pub fn changelog<'a>(
    map: &'a ChunkMap,
    checked: &'a [Rechecked],
    new: impl Iterator<Item = &'a Checked> + 'a,
) -> impl Iterator<Item = Line<'a>> + 'a {
    let chunks = map.old.iter().filter(|m| m.change != ChunkChange::Unchanged).map(|m| Line::Chunk {
        change: m.change,
        old: Some(&m.old),
        new: m.targets.iter().map(|(id, s)| (id, *s)).collect(),
    });
    let added = map.added.iter().map(|id| Line::Chunk {
        change: ChunkChange::Added,
        old: None,
        new: vec![(id, 1.0)],
    });
    let queries = checked.iter().map(|c| Line::Query {
        query_id: &c.id,
        query_type: c.query_type,
        change: c.change,
        reason: &c.reason,
        moved: &c.moved,
        human_not_carried: &c.lost,
        new_pool: &c.new_pool,
        pool_grades: &c.pool_grades,
    });
    let fresh = new.map(|j| Line::Query {
        query_id: &j.candidate.id,
        query_type: j.query_type(),
        change: QueryChange::New,
        reason: NEW_REASON,
        moved: &[],
        human_not_carried: &[],
        new_pool: &[],
        pool_grades: &[],
    });
    chunks.chain(added).chain(queries).chain(fresh)
}

/// `edited 3, deleted 1, added 2` for chunk changes, `kept 90, relabelled 3, …` for queries:
/// each change's label and count, in the changes' order.
pub fn counts_line<C: Copy + Into<&'static str>>(counts: &BTreeMap<C, usize>) -> String {
    counts.iter().map(|(&c, n)| format!("{} {n}", c.into())).collect::<Vec<_>>().join(", ")
}

const HTML_START: &str = "<section id=\"refresh\">";
const HTML_END: &str = "</section>";

/// Stages `report.md` and `report.html` with the refresh's section in place of an earlier one:
/// the new corpus (at `corpus`, as `corpus_summary` counts it), what changed, and the set it makes.
pub fn stage(
    staging: &Staging,
    set: &Path,
    summary: &RefreshSummary,
    corpus: &Path,
    corpus_summary: &CorpusSummary,
) -> Result<()> {
    let read = |name: &str| fs_err::read_to_string(set.join(name)).unwrap_or_default();
    let md = read(REPORT_MD);
    let rows = rows(summary, corpus, corpus_summary);
    let md = with_section(&md, LaterSection::Refresh, &markdown(&rows, summary));
    output::write_text(&staging.path(REPORT_MD), &md)?;
    let html = read(REPORT_HTML);
    if html.is_empty() {
        return Ok(());
    }
    // The previous refresh's section: from its start to the first end after it.
    let section =
        html.find(HTML_START).and_then(|start| Some((start, start + html[start..].find(HTML_END)?)));
    let html = match section {
        Some((start, end)) => format!("{}{}", &html[..start], &html[end + HTML_END.len()..]),
        None => html,
    };
    let at = html.rfind("</body>").ok_or_else(|| Error::Malformed {
        path: set.join(REPORT_HTML),
        line: 0,
        message: "no </body>".to_owned(),
    })?;
    let page = format!("{}{}{}", &html[..at], section_html(&rows, summary), &html[at..]);
    output::write_text(&staging.path(REPORT_HTML), &page)
}

/// A row of the section: its name, its text, and a path or command shown as code after it.
type Row = (&'static str, String, Option<String>);

fn rows(summary: &RefreshSummary, corpus: &Path, corpus_summary: &CorpusSummary) -> Vec<Row> {
    let text = |name, value: String| (name, value, None);
    let by_type = summary.by_type.iter().map(|(t, n)| format!("{} {n}", t.label())).collect::<Vec<_>>();
    vec![
        (
            "new corpus",
            format!("{} documents, {} chunks: ", corpus_summary.documents, corpus_summary.chunks),
            Some(corpus.display().to_string()),
        ),
        text("chunks", counts_line(&summary.chunks)),
        text("queries", counts_line(&summary.queries)),
        text("new queries asked for", summary.new_wanted.to_string()),
        text("LLM calls", format!("{} sent, {} from the cache", summary.llm_calls, summary.llm_cache_hits)),
        text("queries in the set", format!("{} ({})", summary.in_set, by_type.join(", "))),
        text("human-verified", format!("{:.1} %", summary.human_share * 100.0)),
        (
            "review queue",
            format!("{} items, the {} changed queries first: ", summary.queue_items, summary.review_items),
            Some("review export --only changed".into()),
        ),
    ]
}

/// What the section begins with: which version it describes, and that the sections above
/// describe the set's build.
fn lead(summary: &RefreshSummary) -> String {
    format!(
        "Version {} of the set, refreshed from a changed corpus. The sections above describe the \
         build the set started from; this one, what the refresh changed and the set it made.",
        summary.version.unwrap_or(0)
    )
}

fn markdown(rows: &[Row], summary: &RefreshSummary) -> String {
    let mut md = format!("{}\n\n| | |\n|---|---|\n", lead(summary));
    for (name, value, code) in rows {
        let code = code.as_ref().map_or_else(String::new, |code| format!("`{code}`"));
        let _ = writeln!(md, "| {name} | {} |", format!("{value}{code}").replace('|', "\\|"));
    }
    md.push_str("\nEvery chunk change and every query's fate: `refresh/changelog.jsonl`; the chunk map: `refresh/chunk_map.tsv`.\n");
    md
}

fn section_html(rows: &[Row], summary: &RefreshSummary) -> String {
    let mut html = format!("{HTML_START}<h2>Refresh</h2><p>{}</p><table>", escape_html(&lead(summary)));
    for (name, value, code) in rows {
        let code =
            code.as_ref().map_or_else(String::new, |code| format!("<code>{}</code>", escape_html(code)));
        let _ = write!(html, "<tr><th>{}</th><td>{}{code}</td></tr>", escape_html(name), escape_html(value));
    }
    html.push_str(
        "</table><p>Every chunk change and every query's fate: <code>refresh/changelog.jsonl</code>; the chunk \
         map: <code>refresh/chunk_map.tsv</code>.</p>",
    );
    html.push_str(HTML_END);
    html
}
