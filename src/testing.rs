//! Helpers shared by the unit tests of several modules.

/// Asserts that every variant's `label` is the name serde writes for it (the labels of flags,
/// files and reports are derived by strum; this holds them to serde's).
pub(crate) fn labels_are_serde_names<T, L>(label: impl Fn(T) -> L)
where
    T: strum::VariantArray + serde::Serialize + std::fmt::Debug + Copy,
    L: AsRef<str>,
{
    for &variant in T::VARIANTS {
        let written = serde_json::to_value(variant).ok();
        assert_eq!(written, Some(serde_json::Value::from(label(variant).as_ref())), "{variant:?}");
    }
}
