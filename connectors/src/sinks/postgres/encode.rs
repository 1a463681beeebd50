//! Rows of Arrow batches as the PostgreSQL sink sends them: every cell encoded once, in the
//! binary format of its target column's type when weir can produce exactly the value the
//! server would have parsed from weir's text form, else as that text form. A table whose
//! columns are all binary is written with `COPY ... (FORMAT binary)`, any other with
//! `COPY ... (FORMAT text)` (the server parses each value, as it did the old INSERT literals).

use std::fmt::Write;

use datafusion::arrow::array::{Array, ArrayRef, AsArray};
use datafusion::arrow::compute::{cast_with_options, CastOptions};
use datafusion::arrow::datatypes::{
    DataType, Date32Type, Decimal128Type, Float32Type, Float64Type, Int16Type, Int32Type,
    Int64Type, TimeUnit, TimestampMicrosecondType,
};
use datafusion::arrow::error::ArrowError;
use datafusion::arrow::record_batch::RecordBatch;

use crate::display::column_strings;
use crate::pg_types::Type;

/// Microseconds from 1970-01-01 to PostgreSQL's epoch, 2000-01-01.
const PG_EPOCH_MICROS: i64 = 946_684_800_000_000;
/// Days from 1970-01-01 to 2000-01-01.
const PG_EPOCH_DAYS: i32 = 10_957;

/// How one column is encoded.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Encoding {
    /// Weir's text form, as bytes (text and varchar columns take it in binary as well).
    Text,
    Bool,
    Int2,
    Int4,
    Int8,
    Float4,
    Float8,
    Numeric,
    Timestamp,
    Date,
    Bytea,
}

impl Encoding {
    /// The binary encoding of `arrow` values into a column of type `target`, when it gives
    /// the same value as the server parsing weir's text form; `None` otherwise.
    pub fn binary(arrow: &DataType, target: &Type) -> Option<Self> {
        use DataType as D;
        Some(match (arrow, target) {
            (_, t) if [Type::TEXT, Type::VARCHAR, Type::BPCHAR].contains(t) => Self::Text,
            (D::Boolean, &Type::BOOL) => Self::Bool,
            (a, &Type::INT2) if a.is_integer() => Self::Int2,
            (a, &Type::INT4) if a.is_integer() => Self::Int4,
            (a, &Type::INT8) if a.is_integer() => Self::Int8,
            (a, &Type::NUMERIC) if a.is_integer() => Self::Numeric,
            (D::Decimal128(_, s), &Type::NUMERIC) if *s >= 0 => Self::Numeric,
            (D::Float32, &Type::FLOAT4) => Self::Float4,
            (D::Float64, &Type::FLOAT8) => Self::Float8,
            (D::Timestamp(_, None), &Type::TIMESTAMP) => Self::Timestamp,
            (D::Timestamp(_, Some(_)), &Type::TIMESTAMPTZ) => Self::Timestamp,
            (D::Date32, &Type::DATE) => Self::Date,
            (D::Binary | D::LargeBinary | D::BinaryView, &Type::BYTEA) => Self::Bytea,
            _ => return None,
        })
    }
}

/// Encoded rows: cell `r * columns + c` is `bytes[start..start + len]`, or NULL when `len`
/// is negative.
#[derive(Debug, Default)]
pub struct EncodedRows {
    pub columns: usize,
    pub bytes: Vec<u8>,
    pub cells: Vec<(usize, i32)>,
}

impl EncodedRows {
    pub fn rows(&self) -> usize {
        self.cells.len().checked_div(self.columns).unwrap_or(0)
    }

    pub fn cell(&self, row: usize, column: usize) -> Option<&[u8]> {
        let (start, len) = self.cells[row * self.columns + column];
        (len >= 0).then(|| &self.bytes[start..start + len as usize])
    }

