//! Cloud-init's `sshkeys`: public keys, one a line, URL-encoded (`format => 'urlencoded'`),
//! and checked before any write as PVE checks them.
//!
//! PVE checks them in `create_vm` and `update_vm_api` (qemu-server `src/PVE/API2/Qemu.pm`):
//! `uri_unescape`, then pve-common's `validate_ssh_public_keys` (`src/PVE/Tools.pm`) runs
//! `ssh-keygen -l -f` on each line that is not blank and refuses the whole list ("SSH public
//! key validation error") if any line fails. A module cannot run PVE's `ssh-keygen`, so
//! [`SshKey::parse`] checks what `ssh-keygen -l` checks on a line (OpenSSH's `sshkey_read`
//! after an optional `authorized_keys` options field):
//!
//! * the key type is one OpenSSH reads (`ssh-ed25519`, `ssh-rsa`, `ecdsa-sha2-nistp256/384/521`,
//!   the `sk-` security-key types and the `-cert-v01@openssh.com` certificates). `ssh-dss` is
//!   refused: PVE 9 runs OpenSSH 10 (Debian 13), which no longer reads DSA keys;
//! * the blob is base64, and the type it embeds is the type the line names;
//! * the blob holds that type's fields and nothing more: RSA's exponent and a modulus of at
//!   least 1024 bits (`SSH_RSA_MINIMUM_MODULUS_SIZE`), Ed25519's 32-byte key, ECDSA's curve
//!   (the one named) and its point, which for P-256 and P-384 must lie on the curve
//!   (`sshkey_ec_validate_public`; P-521 is checked for its shape only);
//! * a `#` comment line is refused (`ssh-keygen -l` reads it as "not a public key file").

use std::fmt;
use std::str::FromStr;

use crate::encode::{url_decode, url_encode};

use super::error::ValueError;

/// The key types OpenSSH reads, and the shape of their blob.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    Rsa,
    Ed25519,
    Ecdsa(&'static str, usize),
    SkEd25519,
    SkEcdsa,
    Certificate,
}

fn shape(key_type: &str) -> Option<Shape> {
    Some(match key_type {
        "ssh-rsa" => Shape::Rsa,
        "ssh-ed25519" => Shape::Ed25519,
        "ecdsa-sha2-nistp256" => Shape::Ecdsa("nistp256", 65),
        "ecdsa-sha2-nistp384" => Shape::Ecdsa("nistp384", 97),
        "ecdsa-sha2-nistp521" => Shape::Ecdsa("nistp521", 133),
        "sk-ssh-ed25519@openssh.com" => Shape::SkEd25519,
        "sk-ecdsa-sha2-nistp256@openssh.com" => Shape::SkEcdsa,
        "ssh-rsa-cert-v01@openssh.com"
        | "ssh-ed25519-cert-v01@openssh.com"
        | "ecdsa-sha2-nistp256-cert-v01@openssh.com"
        | "ecdsa-sha2-nistp384-cert-v01@openssh.com"
        | "ecdsa-sha2-nistp521-cert-v01@openssh.com"
        | "sk-ssh-ed25519-cert-v01@openssh.com"
        | "sk-ecdsa-sha2-nistp256-cert-v01@openssh.com" => Shape::Certificate,
        _ => return None,
    })
}

/// Standard base64 with padding, as OpenSSH writes a key's blob.
fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let value = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let bytes = text.as_bytes();
    if bytes.is_empty() || !bytes.len().is_multiple_of(4) {
        return None;
    }
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    for (i, chunk) in bytes.chunks(4).enumerate() {
        let last = i == bytes.len() / 4 - 1;
        let pad = chunk.iter().rev().take_while(|&&c| c == b'=').count();
        if pad > 2 || (pad > 0 && !last) {
            return None;
        }
        let mut n = 0u32;
        for &c in &chunk[..4 - pad] {
            n = (n << 6) | value(c)?;
        }
        n <<= 6 * pad as u32;
        let decoded = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&decoded[..3 - pad]);
    }
    Some(out)
}

/// Reads SSH wire strings (`u32` length, bytes) off a blob.
struct Wire<'a>(&'a [u8]);

