//! Percent-encoding for form bodies, query strings and PVE's `urlencoded` format (`sshkeys`).

/// Encodes like JavaScript's `encodeURIComponent`, which is what PVE's `urlencoded` format
/// accepts (`^[-%a-zA-Z0-9_.!~*'()]*$`): spaces become `%20`, never `+`.
pub fn url_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-_.!~*'()".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// One path segment, percent-encoded where a character would change the URL's structure
/// (`/`, `?`, `#`, `%`) or is not allowed in a path (spaces, controls, non-ASCII, `"<>\\^`{|}`).
/// `:`, `@` and `!` stay as they are (UPIDs and token ids are full of them). Every value put
/// into a request path goes through here: a node or storage named by the user, a UPID or a
/// node name a server sent.
pub fn segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        let keep = byte.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@".contains(&byte);
        if keep {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    if out == "." || out == ".." {
        return out.replace('.', "%2E");
    }
    out
}

/// `/nodes/{node}` with the node name encoded.
pub fn node_path(node: &str) -> String {
    format!("/nodes/{}", segment(node))
}

/// Encodes key/value pairs as `application/x-www-form-urlencoded`.
pub fn form(pairs: &[(String, String)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{}={}", url_encode(k), url_encode(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// Decodes percent-encoding (no `+` handling: PVE's `urlencoded` values use `%20`).
pub fn url_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(decoded) = text
                .get(i + 1..i + 3)
                .and_then(|hex| u8::from_str_radix(hex, 16).ok())
        {
            out.push(decoded);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A value as a message may quote it: [`bounded`] and in double quotes.
pub fn quote(text: impl AsRef<str>) -> String {
    format!("{:?}", bounded(text.as_ref()))
}

/// A value as a message may show it: at most 64 characters, then how long it was, so a huge
/// or binary value from a server or a setting never floods a message.
pub fn bounded(text: &str) -> String {
    const MAX: usize = 64;
    if text.chars().count() <= MAX {
        return text.to_string();
    }
    let head: String = text.chars().take(MAX).collect();
    format!("{head}… ({} bytes)", text.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_segments_keep_their_place() {
        assert_eq!(
            segment("UPID:pve1:0000ABCD:00000001:6B000000:qmstart:100:a#b?c@pve!t/x:"),
            "UPID:pve1:0000ABCD:00000001:6B000000:qmstart:100:a%23b%3Fc@pve!t%2Fx:"
        );
        assert_eq!(segment(".."), "%2E%2E");
        assert_eq!(segment("local-lvm"), "local-lvm");
        assert_eq!(segment("a b%"), "a%20b%25");
    }

    #[test]
    fn sshkeys_round_trip() {
        let keys = "ssh-ed25519 AAAAC3Nz+/= me@host\nssh-rsa AAAAB3 other";
        let enc = url_encode(keys);
        assert!(
            enc.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-%_.!~*'()".contains(&b)),
            "{enc}"
        );
        assert!(enc.contains("%20") && !enc.contains('+'));
        assert_eq!(url_decode(&enc), keys);
    }

    #[test]
    fn quoted_values_are_bounded() {
        assert_eq!(quote("a\"b"), r#""a\"b""#);
        let long = "x".repeat(100);
        assert_eq!(quote(&long), format!("\"{}… (100 bytes)\"", "x".repeat(64)));
    }

    #[test]
    fn form_encoding_doubles_percent() {
        let f = form(&[("sshkeys".into(), url_encode("a b"))]);
        assert_eq!(f, "sshkeys=a%2520b");
    }
}
