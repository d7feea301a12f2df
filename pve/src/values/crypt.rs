//! The hash PVE stores `cipassword` as: pve-common's `encrypt_pw` (`src/PVE/Tools.pm`) calls
//! `crypt` with `$5$` and an 8-character salt, which is SHA-256 crypt (Ulrich Drepper's
//! "Unix crypt using SHA-256 and SHA-512", 5000 rounds when none are named).
//!
//! `update_vm_api` (qemu-server `src/PVE/API2/Qemu.pm`) hashes a `cipassword` that does not
//! already look hashed (`^\$(?:[156]|2[ay])(\$.+){2}`), except for Windows guests, whose
//! cloudbase-init needs it plain; `create_vm` stores it as sent. A client that sends the hash
//! gets the same stored value through either path, and never a plain password on disk.
//!
//! Implemented on `ring`'s SHA-256 (already the TLS stack's digest) rather than a crate: the
//! algorithm is 60 lines and its test vectors are below.

use ring::digest::{Context, SHA256};

use super::error::ValueError;

/// crypt's base64 alphabet.
const ALPHABET: &[u8; 64] = b"./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// The rounds when the salt names none.
const DEFAULT_ROUNDS: u32 = 5000;

/// True when PVE takes `value` as already hashed and stores it as it is
/// (`^\$(?:[156]|2[ay])(\$.+){2}`).
pub fn is_hashed(value: &str) -> bool {
    let rest = ["$1$", "$5$", "$6$", "$2a$", "$2y$"]
        .iter()
        .find_map(|prefix| value.strip_prefix(prefix));
    // `(\$.+){2}` after the id's own `$`: more text, a `$` somewhere after its first
    // character, and more text after that.
    rest.is_some_and(|r| {
        r.char_indices()
            .skip(1)
            .any(|(at, c)| c == '$' && at + 1 < r.len())
    })
}

fn sha256(parts: &[&[u8]]) -> [u8; 32] {
    let mut ctx = Context::new(&SHA256);
    for part in parts {
        ctx.update(part);
    }
    ctx.finish()
        .as_ref()
        .try_into()
        .expect("SHA-256 is 32 bytes")
}

/// `len` bytes of `digest` repeated.
fn repeated(digest: &[u8; 32], len: usize) -> Vec<u8> {
    digest.iter().copied().cycle().take(len).collect()
}

/// SHA-256 crypt of `password` with `salt` (at most 16 characters are used) and `rounds`
/// (clamped to 1000 … 999999999; `None` is 5000 and leaves `rounds=` out of the result).
pub fn sha256_crypt(password: &[u8], salt: &str, rounds: Option<u32>) -> String {
    let salt = &salt.as_bytes()[..salt.len().min(16)];
    let count = rounds.map_or(DEFAULT_ROUNDS, |r| r.clamp(1000, 999_999_999));
    let key = password;

    let alternate = sha256(&[key, salt, key]);
    let mut ctx = Context::new(&SHA256);
    ctx.update(key);
    ctx.update(salt);
    ctx.update(&repeated(&alternate, key.len()));
    let mut bits = key.len();
    while bits > 0 {
        if bits & 1 == 1 {
            ctx.update(&alternate);
        } else {
            ctx.update(key);
        }
        bits >>= 1;
    }
    let mut digest: [u8; 32] = ctx.finish().as_ref().try_into().expect("32 bytes");

    let key_digest = sha256(&vec![key; key.len()]);
    let p_bytes = repeated(&key_digest, key.len());
    let salt_digest = sha256(&vec![salt; 16 + digest[0] as usize]);
    let s_bytes = repeated(&salt_digest, salt.len());

    for round in 0..count {
        let mut ctx = Context::new(&SHA256);
        if round % 2 == 1 {
            ctx.update(&p_bytes);
        } else {
            ctx.update(&digest);
        }
        if round % 3 != 0 {
            ctx.update(&s_bytes);
        }
        if round % 7 != 0 {
            ctx.update(&p_bytes);
        }
        if round % 2 == 1 {
            ctx.update(&digest);
        } else {
            ctx.update(&p_bytes);
        }
        digest = ctx.finish().as_ref().try_into().expect("32 bytes");
    }

    let mut out = String::from("$5$");
    if let Some(r) = rounds {
        out.push_str(&format!("rounds={}$", r.clamp(1000, 999_999_999)));
    }
    out.push_str(&String::from_utf8_lossy(salt));
    out.push('$');
    let mut push = |b2: u8, b1: u8, b0: u8, chars: usize| {
        let mut w = (u32::from(b2) << 16) | (u32::from(b1) << 8) | u32::from(b0);
        for _ in 0..chars {
            out.push(char::from(ALPHABET[(w & 0x3f) as usize]));
            w >>= 6;
        }
    };
    for (a, b, c) in [
        (0, 10, 20),
        (21, 1, 11),
        (12, 22, 2),
        (3, 13, 23),
        (24, 4, 14),
        (15, 25, 5),
        (6, 16, 26),
        (27, 7, 17),
        (18, 28, 8),
        (9, 19, 29),
    ] {
        push(digest[a], digest[b], digest[c], 4);
    }
    push(0, digest[31], digest[30], 3);
    out
}

