//! What the permission suites share: a simulator started with a `user.cfg` in PVE's syntax
//! (`--user-cfg`), and a caller by API token (the `Authorization: PVEAPIToken=…` header, so
//! no ticket or CSRF token).

use serde_json::Value;

use super::{Sim, enc, raw, scratch};

/// A plain-HTTP simulator started with `cfg` as its `user.cfg`, then `args` (the users'
/// passwords and the tokens' secrets, `--pve-version`…).
pub fn sim_with_user_cfg(cfg: &str, args: &[&str]) -> Sim {
    let path = scratch("user-cfg").join("user.cfg");
    std::fs::write(&path, cfg).unwrap();
    let mut all = vec!["--user-cfg", path.to_str().unwrap()];
    all.extend_from_slice(args);
    Sim::plain(&all, &[])
}

/// One caller by API token.
pub struct Token {
    addr: String,
    header: String,
}

impl Token {
    /// The token `USER@REALM!ID=SECRET` on `sim`.
    pub fn new(sim: &Sim, id_secret: &str) -> Token {
        Token {
            addr: format!("127.0.0.1:{}", sim.port()),
            header: format!("PVEAPIToken={id_secret}"),
        }
    }

    /// One request: the status, the reason phrase and the body.
    pub fn call(&self, method: &str, path: &str, params: &[(&str, &str)]) -> (u16, String, Value) {
        let form: Vec<String> = params
            .iter()
            .map(|(k, v)| format!("{}={}", enc(k), enc(v)))
            .collect();
        let form = form.join("&");
        let headers = [("Authorization", self.header.as_str())];
        let path = format!("/api2/json{path}");
        if method == "GET" || method == "DELETE" {
            let p = if form.is_empty() {
                path
            } else {
                format!("{path}?{form}")
            };
            raw(&self.addr, method, &p, &headers, "")
        } else {
            raw(&self.addr, method, &path, &headers, &form)
        }
    }

    /// The answer's `data`, which must come with 200.
    pub fn data(&self, method: &str, path: &str, params: &[(&str, &str)]) -> Value {
        let (s, r, v) = self.call(method, path, params);
        assert_eq!(s, 200, "{method} {path}: {s} {r} {v}");
        v["data"].clone()
    }

    /// The 403's reason phrase.
    pub fn refused(&self, method: &str, path: &str, params: &[(&str, &str)]) -> String {
        let (s, r, v) = self.call(method, path, params);
        assert_eq!(s, 403, "{method} {path}: {s} {r} {v}");
        r
    }
}
