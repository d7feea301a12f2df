//! Secrets never appear in stdout, stderr, the result or the simulator's request log, on
//! success and on failure, at any verbosity.

use crate::support::*;
use serde_json::{Value, json};

const CI_PASSWORD: &str = "Ci-Pass-Secret-9911";

fn assert_clean(sim: &Sim, out: &str, what: &str) {
    let log = std::fs::read_to_string(sim.data().join("requests.jsonl")).unwrap_or_default();
    for secret in [PASSWORD, TOKEN_SECRET, CI_PASSWORD] {
        assert!(
            !out.contains(secret),
            "{what}: {secret} in the module output: {out}"
        );
        assert!(!log.contains(secret), "{what}: {secret} in the request log");
    }
}

#[test]
fn secrets_stay_out_of_every_output() {
    let img = small_image();
    let sim = Sim::start(&[&img], &[]);
    let base = json!({"node": "pve1", "vmid": 100, "name": "sec", "cipassword": CI_PASSWORD, "ciuser": "u",
                      "disks": [{"slot": "scsi0", "storage": "local-lvm", "import_from": "local:import/small.qcow2"}],
                      "_ansible_verbosity": 4, "_ansible_inject_invocation": true, "_ansible_diff": true});
    let runs: Vec<(&str, Value)> = vec![
        ("create with a password", merge(&[sim.conn(), base.clone()])),
        (
            "update with a token",
            merge(&[
                sim.token_conn(),
                base.clone(),
                json!({"update_password": "always", "cores": 2}),
            ]),
        ),
        (
            "check mode",
            merge(&[
                sim.conn(),
                base.clone(),
                json!({"_ansible_check_mode": true, "update_password": "always"}),
            ]),
        ),
        (
            "wrong password",
            merge(&[
                sim.conn(),
                base.clone(),
                json!({"api_password": format!("{PASSWORD}-nope")}),
            ]),
        ),
        (
            "a secret quoted in another option's error",
            merge(&[
                sim.conn(),
                base.clone(),
                json!({"name": format!("x_{CI_PASSWORD}")}),
            ]),
        ),
        (
            "a secret of the wrong type",
            merge(&[
                sim.conn(),
                base.clone(),
                json!({"cipassword": {"v": CI_PASSWORD}}),
            ]),
        ),
        (
            "a failing task",
            merge(&[
                sim.conn(),
                base.clone(),
                json!({"vmid": 101, "name": "sec2", "disks": [{"slot": "scsi0", "storage": "local-lvm", "import_from": "local:import/missing.qcow2"}]}),
            ]),
        ),
    ];
    for (what, args) in runs {
        let r = run(args);
        assert_clean(&sim, &format!("{}{}", r.stdout, r.stderr), what);
        if let Some(inv) = r.result.get("invocation") {
            let args = &inv["module_args"];
            assert_eq!(
                args["api_password"].as_str().map(|_| ()),
                args.get("api_password").and_then(Value::as_str).map(|_| ())
            );
            for k in ["api_password", "api_token_secret", "cipassword"] {
                if let Some(v) = args[k].as_str() {
                    assert_eq!(
                        v, "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER",
                        "{what}: {k} in invocation"
                    );
                }
            }
        }
    }
    // Without inject_invocation there is no invocation at all.
    let r = run(merge(&[
        sim.conn(),
        base,
        json!({"_ansible_inject_invocation": false}),
    ]));
    assert!(r.result.get("invocation").is_none());
}

/// A server that echoes the request in its error, JSON-escaped with `\u00e9` for each
/// non-ASCII character, does not leak a password: that spelling is masked too.
#[test]
fn a_password_echoed_in_json_escapes_is_masked() {
    const ACCENTED: &str = "S\u{e9}cret-P\u{e4}ss-7733";
    let escaped = [
        "S\\u00e9cret-P\\u00e4ss-7733",
        "S\\u00E9cret-P\\u00E4ss-7733",
    ];
    let sim = Sim::start(&[], &[]);
    for echoed in escaped {
        sim.clear_faults();
        sim.fault(json!({"kind": "http", "method": "POST", "path": "/qemu", "status": 400,
                         "message": format!("parameter verification failed: {{\"cipassword\":\"{echoed}\"}}")}));
        let r = run(merge(&[
            sim.conn(),
            json!({"node": "pve1", "vmid": 100, "name": "sec", "ciuser": "u", "cipassword": ACCENTED,
                   "disks": [{"slot": "scsi0", "storage": "local-lvm", "size": "1G"}]}),
        ]));
        let out = format!("{}{}", r.stdout, r.stderr);
        assert!(
            out.contains("parameter verification failed"),
            "the server's answer is reported: {out}"
        );
        for spelling in [ACCENTED, escaped[0], escaped[1], "cret-P"] {
            assert!(!out.contains(spelling), "{spelling} in the output: {out}");
        }
    }
}

/// `nocloud.user_data` and `vendor_data` are secret unless `nocloud.show_data`: the
/// invocation echo (`_ansible_inject_invocation`) masks them, given as a dict or as a text,
/// also when the run fails before the module reads them; `show_data: true` shows them.
#[test]
fn nocloud_parts_are_masked_in_the_invocation_echo_unless_shown() {
    const MARKER: &str = "nocloud-secret-marker-5521";
    let sim = Sim::start(&[], &[]);
    let base = json!({"node": "pve1", "vmid": 100, "name": "sec", "_ansible_check_mode": true,
                      "_ansible_inject_invocation": true, "_ansible_diff": true});
    let dict = json!({"runcmd": [["echo", MARKER]], "package_update": true});
    let text = format!("#cloud-config\nruncmd:\n  - [echo, {MARKER}]\n");
    let bad_yaml = format!("#cloud-config\nruncmd:\n  - [echo, {MARKER}]\n bad: [x]\n");
    let runs: Vec<(&str, Value, bool)> = vec![
        ("a dict", json!({"user_data": dict.clone()}), true),
        (
            "a text",
            json!({"user_data": text, "vendor_data": text}),
            true,
        ),
        ("refused YAML", json!({"user_data": bad_yaml}), false),
        (
            "another option refused first",
            json!({"user_data": dict.clone(), "storage": "no such storage!"}),
            false,
        ),
    ];
    for (what, nocloud, succeeds) in runs {
        let r = run(merge(&[
            sim.conn(),
            base.clone(),
            json!({"nocloud": nocloud}),
        ]));
        assert_eq!(
            r.result["failed"].as_bool().unwrap_or(false),
            !succeeds,
            "{what}: {}",
            r.stdout
        );
        let out = format!("{}{}", r.stdout, r.stderr);
        assert!(
            !out.contains(MARKER),
            "{what}: user-data in the output: {out}"
        );
        let echoed = &r.result["invocation"]["module_args"]["nocloud"];
        assert_eq!(
            echoed["user_data"], "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER",
            "{what}: {echoed}"
        );
    }
    let shown = run(merge(&[
        sim.conn(),
        base,
        json!({"nocloud": {"user_data": dict.clone(), "show_data": true}}),
    ]));
    assert_eq!(
        shown.result["invocation"]["module_args"]["nocloud"]["user_data"], dict,
        "{}",
        shown.stdout
    );
    assert!(sim.writes().is_empty(), "{:?}", sim.writes());
}
