//! What every module of the collection shares: the connection options (same names and
//! environment variables as community.proxmox, so playbooks can switch) and the task-wait
//! options, and how they become a [`Client`].

use std::time::Duration;

use serde_json::json;

use crate::pve::tasks::{TAIL_LINES, TaskReport, WaitError, wait_task};
use crate::pve::upid::Upid;
use crate::pve::wait::{Exit, Policy};

use crate::ansible::protocol::{Failure, Invocation};
use crate::ansible::spec::{Kind, Opt, Spec, parse_duration};
use crate::pve::client::{Client, Connection, Credentials};
use crate::pve::tls::{Trust, load_ca, parse_fingerprint};

/// The connection options.
pub fn connection_options() -> Vec<Opt> {
    vec![
        Opt::new("api_host", Kind::Str)
            .required()
            .env(&["PROXMOX_HOST"]),
        Opt::new(
            "api_port",
            Kind::Int {
                min: Some(1),
                max: Some(65535),
            },
        )
        .default(json!(8006))
        .env(&["PROXMOX_PORT"]),
        Opt::new("api_user", Kind::Str)
            .default(json!("root@pam"))
            .env(&["PROXMOX_USER"]),
        Opt::new("api_password", Kind::Str)
            .no_log()
            .env(&["PROXMOX_PASSWORD"]),
        Opt::new("api_token_id", Kind::Str).env(&["PROXMOX_TOKEN_ID"]),
        Opt::new("api_token_secret", Kind::Str)
            .no_log()
            .env(&["PROXMOX_TOKEN_SECRET"]),
        Opt::new("validate_certs", Kind::Bool)
            .default(json!(true))
            .env(&["PROXMOX_VALIDATE_CERTS"]),
        Opt::new("ca_path", Kind::Str).env(&["PROXMOX_CA_PATH"]),
        Opt::new("api_fingerprint", Kind::Str).env(&["PROXMOX_FINGERPRINT"]),
        Opt::new("api_timeout", Kind::Duration)
            .default(json!("30s"))
            .env(&["PROXMOX_API_TIMEOUT"]),
    ]
}

/// The cross-option rules of the connection options.
pub fn connection_rules(spec: &mut Spec) {
    spec.required_together
        .push(vec!["api_token_id", "api_token_secret"]);
    spec.mutually_exclusive
        .push(vec!["api_password", "api_token_secret"]);
    spec.required_one_of
        .push(vec!["api_password", "api_token_id"]);
    spec.mutually_exclusive
        .push(vec!["ca_path", "api_fingerprint"]);
}

/// The task-wait options.
pub fn wait_options(default_timeout: &'static str) -> Vec<Opt> {
    vec![
        Opt::new("timeout", Kind::Duration).default(json!(default_timeout)),
        Opt::new("stop_task_on_timeout", Kind::Bool).default(json!(false)),
        Opt::new("poll_interval", Kind::Duration).default(json!("150ms")),
    ]
}

/// The shortest and longest `poll_interval` accepted.
const POLL_INTERVAL_RANGE: (Duration, Duration) =
    (Duration::from_millis(50), Duration::from_secs(60));

/// The `poll_interval` option, checked (an error that names it, found before any request).
pub fn poll_interval(inv: &Invocation) -> Result<Duration, String> {
    let text = inv.str("poll_interval").unwrap_or("150ms");
    let poll = parse_duration(text).unwrap_or(Duration::from_millis(150));
    let (min, max) = POLL_INTERVAL_RANGE;
    if poll < min || poll > max {
        return Err(format!(
            "poll_interval must be between 50ms and 60s, got '{text}'"
        ));
    }
    Ok(poll)
}

/// A duration option that validation has already checked.
pub fn duration(inv: &Invocation, key: &str) -> Duration {
    inv.str(key)
        .and_then(|s| parse_duration(s).ok())
        .unwrap_or(Duration::from_secs(30))
}

