//! A declarative argument spec and its validation, because Ansible validates nothing for
//! binary modules: types with the coercions ad-hoc `-a k=v` needs, defaults, choices, ranges,
//! aliases, environment fallbacks, nested suboptions and the cross-option rules.
//!
//! Messages follow `AnsibleModule`'s wording so users recognise them.

use serde_json::{Map, Value};

/// The type of an option's value.
#[derive(Clone, Debug)]
pub enum Kind {
    Str,
    Bool,
    Int {
        min: Option<i64>,
        max: Option<i64>,
    },
    /// A duration in humantime form (`90s`, `15m`, `1h 30m`); a bare number means seconds.
    Duration,
    /// A list; a plain string is split on commas, as Ansible does.
    List(Box<Kind>),
    /// A dict with declared suboptions.
    Dict(Vec<Opt>),
    /// A list of dicts with declared suboptions.
    ListOfDicts(Vec<Opt>),
    /// A dict of free-form string values (keys checked by the caller).
    RawDict,
    /// Any value, passed as given (Ansible's `raw`; the caller checks it).
    Raw,
}

/// A value the argument spec gives a default for: missing only if the spec lost it, which is
/// said rather than papered over with a second default where the value is read.
pub fn given<T>(value: Option<T>, key: &str) -> Result<T, String> {
    value.ok_or_else(|| format!("{key}: no value and no default in the argument spec"))
}

/// One option.
#[derive(Clone, Debug)]
pub struct Opt {
    pub name: &'static str,
    pub kind: Kind,
    pub required: bool,
    pub default: Option<Value>,
    pub choices: &'static [&'static str],
    pub aliases: &'static [&'static str],
    pub env: &'static [&'static str],
    pub no_log: bool,
}

impl Opt {
    pub fn new(name: &'static str, kind: Kind) -> Self {
        Opt {
            name,
            kind,
            required: false,
            default: None,
            choices: &[],
            aliases: &[],
            env: &[],
            no_log: false,
        }
    }
    pub fn required(mut self) -> Self {
        self.required = true;
        self
    }
    pub fn default(mut self, value: Value) -> Self {
        self.default = Some(value);
        self
    }
    pub fn choices(mut self, choices: &'static [&'static str]) -> Self {
        self.choices = choices;
        self
    }
    pub fn aliases(mut self, aliases: &'static [&'static str]) -> Self {
        self.aliases = aliases;
        self
    }
    pub fn env(mut self, names: &'static [&'static str]) -> Self {
        self.env = names;
        self
    }
    pub fn no_log(mut self) -> Self {
        self.no_log = true;
        self
    }
}

