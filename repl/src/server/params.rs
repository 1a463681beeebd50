//! Parameters of the extended protocol (`$1`, `$2`, ...). The types announced to the client
//! are the ones it declared, else the ones DataFusion infers from where each placeholder
//! stands, else text. Bound values become scalars that replace the placeholders in the
//! logical plan (`weir_planner::session::bind_params`): they are never pasted into SQL text.

use chrono::{NaiveDate, NaiveDateTime};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::ScalarValue;
use pgwire::api::portal::Portal;
use pgwire::api::Type;
use pgwire::error::PgWireResult;
use rust_decimal::Decimal;
use weir_connectors::pg_types::pg_type;

/// The type of each parameter as the server announces it (ParameterDescription).
pub fn announced(declared: &[Option<Type>], inferred: &[Option<DataType>]) -> Vec<Type> {
    inferred
        .iter()
        .enumerate()
        .map(|(i, t)| {
            declared
                .get(i)
                .cloned()
                .flatten()
                .or_else(|| t.as_ref().map(pg_type))
                .unwrap_or(Type::TEXT)
        })
        .collect()
}

/// The bound values of a portal, read by their announced types; NULL stays a typeless NULL
/// (DataFusion types it by the placeholder).
pub fn values<S: Clone>(portal: &Portal<S>, types: &[Type]) -> PgWireResult<Vec<ScalarValue>> {
    (0..portal.parameter_len())
        .map(|i| {
            let ty = types.get(i).cloned().unwrap_or(Type::UNKNOWN);
            let value = match ty {
                Type::BOOL => portal.parameter::<bool>(i, &ty)?.map(ScalarValue::from),
                Type::INT2 => portal.parameter::<i16>(i, &ty)?.map(ScalarValue::from),
                Type::INT4 => portal.parameter::<i32>(i, &ty)?.map(ScalarValue::from),
                Type::INT8 => portal.parameter::<i64>(i, &ty)?.map(ScalarValue::from),
                Type::FLOAT4 => portal.parameter::<f32>(i, &ty)?.map(ScalarValue::from),
                Type::FLOAT8 => portal.parameter::<f64>(i, &ty)?.map(ScalarValue::from),
                Type::NUMERIC => portal.parameter::<Decimal>(i, &ty)?.map(decimal),
                Type::TIMESTAMP => portal
                    .parameter::<NaiveDateTime>(i, &ty)?
                    .map(|v| timestamp(&v)),
                Type::DATE => portal.parameter::<NaiveDate>(i, &ty)?.map(date),
                _ => {
                    // Text, varchar, unknown: a string (cast to the placeholder's type).
                    let raw = portal.parameters.get(i).cloned().flatten();
                    raw.map(|b| ScalarValue::Utf8(Some(String::from_utf8_lossy(&b).into_owned())))
                }
            };
            Ok(value.unwrap_or(ScalarValue::Null))
        })
        .collect()
}

fn decimal(v: Decimal) -> ScalarValue {
    ScalarValue::Decimal128(Some(v.mantissa()), 38, v.scale() as i8)
}

fn timestamp(v: &NaiveDateTime) -> ScalarValue {
    let micros = v.and_utc().timestamp_micros();
    ScalarValue::TimestampMicrosecond(Some(micros), None)
}

fn date(v: NaiveDate) -> ScalarValue {
    let days = v.signed_duration_since(NaiveDate::default()).num_days();
    ScalarValue::Date32(Some(days as i32))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declared_types_win_then_inferred_then_text() {
        let declared = [Some(Type::INT4), None, None];
        let inferred = [Some(DataType::Int64), Some(DataType::Int64), None];
        assert_eq!(
            announced(&declared, &inferred),
            vec![Type::INT4, Type::INT8, Type::TEXT]
        );
    }

    #[test]
    fn values_keep_their_scale_and_epoch() {
        assert_eq!(
            decimal(Decimal::new(-12345, 2)),
            ScalarValue::Decimal128(Some(-12345), 38, 2)
        );
        let day = NaiveDate::from_ymd_opt(1970, 1, 2).unwrap();
        assert_eq!(date(day), ScalarValue::Date32(Some(1)));
        let t = day.and_hms_micro_opt(0, 0, 1, 5).unwrap();
        assert_eq!(
            timestamp(&t),
            ScalarValue::TimestampMicrosecond(Some(86_401_000_005), None)
        );
    }
}