/// `encrypt_pw($pw)`: SHA-256 crypt with a fresh 8-character salt and the default rounds
/// (`$5$SALT$HASH`), the form PVE writes.
pub fn encrypt_pw(password: &str) -> Result<String, ValueError> {
    let rng = ring::rand::SystemRandom::new();
    let mut random = [0u8; 8];
    ring::rand::SecureRandom::fill(&rng, &mut random)
        .map_err(|_| ValueError::new("cipassword", "no random salt could be drawn"))?;
    let salt: String = random
        .iter()
        .map(|b| char::from(ALPHABET[(b & 0x3f) as usize]))
        .collect();
    Ok(sha256_crypt(password.as_bytes(), &salt, None))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test vectors of Drepper's specification ("Unix crypt using SHA-256 and SHA-512"),
    /// each checked against glibc's `crypt` (and the first against `openssl passwd -5`).
    #[test]
    fn drepper_vectors() {
        for (password, salt, rounds, hash) in [
            (
                "Hello world!",
                "saltstring",
                None,
                "$5$saltstring$5B8vYYiY.CVt1RlTTf8KbXBH3hsxY/GNooZaBBGWEc5",
            ),
            (
                "Hello world!",
                "saltstringsaltstring",
                Some(10000),
                "$5$rounds=10000$saltstringsaltst$3xv.VbSHBb41AL9AvLeujZkZRBAwqFMz2.opqey6IcA",
            ),
            (
                "This is just a test",
                "toolongsaltstring",
                Some(5000),
                "$5$rounds=5000$toolongsaltstrin$Un/5jzAHMgOGZ5.mWJpuVolil07guHPvOW8mGRcvxa5",
            ),
            (
                "a very much longer text to encrypt.  This one even stretches over morethan one line.",
                "anotherlongsaltstring",
                Some(1400),
                "$5$rounds=1400$anotherlongsalts$Rx.j8H.h8HjEDGomFU8bDkXm3XIUnzyxf12oP84Bnq1",
            ),
            (
                "we have a short salt string but not a short password",
                "short",
                Some(77777),
                "$5$rounds=77777$short$JiO1O3ZpDAxGJeaDIuqCoEFysAe1mZNJRs3pw0KQRd/",
            ),
            (
                "a short string",
                "asaltof16chars..",
                Some(123456),
                "$5$rounds=123456$asaltof16chars..$gP3VQ/6X7UUEW3HkBn2w1/Ptq2jxPyzV/cZKmF/wJvD",
            ),
        ] {
            assert_eq!(
                sha256_crypt(password.as_bytes(), salt, rounds),
                hash,
                "{password}"
            );
        }
    }

    #[test]
    fn rounds_below_the_minimum_are_raised() {
        let low = sha256_crypt(
            b"the minimum number is still observed",
            "roundstoolow",
            Some(10),
        );
        let min = sha256_crypt(
            b"the minimum number is still observed",
            "roundstoolow",
            Some(1000),
        );
        assert_eq!(low, min);
        assert!(low.starts_with("$5$rounds=1000$roundstoolow$"), "{low}");
        assert_ne!(
            low,
            sha256_crypt(
                b"the minimum number is still observed",
                "roundstoolow",
                None
            )
        );
    }

    #[test]
    fn encrypt_pw_makes_what_pve_keeps() {
        let a = encrypt_pw("s3cret pässword").unwrap();
        let b = encrypt_pw("s3cret pässword").unwrap();
        assert_ne!(a, b, "a fresh salt each time");
        let (_, rest) = a.split_once("$5$").unwrap();
        let (salt, hash) = rest.split_once('$').unwrap();
        assert_eq!(salt.len(), 8);
        assert_eq!(hash.len(), 43);
        assert_eq!(sha256_crypt("s3cret pässword".as_bytes(), salt, None), a);
        assert!(is_hashed(&a), "PVE stores it as it is");
        assert!(!a.contains("s3cret"));
    }

    #[test]
    fn what_pve_takes_as_hashed() {
        for hashed in ["$5$abc$def", "$6$x$y", "$1$a$b", "$2y$10$abc", "$2a$a$b"] {
            assert!(is_hashed(hashed), "{hashed}");
        }
        for plain in ["hunter2", "$5$abc", "$5$$x", "$3$a$b", "$5$abc$", "x$5$a$b"] {
            assert!(!is_hashed(plain), "{plain}");
        }
    }
}
