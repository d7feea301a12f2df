//! Which HTTP proxy, if any, carries the connection to PVE: the `proxy` option, else the
//! environment as curl reads it for an `https://` URL (`https_proxy`/`HTTPS_PROXY`, then
//! `all_proxy`/`ALL_PROXY`; `http_proxy` is for `http://` URLs only), minus the hosts in
//! `no_proxy`/`NO_PROXY`. The connection is tunnelled with `CONNECT`, so TLS (and the CA
//! check or the fingerprint pin) runs end to end with PVE.

/// A proxy to tunnel through: its URL, and the same without credentials for messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProxyChoice {
    pub url: String,
    pub shown: String,
    /// The password in the URL, if any (to keep out of every output).
    pub password: Option<String>,
    /// Where the choice came from: `proxy`, or the environment variable.
    pub source: String,
}

/// Picks the proxy for `host` from the `proxy` option (`Some("")` disables proxies) and the
/// environment (`env` looks a variable up).
pub fn choose(
    host: &str,
    option: Option<&str>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Option<ProxyChoice>, String> {
    let (url, source) = match option {
        Some(p) if p.trim().is_empty() => return Ok(None),
        Some(p) => (p.trim().to_string(), "proxy".to_string()),
        None => {
            let found = ["https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"]
                .iter()
                .find_map(|k| {
                    env(k)
                        .filter(|v| !v.trim().is_empty())
                        .map(|v| (v.trim().to_string(), k.to_string()))
                });
            let Some(found) = found else { return Ok(None) };
            let no_proxy = env("no_proxy")
                .or_else(|| env("NO_PROXY"))
                .unwrap_or_default();
            if bypassed(host, &no_proxy) {
                return Ok(None);
            }
            found
        }
    };
    parse(&url, &source).map(Some)
}

/// Checks a proxy URL: `http://[user:password@]host[:port]` (a port defaults to 1080 as in
/// curl); a bare `host:port` is taken as `http://`.
fn parse(url: &str, source: &str) -> Result<ProxyChoice, String> {
    let rest = match url.split_once("://") {
        Some(("http" | "HTTP", rest)) => rest,
        Some((scheme, _)) => {
            return Err(format!(
                "{source}: only http:// proxies (HTTP CONNECT) are supported, not {scheme}://"
            ));
        }
        None => url,
    };
    let rest = rest.trim_end_matches('/');
    let (userinfo, hostport) = match rest.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, rest),
    };
    let bad = || {
        format!(
            "{source} must be a proxy URL such as http://proxy.example.com:3128, got {}",
            crate::encode::quote(hostport)
        )
    };
    if hostport.is_empty()
        || hostport.contains(['/', '?', '#', ' '])
        || hostport.chars().any(|c| c.is_control())
    {
        return Err(bad());
    }
    let has_port = match hostport.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || hostport.starts_with('[') => {
            if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) {
                p.parse::<u16>().map_err(|_| bad())?;
                true
            } else if h.starts_with('[') || !h.contains(':') {
                return Err(bad());
            } else {
                false
            }
        }
        _ => false,
    };
    let hostport = if has_port {
        hostport.to_string()
    } else {
        format!("{hostport}:1080")
    };
    let password = userinfo
        .and_then(|u| u.split_once(':'))
        .map(|(_, p)| p.to_string())
        .filter(|p| !p.is_empty());
    let url = match userinfo {
        Some(u) => format!("http://{u}@{hostport}"),
        None => format!("http://{hostport}"),
    };
    Ok(ProxyChoice {
        shown: format!("http://{hostport}"),
        url,
        password,
        source: source.to_string(),
    })
}

/// curl's `NO_PROXY`: `*`, or a comma-separated list of host names (matching the name and
/// its subdomains, with or without a leading dot), IP addresses and IPv4 CIDR blocks.
pub fn bypassed(host: &str, no_proxy: &str) -> bool {
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase();
    no_proxy
        .split(',')
        .map(|e| e.trim().to_ascii_lowercase())
        .filter(|e| !e.is_empty())
        .any(|e| {
            if e == "*" {
                return true;
            }
            if let Some((net, bits)) = e.split_once('/') {
                return in_cidr(&host, net, bits);
            }
            let e = e.trim_start_matches('.');
            host == e || host.ends_with(&format!(".{e}"))
        })
}

fn in_cidr(host: &str, net: &str, bits: &str) -> bool {
    let (Ok(h), Ok(n), Ok(b)) = (
        host.parse::<std::net::Ipv4Addr>(),
        net.parse::<std::net::Ipv4Addr>(),
        bits.parse::<u32>(),
    ) else {
        return false;
    };
    if b > 32 {
        return false;
    }
    let mask = if b == 0 { 0 } else { u32::MAX << (32 - b) };
    u32::from(h) & mask == u32::from(n) & mask
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn the_environment_as_curl_reads_it_for_https() {
        let c = choose("pve1", None, env(&[("HTTPS_PROXY", "http://p:3128")]))
            .unwrap()
            .unwrap();
        assert_eq!(
            (c.url.as_str(), c.source.as_str()),
            ("http://p:3128", "HTTPS_PROXY")
        );
        // http_proxy is for http:// URLs only; PVE's API is https.
        assert_eq!(
            choose("pve1", None, env(&[("http_proxy", "http://p:3128")])).unwrap(),
            None
        );
        let c = choose("pve1", None, env(&[("ALL_PROXY", "p:8080")]))
            .unwrap()
            .unwrap();
        assert_eq!(c.url, "http://p:8080");
        let c = choose("pve1", None, env(&[("https_proxy", "http://p")]))
            .unwrap()
            .unwrap();
        assert_eq!(c.url, "http://p:1080");
    }

    #[test]
    fn no_proxy_option_and_credentials() {
        let e = &[
            ("HTTPS_PROXY", "http://p:3128"),
            ("NO_PROXY", "localhost, .example.com,10.0.0.0/8"),
        ];
        assert_eq!(choose("pve1.example.com", None, env(e)).unwrap(), None);
        assert_eq!(choose("example.com", None, env(e)).unwrap(), None);
        assert_eq!(choose("10.1.2.3", None, env(e)).unwrap(), None);
        assert!(choose("11.1.2.3", None, env(e)).unwrap().is_some());
        assert!(choose("notexample.com", None, env(e)).unwrap().is_some());
        assert_eq!(choose("pve1", Some(""), env(e)).unwrap(), None);
        assert!(
            choose(
                "x",
                None,
                env(&[("HTTPS_PROXY", "http://p:1"), ("no_proxy", "*")])
            )
            .unwrap()
            .is_none()
        );
        let c = choose("pve1.example.com", Some("http://u:s3cret@q:8080"), env(e))
            .unwrap()
            .unwrap();
        assert_eq!(
            (
                c.url.as_str(),
                c.shown.as_str(),
                c.password.as_deref(),
                c.source.as_str()
            ),
            (
                "http://u:s3cret@q:8080",
                "http://q:8080",
                Some("s3cret"),
                "proxy"
            )
        );
    }

    #[test]
    fn bad_proxies_are_named() {
        for (p, want) in [
            ("socks5://p:1080", "only http:// proxies"),
            ("https://p:443", "only http:// proxies"),
            ("http://p:99999", "must be a proxy URL"),
            ("http://p:x", "must be a proxy URL"),
            ("http://", "must be a proxy URL"),
            ("http://p/path?x", "must be a proxy URL"),
        ] {
            let e = choose("pve1", Some(p), env(&[])).unwrap_err();
            assert!(e.starts_with("proxy") && e.contains(want), "{p}: {e}");
        }
    }
}
