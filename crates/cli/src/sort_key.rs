//! `--sort-by`: the order of the rows within each output partition.
//!
//! `--sort-by COL[:MOD...][,COL[:MOD...]...]` sorts by the first column, ties by the next, and
//! so on. Each column is ascending with nulls last unless its modifiers say otherwise: `asc`,
//! `desc`, `nulls_first`, `nulls_last` (e.g. `--sort-by l_shipdate:desc,l_orderkey`). Nulls
//! last is DuckDB's and PostgreSQL's default for ascending order; Polars' `sort` puts them
//! first (`:nulls_first` gives that). Floats sort by IEEE 754 total order (-NaN < -inf < ...
//! < inf < NaN), strings by their bytes.
//!
//! Rows are compared through arrow-row's [`RowConverter`], which encodes each row's key as
//! bytes whose order is the sort order: a partition's rows are sorted by those bytes
//! ([`crate::sorter`]).

use arrow_array::RecordBatch;
use arrow_row::{RowConverter, Rows, SortField};
use arrow_schema::{ArrowError, Schema, SortOptions};

use crate::error::CliError;

/// One column of `--sort-by`, as given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SortColumn {
    /// The column's name.
    pub(crate) name: String,
    /// Largest first.
    pub(crate) descending: bool,
    /// Nulls before all values.
    pub(crate) nulls_first: bool,
}

impl std::fmt::Display for SortColumn {
    /// `COL:asc|desc:nulls_first|nulls_last`, every modifier spelled out.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let order = if self.descending { "desc" } else { "asc" };
        let nulls = if self.nulls_first {
            "nulls_first"
        } else {
            "nulls_last"
        };
        write!(f, "{}:{order}:{nulls}", self.name)
    }
}

/// Parses one `COL[:MOD...]` of `--sort-by` (clap splits the list at commas).
pub(crate) fn parse_sort_column(text: &str) -> Result<SortColumn, String> {
    let mut parts = text.split(':');
    let name = parts.next().unwrap_or_default().trim();
    if name.is_empty() {
        return Err(format!(
            "{text:?} names no column; expected COL[:asc|desc][:nulls_first|nulls_last]"
        ));
    }
    let mut column = SortColumn {
        name: name.to_owned(),
        descending: false,
        nulls_first: false,
    };
    for modifier in parts {
        match modifier.trim() {
            "asc" => column.descending = false,
            "desc" => column.descending = true,
            "nulls_first" => column.nulls_first = true,
            "nulls_last" => column.nulls_first = false,
            other => {
                return Err(format!(
                    "unknown sort modifier {other:?} in {text:?}; expected asc, desc, nulls_first or nulls_last"
                ));
            }
        }
    }
    Ok(column)
}

/// The sort key resolved against the input's schema: what each output thread compares rows
/// with.
#[derive(Debug)]
pub(crate) struct SortKey {
    /// The key columns' indices in the schema.
    columns: Vec<usize>,
    fields: Vec<SortField>,
    converter: RowConverter,
}

impl SortKey {
    /// The key of `columns` in `schema`, or an error naming an unknown column or one whose
    /// type cannot be sorted.
    pub(crate) fn new(schema: &Schema, columns: &[SortColumn]) -> Result<Self, CliError> {
        let mut indices = Vec::with_capacity(columns.len());
        let mut fields = Vec::with_capacity(columns.len());
        for column in columns {
            let (index, field) = schema.column_with_name(&column.name).ok_or_else(|| {
                CliError::UnknownSortColumn {
                    name: column.name.clone(),
                    available: schema.fields().iter().map(|f| f.name().clone()).collect(),
                }
            })?;
            let options = SortOptions {
                descending: column.descending,
                nulls_first: column.nulls_first,
            };
            let sort_field = SortField::new_with_options(field.data_type().clone(), options);
            if !RowConverter::supports_fields(std::slice::from_ref(&sort_field)) {
                return Err(CliError::UnsortableColumn {
                    name: column.name.clone(),
                    data_type: field.data_type().clone(),
                });
            }
            indices.push(index);
            fields.push(sort_field);
        }
        let converter =
            RowConverter::new(fields.clone()).map_err(|e| CliError::Internal(e.to_string()))?;
        Ok(SortKey {
            columns: indices,
            fields,
            converter,
        })
    }

    /// A key of the same columns with a converter of its own (one per thread).
    pub(crate) fn fork(&self) -> Result<Self, CliError> {
        let converter = RowConverter::new(self.fields.clone())
            .map_err(|e| CliError::Internal(e.to_string()))?;
        Ok(SortKey {
            columns: self.columns.clone(),
            fields: self.fields.clone(),
            converter,
        })
    }

    /// The keys of `batch`'s rows, comparable with those of other batches of this key.
    pub(crate) fn rows(&self, batch: &RecordBatch) -> Result<Rows, ArrowError> {
        let columns: Vec<_> = self
            .columns
            .iter()
            .map(|&i| batch.column(i).clone())
            .collect();
        self.converter.convert_columns(&columns)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{Float64Array, StringArray};
    use arrow_schema::{DataType, Field};

    use super::*;

    #[test]
    fn columns_and_modifiers_are_parsed() {
        assert_eq!(
            parse_sort_column("x:desc").unwrap().to_string(),
            "x:desc:nulls_last"
        );
        assert_eq!(
            parse_sort_column("a"),
            Ok(SortColumn {
                name: "a".into(),
                descending: false,
                nulls_first: false
            })
        );
        assert_eq!(
            parse_sort_column("b:desc:nulls_first"),
            Ok(SortColumn {
                name: "b".into(),
                descending: true,
                nulls_first: true
            })
        );
        assert!(
            parse_sort_column("")
                .unwrap_err()
                .contains("names no column")
        );
        assert!(
            parse_sort_column("a:down")
                .unwrap_err()
                .contains("unknown sort modifier \"down\"")
        );
    }

    #[test]
    fn row_bytes_follow_the_order_asked_for() {
        let batch = RecordBatch::try_from_iter([
            (
                "x",
                Arc::new(Float64Array::from(vec![Some(2.0), None, Some(-1.0)])) as _,
            ),
            ("s", Arc::new(StringArray::from(vec!["b", "a", "c"])) as _),
        ])
        .unwrap();
        let order = |columns: &[SortColumn]| {
            let key = SortKey::new(&batch.schema(), columns)
                .unwrap()
                .fork()
                .unwrap();
            let rows = key.rows(&batch).unwrap();
            let mut order: Vec<usize> = (0..3).collect();
            order.sort_by_key(|&i| rows.row(i));
            order
        };
        let x = parse_sort_column("x").unwrap();
        assert_eq!(
            order(std::slice::from_ref(&x)),
            [2, 0, 1],
            "nulls last by default"
        );
        assert_eq!(
            order(&[parse_sort_column("x:desc:nulls_first").unwrap()]),
            [1, 0, 2]
        );
        assert_eq!(order(&[parse_sort_column("s:desc").unwrap()]), [2, 0, 1]);
    }

    #[test]
    fn an_unknown_column_is_named_with_the_columns_there_are() {
        let schema = Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("s", DataType::Utf8, true),
        ]);
        let err = SortKey::new(&schema, &[parse_sort_column("nope").unwrap()]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown --sort-by column \"nope\"; the input has columns: k, s"
        );
    }
}
