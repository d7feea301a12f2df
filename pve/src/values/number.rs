//! `number` and `integer` keys (`cpulimit`, `cores`, `balloon` …): PVE answers them as
//! strings or numbers, and stores what was sent, so `2`, `2.0` and `+2` are one value. They
//! are read as pve-common's `check_type` reads them (`is_number`, `is_integer` in
//! `src/PVE/JSONSchema.pm`).

use std::fmt;
use std::str::FromStr;

use super::error::ValueError;

/// A number as PVE reads it, printed as it was written.
#[derive(Clone, Debug)]
pub struct Number {
    text: String,
    value: f64,
}

impl Number {
    /// The value.
    pub fn value(&self) -> f64 {
        self.value
    }
}

impl FromStr for Number {
    type Err = ValueError;

    /// `is_number`: `^[+-]?(\d+\.\d+|\d+\.|\.\d+|\d+)([eE][+-]?\d+)?$`.
    fn from_str(text: &str) -> Result<Number, ValueError> {
        let body = text.strip_prefix(['+', '-']).unwrap_or(text);
        let (mantissa, exponent) = match body.find(['e', 'E']) {
            Some(at) => (&body[..at], Some(&body[at + 1..])),
            None => (body, None),
        };
        let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        let mantissa_ok = match mantissa.split_once('.') {
            Some((whole, frac)) => {
                digits(whole) && digits(frac) && !(whole.is_empty() && frac.is_empty())
            }
            None => !mantissa.is_empty() && digits(mantissa),
        };
        let exponent_ok = exponent.is_none_or(|e| {
            let e = e.strip_prefix(['+', '-']).unwrap_or(e);
            !e.is_empty() && digits(e)
        });
        let value = text
            .parse::<f64>()
            .ok()
            .filter(|_| mantissa_ok && exponent_ok)
            .ok_or_else(|| {
                ValueError::new(
                    "number",
                    format!("type check ('number') failed - got '{text}'"),
                )
            })?;
        Ok(Number {
            text: text.to_string(),
            value,
        })
    }
}

impl PartialEq for Number {
    /// By value.
    fn eq(&self, other: &Number) -> bool {
        self.value == other.value
    }
}

impl fmt::Display for Number {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_by_value() {
        let number = |text: &str| text.parse::<Number>().unwrap();
        assert_eq!(number("2"), number("2.0"));
        assert_eq!(number("+2"), number("2."));
        assert_eq!(number("0.5"), number(".5"));
        assert_eq!(number("1e3"), number("1000"));
        assert_ne!(number("2"), number("2.5"));
        assert_eq!(number("2.0").to_string(), "2.0");
        for bad in ["", "two", "1,5", "inf", "NaN", "0x10", "."] {
            assert!(bad.parse::<Number>().is_err(), "{bad}");
        }
    }
}