/// Builds the connection from the options, with warnings to pass on.
pub fn connection(inv: &Invocation) -> Result<(Connection, Vec<String>), Failure> {
    let mut warnings = Vec::new();
    let host = inv.str("api_host").unwrap_or_default().trim().to_string();
    if host.is_empty() || host.contains(['/', ' ', '\n']) {
        return Err(Failure::msg(format!(
            "api_host must be a host name or address, got '{host}'"
        )));
    }
    let trust = if let Some(fp) = inv.str("api_fingerprint") {
        Trust::Pin(parse_fingerprint(fp).map_err(Failure::msg)?)
    } else if let Some(ca) = inv.str("ca_path") {
        Trust::Ca(load_ca(ca).map_err(Failure::msg)?)
    } else if inv.bool("validate_certs") == Some(false) {
        warnings.push(
            "validate_certs is false: the PVE server's certificate is not checked. Prefer api_fingerprint (pin the node certificate) or ca_path"
                .to_string(),
        );
        Trust::Insecure
    } else {
        Trust::PublicRoots
    };
    let credentials = match (
        inv.str("api_token_id"),
        inv.str("api_token_secret"),
        inv.str("api_password"),
    ) {
        (Some(id), Some(secret), _) => {
            let id = if id.contains('!') {
                id.to_string()
            } else {
                format!("{}!{id}", inv.str("api_user").unwrap_or("root@pam"))
            };
            if id.contains(['=', ' ', '\n']) {
                return Err(Failure::msg(
                    "api_token_id must look like USER@REALM!TOKENID (or TOKENID with api_user)",
                ));
            }
            Credentials::Token {
                id,
                secret: secret.to_string(),
            }
        }
        (_, _, Some(password)) => Credentials::Password {
            user: inv.str("api_user").unwrap_or("root@pam").to_string(),
            password: password.to_string(),
        },
        _ => {
            return Err(Failure::msg(
                "one of the following is required: api_password, api_token_id",
            ));
        }
    };
    let conn = Connection {
        host,
        port: inv.int("api_port").unwrap_or(8006) as u16,
        trust,
        timeout: duration(inv, "api_timeout"),
        credentials,
    };
    Ok((conn, warnings))
}

/// Connects, turning a connection failure into a failed result that names the cause.
pub fn connect(inv: &Invocation) -> Result<(Client, Vec<String>), Failure> {
    let (conn, warnings) = connection(inv)?;
    let client = Client::connect(&conn, inv.ctx.check_mode).map_err(|e| Failure {
        msg: format!(
            "connecting to the Proxmox VE API at {}:{}: {e}",
            conn.host, conn.port
        ),
        warnings: warnings.clone(),
        ..Default::default()
    })?;
    Ok((client, warnings))
}

/// The tasks a run waited for and the warnings they raised; turns a wait that ends badly into
/// a failed result carrying the UPID, exit status, progress and log tail.
#[derive(Default)]
pub struct TaskLog {
    pub tasks: Vec<TaskReport>,
    pub warnings: Vec<String>,
}

impl TaskLog {
    /// Waits for a task; `what` names the operation in messages ("creating VM 100 on pve1").
    pub fn wait(
        &mut self,
        client: &Client,
        upid: &Upid,
        policy: &Policy,
        stop_on_timeout: bool,
        what: &str,
    ) -> Result<TaskReport, Failure> {
        match wait_task(client, upid, policy, stop_on_timeout) {
            Ok(r) => {
                for w in &r.warnings {
                    self.warnings.push(format!("{what}: {w}"));
                }
                if let (true, Exit::Warnings(n)) = (r.warnings.is_empty(), &r.exit) {
                    self.warnings
                        .push(format!("{what}: task {} ended with {n} warning(s)", r.upid));
                }
                self.tasks.push(r.clone());
                Ok(r)
            }
            Err(WaitError::Failed(r)) => {
                let mut f = Failure::msg(format!("{what} failed: {}", r.exitstatus));
                f.data.insert("upid".into(), json!(r.upid.text));
                f.data.insert("exitstatus".into(), json!(r.exitstatus));
                f.data.insert("log_tail".into(), json!(r.tail(TAIL_LINES)));
                self.tasks.push(r);
                Err(f)
            }
            Err(e) => {
                let mut f = Failure::msg(format!("{what}: {e}"));
                match &e {
                    WaitError::TimedOut {
                        upid,
                        elapsed,
                        progress,
                        tail,
                        ..
                    } => {
                        f.data.insert("upid".into(), json!(upid.text));
                        f.data.insert("waited".into(), json!(elapsed.as_secs_f64()));
                        f.data.insert("progress".into(), json!(progress));
                        f.data.insert("log_tail".into(), json!(tail));
                    }
                    WaitError::Vanished { upid }
                    | WaitError::Interrupted { upid, .. }
                    | WaitError::Api { upid, .. } => {
                        f.data.insert("upid".into(), json!(upid.text));
                    }
                    WaitError::Failed(_) => {}
                }
                Err(f)
            }
        }
    }
}