/// A whole argument spec with its cross-option rules.
#[derive(Clone, Debug, Default)]
pub struct Spec {
    pub options: Vec<Opt>,
    pub mutually_exclusive: Vec<Vec<&'static str>>,
    pub required_together: Vec<Vec<&'static str>>,
    pub required_one_of: Vec<Vec<&'static str>>,
    /// (option, value, options required when it has that value)
    pub required_if: Vec<(&'static str, &'static str, Vec<&'static str>)>,
}

/// Where to read environment fallbacks from (injectable for tests).
pub trait Env {
    fn get(&self, key: &str) -> Option<String>;
}

/// The process environment.
pub struct ProcessEnv;

impl Env for ProcessEnv {
    fn get(&self, key: &str) -> Option<String> {
        std::env::var(key).ok().filter(|v| !v.is_empty())
    }
}

/// Validates `raw` (the user's options, `_ansible_*` keys removed) against `spec`.
/// Returns every declared option (null when unset) with values coerced to their types.
pub fn validate(
    spec: &Spec,
    raw: &Map<String, Value>,
    env: &dyn Env,
    ignore_unknown: bool,
) -> Result<Map<String, Value>, String> {
    validate_level(&spec.options, raw, env, ignore_unknown, None).and_then(|out| {
        check_rules(spec, &out)?;
        Ok(out)
    })
}

fn is_set(value: Option<&Value>) -> bool {
    !matches!(value, None | Some(Value::Null))
}

fn check_rules(spec: &Spec, out: &Map<String, Value>) -> Result<(), String> {
    for group in &spec.mutually_exclusive {
        let set: Vec<&str> = group
            .iter()
            .copied()
            .filter(|k| is_set(out.get(*k)))
            .collect();
        if set.len() > 1 {
            return Err(format!(
                "parameters are mutually exclusive: {}",
                group.join("|")
            ));
        }
    }
    for group in &spec.required_together {
        let n = group.iter().filter(|k| is_set(out.get(**k))).count();
        if n > 0 && n < group.len() {
            return Err(format!(
                "parameters are required together: {}",
                group.join(", ")
            ));
        }
    }
    for group in &spec.required_one_of {
        if !group.iter().any(|k| is_set(out.get(*k))) {
            return Err(format!(
                "one of the following is required: {}",
                group.join(", ")
            ));
        }
    }
    for (key, val, reqs) in &spec.required_if {
        if out.get(*key).and_then(Value::as_str) == Some(*val) {
            let missing: Vec<&str> = reqs
                .iter()
                .copied()
                .filter(|k| !is_set(out.get(*k)))
                .collect();
            if !missing.is_empty() {
                return Err(format!(
                    "{key} is {val} but all of the following are missing: {}",
                    missing.join(", ")
                ));
            }
        }
    }
    Ok(())
}

fn validate_level(
    opts: &[Opt],
    raw: &Map<String, Value>,
    env: &dyn Env,
    ignore_unknown: bool,
    parent: Option<&str>,
) -> Result<Map<String, Value>, String> {
    let found_in = parent.map(|p| format!(" found in {p}")).unwrap_or_default();
    let mut unknown: Vec<&str> = raw
        .keys()
        .map(String::as_str)
        .filter(|k| !opts.iter().any(|o| o.name == *k || o.aliases.contains(k)))
        .collect();
    unknown.sort();
    if !unknown.is_empty() && !ignore_unknown {
        let mut names: Vec<&str> = opts
            .iter()
            .flat_map(|o| std::iter::once(o.name).chain(o.aliases.iter().copied()))
            .collect();
        names.sort();
        return Err(format!(
            "Unsupported parameters{found_in}: {}. Supported parameters include: {}.",
            unknown.join(", "),
            names.join(", ")
        ));
    }
    let mut out = Map::new();
    let mut missing = Vec::new();
    for o in opts {
        let given: Vec<(&str, &Value)> = std::iter::once(o.name)
            .chain(o.aliases.iter().copied())
            .filter_map(|k| raw.get(k).map(|v| (k, v)))
            .collect();
        if given.len() > 1 {
            let names: Vec<&str> = given.iter().map(|(k, _)| *k).collect();
            return Err(format!(
                "parameters are mutually exclusive: {}{found_in}",
                names.join("|")
            ));
        }
        let mut value = given
            .first()
            .map(|(_, v)| (*v).clone())
            .unwrap_or(Value::Null);
        if value.is_null()
            && let Some(v) = o.env.iter().find_map(|e| env.get(e))
        {
            value = Value::String(v);
        }
        if value.is_null() {
            if o.required {
                missing.push(o.name);
                continue;
            }
            out.insert(o.name.to_string(), o.default.clone().unwrap_or(Value::Null));
            continue;
        }
        let label = match parent {
            Some(p) => format!("{p}.{}", o.name),
            None => o.name.to_string(),
        };
        let v = coerce(&o.kind, &value, &label, ignore_unknown)?;
        if !o.choices.is_empty() {
            let check = |x: &Value| -> Result<(), String> {
                let s = scalar_text(x);
                if o.choices.contains(&s.as_str()) {
                    Ok(())
                } else {
                    Err(format!(
                        "value of {label} must be one of: {}, got: {s}",
                        o.choices.join(", ")
                    ))
                }
            };
            match &v {
                Value::Array(items) => items.iter().try_for_each(check)?,
                other => check(other)?,
            }
        }
        out.insert(o.name.to_string(), v);
    }
    if !missing.is_empty() {
        return Err(format!(
            "missing required arguments: {}{found_in}",
            missing.join(", ")
        ));
    }
    Ok(out)
}

fn scalar_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn type_err(label: &str, value: &Value, ty: &str, why: &str) -> String {
    let got = match value {
        Value::String(_) => "str",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_i64() || n.is_u64() => "int",
        Value::Number(_) => "float",
        Value::Array(_) => "list",
        Value::Object(_) => "dict",
        Value::Null => "NoneType",
    };
    // Scalars are quoted (bounded); a list or dict is named by its type only.
    match value {
        Value::String(s) => format!(
            "argument '{label}' is of type {got} and we were unable to convert to {ty}: {why} (got {})",
            crate::ansible::text::quote(s)
        ),
        Value::Number(_) | Value::Bool(_) => format!(
            "argument '{label}' is of type {got} and we were unable to convert to {ty}: {why} (got {})",
            crate::ansible::text::bounded(&value.to_string())
        ),
        _ => format!(
            "argument '{label}' is of type {got} and we were unable to convert to {ty}: {why}"
        ),
    }
}

/// Parses Ansible's boolean spellings.
pub fn parse_bool(text: &str) -> Option<bool> {
    match text.trim().to_ascii_lowercase().as_str() {
        "yes" | "true" | "1" | "on" | "y" | "t" => Some(true),
        "no" | "false" | "0" | "off" | "n" | "f" => Some(false),
        _ => None,
    }
}

/// The longest duration any option takes (ten years): more is a mistake, and every instant
/// computed from a duration stays far from overflowing.
pub const MAX_DURATION: std::time::Duration = std::time::Duration::from_secs(10 * 365 * 86_400);

/// Parses a duration: humantime (`15m`, `1h 30m`, `500ms`) or a bare number of seconds, at
/// most [`MAX_DURATION`].
pub fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let t = text.trim();
    let shown = crate::ansible::text::bounded(t);
    let d = if let Ok(secs) = t.parse::<f64>() {
        if !(secs.is_finite() && secs >= 0.0) {
            return Err(format!("'{shown}' is not a non-negative duration"));
        }
        if secs > MAX_DURATION.as_secs_f64() {
            return Err(format!("'{shown}' is longer than 10 years"));
        }
        std::time::Duration::from_secs_f64(secs)
    } else {
        humantime::parse_duration(t)
            .map_err(|e| format!("'{shown}' is not a duration like 90s, 15m or 1h 30m ({e})"))?
    };
    if d > MAX_DURATION {
        return Err(format!("'{shown}' is longer than 10 years"));
    }
    Ok(d)
}

