//! Ansible's contract for binary modules, in one place: read the args file named by
//! `argv[1]`, split off the `_ansible_*` keys, validate the rest against the spec, and print
//! exactly one JSON object on stdout — also on a panic or a signal — with every `no_log`
//! value masked.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

use serde_json::{Map, Value, json};

use super::spec::{Env, Kind, ProcessEnv, Spec, parse_duration, validate};
use super::text::bounded;
use crate::pve::encode::url_encode;

/// The `_ansible_*` keys a module acts on.
#[derive(Clone, Debug, Default)]
pub struct Context {
    pub check_mode: bool,
    pub diff: bool,
    pub verbosity: u64,
    pub no_log: bool,
    pub inject_invocation: bool,
    pub ignore_unknown: bool,
    pub module_name: String,
    pub tracebacks: bool,
}

/// The text that replaces a secret wherever it would appear.
pub const MASK: &str = "********";

static SECRETS: OnceLock<Mutex<Vec<String>>> = OnceLock::new();
static PRINTED: AtomicBool = AtomicBool::new(false);

/// Every spelling of a secret that may come back in a message: as is, percent-encoded
/// (upper- and lower-case hex), form-encoded (`+` for spaces), and JSON-escaped (a server
/// error that echoes the request as JSON, or quotes the header). The percent-encoded spelling
/// is the PVE client's own (`pve::encode::url_encode`, what a form body or `sshkeys` carries),
/// so a secret is masked in exactly the spelling it was sent in.
fn spellings(secret: &str) -> Vec<String> {
    let pct = url_encode(secret);
    let lower = {
        let mut out = String::with_capacity(pct.len());
        let mut hex_left = 0;
        for c in pct.chars() {
            if c == '%' {
                hex_left = 2;
                out.push(c);
            } else if hex_left > 0 {
                hex_left -= 1;
                out.push(c.to_ascii_lowercase());
            } else {
                out.push(c);
            }
        }
        out
    };
    let plus = pct.replace("%20", "+");
    let lower_plus = lower.replace("%20", "+");
    let json = serde_json::to_string(secret).unwrap_or_default();
    let json = json[1..json.len().saturating_sub(1).max(1)].to_string();
    let mut all = vec![secret.to_string(), pct, lower, plus, lower_plus];
    // JSON also spells every non-ASCII character as `\u00e9` (a UTF-16 pair beyond the BMP),
    // in lower- or upper-case hex, as a server that echoes a request may.
    all.push(json_ascii(&json, false));
    all.push(json_ascii(&json, true));
    all.push(json);
    all.sort();
    all.dedup();
    all
}

/// A JSON string's contents with every non-ASCII character escaped as `\u` and four hex digits, in upper-
/// or lower-case hex.
fn json_ascii(json: &str, upper: bool) -> String {
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        if c.is_ascii() {
            out.push(c);
            continue;
        }
        let mut units = [0u16; 2];
        for unit in c.encode_utf16(&mut units) {
            if upper {
                out.push_str(&format!("\\u{unit:04X}"));
            } else {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        }
    }
    out
}

/// Registers a value to mask in all output (a `no_log` option's value, a ticket, …), in
/// every spelling the module itself produces or a server may echo.
pub fn register_secret(secret: &str) {
    if secret.len() < 2 {
        return;
    }
    let mut v = SECRETS
        .get_or_init(|| Mutex::new(Vec::new()))
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    for sp in spellings(secret) {
        if sp.len() >= 2 && !v.contains(&sp) {
            v.push(sp);
        }
    }
    // Longest first, so a secret containing another is masked whole.
    v.sort_by_key(|x| std::cmp::Reverse(x.len()));
}

/// Masks every registered secret in a string.
pub fn mask_str(text: &str) -> String {
    let secrets = SECRETS
        .get_or_init(|| Mutex::new(Vec::new()))
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let mut out = text.to_string();
    for sec in secrets.iter() {
        if out.contains(sec.as_str()) {
            out = out.replace(sec.as_str(), MASK);
        }
    }
    out
}

