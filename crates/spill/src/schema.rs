//! The schema rule: when a batch may be stored, spilled, read back or merged under a schema.
//!
//! There is one rule, documented on [`check_schema`], and every layer applies it through
//! [`check_schema`] or [`conform_batch`]: the buffer when a batch is written,
//! [`RunWriter::append`](crate::RunWriter::append) before a segment is written,
//! [`SegmentRef::read`](crate::SegmentRef::read) on the decoded stream, and the merge on every
//! input batch. A batch accepted at the top is therefore never refused further down.

use std::sync::Arc;

use arrow_array::{RecordBatch, RecordBatchOptions};
use arrow_schema::{ArrowError, DataType, Fields, Schema, SchemaRef};

/// Why a schema does not conform to the expected one: the first difference, by position.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum SchemaMismatch {
    /// The two schemas have different numbers of fields.
    #[error(
        "the expected schema has {} fields ({}), the batch has {} ({})",
        expected.len(), names(expected), found.len(), names(found)
    )]
    FieldCount {
        /// The expected schema's fields.
        expected: Fields,
        /// The batch's fields.
        found: Fields,
    },
    /// The field at `index` has another name.
    #[error(
        "field {index} is named `{expected}` in the expected schema but `{found}` in the batch"
    )]
    Name {
        /// The field's position.
        index: usize,
        /// Its name in the expected schema.
        expected: String,
        /// Its name in the batch.
        found: String,
    },
    /// The field has another data type (nested fields included).
    #[error("field `{field}` has type {expected} in the expected schema but {found} in the batch")]
    DataType {
        /// The field's position.
        index: usize,
        /// The field's name.
        field: String,
        /// Its type in the expected schema.
        expected: DataType,
        /// Its type in the batch.
        found: DataType,
    },
    /// The field is nullable in the batch but not in the expected schema.
    #[error(
        "field `{field}` ({data_type}) is non-nullable in the expected schema but nullable in the \
         batch"
    )]
    Nullability {
        /// The field's position.
        index: usize,
        /// The field's name.
        field: String,
        /// Its data type.
        data_type: DataType,
    },
    /// The schemas conform but the batch's columns do not fit the expected schema (a batch
    /// built unchecked whose columns disagree with its own schema, or that holds nulls in a
    /// field declared non-nullable).
    #[error("the batch's columns do not fit the expected schema: {0}")]
    Columns(#[source] Arc<ArrowError>),
}

/// Checks that `found` conforms to `expected`: the workspace's one schema rule, which the buffer,
/// the spill writer and reader and the merge all apply, so that a batch accepted at the top is
/// never refused further down.
///
/// Field for field, **by position**:
///
/// - **Names**: the same number of fields, each with the same name (case-sensitive).
/// - **Types**: the same [`DataType`], compared with `==`. Nested fields (list items, struct
///   children, map entries, union members) are part of the type, so their names, nullability and
///   metadata must match exactly too: a batch's columns are taken over as they are, and an
///   array's data type carries its children's fields, so a looser nested field cannot be
///   re-labelled without rebuilding the array.
/// - **Nullability** (top-level fields): a field that is non-nullable in `found` may be nullable
///   in `expected`; a nullable field of `found` needs a nullable field in `expected`, whether or
///   not it holds nulls.
/// - **Metadata**: schema metadata and top-level field metadata are ignored. A batch conformed by
///   [`conform_batch`] carries the expected schema, its metadata included.
/// - **Dictionary ids** are ignored: they are not part of a `DataType` (Arrow deprecated
///   `Field::dict_id`, and `Field`'s `==` skips it, as it skips `dict_is_ordered`), and the IPC
///   writer assigns ids of its own to every dictionary it writes. The dictionary's key and value
///   types are part of the type and must match.
///
/// Returns the first difference found.
pub fn check_schema(expected: &Schema, found: &Schema) -> Result<(), SchemaMismatch> {
    let (want, have) = (expected.fields(), found.fields());
    if want.len() != have.len() {
        return Err(SchemaMismatch::FieldCount {
            expected: want.clone(),
            found: have.clone(),
        });
    }
    for (index, (want, have)) in want.iter().zip(have).enumerate() {
        if want.name() != have.name() {
            return Err(SchemaMismatch::Name {
                index,
                expected: want.name().clone(),
                found: have.name().clone(),
            });
        }
        if want.data_type() != have.data_type() {
            return Err(SchemaMismatch::DataType {
                index,
                field: want.name().clone(),
                expected: want.data_type().clone(),
                found: have.data_type().clone(),
            });
        }
        if have.is_nullable() && !want.is_nullable() {
            return Err(SchemaMismatch::Nullability {
                index,
                field: want.name().clone(),
                data_type: want.data_type().clone(),
            });
        }
    }
    Ok(())
}

