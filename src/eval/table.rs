//! The comparison table users paste into a paper or a pull request, as ranx prints it: runs ×
//! the headline measures, the best value of each measure in bold, and significance markers on
//! the compared measure (`--metric`, the one the paired tests ran on).
//!
//! Markers: with `--baseline`, `†` on a run whose verdict against the baseline is "better" (the
//! bootstrap interval excludes 0 and the Holm-corrected randomization p < α); without one, each
//! run gets a letter (a, b, c, … in table order) and a run's cell carries the letters of the runs
//! it beats in the all-pairs table (corrected p < α, Holm or Tukey as `--correction` says, and a
//! higher mean). Invariants: only the compared measure carries markers; judged@k is never bold
//! (it is coverage, not quality); ties for best (at the 4 decimals shown) are all bold.

use super::compare::{Correction, Verdict};
use super::report::{Evaluation, headline};
use super::{Measure, Role};
use serde::Serialize;
use std::fmt::Write as _;

/// The table, as written to `eval.json` (`table`) and rendered by [`render`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Table {
    /// Its columns.
    pub measures: Vec<Measure>,
    /// The measure the markers are about.
    pub marked: Measure,
    /// What a marker means, in words (the table's footnote).
    pub note: String,
    /// One row per run (the baseline first, when there is one).
    pub rows: Vec<Row>,
}

/// One run's row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// The run.
    pub run: String,
    /// Its letter in the all-pairs markers.
    pub letter: char,
    /// Whether it is the `--baseline`.
    pub baseline: bool,
    /// One cell per measure, in column order.
    pub cells: Vec<Cell>,
}

/// One value.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Cell {
    /// The run's mean.
    pub value: f64,
    /// The best of its column.
    pub best: bool,
    /// Significantly better than the baseline (`†`).
    pub beats_baseline: bool,
    /// The letters of the runs it is significantly better than.
    pub beats: Vec<char>,
}

/// The table of `evaluation` (headline measures at cut-off `k`).
#[must_use]
pub fn build(evaluation: &Evaluation, k: usize) -> Table {
    let measures = headline(evaluation, k);
    let marked = evaluation.settings.metric;
    let mut runs: Vec<_> = evaluation.runs.iter().filter(|r| r.role != Role::Candidates).collect();
    runs.sort_by_key(|r| r.role != Role::Baseline);
    let has_baseline = runs.iter().any(|r| r.role == Role::Baseline);
    let letter = |i: usize| char::from(b'a' + (i % 26) as u8);
    let letter_of = |name: &str| runs.iter().position(|r| r.name == name).map(letter);
    // Compared as shown (4 decimals), so equal-looking values are both best.
    let shown = |v: f64| (v * 10_000.0).round() as i64;
    let best: Vec<Option<i64>> = measures
        .iter()
        .map(|m| runs.iter().filter_map(|r| r.means.get(m)).copied().map(shown).max())
        .collect();
    let rows =
        runs.iter()
            .enumerate()
            .map(|(i, run)| {
                let cells = measures
                    .iter()
                    .zip(&best)
                    .map(|(m, best)| {
                        let value = run.means.get(m).copied().unwrap_or(0.0);
                        let is_marked = *m == marked;
                        let beats_baseline = is_marked && evaluation.comparisons.iter().any(|p| {
                            p.run == run.name
                                && p.measure == marked
                                && matches!(&p.verdict, Verdict::Better { better, .. } if *better == run.name)
                        });
                        let mut beats: Vec<char> = match (&evaluation.multiple, is_marked && !has_baseline) {
                            (Some(multiple), true) => multiple
                                .pairs
                                .iter()
                                .filter(|p| p.significant)
                                .filter_map(|p| match (p.a == run.name, p.b == run.name) {
                                    (true, _) if p.difference > 0.0 => letter_of(&p.b),
                                    (_, true) if p.difference < 0.0 => letter_of(&p.a),
                                    _ => None,
                                })
                                .collect(),
                            _ => Vec::new(),
                        };
                        beats.sort_unstable();
                        let best =
                            !matches!(m, Measure::Judged(_)) && runs.len() > 1 && Some(shown(value)) == *best;
                        Cell { value, best, beats_baseline, beats }
                    })
                    .collect();
                Row { run: run.name.clone(), letter: letter(i), baseline: run.role == Role::Baseline, cells }
            })
            .collect();
    Table { measures, marked, note: note(evaluation, marked), rows }
}