/// Masks every registered secret in a JSON value, keys and strings alike.
pub fn mask(value: &Value) -> Value {
    match value {
        Value::String(s) => Value::String(mask_str(s)),
        Value::Array(a) => Value::Array(a.iter().map(mask).collect()),
        Value::Object(m) => Value::Object(m.iter().map(|(k, x)| (mask_str(k), mask(x))).collect()),
        other => other.clone(),
    }
}

/// Prints the one result object; later calls do nothing.
pub fn emit(result: &Value) {
    if PRINTED.swap(true, Ordering::SeqCst) {
        return;
    }
    let text = serde_json::to_string(&mask(result))
        .unwrap_or_else(|_| r#"{"failed":true,"msg":"unable to encode the result"}"#.into());
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{text}");
    let _ = out.flush();
}

/// A successful result.
#[derive(Debug, Default)]
pub struct Outcome {
    pub changed: bool,
    pub msg: String,
    pub data: Map<String, Value>,
    pub warnings: Vec<String>,
    pub diff: Option<Value>,
}

/// A failed result: the message, whether anything was changed before the failure, and context.
#[derive(Debug, Default)]
pub struct Failure {
    pub msg: String,
    pub changed: bool,
    pub data: Map<String, Value>,
    pub warnings: Vec<String>,
}

impl Failure {
    pub fn msg(msg: impl Into<String>) -> Self {
        Failure {
            msg: msg.into(),
            ..Default::default()
        }
    }
}

/// The parsed invocation.
#[derive(Debug)]
pub struct Invocation {
    pub ctx: Context,
    pub params: Map<String, Value>,
}

impl Invocation {
    /// A string option, if set.
    pub fn str(&self, key: &str) -> Option<&str> {
        self.params.get(key).and_then(Value::as_str)
    }
    pub fn bool(&self, key: &str) -> Option<bool> {
        self.params.get(key).and_then(Value::as_bool)
    }
    pub fn int(&self, key: &str) -> Option<i64> {
        self.params.get(key).and_then(Value::as_i64)
    }

    /// A duration option, which validation has checked and its default has filled: an
    /// option missing here is a spec without a default, said as such rather than guessed.
    pub fn duration(&self, key: &str) -> Result<std::time::Duration, String> {
        self.str(key)
            .and_then(|s| parse_duration(s).ok())
            .ok_or_else(|| format!("{key}: no duration given and no default"))
    }
}

fn collect_no_log(opts: &[super::spec::Opt], params: &Map<String, Value>) {
    for o in opts {
        let v = params.get(o.name);
        if o.no_log {
            match v {
                Some(Value::String(s)) => register_secret(s),
                Some(Value::Array(a)) => {
                    a.iter().filter_map(Value::as_str).for_each(register_secret)
                }
                _ => {}
            }
        }
        match (&o.kind, v) {
            (Kind::Dict(sub), Some(Value::Object(m))) => collect_no_log(sub, m),
            (Kind::ListOfDicts(sub), Some(Value::Array(items))) => {
                for m in items.iter().filter_map(Value::as_object) {
                    collect_no_log(sub, m);
                }
            }
            _ => {}
        }
    }
}

/// Registers every scalar inside a value (a `no_log` option given as a list or a dict by
/// mistake still holds the secret).
fn register_all(value: &Value) {
    match value {
        Value::String(s) => register_secret(s),
        Value::Number(n) => register_secret(&n.to_string()),
        Value::Array(a) => a.iter().for_each(register_all),
        Value::Object(m) => m.values().for_each(register_all),
        _ => {}
    }
}

/// Registers raw values of `no_log` options before validation, so that even a type error
/// quoting the value cannot leak it.
fn collect_raw_no_log(opts: &[super::spec::Opt], raw: &Map<String, Value>) {
    for o in opts.iter().filter(|o| o.no_log) {
        for k in std::iter::once(o.name).chain(o.aliases.iter().copied()) {
            if let Some(v) = raw.get(k) {
                register_all(v);
            }
        }
        for e in o.env {
            if let Some(v) = ProcessEnv.get(e) {
                register_secret(&v);
            }
        }
    }
}

/// Parts of a dict option that are secret unless a flag beside them shows them: (option,
/// parts, flag). A spec's `no_log` is fixed, so these are told here: the `vm` module's
/// `nocloud.user_data` and `nocloud.vendor_data`, shown only with `nocloud.show_data: true`.
const SECRET_UNLESS_SHOWN: &[(&str, &[&str], &str)] =
    &[("nocloud", &["user_data", "vendor_data"], "show_data")];

/// The secret parts of `params` (raw or validated) that no flag shows, by option and part.
fn unshown_parts(params: &Map<String, Value>) -> Vec<(&'static str, &'static str)> {
    let mut out = Vec::new();
    for (option, parts, flag) in SECRET_UNLESS_SHOWN {
        let Some(Value::Object(dict)) = params.get(*option) else {
            continue;
        };
        let shown = match dict.get(*flag) {
            Some(Value::Bool(b)) => *b,
            Some(Value::String(s)) => super::spec::parse_bool(s) == Some(true),
            Some(Value::Number(n)) => n.as_u64() == Some(1),
            _ => false,
        };
        if !shown {
            out.extend(
                parts
                    .iter()
                    .filter(|part| dict.get(**part).is_some_and(|v| !v.is_null()))
                    .map(|part| (*option, *part)),
            );
        }
    }
    out
}

/// Registers the secret parts no flag shows, before validation: an error raised before the
/// module reads them (another option refused) still masks them. A dict part is registered
/// as its JSON text, so an echo of the whole dict is masked too.
fn collect_unshown(raw: &Map<String, Value>) {
    for (option, part) in unshown_parts(raw) {
        match &raw[option][part] {
            Value::String(text) => register_secret(text),
            other => register_secret(&other.to_string()),
        }
    }
}

/// One of Ansible's `_ansible_*` flags, coerced like any boolean option (`true`, `"yes"`,
/// `1`, …). A value that is no boolean at all is refused: guessing `false` for
/// `_ansible_check_mode` would carry out what the user only wanted to see.
fn flag(key: &str, value: &Value) -> Result<bool, String> {
    let parsed = match value {
        Value::Bool(b) => Some(*b),
        Value::Null => Some(false),
        Value::Number(n) => match n.as_f64() {
            Some(0.0) => Some(false),
            Some(1.0) => Some(true),
            _ => None,
        },
        Value::String(s) => super::spec::parse_bool(s),
        _ => None,
    };
    parsed.ok_or_else(|| {
        format!(
            "{key} must be a boolean, got {}",
            bounded(&value.to_string())
        )
    })
}

/// Reads and validates the args file. Errors are complete user-facing messages.
pub fn read_invocation(args_path: Option<&str>, spec: &Spec) -> Result<Invocation, String> {
    let path = args_path.ok_or(
        "this is an Ansible module: it expects the path of an arguments file as its only argument",
    )?;
    // Ansible's arguments are a few KiB; 16 MiB leaves room for any real playbook.
    let bytes = crate::files::read_bounded(path, 16 << 20, "the arguments file")
        .map_err(|e| format!("unable to read {e}"))?;
    let text = String::from_utf8(bytes)
        .map_err(|_| format!("unable to read the arguments file {path}: not UTF-8"))?;
    let all: Map<String, Value> = match serde_json::from_str::<Value>(&text) {
        Ok(Value::Object(m)) => m,
        Ok(_) => return Err("the arguments file must hold a JSON object".into()),
        Err(e) => return Err(format!("the arguments file is not valid JSON: {e}")),
    };
    let mut ctx = Context::default();
    let mut raw = Map::new();
    for (k, v) in all {
        match k.as_str() {
            "_ansible_check_mode" => ctx.check_mode = flag(&k, &v)?,
            "_ansible_diff" => ctx.diff = flag(&k, &v)?,
            "_ansible_verbosity" => {
                ctx.verbosity = v
                    .as_u64()
                    .or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()))
                    .unwrap_or(0)
            }
            "_ansible_no_log" => ctx.no_log = flag(&k, &v)?,
            "_ansible_inject_invocation" => ctx.inject_invocation = flag(&k, &v)?,
            "_ansible_ignore_unknown_opts" => ctx.ignore_unknown = flag(&k, &v)?,
            "_ansible_module_name" => ctx.module_name = v.as_str().unwrap_or("").to_string(),
            "_ansible_tracebacks_for" => {
                ctx.tracebacks = v.as_array().is_some_and(|a| !a.is_empty())
            }
            k if k.starts_with("_ansible_") => {}
            _ => {
                raw.insert(k, v);
            }
        }
    }
    collect_raw_no_log(&spec.options, &raw);
    collect_unshown(&raw);
    let params = validate(spec, &raw, &ProcessEnv, ctx.ignore_unknown)?;
    collect_no_log(&spec.options, &params);
    Ok(Invocation { ctx, params })
}

