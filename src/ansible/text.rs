//! Bad values as messages quote them: bounded in length and in double quotes, so that a huge
//! or binary value never floods a result. Used by the argument checks and the results alike.

/// A value quoted in a message: bounded (see [`bounded`]) and in double quotes.
pub fn quote(s: impl AsRef<str>) -> String {
    format!("{:?}", bounded(s.as_ref()))
}

/// A bad value as a message may quote it: at most 64 characters, then how long it was, so a
/// huge or binary value never floods the result.
pub fn bounded(s: &str) -> String {
    const MAX: usize = 64;
    if s.chars().count() <= MAX {
        return s.to_string();
    }
    let head: String = s.chars().take(MAX).collect();
    format!("{head}… ({} bytes)", s.len())
}
