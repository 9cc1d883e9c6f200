//! The byte layout of a run file (format 2); see `docs/spill-format.md`.
//!
//! A run file opens with the run's schema, once, then holds one framed segment per partition:
//!
//! ```text
//! schema record (n + 24 bytes, at offset 0)
//!   magic "ASHSCHEM" | version u16 | reserved u16 | n u32 | Arrow IPC schema message (n bytes)
//!   | crc32c u32 | magic "SEND"
//! segment:
//!   header  (16 bytes)  magic "ASHSPILL" | version u16 | compression u16 | partition u32
//!   payload (n bytes)   Arrow IPC dictionary and record batch messages, nothing else
//!   trailer (32 bytes)  payload_len u64 | rows u64 | batches u64 | crc32c u32 | magic "SEND"
//! ```
//! All integers little-endian. Each CRC32C covers its record up to (not including) the CRC
//! field.

/// First bytes of every segment.
pub(crate) const HEADER_MAGIC: [u8; 8] = *b"ASHSPILL";
/// Last bytes of every segment.
pub(crate) const TRAILER_MAGIC: [u8; 4] = *b"SEND";
/// Format version written in every header; the only one read.
pub(crate) const VERSION: u16 = 2;
/// Header length in bytes.
pub(crate) const HEADER_LEN: usize = 16;
/// Trailer length in bytes.
pub(crate) const TRAILER_LEN: usize = 32;
/// Bytes of the trailer covered by the CRC (everything before the CRC field).
pub(crate) const TRAILER_CRC_COVERED: usize = 24;
/// Frame overhead per segment.
pub(crate) const FRAME_LEN: u64 = (HEADER_LEN + TRAILER_LEN) as u64;

/// A segment header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub(crate) compression: u16,
    pub(crate) partition: u32,
}

impl Header {
    pub(crate) fn encode(&self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        out[0..8].copy_from_slice(&HEADER_MAGIC);
        out[8..10].copy_from_slice(&VERSION.to_le_bytes());
        out[10..12].copy_from_slice(&self.compression.to_le_bytes());
        out[12..16].copy_from_slice(&self.partition.to_le_bytes());
        out
    }

    /// Parses a header, checking magic and version.
    pub(crate) fn decode(bytes: &[u8; HEADER_LEN]) -> Result<Self, String> {
        if bytes[0..8] != HEADER_MAGIC {
            return Err("bad segment header magic".into());
        }
        check_version(u16::from_le_bytes([bytes[8], bytes[9]]))?;
        Ok(Self {
            compression: u16::from_le_bytes([bytes[10], bytes[11]]),
            partition: u32::from_le_bytes([bytes[12], bytes[13], bytes[14], bytes[15]]),
        })
    }
}

/// Refuses any format but this one, naming the version found: spill files never outlive the
/// process that wrote them, so a build reads only the format it writes.
fn check_version(version: u16) -> Result<(), String> {
    if version == VERSION {
        Ok(())
    } else {
        Err(format!(
            "spill format version {version}; this build reads only format {VERSION}"
        ))
    }
}

/// First bytes of a run file: its schema record.
pub(crate) const SCHEMA_MAGIC: [u8; 8] = *b"ASHSCHEM";
/// Schema record bytes before the schema message.
pub(crate) const SCHEMA_HEADER_LEN: usize = 16;
/// Schema record bytes after the schema message: CRC32C and end magic.
pub(crate) const SCHEMA_TRAILER_LEN: usize = 8;
/// The longest schema message a schema record may declare: a bound checked before anything
/// is allocated for a record read from untrusted bytes (a schema of thousands of columns is
/// well under it).
pub(crate) const MAX_SCHEMA_MESSAGE: u32 = 64 * 1024 * 1024;

/// The schema record that opens a run file, around `message` (the run's encoded IPC schema
/// message).
pub(crate) fn encode_schema_record(message: &[u8]) -> Result<Vec<u8>, String> {
    let len = u32::try_from(message.len())
        .ok()
        .filter(|&n| n <= MAX_SCHEMA_MESSAGE)
        .ok_or_else(|| format!("schema message of {} bytes is too long", message.len()))?;
    let mut out = Vec::with_capacity(message.len() + SCHEMA_HEADER_LEN + SCHEMA_TRAILER_LEN);
    out.extend_from_slice(&SCHEMA_MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(message);
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&TRAILER_MAGIC);
    Ok(out)
}

/// The schema message length a schema record's header declares, checking magic and version.
// only the fuzz targets and tests read a schema record: segment reads use the writer's copy
#[cfg(any(test, feature = "test-utils"))]
pub(crate) fn schema_record_len(header: &[u8; SCHEMA_HEADER_LEN]) -> Result<usize, String> {
    if header[0..8] != SCHEMA_MAGIC {
        return Err("bad schema record magic at the start of the run file".into());
    }
    check_version(u16::from_le_bytes([header[8], header[9]]))?;
    let len = u32::from_le_bytes([header[12], header[13], header[14], header[15]]);
    if len > MAX_SCHEMA_MESSAGE {
        return Err(format!("schema record declares a {len}-byte message"));
    }
    Ok(len as usize)
}

