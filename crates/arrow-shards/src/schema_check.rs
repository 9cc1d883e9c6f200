//! The rule a written batch's schema must follow: the workspace's one schema rule,
//! [`arrow_shards_spill::check_schema`], which the spill writer, the spill reader and the merge
//! apply too, so a batch the buffer accepts is never refused further down.
//!
//! In short, field for field by position: the same name, the same data type (nested fields
//! included, exactly), and a field that is non-nullable in the batch may be nullable in the
//! buffer, not the other way round. Schema and field metadata and dictionary ids are ignored. An
//! accepted batch is re-labelled with the buffer's schema, so every batch read back carries
//! exactly the buffer's schema.

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use arrow_shards_spill::conform_batch;

use crate::error::Error;

/// Returns `batch` with the buffer's schema, or why it does not match.
pub(crate) fn conform(
    schema: &SchemaRef,
    batch: RecordBatch,
) -> Result<RecordBatch, (Error, RecordBatch)> {
    conform_batch(schema, batch)
        .map_err(|(mismatch, batch)| (Error::SchemaMismatch(Box::new(mismatch)), batch))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

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
