//! The advice a caller gives for the client's error messages, and how it is added: a leaf,
//! because authentication and answer reading both word errors with it.

/// Advice the caller adds to the client's error messages, in its own words: the client knows
/// what failed, the caller knows what its user can set (the module layer names its options).
/// An empty hint adds nothing.
#[derive(Clone, Debug, Default)]
pub struct Hints {
    /// After a TLS failure (an untrusted or unexpected certificate).
    pub tls: String,
    /// After a failed connection (refused, unresolvable, unreachable).
    pub connect: String,
    /// The name of the per-request timeout, for "no answer within …".
    pub timeout: String,
    /// The name of the requests a controller's runs send at once, for a deadline reached
    /// waiting for one of them.
    pub concurrency: String,
    /// After a refused password login.
    pub login: String,
    /// After a refused API token.
    pub token: String,
    /// After a proxy that cannot be reached or refused the tunnel.
    pub proxy: String,
    /// After an answer that is not PVE's (a redirect, a non-JSON body).
    pub not_pve: String,
}

/// `text` followed by `sep` and the hint, or `text` alone when there is no hint.
pub(super) fn hinted(text: String, sep: &str, hint: &str, end: &str) -> String {
    if hint.is_empty() {
        text
    } else {
        format!("{text}{sep}{hint}{end}")
    }
}
