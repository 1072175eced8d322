//! Self-contained HTML pages (`eval.html`, `report.html`): one style, charts drawn as inline
//! SVG, no script, no network (a Content-Security-Policy forbids every load).
//!
//! Invariant: every text that reaches a page goes through [`escape`] (corpus text, LLM replies,
//! ids and file names are untrusted).

use std::fmt::Write as _;

/// Bar colours of the first series; further series get [`colour`]'s generated hues.
const COLOURS: [&str; 8] =
    ["#3b6ea8", "#d9822b", "#4f9d69", "#b8483e", "#7d5ba6", "#8c6d46", "#c2609d", "#6b7b8c"];

/// The colour of series `i`: the palette, then hues a golden angle apart (distinct for any
/// number of series, never a palette colour again).
#[must_use]
pub fn colour(i: usize) -> String {
    if let Some(c) = COLOURS.get(i) {
        return (*c).to_owned();
    }
    let step = i - COLOURS.len();
    let hue = (17.0 + step as f64 * 137.508) % 360.0;
    let light = if step.is_multiple_of(2) { 38 } else { 55 };
    format!("hsl({hue:.0},60%,{light}%)")
}

/// The opening tag of a chart `width` × `height` user units wide: it scales down to the page's
/// width (never clipped) and never grows past its own width.
fn svg_open(width: f64, height: f64) -> String {
    format!(
        "<svg viewBox=\"0 0 {width:.0} {height:.0}\" width=\"100%\" style=\"max-width:{width:.0}px\" role=\"img\">"
    )
}

const STYLE: &str = "body{font:15px/1.45 system-ui,sans-serif;margin:2rem auto;max-width:72rem;padding:0 1rem;color:#1d232a;background:#fff}\
h1{font-size:1.6rem}h2{font-size:1.2rem;margin-top:2.2rem;border-bottom:1px solid #d5dbe1;padding-bottom:.2rem}\
table{border-collapse:collapse;margin:.6rem 0}th,td{padding:.25rem .6rem;border-bottom:1px solid #e6eaee;text-align:left;vertical-align:top}\
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}.note{color:#5a6570}.warn{background:#fff4e0;border-left:4px solid #d9822b;padding:.4rem .8rem}\
svg{display:block;margin:.5rem 0}svg text{font:12px system-ui,sans-serif;fill:#1d232a}code{background:#f1f3f5;padding:0 .2rem}\
.legend span{display:inline-block;margin-right:1rem}.legend i{display:inline-block;width:.8rem;height:.8rem;margin-right:.3rem;vertical-align:-1px}";

/// Escapes `&`, `<`, `>`, `"` and `'` for HTML content and attribute values (pages and the
/// review export share it).
#[must_use]
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A page being written.
pub struct Page {
    body: String,
    title: String,
    sections: usize,
}

impl Page {
    /// A page titled `title` (escaped).
    #[must_use]
    pub fn new(title: &str) -> Self {
        let mut page = Self { body: String::new(), title: escape(title), sections: 0 };
        let _ = writeln!(page.body, "<h1>{}</h1>", page.title);
        page
    }

    /// A section heading, with an id made of its first word and its position (a link target).
    pub fn heading(&mut self, text: &str) {
        self.sections += 1;
        let word: String =
            text.chars().take_while(char::is_ascii_alphanumeric).collect::<String>().to_ascii_lowercase();
        let _ = writeln!(self.body, "<h2 id=\"s{}-{word}\">{}</h2>", self.sections, escape(text));
    }

    /// A paragraph of plain text (escaped), with a class (`note`, `warn`) or none.
    pub fn paragraph(&mut self, class: Option<&str>, text: &str) {
        match class {
            Some(class) => {
                let _ = writeln!(self.body, "<p class=\"{class}\">{}</p>", escape(text));
            }
            None => {
                let _ = writeln!(self.body, "<p>{}</p>", escape(text));
            }
        }
    }

    /// Markup this module made (charts), added as it is.
    pub fn raw(&mut self, markup: &str) {
        self.body.push_str(markup);
        self.body.push('\n');
    }