    /// Appends the rows of `batch`, column `c` encoded as `encodings[c]`.
    pub fn push(&mut self, batch: &RecordBatch, encodings: &[Encoding]) -> Result<(), ArrowError> {
        self.columns = encodings.len();
        let columns: Vec<Column> = batch
            .columns()
            .iter()
            .zip(encodings)
            .map(|(a, e)| Column::new(a, *e))
            .collect::<Result<_, _>>()?;
        self.cells.reserve(batch.num_rows() * columns.len());
        for row in 0..batch.num_rows() {
            for column in &columns {
                let start = self.bytes.len();
                let present = column.write(row, &mut self.bytes)?;
                let len = if present {
                    i32::try_from(self.bytes.len() - start)
                        .map_err(|_| ArrowError::ComputeError("value over 2 GB".into()))?
                } else {
                    -1
                };
                self.cells.push((start, len));
            }
        }
        Ok(())
    }

    /// The rows `rows` as a `COPY ... (FORMAT binary)` stream.
    pub fn binary_copy(&self, rows: impl Iterator<Item = usize>) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.bytes.len() + self.cells.len() * 4 + 64);
        out.extend_from_slice(b"PGCOPY\n\xff\r\n\0");
        out.extend_from_slice(&0i32.to_be_bytes());
        out.extend_from_slice(&0i32.to_be_bytes());
        for row in rows {
            out.extend_from_slice(&(self.columns as i16).to_be_bytes());
            for c in 0..self.columns {
                match self.cell(row, c) {
                    Some(v) => {
                        out.extend_from_slice(&(v.len() as i32).to_be_bytes());
                        out.extend_from_slice(v);
                    }
                    None => out.extend_from_slice(&(-1i32).to_be_bytes()),
                }
            }
        }
        out.extend_from_slice(&(-1i16).to_be_bytes());
        out
    }

    /// The rows `rows` as a `COPY ... (FORMAT text)` stream (every cell text).
    pub fn text_copy(&self, rows: impl Iterator<Item = usize>) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.bytes.len() + self.cells.len() * 2);
        for row in rows {
            for c in 0..self.columns {
                if c > 0 {
                    out.push(b'\t');
                }
                match self.cell(row, c) {
                    None => out.extend_from_slice(b"\\N"),
                    Some(v) => {
                        for &b in v {
                            match b {
                                b'\\' => out.extend_from_slice(b"\\\\"),
                                b'\n' => out.extend_from_slice(b"\\n"),
                                b'\r' => out.extend_from_slice(b"\\r"),
                                b'\t' => out.extend_from_slice(b"\\t"),
                                other => out.push(other),
                            }
                        }
                    }
                }
            }
            out.push(b'\n');
        }
        out
    }
}

/// One column of a batch, cast to what its encoding reads.
enum Column {
    Text(Vec<Option<String>>),
    Fixed(Encoding, ArrayRef),
    /// Decimal values and their scale.
    Numeric(ArrayRef, i8),
}

/// Casts that fail on overflow instead of giving NULL: a value the column cannot hold is the
/// data's fault, as the server's "out of range" was.
fn strict_cast(array: &ArrayRef, to: &DataType) -> Result<ArrayRef, ArrowError> {
    let options = CastOptions {
        safe: false,
        ..CastOptions::default()
    };
    cast_with_options(array, to, &options)
}

impl Column {
    fn new(array: &ArrayRef, encoding: Encoding) -> Result<Self, ArrowError> {
        Ok(match encoding {
            Encoding::Text => Self::Text(text_form(array)?),
            Encoding::Int2 => Self::Fixed(encoding, strict_cast(array, &DataType::Int16)?),
            Encoding::Int4 => Self::Fixed(encoding, strict_cast(array, &DataType::Int32)?),
            Encoding::Int8 => Self::Fixed(encoding, strict_cast(array, &DataType::Int64)?),
            Encoding::Numeric => match array.data_type() {
                DataType::Decimal128(_, s) => Self::Numeric(array.clone(), *s),
                _ => Self::Numeric(strict_cast(array, &DataType::Decimal128(38, 0))?, 0),
            },
            Encoding::Timestamp => Self::Fixed(encoding, timestamp_micros(array)?),
            Encoding::Bytea => Self::Fixed(encoding, strict_cast(array, &DataType::LargeBinary)?),
            Encoding::Bool | Encoding::Float4 | Encoding::Float8 | Encoding::Date => {
                Self::Fixed(encoding, array.clone())
            }
        })
    }

