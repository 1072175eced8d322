//! Text helpers shared by stages: the language of a text (by script) and the normalisation
//! used to match evidence quotes against chunks.

use serde::{Deserialize, Serialize};
use unicode_normalization::UnicodeNormalization;

/// The languages qrelgen writes queries in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Language {
    /// English (or any Latin-script language).
    En,
    /// Chinese.
    Zh,
}

impl Language {
    /// `en` or `zh`: the prompt folder and the flag value.
    #[must_use]
    pub fn code(self) -> &'static str {
        match self {
            Self::En => "en",
            Self::Zh => "zh",
        }
    }

    /// The name given to the model.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::En => "English",
            Self::Zh => "Simplified Chinese (简体中文)",
        }
    }

    /// The language of `text`: Chinese when CJK characters make up at least 30 % of its
    /// units (see [`units`]).
    #[must_use]
    pub fn detect(text: &str) -> Self {
        let u = units(text);
        if u.cjk_share() >= 0.3 { Self::Zh } else { Self::En }
    }

    /// Whether `text` looks written in this language. Chinese: at least 20 % CJK units, so a
    /// query full of command names (`apt-get install 报错 dpkg lock`) passes. English: at least
    /// 80 % Latin words and no more than 10 % CJK (names from other scripts are fine, whole
    /// Cyrillic or Hangul queries are not).
    #[must_use]
    pub fn matches(self, text: &str) -> bool {
        let u = units(text);
        match self {
            Self::Zh => u.cjk_share() >= 0.2,
            // A text without letters (codes, numbers) shows no other language.
            Self::En => u.latin_words as f64 >= 0.8 * u.total() as f64 && u.cjk_share() <= 0.1,
        }
    }
}

/// Whether `c` is a CJK ideograph or kana (Chinese and Japanese script).
#[must_use]
pub fn is_cjk(c: char) -> bool {
    matches!(c as u32, 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xF900..=0xFAFF | 0x20000..=0x2FA1F | 0x3040..=0x30FF)
}

/// A text measured in comparable units: one per CJK character (a CJK character is about a
/// word), one per run of Latin letters, one per run of letters of other scripts.
#[derive(Debug, Default, Clone, Copy)]
struct Units {
    cjk: usize,
    latin_words: usize,
    other_words: usize,
}

impl Units {
    fn total(self) -> usize {
        self.cjk + self.latin_words + self.other_words
    }

    fn cjk_share(self) -> f64 {
        if self.total() == 0 { 0.0 } else { self.cjk as f64 / self.total() as f64 }
    }
}

fn units(text: &str) -> Units {
    let mut u = Units::default();
    let mut previous: Option<bool> = None; // Some(true) inside a Latin word, Some(false) another script
    for c in text.chars() {
        if is_cjk(c) {
            u.cjk += 1;
            previous = None;
        } else if c.is_alphabetic() {
            let latin = c.is_ascii_alphabetic() || matches!(c as u32, 0xC0..=0x24F);
            if previous != Some(latin) {
                if latin { u.latin_words += 1 } else { u.other_words += 1 }
            }
            previous = Some(latin);
        } else {
            previous = None;
        }
    }
    u
}

