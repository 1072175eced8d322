//! Text helpers shared by stages: the language of a text (by script) and the normalisation
//! used to match evidence quotes against chunks.

use serde::{Deserialize, Serialize};
use unicode_normalization::UnicodeNormalization;

/// The languages qrelgen writes queries in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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

    /// The language of `text`, by the share of CJK characters among its letters.
    #[must_use]
    pub fn detect(text: &str) -> Self {
        if cjk_share(text) >= 0.3 { Self::Zh } else { Self::En }
    }

    /// Whether `text` looks written in this language: Chinese needs at least 30 % CJK letters,
    /// English at most 10 % (names and terms in the other script are fine).
    #[must_use]
    pub fn matches(self, text: &str) -> bool {
        let share = cjk_share(text);
        match self {
            Self::Zh => share >= 0.3,
            Self::En => share <= 0.1,
        }
    }
}

fn is_cjk(c: char) -> bool {
    matches!(c as u32, 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xF900..=0xFAFF | 0x20000..=0x2FA1F | 0x3040..=0x30FF)
}

/// Share of CJK characters among alphabetic characters (0 for a text without letters).
fn cjk_share(text: &str) -> f64 {
    let (mut letters, mut cjk) = (0usize, 0usize);
    for c in text.chars().filter(|c| c.is_alphabetic()) {
        letters += 1;
        cjk += usize::from(is_cjk(c));
    }
    if letters == 0 { 0.0 } else { cjk as f64 / letters as f64 }
}

/// Normalises text for quote matching: NFKC (full-width → half-width), lower case, one kind of
/// quote mark, dashes unified, whitespace collapsed.
#[must_use]
pub fn normalize_for_match(text: &str) -> String {
    let mapped = text.nfkc().flat_map(char::to_lowercase).map(|c| match c {
        '\u{2018}' | '\u{2019}' | '\u{201A}' | '\u{201B}' | '`' | '\u{00B4}' => '\'',
        '\u{201C}' | '\u{201D}' | '\u{201E}' | '\u{201F}' | '\u{00AB}' | '\u{00BB}' | '\u{300C}'
        | '\u{300D}' | '\u{300E}' | '\u{300F}' => '"',
        '\u{2010}'..='\u{2015}' | '\u{2212}' => '-',
        c => c,
    });
    let collected: String = mapped.collect();
    collected.split_whitespace().collect::<Vec<_>>().join(" ")
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
    }

    #[test]
    fn detects_and_checks_languages() {
        assert_eq!(Language::detect("How do I reset my password?"), Language::En);
        assert_eq!(Language::detect("如何重置 Harbor Sync 的密码？"), Language::Zh);
        assert!(Language::Zh.matches("如何配置 PostgreSQL 的复制？"));
        assert!(!Language::Zh.matches("How do I configure replication?"));
        assert!(Language::En.matches("What does apt-get do?"));
        assert!(!Language::En.matches("什么是 apt-get？"));
    }
}