    /// A table; cells are escaped, cells that parse as numbers are right-aligned.
    pub fn table(&mut self, header: &[&str], rows: &[Vec<String>]) {
        let numeric = |s: &str| {
            let digits = s.trim_start_matches(['+', '-']).trim_end_matches(" %").replace(['.', ','], "");
            !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit())
        };
        self.body.push_str("<table><tr>");
        for h in header {
            let _ = write!(self.body, "<th>{}</th>", escape(h));
        }
        self.body.push_str("</tr>\n");
        for row in rows {
            self.body.push_str("<tr>");
            for cell in row {
                let class = if numeric(cell) { " class=\"n\"" } else { "" };
                let _ = write!(self.body, "<td{class}>{}</td>", escape(cell));
            }
            self.body.push_str("</tr>\n");
        }
        self.body.push_str("</table>\n");
    }

    /// The finished document.
    #[must_use]
    pub fn finish(self) -> String {
        format!(
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n\
             <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">\n\
             <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
             <title>{}</title><style>{STYLE}</style></head><body>\n{}</body></html>\n",
            self.title, self.body
        )
    }
}

/// One bar of a grouped bar chart: a value in [0, 1] and an optional interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bar {
    /// Its height.
    pub value: f64,
    /// Its interval, drawn as a whisker.
    pub interval: Option<(f64, f64)>,
}

/// A grouped bar chart of values in [0, 1]: one group per label, one bar per series.
#[must_use]
pub fn grouped_bars(groups: &[(String, Vec<Bar>)], series: &[String]) -> String {
    let (height, top, bottom, left) = (220.0, 10.0, 40.0, 40.0);
    let per = series.len().max(1) as f64;
    let longest = groups.iter().map(|g| g.0.chars().count()).max().unwrap_or(0) as f64;
    let group_width = (per * 18.0 + 20.0).max(longest * 7.0 + 12.0).max(60.0);
    let width = left + groups.len() as f64 * group_width + 10.0;
    let y = |v: f64| top + (1.0 - v.clamp(0.0, 1.0)) * (height - top - bottom);
    let mut svg = svg_open(width, height);
    for tick in [0.0, 0.25, 0.5, 0.75, 1.0] {
        let _ = write!(
            svg,
            "<line x1=\"{left}\" x2=\"{width:.0}\" y1=\"{0:.1}\" y2=\"{0:.1}\" stroke=\"#e6eaee\"/><text x=\"{1}\" y=\"{2:.1}\" text-anchor=\"end\">{tick:.2}</text>",
            y(tick),
            left - 4.0,
            y(tick) + 4.0
        );
    }
    for (g, (label, bars)) in groups.iter().enumerate() {
        // The bars and the label centred in the group's width, which fits the longest label: a
        // label never reaches into the axis or the next group.
        let centre = left + (g as f64 + 0.5) * group_width;
        let x0 = centre - per * 9.0 + 2.0;
        for (s, bar) in bars.iter().enumerate() {
            let x = x0 + s as f64 * 18.0;
            let colour = colour(s);
            let _ = write!(
                svg,
                "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"14\" height=\"{:.1}\" fill=\"{colour}\"><title>{}: {:.4}</title></rect>",
                y(bar.value),
                y(0.0) - y(bar.value),
                escape(series.get(s).map_or("", String::as_str)),
                bar.value
            );
            if let Some((lo, hi)) = bar.interval {
                let (lo, hi) = (lo.clamp(0.0, 1.0), hi.clamp(0.0, 1.0));
                let cx = x + 7.0;
                let _ = write!(
                    svg,
                    "<line x1=\"{cx:.1}\" x2=\"{cx:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"#1d232a\"/>",
                    y(lo),
                    y(hi)
                );
            }
        }
        let _ = write!(
            svg,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            centre,
            height - bottom + 16.0,
            escape(label)
        );
    }
    svg.push_str("</svg>");
    svg
}

/// A legend naming each series' colour.
#[must_use]
pub fn legend(series: &[String]) -> String {
    let mut out = String::from("<p class=\"legend\">");
    for (i, name) in series.iter().enumerate() {
        let _ = write!(out, "<span><i style=\"background:{}\"></i>{}</span>", colour(i), escape(name));
    }
    out.push_str("</p>");
    out
}

