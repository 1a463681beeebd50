//! Kafka records to Arrow rows: the value decoded as JSON, CSV or raw text, plus the record's
//! metadata (key, topic, partition, offset, timestamp, headers) in the columns the table names
//! with `include`.

use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, BinaryArray, Int32Array, Int64Array, StringArray, TimestampMillisecondArray,
};
use datafusion::arrow::compute::{cast, concat_batches};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use weir_engine::EngineError;

use super::consumer::FetchedRecord;
use crate::error::{ConnectorError, Result};
use crate::file::{format, BadRows, FileFormat};

/// How record values are written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ValueFormat {
    Json,
    Csv {
        delimiter: u8,
    },
    /// The whole value in one column (text or bytes).
    Raw,
}

impl ValueFormat {
    pub fn name(&self) -> &'static str {
        match self {
            ValueFormat::Json => "json",
            ValueFormat::Csv { .. } => "csv",
            ValueFormat::Raw => "raw",
        }
    }
}

/// Record metadata a column can hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Meta {
    Key,
    Topic,
    Partition,
    Offset,
    Timestamp,
    Headers,
}

impl Meta {
    const ALL: [(&'static str, Meta); 6] = [
        ("key", Meta::Key),
        ("topic", Meta::Topic),
        ("partition", Meta::Partition),
        ("offset", Meta::Offset),
        ("timestamp", Meta::Timestamp),
        ("headers", Meta::Headers),
    ];

    fn name(self) -> &'static str {
        Meta::ALL
            .iter()
            .find(|(_, m)| *m == self)
            .map_or("?", |(n, _)| n)
    }

    /// Whether a column of type `t` can hold this field.
    fn fits(self, t: &DataType) -> bool {
        match self {
            Meta::Key => matches!(
                t,
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Binary
            ),
            Meta::Topic | Meta::Headers => {
                matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
            }
            Meta::Partition | Meta::Offset => t.is_integer(),
            Meta::Timestamp => matches!(t, DataType::Timestamp(..)),
        }
    }
}

/// What each column of the table is filled from.
#[derive(Debug, Clone)]
pub struct RowLayout {
    pub schema: SchemaRef,
    /// The columns decoded from the value, in table order.
    pub value_schema: SchemaRef,
    /// Per table column: `Ok(i)` value column i, `Err(meta)` a metadata field.
    sources: Vec<std::result::Result<usize, Meta>>,
    pub format: ValueFormat,
    /// Table columns filled from the value that no query reads: not decoded, nulls.
    pub unread: Vec<usize>,
    /// The same as indexes of `value_schema`.
    unread_values: Vec<usize>,
}

