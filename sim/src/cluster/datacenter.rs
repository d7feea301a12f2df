//! datacenter.cfg's `next-id` (pve-cluster DataCenterConfig.pm, `$next_id_format`): the range
//! `GET /cluster/nextid` allocates from (pve-manager API2/Cluster.pm, nextid), and `GET
//! /cluster/options` (API2/Cluster.pm, get_options), which shows datacenter.cfg parsed.

use serde_json::{Value, json};

/// `next-id: lower=…,upper=…`: lower inclusive (default 100), upper exclusive (default
/// 1,000,000, "lower than the maximum on purpose"); a key not given is not in the file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NextId {
    pub lower: Option<u32>,
    pub upper: Option<u32>,
}

impl NextId {
    /// The range `nextid` searches: `lower..upper`.
    pub fn range(&self) -> std::ops::Range<u32> {
        self.lower.unwrap_or(100)..self.upper.unwrap_or(1_000_000)
    }

    /// Parses `lower=1000,upper=2000` (either key may be left out) with the format's bounds
    /// (lower 100 to 999,999,999, upper 100 to 1,000,000,000) and its write check `lower
    /// ($lower) <= upper ($upper) boundary rule broken`.
    pub fn parse(text: &str) -> Result<NextId, String> {
        let mut next = NextId::default();
        for part in text.split(',').filter(|part| !part.trim().is_empty()) {
            let (key, value) = part
                .split_once('=')
                .ok_or_else(|| format!("next-id: '{part}' is not key=value"))?;
            let number: u32 = value
                .trim()
                .parse()
                .map_err(|_| format!("next-id: {key}: '{value}' is not an integer"))?;
            match key.trim() {
                "lower" if (100..=999_999_999).contains(&number) => next.lower = Some(number),
                "upper" if (100..=1_000_000_000).contains(&number) => next.upper = Some(number),
                "lower" | "upper" => {
                    return Err(format!("next-id: {key}: {number} is out of range"));
                }
                other => return Err(format!("next-id: unknown key '{other}'")),
            }
        }
        let range = next.range();
        if range.start > range.end {
            return Err(format!(
                "lower ({}) <= upper ({}) boundary rule broken",
                range.start, range.end
            ));
        }
        Ok(next)
    }
}

/// `GET /cluster/options`: the keys datacenter.cfg sets, `next-id` parsed into its keys (as
/// strings, as parse_property_string leaves them), `registered-tags` as written.
pub fn options(next_id: &NextId, registered_tags: &[String]) -> Value {
    let mut out = serde_json::Map::new();
    if next_id.lower.is_some() || next_id.upper.is_some() {
        let mut keys = serde_json::Map::new();
        if let Some(lower) = next_id.lower {
            keys.insert("lower".into(), json!(lower.to_string()));
        }
        if let Some(upper) = next_id.upper {
            keys.insert("upper".into(), json!(upper.to_string()));
        }
        out.insert("next-id".into(), Value::Object(keys));
    }
    if !registered_tags.is_empty() {
        out.insert("registered-tags".into(), json!(registered_tags.join(";")));
    }
    Value::Object(out)
}

/// What `GET /cluster/options` shows its caller: pve-manager API2/Cluster.pm `get_options`
/// declares `user => 'all'` (every user is answered; RPCEnvironment.pm
/// `check_api2_permissions` returns before the `check`), and shows the whole of
/// datacenter.cfg only with `Sys.Audit` on `/`; without it only `console` and `tag-style`.
/// (`allowed-tags`, added for every caller there, is not modelled.)
pub fn options_seen(options: Value, sys_audit: bool) -> Value {
    if sys_audit {
        return options;
    }
    let Value::Object(all) = options else {
        return json!({});
    };
    Value::Object(
        all.into_iter()
            .filter(|(key, _)| matches!(key.as_str(), "console" | "tag-style"))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_sys_audit_the_options_are_answered_without_next_id() {
        let set = NextId::parse("lower=5000,upper=5010").unwrap();
        let all = options(&set, &["web".to_string()]);
        assert_eq!(options_seen(all.clone(), true), all);
        assert_eq!(options_seen(all, false), json!({}));
        assert_eq!(
            options_seen(
                json!({"console": "xtermjs", "next-id": {"lower": "5000"}}),
                false
            ),
            json!({"console": "xtermjs"})
        );
    }

    #[test]
    fn next_id_keeps_its_defaults_bounds_and_order_rule() {
        assert_eq!(NextId::parse("").unwrap().range(), 100..1_000_000);
        let set = NextId::parse("lower=5000,upper=5010").unwrap();
        assert_eq!(set.range(), 5000..5010);
        assert_eq!(
            options(&set, &[]),
            json!({"next-id": {"lower": "5000", "upper": "5010"}})
        );
        assert_eq!(NextId::parse("upper=200").unwrap().range(), 100..200);
        assert!(NextId::parse("lower=99").is_err());
        assert!(
            NextId::parse("lower=300,upper=200")
                .unwrap_err()
                .contains("boundary rule broken")
        );
        assert_eq!(options(&NextId::default(), &[]), json!({}));
    }
}
