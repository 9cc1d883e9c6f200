//! Reading the schema record that opens a run file (format 2, `format.rs`) from a [`Source`].
//!
//! A segment read does not use it: the writer's schema message is kept in memory with every
//! index entry. It makes a run file describe itself, and the `segment_decode` fuzz target
//! reads it from untrusted bytes to check it is refused cleanly when damaged.

use arrow_buffer::Buffer;

use crate::format::{
    SCHEMA_HEADER_LEN, SCHEMA_TRAILER_LEN, schema_record_len, schema_record_message,
};

use super::source::{Fault, Source};

/// The schema message of the run file in `source`, once its schema record's frame and CRC32C
/// are checked.
pub(crate) fn read_schema_record<S: Source + ?Sized>(source: &S) -> Result<Buffer, Fault> {
    let mut header = [0u8; SCHEMA_HEADER_LEN];
    source.read_at(&mut header, 0)?;
    // bounded by `MAX_SCHEMA_MESSAGE` before it is allocated
    let len = schema_record_len(&header).map_err(Fault::Corrupt)?;
    let total = SCHEMA_HEADER_LEN + len + SCHEMA_TRAILER_LEN;
    let mut copy = Vec::new();
    // in memory: checked where it is (nothing allocated for a forged length)
    let record = match source.bytes_at(0, total) {
        Some(record) => record,
        None => {
            copy.resize(total, 0);
            source.read_at(&mut copy, 0)?;
            &copy[..]
        }
    };
    let message = schema_record_message(record).map_err(Fault::Corrupt)?;
    Ok(Buffer::from_vec(message.to_vec()))
}
