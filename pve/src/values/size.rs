//! Sizes in PVE's units, as pve-common's `src/PVE/JSONSchema.pm` reads them (`parse_size`:
//! `^(\d+(\.\d+)?)([KMGT](?:iB)?)?$`, a bare number is bytes, units are powers of 1024) and
//! writes them (`format_size`: the largest unit that divides the size, else bytes).
//!
//! A drive's `size=` is kept in this form (`print_drive` prints its `disk-size` through
//! `format_size`), so `2048M` and `2G` are one size.

use std::fmt;
use std::str::FromStr;

use super::error::ValueError;

/// A size in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Size(pub u64);

impl Size {
    /// Bytes.
    pub fn bytes(self) -> u64 {
        self.0
    }

    /// `n` GiB.
    pub fn gib(count: u64) -> Size {
        Size(count << 30)
    }
}

/// Why a size could not be read exactly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SizeError {
    /// Not `parse_size`'s grammar.
    Grammar,
    /// More bytes than a `u64` holds.
    TooLarge,
    /// A fraction of a byte (`0.3K`), which `parse_size` would cut.
    Fraction,
}

/// Reads `parse_size`'s grammar: the bytes (a fraction of a byte cut) and whether none was.
fn read(value: &str) -> Result<(u64, bool), SizeError> {
    let unit_at = value
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(value.len());
    let (number, unit) = value.split_at(unit_at);
    let shift = match unit {
        "" => 0,
        "K" | "KiB" => 10,
        "M" | "MiB" => 20,
        "G" | "GiB" => 30,
        "T" | "TiB" => 40,
        _ => return Err(SizeError::Grammar),
    };
    let (whole, frac) = match number.split_once('.') {
        Some((w, f)) if !f.is_empty() => (w, f),
        Some(_) => return Err(SizeError::Grammar),
        None => (number, ""),
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || (!frac.is_empty() && !digits(frac)) {
        return Err(SizeError::Grammar);
    }
    let whole: u128 = whole.parse().map_err(|_| SizeError::TooLarge)?;
    // 30 digits of fraction are beyond any unit's bytes.
    let frac = &frac[..frac.len().min(30)];
    let (share, exact) = if frac.is_empty() {
        (0, true)
    } else {
        let f: u128 = frac.parse().map_err(|_| SizeError::Grammar)?;
        let scale = 10u128.pow(frac.len() as u32);
        ((f << shift) / scale, (f << shift).is_multiple_of(scale))
    };
    let bytes = whole
        .checked_shl(shift)
        .filter(|b| b >> shift == whole)
        .and_then(|b| b.checked_add(share))
        .and_then(|b| u64::try_from(b).ok())
        .ok_or(SizeError::TooLarge)?;
    Ok((bytes, exact))
}

impl Size {
    /// Reads `parse_size`'s grammar and says how it fails; a fraction of a byte is
    /// [`SizeError::Fraction`] here, where `parse_size` would cut it.
    pub fn parse_exact(value: &str) -> Result<Size, SizeError> {
        match read(value)? {
            (bytes, true) => Ok(Size(bytes)),
            (_, false) => Err(SizeError::Fraction),
        }
    }
}

impl FromStr for Size {
    type Err = ValueError;

    /// `parse_size`: digits, an optional decimal fraction, an optional `K`/`M`/`G`/`T` (or
    /// `KiB` … `TiB`); the product is cut to whole bytes (Perl's `int`).
    fn from_str(value: &str) -> Result<Size, ValueError> {
        read(value).map(|(bytes, _)| Size(bytes)).map_err(|_| {
            ValueError::new(
                "size",
                format!("value does not look like a valid disk size: {value}"),
            )
        })
    }
}

impl fmt::Display for Size {
    /// `format_size`: `T`, `G`, `M` or `K` when the size is a whole number of it, else bytes
    /// (and `0T` for nothing, as its divisions fall through).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bytes = self.0;
        if !bytes.is_multiple_of(1024) {
            return write!(f, "{bytes}");
        }
        let mut value = bytes / 1024;
        for unit in ["K", "M", "G"] {
            if !value.is_multiple_of(1024) {
                return write!(f, "{value}{unit}");
            }
            value /= 1024;
        }
        write!(f, "{value}T")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn size(text: &str) -> u64 {
        text.parse::<Size>().unwrap().0
    }

    #[test]
    fn reads_pve_spellings() {
        assert_eq!(size("2G"), 2 << 30);
        assert_eq!(size("2GiB"), 2 << 30);
        assert_eq!(size("2048M"), 2 << 30);
        assert_eq!(size("3584M"), 3584 << 20);
        assert_eq!(size("1.5G"), 3 << 29);
        assert_eq!(size("4194304"), 4 << 20);
        assert_eq!(size("1T"), 1 << 40);
        assert_eq!(size("10K"), 10 << 10);
        // int($size * 1024): a fraction of a byte is cut.
        assert_eq!(size("0.3K"), 307);
        for bad in [
            "", "G", "2g", "2 G", "-1G", "1.G", ".5G", "2GB", "1e3", "2P",
        ] {
            assert!(bad.parse::<Size>().is_err(), "{bad}");
        }
    }

    #[test]
    fn prints_as_format_size() {
        for (bytes, text) in [
            (2u64 << 30, "2G"),
            (3584 << 20, "3584M"),
            (1 << 40, "1T"),
            (1536 << 30, "1536G"),
            (10 << 10, "10K"),
            (4 << 20, "4M"),
            (1000, "1000"),
            // format_size(0) falls through every unit.
            (0, "0T"),
            (5 << 40, "5T"),
        ] {
            assert_eq!(Size(bytes).to_string(), text);
        }
        assert_eq!(Size(size("2048M")).to_string(), "2G");
        assert_eq!(Size(size("2097152K")).to_string(), "2G");
    }
}
