//! The sidecar docs (`plugins/modules/*.yml`, with the `connection` doc fragment) say what the
//! argument specs do. Ansible cannot check a binary module's docs against its code
//! (validate-modules cannot read a binary), so this test does: it asks `ansible-doc` for each
//! module's resolved documentation and compares every option, suboptions included: names,
//! types, elements, required, defaults, choices, aliases, the environment variables a
//! description names, and that a `no_log` option says it is never logged.
//!
//! It needs the virtualenv and the collection link that `make test` sets up first
//! (`make venv collection`).

use std::path::Path;
use std::process::Command;

use sankofa_proxmox::ansible::spec::{Kind, Opt, Spec};
use serde_json::{Map, Value, json};

/// Runs this venv's `ansible-doc` on the checkout's collection link.
fn run_ansible_doc(args: &[&str]) -> std::process::Output {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = root.join(".venv/bin/ansible-doc");
    assert!(
        doc.exists(),
        "{} is missing: run `make venv collection` (make test does) before this test",
        doc.display()
    );
    let out = Command::new(&doc)
        .args(args)
        .env("ANSIBLE_COLLECTIONS_PATH", root.join(".work/collections"))
        .env("ANSIBLE_HOME", root.join(".work/ansible-home"))
        .env("ANSIBLE_NOCOLOR", "1")
        .output()
        .expect("running ansible-doc");
    assert!(
        out.status.success(),
        "ansible-doc {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn ansible_doc(module: &str) -> Map<String, Value> {
    let out = run_ansible_doc(&[
        "-t",
        "module",
        "--json",
        &format!("sankofa.proxmox.{module}"),
    ]);
    let v: Value = serde_json::from_slice(&out.stdout).expect("ansible-doc's JSON");
    v[format!("sankofa.proxmox.{module}")]["doc"]["options"]
        .as_object()
        .unwrap_or_else(|| panic!("no options in the docs of {module}: {v}"))
        .clone()
}

/// (type, elements, suboptions) as the docs spell a kind.
fn doc_type(kind: &Kind) -> (&'static str, Option<&'static str>, Option<&[Opt]>) {
    match kind {
        Kind::Str | Kind::Duration => ("str", None, None),
        Kind::Bool => ("bool", None, None),
        Kind::Int { .. } => ("int", None, None),
        Kind::List(inner) => ("list", Some(doc_type(inner).0), None),
        Kind::Dict(opts) => ("dict", None, Some(opts)),
        Kind::ListOfDicts(opts) => ("list", Some("dict"), Some(opts)),
        Kind::RawDict => ("dict", None, None),
        Kind::Raw => ("raw", None, None),
    }
}

fn strings(v: Option<&Value>) -> Vec<String> {
    let mut out: Vec<String> = v
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|x| x.as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

fn compare(path: &str, opts: &[Opt], docs: &Map<String, Value>, diffs: &mut Vec<String>) {
    for name in docs.keys() {
        if !opts.iter().any(|o| o.name == name) {
            diffs.push(format!(
                "{path}{name}: documented, not in the argument spec"
            ));
        }
    }
    for o in opts {
        let at = format!("{path}{}", o.name);
        let Some(d) = docs.get(o.name) else {
            diffs.push(format!("{at}: in the argument spec, not documented"));
            continue;
        };
        let (ty, elements, subs) = doc_type(&o.kind);
        if d["type"].as_str() != Some(ty) {
            diffs.push(format!(
                "{at}: type {} in the docs, {ty} in the spec",
                d["type"]
            ));
        }
        if d["elements"].as_str() != elements {
            diffs.push(format!(
                "{at}: elements {} in the docs, {elements:?} in the spec",
                d["elements"]
            ));
        }
        if d["required"].as_bool().unwrap_or(false) != o.required {
            diffs.push(format!(
                "{at}: required {} in the docs, {} in the spec",
                d["required"], o.required
            ));
        }
        let default = o.default.clone().unwrap_or(Value::Null);
        if d.get("default").cloned().unwrap_or(Value::Null) != default {
            diffs.push(format!(
                "{at}: default {} in the docs, {default} in the spec",
                d.get("default").unwrap_or(&Value::Null)
            ));
        }
        let mut choices: Vec<String> = o.choices.iter().map(|c| c.to_string()).collect();
        choices.sort();
        if strings(d.get("choices")) != choices {
            diffs.push(format!(
                "{at}: choices {} in the docs, {choices:?} in the spec",
                d.get("choices").unwrap_or(&Value::Null)
            ));
        }
        let mut aliases: Vec<String> = o.aliases.iter().map(|c| c.to_string()).collect();
        aliases.sort();
        if strings(d.get("aliases")) != aliases {
            diffs.push(format!(
                "{at}: aliases {} in the docs, {aliases:?} in the spec",
                d.get("aliases").unwrap_or(&Value::Null)
            ));
        }
        let text = d["description"].to_string();
        for var in o.env {
            if !text.contains(&format!("E({var})")) {
                diffs.push(format!(
                    "{at}: the spec falls back to ${var}; the docs do not say so"
                ));
            }
        }
        for var in text.split("E(").skip(1).filter_map(|s| s.split(')').next()) {
            if var.starts_with("PROXMOX_") && !o.env.contains(&var) {
                diffs.push(format!(
                    "{at}: the docs name ${var}; the spec does not read it"
                ));
            }
        }
        if o.no_log != text.contains("Never logged") {
            diffs.push(format!(
                "{at}: no_log is {} in the spec; the docs {} say it is never logged",
                o.no_log,
                if o.no_log { "do not" } else { "" }
            ));
        }
        match (subs, d.get("suboptions").and_then(Value::as_object)) {
            (Some(opts), Some(docs)) => compare(&format!("{at}[]."), opts, docs, diffs),
            (Some(_), None) => diffs.push(format!("{at}: suboptions not documented")),
            (None, Some(_)) => diffs.push(format!("{at}: suboptions documented, none in the spec")),
            (None, None) => {}
        }
    }
}

fn check(module: &str, spec: Spec) {
    let docs = ansible_doc(module);
    let mut diffs = Vec::new();
    compare("", &spec.options, &docs, &mut diffs);
    assert!(
        diffs.is_empty(),
        "the docs of sankofa.proxmox.{module} and its argument spec differ:\n{}",
        diffs.join("\n")
    );
}

#[test]
fn vm_docs_match_the_argument_spec() {
    check("vm", sankofa_proxmox::vm::spec::argument_spec());
}

#[test]
fn image_docs_match_the_argument_spec() {
    check("image", sankofa_proxmox::image::spec::argument_spec());
}

#[test]
fn snapshot_docs_match_the_argument_spec() {
    check("snapshot", sankofa_proxmox::snapshot::spec::argument_spec());
}

#[test]
fn vm_info_docs_match_the_argument_spec() {
    check("vm_info", sankofa_proxmox::vm_info::spec::argument_spec());
}

/// `ansible-doc -l` lists every module (each program in src/bin/), with the short description
/// of its sidecar docs, and warns about none (binary modules alone are read as text and
/// dropped: the doc-only plugins/modules/*.py files are what it lists).
#[test]
fn ansible_doc_lists_every_module() {
    let out = run_ansible_doc(&["-t", "module", "-l", "--json", "sankofa.proxmox"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.to_lowercase().contains("warning"),
        "ansible-doc -l warned: {stderr}"
    );
    let listed: Map<String, Value> =
        serde_json::from_slice(&out.stdout).expect("ansible-doc -l's JSON");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut modules: Vec<String> = std::fs::read_dir(root.join("src/bin"))
        .expect("reading src/bin")
        .map(|entry| {
            let path = entry.expect("a src/bin entry").path();
            path.file_stem()
                .and_then(|stem| stem.to_str())
                .expect("a program name")
                .to_string()
        })
        .collect();
    modules.sort();
    let mut names: Vec<String> = listed.keys().cloned().collect();
    names.sort();
    let expected: Vec<String> = modules
        .iter()
        .map(|module| format!("sankofa.proxmox.{module}"))
        .collect();
    assert_eq!(names, expected, "ansible-doc -l lists {names:?}");
    for module in &modules {
        let sidecar = std::fs::read_to_string(root.join(format!("plugins/modules/{module}.yml")))
            .expect("reading the sidecar docs");
        let short = sidecar
            .lines()
            .find_map(|line| line.trim().strip_prefix("short_description:"))
            .map(str::trim)
            .expect("a short_description in the sidecar docs");
        assert_eq!(
            listed[&format!("sankofa.proxmox.{module}")].as_str(),
            Some(short),
            "the short description of {module}"
        );
    }
}

/// The comparison itself finds a difference of each kind (so a passing run means something).
#[test]
fn the_comparison_notices_each_kind_of_difference() {
    let opts = vec![
        Opt::new("a", Kind::Str)
            .default(json!("x"))
            .env(&["PROXMOX_A"]),
        Opt::new("b", Kind::Bool).no_log(),
    ];
    let docs = json!({
        "a": {"type": "int", "default": "y", "description": ["Environment variable E(PROXMOX_B)."],
              "choices": ["p"], "aliases": ["q"], "required": true},
        "b": {"type": "bool", "description": ["A secret."]},
        "c": {"type": "str", "description": []},
    });
    let mut diffs = Vec::new();
    compare("", &opts, docs.as_object().unwrap(), &mut diffs);
    for part in [
        "c: documented",
        "a: type",
        "a: required",
        "a: default",
        "a: choices",
        "a: aliases",
        "falls back to $PROXMOX_A",
        "name $PROXMOX_B",
        "b: no_log",
    ] {
        assert!(
            diffs.iter().any(|d| d.contains(part)),
            "{part} not noticed: {diffs:#?}"
        );
    }
}