impl RowLayout {
    /// `include`: `field [AS column], ...` with fields key, topic, partition, offset,
    /// timestamp, headers; a field without AS goes to the column `kafka_<field>`.
    pub fn new(
        table: &str,
        schema: SchemaRef,
        include: Option<&str>,
        format: ValueFormat,
    ) -> Result<Self> {
        let mut metas: Vec<(String, Meta)> = Vec::new();
        for item in include.unwrap_or("").split(',').map(str::trim) {
            if item.is_empty() {
                continue;
            }
            let words: Vec<&str> = item.split_whitespace().collect();
            let (field, column) = match words.as_slice() {
                [f] => (*f, format!("kafka_{}", f.to_ascii_lowercase())),
                [f, kw, c] if kw.eq_ignore_ascii_case("as") => {
                    (*f, c.trim_matches('"').to_string())
                }
                _ => {
                    return Err(ConnectorError::InvalidOption {
                        option: "include".into(),
                        value: item.into(),
                        reason: "expected `field [AS column]`".into(),
                    })
                }
            };
            let meta = Meta::ALL
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(field))
                .map(|(_, m)| *m)
                .ok_or_else(|| ConnectorError::InvalidOption {
                    option: "include".into(),
                    value: field.into(),
                    reason: "expected key, topic, partition, offset, timestamp or headers".into(),
                })?;
            let Ok(f) = schema.field_with_name(&column) else {
                return Err(ConnectorError::Schema(format!(
                    "table {table}: include '{}' goes to column '{column}', which the column list \
                     does not have (declare it, or write `{} AS <column>`)",
                    meta.name(),
                    meta.name()
                )));
            };
            if !meta.fits(f.data_type()) {
                return Err(ConnectorError::Schema(format!(
                    "table {table}: column '{column}' ({}) cannot hold the Kafka {} (use {})",
                    f.data_type(),
                    meta.name(),
                    match meta {
                        Meta::Key => "VARCHAR or BYTEA",
                        Meta::Topic | Meta::Headers => "VARCHAR",
                        Meta::Partition | Meta::Offset => "INT or BIGINT",
                        Meta::Timestamp => "TIMESTAMP",
                    }
                )));
            }
            if metas.iter().any(|(c, _)| c == &column) {
                return Err(ConnectorError::InvalidOption {
                    option: "include".into(),
                    value: column,
                    reason: "two fields go to the same column".into(),
                });
            }
            metas.push((column, meta));
        }
        let mut value_fields = Vec::new();
        let mut sources = Vec::new();
        for f in schema.fields() {
            match metas.iter().find(|(c, _)| c == f.name()) {
                Some((_, m)) => sources.push(Err(*m)),
                None => {
                    sources.push(Ok(value_fields.len()));
                    value_fields.push(f.as_ref().clone());
                }
            }
        }
        if format == ValueFormat::Raw {
            let ok = value_fields.len() == 1
                && matches!(
                    value_fields[0].data_type(),
                    DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Binary
                );
            if !ok {
                return Err(ConnectorError::Schema(format!(
                    "table {table}: format 'raw' puts the whole value in one VARCHAR or BYTEA \
                     column; the table has {} value columns",
                    value_fields.len()
                )));
            }
        }
        Ok(Self {
            schema,
            value_schema: Arc::new(Schema::new(value_fields)),
            sources,
            format,
            unread: Vec::new(),
            unread_values: Vec::new(),
        })
    }

    /// This layout leaving out the value columns among `unread` (table columns no query
    /// reads; nullable ones): a JSON or CSV value's fields there are not parsed, and a value
    /// that does not fit such a column's type is not a bad record. A raw value is always
    /// checked (a VARCHAR one must be UTF-8), and metadata columns cost nothing to fill.
    pub fn without_columns(&self, unread: &[usize]) -> Self {
        let mut out = self.clone();
        if self.format == ValueFormat::Raw {
            return out;
        }
        out.unread = crate::projection::nullable_unread(&self.schema, unread)
            .into_iter()
            .filter(|&i| self.sources[i].is_ok())
            .collect();
        out.unread_values = out
            .unread
            .iter()
            .filter_map(|&i| self.sources[i].ok())
            .collect();
        out
    }

    /// The rows of `records` (all of one partition) as one batch. A value that does not
    /// decode fails with topic, partition and offset, or is skipped and counted.
    pub fn decode(
        &self,
        table: &str,
        topic: &str,
        partition: i32,
        records: &[FetchedRecord],
        bad_rows: BadRows,
        skipped: &mut u64,
    ) -> std::result::Result<RecordBatch, EngineError> {
        let (values, kept) =
            self.decode_values(table, topic, partition, records, bad_rows, skipped)?;
        let kept: Vec<&FetchedRecord> = kept.into_iter().map(|i| &records[i]).collect();
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(self.sources.len());
        for (field, source) in self.schema.fields().iter().zip(&self.sources) {
            let column: ArrayRef = match source {
                Ok(i) => Arc::clone(values.column(*i)),
                Err(meta) => meta_column(*meta, topic, partition, &kept, field)?,
            };
            columns.push(column);
        }
        Ok(RecordBatch::try_new(Arc::clone(&self.schema), columns)?)
    }

    /// Decodes the values; returns them and the indices of the records they came from.
    fn decode_values(
        &self,
        table: &str,
        topic: &str,
        partition: i32,
        records: &[FetchedRecord],
        bad_rows: BadRows,
        skipped: &mut u64,
    ) -> std::result::Result<(RecordBatch, Vec<usize>), EngineError> {
        let bad = |r: &FetchedRecord, why: String| {
            EngineError::BadInput(format!(
                "table {table}: topic '{topic}' partition {partition} offset {}: {why} \
                 (set bad_rows = 'skip' to skip such records)",
                r.offset
            ))
        };
        let mut present = Vec::with_capacity(records.len());
        for (i, r) in records.iter().enumerate() {
            if r.value.is_some() {
                present.push(i);
            } else if bad_rows == BadRows::Fail {
                return Err(bad(r, "the record has no value (a tombstone)".into()));
            } else {
                *skipped += 1;
            }
        }
        if self.format == ValueFormat::Raw {
            let field = &self.value_schema.fields()[0];
            let mut kept = Vec::with_capacity(present.len());
            let column: ArrayRef = if *field.data_type() == DataType::Binary {
                kept = present.clone();
                Arc::new(BinaryArray::from_iter_values(
                    present
                        .iter()
                        .map(|&i| records[i].value.as_deref().unwrap_or_default()),
                ))
            } else {
                let mut texts = Vec::with_capacity(present.len());
                for &i in &present {
                    let v = records[i].value.as_deref().unwrap_or_default();
                    match std::str::from_utf8(v) {
                        Ok(s) => {
                            texts.push(s);
                            kept.push(i);
                        }
                        Err(_) if bad_rows == BadRows::Skip => *skipped += 1,
                        Err(_) => return Err(bad(&records[i], "the value is not UTF-8".into())),
                    }
                }
                cast(&StringArray::from(texts), field.data_type())?
            };
            let batch = RecordBatch::try_new(Arc::clone(&self.value_schema), vec![column])?;
            return Ok((batch, kept));
        }
        let format = match self.format {
            ValueFormat::Json => FileFormat::Json,
            ValueFormat::Csv { delimiter } => FileFormat::Csv {
                header: false,
                delimiter,
            },
            ValueFormat::Raw => unreachable_raw()?,
        };
        let line = |i: usize| {
            let v = records[i].value.as_deref().unwrap_or_default();
            let v = v.strip_suffix(b"\n").unwrap_or(v);
            v.strip_suffix(b"\r").unwrap_or(v)
        };
        let mut joined = Vec::new();
        for &i in &present {
            joined.extend_from_slice(line(i));
            joined.push(b'\n');
        }
        let unread = &self.unread_values;
        if let Ok(batch) = format.decode_columns(&self.value_schema, &joined, present.len(), unread)
        {
            return Ok((batch, present));
        }
        // Something in there is bad: decode one by one to find it.
        let mut good = Vec::new();
        let mut kept = Vec::new();
        for &i in &present {
            let mut one = line(i).to_vec();
            one.push(b'\n');
            match format.decode_columns(&self.value_schema, &one, 1, unread) {
                Ok(b) => {
                    good.push(b);
                    kept.push(i);
                }
                Err(e) if bad_rows == BadRows::Fail => {
                    return Err(bad(
                        &records[i],
                        format::describe_error(&e, &self.value_schema),
                    ))
                }
                Err(_) => *skipped += 1,
            }
        }
        Ok((concat_batches(&self.value_schema, &good)?, kept))
    }
}

