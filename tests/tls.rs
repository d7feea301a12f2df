//! TLS: a self-signed PVE is refused by default with an actionable message; `ca_path` and the
//! right `api_fingerprint` are accepted; a wrong fingerprint is refused; `validate_certs: false`
//! works and warns.

use crate::support::*;
use serde_json::json;

#[test]
fn certificate_checks() {
    let sim = Sim::start(&[], &[]);
    let base = json!({"api_host": "127.0.0.1", "api_port": sim.port(), "api_password": PASSWORD, "vmid": 100, "state": "absent"});

    let r = failed(run(base.clone()));
    let msg = r["msg"].as_str().unwrap();
    assert!(
        msg.contains("TLS connection to https://127.0.0.1:") && msg.contains("UnknownIssuer"),
        "{msg}"
    );
    assert!(
        msg.contains("set ca_path to the cluster CA") && msg.contains("api_fingerprint"),
        "{msg}"
    );

    let r = ok(run(merge(&[
        base.clone(),
        json!({"ca_path": sim.info["ca"]}),
    ])));
    assert_eq!(r["changed"], false);

    ok(run(merge(&[
        base.clone(),
        json!({"api_fingerprint": sim.fingerprint()}),
    ])));
    ok(run(merge(&[
        base.clone(),
        json!({"api_fingerprint": sim.fingerprint().replace(':', "").to_lowercase()}),
    ])));

    let wrong = "AA:".repeat(31) + "AA";
    let r = failed(run(merge(&[
        base.clone(),
        json!({"api_fingerprint": wrong}),
    ])));
    let msg = r["msg"].as_str().unwrap();
    assert!(
        msg.contains(&format!(
            "certificate fingerprint mismatch: the server presented {}, the pinned fingerprint is {wrong}",
            sim.fingerprint()
        )) && msg.contains("api_fingerprint to the node certificate's SHA-256 fingerprint"),
        "{msg}"
    );

    let r = ok(run(merge(&[base, json!({"validate_certs": false})])));
    assert!(
        r["warnings"][0]
            .as_str()
            .unwrap()
            .starts_with("validate_certs is false"),
        "{r}"
    );
    // Nothing reached the API without a trusted certificate.
    assert_eq!(
        sim.requests()
            .iter()
            .filter(|q| q["path"] == "/access/ticket")
            .count(),
        4
    );
}