/// A histogram: one labelled bar per bucket, heights relative to the largest count.
#[must_use]
pub fn histogram(buckets: &[(String, usize)]) -> String {
    let (height, top, bottom, left, bar): (f64, f64, f64, f64, f64) = (180.0, 18.0, 34.0, 10.0, 46.0);
    let longest = buckets.iter().map(|b| b.0.chars().count()).max().unwrap_or(0) as f64;
    let slot = (bar + 8.0).max(longest * 7.0 + 8.0);
    let width = left + buckets.len() as f64 * slot + 10.0;
    let max = buckets.iter().map(|b| b.1).max().unwrap_or(0).max(1) as f64;
    let mut svg = format!("<svg width=\"{width:.0}\" height=\"{height:.0}\" role=\"img\">");
    for (i, (label, n)) in buckets.iter().enumerate() {
        let x = left + i as f64 * slot + (slot - bar - 8.0) / 2.0;
        let h = *n as f64 / max * (height - top - bottom);
        let y = height - bottom - h;
        let _ = write!(
            svg,
            "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{bar}\" height=\"{h:.1}\" fill=\"{}\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{n}</text><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            COLOURS[0],
            x + bar / 2.0,
            y - 4.0,
            x + bar / 2.0,
            height - bottom + 16.0,
            escape(label)
        );
    }
    svg.push_str("</svg>");
    svg
}

/// A line chart of series of (x, y) points, y in [0, 1], x scaled to the data.
#[must_use]
pub fn lines(series: &[(String, Vec<(f64, f64)>)], x_label: &str, y_label: &str) -> String {
    let (width, height, top, bottom, left, right) = (640.0, 250.0, 22.0, 40.0, 44.0, 10.0);
    let xs = series.iter().flat_map(|s| s.1.iter().map(|p| p.0)).filter(|x| x.is_finite());
    let (lo, hi) = xs.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| (lo.min(x), hi.max(x)));
    let (lo, hi) = if lo.is_finite() && hi > lo { (lo, hi) } else { (lo.min(0.0), lo.max(0.0) + 1.0) };
    let x = |v: f64| left + (v - lo) / (hi - lo) * (width - left - right);
    let y = |v: f64| top + (1.0 - v.clamp(0.0, 1.0)) * (height - top - bottom);
    let mut svg = svg_open(width, height);
    for tick in [0.0, 0.5, 1.0] {
        let _ = write!(
            svg,
            "<line x1=\"{left}\" x2=\"{}\" y1=\"{1:.1}\" y2=\"{1:.1}\" stroke=\"#e6eaee\"/><text x=\"{2}\" y=\"{3:.1}\" text-anchor=\"end\">{tick:.1}</text>",
            width - right,
            y(tick),
            left - 4.0,
            y(tick) + 4.0
        );
    }
    for (i, (_, points)) in series.iter().enumerate() {
        let path: Vec<String> = points
            .iter()
            .filter(|p| p.0.is_finite())
            .map(|p| format!("{:.1},{:.1}", x(p.0), y(p.1)))
            .collect();
        let _ = write!(
            svg,
            "<polyline fill=\"none\" stroke-width=\"2\" stroke=\"{}\" points=\"{}\"/>",
            colour(i),
            path.join(" ")
        );
    }
    let _ = write!(
        svg,
        "<text x=\"{left}\" y=\"{:.0}\">{lo:.3}</text><text x=\"{:.0}\" y=\"{:.0}\" text-anchor=\"end\">{hi:.3}</text><text x=\"{:.0}\" y=\"{:.0}\" text-anchor=\"middle\">{}</text><text x=\"4\" y=\"4\" dominant-baseline=\"hanging\">{}</text></svg>",
        height - bottom + 16.0,
        width - right,
        height - bottom + 16.0,
        f64::midpoint(width, left),
        height - 6.0,
        escape(x_label),
        escape(y_label)
    );
    svg
}