fn unreachable_raw() -> std::result::Result<FileFormat, EngineError> {
    Err(EngineError::Internal(
        "raw values take their own path".into(),
    ))
}

fn meta_column(
    meta: Meta,
    topic: &str,
    partition: i32,
    records: &[&FetchedRecord],
    field: &Field,
) -> std::result::Result<ArrayRef, EngineError> {
    let column: ArrayRef = match meta {
        Meta::Key => {
            if *field.data_type() == DataType::Binary {
                Arc::new(BinaryArray::from_iter(
                    records.iter().map(|r| r.key.as_deref()),
                ))
            } else {
                Arc::new(StringArray::from_iter(records.iter().map(|r| {
                    r.key
                        .as_deref()
                        .map(|k| String::from_utf8_lossy(k).into_owned())
                })))
            }
        }
        Meta::Topic => Arc::new(StringArray::from(vec![topic; records.len()])),
        Meta::Partition => Arc::new(Int32Array::from(vec![partition; records.len()])),
        Meta::Offset => Arc::new(Int64Array::from_iter_values(
            records.iter().map(|r| r.offset),
        )),
        Meta::Timestamp => Arc::new(TimestampMillisecondArray::from_iter_values(
            records.iter().map(|r| r.timestamp),
        )),
        Meta::Headers => Arc::new(StringArray::from_iter_values(records.iter().map(|r| {
            let obj: serde_json::Map<String, serde_json::Value> = r
                .headers
                .iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        v.as_deref()
                            .map(|v| serde_json::Value::String(String::from_utf8_lossy(v).into()))
                            .unwrap_or(serde_json::Value::Null),
                    )
                })
                .collect();
            serde_json::Value::Object(obj).to_string()
        }))),
    };
    let target = match (meta, field.data_type()) {
        (Meta::Timestamp, DataType::Timestamp(unit, tz)) => DataType::Timestamp(*unit, tz.clone()),
        (_, t) => t.clone(),
    };
    if column.data_type() == &target {
        Ok(column)
    } else {
        Ok(cast(&column, &target)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use datafusion::arrow::array::Array;
    use datafusion::arrow::util::pretty::pretty_format_batches;

    fn record(offset: i64, value: Option<&str>) -> FetchedRecord {
        FetchedRecord {
            offset,
            batch_base: offset,
            timestamp: 1_700_000_000_000 + offset,
            key: Some(Bytes::from(format!("k{offset}"))),
            value: value.map(|v| Bytes::from(v.to_string())),
            headers: vec![("h".into(), Some(Bytes::from_static(b"x")))],
        }
    }

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("auction", DataType::Int64, true),
            Field::new("kafka_offset", DataType::Int64, true),
            Field::new("price", DataType::Int64, true),
            Field::new(
                "ts",
                DataType::Timestamp(datafusion::arrow::datatypes::TimeUnit::Nanosecond, None),
                true,
            ),
            Field::new("k", DataType::Utf8, true),
        ]))
    }

    #[test]
    fn values_and_metadata_fill_their_columns() {
        let layout = RowLayout::new(
            "bids",
            schema(),
            Some("offset, timestamp AS ts, key AS k"),
            ValueFormat::Json,
        )
        .unwrap();
        let records = vec![
            record(5, Some("{\"auction\": 1, \"price\": 10}\n")),
            record(6, Some("{\"auction\": 2, \"price\": 20}")),
        ];
        let mut skipped = 0;
        let batch = layout
            .decode("bids", "t", 0, &records, BadRows::Fail, &mut skipped)
            .unwrap();
        let text = pretty_format_batches(&[batch]).unwrap().to_string();
        assert!(
            text.contains("| 1       | 5            | 10    | 2023-11-14T22:13:20.005 | k5 |"),
            "{text}"
        );
        assert!(
            text.contains("| 2       | 6            | 20    | 2023-11-14T22:13:20.006 | k6 |"),
            "{text}"
        );
    }

    /// Value columns no query reads are nulls and not parsed (JSON and CSV), the rest and the
    /// metadata columns as before; a raw value is checked whatever is read.
    #[test]
    fn value_columns_nobody_reads_are_not_decoded() {
        let csv_schema = Arc::new(Schema::new(vec![
            Field::new("auction", DataType::Int64, true),
            Field::new("kafka_offset", DataType::Int64, true),
            Field::new("price", DataType::Int64, true),
        ]));
        for (format, table_schema, values) in [
            (
                ValueFormat::Json,
                schema(),
                [
                    "{\"auction\": 1, \"price\": 10, \"ts\": \"2024-01-01T00:00:00\"}",
                    "{\"auction\": 2, \"price\": \"ten\", \"ts\": \"2024-01-01T00:00:01\"}",
                ],
            ),
            (
                ValueFormat::Csv { delimiter: b',' },
                csv_schema,
                ["1,10", "2,ten"],
            ),
        ] {
            let include = match format {
                ValueFormat::Json => "offset, key AS k",
                _ => "offset",
            };
            let layout = RowLayout::new("bids", table_schema, Some(include), format).unwrap();
            let records = vec![record(5, Some(values[0])), record(6, Some(values[1]))];
            let mut skipped = 0;
            // Record 6's price is not a number: bad while price is read.
            let err = layout
                .decode("bids", "t", 0, &records, BadRows::Fail, &mut skipped)
                .unwrap_err()
                .to_string();
            assert!(err.contains("offset 6") && err.contains("price"), "{err}");
            let price = layout.schema.index_of("price").unwrap();
            let narrowed = layout.without_columns(&[price, 1]);
            // The metadata column (1) is filled all the same.
            assert_eq!(narrowed.unread, vec![price]);
            let batch = narrowed
                .decode("bids", "t", 0, &records, BadRows::Fail, &mut skipped)
                .unwrap();
            assert_eq!(skipped, 0);
            assert_eq!(batch.schema(), layout.schema);
            assert_eq!(batch.column(price).null_count(), 2);
            let whole = layout
                .decode("bids", "t", 0, &records[..1], BadRows::Fail, &mut skipped)
                .unwrap();
            let first = batch.slice(0, 1);
            for i in (0..batch.num_columns()).filter(|&i| i != price) {
                assert_eq!(first.column(i), whole.column(i), "column {i}");
            }
            assert_eq!(
                batch.column(0).as_ref(),
                &Int64Array::from(vec![1, 2]) as &dyn Array
            );
        }
        let raw_schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Utf8, true)]));
        let raw = RowLayout::new("r", raw_schema, None, ValueFormat::Raw).unwrap();
        assert!(raw.without_columns(&[0]).unread.is_empty());
    }

    #[test]
    fn a_bad_value_names_topic_partition_and_offset_or_is_skipped() {
        let layout = RowLayout::new(
            "bids",
            schema(),
            Some("offset, timestamp AS ts, key AS k"),
            ValueFormat::Json,
        )
        .unwrap();
        let records = vec![
            record(5, Some("{\"auction\": 1, \"price\": 10}")),
            record(6, Some("{\"auction\": oops}")),
            record(7, None),
            record(8, Some("{\"auction\": 3, \"price\": 30}")),
        ];
        let mut skipped = 0;
        let err = layout
            .decode("bids", "t", 2, &records, BadRows::Fail, &mut skipped)
            .unwrap_err()
            .to_string();
        assert!(err.contains("topic 't' partition 2 offset"), "{err}");
        let batch = layout
            .decode("bids", "t", 2, &records, BadRows::Skip, &mut skipped)
            .unwrap();
        assert_eq!(batch.num_rows(), 2);
        assert_eq!(skipped, 2);
        let offsets = batch
            .column(1)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap();
        assert_eq!(offsets.values().to_vec(), vec![5, 8]);
    }

    #[test]
    fn include_errors_name_the_column() {
        let err = RowLayout::new("bids", schema(), Some("partition"), ValueFormat::Json)
            .unwrap_err()
            .to_string();
        assert!(err.contains("kafka_partition"), "{err}");
        let err = RowLayout::new("bids", schema(), Some("timestamp AS k"), ValueFormat::Json)
            .unwrap_err()
            .to_string();
        assert!(err.contains("cannot hold the Kafka timestamp"), "{err}");
        let err = RowLayout::new("bids", schema(), None, ValueFormat::Raw)
            .unwrap_err()
            .to_string();
        assert!(err.contains("one VARCHAR or BYTEA"), "{err}");
    }
}