/// Normalises text for quote matching: NFKC (full-width → half-width), lower case, one kind of
/// quote mark, dashes unified, Markdown emphasis, code ticks and link targets dropped,
/// whitespace collapsed.
#[must_use]
pub fn normalize_for_match(text: &str) -> String {
    let text = drop_link_targets(text);
    let collected: String = fold_chars(text.nfkc());
    collected.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Lower case, one kind of quote mark, dashes unified, Markdown emphasis and code ticks dropped.
fn fold_chars(chars: impl Iterator<Item = char>) -> String {
    chars
        .flat_map(char::to_lowercase)
        .filter(|c| !matches!(c, '*' | '`' | '_' | '[' | ']'))
        .map(|c| match c {
            '\u{2018}' | '\u{2019}' | '\u{201A}' | '\u{201B}' | '\u{00B4}' => '\'',
            '\u{201C}' | '\u{201D}' | '\u{201E}' | '\u{201F}' | '\u{00AB}' | '\u{00BB}' | '\u{300C}'
            | '\u{300D}' | '\u{300E}' | '\u{300F}' => '"',
            '\u{2010}'..='\u{2015}' | '\u{2212}' => '-',
            c => c,
        })
        .collect()
}

/// Where `quote` occurs in `source`, as a byte range of `source`, matched after the folding of
/// [`normalize_for_match`] (character by character, so Markdown link targets are not dropped
/// here). `None` when it does not occur or is empty.
#[must_use]
pub fn find_quote(quote: &str, source: &str) -> Option<std::ops::Range<usize>> {
    let quote = normalize_for_match(quote);
    let quote = quote.trim_matches(|c: char| c == '"' || c == '\'' || c == '.' || c == ' ');
    if quote.is_empty() {
        return None;
    }
    // The folded source, and for each of its bytes the range of the source character it came from.
    let mut folded = String::with_capacity(source.len());
    let mut origin: Vec<std::ops::Range<usize>> = Vec::with_capacity(source.len());
    for (at, c) in source.char_indices() {
        let from = at..at + c.len_utf8();
        let piece = if c.is_whitespace() { " ".to_owned() } else { fold_chars(c.to_string().nfkc()) };
        for f in piece.chars() {
            if f == ' ' && (folded.is_empty() || folded.ends_with(' ')) {
                continue;
            }
            folded.push(f);
            origin.extend(std::iter::repeat_n(from.clone(), f.len_utf8()));
        }
    }
    let start = folded.find(quote)?;
    let end = start + quote.len() - 1;
    Some(origin[start].start..origin[end].end)
}

/// `[text](target)` → `[text]`.
fn drop_link_targets(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("](") {
        out.push_str(&rest[..=at]);
        match rest[at..].find(')') {
            Some(end) => rest = &rest[at + end + 1..],
            None => {
                rest = &rest[at + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// Whether `quote` occurs in `source` after [`normalize_for_match`] (an empty quote never does).
#[must_use]
pub fn quote_in(quote: &str, source: &str) -> bool {
    let quote = normalize_for_match(quote);
    let quote = quote.trim_matches(|c: char| c == '"' || c == '\'' || c == '.' || c == ' ');
    !quote.is_empty() && normalize_for_match(source).contains(quote)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn check_quote(quote: &str, source: &str, expected: bool) {
        assert_eq!(quote_in(quote, source), expected, "{quote:?} in {source:?}");
    }

    #[test]
    fn quotes_match_after_normalisation() {
        let source = "Links expire after 30 days.\nThe owner’s “recovery key” is printed once.";
        check_quote("links  EXPIRE after 30 days", source, true);
        check_quote("the owner's \"recovery key\"", source, true);
        check_quote("\"Links expire after 30 days.\"", source, true);
        check_quote("links expire after 31 days", source, false);
        check_quote("", source, false);
        check_quote("ＨＳ－４０１２", "error HS-4012 means", true);
        check_quote("配额已满", "当空间用完时，配额已满，同步会暂停。", true);
        check_quote("Team: events are kept for 90 days", "- **Team**: events are kept for 90 days.", true);
        check_quote("The catalog pg_default_acl stores", "The catalog `pg_default_acl` stores", true);
        check_quote(
            "see the release notes for details",
            "see the [release notes](https://x.example/n) for details",
            true,
        );
    }

    #[track_caller]
    fn check_find(quote: &str, source: &str, expected: Option<&str>) {
        assert_eq!(find_quote(quote, source).map(|r| &source[r]), expected, "{quote:?} in {source:?}");
    }

    #[test]
    fn quotes_are_found_in_the_original_text() {
        let source = "Links  expire\nafter **30 days**. The owner’s “recovery key” is printed once.";
        check_find("links expire after 30 days", source, Some("Links  expire\nafter **30 days"));
        check_find("\"the owner's recovery key\"", source, None);
        check_find("the owner's \"recovery key\"", source, Some("The owner’s “recovery key"));
        check_find("ＨＳ－４０１２", "error HS-4012 means", Some("HS-4012"));
        check_find("配额已满", "当空间用完时，配额已满，同步会暂停。", Some("配额已满"));
        check_find("", source, None);
        check_find("not there", source, None);
    }

    #[test]
    fn detects_and_checks_languages() {
        assert_eq!(Language::detect("How do I reset my password?"), Language::En);
        assert_eq!(Language::detect("如何重置 Harbor Sync 的密码？"), Language::Zh);
        assert!(Language::Zh.matches("如何配置 PostgreSQL 的复制？"));
        assert!(!Language::Zh.matches("How do I configure replication?"));
        assert!(Language::En.matches("What does apt-get do?"));
        assert!(!Language::En.matches("什么是 apt-get？"));
        for zh in [
            "apt-get install 报错 dpkg lock",
            "如何用 apt-get 安装 package",
            "怎么配置 sources.list 的 mirror",
        ] {
            assert!(Language::Zh.matches(zh), "{zh}");
            assert!(!Language::En.matches(zh), "{zh}");
        }
        assert!(!Language::En.matches("Как настроить репликацию?"));
        assert!(Language::En.matches("4012 5002"));
        assert!(!Language::Zh.matches("4012 5002"));
        assert!(!Language::En.matches("복제를 어떻게 설정하나요"));
    }
}
