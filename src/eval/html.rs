//! `eval.html`: the evaluation as a page: the runs' means with their intervals, the per-type
//! breakdown, each paired comparison's per-query differences (sorted) and scores (a scatter of
//! run against baseline), the abstention curves, the all-pairs p-value matrix, and the set's
//! means against the human qrels' (a scatter, one point per run).

use super::metrics::Measure;
use super::report::{self, Evaluation, RunReport};
use super::stats;
use crate::html::{self, Bar, Page};

/// Renders the page.
#[must_use]
pub fn render(evaluation: &Evaluation, k: usize) -> String {
    let mut page = Page::new("qrelgen evaluation");
    let s = &evaluation.settings;
    let q = evaluation.queries;
    let source = evaluation.set.folder.as_ref().unwrap_or(&evaluation.set.qrels);
    page.paragraph(None, &format!(
        "{} queries in {}: {} answerable (scored), {} no_answer (abstention), {} without judgments. nDCG with {}; {}.",
        q.total, source.display(), q.answerable, q.no_answer, q.unjudged, s.gain_description, s.tie_breaking
    ));
    if let Some(hash) = &evaluation.set.manifest_blake3 {
        page.paragraph(
            Some("note"),
            &format!("manifest.json blake3 {hash}; seed {}, {} resamples", s.seed, s.resamples),
        );
    }
    means(&mut page, evaluation, k);
    warnings(&mut page, evaluation, k);
    by_type(&mut page, evaluation);
    comparisons(&mut page, evaluation);
    abstention(&mut page, evaluation);
    findings(&mut page, evaluation);
    page.finish()
}

fn series(evaluation: &Evaluation) -> Vec<String> {
    evaluation.runs.iter().map(|r| r.name.clone()).collect()
}

fn means(page: &mut Page, evaluation: &Evaluation, k: usize) {
    let level = stats::confidence_percent(evaluation.settings.alpha);
    page.heading(&format!("Means per run ({level} t intervals, clipped to [0, 1])"));
    let measures = report::headline(evaluation, k);
    let groups: Vec<(String, Vec<Bar>)> = measures
        .iter()
        .map(|m| {
            let bars = evaluation.runs.iter().map(|r| bar(r, *m)).collect();
            (m.to_string(), bars)
        })
        .collect();
    page.raw(&html::legend(&series(evaluation)));
    page.raw(&html::grouped_bars(&groups, &series(evaluation)));
    let mut header = vec!["run", "rows", "missing"];
    let names: Vec<String> = measures.iter().map(ToString::to_string).collect();
    header.extend(names.iter().map(String::as_str));
    let rows: Vec<Vec<String>> = evaluation
        .runs
        .iter()
        .map(|r| {
            let mut row = vec![r.name.clone(), r.rows.to_string(), r.missing.ids.len().to_string()];
            row.extend(measures.iter().map(|m| format!("{:.4}", r.means.get(m).copied().unwrap_or(0.0))));
            row
        })
        .collect();
    page.table(&header, &rows);
}

/// One warning per kind, naming every run it concerns.
fn warnings(page: &mut Page, evaluation: &Evaluation, k: usize) {
    let judged = Measure::Judged(k);
    let few: Vec<String> = evaluation
        .runs
        .iter()
        .filter(|r| r.judged_note.is_some())
        .map(|r| format!("{} ({:.0} %)", r.name, r.means.get(&judged).copied().unwrap_or(0.0) * 100.0))
        .collect();
    if !few.is_empty() {
        page.paragraph(
            Some("warn"),
            &format!(
                "Few of the top {k} are judged for {}: unjudged documents count as not relevant, so these scores are lower bounds; compare the condensed-list variants ndcg'@{k} and bpref, which score judged documents only.",
                few.join(", ")
            ),
        );
    }
    let missing: Vec<String> = evaluation
        .runs
        .iter()
        .filter(|r| !r.missing.ids.is_empty())
        .map(|r| format!("{} ({})", r.name, r.missing.ids.len()))
        .collect();
    if !missing.is_empty() {
        page.paragraph(
            Some("warn"),
            &format!("Queries without results, counted as empty results: {}.", missing.join(", ")),
        );
    }
}

fn bar(run: &RunReport, m: Measure) -> Bar {
    Bar {
        value: run.means.get(&m).copied().unwrap_or(0.0),
        interval: run.intervals.get(&m).map(|i| (i.low, i.high)),
    }
}

