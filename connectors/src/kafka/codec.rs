//! Record batches on the wire: decoded whatever codec the producer chose, encoded with the
//! sink's `compression`.
//!
//! zstd goes through the `zstd` crate with the features Arrow's IPC reader already builds it
//! with; kafka-protocol's own `zstd` feature would turn on zstd's default features and
//! rebuild Arrow, DataFusion and RocksDB's bundled zstd for no gain.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::compression::{Compressor, Decompressor, Gzip, Lz4, Snappy};
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, RecordSet,
};

/// zstd's default level, as Kafka's producer uses.
const ZSTD_LEVEL: i32 = 3;

/// Decodes the one record batch `batch` holds.
pub(crate) fn decode(batch: &Bytes) -> anyhow::Result<RecordSet> {
    RecordBatchDecoder::decode_with_custom_compression(&mut batch.clone(), Some(decompress))
}

fn rest(buf: &mut Bytes) -> anyhow::Result<Bytes> {
    Ok(buf.copy_to_bytes(buf.remaining()))
}

fn decompress(buf: &mut Bytes, compression: Compression) -> anyhow::Result<Bytes> {
    match compression {
        Compression::None => rest(buf),
        Compression::Gzip => Gzip::decompress(buf, rest),
        Compression::Snappy => Snappy::decompress(buf, rest),
        Compression::Lz4 => Lz4::decompress(buf, rest),
        Compression::Zstd => {
            let out = zstd::stream::decode_all(buf.clone().reader())?;
            buf.advance(buf.remaining());
            Ok(Bytes::from(out))
        }
    }
}

/// Encodes `records` as version-2 record batches into `buf`.
pub(crate) fn encode(
    buf: &mut BytesMut,
    records: &[Record],
    compression: Compression,
) -> anyhow::Result<()> {
    RecordBatchEncoder::encode_with_custom_compression(
        buf,
        records.iter(),
        &RecordEncodeOptions {
            version: 2,
            compression,
        },
        Some(compress),
    )
}

fn compress(
    plain: &mut BytesMut,
    out: &mut BytesMut,
    compression: Compression,
) -> anyhow::Result<()> {
    let copy = |tmp: &mut BytesMut| {
        tmp.put_slice(plain);
        Ok(())
    };
    match compression {
        Compression::None => {
            out.put_slice(plain);
            Ok(())
        }
        Compression::Gzip => Gzip::compress(out, copy),
        Compression::Snappy => Snappy::compress(out, copy),
        Compression::Lz4 => Lz4::compress(out, copy),
        Compression::Zstd => {
            let packed = zstd::bulk::compress(plain, ZSTD_LEVEL)?;
            out.put_slice(&packed);
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use indexmap::IndexMap;
    use kafka_protocol::records::TimestampType;

    fn records(n: usize) -> Vec<Record> {
        (0..n)
            .map(|i| Record {
                delete_horizon: false,
                transactional: false,
                control: false,
                partition_leader_epoch: 0,
                producer_id: -1,
                producer_epoch: -1,
                timestamp_type: TimestampType::Creation,
                offset: i as i64,
                // Records share a batch only while offset - sequence stays the same.
                sequence: i as i32,
                timestamp: 1_000 + i as i64,
                key: Some(Bytes::from(format!("k{i}"))),
                value: Some(Bytes::from(format!(
                    "{{\"n\": {i}, \"pad\": \"{}\"}}",
                    "x".repeat(i % 50)
                ))),
                headers: IndexMap::new(),
            })
            .collect()
    }

    #[test]
    fn every_codec_round_trips() {
        let input = records(300);
        for c in [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let mut buf = BytesMut::new();
            encode(&mut buf, &input, c).unwrap();
            let set = decode(&buf.freeze()).unwrap();
            assert_eq!(set.compression, c);
            assert_eq!(set.records.len(), input.len(), "{c:?}");
            for (a, b) in set.records.iter().zip(&input) {
                assert_eq!((a.offset, a.timestamp), (b.offset, b.timestamp), "{c:?}");
                assert_eq!((&a.key, &a.value), (&b.key, &b.value), "{c:?}");
            }
        }
    }
}
