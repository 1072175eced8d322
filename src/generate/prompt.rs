//! Prompt templates: loaded from `prompts/` (or `--prompts DIR`), checked for unknown
//! placeholders, rendered with `{{name}}` substitution. The bundled copies are compiled in from
//! the same files, so the binary works outside the source tree.

use crate::error::{Error, Result};
use crate::record::QueryType;
use crate::text::Language;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Files of the bundled prompt set, by relative path.
const BUNDLED: &[(&str, &str)] = &[
    ("system.md", include_str!("../../prompts/system.md")),
    ("schema.json", include_str!("../../prompts/schema.json")),
    ("preflight.md", include_str!("../../prompts/preflight.md")),
    ("judge_schema.json", include_str!("../../prompts/judge_schema.json")),
    ("en/judge.md", include_str!("../../prompts/en/judge.md")),
    ("en/judge_repair.md", include_str!("../../prompts/en/judge_repair.md")),
    ("zh/judge.md", include_str!("../../prompts/zh/judge.md")),
    ("zh/judge_repair.md", include_str!("../../prompts/zh/judge_repair.md")),
    ("en/passage.md", include_str!("../../prompts/en/passage.md")),
    ("en/request.md", include_str!("../../prompts/en/request.md")),
    ("en/direct.md", include_str!("../../prompts/en/direct.md")),
    ("en/paraphrase.md", include_str!("../../prompts/en/paraphrase.md")),
    ("en/multi_hop.md", include_str!("../../prompts/en/multi_hop.md")),
    ("en/no_answer.md", include_str!("../../prompts/en/no_answer.md")),
    ("en/repair.md", include_str!("../../prompts/en/repair.md")),
    ("en/styles.md", include_str!("../../prompts/en/styles.md")),
    ("zh/passage.md", include_str!("../../prompts/zh/passage.md")),
    ("zh/request.md", include_str!("../../prompts/zh/request.md")),
    ("zh/direct.md", include_str!("../../prompts/zh/direct.md")),
    ("zh/paraphrase.md", include_str!("../../prompts/zh/paraphrase.md")),
    ("zh/multi_hop.md", include_str!("../../prompts/zh/multi_hop.md")),
    ("zh/no_answer.md", include_str!("../../prompts/zh/no_answer.md")),
    ("zh/repair.md", include_str!("../../prompts/zh/repair.md")),
    ("zh/styles.md", include_str!("../../prompts/zh/styles.md")),
];

/// One template and the placeholders it may use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    name: String,
    text: String,
}

impl Template {
    /// A template that may use the placeholders `allowed` and must use those in `required`.
    fn new(name: String, text: String, allowed: &[&str], required: &[&str]) -> Result<Self> {
        let template = Self { name, text };
        let values: Vec<(&str, &str)> = allowed.iter().map(|a| (*a, "")).collect();
        template.render(&values)?;
        let marked: Vec<(&str, &str)> = allowed.iter().map(|a| (*a, "\u{1}")).collect();
        for name in required {
            let only: Vec<(&str, &str)> =
                marked.iter().map(|(n, v)| (*n, if n == name { *v } else { "" })).collect();
            if !template.render(&only)?.contains('\u{1}') {
                return Err(template.error(format!("must contain {{{{{name}}}}}")));
            }
        }
        Ok(template)
    }

    /// Fills in `{{name}}` placeholders.
    ///
    /// # Errors
    /// [`Error::Prompt`] naming a placeholder that has no value.
    pub fn render(&self, values: &[(&str, &str)]) -> Result<String> {
        let mut out = String::with_capacity(self.text.len());
        let mut rest = self.text.as_str();
        while let Some(start) = rest.find("{{") {
            out.push_str(&rest[..start]);
            let after = &rest[start + 2..];
            let end = after.find("}}").ok_or_else(|| self.error("a '{{' is never closed".to_owned()))?;
            let name = after[..end].trim();
            let value = values
                .iter()
                .find(|(n, _)| *n == name)
                .ok_or_else(|| self.error(format!("unknown placeholder {{{{{name}}}}}")))?;
            out.push_str(value.1);
            rest = &after[end + 2..];
        }
        out.push_str(rest);
        Ok(out)
    }

    fn error(&self, message: String) -> Error {
        Error::Prompt { path: PathBuf::from(&self.name), message }
    }

    /// The template text.
    #[must_use]
    pub fn text(&self) -> &str {
        &self.text
    }
}

/// The effective prompt set for one language.
#[derive(Debug, Clone)]
pub struct Prompts {
    /// Where the templates came from (`bundled` or a folder).
    pub source: String,
    /// The language queries are written in.
    pub language: Language,
    /// System message.
    pub system: Template,
    /// JSON schema for `response_format`.
    pub schema: serde_json::Value,
    /// The preflight call.
    pub preflight: Template,
    /// The judge's message: one query and one chunk.
    pub judge: Template,
    /// JSON schema of the judge's reply.
    pub judge_schema: serde_json::Value,
    /// The re-ask after an unusable grade.
    pub judge_repair: Template,
    /// One passage.
    pub passage: Template,
    /// The user message.
    pub request: Template,
    /// One task line per type.
    pub tasks: BTreeMap<QueryType, Template>,
    /// The re-ask after an unusable reply.
    pub repair: Template,
    /// Query styles: name → description.
    pub styles: BTreeMap<String, String>,
}