fn by_type(page: &mut Page, evaluation: &Evaluation) {
    let metric = evaluation.settings.metric;
    page.heading(&format!("{metric} by query type, difficulty and provenance"));
    let series = series(evaluation);
    page.raw(&html::legend(&series));
    let Some(first) = evaluation.runs.first() else { return };
    for (b, breakdown) in first.breakdowns.iter().enumerate() {
        let groups: Vec<(String, Vec<Bar>)> = breakdown
            .slices
            .iter()
            .map(|slice| {
                let bars = evaluation
                    .runs
                    .iter()
                    .map(|r| {
                        let value = r.breakdowns[b]
                            .slices
                            .iter()
                            .find(|s| s.value == slice.value)
                            .and_then(|s| s.means.get(&metric))
                            .copied();
                        Bar { value: value.unwrap_or(0.0), interval: None }
                    })
                    .collect();
                (format!("{} ({})", slice.value, slice.queries), bars)
            })
            .collect();
        page.paragraph(Some("note"), &format!("by {} (queries in each slice)", breakdown.by));
        page.raw(&html::grouped_bars(&groups, &series));
    }
}

fn comparisons(page: &mut Page, evaluation: &Evaluation) {
    for p in &evaluation.comparisons {
        page.heading(&format!("{} − {} on {}, per query (sorted)", p.run, p.baseline, p.measure));
        page.paragraph(None, &p.verdict_text);
        let mut sorted = p.differences.clone();
        sorted.sort_unstable_by(f64::total_cmp);
        page.raw(&html::differences(&sorted));
        if let Some(points) = per_query_pairs(evaluation, &p.run, &p.baseline, p.measure) {
            page.paragraph(
                Some("note"),
                &format!(
                    "per query: {} (x) against {} (y); above the diagonal, {} does better",
                    p.baseline, p.run, p.run
                ),
            );
            page.raw(&html::scatter(
                &points,
                &[],
                &format!("{} {}", p.baseline, p.measure),
                &format!("{} {}", p.run, p.measure),
            ));
        }
        let t = p.t_p.map_or_else(|| "–".to_owned(), |v| format!("{v:.4}"));
        page.table(
            &[
                "queries",
                "mean difference",
                &format!("{} bootstrap interval", stats::confidence_percent(p.alpha)),
                "randomization p",
                &format!("Holm-corrected p ({} comparisons)", p.comparisons),
                "t-test p",
                "wins",
                "ties",
                "losses",
            ],
            &[vec![
                p.queries.to_string(),
                format!("{:+.4}", p.difference),
                format!("[{:+.4}, {:+.4}]", p.interval.low, p.interval.high),
                format!("{:.4}", p.randomization_p),
                format!("{:.4}", p.adjusted_p),
                t,
                p.wins_ties_losses[0].to_string(),
                p.wins_ties_losses[1].to_string(),
                p.wins_ties_losses[2].to_string(),
            ]],
        );
    }
}

fn abstention(page: &mut Page, evaluation: &Evaluation) {
    let runs: Vec<&RunReport> = evaluation.runs.iter().filter(|r| r.abstention.is_some()).collect();
    if runs.is_empty() {
        return;
    }
    page.heading("Abstention: answering no_answer queries versus refusing answerable ones");
    page.paragraph(Some("note"), "A query is answered when the run's top-1 score reaches the threshold. Each run has its own chart, on its own scale of scores (the scores of different systems are not comparable): the share of no_answer queries it answers (falling as the threshold rises) and the share of answerable queries it refuses (rising).");
    let names = ["no_answer queries answered".to_owned(), "answerable queries refused".to_owned()];
    page.raw(&html::legend(&names));
    let mut rows = Vec::new();
    for run in runs {
        let Some(a) = &run.abstention else { continue };
        let curves = vec![
            (names[0].clone(), a.curve.iter().map(|p| (p.threshold, p.wrong_answers)).collect()),
            (names[1].clone(), a.curve.iter().map(|p| (p.threshold, p.wrong_refusals)).collect()),
        ];
        page.paragraph(Some("note"), &format!("{}: AUROC {:.3}", run.name, a.auroc));
        page.raw(&html::lines(&curves, &format!("threshold on {}'s top-1 score", run.name), "share"));
        rows.push(vec![
            run.name.clone(),
            format!("{:.3}", a.auroc),
            format!("{:.4}", a.threshold),
            format!("{:.1} %", a.at_threshold.wrong_answers * 100.0),
            format!("{:.1} %", a.at_threshold.wrong_refusals * 100.0),
            format!("{:.3}", a.accuracy),
        ]);
    }
    page.table(&["run", "AUROC", "threshold", "no_answer answered", "answerable refused", "accuracy"], &rows);
}

