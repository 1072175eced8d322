//! Reduces an HTML page to text: headings, paragraphs and lists survive, scripts, styles and
//! navigation do not.

use scraper::{ElementRef, Html, Node};

/// Elements whose content is never text of the page.
const SKIPPED: &[&str] = &[
    "script", "style", "noscript", "template", "nav", "header", "footer", "aside", "form", "svg", "iframe",
    "head",
];

/// Elements that end a line of text.
const BLOCKS: &[&str] = &[
    "p",
    "div",
    "section",
    "article",
    "main",
    "li",
    "ul",
    "ol",
    "table",
    "tr",
    "pre",
    "blockquote",
    "br",
    "dd",
    "dt",
    "dl",
    "figure",
    "figcaption",
    "hr",
];

/// The text of a page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// `<title>`, else the first `<h1>`.
    pub title: Option<String>,
    /// Text with Markdown-style `#` headings and blank lines between blocks.
    pub text: String,
}

/// Converts an HTML document to text.
#[must_use]
pub fn to_text(html: &str) -> Page {
    let doc = Html::parse_document(html);
    let mut text = String::new();
    walk(doc.root_element(), &mut text);
    let title = first_text(&doc, "title").or_else(|| first_text(&doc, "h1"));
    Page { title, text: tidy(&text) }
}

fn walk(element: ElementRef<'_>, out: &mut String) {
    for child in element.children() {
        match child.value() {
            Node::Text(t) => out.push_str(&t.replace(char::is_whitespace, " ")),
            Node::Element(e) => {
                let name = e.name();
                if SKIPPED.contains(&name) {
                    continue;
                }
                let Some(child) = ElementRef::wrap(child) else { continue };
                if let Some(level) = heading_level(name) {
                    out.push_str("\n\n");
                    out.push_str(&"#".repeat(level));
                    out.push(' ');
                    walk(child, out);
                    out.push_str("\n\n");
                } else if BLOCKS.contains(&name) {
                    out.push_str("\n\n");
                    walk(child, out);
                    out.push_str("\n\n");
                } else {
                    walk(child, out);
                }
            }
            _ => {}
        }
    }
}

fn heading_level(name: &str) -> Option<usize> {
    match name.as_bytes() {
        [b'h', d @ b'1'..=b'6'] => Some(usize::from(d - b'0')),
        _ => None,
    }
}

fn first_text(doc: &Html, tag: &str) -> Option<String> {
    let selector = scraper::Selector::parse(tag).ok()?;
    let element = doc.select(&selector).next()?;
    let text = element.text().collect::<String>();
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    (!text.is_empty()).then_some(text)
}

/// Collapses runs of spaces within lines and runs of blank lines between blocks.
fn tidy(raw: &str) -> String {
    let lines: Vec<String> =
        raw.lines().map(|l| l.split_whitespace().collect::<Vec<_>>().join(" ")).collect();
    let mut out = String::new();
    for block in lines.split(String::is_empty).filter(|b| !b.is_empty()) {
        if !out.is_empty() {
            out.push_str("\n\n");
        }
        out.push_str(&block.join("\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_structure_and_drops_chrome() {
        let page = to_text(
            "<html><head><title> Plans </title><style>p{}</style></head><body>\
             <nav><a href='/'>Home</a></nav><h1>Plans</h1><p>Team   has <b>2 TB</b>.</p>\
             <script>track()</script><ul><li>One</li><li>Two</li></ul><footer>(c)</footer></body></html>",
        );
        assert_eq!(page.title.as_deref(), Some("Plans"));
        assert_eq!(page.text, "# Plans\n\nTeam has 2 TB.\n\nOne\n\nTwo");
    }

    #[test]
    fn title_falls_back_to_h1() {
        assert_eq!(to_text("<h1>Only</h1><p>x</p>").title.as_deref(), Some("Only"));
    }
}
