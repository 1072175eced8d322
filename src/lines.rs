//! Bounded reads of line-based input files (runs, qrels, decisions, id lists, corpora): no line
//! may be longer than a limit, so a file that is not what it should be (`/dev/zero`, a binary,
//! one enormous line) ends in an error naming its line instead of growing memory without bound.

use std::io::{BufRead, Read as _};
use std::path::Path;

/// The longest line of a record file (a run, qrels, a decisions file, an id list): 16 MiB, far
/// above any real row.
pub const RECORD_LINE: usize = 16 << 20;
/// The longest line of a JSONL corpus (one document per line): 64 MiB.
pub const DOCUMENT_LINE: usize = 64 << 20;

/// The error of a line over `max` bytes, its 1-based number `line`.
#[must_use]
pub fn too_long(line: usize, max: usize) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!(
            "line {line} is longer than {} MiB: this is not a file of lines of text (is it the right file?)",
            max >> 20
        ),
    )
}

/// Reads the next line of `input` (line 1-based number `line`) into `buf`, line break included,
/// as [`BufRead::read_line`] does, but refuses one longer than `max` bytes. Returns the bytes
/// read (0 at the end).
///
/// # Errors
/// [`std::io::ErrorKind::InvalidData`] for a line over `max` bytes or not UTF-8, and read errors.
pub fn read_line(
    input: &mut impl BufRead,
    buf: &mut String,
    line: usize,
    max: usize,
) -> std::io::Result<usize> {
    let mut bytes = Vec::new();
    let read = input.by_ref().take(max as u64 + 1).read_until(b'\n', &mut bytes)?;
    if read > max && !(read == max + 1 && bytes.last() == Some(&b'\n')) {
        return Err(too_long(line, max));
    }
    let text = std::str::from_utf8(&bytes).map_err(|e| {
        std::io::Error::new(std::io::ErrorKind::InvalidData, format!("line {line} is not UTF-8: {e}"))
    })?;
    buf.push_str(text);
    Ok(read)
}

/// The whole file at `path` as text, each line at most `max` bytes.
///
/// # Errors
/// As [`read_line`], and the error of opening the file.
pub fn read_text(path: &Path, max: usize) -> std::io::Result<String> {
    let file = fs_err::File::open(path)?;
    let mut input = std::io::BufReader::new(file);
    let mut text = String::new();
    let mut line = 1;
    while read_line(&mut input, &mut text, line, max)? > 0 {
        line += 1;
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_up_to_the_limit_are_read_and_a_longer_one_is_refused_naming_it() {
        let mut text = String::new();
        let mut input = std::io::Cursor::new(b"abc\nde\n12345678\n".to_vec());
        assert_eq!(read_line(&mut input, &mut text, 1, 8).unwrap(), 4);
        assert_eq!(read_line(&mut input, &mut text, 2, 8).unwrap(), 3);
        assert_eq!(read_line(&mut input, &mut text, 3, 8).unwrap(), 9, "8 bytes and the line break");
        assert_eq!(read_line(&mut input, &mut text, 4, 8).unwrap(), 0);
        assert_eq!(text, "abc\nde\n12345678\n");
        let mut input = std::io::Cursor::new(b"ok\n123456789".to_vec());
        let mut text = String::new();
        read_line(&mut input, &mut text, 1, 8).unwrap();
        let err = read_line(&mut input, &mut text, 2, 8).unwrap_err();
        assert!(err.to_string().starts_with("line 2 is longer than"), "{err}");
    }

    #[cfg(unix)]
    #[test]
    fn dev_zero_ends_in_an_error() {
        let err = read_text(Path::new("/dev/zero"), 1 << 20).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
        assert!(err.to_string().contains("line 1 is longer than 1 MiB"), "{err}");
    }
}