impl<'a> Wire<'a> {
    fn string(&mut self) -> Option<&'a [u8]> {
        let len = u32::from_be_bytes(self.0.get(..4)?.try_into().ok()?) as usize;
        let body = self.0.get(4..4 + len)?;
        self.0 = &self.0[4 + len..];
        Some(body)
    }

    /// An `mpint`'s significant bits.
    fn mpint_bits(&mut self) -> Option<usize> {
        let body = self.string()?;
        let digits: &[u8] = match body.iter().position(|&b| b != 0) {
            Some(at) => &body[at..],
            None => &[],
        };
        Some(
            digits
                .first()
                .map_or(0, |b| digits.len() * 8 - b.leading_zeros() as usize),
        )
    }
}

/// True when `point` lies on the curve (P-256, P-384: an ECDH agreement with a fresh key
/// refuses any other point, as `sshkey_ec_validate_public` would).
fn on_curve(curve: &str, point: &[u8]) -> bool {
    use ring::agreement;
    let algorithm = match curve {
        "nistp256" => &agreement::ECDH_P256,
        "nistp384" => &agreement::ECDH_P384,
        _ => return point.first() == Some(&4),
    };
    let rng = ring::rand::SystemRandom::new();
    let Ok(mine) = agreement::EphemeralPrivateKey::generate(algorithm, &rng) else {
        return false;
    };
    let theirs = agreement::UnparsedPublicKey::new(algorithm, point);
    agreement::agree_ephemeral(mine, &theirs, |_| ()).is_ok()
}

/// Checks a blob against the type its line names.
fn check_blob(key_type: &str, shape: Shape, blob: &[u8]) -> Result<(), String> {
    let mut wire = Wire(blob);
    let embedded = wire.string().ok_or("its blob is not an SSH public key")?;
    if embedded != key_type.as_bytes() {
        return Err(format!(
            "the line names {key_type} but its blob holds a {} key",
            String::from_utf8_lossy(embedded)
        ));
    }
    let short = || "its blob is cut short".to_string();
    match shape {
        Shape::Rsa => {
            wire.mpint_bits().ok_or_else(short)?;
            let bits = wire.mpint_bits().ok_or_else(short)?;
            if bits < 1024 {
                return Err(format!(
                    "its RSA modulus has {bits} bits, fewer than the 1024 OpenSSH requires"
                ));
            }
        }
        Shape::Ed25519 | Shape::SkEd25519 => {
            let key = wire.string().ok_or_else(short)?;
            if key.len() != 32 {
                return Err(format!("its Ed25519 key has {} bytes, not 32", key.len()));
            }
            if shape == Shape::SkEd25519 {
                wire.string().ok_or_else(short)?;
            }
        }
        Shape::Ecdsa(curve, len) => {
            let named = wire.string().ok_or_else(short)?;
            if named != curve.as_bytes() {
                return Err(format!(
                    "it names the curve {}, not {curve}",
                    String::from_utf8_lossy(named)
                ));
            }
            let point = wire.string().ok_or_else(short)?;
            if point.len() != len || !on_curve(curve, point) {
                return Err(format!("its point is not on the curve {curve}"));
            }
        }
        Shape::SkEcdsa => {
            let named = wire.string().ok_or_else(short)?;
            let point = wire.string().ok_or_else(short)?;
            if named != b"nistp256" || point.len() != 65 || !on_curve("nistp256", point) {
                return Err("its point is not on the curve nistp256".into());
            }
            wire.string().ok_or_else(short)?;
        }
        Shape::Certificate => {
            // A certificate's fields follow its nonce; ssh-keygen reads them all, this checks
            // the nonce is there and leaves the rest to PVE.
            wire.string().ok_or_else(short)?;
            return Ok(());
        }
    }
    if !wire.0.is_empty() {
        return Err(format!("its blob has {} bytes after the key", wire.0.len()));
    }
    Ok(())
}

/// Skips an `authorized_keys` options field (`command="…",no-pty`): up to the first
/// whitespace outside double quotes.
fn skip_options(line: &str) -> Option<&str> {
    let mut quoted = false;
    let mut escaped = false;
    for (at, c) in line.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            ' ' | '\t' if !quoted => return Some(line[at..].trim_start()),
            _ => {}
        }
    }
    None
}