fn note(evaluation: &Evaluation, marked: Measure) -> String {
    let alpha = evaluation.settings.alpha;
    if let Some(baseline) = evaluation.runs.iter().find(|r| r.role == Role::Baseline) {
        format!(
            "Bold: best in its column. † on {marked}: better than the baseline {} (bootstrap interval excludes 0 and \
             Holm-corrected paired randomization p < {alpha}).",
            baseline.name
        )
    } else if let Some(multiple) = &evaluation.multiple {
        let test = match multiple.correction {
            Correction::Holm => "paired randomization tests, Holm-corrected over all pairs",
            Correction::Tukey => "randomized Tukey HSD over all runs",
        };
        format!(
            "Bold: best in its column. Letters on {marked}: significantly better than the runs with those letters \
             ({test}, p < {alpha})."
        )
    } else {
        "Bold: best in its column. No significance test: one run, no baseline.".to_owned()
    }
}

/// How to write the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// A GitHub-flavoured Markdown table.
    Markdown,
    /// A LaTeX `tabular` (booktabs).
    Latex,
}

/// The table as Markdown or LaTeX, with its footnote.
#[must_use]
pub fn render(table: &Table, format: Format) -> String {
    let mut out = String::new();
    let cell = |c: &Cell| {
        let value = format!("{:.4}", c.value);
        let (bold, marks) = match format {
            Format::Markdown => (
                if c.best { format!("**{value}**") } else { value },
                markers(c, "†", |s| format!("<sup>{s}</sup>")),
            ),
            Format::Latex => (
                if c.best { format!("\\textbf{{{value}}}") } else { value },
                markers(c, "\\dagger ", |s| format!("$^{{{s}}}$")),
            ),
        };
        format!("{bold}{marks}")
    };
    match format {
        Format::Markdown => {
            let _ =
                writeln!(out, "| run | {} |", join(table.measures.iter().map(ToString::to_string), " | "));
            let _ = writeln!(out, "|---|{}", "---:|".repeat(table.measures.len()));
            for row in &table.rows {
                let name = row_name(table, row, &row.run.replace('|', "\\|"));
                let _ = writeln!(out, "| {name} | {} |", join(row.cells.iter().map(cell), " | "));
            }
            let _ = writeln!(out, "\n{}", table.note);
        }
        Format::Latex => {
            let _ = writeln!(out, "\\begin{{tabular}}{{l{}}}\n\\toprule", "r".repeat(table.measures.len()));
            let heads = table.measures.iter().map(|m| latex_escape(&m.to_string()));
            let _ = writeln!(out, "Run & {} \\\\\n\\midrule", join(heads, " & "));
            for row in &table.rows {
                let name = row_name(table, row, &latex_escape(&row.run));
                let _ = writeln!(out, "{name} & {} \\\\", join(row.cells.iter().map(cell), " & "));
            }
            let _ = writeln!(out, "\\bottomrule\n\\end{{tabular}}\n% {}", table.note);
        }
    }
    out
}

/// A row's label: the baseline says so; without one, several runs carry their letters.
fn row_name(table: &Table, row: &Row, name: &str) -> String {
    if row.baseline {
        format!("{name} (baseline)")
    } else if table.rows.len() > 1 && !table.rows.iter().any(|r| r.baseline) {
        format!("({}) {name}", row.letter)
    } else {
        name.to_owned()
    }
}

/// A cell's markers: the dagger and the letters, as one superscript.
fn markers(cell: &Cell, dagger: &str, sup: impl Fn(&str) -> String) -> String {
    let mut s = String::new();
    if cell.beats_baseline {
        s.push_str(dagger);
    }
    s.extend(cell.beats.iter());
    if s.is_empty() { s } else { sup(&s) }
}

fn join(items: impl Iterator<Item = String>, by: &str) -> String {
    items.collect::<Vec<_>>().join(by)
}

/// Escapes LaTeX's special characters in a run or measure name.
fn latex_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\textbackslash{}"),
            '&' | '%' | '$' | '#' | '_' | '{' | '}' => {
                out.push('\\');
                out.push(c);
            }
            '~' => out.push_str("\\textasciitilde{}"),
            '^' => out.push_str("\\textasciicircum{}"),
            _ => out.push(c),
        }
    }
    out
}