    /// Writes the value of `row`; false when it is NULL.
    fn write(&self, row: usize, out: &mut Vec<u8>) -> Result<bool, ArrowError> {
        match self {
            Self::Text(v) => match &v[row] {
                Some(s) => out.extend_from_slice(s.as_bytes()),
                None => return Ok(false),
            },
            Self::Fixed(_, a) | Self::Numeric(a, _) if a.is_null(row) => return Ok(false),
            Self::Fixed(encoding, a) => write_fixed(*encoding, a, row, out)?,
            Self::Numeric(a, scale) => {
                numeric(a.as_primitive::<Decimal128Type>().value(row), *scale, out)
            }
        }
        Ok(true)
    }
}

/// The binary form of a non-NULL value of a column cast for `encoding`.
fn write_fixed(
    encoding: Encoding,
    a: &ArrayRef,
    row: usize,
    out: &mut Vec<u8>,
) -> Result<(), ArrowError> {
    match encoding {
        Encoding::Bool => out.push(u8::from(a.as_boolean().value(row))),
        Encoding::Int2 => {
            out.extend_from_slice(&a.as_primitive::<Int16Type>().value(row).to_be_bytes())
        }
        Encoding::Int4 => {
            out.extend_from_slice(&a.as_primitive::<Int32Type>().value(row).to_be_bytes())
        }
        Encoding::Int8 => {
            out.extend_from_slice(&a.as_primitive::<Int64Type>().value(row).to_be_bytes())
        }
        Encoding::Float4 => {
            out.extend_from_slice(&a.as_primitive::<Float32Type>().value(row).to_be_bytes())
        }
        Encoding::Float8 => {
            out.extend_from_slice(&a.as_primitive::<Float64Type>().value(row).to_be_bytes())
        }
        Encoding::Timestamp => {
            let micros = a.as_primitive::<TimestampMicrosecondType>().value(row);
            out.extend_from_slice(&(micros - PG_EPOCH_MICROS).to_be_bytes())
        }
        Encoding::Date => {
            let days = a.as_primitive::<Date32Type>().value(row);
            out.extend_from_slice(&(days - PG_EPOCH_DAYS).to_be_bytes())
        }
        Encoding::Bytea => out.extend_from_slice(a.as_binary::<i64>().value(row)),
        Encoding::Text | Encoding::Numeric => {
            return Err(ArrowError::ComputeError(format!(
                "no fixed binary encoding for {encoding:?}"
            )))
        }
    }
    Ok(())
}

/// Weir's text form of each value, except bytes, which are written as PostgreSQL's `bytea`
/// input reads them (`\x` and hex digits; a text column keeps that spelling).
fn text_form(array: &ArrayRef) -> Result<Vec<Option<String>>, ArrowError> {
    if !matches!(
        array.data_type(),
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView
    ) {
        return column_strings(array);
    }
    let bytes = strict_cast(array, &DataType::LargeBinary)?;
    let bytes = bytes.as_binary::<i64>();
    Ok(bytes
        .iter()
        .map(|v| {
            v.map(|v| {
                let mut s = String::with_capacity(2 + 2 * v.len());
                s.push_str("\\x");
                for b in v {
                    let _ = write!(s, "{b:02x}");
                }
                s
            })
        })
        .collect())
}

