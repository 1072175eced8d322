//! The byte format of the files qrelgen keeps beside its index (the corpus model, the kept
//! chunking): little-endian numbers and length-prefixed UTF-8 texts, read back without trusting
//! a single length.

/// Reads little-endian numbers and length-prefixed texts from a byte slice; every read is
/// `None` past the end (or for bad UTF-8), so a cut or damaged file is refused, never trusted.
pub(crate) struct Decoder<'a>(&'a [u8]);

impl<'a> Decoder<'a> {
    /// A decoder at the start of `bytes`.
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Self(bytes)
    }

    /// The bytes not read yet.
    pub(crate) fn rest(&self) -> &'a [u8] {
        self.0
    }

    /// The next `n` bytes.
    pub(crate) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = self.0.split_at_checked(n)?;
        self.0 = rest;
        Some(head)
    }

    /// The next byte.
    pub(crate) fn byte(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }

    /// The next eight bytes as a number.
    pub(crate) fn number(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }

    /// A number that must fit in `usize` (a count or a length).
    pub(crate) fn size(&mut self) -> Option<usize> {
        usize::try_from(self.number()?).ok()
    }

    /// A number that must fit in `u32`.
    pub(crate) fn small(&mut self) -> Option<u32> {
        u32::try_from(self.number()?).ok()
    }

    /// A length-prefixed UTF-8 text.
    pub(crate) fn text(&mut self) -> Option<&'a str> {
        let n = self.size()?;
        std::str::from_utf8(self.take(n)?).ok()
    }

    /// `n` values of `width` bytes, checked against what is left before anything is allocated.
    pub(crate) fn values<T>(
        &mut self,
        n: usize,
        width: usize,
        read: impl Fn(&[u8]) -> Option<T>,
    ) -> Option<Vec<T>> {
        let bytes = self.take(n.checked_mul(width)?)?;
        let mut values = Vec::with_capacity(n);
        for value in bytes.chunks_exact(width) {
            values.push(read(value)?);
        }
        Some(values)
    }
}

#[cfg(test)]
mod tests {
    use super::Decoder;

    #[test]
    fn reads_what_was_written_and_refuses_a_cut_file() {
        let mut bytes = 7u64.to_le_bytes().to_vec();
        bytes.extend(3u64.to_le_bytes());
        bytes.extend(b"abc");
        bytes.push(9);
        let mut input = Decoder::new(&bytes);
        assert_eq!(input.number(), Some(7));
        assert_eq!(input.text(), Some("abc"));
        assert_eq!(input.byte(), Some(9));
        assert!(input.rest().is_empty());
        assert_eq!(input.byte(), None);
        let mut cut = Decoder::new(&bytes[..12]);
        assert_eq!(cut.number(), Some(7));
        assert_eq!(cut.text(), None, "a length past the end is refused");
    }

    #[test]
    fn a_number_too_big_for_its_kind_is_refused() {
        let bytes = u64::MAX.to_le_bytes();
        assert_eq!(Decoder::new(&bytes).small(), None);
        assert_eq!(Decoder::new(&bytes).number(), Some(u64::MAX));
    }

    #[test]
    fn values_reserve_nothing_for_a_count_past_the_end() {
        let bytes = [1u8, 0, 2, 0];
        let read = |b: &[u8]| Some(u16::from_le_bytes(b.try_into().ok()?));
        assert_eq!(Decoder::new(&bytes).values(2, 2, read), Some(vec![1, 2]));
        assert_eq!(Decoder::new(&bytes).values(usize::MAX, 2, read), None);
        assert_eq!(Decoder::new(&bytes).values(3, 2, read), None);
    }
}
