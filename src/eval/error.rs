//! What stops an evaluation: files that cannot be read, and input with problems (every problem
//! listed at once with its file and line).

use std::fmt;
use std::path::{Path, PathBuf};

/// Problems listed per file before the rest are only counted.
const LISTED: usize = 50;

/// One problem of an input file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The file, as named on the command line.
    pub file: PathBuf,
    /// 1-based line (0: the file as a whole).
    pub line: usize,
    /// What is wrong, and what to do when that is not obvious.
    pub message: String,
}

impl Problem {
    /// A problem at `file:line`.
    #[must_use]
    pub fn new(file: &Path, line: usize, message: impl Into<String>) -> Self {
        Self { file: file.to_owned(), line, message: message.into() }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            0 => write!(f, "{}: {}", self.file.display(), self.message),
            line => write!(f, "{}:{line}: {}", self.file.display(), self.message),
        }
    }
}

/// A fatal problem of an evaluation.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    /// A file cannot be read, or a set file is malformed.
    #[error(transparent)]
    Set(#[from] crate::Error),
    /// The runs or qrels have problems; nothing was evaluated.
    #[error("{} problem(s), nothing evaluated:\n{}", .0.len(), list(.0))]
    Problems(Vec<Problem>),
    /// A setting cannot be used.
    #[error("invalid {flag}: {message}")]
    Setting {
        /// The flag that fixes it.
        flag: &'static str,
        /// What is wrong.
        message: String,
    },
}

/// The problems, one per line; past [`LISTED`] per file, the rest are counted.
fn list(problems: &[Problem]) -> String {
    let mut out = Vec::new();
    let mut per_file: std::collections::BTreeMap<&Path, usize> = std::collections::BTreeMap::new();
    for p in problems {
        let n = per_file.entry(&p.file).or_default();
        *n += 1;
        if *n <= LISTED {
            out.push(p.to_string());
        }
    }
    for (file, n) in per_file.into_iter().filter(|(_, n)| *n > LISTED) {
        out.push(format!("{}: … and {} more problem(s)", file.display(), n - LISTED));
    }
    out.join("\n")
}

/// Shorthand for results with [`EvalError`].
pub type Result<T, E = EvalError> = std::result::Result<T, E>;

/// The error for an unreadable file.
pub(crate) fn unreadable(path: &Path, source: std::io::Error) -> EvalError {
    EvalError::Set(crate::Error::Input { path: path.to_owned(), source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_problems_with_file_and_line_and_counts_the_rest() {
        let file = Path::new("a.run");
        let mut problems: Vec<Problem> = (1..=LISTED + 3).map(|l| Problem::new(file, l, "bad")).collect();
        problems.push(Problem::new(Path::new("q.trec"), 0, "empty"));
        let text = EvalError::Problems(problems).to_string();
        assert!(text.starts_with(&format!("{} problem(s), nothing evaluated:\na.run:1: bad\n", LISTED + 4)));
        assert!(text.contains("q.trec: empty"));
        assert!(text.ends_with("a.run: … and 3 more problem(s)"), "{text}");
    }
}