fn coerce(kind: &Kind, value: &Value, label: &str, ignore_unknown: bool) -> Result<Value, String> {
    match kind {
        Kind::Str => match value {
            Value::String(s) => Ok(Value::String(s.clone())),
            Value::Number(n) => Ok(Value::String(n.to_string())),
            Value::Bool(b) => Ok(Value::String(b.to_string())),
            other => Err(type_err(label, other, "str", "only scalars can be strings")),
        },
        Kind::Bool => match value {
            Value::Bool(b) => Ok(Value::Bool(*b)),
            Value::String(s) => parse_bool(s)
                .map(Value::Bool)
                .ok_or_else(|| type_err(label, value, "bool", &format!("The value '{s}' is not a valid boolean.  Valid booleans include: 'yes', 'no', 'true', 'false', '1', '0', 'on', 'off'"))),
            Value::Number(n) if n.as_i64() == Some(0) || n.as_i64() == Some(1) => Ok(Value::Bool(n.as_i64() == Some(1))),
            other => Err(type_err(label, other, "bool", "not a boolean")),
        },
        Kind::Int { min, max } => {
            let n = match value {
                // Only whole numbers that fit: `1e20` is refused, not saturated to i64::MAX.
                Value::Number(n) => n.as_i64().or_else(|| {
                    n.as_f64()
                        .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15)
                        .map(|f| f as i64)
                }),
                Value::String(s) => s.trim().parse::<i64>().ok(),
                _ => None,
            }
            .ok_or_else(|| type_err(label, value, "int", "not an integer"))?;
            if let Some(m) = min.filter(|m| n < *m) {
                return Err(format!("value of {label} must be at least {m}, got: {n}"));
            }
            if let Some(m) = max.filter(|m| n > *m) {
                return Err(format!("value of {label} must be at most {m}, got: {n}"));
            }
            Ok(Value::from(n))
        }
        Kind::Duration => {
            let s = scalar_text(value);
            parse_duration(&s).map_err(|e| format!("value of {label} is not a valid duration: {e}"))?;
            Ok(Value::String(s.trim().to_string()))
        }
        Kind::List(inner) => {
            let items: Vec<Value> = match value {
                Value::Array(a) => a.clone(),
                Value::String(s) if s.trim().is_empty() => Vec::new(),
                Value::String(s) => s.split(',').map(|x| Value::String(x.trim().to_string())).collect(),
                other => vec![other.clone()],
            };
            items
                .iter()
                .enumerate()
                .map(|(i, x)| coerce(inner, x, &format!("{label}[{i}]"), ignore_unknown))
                .collect::<Result<Vec<_>, _>>()
                .map(Value::Array)
        }
        Kind::Dict(sub) => {
            let m = as_dict(value, label)?;
            validate_level(sub, &m, &NoEnv, ignore_unknown, Some(label)).map(Value::Object)
        }
        Kind::ListOfDicts(sub) => {
            let items = match value {
                Value::Array(a) => a.clone(),
                Value::String(s) => match serde_json::from_str::<Value>(s) {
                    Ok(Value::Array(a)) => a,
                    _ => return Err(type_err(label, value, "list", "give a YAML list of dicts, or JSON")),
                },
                other => vec![other.clone()],
            };
            items
                .iter()
                .enumerate()
                .map(|(i, x)| {
                    let l = format!("{label}[{i}]");
                    let m = as_dict(x, &l)?;
                    validate_level(sub, &m, &NoEnv, ignore_unknown, Some(&l)).map(Value::Object)
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Value::Array)
        }
        Kind::Raw => Ok(value.clone()),
        Kind::RawDict => {
            let m = as_dict(value, label)?;
            let mut out = Map::new();
            for (k, x) in m {
                let s = match x {
                    Value::String(s) => s,
                    Value::Bool(b) => (if b { "1" } else { "0" }).to_string(),
                    Value::Number(n) => n.to_string(),
                    other => return Err(type_err(&format!("{label}.{k}"), &other, "str", "values must be scalars")),
                };
                out.insert(k, Value::String(s));
            }
            Ok(Value::Object(out))
        }
    }
}

