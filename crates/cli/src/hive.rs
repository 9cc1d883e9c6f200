//! Hive-style partitioned input: files under `key=value` directories (as Polars, DuckDB,
//! Spark and pyarrow write them) get each directory's key as a column holding its value.
//!
//! A directory named on the command line contributes its own files and, recursively, those of
//! its subdirectories named `key=value` (other subdirectories are skipped). The
//! keys, in directory order from the top, must be the same for every file; each becomes a
//! nullable Utf8 column after the file's own columns. Values are percent-decoded (`%2F` is
//! `/`) and `__HIVE_DEFAULT_PARTITION__` is null, as those writers encode them.

use std::sync::Arc;

use arrow_array::{ArrayRef, StringArray};

/// The value hive writers use for null.
const NULL_VALUE: &str = "__HIVE_DEFAULT_PARTITION__";

/// One file's partition values, `(key, value)` from the top directory down.
pub(crate) type HiveValues = Vec<(String, Option<String>)>;

/// The key and value of a directory named `key=value` (a key is non-empty and holds no `=`).
pub(crate) fn parse_segment(name: &str) -> Option<(String, Option<String>)> {
    let (key, value) = name.split_once('=')?;
    if key.is_empty() || key.starts_with('.') {
        return None;
    }
    let value = percent_decode(value);
    Some((percent_decode(key), (value != NULL_VALUE).then_some(value)))
}

/// The columns of `values` for a batch of `rows` rows: each value repeated.
pub(crate) fn columns(values: &HiveValues, rows: usize) -> Vec<ArrayRef> {
    values
        .iter()
        .map(|(_, value)| {
            let array: StringArray = std::iter::repeat_n(value.as_deref(), rows).collect();
            Arc::new(array) as ArrayRef
        })
        .collect()
}

/// `%XX` sequences decoded; anything else (a `%` not followed by two hex digits, bytes that
/// do not decode to UTF-8) kept as written.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8(out).unwrap_or_else(|_| text.to_owned())
}

#[cfg(test)]
mod tests {
    use arrow_array::Array;

    use super::*;

    #[test]
    fn segments_are_parsed_and_decoded() {
        assert_eq!(
            parse_segment("p=12"),
            Some(("p".to_owned(), Some("12".to_owned())))
        );
        assert_eq!(
            parse_segment("city=S%C3%A3o%20Paulo%2F1"),
            Some(("city".to_owned(), Some("São Paulo/1".to_owned())))
        );
        assert_eq!(
            parse_segment("k=__HIVE_DEFAULT_PARTITION__"),
            Some(("k".to_owned(), None))
        );
        assert_eq!(
            parse_segment("k=100%"),
            Some(("k".into(), Some("100%".into())))
        );
        for other in ["plain", "=v", ".hidden=1"] {
            assert_eq!(parse_segment(other), None, "{other}");
        }
    }

    #[test]
    fn columns_repeat_each_value() {
        let values = vec![
            ("a".to_owned(), Some("x".to_owned())),
            ("b".to_owned(), None),
        ];
        let columns = columns(&values, 3);
        assert_eq!(columns.len(), 2);
        assert_eq!(columns[0].len(), 3);
        assert_eq!(columns[1].null_count(), 3);
    }
}
