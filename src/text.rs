//! Text helpers shared by stages: the language of a text (by script) and the normalisation
//! used to match evidence quotes against chunks.

use serde::{Deserialize, Serialize};
use std::ops::Range;
use unicode_normalization::char::{canonical_combining_class, decompose_compatible};
use unicode_normalization::{IsNormalized, UnicodeNormalization};

/// The languages qrelgen writes queries in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(strum::IntoStaticStr, strum::VariantArray)]
#[strum(serialize_all = "snake_case")]
pub enum Language {
    /// English (or any Latin-script language).
    En,
    /// Chinese.
    Zh,
}

impl Language {
    /// `en` or `zh`: the prompt folder and the flag value (serde's name).
    #[must_use]
    pub fn code(self) -> &'static str {
        self.into()
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
    /// units (see `units`).
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

/// `n` and the noun in the number it takes, for messages: `1 new query`, `2 new queries`.
#[must_use]
pub fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
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
    fold(text).text
}

/// Where `quote` occurs in `source`, as a byte range of `source`, matched after the folding of
/// [`normalize_for_match`]. `None` when it does not occur or is empty.
#[must_use]
pub fn find_quote(quote: &str, source: &str) -> Option<Range<usize>> {
    Quotable::new(source).find(quote)
}

/// A source folded once for quote matching, to look several quotes up in it.
pub struct Quotable(Folded);

impl Quotable {
    /// `source`, folded as [`normalize_for_match`] folds.
    #[must_use]
    pub fn new(source: &str) -> Self {
        Self(fold(source))
    }

    /// Where `quote` occurs in the source: see [`find_quote`].
    #[must_use]
    pub fn find(&self, quote: &str) -> Option<Range<usize>> {
        let quote = fold(quote).text;
        let quote = quote.trim_matches(|c: char| c == '"' || c == '\'' || c == '.' || c == ' ');
        if quote.is_empty() {
            return None;
        }
        let start = self.0.text.find(quote)?;
        let end = start + quote.len() - 1;
        Some(self.0.origin[start].start..self.0.origin[end].end)
    }

    /// Whether `quote` occurs in the source (an empty quote never does).
    #[must_use]
    pub fn holds(&self, quote: &str) -> bool {
        self.find(quote).is_some()
    }
}

/// A text folded for matching, and for each of its bytes the byte range of the text it came from.
struct Folded {
    text: String,
    origin: Vec<Range<usize>>,
}

/// The one folding pass behind every quote match. Markdown link targets are skipped, the rest is
/// cut into pieces NFKC cannot join across (a character that composes with nothing before it
/// starts a piece), each piece is normalised and folded by [`fold_char`], and whitespace is
/// collapsed: the same text as NFKC of the whole, with each byte traced to its piece.
fn fold(source: &str) -> Folded {
    let mut folded =
        Folded { text: String::with_capacity(source.len()), origin: Vec::with_capacity(source.len()) };
    let mut space = false;
    let mut emit = |piece: &[(usize, char)]| {
        let (Some(&(start, _)), Some(&(last, c))) = (piece.first(), piece.last()) else { return };
        let from = start..last + c.len_utf8();
        let mut push = |f: char| {
            if f.is_whitespace() {
                space = true;
                return;
            }
            if std::mem::take(&mut space) && !folded.text.is_empty() {
                folded.text.push(' ');
                folded.origin.push(from.clone());
            }
            folded.text.push(f);
            folded.origin.extend(std::iter::repeat_n(from.clone(), f.len_utf8()));
        };
        match piece {
            [(_, c)] if c.is_ascii() => fold_char(*c, &mut push),
            _ => piece.iter().map(|&(_, c)| c).nfkc().for_each(|c| fold_char(c, &mut push)),
        }
    };
    let mut piece: Vec<(usize, char)> = Vec::new();
    for (at, c) in without_link_targets(source) {
        if starts_piece(c) {
            emit(&piece);
            piece.clear();
        }
        piece.push((at, c));
    }
    emit(&piece);
    folded
}

/// Whether a text can be cut before `c` and the pieces normalised on their own: NFKC turns `c`
/// into characters that start with one that never composes with, nor is reordered around, what
/// comes before it.
fn starts_piece(c: char) -> bool {
    let mut first = None;
    decompose_compatible(c, |d| {
        first.get_or_insert(d);
    });
    c.is_ascii()
        || first.is_some_and(|d| {
            canonical_combining_class(d) == 0
                && unicode_normalization::is_nfkc_quick(std::iter::once(d)) == IsNormalized::Yes
        })
}

/// The characters of `text` with their byte offsets, Markdown link targets left out:
/// `[text](target)` → `[text]`.
fn without_link_targets(text: &str) -> impl Iterator<Item = (usize, char)> + '_ {
    let mut skip_to = 0;
    text.char_indices().filter(move |&(at, c)| {
        if at < skip_to {
            return false;
        }
        if c == ']'
            && text[at + 1..].starts_with('(')
            && let Some(end) = text[at..].find(')')
        {
            skip_to = at + end + 1;
        }
        true
    })
}