impl Prompts {
    /// Loads the prompt set for `language` from `dir`, or the bundled one.
    ///
    /// # Errors
    /// [`Error::Prompt`] for a missing file, an unknown placeholder or an invalid schema.
    pub fn load(dir: Option<&Path>, language: Language) -> Result<Self> {
        let read = |name: &str| -> Result<(String, String)> {
            match dir {
                Some(dir) => {
                    let path = dir.join(name);
                    let text = fs_err::read_to_string(&path)
                        .map_err(|e| Error::Prompt { path: path.clone(), message: e.to_string() })?;
                    Ok((path.display().to_string(), text))
                }
                None => BUNDLED
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(n, t)| (format!("bundled {n}"), (*t).to_owned()))
                    .ok_or_else(|| Error::Prompt { path: name.into(), message: "not bundled".to_owned() }),
            }
        };
        let template = |name: &str, allowed: &[&str], required: &[&str]| -> Result<Template> {
            let (path, text) = read(name)?;
            Template::new(path, text, allowed, required)
        };
        let lang = language.code();
        let schema = |name: &str| -> Result<serde_json::Value> {
            let (path, text) = read(name)?;
            serde_json::from_str(&text)
                .map_err(|e| Error::Prompt { path: path.into(), message: format!("invalid JSON: {e}") })
        };
        let task_fields = ["count", "style", "style_description"];
        let mut tasks = BTreeMap::new();
        for &t in QueryType::ALL {
            tasks.insert(t, template(&format!("{lang}/{}.md", t.label()), &task_fields, &["count"])?);
        }
        let (_, styles_text) = read(&format!("{lang}/styles.md"))?;
        Ok(Self {
            source: dir.map_or_else(|| "bundled".to_owned(), |d| d.display().to_string()),
            language,
            system: template("system.md", &["language"], &[])?,
            schema: schema("schema.json")?,
            judge_schema: schema("judge_schema.json")?,
            judge: template(&format!("{lang}/judge.md"), &["query", "title", "text"], &["query", "text"])?,
            judge_repair: template(&format!("{lang}/judge_repair.md"), &["error"], &[])?,
            preflight: template("preflight.md", &[], &[])?,
            passage: template(&format!("{lang}/passage.md"), &["number", "title", "text"], &["text"])?,
            request: template(&format!("{lang}/request.md"), &["passages", "tasks"], &["passages", "tasks"])?,
            tasks,
            repair: template(&format!("{lang}/repair.md"), &["error"], &[])?,
            styles: parse_styles(&styles_text),
        })
    }

    /// Every template, for `--print-prompts`.
    #[must_use]
    pub fn listing(&self) -> String {
        let mut out = format!("# prompts from {} ({})\n", self.source, self.language.code());
        let mut section = |name: &str, text: &str| {
            let _ = write!(out, "\n## {name}\n\n{}\n", text.trim_end());
        };
        section("system", self.system.text());
        section("schema", &serde_json::to_string_pretty(&self.schema).unwrap_or_default());
        section("passage", self.passage.text());
        section("request", self.request.text());
        for (t, template) in &self.tasks {
            section(t.label(), template.text());
        }
        section("repair", self.repair.text());
        section("judge", self.judge.text());
        section("judge_repair", self.judge_repair.text());
        let styles: Vec<String> = self.styles.iter().map(|(n, d)| format!("{n}: {d}")).collect();
        section("styles", &styles.join("\n"));
        out
    }
}

/// `name: description` lines; `#` starts a comment.
fn parse_styles(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_once(':'))
        .map(|(n, d)| (n.trim().to_owned(), d.trim().to_owned()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_and_rejects_unknown_placeholders() {
        let t = Template::new("t".into(), "Hi {{ name }}, {{count}}!".into(), &["name", "count"], &["count"])
            .unwrap();
        assert_eq!(t.render(&[("name", "Ann"), ("count", "2")]).unwrap_or_default(), "Hi Ann, 2!");
        let bad = Template::new("bad.md".into(), "{{nmae}}".into(), &["name"], &[]);
        assert!(bad.is_err_and(|e| e.to_string().contains("unknown placeholder {{nmae}}")));
        let open = Template::new("open.md".into(), "{{name".into(), &["name"], &[]);
        assert!(open.is_err());
        let missing =
            Template::new("passage.md".into(), "Passage {{number}}".into(), &["number", "text"], &["text"]);
        assert!(missing.is_err_and(|e| e.to_string().contains("must contain {{text}}")));
    }

    #[test]
    fn bundled_prompts_load_for_both_languages() {
        for language in [Language::En, Language::Zh] {
            let prompts = Prompts::load(None, language).unwrap();
            assert_eq!(prompts.tasks.len(), 4);
            assert!(prompts.styles.contains_key("keyword"), "{:?}", prompts.styles);
            assert!(prompts.listing().contains("## multi_hop"));
        }
    }

    #[test]
    fn a_prompt_folder_overrides_the_bundle() {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in BUNDLED {
            let path = dir.path().join(name);
            fs_err::create_dir_all(path.parent().unwrap_or(dir.path())).unwrap_or_default();
            fs_err::write(path, text).unwrap_or_default();
        }
        fs_err::write(dir.path().join("en/direct.md"), "Ask {{count}} {{oops}}").unwrap_or_default();
        let err =
            Prompts::load(Some(dir.path()), Language::En).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("direct.md") && err.contains("{{oops}}"), "{err}");
        fs_err::write(dir.path().join("en/direct.md"), "Ask {{count}} ({{style}})").unwrap_or_default();
        let prompts = Prompts::load(Some(dir.path()), Language::En).unwrap();
        assert_eq!(prompts.tasks[&QueryType::Direct].text(), "Ask {{count}} ({{style}})");
    }
}