/// Timestamps as microseconds, rounded as PostgreSQL rounds a parsed fraction (to the
/// nearest, ties to even), so that nanoseconds land where their text form would.
fn timestamp_micros(array: &ArrayRef) -> Result<ArrayRef, ArrowError> {
    let DataType::Timestamp(unit, tz) = array.data_type() else {
        return Err(ArrowError::CastError("not a timestamp".into()));
    };
    let to = DataType::Timestamp(TimeUnit::Microsecond, tz.clone());
    if *unit != TimeUnit::Nanosecond {
        return strict_cast(array, &to);
    }
    let nanos = array.as_primitive::<datafusion::arrow::datatypes::TimestampNanosecondType>();
    let micros: datafusion::arrow::array::TimestampMicrosecondArray = nanos.unary(|ns| {
        let (q, r) = (ns.div_euclid(1000), ns.rem_euclid(1000));
        if r > 500 || (r == 500 && q % 2 != 0) {
            q + 1
        } else {
            q
        }
    });
    Ok(std::sync::Arc::new(micros.with_timezone_opt(tz.clone())))
}

/// PostgreSQL's binary numeric: digit count, weight, sign, display scale, base-10000 digits.
fn numeric(value: i128, scale: i8, out: &mut Vec<u8>) {
    let scale = scale.max(0) as usize;
    let digits = value.unsigned_abs().to_string();
    let (int, frac) = if digits.len() > scale {
        digits.split_at(digits.len() - scale)
    } else {
        ("", digits.as_str())
    };
    let frac = format!("{frac:0>scale$}");
    let int = format!("{}{int}", "0".repeat((4 - int.len() % 4) % 4));
    let frac = format!("{frac}{}", "0".repeat((4 - frac.len() % 4) % 4));
    let group = |s: &str| -> Vec<i16> {
        s.as_bytes()
            .chunks(4)
            .map(|c| c.iter().fold(0i16, |n, d| n * 10 + i16::from(d - b'0')))
            .collect()
    };
    let mut groups = group(&int);
    let mut weight = groups.len() as i16 - 1;
    groups.extend(group(&frac));
    let leading = groups.iter().take_while(|g| **g == 0).count();
    groups.drain(..leading);
    weight -= leading as i16;
    while groups.last() == Some(&0) {
        groups.pop();
    }
    if groups.is_empty() {
        weight = 0;
    }
    let sign: u16 = if value < 0 && !groups.is_empty() {
        0x4000
    } else {
        0
    };
    out.extend_from_slice(&(groups.len() as i16).to_be_bytes());
    out.extend_from_slice(&weight.to_be_bytes());
    out.extend_from_slice(&sign.to_be_bytes());
    out.extend_from_slice(&(scale as i16).to_be_bytes());
    for g in groups {
        out.extend_from_slice(&g.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(value: i128, scale: i8) -> Vec<i16> {
        let mut out = Vec::new();
        numeric(value, scale, &mut out);
        out.chunks(2)
            .map(|c| i16::from_be_bytes([c[0], c[1]]))
            .collect()
    }

    #[test]
    fn numerics_in_base_10000() {
        // 12345.678 = 1 2345 . 6780: weight 1, dscale 3.
        assert_eq!(encoded(12_345_678, 3), vec![3, 1, 0, 3, 1, 2345, 6780]);
        assert_eq!(encoded(-5, 0), vec![1, 0, 0x4000, 0, 5]);
        assert_eq!(encoded(0, 2), vec![0, 0, 0, 2]);
        // 0.0001 = weight -1, one digit.
        assert_eq!(encoded(1, 4), vec![1, -1, 0, 4, 1]);
        assert_eq!(encoded(100_000_000, 0), vec![1, 2, 0, 0, 1]);
    }

    #[test]
    fn text_copy_escapes_and_marks_nulls() {
        let rows = EncodedRows {
            columns: 2,
            bytes: b"a\tb\\".to_vec(),
            cells: vec![(0, 4), (0, -1)],
        };
        assert_eq!(rows.text_copy(0..1), b"a\\tb\\\\\t\\N\n".to_vec());
    }
}
