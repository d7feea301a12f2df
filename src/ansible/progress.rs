//! Live progress on stderr, for the collection's action plugins: when the plugin runs the
//! binary itself (a local connection, not `async`), it sets `SANKOFA_PROGRESS=1` in the
//! binary's environment, reads stderr while the task runs and shows each event with Ansible's
//! `Display`. Each event is one line, one JSON object with one key:
//!
//! ```json
//! {"sankofa_progress": {"upid": "UPID:pve1:…:qmcreate:100:root@pam:", "node": "pve1",
//!   "task": "qmcreate", "vmid": 100, "what": "import local:import/noble.qcow2", "copy": 1,
//!   "percent": 45.0, "done_bytes": 1208925819, "total_bytes": 2684354560,
//!   "rate_bytes_per_s": 39845888.0, "eta_s": 37, "elapsed_s": 31.2}}
//! ```
//!
//! Unknown values are `null` (a log without sizes, a rate not measured yet, a task whose id is
//! not a VM). Without the variable (Ansible's own module execution, another controller),
//! nothing is written: stderr stays as it was. The result on stdout is the same either way.
//! The plugin does not set it for a `no_log` task (it leaves those to Ansible), so `no_log` is
//! the plugin's to honour; the binary does not read `_ansible_no_log` for this, because
//! Ansible also sets that for `no_target_syslog`, which hides nothing.

use std::io::Write;

use serde_json::{Value, json};

use crate::pve::task_progress::{TaskProgress, set_observer};

/// The environment variable that asks for the events, and the value that does.
pub const ENV: &str = "SANKOFA_PROGRESS";
pub const ON: &str = "1";

/// The key of every event line.
pub const KEY: &str = "sankofa_progress";

/// Whether a run writes the events: [`ENV`] has exactly this value.
pub fn wanted(value: Option<&str>) -> bool {
    value == Some(ON)
}

/// Starts writing the events on stderr if the run asks for them (see [`wanted`]), each
/// through `mask` (the protocol's: every registered secret masked, as in the result).
pub fn install(mask: fn(&str) -> String) {
    if wanted(std::env::var(ENV).ok().as_deref()) {
        set_observer(Box::new(move |event| write_line(&mask(&line(event)))));
    }
}

/// An event as its JSON line (without the newline).
pub fn line(event: &TaskProgress) -> String {
    serde_json::to_string(&json!({ KEY: fields(event) })).unwrap_or_default()
}

fn fields(event: &TaskProgress) -> Value {
    let round = |value: f64, places: i32| {
        let scale = 10f64.powi(places);
        (value * scale).round() / scale
    };
    json!({
        "upid": event.upid.text,
        "node": event.upid.node,
        "task": event.upid.task_type,
        "vmid": event.vmid(),
        "what": event.what,
        "copy": event.copy,
        "percent": round(event.percent, 2),
        "done_bytes": event.done_bytes,
        "total_bytes": event.total_bytes,
        "rate_bytes_per_s": event.rate_bytes_per_s,
        "eta_s": event.eta.map(|left| left.as_secs()),
        "elapsed_s": round(event.elapsed.as_secs_f64(), 1),
    })
}

/// Writes one line whole: a reader of stderr sees every event on a line of its own.
fn write_line(text: &str) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(format!("{text}\n").as_bytes());
    let _ = err.flush();
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::pve::upid::Upid;

    #[test]
    fn only_the_variable_set_to_one_turns_it_on() {
        assert!(wanted(Some("1")));
        for other in [None, Some("0"), Some(""), Some("true"), Some("1 ")] {
            assert!(!wanted(other), "{other:?}");
        }
    }

    #[test]
    fn an_event_is_one_json_line_under_one_key() {
        let upid =
            Upid::parse("UPID:pve1:00001234:00005678:65000000:qmcreate:100:root@pam:").unwrap();
        let event = TaskProgress {
            upid: upid.clone(),
            what: "import local:import/noble.qcow2".into(),
            copy: 1,
            percent: 45.004,
            done_bytes: Some(1_208_925_819),
            total_bytes: Some(2_684_354_560),
            rate_bytes_per_s: Some(39_845_888.0),
            eta: Some(Duration::from_secs(37)),
            elapsed: Duration::from_millis(31_240),
        };
        let text = line(&event);
        assert!(!text.contains('\n'));
        let parsed: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            parsed,
            json!({"sankofa_progress": {
                "upid": upid.text, "node": "pve1", "task": "qmcreate", "vmid": 100,
                "what": "import local:import/noble.qcow2", "copy": 1, "percent": 45.0,
                "done_bytes": 1_208_925_819u64, "total_bytes": 2_684_354_560u64,
                "rate_bytes_per_s": 39_845_888.0, "eta_s": 37, "elapsed_s": 31.2}})
        );
        let unknown = TaskProgress {
            done_bytes: None,
            total_bytes: None,
            rate_bytes_per_s: None,
            eta: None,
            ..event
        };
        let parsed: Value = serde_json::from_str(&line(&unknown)).unwrap();
        for key in ["done_bytes", "total_bytes", "rate_bytes_per_s", "eta_s"] {
            assert_eq!(parsed[KEY][key], Value::Null, "{key}");
        }
    }
}