/// The (baseline, run) scores on `measure` of every query both scored.
fn per_query_pairs(
    evaluation: &Evaluation,
    run: &str,
    baseline: &str,
    measure: Measure,
) -> Option<Vec<(f64, f64)>> {
    let find = |name: &str| evaluation.runs.iter().find(|r| r.name == name);
    let (a, b) = (find(baseline)?, find(run)?);
    let by_query = |r: &RunReport| -> std::collections::HashMap<usize, f64> {
        r.scores.queries.iter().copied().zip(r.scores.of_measure(measure)).collect()
    };
    let theirs = by_query(b);
    let points: Vec<(f64, f64)> = a
        .scores
        .queries
        .iter()
        .zip(a.scores.of_measure(measure))
        .filter_map(|(q, x)| Some((x, *theirs.get(q)?)))
        .collect();
    (!points.is_empty()).then_some(points)
}

fn findings(page: &mut Page, evaluation: &Evaluation) {
    if let Some(m) = &evaluation.multiple {
        page.heading(&format!(
            "All pairs on {} (discriminative power {:.2})",
            m.measure, m.discriminative_power
        ));
        let rows: Vec<Vec<String>> = m
            .pairs
            .iter()
            .map(|p| {
                vec![
                    p.a.clone(),
                    p.b.clone(),
                    format!("{:+.4}", p.difference),
                    format!("{:.4}", p.p),
                    format!("{:.4}", p.adjusted_p),
                    if p.significant { "yes" } else { "no" }.to_owned(),
                ]
            })
            .collect();
        let corrected = match m.correction {
            super::Correction::Holm => "Holm-corrected p",
            super::Correction::Tukey => "randomized Tukey HSD p",
        };
        let names = series(evaluation);
        let adjusted = |i: usize, j: usize| {
            m.pairs
                .iter()
                .find(|p| (p.a == names[i] && p.b == names[j]) || (p.a == names[j] && p.b == names[i]))
                .map(|p| p.adjusted_p)
        };
        page.paragraph(Some("note"), &format!("{corrected} of every pair (dark: below α = {})", m.alpha));
        page.raw(&html::p_matrix(&names, adjusted, m.alpha));
        page.table(&["a", "b", "a − b", "pairwise randomization p", corrected, "different"], &rows);
    }
    for l in &evaluation.layers {
        page.heading(&format!("Layers: {} → {}", l.candidates, l.reranker));
        page.paragraph(
            None,
            &format!("candidates' recall@{}: {:.4} (the reranker's ceiling)", l.depth, l.candidate_recall),
        );
        page.table(
            &["layer", "queries", "ids"],
            &[
                vec![
                    "lost at retrieval".to_owned(),
                    l.counts.retrieval.to_string(),
                    l.retrieval_failures.join(" "),
                ],
                vec![
                    format!("lost at reranking (not in top {})", l.k),
                    l.counts.rerank.to_string(),
                    l.rerank_failures.join(" "),
                ],
                vec!["fine".to_owned(), l.counts.fine.to_string(), String::new()],
            ],
        );
    }
    if let Some(h) = &evaluation.human {
        page.heading("Agreement with human judgments");
        page.paragraph(None, &h.verdict);
        let rows: Vec<Vec<String>> = h
            .runs
            .iter()
            .map(|r| vec![r.run.clone(), format!("{:.4}", r.set), format!("{:.4}", r.human)])
            .collect();
        let points: Vec<(f64, f64)> = h.runs.iter().map(|r| (r.human, r.set)).collect();
        let labels: Vec<String> = h.runs.iter().map(|r| r.run.clone()).collect();
        page.raw(&html::scatter(
            &points,
            &labels,
            &format!("{} (human)", h.measure),
            &format!("{} (set)", h.measure),
        ));
        page.table(&["run", &format!("{} (set)", h.measure), &format!("{} (human)", h.measure)], &rows);
    }
}
