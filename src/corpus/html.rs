//! Reduces an HTML page to text: headings, paragraphs, lists, tables and preformatted blocks
//! survive; scripts, styles, forms and navigation do not. `header`/`footer` are page chrome only
//! outside `main`, `article` and `section`.

use scraper::{ElementRef, Html, Node};

/// Elements whose content is never text of the page.
const SKIPPED: &[&str] =
    &["script", "style", "noscript", "template", "nav", "aside", "form", "svg", "iframe", "head", "button"];

/// Elements that are chrome when they are not inside the page's content.
const CHROME: &[&str] = &["header", "footer"];

/// Elements holding the page's content.
const CONTENT: &[&str] = &["main", "article", "section"];

/// ARIA roles of navigation and chrome.
const SKIPPED_ROLES: &[&str] = &["navigation", "banner", "contentinfo", "search", "complementary"];

/// Elements that end a line of text.
const BLOCKS: &[&str] = &[
    "p",
    "div",
    "section",
    "article",
    "main",
    "header",
    "footer",
    "li",
    "ul",
    "ol",
    "table",
    "tr",
    "td",
    "th",
    "caption",
    "pre",
    "blockquote",
    "br",
    "dd",
    "dt",
    "dl",
    "figure",
    "figcaption",
    "hr",
    "details",
    "summary",
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
    walk(doc.root_element(), Context::default(), &mut text);
    let title = first_text(&doc, "title").or_else(|| first_text(&doc, "h1"));
    Page { title, text: tidy(&text) }
}

/// Where in the page the walk is.
#[derive(Debug, Clone, Copy, Default)]
struct Context {
    in_content: bool,
    in_pre: bool,
}

fn walk(element: ElementRef<'_>, context: Context, out: &mut String) {
    for child in element.children() {
        match child.value() {
            Node::Text(t) if context.in_pre => out.push_str(t),
            Node::Text(t) => out.push_str(&t.replace(char::is_whitespace, " ")),
            Node::Element(e) => {
                let Some(child) = ElementRef::wrap(child) else { continue };
                let name = e.name();
                let role = e.attr("role").unwrap_or_default();
                let chrome = CHROME.contains(&name) && !context.in_content;
                if SKIPPED.contains(&name) || SKIPPED_ROLES.contains(&role) || chrome {
                    continue;
                }
                let inner = Context {
                    in_content: context.in_content || CONTENT.contains(&name),
                    in_pre: context.in_pre || name == "pre",
                };
                let (before, after) = if let Some(level) = heading_level(name) {
                    (format!("\n\n{} ", "#".repeat(level)), "\n\n")
                } else if name == "pre" {
                    ("\n\n```\n".to_owned(), "\n```\n\n")
                } else if BLOCKS.contains(&name) {
                    ("\n\n".to_owned(), "\n\n")
                } else {
                    // Inline elements: keep neighbouring words apart ("Home" "Menu").
                    (" ".to_owned(), " ")
                };
                out.push_str(&before);
                walk(child, inner, out);
                out.push_str(after);
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

/// Collapses runs of spaces within lines (outside code fences), drops the space an inline
/// element left before punctuation, and collapses runs of blank lines between blocks.
fn tidy(raw: &str) -> String {
    let mut lines: Vec<String> = Vec::new();
    let mut in_fence = false;
    for line in raw.lines() {
        let trimmed = line.trim();
        if trimmed == "```" {
            in_fence = !in_fence;
            lines.push(trimmed.to_owned());
        } else if in_fence {
            lines.push(line.trim_end().to_owned());
        } else {
            let words = trimmed.split_whitespace().collect::<Vec<_>>().join(" ");
            lines.push(close_punctuation(&words));
        }
    }
    let mut out = String::new();
    for block in lines.split(String::is_empty).filter(|b| !b.is_empty()) {
        if !out.is_empty() {
            out.push_str("\n\n");
        }
        out.push_str(&block.join("\n"));
    }
    out
}

fn close_punctuation(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    for c in line.chars() {
        if matches!(c, '.' | ',' | ';' | ':' | '!' | '?' | ')') && out.ends_with(' ') {
            out.pop();
        }
        out.push(c);
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
             <header><a href='/'>Home</a><a href='/m'>Menu</a></header>\
             <nav><a href='/'>Home</a></nav><div role='navigation'>Skip</div>\
             <h1>Plans</h1><p>Team   has <b>2 TB</b>, see <a href='x'>pricing</a>.</p>\
             <script>track()</script><ul><li>One</li><li>Two</li></ul><footer>(c)</footer></body></html>",
        );
        assert_eq!(page.title.as_deref(), Some("Plans"));
        assert_eq!(page.text, "# Plans\n\nTeam has 2 TB, see pricing.\n\nOne\n\nTwo");
    }

    #[test]
    fn keeps_article_headers_tables_and_preformatted_text() {
        let page = to_text(
            "<body><article><header><h1>Storage plans overview</h1></header>\
             <table><tr><th>Plan</th><th>Storage</th></tr><tr><td>Team</td><td>2 TB</td></tr></table>\
             <pre>harbor sync --pause\n  --for 2h</pre></article></body>",
        );
        assert_eq!(
            page.text,
            "# Storage plans overview\n\nPlan\n\nStorage\n\nTeam\n\n2 TB\n\n```\nharbor sync --pause\n  --for 2h\n```"
        );
    }

    #[test]
    fn title_falls_back_to_h1() {
        assert_eq!(to_text("<h1>Only</h1><p>x</p>").title.as_deref(), Some("Only"));
    }
}