/// The schema message of a whole schema record (`schema_record_len` checked on its header):
/// checks its CRC32C and end magic.
// only the fuzz targets and tests read a schema record: segment reads use the writer's copy
#[cfg(any(test, feature = "test-utils"))]
pub(crate) fn schema_record_message(record: &[u8]) -> Result<&[u8], String> {
    let body_end = record
        .len()
        .checked_sub(SCHEMA_TRAILER_LEN)
        .filter(|&end| end >= SCHEMA_HEADER_LEN)
        .ok_or("schema record shorter than its frame")?;
    let trailer = &record[body_end..];
    if trailer[4..8] != TRAILER_MAGIC {
        return Err("bad schema record end magic (torn or overwritten)".into());
    }
    let stored = u32::from_le_bytes([trailer[0], trailer[1], trailer[2], trailer[3]]);
    let crc = crc32c::crc32c(&record[..body_end]);
    if stored != crc {
        return Err(format!(
            "schema record checksum mismatch: record has {stored:08x}, bytes give {crc:08x}"
        ));
    }
    Ok(&record[SCHEMA_HEADER_LEN..body_end])
}

/// A segment trailer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Trailer {
    pub(crate) payload_len: u64,
    pub(crate) rows: u64,
    pub(crate) batches: u64,
    pub(crate) crc: u32,
}

impl Trailer {
    /// The trailer bytes covered by the CRC.
    pub(crate) fn covered(payload_len: u64, rows: u64, batches: u64) -> [u8; TRAILER_CRC_COVERED] {
        let mut out = [0u8; TRAILER_CRC_COVERED];
        out[0..8].copy_from_slice(&payload_len.to_le_bytes());
        out[8..16].copy_from_slice(&rows.to_le_bytes());
        out[16..24].copy_from_slice(&batches.to_le_bytes());
        out
    }

    pub(crate) fn encode(&self) -> [u8; TRAILER_LEN] {
        let mut out = [0u8; TRAILER_LEN];
        out[..TRAILER_CRC_COVERED].copy_from_slice(&Self::covered(
            self.payload_len,
            self.rows,
            self.batches,
        ));
        out[24..28].copy_from_slice(&self.crc.to_le_bytes());
        out[28..32].copy_from_slice(&TRAILER_MAGIC);
        out
    }

    /// Parses a trailer, checking its magic. The CRC is checked by the caller.
    pub(crate) fn decode(bytes: &[u8; TRAILER_LEN]) -> Result<Self, String> {
        if bytes[28..32] != TRAILER_MAGIC {
            return Err("bad segment trailer magic (torn or overwritten segment)".into());
        }
        let u64_at = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&bytes[i..i + 8]);
            u64::from_le_bytes(b)
        };
        Ok(Self {
            payload_len: u64_at(0),
            rows: u64_at(8),
            batches: u64_at(16),
            crc: u32::from_le_bytes([bytes[24], bytes[25], bytes[26], bytes[27]]),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_and_trailer_round_trip() {
        let header = Header {
            compression: 2,
            partition: 77,
        };
        assert_eq!(Header::decode(&header.encode()), Ok(header));
        let trailer = Trailer {
            payload_len: 1 << 40,
            rows: 5,
            batches: 1,
            crc: 0xdead_beef,
        };
        assert_eq!(Trailer::decode(&trailer.encode()), Ok(trailer));
    }

    #[test]
    fn bad_magic_and_version_are_rejected() {
        let mut bytes = Header {
            compression: 0,
            partition: 1,
        }
        .encode();
        bytes[8] = 1;
        let refused = Header::decode(&bytes).unwrap_err();
        assert!(refused.contains("version 1"), "{refused}");
        bytes[8] = 9;
        assert!(Header::decode(&bytes).is_err());
        bytes[0] = b'x';
        assert!(Header::decode(&bytes).is_err());
        let mut bytes = Trailer {
            payload_len: 0,
            rows: 0,
            batches: 0,
            crc: 0,
        }
        .encode();
        bytes[31] = 0;
        assert!(Trailer::decode(&bytes).is_err());
    }

    #[test]
    fn schema_record_round_trips_and_damage_is_refused() {
        let message = b"\xff\xff\xff\xff\x08\0\0\0schema..";
        let record = encode_schema_record(message).unwrap();
        assert_eq!(record.len(), message.len() + 24);
        let header: [u8; SCHEMA_HEADER_LEN] = record[..SCHEMA_HEADER_LEN].try_into().unwrap();
        assert_eq!(schema_record_len(&header), Ok(message.len()));
        assert_eq!(schema_record_message(&record), Ok(&message[..]));
        for at in 0..record.len() {
            let mut bytes = record.clone();
            bytes[at] ^= 1;
            let header: [u8; SCHEMA_HEADER_LEN] = bytes[..SCHEMA_HEADER_LEN].try_into().unwrap();
            let refused =
                schema_record_len(&header).is_err() || schema_record_message(&bytes).is_err();
            assert!(refused, "byte {at}");
        }
        let mut old = record.clone();
        old[8] = 1;
        let header: [u8; SCHEMA_HEADER_LEN] = old[..SCHEMA_HEADER_LEN].try_into().unwrap();
        assert!(
            schema_record_len(&header)
                .unwrap_err()
                .contains("version 1")
        );
    }
}