/// Suboptions take no environment fallbacks.
struct NoEnv;

impl Env for NoEnv {
    fn get(&self, _: &str) -> Option<String> {
        None
    }
}

/// A dict from a dict, a JSON string, or Ansible's `k=v k2=v2` string form.
fn as_dict(value: &Value, label: &str) -> Result<Map<String, Value>, String> {
    match value {
        Value::Object(m) => Ok(m.clone()),
        Value::String(s) => {
            if let Ok(Value::Object(m)) = serde_json::from_str::<Value>(s) {
                return Ok(m);
            }
            let mut m = Map::new();
            for part in s.split([' ', ',']).filter(|p| !p.is_empty()) {
                let (k, val) = part.split_once('=').ok_or_else(|| {
                    type_err(
                        label,
                        value,
                        "dict",
                        "dictionary requested, could not parse JSON or key=value",
                    )
                })?;
                m.insert(k.to_string(), Value::String(val.to_string()));
            }
            Ok(m)
        }
        other => Err(type_err(label, other, "dict", "not a dictionary")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::HashMap;

    struct MapEnv(HashMap<&'static str, &'static str>);
    impl Env for MapEnv {
        fn get(&self, key: &str) -> Option<String> {
            self.0.get(key).map(|v| v.to_string())
        }
    }

    fn spec() -> Spec {
        Spec {
            options: vec![
                Opt::new("name", Kind::Str).aliases(&["vm_name"]),
                Opt::new(
                    "cores",
                    Kind::Int {
                        min: Some(1),
                        max: Some(128),
                    },
                ),
                Opt::new("onboot", Kind::Bool),
                Opt::new("state", Kind::Str)
                    .choices(&["present", "absent"])
                    .default(json!("present")),
                Opt::new("host", Kind::Str)
                    .required()
                    .env(&["PROXMOX_HOST"]),
                Opt::new("timeout", Kind::Duration).default(json!("15m")),
                Opt::new("tags", Kind::List(Box::new(Kind::Str))),
                Opt::new("token_id", Kind::Str),
                Opt::new("token_secret", Kind::Str).no_log(),
                Opt::new("password", Kind::Str).no_log(),
                Opt::new("node", Kind::Str),
                Opt::new(
                    "disks",
                    Kind::ListOfDicts(vec![
                        Opt::new("slot", Kind::Str).required(),
                        Opt::new("size", Kind::Str),
                    ]),
                ),
            ],
            mutually_exclusive: vec![vec!["password", "token_secret"]],
            required_together: vec![vec!["token_id", "token_secret"]],
            required_one_of: vec![],
            required_if: vec![("state", "present", vec!["node"])],
        }
    }

    fn run(args: Value) -> Result<Map<String, Value>, String> {
        let env = MapEnv(HashMap::new());
        validate(&spec(), args.as_object().unwrap(), &env, false)
    }

    #[test]
    fn coerces_adhoc_strings() {
        let out =
            run(json!({"host": "h", "node": "n", "cores": "4", "onboot": "yes", "tags": "a, b"}))
                .unwrap();
        assert_eq!(out["cores"], json!(4));
        assert_eq!(out["onboot"], json!(true));
        assert_eq!(out["tags"], json!(["a", "b"]));
        assert_eq!(out["state"], json!("present"));
        assert_eq!(out["name"], Value::Null);
    }

    #[test]
    fn unknown_options_are_listed() {
        let e = run(json!({"host": "h", "node": "n", "bogus": 1})).unwrap_err();
        assert!(
            e.starts_with("Unsupported parameters: bogus. Supported parameters include: "),
            "{e}"
        );
        assert!(e.contains("cores") && e.contains("vm_name"));
        let env = MapEnv(HashMap::new());
        let ok = validate(
            &spec(),
            json!({"host": "h", "node": "n", "bogus": 1})
                .as_object()
                .unwrap(),
            &env,
            true,
        );
        assert!(ok.is_ok());
    }

    #[test]
    fn errors_name_the_option() {
        assert!(
            run(json!({"node": "n"}))
                .unwrap_err()
                .contains("missing required arguments: host")
        );
        assert!(
            run(json!({"host": "h", "node": "n", "cores": "many"}))
                .unwrap_err()
                .contains("argument 'cores' is of type str")
        );
        assert!(
            run(json!({"host": "h", "node": "n", "cores": 0}))
                .unwrap_err()
                .contains("value of cores must be at least 1")
        );
        assert!(
            run(json!({"host": "h", "node": "n", "state": "gone"}))
                .unwrap_err()
                .contains("value of state must be one of: present, absent, got: gone")
        );
        assert!(
            run(json!({"host": "h", "node": "n", "timeout": "soon"}))
                .unwrap_err()
                .contains("value of timeout is not a valid duration")
        );
        assert!(
            run(json!({"host": "h", "node": "n", "onboot": "perhaps"}))
                .unwrap_err()
                .contains("argument 'onboot'")
        );
    }

    #[test]
    fn cross_option_rules() {
        assert_eq!(
            run(json!({"host": "h", "node": "n", "password": "p", "token_secret": "s", "token_id": "t"})).unwrap_err(),
            "parameters are mutually exclusive: password|token_secret"
        );
        assert_eq!(
            run(json!({"host": "h", "node": "n", "token_id": "t"})).unwrap_err(),
            "parameters are required together: token_id, token_secret"
        );
        assert_eq!(
            run(json!({"host": "h"})).unwrap_err(),
            "state is present but all of the following are missing: node"
        );
        assert!(run(json!({"host": "h", "state": "absent"})).is_ok());
        assert!(
            run(json!({"host": "h", "node": "n", "name": "a", "vm_name": "b"}))
                .unwrap_err()
                .contains("mutually exclusive: name|vm_name")
        );
    }

    #[test]
    fn env_fallback_and_aliases() {
        let env = MapEnv(HashMap::from([("PROXMOX_HOST", "pve.example")]));
        let out = validate(
            &spec(),
            json!({"node": "n", "vm_name": "web"}).as_object().unwrap(),
            &env,
            false,
        )
        .unwrap();
        assert_eq!(out["host"], json!("pve.example"));
        assert_eq!(out["name"], json!("web"));
    }

    #[test]
    fn nested_suboptions() {
        let out =
            run(json!({"host": "h", "node": "n", "disks": [{"slot": "scsi0", "size": "20G"}]}))
                .unwrap();
        assert_eq!(out["disks"][0]["slot"], json!("scsi0"));
        let e = run(json!({"host": "h", "node": "n", "disks": [{"size": "20G"}]})).unwrap_err();
        assert_eq!(e, "missing required arguments: slot found in disks[0]");
        let e = run(json!({"host": "h", "node": "n", "disks": [{"slot": "scsi0", "sizee": "1G"}]}))
            .unwrap_err();
        assert!(
            e.starts_with("Unsupported parameters found in disks[0]: sizee."),
            "{e}"
        );
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("15m").unwrap().as_secs(), 900);
        assert_eq!(parse_duration("90").unwrap().as_secs(), 90);
        assert_eq!(parse_duration("1h 30m").unwrap().as_secs(), 5400);
        assert!(parse_duration("-5").is_err());
        assert!(parse_duration("later").is_err());
    }
}
