//! The segment frame around an Arrow IPC stream; see `docs/spill-format.md`.
//!
//! ```text
//! header  (16 bytes)  magic "ASHSPILL" | version u16 | compression u16 | partition u32
//! payload (n bytes)   Arrow IPC stream: schema, dictionaries, batches, end-of-stream marker
//! trailer (32 bytes)  payload_len u64 | rows u64 | batches u64 | crc32c u32 | magic "SEND"
//! ```
//! All integers little-endian. The CRC32C covers the header, the payload and the trailer up to
//! (not including) the CRC field.

/// First bytes of every segment.
pub(crate) const HEADER_MAGIC: [u8; 8] = *b"ASHSPILL";
/// Last bytes of every segment.
pub(crate) const TRAILER_MAGIC: [u8; 4] = *b"SEND";
/// Format version written in the header.
pub(crate) const VERSION: u16 = 1;
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
        let version = u16::from_le_bytes([bytes[8], bytes[9]]);
        if version != VERSION {
            return Err(format!("unsupported segment format version {version}"));
        }
        Ok(Self {
            compression: u16::from_le_bytes([bytes[10], bytes[11]]),
            partition: u32::from_le_bytes([bytes[12], bytes[13], bytes[14], bytes[15]]),
        })
    }
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
}