/// Returns `batch` re-labelled with `expected` if its schema conforms (the rule of
/// [`check_schema`]); otherwise why not, with the batch handed back unchanged.
///
/// Costs nothing when the batch already carries `expected` (the same `Arc`); otherwise one
/// check per field and a new `RecordBatch` over the same arrays.
pub fn conform_batch(
    expected: &SchemaRef,
    batch: RecordBatch,
) -> Result<RecordBatch, (SchemaMismatch, RecordBatch)> {
    if Arc::ptr_eq(expected, batch.schema_ref()) {
        return Ok(batch);
    }
    if let Err(mismatch) = check_schema(expected, batch.schema_ref()) {
        return Err((mismatch, batch));
    }
    let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    match RecordBatch::try_new_with_options(
        Arc::clone(expected),
        batch.columns().to_vec(),
        &options,
    ) {
        Ok(conformed) => Ok(conformed),
        Err(e) => Err((SchemaMismatch::Columns(Arc::new(e)), batch)),
    }
}

fn names(fields: &Fields) -> String {
    fields
        .iter()
        .map(|f| f.name().as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use arrow_array::builder::{Int32Builder, ListBuilder, StringDictionaryBuilder};
    use arrow_array::types::Int32Type;
    use arrow_array::{ArrayRef, Int32Array, Int64Array};
    use arrow_schema::Field;

    use super::*;

    fn schema(fields: Vec<Field>) -> SchemaRef {
        Arc::new(Schema::new(fields))
    }

    fn int64(name: &str, nullable: bool) -> Field {
        Field::new(name, DataType::Int64, nullable)
    }

    fn batch(fields: Vec<Field>, columns: Vec<ArrayRef>) -> RecordBatch {
        RecordBatch::try_new(schema(fields), columns).unwrap()
    }

    /// A list array whose items are non-nullable.
    fn strict_list() -> ArrayRef {
        let mut items = ListBuilder::new(Int32Builder::new()).with_field(Field::new(
            "item",
            DataType::Int32,
            false,
        ));
        items.values().append_value(1);
        items.append(true);
        Arc::new(items.finish())
    }

    fn ints() -> ArrayRef {
        Arc::new(Int64Array::from(vec![1, 2, 3]))
    }

    #[test]
    fn the_same_arc_passes_untouched() {
        let b = batch(vec![int64("a", false)], vec![ints()]);
        let out = conform_batch(b.schema_ref(), b.clone()).unwrap();
        assert!(Arc::ptr_eq(out.schema_ref(), b.schema_ref()));
    }

    #[test]
    fn stricter_nullability_is_accepted_and_relabelled() {
        let expected = schema(vec![int64("a", true)]);
        let out = conform_batch(&expected, batch(vec![int64("a", false)], vec![ints()])).unwrap();
        assert!(Arc::ptr_eq(out.schema_ref(), &expected));
        assert_eq!(out.column(0), &ints());
    }

    #[test]
    fn looser_nullability_is_refused_even_without_nulls() {
        let b = batch(vec![int64("a", true)], vec![ints()]);
        let (mismatch, back) =
            conform_batch(&schema(vec![int64("a", false)]), b.clone()).unwrap_err();
        assert!(
            matches!(&mismatch, SchemaMismatch::Nullability { index: 0, field, .. } if field == "a")
        );
        assert!(mismatch.to_string().contains("`a`"), "{mismatch}");
        assert_eq!(back, b);
    }

    #[test]
    fn metadata_is_ignored_and_replaced_by_the_expected() {
        let tagged = |key: &str| HashMap::from([(key.to_string(), "v".to_string())]);
        let expected = Arc::new(
            Schema::new(vec![int64("a", true).with_metadata(tagged("want"))])
                .with_metadata(tagged("schema-want")),
        );
        let found = Schema::new(vec![int64("a", true).with_metadata(tagged("have"))])
            .with_metadata(tagged("schema-have"));
        let b = RecordBatch::try_new(Arc::new(found), vec![ints()]).unwrap();
        let out = conform_batch(&expected, b).unwrap();
        assert_eq!(out.schema().metadata(), expected.metadata());
        assert_eq!(out.schema().field(0).metadata(), &tagged("want"));
    }

    #[test]
    fn names_count_and_order_are_by_position() {
        let expected = schema(vec![int64("a", true), int64("b", true)]);
        let swapped = batch(
            vec![int64("b", true), int64("a", true)],
            vec![ints(), ints()],
        );
        let (m, _) = conform_batch(&expected, swapped).unwrap_err();
        assert!(
            matches!(&m, SchemaMismatch::Name { index: 0, expected, found } if expected == "a" && found == "b")
        );
        assert!(m.to_string().contains("`b`"), "{m}");

        let one = batch(vec![int64("a", true)], vec![ints()]);
        let (m, _) = conform_batch(&expected, one).unwrap_err();
        assert!(matches!(m, SchemaMismatch::FieldCount { .. }));
        assert_eq!(
            m.to_string(),
            "the expected schema has 2 fields (a, b), the batch has 1 (a)"
        );
    }

    #[test]
    fn a_type_mismatch_names_the_field_and_both_types() {
        let b = batch(
            vec![Field::new("a", DataType::Int32, true)],
            vec![Arc::new(Int32Array::from(vec![1]))],
        );
        let (m, _) = conform_batch(&schema(vec![int64("a", true)]), b).unwrap_err();
        assert!(matches!(
            &m,
            SchemaMismatch::DataType {
                expected: DataType::Int64,
                found: DataType::Int32,
                ..
            }
        ));
        let text = m.to_string();
        assert!(
            text.contains("`a`") && text.contains("Int64") && text.contains("Int32"),
            "{text}"
        );
    }

    #[test]
    fn nested_fields_must_match_exactly() {
        // a list of non-nullable items does not conform to a list of nullable ones: the array's
        // type would still say non-nullable under the re-labelled field
        let strict = strict_list();
        let b = batch(
            vec![Field::new("l", strict.data_type().clone(), true)],
            vec![strict],
        );
        let expected = schema(vec![Field::new(
            "l",
            DataType::new_list(DataType::Int32, true),
            true,
        )]);
        let (m, _) = conform_batch(&expected, b).unwrap_err();
        assert!(
            matches!(m, SchemaMismatch::DataType { index: 0, .. }),
            "{m}"
        );
    }

    #[test]
    fn dictionary_ids_are_ignored() {
        let mut dict = StringDictionaryBuilder::<Int32Type>::new();
        dict.append_value("x");
        let column: ArrayRef = Arc::new(dict.finish());
        let dt = column.data_type().clone();
        #[expect(deprecated, reason = "dictionary ids are what this test is about")]
        let with_id = |id| Field::new_dict("d", dt.clone(), true, id, false);
        let expected = schema(vec![with_id(1)]);
        let b = batch(vec![with_id(7)], vec![column]);
        assert!(conform_batch(&expected, b).is_ok());
    }

    #[test]
    fn columns_that_disagree_with_their_schema_are_refused() {
        // `with_schema` lets a batch's field claim a looser nested type than its column has;
        // the schemas then conform but the columns do not fit
        let strict = strict_list();
        let loose = Field::new("l", DataType::new_list(DataType::Int32, true), true);
        let b = batch(
            vec![Field::new("l", strict.data_type().clone(), true)],
            vec![strict],
        )
        .with_schema(schema(vec![loose.clone()]))
        .unwrap();
        let (m, back) = conform_batch(&schema(vec![loose]), b.clone()).unwrap_err();
        assert!(matches!(m, SchemaMismatch::Columns(_)), "{m}");
        assert_eq!(back, b);
    }
}