/// One public key line, checked as `ssh-keygen -l` checks it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SshKey {
    line: String,
    key_type: String,
}

impl SshKey {
    /// Checks one line (see the module's note for what is checked).
    pub fn parse(line: &str) -> Result<SshKey, ValueError> {
        let err = |m: String| ValueError::new("SSH public key", m);
        let trimmed = line.trim();
        if trimmed.starts_with('#') {
            return Err(err("a comment line is not a public key".into()));
        }
        if trimmed.contains("PRIVATE KEY") {
            return Err(err(
                "this is a private key: give the public key (the .pub file)".into(),
            ));
        }
        let key_part = |text: &str| -> Option<(String, String)> {
            let mut words = text.split_whitespace();
            let key_type = words.next()?.to_string();
            let blob = words.next()?.to_string();
            Some((key_type, blob))
        };
        let (key_type, blob) = match key_part(trimmed) {
            Some((t, b)) if shape(&t).is_some() || t == "ssh-dss" => (t, b),
            _ => skip_options(trimmed)
                .and_then(key_part)
                .ok_or_else(|| err("the line holds no key type and key".into()))?,
        };
        if key_type == "ssh-dss" {
            return Err(err(
                "ssh-dss (DSA) keys are refused: PVE 9 runs OpenSSH 10, which no longer reads them"
                    .into(),
            ));
        }
        let shape = shape(&key_type).ok_or_else(|| {
            err(format!(
                "{key_type:?} is not a key type OpenSSH reads (ssh-ed25519, ssh-rsa, ecdsa-sha2-nistp256 …)"
            ))
        })?;
        let decoded = base64_decode(&blob).ok_or_else(|| err("its key is not base64".into()))?;
        check_blob(&key_type, shape, &decoded).map_err(err)?;
        Ok(SshKey {
            line: trimmed.to_string(),
            key_type,
        })
    }

    /// The key type (`ssh-ed25519`).
    pub fn key_type(&self) -> &str {
        &self.key_type
    }

    /// The line as given (trimmed).
    pub fn line(&self) -> &str {
        &self.line
    }
}

/// A list of public keys, one a line, as `sshkeys` holds them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SshKeys {
    lines: Vec<String>,
}

impl SshKeys {
    /// Keys from lines of plain text (each item may hold several lines; blank ones are
    /// skipped, as `validate_ssh_public_keys` skips them), each checked as PVE checks it.
    /// `index` in an error is the 0-based position of the line among the non-blank ones.
    pub fn from_lines<'a, I: IntoIterator<Item = &'a str>>(
        items: I,
    ) -> Result<SshKeys, (usize, ValueError)> {
        let mut lines = Vec::new();
        for line in items
            .into_iter()
            .flat_map(str::lines)
            .filter(|l| !l.trim().is_empty())
        {
            let key = SshKey::parse(line).map_err(|e| (lines.len(), e))?;
            lines.push(key.line);
        }
        Ok(SshKeys { lines })
    }

    /// The lines.
    pub fn lines(&self) -> &[String] {
        &self.lines
    }

    /// True when there are no keys.
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }
}

impl FromStr for SshKeys {
    type Err = ValueError;

    /// The value as PVE stores it (URL-encoded lines), read without checking: what PVE
    /// holds was checked when it was written.
    fn from_str(value: &str) -> Result<SshKeys, ValueError> {
        Ok(SshKeys {
            lines: url_decode(value)
                .lines()
                .map(|l| l.trim().to_string())
                .filter(|l| !l.is_empty())
                .collect(),
        })
    }
}

impl fmt::Display for SshKeys {
    /// The value to send: the lines joined by newlines, URL-encoded as `encodeURIComponent`
    /// does (what PVE's `urlencoded` format accepts).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&url_encode(&self.lines.join("\n")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Generated with `ssh-keygen -t … -N '' -C …` for these tests (public halves only).
    const ED25519: &str = include_str!("testdata/ed25519.pub").trim_ascii_end();
    const RSA: &str = include_str!("testdata/rsa.pub").trim_ascii_end();
    const RSA1024: &str = include_str!("testdata/rsa1024.pub").trim_ascii_end();
    const P256: &str = include_str!("testdata/p256.pub").trim_ascii_end();
    const P384: &str = include_str!("testdata/p384.pub").trim_ascii_end();
    const P521: &str = include_str!("testdata/p521.pub").trim_ascii_end();
    const DSA: &str = include_str!("testdata/dsa.pub").trim_ascii_end();

