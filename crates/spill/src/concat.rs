//! Concatenation that keeps dictionaries as written: the one kernel the buffer's compaction,
//! the spill writer's coalescing and the merge's coalescing concatenate with.
//!
//! arrow-select's `concat` of dictionary arrays does one of two things, both wrong for a
//! buffer that should hand back what it was given: it keeps every input's values one after
//! another, duplicates included (pandas refuses duplicated categories), or it merges them and
//! drops every value no row uses (a categorical loses its unused categories). Here a dictionary
//! column's result has as values the union of the inputs' values, in first-seen order, each
//! value once, unused ones kept, and the keys remapped onto it. When every input has the same
//! values (the same array, or equal ones) that array is kept as it is and only the keys are
//! concatenated: the usual case, pieces of one written batch or batches of one spilled segment.
//!
//! Reused from arrow-rs: `concat` for everything that holds no dictionary and for the keys,
//! `interleave` to gather the union's values. Not reused: arrow-select's
//! `merge_dictionary_values` is crate-private, drops the values no key uses, and only tries
//! to make values unique (its interner is a cache that may let a duplicate through).
//!
//! Dictionaries nested in a struct are handled (the struct is rebuilt from its concatenated
//! children); inside lists, maps, unions and run-end encoded arrays they fall back to arrow's
//! `concat`. So does a union whose values the key type cannot number (a `UInt8` key and more
//! than 256 distinct values), as arrow's merge of used values may still fit.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{ArrowDictionaryKeyType, BinaryViewType, StringViewType};
use arrow_array::{
    Array, ArrayRef, DictionaryArray, PrimitiveArray, RecordBatch, RecordBatchOptions, StructArray,
    downcast_integer, downcast_primitive_array,
};
use arrow_buffer::{ArrowNativeType, BooleanBufferBuilder, NullBuffer, ScalarBuffer};
use arrow_schema::{ArrowError, DataType, SchemaRef};

/// Concatenates `arrays` as arrow-select's `concat` does, except that a dictionary's values
/// are the union of the inputs' values (first-seen order, each once, unused ones kept).
///
/// ```
/// use std::sync::Arc;
/// use arrow_array::cast::AsArray;
/// use arrow_array::types::Int32Type;
/// use arrow_array::{Array, DictionaryArray, StringArray};
/// use arrow_shards_spill::concat;
///
/// let a: DictionaryArray<Int32Type> = vec!["x", "x"].into_iter().collect();
/// let a = a.with_values(Arc::new(StringArray::from(vec!["x", "unused"])));
/// let b: DictionaryArray<Int32Type> = vec!["y", "x"].into_iter().collect();
/// let both = concat(&[&a, &b]).unwrap();
/// let both = both.as_dictionary::<Int32Type>();
/// let values: Vec<_> = both.values().as_string::<i32>().iter().flatten().collect();
/// assert_eq!(values, ["x", "unused", "y"]);
/// let rows: Vec<_> = both.downcast_dict::<StringArray>().unwrap().into_iter().flatten().collect();
/// assert_eq!(rows, ["x", "x", "y", "x"]);
/// ```
pub fn concat(arrays: &[&dyn Array]) -> Result<ArrayRef, ArrowError> {
    let Some(first) = arrays.first() else {
        return arrow_select::concat::concat(arrays);
    };
    let data_type = first.data_type();
    if !has_dictionary(data_type) || arrays.iter().any(|a| a.data_type() != data_type) {
        return arrow_select::concat::concat(arrays); // its errors name mismatched types
    }
    match data_type {
        DataType::Dictionary(key, _) => {
            macro_rules! dictionaries {
                ($t:ty) => {
                    concat_dictionaries::<$t>(arrays)
                };
            }
            downcast_integer! {
                key.as_ref() => (dictionaries),
                _ => arrow_select::concat::concat(arrays),
            }
        }
        DataType::Struct(_) => concat_structs(arrays),
        _ => arrow_select::concat::concat(arrays),
    }
}

