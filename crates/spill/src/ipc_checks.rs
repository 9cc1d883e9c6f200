//! Two checks of a record batch or dictionary message against its stream's schema, made on
//! verified bytes just before arrow-ipc decodes them. arrow-ipc 60 makes them itself; 59 (the
//! `arrow_59` feature, DataFusion 55's arrow) does not and panics instead, which the decoder
//! would catch, but a reader should refuse bad bytes by checking them, not by unwinding (and
//! under `panic = "abort"` nothing unwinds):
//!
//! - a validity bitmap shorter than its array (59: an assertion in `BooleanBuffer::new`, for
//!   a struct's);
//! - a union's type ids: in the schema message, declared ids that are negative, repeated or
//!   not one per child (59: an `expect` converting the schema); in a batch, shorter than the
//!   array or naming a type the union does not declare (59: a slice past the end);
//! - in the schema message, a type or union mode the format does not define (59:
//!   `unimplemented!` and `panic!` converting the schema).
//!
//! The walk visits the message's field nodes and buffers in arrow-ipc's own order (depth
//! first; per type the buffers its reader takes). Buffers are known to lie inside the body
//! (`check_buffers` in `decode/verify.rs`). A compressed buffer's length is the uncompressed length
//! its prefix declares; a compressed union type-id buffer is not read (it would need
//! decompressing first; arrow-ipc checks the decompressed length).

use std::collections::VecDeque;

use arrow_schema::{DataType, Field, Schema, UnionFields, UnionMode};

type Check = Result<(), String>;

/// Checks the unions a schema `message` declares (other messages pass).
pub(crate) fn check_schema_message(message: arrow_ipc::Message<'_>) -> Check {
    let fields = message
        .header_as_schema()
        .and_then(|schema| schema.fields());
    let mut todo: Vec<arrow_ipc::Field<'_>> =
        fields.map(|f| f.iter().collect()).unwrap_or_default();
    while let Some(field) = todo.pop() {
        let children: Vec<_> = field
            .children()
            .map(|c| c.iter().collect())
            .unwrap_or_default();
        let type_type = field.type_type();
        if type_type == arrow_ipc::Type::NONE || !arrow_ipc::Type::ENUM_VALUES.contains(&type_type)
        {
            // 59: `unimplemented!` converting the schema
            return Err(format!("ipc schema declares an unknown type {type_type:?}"));
        }
        if let Some(union) = field.type_as_union() {
            let mode = union.mode();
            if mode != arrow_ipc::UnionMode::Sparse && mode != arrow_ipc::UnionMode::Dense {
                // 59: `panic!` converting the schema
                return Err(format!(
                    "ipc schema declares an unknown union mode {mode:?}"
                ));
            }
        }
        if let Some(ids) = field.type_as_union().and_then(|union| union.typeIds()) {
            // what arrow-ipc does with them (`as i8` included), without its `expect`
            let placeholders =
                (0..children.len()).map(|i| Field::new(i.to_string(), DataType::Null, true));
            UnionFields::try_new(ids.iter().map(|id| id as i8), placeholders)
                .map_err(|e| format!("ipc schema declares a bad union: {e}"))?;
        }
        todo.extend(children);
    }
    Ok(())
}

/// Checks the record batch or dictionary `message` (other messages pass) whose body is `body`,
/// in a stream of `schema`.
pub(crate) fn check_message(
    message: arrow_ipc::Message<'_>,
    body: &[u8],
    schema: &Schema,
) -> Check {
    if message.version() < arrow_ipc::MetadataVersion::V5 {
        return Ok(()); // a union's layout differs before V5; our writer writes V5
    }
    let (batch, fields): (_, Vec<Field>) = match message.header_type() {
        arrow_ipc::MessageHeader::RecordBatch => match message.header_as_record_batch() {
            Some(batch) => (
                batch,
                schema.fields().iter().map(|f| f.as_ref().clone()).collect(),
            ),
            None => return Ok(()),
        },
        arrow_ipc::MessageHeader::DictionaryBatch => {
            let Some(dictionary) = message.header_as_dictionary_batch() else {
                return Ok(());
            };
            let (Some(batch), Some(values)) = (
                dictionary.data(),
                dictionary_values(schema, dictionary.id()),
            ) else {
                // an unknown id is arrow-ipc's error to report
                return Ok(());
            };
            (batch, vec![Field::new("values", values, true)])
        }
        _ => return Ok(()),
    };
    let mut walk = Walk {
        nodes: batch
            .nodes()
            .map(|n| n.iter().copied().collect())
            .unwrap_or_default(),
        buffers: batch
            .buffers()
            .map(|b| b.iter().map(|b| (b.offset(), b.length())).collect())
            .unwrap_or_default(),
        variadic: batch
            .variadicBufferCounts()
            .map(|v| v.iter().collect())
            .unwrap_or_default(),
        compressed: batch.compression().is_some(),
        body,
    };
    for field in &fields {
        match walk.field(field.data_type()) {
            Some(checked) => checked?,
            // out of nodes or buffers: arrow-ipc reports that itself
            None => return Ok(()),
        }
    }
    Ok(())
}

/// The value type of the dictionary with `id` in `schema` (depth first, as arrow-ipc looks).
fn dictionary_values(schema: &Schema, id: i64) -> Option<DataType> {
    fn find(field: &Field, id: i64) -> Option<DataType> {
        #[allow(deprecated)] // arrow-ipc 59 and 60 still key dictionaries by this id
        let own = field.dict_id();
        match field.data_type() {
            DataType::Dictionary(_, values) if own == Some(id) => Some(values.as_ref().clone()),
            data_type => children(data_type).into_iter().find_map(|f| find(&f, id)),
        }
    }
    schema.fields().iter().find_map(|f| find(f, id))
}