fn invocation_value(inv: &Invocation, spec: &Spec) -> Value {
    let mut args = inv.params.clone();
    for o in spec.options.iter().filter(|o| o.no_log) {
        if args.get(o.name).is_some_and(|v| !v.is_null()) {
            args.insert(
                o.name.to_string(),
                json!("VALUE_SPECIFIED_IN_NO_LOG_PARAMETER"),
            );
        }
    }
    for (option, part) in unshown_parts(&inv.params) {
        if let Some(Value::Object(dict)) = args.get_mut(option) {
            dict.insert(part.into(), json!("VALUE_SPECIFIED_IN_NO_LOG_PARAMETER"));
        }
    }
    json!({"module_args": args})
}

/// Runs a module body with Ansible's contract around it: the args file, validation, a panic
/// hook that still prints one failed result, and the final JSON with secrets masked.
pub fn run_module(spec: &Spec, body: impl FnOnce(&Invocation) -> Result<Outcome, Failure>) -> ! {
    std::panic::set_hook(Box::new(|info| {
        let what = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown".into());
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        emit(
            &json!({"failed": true, "changed": false, "msg": format!("internal error in the module (a bug; please report it): {what}{at}")}),
        );
    }));
    let arg = std::env::args().nth(1);
    let inv = match read_invocation(arg.as_deref(), spec) {
        Ok(inv) => inv,
        Err(msg) => {
            emit(&json!({"failed": true, "changed": false, "msg": msg}));
            std::process::exit(1);
        }
    };
    super::progress::install(mask_str);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(&inv)));
    let mut out = Map::new();
    let failed = match result {
        Ok(Ok(o)) => {
            out.insert("changed".into(), json!(o.changed));
            if !o.msg.is_empty() {
                out.insert("msg".into(), json!(o.msg));
            }
            out.extend(o.data);
            if !o.warnings.is_empty() {
                out.insert("warnings".into(), json!(o.warnings));
            }
            if inv.ctx.diff
                && let Some(d) = o.diff
            {
                out.insert("diff".into(), d);
            }
            false
        }
        Ok(Err(f)) => {
            out.insert("failed".into(), json!(true));
            out.insert("changed".into(), json!(f.changed));
            out.insert("msg".into(), json!(f.msg));
            out.extend(f.data);
            if !f.warnings.is_empty() {
                out.insert("warnings".into(), json!(f.warnings));
            }
            true
        }
        // The panic hook has printed the failed result already.
        Err(_) => std::process::exit(1),
    };
    if inv.ctx.inject_invocation {
        out.insert("invocation".into(), invocation_value(&inv, spec));
    }
    emit(&Value::Object(out));
    std::process::exit(if failed { 1 } else { 0 });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ansible::spec::{Kind, Opt};

    fn spec() -> Spec {
        Spec {
            options: vec![
                Opt::new("api_password", Kind::Str).no_log(),
                Opt::new("name", Kind::Str),
            ],
            ..Default::default()
        }
    }

    fn write(args: Value) -> tempfile_path::Path {
        tempfile_path::write(&args.to_string())
    }

    mod tempfile_path {
        pub struct Path(pub std::path::PathBuf);
        impl Drop for Path {
            fn drop(&mut self) {
                let _ = std::fs::remove_file(&self.0);
            }
        }
        pub fn write(text: &str) -> Path {
            use std::sync::atomic::{AtomicU32, Ordering};
            static N: AtomicU32 = AtomicU32::new(0);
            let p = std::env::temp_dir().join(format!(
                "sankofa-args-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::SeqCst)
            ));
            std::fs::write(&p, text).unwrap();
            Path(p)
        }
    }

    #[test]
    fn splits_internal_keys_and_validates() {
        let p = write(
            json!({"name": "web", "_ansible_check_mode": true, "_ansible_diff": true, "_ansible_verbosity": 3,
                              "_ansible_module_name": "sankofa.proxmox.vm", "_ansible_new_key": 1}),
        );
        let inv = read_invocation(p.0.to_str(), &spec()).unwrap();
        assert!(inv.ctx.check_mode && inv.ctx.diff);
        assert_eq!(inv.ctx.verbosity, 3);
        assert_eq!(inv.str("name"), Some("web"));
        assert!(!inv.params.contains_key("_ansible_new_key"));
    }

    #[test]
    fn missing_or_bad_args_file() {
        assert!(
            read_invocation(None, &spec())
                .unwrap_err()
                .contains("arguments file")
        );
        assert!(
            read_invocation(Some("/nonexistent/args"), &spec())
                .unwrap_err()
                .contains("unable to read")
        );
        let p = tempfile_path::write("not json");
        assert!(
            read_invocation(p.0.to_str(), &spec())
                .unwrap_err()
                .contains("not valid JSON")
        );
    }

    #[test]
    fn secrets_are_masked_everywhere() {
        let p = write(json!({"api_password": "Sup3r-S3cret", "name": "web"}));
        let inv = read_invocation(p.0.to_str(), &spec()).unwrap();
        let v = mask(
            &json!({"msg": "login as root@pam with Sup3r-S3cret failed", "nested": ["x Sup3r-S3cret"]}),
        );
        assert_eq!(v["msg"], "login as root@pam with ******** failed");
        assert_eq!(v["nested"][0], "x ********");
        let inv_v = invocation_value(&inv, &spec());
        assert_eq!(
            inv_v["module_args"]["api_password"],
            "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER"
        );
        assert_eq!(inv_v["module_args"]["name"], "web");
    }

    #[test]
    fn secrets_are_masked_in_every_spelling() {
        let secret = "pa ss/wörd\"+&=%";
        register_secret(secret);
        for echoed in [
            secret.to_string(),
            url_encode(secret),
            url_encode(secret).to_ascii_lowercase(),
            url_encode(secret).replace("%20", "+"),
            serde_json::to_string(secret).unwrap(),
            r#""pa ss/w\u00f6rd\"+&=%""#.to_string(),
            r#""pa ss/w\u00F6rd\"+&=%""#.to_string(),
            format!("PVEAPIToken=root@pam!ci={secret}"),
        ] {
            let out = mask_str(&format!("server said: {echoed} (end)"));
            assert!(
                !out.contains("ss/w") && !out.contains("ss%2F"),
                "{echoed} -> {out}"
            );
        }
    }
}