/// Sorted per-item differences as thin bars around a zero line (a paired comparison).
#[must_use]
pub fn differences(sorted: &[f64]) -> String {
    let (width, height, mid) = (640.0, 200.0, 100.0);
    let max = sorted.iter().map(|d| d.abs()).fold(0.0, f64::max).max(1e-9);
    let step = width / sorted.len().max(1) as f64;
    let mut svg = svg_open(width, height);
    let _ = write!(svg, "<line x1=\"0\" x2=\"{width}\" y1=\"{mid}\" y2=\"{mid}\" stroke=\"#5a6570\"/>");
    for (i, d) in sorted.iter().enumerate() {
        let h = d.abs() / max * (mid - 10.0);
        let (y, colour) = if *d >= 0.0 { (mid - h, COLOURS[2]) } else { (mid, COLOURS[3]) };
        let _ = write!(
            svg,
            "<rect x=\"{:.2}\" y=\"{y:.1}\" width=\"{:.2}\" height=\"{h:.1}\" fill=\"{colour}\"/>",
            i as f64 * step,
            step.max(0.5)
        );
    }
    let _ = write!(
        svg,
        "<text x=\"4\" y=\"14\">+{max:.3}</text><text x=\"4\" y=\"{}\">−{max:.3}</text></svg>",
        height - 4.0
    );
    svg
}

/// A scatter of points in [0, 1]² (values outside are clipped to the frame) with the diagonal
/// y = x, for two systems' scores side by side; `labels`, when given, name the points (one
/// each, in order).
#[must_use]
pub fn scatter(points: &[(f64, f64)], labels: &[String], x_label: &str, y_label: &str) -> String {
    let (size, pad, right) = (300.0, 40.0, if labels.is_empty() { 10.0 } else { 130.0 });
    let at = |v: f64| v.clamp(0.0, 1.0) * (size - 2.0 * pad);
    let (x, y) = (|v: f64| pad + at(v), |v: f64| size - pad - at(v));
    let mut svg = svg_open(size + right - pad, size);
    let _ = write!(
        svg,
        "<rect x=\"{pad}\" y=\"{pad}\" width=\"{0}\" height=\"{0}\" fill=\"none\" stroke=\"#d5dbe1\"/><line x1=\"{1:.1}\" y1=\"{2:.1}\" x2=\"{3:.1}\" y2=\"{4:.1}\" stroke=\"#5a6570\" stroke-dasharray=\"4 3\"/>",
        size - 2.0 * pad,
        x(0.0),
        y(0.0),
        x(1.0),
        y(1.0),
    );
    for (i, (a, b)) in points.iter().enumerate() {
        let _ = write!(
            svg,
            "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3.5\" fill=\"{}\" fill-opacity=\"0.6\"/>",
            x(*a),
            y(*b),
            COLOURS[0]
        );
        if let Some(label) = labels.get(i) {
            let _ = write!(
                svg,
                "<text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
                x(*a) + 6.0,
                y(*b) + 4.0,
                escape(label)
            );
        }
    }
    let _ = write!(
        svg,
        "<text x=\"{pad}\" y=\"{:.0}\">0</text><text x=\"{:.0}\" y=\"{:.0}\" text-anchor=\"end\">1</text><text x=\"{:.0}\" y=\"{:.0}\" text-anchor=\"middle\">{}</text><text x=\"4\" y=\"4\" dominant-baseline=\"hanging\">{}</text></svg>",
        size - pad + 14.0,
        size - pad,
        size - pad + 14.0,
        size / 2.0,
        size - 6.0,
        escape(x_label),
        escape(y_label)
    );
    svg
}

/// A matrix of p-values, one cell per pair of `names` (`p(i, j)`, `None` on the diagonal or
/// for a pair not tested): dark where p < `alpha`, the value printed in each cell.
#[must_use]
pub fn p_matrix(names: &[String], p: impl Fn(usize, usize) -> Option<f64>, alpha: f64) -> String {
    let (cell, label) = (44.0, 130.0);
    let n = names.len() as f64;
    let mut svg = svg_open(label + n * cell + 10.0, label + n * cell + 10.0);
    for (i, name) in names.iter().enumerate() {
        let at = label + (i as f64 + 0.5) * cell;
        let _ = write!(
            svg,
            "<text x=\"{:.0}\" y=\"{at:.1}\" text-anchor=\"end\" dominant-baseline=\"middle\">{1}</text><text transform=\"translate({at:.1},{2:.0}) rotate(-90)\" dominant-baseline=\"middle\">{1}</text>",
            label - 6.0,
            escape(&truncate(name, 18)),
            label - 6.0
        );
        for j in 0..names.len() {
            let (fill, text) = match p(i, j) {
                Some(v) if v < alpha => (
                    "#3b6ea8",
                    format!(
                        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" dominant-baseline=\"middle\" style=\"fill:#fff\">{v:.3}</text>",
                        label + (j as f64 + 0.5) * cell,
                        at
                    ),
                ),
                Some(v) => (
                    "#e6eaee",
                    format!(
                        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" dominant-baseline=\"middle\">{v:.3}</text>",
                        label + (j as f64 + 0.5) * cell,
                        at
                    ),
                ),
                None => ("#ffffff", String::new()),
            };
            let _ = write!(
                svg,
                "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{cell}\" height=\"{cell}\" fill=\"{fill}\" stroke=\"#fff\"/>{text}",
                label + j as f64 * cell,
                label + i as f64 * cell
            );
        }
    }
    svg.push_str("</svg>");
    svg
}