/// [`concat()`] for each column of `batches`, into one batch of `schema`; zero batches give an
/// empty batch. A schema without dictionaries goes to arrow-select's `concat_batches` as is.
pub fn concat_batches<'a>(
    schema: &SchemaRef,
    batches: impl IntoIterator<Item = &'a RecordBatch>,
) -> Result<RecordBatch, ArrowError> {
    let batches: Vec<&RecordBatch> = batches.into_iter().collect();
    if !schema
        .fields()
        .iter()
        .any(|f| has_dictionary(f.data_type()))
    {
        return arrow_select::concat::concat_batches(schema, batches);
    }
    if let [batch] = batches.as_slice() {
        return RecordBatch::clone(batch).with_schema(SchemaRef::clone(schema));
    }
    let rows = batches.iter().map(|b| b.num_rows()).sum();
    let columns = (0..schema.fields().len())
        .map(|i| {
            let column: Vec<&dyn Array> = batches.iter().map(|b| b.column(i).as_ref()).collect();
            match column.is_empty() {
                true => Ok(arrow_array::new_empty_array(schema.field(i).data_type())),
                false => concat(&column),
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    let options = RecordBatchOptions::new().with_row_count(Some(rows));
    RecordBatch::try_new_with_options(SchemaRef::clone(schema), columns, &options)
}

/// True if `data_type` is a dictionary or holds one at any depth.
pub fn has_dictionary(data_type: &DataType) -> bool {
    match data_type {
        DataType::Dictionary(..) => true,
        DataType::Struct(fields) => fields.iter().any(|f| has_dictionary(f.data_type())),
        DataType::Union(fields, _) => fields.iter().any(|(_, f)| has_dictionary(f.data_type())),
        DataType::List(f)
        | DataType::LargeList(f)
        | DataType::ListView(f)
        | DataType::LargeListView(f)
        | DataType::FixedSizeList(f, _)
        | DataType::Map(f, _) => has_dictionary(f.data_type()),
        DataType::RunEndEncoded(_, values) => has_dictionary(values.data_type()),
        _ => false,
    }
}

fn concat_dictionaries<K: ArrowDictionaryKeyType>(
    arrays: &[&dyn Array],
) -> Result<ArrayRef, ArrowError> {
    let dictionaries: Vec<&DictionaryArray<K>> =
        arrays.iter().map(|a| a.as_dictionary::<K>()).collect();
    let first = dictionaries[0].values();
    if dictionaries[1..]
        .iter()
        .all(|d| same_values(first, d.values()))
    {
        let keys: Vec<&dyn Array> = dictionaries.iter().map(|d| d.keys() as _).collect();
        let keys = arrow_select::concat::concat(&keys)?
            .as_primitive::<K>()
            .clone();
        return Ok(Arc::new(DictionaryArray::try_new(keys, Arc::clone(first))?));
    }
    let Some(union) = Union::<K>::of(&dictionaries) else {
        return arrow_select::concat::concat(arrays); // not keyable, or too many values
    };
    let values: Vec<&dyn Array> = dictionaries.iter().map(|d| d.values().as_ref()).collect();
    let values = arrow_select::interleave::interleave(&values, &union.sources)?;
    let len = arrays.iter().map(|a| a.len()).sum();
    let mut keys = Vec::with_capacity(len);
    for (d, mapping) in dictionaries.iter().zip(&union.mappings) {
        // a null slot's key may be anything: `get` keeps it in bounds
        keys.extend(d.keys().values().iter().map(|k| {
            mapping
                .get(k.as_usize())
                .copied()
                .unwrap_or(K::Native::usize_as(0))
        }));
    }
    let keys = PrimitiveArray::<K>::try_new(ScalarBuffer::from(keys), concat_nulls(arrays))?;
    Ok(Arc::new(DictionaryArray::try_new(keys, values)?))
}

/// The same values array, or equal values (`==` compares the data, not the buffers).
fn same_values(a: &ArrayRef, b: &ArrayRef) -> bool {
    if Arc::ptr_eq(a, b) {
        return true;
    }
    let (a, b) = (a.to_data(), b.to_data());
    a.ptr_eq(&b) || a == b
}

/// The union of some dictionaries' values: where each value of the result comes from, and
/// for each input, the new key of each of its values.
struct Union<K: ArrowDictionaryKeyType> {
    sources: Vec<(usize, usize)>,
    mappings: Vec<Vec<K::Native>>,
}

impl<K: ArrowDictionaryKeyType> Union<K> {
    /// `None` if the values' type has no byte form here or the key type cannot number them.
    fn of(dictionaries: &[&DictionaryArray<K>]) -> Option<Self> {
        let mut seen: HashMap<Option<&[u8]>, K::Native> = HashMap::new();
        let mut sources = Vec::new();
        let mut mappings = Vec::with_capacity(dictionaries.len());
        for (input, dictionary) in dictionaries.iter().enumerate() {
            let values = value_bytes(dictionary.values().as_ref())?;
            let mut mapping = Vec::with_capacity(values.len());
            for (index, value) in values.into_iter().enumerate() {
                let key = match seen.entry(value) {
                    Entry::Occupied(e) => *e.get(),
                    Entry::Vacant(e) => {
                        let key = K::Native::from_usize(sources.len())?;
                        sources.push((input, index));
                        *e.insert(key)
                    }
                };
                mapping.push(key);
            }
            mappings.push(mapping);
        }
        Some(Self { sources, mappings })
    }
}

/// Each value of `values` as bytes (`None` for a null), or `None` for a type without a byte
/// form here. Two values of one type are the same value if their bytes are: floats compare
/// by bits (`0.0` and `-0.0` are two values, a NaN equals itself).
fn value_bytes(values: &dyn Array) -> Option<Vec<Option<&[u8]>>> {
    const BOOLS: [&[u8]; 2] = [&[0], &[1]];
    let bytes = match values.data_type() {
        DataType::Utf8 => strings(values.as_string::<i32>().iter()),
        DataType::LargeUtf8 => strings(values.as_string::<i64>().iter()),
        DataType::Utf8View => strings(values.as_byte_view::<StringViewType>().iter()),
        DataType::Binary => values.as_binary::<i32>().iter().collect(),
        DataType::LargeBinary => values.as_binary::<i64>().iter().collect(),
        DataType::BinaryView => values.as_byte_view::<BinaryViewType>().iter().collect(),
        DataType::FixedSizeBinary(_) => values.as_fixed_size_binary().iter().collect(),
        DataType::Boolean => (values.as_boolean().iter())
            .map(|v| v.map(|b| BOOLS[usize::from(b)]))
            .collect(),
        t => {
            let width = t.primitive_width().filter(|_| t.is_primitive())?;
            downcast_primitive_array! {
                values => {
                    // a `ScalarBuffer` is sliced to its array: one `width` chunk per value
                    let bytes = values.values().inner().as_slice().chunks_exact(width);
                    bytes.enumerate().map(|(i, b)| values.is_valid(i).then_some(b)).collect()
                }
                _ => return None,
            }
        }
    };
    Some(bytes)
}

fn strings<'a>(values: impl Iterator<Item = Option<&'a str>>) -> Vec<Option<&'a [u8]>> {
    values.map(|v| v.map(str::as_bytes)).collect()
}

/// The validity of `arrays` one after another; `None` if no slot is null.
fn concat_nulls(arrays: &[&dyn Array]) -> Option<NullBuffer> {
    if arrays.iter().all(|a| a.nulls().is_none()) {
        return None;
    }
    let mut nulls = BooleanBufferBuilder::new(arrays.iter().map(|a| a.len()).sum());
    for array in arrays {
        match array.nulls() {
            Some(n) => nulls.append_buffer(n.inner()),
            None => nulls.append_n(array.len(), true),
        }
    }
    Some(NullBuffer::new(nulls.finish()))
}

/// A struct whose fields hold a dictionary: each field concatenated with [`concat()`].
fn concat_structs(arrays: &[&dyn Array]) -> Result<ArrayRef, ArrowError> {
    let structs: Vec<&StructArray> = arrays.iter().map(|a| a.as_struct()).collect();
    let DataType::Struct(fields) = arrays[0].data_type() else {
        unreachable!("called for structs only")
    };
    let columns = (0..fields.len())
        .map(|i| {
            // a sliced struct's columns are sliced with it
            let column: Vec<&dyn Array> = structs.iter().map(|s| s.column(i).as_ref()).collect();
            concat(&column)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let array = StructArray::try_new(fields.clone(), columns, concat_nulls(arrays))?;
    Ok(Arc::new(array))
}

#[cfg(test)]
mod tests {
    use arrow_array::types::{Int8Type, Int32Type, UInt8Type};
    use arrow_array::{Float64Array, Int64Array, ListArray, StringArray};
    use arrow_schema::{Field, Fields, Schema};

    use super::*;

    /// A dictionary array with exactly `values` as dictionary and `keys` (`None`: null).
    fn dict(values: &[&str], keys: &[Option<i32>]) -> ArrayRef {
        let keys = PrimitiveArray::<Int32Type>::from(keys.to_vec());
        let values: ArrayRef = Arc::new(StringArray::from(values.to_vec()));
        Arc::new(DictionaryArray::try_new(keys, values).unwrap())
    }

    fn values_of(array: &dyn Array) -> Vec<Option<String>> {
        let values = array.as_dictionary::<Int32Type>().values();
        let values = values.as_string::<i32>();
        values.iter().map(|v| v.map(str::to_owned)).collect()
    }

    /// The rows decoded: what a reader sees whatever the dictionary.
    fn rows_of(array: &dyn Array) -> Vec<Option<String>> {
        let dict = array.as_dictionary::<Int32Type>();
        let decoded = arrow_select::take::take(dict.values().as_ref(), dict.keys(), None).unwrap();
        decoded
            .as_string::<i32>()
            .iter()
            .map(|v| v.map(str::to_owned))
            .collect()
    }

    fn some(values: &[&str]) -> Vec<Option<String>> {
        values.iter().map(|v| Some(v.to_string())).collect()
    }

    #[test]
    fn one_shared_dictionary_is_kept_as_is() {
        let a = dict(&["a", "b", "unused"], &[Some(0), Some(1)]);
        let b = a.slice(1, 1);
        let got = concat(&[a.as_ref(), b.as_ref()]).unwrap();
        let got_values = got.as_dictionary::<Int32Type>().values();
        assert!(Arc::ptr_eq(
            got_values,
            a.as_dictionary::<Int32Type>().values()
        ));
        assert_eq!(rows_of(got.as_ref()), some(&["a", "b", "b"]));
    }

    #[test]
    fn equal_dictionaries_keep_the_first_without_a_remap() {
        let a = dict(&["a", "b", "unused"], &[Some(1)]);
        let b = dict(&["a", "b", "unused"], &[Some(0), None]);
        let got = concat(&[a.as_ref(), b.as_ref()]).unwrap();
        let got_values = got.as_dictionary::<Int32Type>().values();
        assert!(Arc::ptr_eq(
            got_values,
            a.as_dictionary::<Int32Type>().values()
        ));
        assert_eq!(
            rows_of(got.as_ref()),
            vec![Some("b".into()), Some("a".into()), None]
        );
    }

    #[test]
    fn different_dictionaries_give_their_union_in_first_seen_order() {
        let a = dict(&["x", "unused", "y"], &[Some(2), Some(0)]);
        let b = dict(
            &["z", "y", "x", "never"],
            &[Some(1), None, Some(0), Some(2)],
        );
        let got = concat(&[a.as_ref(), b.as_ref()]).unwrap();
        assert_eq!(
            values_of(got.as_ref()),
            some(&["x", "unused", "y", "z", "never"])
        );
        let rows = vec![Some("y"), Some("x"), Some("y"), None, Some("z"), Some("x")];
        let rows: Vec<_> = rows.into_iter().map(|v| v.map(str::to_owned)).collect();
        assert_eq!(rows_of(got.as_ref()), rows);
        assert_eq!(got.null_count(), 1);
    }

    #[test]
    fn a_value_repeated_within_an_input_appears_once() {
        let a = dict(&["x", "x", "y"], &[Some(0), Some(1), Some(2)]);
        let b = dict(&["y"], &[Some(0)]);
        let got = concat(&[a.as_ref(), b.as_ref()]).unwrap();
        assert_eq!(values_of(got.as_ref()), some(&["x", "y"]));
        assert_eq!(rows_of(got.as_ref()), some(&["x", "x", "y", "y"]));
    }

    #[test]
    fn a_null_value_in_a_dictionary_is_one_value() {
        let keys = PrimitiveArray::<Int32Type>::from(vec![0, 1]);
        let values: ArrayRef = Arc::new(StringArray::from(vec![None, Some("a")]));
        let a: ArrayRef = Arc::new(DictionaryArray::try_new(keys.clone(), values).unwrap());
        let values: ArrayRef = Arc::new(StringArray::from(vec![Some("b"), None]));
        let b: ArrayRef = Arc::new(DictionaryArray::try_new(keys, values).unwrap());
        let got = concat(&[a.as_ref(), b.as_ref()]).unwrap();
        assert_eq!(
            values_of(got.as_ref()),
            vec![None, Some("a".into()), Some("b".into())]
        );
        assert_eq!(
            got.as_dictionary::<Int32Type>().keys().values(),
            &[0, 1, 2, 0]
        );
    }

    #[test]
    fn primitive_values_compare_by_bits() {
        let floats = |v: Vec<f64>| -> ArrayRef {
            let keys = PrimitiveArray::<Int8Type>::from(vec![0]);
            let values: ArrayRef = Arc::new(Float64Array::from(v));
            Arc::new(DictionaryArray::try_new(keys, values).unwrap())
        };
        let a = floats(vec![1.5, 0.0, f64::NAN]);
        let b = floats(vec![-0.0, f64::NAN, 1.5]);
        let got = concat(&[a.as_ref(), b.as_ref()]).unwrap();
        let got = got.as_dictionary::<Int8Type>();
        let values = got
            .values()
            .as_primitive::<arrow_array::types::Float64Type>();
        assert_eq!(values.len(), 4, "{values:?}"); // 1.5, 0.0, NaN, -0.0
        assert_eq!(got.keys().values(), &[0, 3]);
    }

    #[test]
    fn too_many_values_for_the_key_type_fall_back_to_arrow() {
        let bytes = |range: std::ops::Range<i64>| -> ArrayRef {
            let keys = PrimitiveArray::<UInt8Type>::from(vec![0, 1]);
            let values: ArrayRef = Arc::new(Int64Array::from_iter_values(range));
            Arc::new(DictionaryArray::try_new(keys, values).unwrap())
        };
        let (a, b) = (bytes(0..200), bytes(200..400));
        let got = concat(&[a.as_ref(), b.as_ref()]).unwrap();
        let got = got.as_dictionary::<UInt8Type>();
        let rows = arrow_select::take::take(got.values().as_ref(), got.keys(), None).unwrap();
        assert_eq!(
            rows.as_ref(),
            &Int64Array::from(vec![0, 1, 200, 201]) as &dyn Array
        );
    }

    #[test]
    fn a_dictionary_inside_a_struct_is_concatenated_the_same_way() {
        let strukt = |d: ArrayRef| -> ArrayRef {
            let field = Arc::new(Field::new("d", d.data_type().clone(), true));
            Arc::new(StructArray::try_new(Fields::from(vec![field]), vec![d], None).unwrap())
        };
        let a = strukt(dict(&["x", "unused"], &[Some(0)]));
        let b = strukt(dict(&["y", "x"], &[Some(0), Some(1)]));
        let got = concat(&[a.as_ref(), b.as_ref()]).unwrap();
        let inner = got.as_struct().column(0);
        assert_eq!(values_of(inner.as_ref()), some(&["x", "unused", "y"]));
        assert_eq!(rows_of(inner.as_ref()), some(&["x", "y", "x"]));
    }

    #[test]
    fn a_dictionary_inside_a_list_falls_back_to_arrow() {
        let list = |d: ArrayRef| -> ArrayRef {
            let field = Arc::new(Field::new("item", d.data_type().clone(), true));
            let offsets = arrow_buffer::OffsetBuffer::from_lengths([d.len()]);
            Arc::new(ListArray::try_new(field, offsets, d, None).unwrap())
        };
        let a = list(dict(&["x"], &[Some(0)]));
        let b = list(dict(&["y"], &[Some(0)]));
        let got = concat(&[a.as_ref(), b.as_ref()]).unwrap();
        let values = got.as_list::<i32>().values();
        assert_eq!(rows_of(values.as_ref()), some(&["x", "y"]));
    }

    #[test]
    fn batches_concatenate_column_by_column() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("n", DataType::Int64, false),
            Field::new("d", dict(&[], &[]).data_type().clone(), true),
        ]));
        let batch = |n: Vec<i64>, d: ArrayRef| {
            RecordBatch::try_new(Arc::clone(&schema), vec![Arc::new(Int64Array::from(n)), d])
                .unwrap()
        };
        let a = batch(vec![1], dict(&["x", "unused"], &[Some(0)]));
        let b = batch(vec![2, 3], dict(&["y"], &[Some(0), None]));
        let got = concat_batches(&schema, [&a, &b]).unwrap();
        assert_eq!(got.num_rows(), 3);
        assert_eq!(
            got.column(0).as_ref(),
            &Int64Array::from(vec![1, 2, 3]) as &dyn Array
        );
        assert_eq!(
            values_of(got.column(1).as_ref()),
            some(&["x", "unused", "y"])
        );
        let none = concat_batches(&schema, []).unwrap();
        assert_eq!((none.num_rows(), none.schema()), (0, Arc::clone(&schema)));
    }

    #[test]
    fn types_without_dictionaries_go_to_arrow() {
        assert!(!has_dictionary(&DataType::Utf8));
        assert!(has_dictionary(&DataType::List(Arc::new(Field::new(
            "item",
            dict(&[], &[]).data_type().clone(),
            true
        )))));
        let a: ArrayRef = Arc::new(Int64Array::from(vec![1]));
        let b: ArrayRef = Arc::new(StringArray::from(vec!["x"]));
        let error = concat(&[a.as_ref(), b.as_ref()]).unwrap_err();
        assert!(
            error.to_string().contains("different data types"),
            "{error}"
        );
    }
}