/// The child fields of a nested type, in IPC order.
fn children(data_type: &DataType) -> Vec<Field> {
    match data_type {
        DataType::List(f)
        | DataType::LargeList(f)
        | DataType::ListView(f)
        | DataType::LargeListView(f)
        | DataType::FixedSizeList(f, _)
        | DataType::Map(f, _) => vec![f.as_ref().clone()],
        DataType::Struct(fields) => fields.iter().map(|f| f.as_ref().clone()).collect(),
        DataType::Union(fields, _) => fields.iter().map(|(_, f)| f.as_ref().clone()).collect(),
        DataType::RunEndEncoded(a, b) => vec![a.as_ref().clone(), b.as_ref().clone()],
        DataType::Dictionary(_, values) => children(values),
        _ => Vec::new(),
    }
}

struct Walk<'a> {
    nodes: VecDeque<arrow_ipc::FieldNode>,
    buffers: VecDeque<(i64, i64)>,
    variadic: VecDeque<i64>,
    compressed: bool,
    body: &'a [u8],
}

impl Walk<'_> {
    /// Walks one field; `None` when the message runs out of nodes or buffers first.
    fn field(&mut self, data_type: &DataType) -> Option<Check> {
        use DataType::*;
        let node = self.nodes.pop_front()?;
        let (len, nulls) = (node.length(), node.null_count());
        let validity = |walk: &mut Self| -> Option<Check> {
            let buffer = walk.buffers.pop_front()?;
            Some(walk.check_validity(buffer, len, nulls))
        };
        let result = match data_type {
            Null => Ok(()),
            Utf8 | Binary | LargeUtf8 | LargeBinary | ListView(_) | LargeListView(_) => {
                let r = validity(self)?;
                self.skip(2)?;
                r
            }
            Utf8View | BinaryView => {
                let r = validity(self)?;
                let extra = usize::try_from(self.variadic.pop_front()?).ok()?;
                self.skip(1 + extra)?;
                r
            }
            Struct(_) | FixedSizeList(..) => validity(self)?,
            Union(fields, mode) => {
                let ids = self.buffers.pop_front()?;
                if *mode == UnionMode::Dense {
                    self.skip(1)?;
                }
                let declared: Vec<i8> = fields.iter().map(|(id, _)| id).collect();
                self.check_type_ids(ids, len, &declared)
            }
            RunEndEncoded(..) => Ok(()),
            // primitives, booleans, fixed-size binary, dictionary keys, lists' offsets
            _ => {
                let r = validity(self)?;
                self.skip(1)?;
                r
            }
        };
        if result.is_err() {
            return Some(result);
        }
        for child in children_of_node(data_type) {
            let checked = self.field(child.data_type())?;
            if checked.is_err() {
                return Some(checked);
            }
        }
        Some(Ok(()))
    }

    fn skip(&mut self, buffers: usize) -> Option<()> {
        for _ in 0..buffers {
            self.buffers.pop_front()?;
        }
        Some(())
    }

    /// The bytes a buffer holds once decompressed (`None`: arrow-ipc refuses it itself).
    fn buffer_len(&self, (offset, length): (i64, i64)) -> Option<u64> {
        let length = u64::try_from(length).ok()?;
        if !self.compressed || length == 0 {
            return Some(length);
        }
        let start = usize::try_from(offset).ok()?;
        let prefix = self.body.get(start..start.checked_add(8)?)?;
        let declared = i64::from_le_bytes(prefix.try_into().ok()?);
        if declared == -1 {
            Some(length - 8)
        } else {
            u64::try_from(declared).ok()
        }
    }

    fn check_validity(&self, buffer: (i64, i64), len: i64, nulls: i64) -> Check {
        if nulls <= 0 {
            return Ok(()); // arrow-ipc reads no bitmap then
        }
        let Some(bytes) = self.buffer_len(buffer) else {
            return Ok(());
        };
        let needed = u64::try_from(len).unwrap_or(0).div_ceil(8);
        if bytes < needed {
            return Err(format!(
                "ipc validity bitmap of {bytes} bytes for an array of {len} values \
                 ({nulls} null) needs {needed}"
            ));
        }
        Ok(())
    }

    fn check_type_ids(&self, (offset, length): (i64, i64), len: i64, declared: &[i8]) -> Check {
        let len = usize::try_from(len).unwrap_or(0);
        let Some(start) = usize::try_from(offset).ok() else {
            return Ok(());
        };
        let raw = if self.compressed && length > 0 {
            let prefix = self.body.get(start..start.saturating_add(8));
            match prefix.map(|p| i64::from_le_bytes(p.try_into().unwrap_or([0; 8]))) {
                Some(-1) if length >= 8 => start + 8..start + length as usize,
                _ => return Ok(()), // compressed: not read here
            }
        } else {
            start..start + length.max(0) as usize
        };
        let ids = self.body.get(raw).unwrap_or_default();
        if ids.len() < len {
            return Err(format!(
                "ipc union type ids: {} bytes for an array of {len} values",
                ids.len()
            ));
        }
        if let Some(bad) = ids[..len]
            .iter()
            .map(|&b| b as i8)
            .find(|id| !declared.contains(id))
        {
            return Err(format!(
                "ipc union type id {bad} is not one of the union's {declared:?}"
            ));
        }
        Ok(())
    }
}

/// The children the IPC walk visits after a node's own buffers (a dictionary's values are in
/// their own dictionary message, not here).
fn children_of_node(data_type: &DataType) -> Vec<Field> {
    match data_type {
        DataType::Dictionary(..) => Vec::new(),
        other => children(other),
    }
}