    fn blob(line: &str) -> &str {
        line.split_whitespace().nth(1).unwrap()
    }

    #[test]
    fn real_keys_pass() {
        for line in [ED25519, RSA, RSA1024, P256, P384, P521] {
            let key = SshKey::parse(line).unwrap_or_else(|e| panic!("{line}: {e}"));
            assert_eq!(key.key_type(), line.split(' ').next().unwrap());
        }
        // As ssh-keygen -l reads them: no comment, extra spaces, leading whitespace, options.
        SshKey::parse(&format!("ssh-ed25519 {}", blob(ED25519))).unwrap();
        SshKey::parse(&format!("  ssh-ed25519    {}   c", blob(ED25519))).unwrap();
        SshKey::parse(&format!("command=\"echo hi there\",no-pty {ED25519}")).unwrap();
    }

    #[test]
    fn what_ssh_keygen_refuses_is_refused() {
        let ed = blob(ED25519);
        let p256 = blob(P256);
        // One character of the point changed (checked with ssh-keygen -l: it refuses it).
        let tampered = format!("{}A{}", &p256[..60], &p256[61..]);
        for (line, wants) in [
            (format!("ssh-rsa {ed} x"), "holds a ssh-ed25519 key"),
            (format!("ssh-ed25519 {ed}AAAA"), "bytes after the key"),
            (format!("ssh-ed25519 {}", &ed[..ed.len() - 4]), "cut short"),
            (
                format!("ecdsa-sha2-nistp256 {tampered}"),
                "not on the curve",
            ),
            (
                format!("ecdsa-sha2-nistp384 {p256}"),
                "holds a ecdsa-sha2-nistp256 key",
            ),
            ("# my keys".to_string(), "comment"),
            (DSA.to_string(), "OpenSSH 10"),
            ("ssh-ed25519 not*base64".to_string(), "not base64"),
            ("ssh-foo AAAA".to_string(), "no key type"),
            ("hello".to_string(), "no key type"),
            (
                "-----BEGIN OPENSSH PRIVATE KEY-----".to_string(),
                "private key",
            ),
        ] {
            let e = SshKey::parse(&line).unwrap_err();
            assert!(e.to_string().contains(wants), "{line}: {e}");
        }
        // A 1000-bit modulus: an RSA blob rebuilt with a short n.
        let mut short = Vec::new();
        for part in [&b"ssh-rsa"[..], &[1, 0, 1], &[0xff; 125]] {
            short.extend_from_slice(&(part.len() as u32).to_be_bytes());
            short.extend_from_slice(part);
        }
        let e = check_blob("ssh-rsa", Shape::Rsa, &short).unwrap_err();
        assert!(e.contains("1000 bits"), "{e}");
    }

    #[test]
    fn lists_read_send_and_compare() {
        let keys = SshKeys::from_lines([ED25519, "", &format!("{RSA}\n\n{P256}")]).unwrap();
        assert_eq!(keys.lines().len(), 3);
        let sent = keys.to_string();
        assert!(sent.contains("%20") && sent.contains("%0A") && !sent.contains(' '));
        let stored: SshKeys = sent.parse().unwrap();
        assert_eq!(stored, keys);
        let with_trailing: SshKeys = format!("{sent}%0A").parse().unwrap();
        assert_eq!(with_trailing, keys);
        let other = SshKeys::from_lines([ED25519]).unwrap();
        assert_ne!(other, keys);
        let (at, e) = SshKeys::from_lines([ED25519, "ssh-ed25519 AAAA"]).unwrap_err();
        assert_eq!(at, 1, "{e}");
        assert!(SshKeys::from_lines([""]).unwrap().is_empty());
    }

    #[test]
    fn base64_as_openssh_writes_it() {
        assert_eq!(base64_decode("aGk=").unwrap(), b"hi");
        assert_eq!(base64_decode("aGVsbG8h").unwrap(), b"hello!");
        assert!(base64_decode("aGk").is_none());
        assert!(base64_decode("a=Gk").is_none());
        assert!(base64_decode("").is_none());
    }
}
