//! The rule a written batch's schema must follow.
//!
//! Field for field, by position: the same name, the same data type (nested fields may be
//! non-nullable in the batch where the buffer's are nullable), and a field that is non-nullable in
//! the batch may be nullable in the buffer. Schema and field metadata are ignored. An accepted
//! batch is re-labelled with the buffer's schema, so every batch read back carries exactly the
//! buffer's schema.

use std::sync::Arc;

use arrow_array::{RecordBatch, RecordBatchOptions};
use arrow_schema::SchemaRef;

use crate::Error;

/// Returns `batch` with the buffer's schema, or why it does not match.
pub(crate) fn conform(
    schema: &SchemaRef,
    batch: RecordBatch,
) -> Result<RecordBatch, (Error, RecordBatch)> {
    if Arc::ptr_eq(schema, batch.schema_ref()) {
        return Ok(batch);
    }
    if let Some(why) = mismatch(schema, &batch) {
        return Err((Error::SchemaMismatch(why), batch));
    }
    let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    match RecordBatch::try_new_with_options(Arc::clone(schema), batch.columns().to_vec(), &options)
    {
        Ok(conformed) => Ok(conformed),
        Err(e) => Err((Error::SchemaMismatch(e.to_string()), batch)),
    }
}

fn mismatch(schema: &SchemaRef, batch: &RecordBatch) -> Option<String> {
    let got = batch.schema_ref();
    if got.fields().len() != schema.fields().len() {
        return Some(format!(
            "the buffer has {} fields ({}), the batch has {} ({})",
            schema.fields().len(),
            names(schema),
            got.fields().len(),
            names(got)
        ));
    }
    for (i, (want, have)) in schema.fields().iter().zip(got.fields()).enumerate() {
        if want.name() != have.name() {
            return Some(format!(
                "field {i} is named `{}` in the buffer but `{}` in the batch",
                want.name(),
                have.name()
            ));
        }
        if !want.data_type().contains(have.data_type()) {
            return Some(format!(
                "field `{}` has type {} in the buffer but {} in the batch",
                want.name(),
                want.data_type(),
                have.data_type()
            ));
        }
        if have.is_nullable() && !want.is_nullable() {
            return Some(format!(
                "field `{}` ({}) is non-nullable in the buffer but nullable in the batch",
                want.name(),
                want.data_type()
            ));
        }
    }
    None
}

fn names(schema: &SchemaRef) -> String {
    schema
        .fields()
        .iter()
        .map(|f| f.name().as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{ArrayRef, Int32Array, Int64Array};
    use arrow_schema::{DataType, Field, Schema};

    fn schema(nullable: bool) -> SchemaRef {
        Arc::new(Schema::new(vec![Field::new(
            "a",
            DataType::Int64,
            nullable,
        )]))
    }

    fn batch(name: &str, array: ArrayRef, nullable: bool) -> RecordBatch {
        let s = Schema::new(vec![Field::new(name, array.data_type().clone(), nullable)]);
        RecordBatch::try_new(Arc::new(s), vec![array]).unwrap()
    }

    #[test]
    fn stricter_nullability_is_accepted_and_relabelled() {
        let s = schema(true);
        let b = batch("a", Arc::new(Int64Array::from(vec![1])), false);
        let out = conform(&s, b).unwrap();
        assert!(Arc::ptr_eq(out.schema_ref(), &s));
    }

    #[test]
    fn looser_nullability_is_refused_with_the_field_named() {
        let b = batch("a", Arc::new(Int64Array::from(vec![1])), true);
        let (err, back) = conform(&schema(false), b.clone()).unwrap_err();
        assert!(err.to_string().contains("`a`"), "{err}");
        assert_eq!(back, b);
    }

    #[test]
    fn type_mismatch_names_field_and_both_types() {
        let b = batch("a", Arc::new(Int32Array::from(vec![1])), true);
        let (err, _) = conform(&schema(true), b).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("`a`") && msg.contains("Int64") && msg.contains("Int32"),
            "{msg}"
        );
    }

    #[test]
    fn name_and_count_mismatches_are_refused() {
        let b = batch("b", Arc::new(Int64Array::from(vec![1])), true);
        assert!(
            conform(&schema(true), b)
                .unwrap_err()
                .0
                .to_string()
                .contains("`b`")
        );
        let two = RecordBatch::try_from_iter([
            ("a", Arc::new(Int64Array::from(vec![1])) as ArrayRef),
            ("b", Arc::new(Int64Array::from(vec![1])) as ArrayRef),
        ])
        .unwrap();
        assert!(
            conform(&schema(true), two)
                .unwrap_err()
                .0
                .to_string()
                .contains("2 (")
        );
    }
}
