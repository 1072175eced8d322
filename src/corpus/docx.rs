//! Word files (`.docx`): the paragraphs of `word/document.xml` (read with `zip` and
//! `roxmltree`) as Markdown, a paragraph in a `Heading N` or `Title` style becoming a heading,
//! so chunks split at the document's sections and keep their heading. Tables give one line per
//! cell paragraph; footnotes, comments and headers are left out.

use super::Extracted;
use std::fmt::Write as _;
use std::io::Read as _;

/// WordprocessingML's namespace.
const W: &str = "http://schemas.openxmlformats.org/wordprocessingml/2006/main";
/// The largest `word/document.xml` read (a zip bomb stops here).
const MAX_XML: u64 = 256 << 20;

/// The text of a `.docx` file.
///
/// # Errors
/// Why it cannot be read: not a zip, no `word/document.xml`, invalid XML, no text.
pub fn to_text(bytes: &[u8]) -> Result<Extracted, String> {
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(bytes))
        .map_err(|e| format!("not a .docx file (a zip archive): {e}"))?;
    let mut entry = archive
        .by_name("word/document.xml")
        .map_err(|e| format!("not a Word document: word/document.xml: {e}"))?;
    if entry.encrypted() {
        return Err("encrypted .docx: save it without a password first".to_owned());
    }
    let mut xml = String::new();
    entry.by_ref().take(MAX_XML).read_to_string(&mut xml).map_err(|e| format!("word/document.xml: {e}"))?;
    let document = roxmltree::Document::parse(&xml).map_err(|e| format!("word/document.xml: {e}"))?;
    let (mut text, mut title) = (String::new(), None);
    for paragraph in document.descendants().filter(|n| n.has_tag_name((W, "p"))) {
        let words = paragraph_text(paragraph);
        if words.trim().is_empty() {
            continue;
        }
        match heading_level(paragraph) {
            Some(level) => {
                title.get_or_insert_with(|| words.trim().to_owned());
                let _ = write!(text, "{} {}\n\n", "#".repeat(level), words.trim());
            }
            None => {
                let _ = write!(text, "{}\n\n", words.trim_end());
            }
        }
    }
    if text.trim().is_empty() {
        return Err("no text in word/document.xml".to_owned());
    }
    Ok(Extracted { title, text: text.trim_end().to_owned() })
}

/// The paragraph's runs of text, tabs and line breaks, in order.
fn paragraph_text(paragraph: roxmltree::Node<'_, '_>) -> String {
    let mut out = String::new();
    for node in paragraph.descendants() {
        match node.tag_name().name() {
            _ if node.tag_name().namespace() != Some(W) => {}
            "t" => out.push_str(node.text().unwrap_or_default()),
            "tab" => out.push('\t'),
            "br" | "cr" => out.push('\n'),
            _ => {}
        }
    }
    out
}

/// The Markdown heading level of a paragraph in a `Title` (1) or `Heading N` (N + 1, at most 6)
/// style; `None` for body text.
fn heading_level(paragraph: roxmltree::Node<'_, '_>) -> Option<usize> {
    let style = paragraph
        .children()
        .find(|n| n.has_tag_name((W, "pPr")))?
        .children()
        .find(|n| n.has_tag_name((W, "pStyle")))?
        .attribute((W, "val"))?
        .to_ascii_lowercase();
    if style == "title" {
        return Some(1);
    }
    let level: usize = style.strip_prefix("heading")?.trim().parse().ok()?;
    Some((level + 1).min(6))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headings_become_markdown_and_garbage_is_an_error() {
        let xml = format!(
            r#"<w:document xmlns:w="{W}"><w:body>
            <w:p><w:pPr><w:pStyle w:val="Heading1"/></w:pPr><w:r><w:t>Keys</w:t></w:r></w:p>
            <w:p><w:r><w:t xml:space="preserve">Rotate </w:t></w:r><w:r><w:t>them.</w:t></w:r></w:p>
            <w:p/></w:body></w:document>"#
        );
        let doc = roxmltree::Document::parse(&xml).unwrap_or_else(|e| panic!("{e}"));
        let paragraphs: Vec<_> = doc.descendants().filter(|n| n.has_tag_name((W, "p"))).collect();
        assert_eq!(heading_level(paragraphs[0]), Some(2));
        assert_eq!(paragraph_text(paragraphs[1]), "Rotate them.");
        assert_eq!(heading_level(paragraphs[1]), None);
        let err = to_text(b"PK\x03\x04 not really").err().unwrap_or_default();
        assert!(err.starts_with("not a .docx file"), "{err}");
    }
}
