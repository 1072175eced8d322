//! Property test: a refresh with an unchanged corpus is the identity on every file of the live
//! set, whatever the corpus holds: English and Chinese text, headings, HTML pages, exact copies
//! of a document, CRLF line ends and byte-order marks, file names whose ids collide, and a set
//! whose `index/` was removed. The same corpus, a copy of it in another folder, and a dry run
//! each say "nothing changed" and leave every byte as it was.

use super::refresh::snapshot;
use super::{path_str, qrelgen, tempdir, write};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};
use std::path::Path;

const FOLDERS: [&str; 3] = ["", "ops/", "ops/deep/"];
/// Names whose document ids collide once sanitized (`notes v2`, `notes_v2`) or differ by case.
const NAMES: [&str; 5] = ["notes v2", "notes_v2", "Notes", "faq", "指南"];
const EXTENSIONS: [&str; 3] = ["md", "txt", "html"];
const CONSONANTS: [&str; 10] = ["b", "d", "f", "k", "l", "m", "n", "r", "s", "t"];
const VOWELS: [&str; 5] = ["a", "e", "i", "o", "u"];
const HANZI: &str = "数据同步存储策略账单审计日志权限用户令牌区域镜像加密快照租户配额延迟导出发票计划保留删除恢复备份网络节点集群监控告警版本升级迁移接口密钥证书会话缓存队列任务调度分片副本";

/// One file of a generated corpus.
#[derive(Debug, Clone)]
struct Doc {
    folder: usize,
    name: usize,
    extension: usize,
    chinese: bool,
    headings: bool,
    /// `\n` or `\r\n`.
    line_end: &'static str,
    bom: bool,
    /// Index of an earlier document whose text this one copies.
    copy_of: Option<usize>,
    /// Paragraphs of word numbers.
    paragraphs: Vec<Vec<u16>>,
}

/// Word `n` of a 500-word vocabulary of three-syllable words.
fn english_word(n: u16) -> String {
    let n = usize::from(n % 500);
    [n % 50, (n / 50) % 10 * 5 + n % 5, (n * 7) % 50]
        .iter()
        .flat_map(|&s| [CONSONANTS[s / 5 % 10], VOWELS[s % 5]])
        .collect()
}

/// Word `n`: two characters of [`HANZI`].
fn chinese_word(n: u16) -> String {
    let chars: Vec<char> = HANZI.chars().collect();
    let n = usize::from(n);
    [chars[n % chars.len()], chars[(n / chars.len() + n * 3) % chars.len()]].iter().collect()
}

impl Doc {
    fn path(&self) -> String {
        format!("{}{}.{}", FOLDERS[self.folder], NAMES[self.name], EXTENSIONS[self.extension])
    }

    fn sentence(&self, words: &[u16]) -> String {
        if self.chinese {
            words.iter().map(|&w| chinese_word(w)).collect::<String>() + "。"
        } else {
            words.iter().map(|&w| english_word(w)).collect::<Vec<_>>().join(" ") + "."
        }
    }

    /// The section texts, sentences of at most eight words.
    fn sections(&self) -> Vec<String> {
        let glue = if self.chinese { "" } else { " " };
        self.paragraphs
            .iter()
            .map(|p| p.chunks(8).map(|s| self.sentence(s)).collect::<Vec<_>>().join(glue))
            .collect()
    }

    /// The file's bytes: Markdown (headings optional), plain text or an HTML page.
    fn render(&self, sections: &[String]) -> String {
        let heading = |k: usize| format!("Section {k}");
        let text = match (EXTENSIONS[self.extension], self.headings) {
            ("html", _) => {
                let body = each(sections, |k, s| format!("<h2>{}</h2><p>{s}</p>\n", heading(k)));
                format!(
                    "<html><head><title>{}</title></head><body>\n{body}</body></html>\n",
                    NAMES[self.name]
                )
            }
            ("md", true) => {
                let body = each(sections, |k, s| format!("## {}\n\n{s}\n\n", heading(k)));
                format!("# {}\n\n{body}", NAMES[self.name])
            }
            _ => sections.join("\n\n") + "\n",
        };
        let text = text.replace('\n', self.line_end);
        if self.bom { format!("\u{feff}{text}") } else { text }
    }
}

