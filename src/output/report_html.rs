//! `report.html`: the build's report as a page in the style of `eval.html` (inline SVG, no
//! network): queries by type, the BM25 rank histogram of the sources, the lexical overlap
//! distribution, query lengths, example queries of each type and document coverage.
//!
//! Invariant: every query, chunk id and path is escaped (corpus text and LLM replies are
//! untrusted).

use super::report::Summary;
use crate::html::{self, Page};
use crate::index::ChunkIndex;
use crate::record::{Checked, QueryType};
use crate::text::Language;
use std::collections::{BTreeMap, HashMap, HashSet};

/// Example queries shown per type.
const EXAMPLES: usize = 3;

/// Renders the page.
#[must_use]
pub fn render_report_html(summary: &Summary<'_>, index: &ChunkIndex) -> String {
    let m = summary.manifest;
    let set: Vec<&Checked> = summary.judged.iter().filter(|j| j.in_set()).collect();
    let mut page = Page::new("qrelgen report");
    page.paragraph(
        None,
        &format!(
            "corpus {} ({} documents, {} chunks); generator {}, seed {}; round trip top {}. The numbers behind every chart are in report.md.",
            m.config.corpus.display(),
            m.corpus.documents,
            m.corpus.chunks,
            m.generator,
            m.seed,
            m.config.filter.top_n
        ),
    );
    counts(&mut page, summary);
    ranks(&mut page, &set, m.config.filter.top_n);
    overlap(&mut page, &set);
    lengths(&mut page, &set);
    examples(&mut page, &set);
    coverage(&mut page, &set, index);
    page.finish()
}

fn counts(page: &mut Page, summary: &Summary<'_>) {
    page.heading("Queries by type");
    let rows: Vec<Vec<String>> = summary
        .manifest
        .counts
        .iter()
        .map(|(t, c)| {
            [
                t.label().to_owned(),
                c.requested.to_string(),
                c.generated.to_string(),
                c.dropped.to_string(),
                c.in_set().to_string(),
            ]
            .to_vec()
        })
        .collect();
    page.table(&["type", "requested", "generated", "dropped", "in set"], &rows);
}

fn ranks(page: &mut Page, set: &[&Checked], top_n: usize) {
    page.heading("BM25 rank of the sources of queries in the set");
    let labels = ["1", "2", "3", "4–5", "6–10", &format!("11–{top_n}"), &format!("not in top {top_n}")];
    let mut counts = [0usize; 7];
    for j in set.iter().filter(|j| j.query_type() != QueryType::NoAnswer) {
        for rank in &j.verdict.ranks {
            counts[super::report::bucket(*rank)] += 1;
        }
    }
    let buckets: Vec<(String, usize)> = labels
        .iter()
        .map(|l| (*l).to_owned())
        .zip(counts)
        .filter(|(l, n)| *n > 0 || !l.starts_with("11"))
        .collect();
    page.raw(&html::histogram(&buckets));
}

fn overlap(page: &mut Page, set: &[&Checked]) {
    page.heading("Lexical overlap with the source (share of query terms found there)");
    let mut buckets = [0usize; 10];
    for j in set {
        buckets[((j.verdict.overlap * 10.0).floor() as usize).min(9)] += 1;
    }
    let labelled: Vec<(String, usize)> = buckets
        .iter()
        .enumerate()
        .map(|(i, n)| (format!("{:.1}–{:.1}", i as f64 / 10.0, (i + 1) as f64 / 10.0), *n))
        .collect();
    page.raw(&html::histogram(&labelled));
    let mut by_type: BTreeMap<QueryType, Vec<f64>> = BTreeMap::new();
    for j in set {
        by_type.entry(j.query_type()).or_default().push(j.verdict.overlap);
    }
    let rows: Vec<Vec<String>> = by_type
        .iter()
        .map(|(t, v)| {
            vec![
                t.label().to_owned(),
                v.len().to_string(),
                format!("{:.3}", v.iter().sum::<f64>() / v.len() as f64),
            ]
        })
        .collect();
    page.table(&["type", "queries", "mean overlap"], &rows);
}

/// Words of an English query, characters of a Chinese one.
fn length(text: &str) -> usize {
    match Language::detect(text) {
        Language::Zh => text.chars().filter(|c| !c.is_whitespace()).count(),
        Language::En => text.split_whitespace().count(),
    }
}

fn lengths(page: &mut Page, set: &[&Checked]) {
    page.heading("Query length (words; characters for Chinese)");
    let edges = [(1, 3), (4, 6), (7, 9), (10, 12), (13, 15), (16, 20), (21, 30)];
    let mut buckets: Vec<(String, usize)> = edges.iter().map(|(a, b)| (format!("{a}–{b}"), 0)).collect();
    buckets.push(("31+".to_owned(), 0));
    for j in set {
        let n = length(&j.candidate.text);
        let at = edges.iter().position(|&(_, b)| n <= b).unwrap_or(edges.len());
        buckets[at].1 += 1;
    }
    page.raw(&html::histogram(&buckets));
}

fn examples(page: &mut Page, set: &[&Checked]) {
    page.heading("Example queries of each type");
    let mut rows = Vec::new();
    for &t in QueryType::ALL {
        for j in set.iter().filter(|j| j.query_type() == t).take(EXAMPLES) {
            let sources: Vec<String> = j.answering_chunks().iter().map(ToString::to_string).collect();
            let difficulty = j.verdict.difficulty.map_or("", |d| d.label());
            rows.push(vec![
                t.label().to_owned(),
                j.candidate.text.clone(),
                difficulty.to_owned(),
                sources.join(" "),
            ]);
        }
    }
    page.table(
        &["type", "query", "difficulty", "relevant chunks (no_answer: modelled on, not relevant)"],
        &rows,
    );
}

fn coverage(page: &mut Page, set: &[&Checked], index: &ChunkIndex) {
    page.heading("Document coverage");
    let mut per_doc: HashMap<&str, usize> = HashMap::new();
    let mut chunks = HashSet::new();
    let documents: HashSet<&str> = (0..index.len()).map(|p| index.meta(p).doc_id.as_str()).collect();
    for j in set.iter().filter(|j| j.query_type() != QueryType::NoAnswer) {
        let mut docs = HashSet::new();
        for p in j.candidate.sources.iter().filter_map(|id| index.position(id)) {
            chunks.insert(p);
            docs.insert(index.meta(p).doc_id.as_str());
        }
        for d in docs {
            *per_doc.entry(d).or_default() += 1;
        }
    }
    page.paragraph(
        None,
        &format!(
            "{} of {} documents ({:.0} %) and {} of {} chunks are a source of an answerable query.",
            per_doc.len(),
            documents.len(),
            100.0 * per_doc.len() as f64 / documents.len().max(1) as f64,
            chunks.len(),
            index.len()
        ),
    );
    let mut buckets = vec![
        ("0".to_owned(), documents.len() - per_doc.len()),
        ("1".to_owned(), 0),
        ("2".to_owned(), 0),
        ("3–5".to_owned(), 0),
        ("6+".to_owned(), 0),
    ];
    for n in per_doc.values() {
        buckets[match n {
            1 => 1,
            2 => 2,
            3..=5 => 3,
            _ => 4,
        }]
        .1 += 1;
    }
    page.paragraph(Some("note"), "documents by the number of queries written from them");
    page.raw(&html::histogram(&buckets));
}
