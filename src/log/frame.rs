//! The frame: one Arrow IPC stream holding one record batch, behind a fixed
//! header with its offsets, event-time bounds and a CRC32C.
//!
//! ```text
//! 0  magic u32 "SLF1"     4  crc32c u32 (bytes 8.. end of payload)
//! 8  payload_len u32      12 row_count u32
//! 16 base_offset u64      24 ingested_at_us i64
//! 32 min_event_us i64     40 max_event_us i64
//! 48 payload: Arrow IPC stream (schema + one batch)
//! ```

use std::io::Cursor;

use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;
use arrow::record_batch::RecordBatch;

pub const MAGIC: u32 = 0x534C_4631;
pub const HEADER_LEN: usize = 48;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    pub payload_len: u32,
    pub rows: u32,
    pub base_offset: u64,
    pub ingested_at_us: i64,
    pub min_event_us: i64,
    pub max_event_us: i64,
}

/// Encodes a batch as a complete frame (header and payload).
pub fn encode(
    batch: &RecordBatch,
    base_offset: u64,
    ingested_at_us: i64,
    event_range: (i64, i64),
) -> Result<Vec<u8>, arrow::error::ArrowError> {
    let mut buf = vec![0u8; HEADER_LEN];
    {
        let mut writer = StreamWriter::try_new(&mut buf, batch.schema_ref())?;
        writer.write(batch)?;
        writer.finish()?;
    }
    let payload_len = (buf.len() - HEADER_LEN) as u32;
    buf[0..4].copy_from_slice(&MAGIC.to_le_bytes());
    buf[8..12].copy_from_slice(&payload_len.to_le_bytes());
    buf[12..16].copy_from_slice(&(batch.num_rows() as u32).to_le_bytes());
    buf[16..24].copy_from_slice(&base_offset.to_le_bytes());
    buf[24..32].copy_from_slice(&ingested_at_us.to_le_bytes());
    buf[32..40].copy_from_slice(&event_range.0.to_le_bytes());
    buf[40..48].copy_from_slice(&event_range.1.to_le_bytes());
    let crc = crc32c::crc32c(&buf[8..]);
    buf[4..8].copy_from_slice(&crc.to_le_bytes());
    Ok(buf)
}

/// Parses a frame header; `None` when the magic number is wrong.
pub fn parse_header(bytes: &[u8; HEADER_LEN]) -> Option<(FrameHeader, u32)> {
    let u32_at = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().unwrap_or([0; 4]));
    let u64_at = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().unwrap_or([0; 8]));
    if u32_at(0) != MAGIC {
        return None;
    }
    Some((
        FrameHeader {
            payload_len: u32_at(8),
            rows: u32_at(12),
            base_offset: u64_at(16),
            ingested_at_us: u64_at(24) as i64,
            min_event_us: u64_at(32) as i64,
            max_event_us: u64_at(40) as i64,
        },
        u32_at(4),
    ))
}

/// Checks the CRC of a whole frame (header bytes and payload).
pub fn crc_matches(header: &[u8; HEADER_LEN], payload: &[u8], expected: u32) -> bool {
    let crc = crc32c::crc32c_append(crc32c::crc32c(&header[8..]), payload);
    crc == expected
}

/// Decodes a frame payload into its record batch.
pub fn decode_payload(payload: &[u8]) -> Result<RecordBatch, arrow::error::ArrowError> {
    let mut reader = StreamReader::try_new(Cursor::new(payload), None)?;
    match reader.next() {
        Some(batch) => batch,
        None => Err(arrow::error::ArrowError::IpcError(
            "frame holds no record batch".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;

    #[test]
    fn frame_round_trip_and_crc() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int64, false),
            Field::new("b", DataType::Utf8, true),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(vec![1, 2, 3])),
                Arc::new(StringArray::from(vec![Some("x"), None, Some("z")])),
            ],
        )
        .unwrap();
        let mut bytes = encode(&batch, 42, 7, (1, 9)).unwrap();
        let header: [u8; HEADER_LEN] = bytes[..HEADER_LEN].try_into().unwrap();
        let (h, crc) = parse_header(&header).unwrap();
        assert_eq!(h.rows, 3);
        assert_eq!(h.base_offset, 42);
        assert_eq!((h.min_event_us, h.max_event_us), (1, 9));
        assert!(crc_matches(&header, &bytes[HEADER_LEN..], crc));
        assert_eq!(decode_payload(&bytes[HEADER_LEN..]).unwrap(), batch);
        let n = bytes.len();
        bytes[n - 3] ^= 1;
        assert!(!crc_matches(&header, &bytes[HEADER_LEN..], crc));
    }
}