/// `section(k, text)` of every section, concatenated.
fn each(sections: &[String], section: impl Fn(usize, &str) -> String) -> String {
    sections.iter().enumerate().map(|(k, s)| section(k, s)).collect::<Vec<_>>().concat()
}

fn doc() -> impl Strategy<Value = Doc> {
    let paragraph = prop::collection::vec(0u16..2000, 20..70);
    (
        (0..FOLDERS.len(), 0..NAMES.len(), 0..EXTENSIONS.len()),
        (any::<bool>(), any::<bool>(), prop::sample::select(["\n", "\r\n"].as_slice()), any::<bool>()),
        prop::option::weighted(0.2, 0usize..8),
        prop::collection::vec(paragraph, 1..5),
    )
        .prop_map(
            |((folder, name, extension), (chinese, headings, line_end, bom), copy_of, paragraphs)| Doc {
                folder,
                name,
                extension,
                chinese,
                headings,
                line_end,
                bom,
                copy_of,
                paragraphs,
            },
        )
}

/// Writes `docs` under `root`; a copy takes the sections of an earlier document.
fn write_corpus(root: &Path, docs: &[Doc]) {
    let mut sections: Vec<Vec<String>> = Vec::new();
    for (i, doc) in docs.iter().enumerate() {
        let own = match doc.copy_of {
            Some(k) if k < i => sections[k].clone(),
            _ => doc.sections(),
        };
        write(&root.join(doc.path()), doc.render(&own));
        sections.push(own);
    }
}

/// Runs `qrelgen refresh` of `set` from `corpus` and checks that it changed nothing.
fn assert_nothing_changed(set: &Path, corpus: &Path, extra: &[&str]) -> Result<(), TestCaseError> {
    let before = snapshot(set);
    let mut args = vec!["refresh", "--set", path_str(set), "--corpus", path_str(corpus), "-q"];
    args.extend_from_slice(extra);
    let output = qrelgen(&args);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    prop_assert_eq!(output.status.code(), Some(0), "{}\n{}", stdout, stderr);
    prop_assert!(stdout.starts_with("nothing changed"), "{}", stdout);
    prop_assert!(snapshot(set) == before, "a refresh from {} {:?} changed the set", corpus.display(), extra);
    Ok(())
}

fn config() -> Config {
    Config {
        cases: 24,
        rng_seed: RngSeed::Fixed(14),
        failure_persistence: None,
        max_shrink_iters: 64,
        ..Config::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn refreshing_with_an_unchanged_corpus_is_the_identity(
        docs in prop::collection::vec(doc(), 2..7),
        without_index in prop::bool::weighted(0.25),
    ) {
        let dir = tempdir();
        let corpus = dir.path().join("corpus");
        write_corpus(&corpus, &docs);
        let set = dir.path().join("set");
        let output = qrelgen(&["build", "--corpus", path_str(&corpus), "--out", path_str(&set), "--queries", "12", "--allow-shortfall", "-q"]);
        prop_assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
        if without_index {
            fs_err::remove_dir_all(set.join("index")).unwrap();
        }
        assert_nothing_changed(&set, &corpus, &[])?;
        let elsewhere = dir.path().join("elsewhere/corpus");
        write_corpus(&elsewhere, &docs);
        assert_nothing_changed(&set, &elsewhere, &[])?;
        assert_nothing_changed(&set, &corpus, &["--dry-run"])?;
        prop_assert_eq!(set.join("index").exists(), !without_index, "a refresh that changes nothing builds no index");
    }
}
