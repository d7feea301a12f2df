//! The error every value in [`crate::values`] reads into.
//!
//! Exists apart from [`crate::values::property`] so that the leaf values it uses ([`Number`],
//! [`Size`]) can report their errors without using the property-string engine back: the arrows
//! go `property` → `number`/`size` → `error`, never the reverse.
//!
//! [`Number`]: crate::values::number::Number
//! [`Size`]: crate::values::size::Size

use std::fmt;

/// A value PVE would refuse: what was read (the format's name) and why, in PVE's words where
/// PVE has them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValueError {
    /// The format or value being read (`drive`, `net`, `boot`, `size`, `sshkeys` …).
    pub format: &'static str,
    /// Why it is refused.
    pub message: String,
}

impl ValueError {
    /// An error reading `format`.
    pub fn new(format: &'static str, message: impl Into<String>) -> ValueError {
        ValueError {
            format,
            message: message.into(),
        }
    }
}

impl fmt::Display for ValueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} value: {}", self.format, self.message)
    }
}

impl std::error::Error for ValueError {}