/// Folds one normalised character: lower case, one kind of quote mark, dashes unified, Markdown
/// emphasis, code ticks and brackets dropped.
fn fold_char(c: char, out: &mut impl FnMut(char)) {
    for c in c.to_lowercase() {
        match c {
            '*' | '`' | '_' | '[' | ']' => {}
            '\u{2018}' | '\u{2019}' | '\u{201A}' | '\u{201B}' | '\u{00B4}' => out('\''),
            '\u{201C}' | '\u{201D}' | '\u{201E}' | '\u{201F}' | '\u{00AB}' | '\u{00BB}' | '\u{300C}'
            | '\u{300D}' | '\u{300E}' | '\u{300F}' => out('"'),
            '\u{2010}'..='\u{2015}' | '\u{2212}' => out('-'),
            c => out(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_take_the_noun_in_their_number() {
        assert_eq!(count(1, "new query", "new queries"), "1 new query");
        assert_eq!(count(0, "new query", "new queries"), "0 new queries");
        assert_eq!(count(2, "new query", "new queries"), "2 new queries");
    }
    use proptest::prelude::*;

    #[test]
    fn language_codes_are_the_names_serde_writes() {
        crate::testing::labels_are_serde_names(Language::code);
        assert_eq!(Language::Zh.code(), "zh");
    }

    #[track_caller]
    fn check_quote(quote: &str, source: &str, expected: bool) {
        assert_eq!(Quotable::new(source).holds(quote), expected, "{quote:?} in {source:?}");
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

    /// The folding as it was defined before the single pass: link targets dropped from the whole
    /// text, then NFKC of the whole, then each character folded. The reference the pass must equal.
    fn reference_fold(text: &str) -> String {
        let mut dropped = String::new();
        let mut rest = text;
        while let Some(at) = rest.find("](") {
            dropped.push_str(&rest[..=at]);
            match rest[at..].find(')') {
                Some(end) => rest = &rest[at + end + 1..],
                None => rest = &rest[at + 1..],
            }
        }
        dropped.push_str(rest);
        let mut folded = String::new();
        dropped.nfkc().for_each(|c| fold_char(c, &mut |f| folded.push(f)));
        folded.split_whitespace().collect::<Vec<_>>().join(" ")
    }

    #[test]
    fn both_matchers_agree_on_link_targets_and_composed_characters() {
        let linked = "see the [release notes](https://x.example/n) for details";
        check_find(
            "the release notes for details",
            linked,
            Some("the [release notes](https://x.example/n) for details"),
        );
        // "e" + combining acute in the source, "é" in the quote: NFKC makes them one.
        check_find("café opens", "the cafe\u{301} opens at nine", Some("cafe\u{301} opens"));
        check_quote("café opens", "the cafe\u{301} opens at nine", true);
        // A full-width comma after a quote is not part of what is found.
        check_find("配额已满", "配额已满，同步会暂停", Some("配额已满"));
    }

    /// Text built from the pieces the folding treats specially.
    fn tricky_text() -> impl Strategy<Value = String> {
        let pieces = prop::sample::select(vec![
            "a",
            "B",
            "e",
            "\u{301}",
            "\u{e9}",
            "Ｈ",
            "ｓ",
            "-",
            "\u{2013}",
            "\u{2019}",
            "'",
            "\"",
            "\u{201c}",
            "*",
            "`",
            "_",
            "[",
            "]",
            "](",
            "(",
            ")",
            "x.example",
            " ",
            "\n",
            "\t",
            ".",
            "配",
            "额",
            "\u{a8}",
            "\u{fb01}",
            "\u{130}",
            "\u{f73}",
            "\u{1100}",
            "\u{1161}",
        ]);
        prop::collection::vec(pieces, 0..24).prop_map(|p| p.concat())
    }

    proptest! {
        #[test]
        fn one_folded_source_finds_each_piece_as_a_fold_of_its_own_does(source in tricky_text(), cuts in prop::collection::vec((0usize..40, 0usize..40), 1..6)) {
            let folded = normalize_for_match(&source);
            let bounds: Vec<usize> = folded.char_indices().map(|(i, _)| i).chain([folded.len()]).collect();
            let quotable = Quotable::new(&source);
            for (a, b) in cuts {
                let (a, b) = (bounds[a % bounds.len()], bounds[b % bounds.len()]);
                let quote = &folded[a.min(b)..a.max(b)];
                prop_assert_eq!(quotable.find(quote), find_quote(quote, &source), "{:?} in {:?}", quote, source);
            }
        }

        #[test]
        fn a_piece_of_the_source_is_found_where_it_folds_the_same(source in tricky_text(), a in 0usize..40, b in 0usize..40) {
            let bounds: Vec<usize> = source.char_indices().map(|(i, _)| i).chain([source.len()]).collect();
            let (a, b) = (bounds[a % bounds.len()], bounds[b % bounds.len()]);
            let piece = &source[a.min(b)..a.max(b)];
            if let Some(range) = find_quote(piece, &source) {
                // What was found folds to text that holds the piece, folded.
                let found = normalize_for_match(&source[range]);
                let wanted = normalize_for_match(piece);
                prop_assert!(found.contains(wanted.trim_matches(|c: char| c == '"' || c == '\'' || c == '.' || c == ' ')));
            }
        }

        #[test]
        fn folding_is_nfkc_of_the_whole_text(text in tricky_text()) {
            prop_assert_eq!(normalize_for_match(&text), reference_fold(&text));
        }
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