/// `text` cut to `max` characters, with an ellipsis when cut.
fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_owned()
    } else {
        format!("{}…", text.chars().take(max - 1).collect::<String>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_forbids_loads() {
        assert_eq!(
            escape("<script>\"x\" & 'y'</script>"),
            "&lt;script&gt;&quot;x&quot; &amp; &#39;y&#39;&lt;/script&gt;"
        );
        let mut page = Page::new("a <b>");
        page.table(&["id"], &[vec!["<img src=x onerror=alert(1)>".to_owned()]]);
        page.raw(&histogram(&[("<1>".to_owned(), 3)]));
        let html = page.finish();
        assert!(!html.contains("<img") && !html.contains("<b>") && !html.contains("<1>"), "{html}");
        assert!(html.contains("default-src 'none'"));
        assert!(!html.contains("http://") && !html.contains("https://"));
    }

    #[test]
    fn a_scatter_clips_to_its_frame_and_escapes_its_labels() {
        let svg = scatter(&[(0.0, 1.0), (1.5, -0.2)], &["<a>".to_owned(), "b".to_owned()], "x", "y");
        // 300 × 300 with a 40 margin: (0, 1) at (40, 40), (1.5, −0.2) clipped to (260, 260).
        assert!(
            svg.contains("cx=\"40.0\" cy=\"40.0\"") && svg.contains("cx=\"260.0\" cy=\"260.0\""),
            "{svg}"
        );
        assert!(svg.contains("x1=\"40.0\" y1=\"260.0\" x2=\"260.0\" y2=\"40.0\""), "the diagonal: {svg}");
        assert!(svg.contains("&lt;a&gt;") && !svg.contains("<a>"), "{svg}");
    }

    #[test]
    fn a_p_matrix_darkens_the_significant_cells_only() {
        let names = vec!["a".to_owned(), "b".to_owned(), "<c>".to_owned()];
        let p = |i: usize, j: usize| (i != j).then(|| if i + j == 1 { 0.01 } else { 0.4 });
        let svg = p_matrix(&names, p, 0.05);
        assert_eq!(svg.matches("fill=\"#3b6ea8\"").count(), 2, "a–b both ways: {svg}");
        assert_eq!(svg.matches("fill=\"#e6eaee\"").count(), 4, "{svg}");
        assert_eq!(svg.matches(">0.010<").count(), 2);
        assert!(svg.contains("&lt;c&gt;") && !svg.contains("<c>"));
        assert_eq!(truncate("abcdefghij", 4), "abc…");
    }

    #[test]
    fn twenty_series_get_twenty_colours_and_charts_scale_to_the_page() {
        let colours: std::collections::HashSet<String> = (0..20).map(colour).collect();
        assert_eq!(colours.len(), 20);
        let series: Vec<String> = (0..20).map(|i| format!("run{i}")).collect();
        let bars = vec![Bar { value: 0.5, interval: Some((-0.2, 1.3)) }; 20];
        let svg = grouped_bars(&[("ndcg@10".to_owned(), bars)], &series);
        assert!(svg.starts_with("<svg viewBox=\"0 0 ") && svg.contains("width=\"100%\""), "{svg}");
        // The interval is drawn within the axis: from y(1) = 10 to y(0) = 180.
        assert!(svg.contains("y1=\"180.0\" y2=\"10.0\""), "{svg}");
    }
}
