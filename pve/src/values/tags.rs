//! Tags (`tags`), as pve-guest-common's `get_unique_tags` (`src/PVE/GuestHelpers.pm`) stores
//! them: split by `split_list` (`;`, `,` or spaces), each a `pve-tag`
//! (`[a-z0-9_][a-z0-9_\-\+\.]*`, any case), then lower-cased, sorted, without duplicates and
//! joined by `;` (with datacenter.cfg's default `tag-style`: not case-sensitive, sorted).

use std::fmt;
use std::str::FromStr;

use super::boot::split_list;
use super::error::ValueError;

/// `pve_verify_tag` (pve-common `src/PVE/JSONSchema.pm`).
fn is_tag(tag: &str) -> bool {
    let mut bytes = tag.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b"_-+.".contains(&b))
}

/// A VM's tags, as PVE stores them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tags {
    tags: Vec<String>,
}

impl Tags {
    /// The tags, lower-cased and sorted.
    pub fn tags(&self) -> &[String] {
        &self.tags
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.tags.is_empty()
    }
}

impl FromStr for Tags {
    type Err = ValueError;

    fn from_str(value: &str) -> Result<Tags, ValueError> {
        let mut tags = Vec::new();
        for tag in split_list(value) {
            if !is_tag(&tag) {
                return Err(ValueError::new(
                    "tags",
                    format!("invalid characters in tag '{tag}'"),
                ));
            }
            tags.push(tag.to_ascii_lowercase());
        }
        tags.sort();
        tags.dedup();
        Ok(Tags { tags })
    }
}

impl fmt::Display for Tags {
    /// `get_unique_tags`' join: `a;b;c`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.tags.join(";"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_as_get_unique_tags() {
        for spelling in [
            "web;prod",
            "prod,web",
            "Web prod",
            " prod;;WEB,web ",
            "prod web;",
        ] {
            let tags: Tags = spelling.parse().unwrap();
            assert_eq!(tags.to_string(), "prod;web", "{spelling}");
        }
        assert_ne!("a;b".parse::<Tags>().unwrap(), "a".parse::<Tags>().unwrap());
        assert!("".parse::<Tags>().unwrap().is_empty());
        assert_eq!(
            "v1.2+x_y-z".parse::<Tags>().unwrap().to_string(),
            "v1.2+x_y-z"
        );
        assert!("-lead".parse::<Tags>().is_err());
        assert!("a/b".parse::<Tags>().is_err());
    }
}
