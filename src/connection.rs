//! The connection options every module shares (same names and environment variables as
//! community.proxmox, so playbooks can switch), and how they become a [`Client`]: the one
//! place that knows both the options and the PVE client, and so gives the client the hints
//! that name the options.

use serde_json::json;

use std::fmt;

use anyhow::{anyhow, bail};

use crate::ansible::protocol::Invocation;
use crate::ansible::spec::{Kind, Opt, Spec, given};
use crate::ansible::text::quote;
use crate::pve::budget::Budget;
use crate::pve::client::{Client, Concurrency, Connection, Credentials, Hints, MOST_SLOTS};
use crate::pve::tls::{Trust, parse_ca_pem, parse_fingerprint};

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
        Opt::new("proxy", Kind::Str),
        Opt::new("api_timeout", Kind::Duration)
            .default(json!("30s"))
            .env(&["PROXMOX_API_TIMEOUT"]),
        // pveproxy serves with 3 workers (pve-manager PVE/Service/pveproxy.pm), each an event
        // loop that owns the connections it accepted: 1 leaves two to the web UI and every
        // other client, and no request of theirs waits behind more than one of this
        // controller's (with 2, both can be on the worker that owns the UI's connection);
        // PVE allows up to 127 (MAX_WORKERS, 9.0).
        Opt::new(
            "api_concurrency",
            Kind::Int {
                min: Some(0),
                max: Some(MOST_SLOTS as i64),
            },
        )
        .default(json!(1))
        .env(&["PROXMOX_API_CONCURRENCY"]),
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

/// Printable ASCII without spaces at either end: what an HTTP header value can carry as is.
fn header_safe(value: &str) -> bool {
    !value.is_empty() && value.trim() == value && value.bytes().all(|b| (0x20..0x7f).contains(&b))
}

/// What the PVE client adds to its connection errors: the options a user can set.
fn hints() -> Hints {
    Hints {
        tls: "PVE uses a self-signed certificate by default: set ca_path to the cluster CA \
              (/etc/pve/pve-root-ca.pem), or api_fingerprint to the node certificate's SHA-256 \
              fingerprint (pvenode cert info), or, on a trusted network only, validate_certs: false"
            .into(),
        connect: "is api_host/api_port a reachable PVE node? pveproxy listens on 8006".into(),
        timeout: "api_timeout".into(),
        concurrency: "api_concurrency".into(),
        login: "check api_user and api_password".into(),
        token: "check api_token_id and api_token_secret".into(),
        proxy:
            "set the proxy option, add the host to NO_PROXY, or give proxy: '' to connect directly"
                .into(),
        not_pve: "is api_host/api_port a Proxmox VE node?".into(),
    }
}

/// Builds the connection from the options, with warnings to pass on.
pub fn connection(inv: &Invocation, budget: &Budget) -> anyhow::Result<(Connection, Vec<String>)> {
    let mut warnings = Vec::new();
    let host = inv.str("api_host").unwrap_or_default().trim().to_string();
    if let Some((_, port)) = host.rsplit_once(':')
        && host.matches(':').count() == 1
        && port.bytes().all(|b| b.is_ascii_digit())
    {
        bail!(
            "api_host must be a host name or address without a port, got {}: give the port as api_port",
            quote(&host)
        );
    }
    if host.is_empty()
        || host.chars().any(|c| c.is_whitespace() || c.is_control())
        || host.contains(['/', '?', '#', '@', '%', '\\'])
    {
        bail!(
            "api_host must be a host name or address, got {host}",
            host = quote(&host)
        );
    }
    let trust = if let Some(fp) = inv.str("api_fingerprint") {
        Trust::Pin(parse_fingerprint(fp).map_err(|e| anyhow!("api_fingerprint {e}"))?)
    } else if let Some(ca) = inv.str("ca_path") {
        // A CA bundle is a few KiB; even the whole public root store is under 1 MiB.
        let pem = crate::files::read_bounded(ca, 1 << 20, "ca_path").map_err(anyhow::Error::msg)?;
        Trust::Ca(parse_ca_pem(&pem).map_err(|e| anyhow!("ca_path {ca}: {e}"))?)
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
                format!(
                    "{}!{id}",
                    given(inv.str("api_user"), "api_user").map_err(anyhow::Error::msg)?
                )
            };
            if id.contains('=') || !header_safe(&id) {
                bail!("api_token_id must look like USER@REALM!TOKENID (or TOKENID with api_user)");
            }
            // The secret travels in the Authorization header: a trailing newline (a secret
            // read from a file) or a non-ASCII character can never be sent, so say so now
            // instead of retrying until the timeout. The value is not shown.
            if !header_safe(secret) {
                bail!(
                    "api_token_secret cannot be sent in an HTTP header: it holds a line break, \
                     a space at either end, a control or a non-ASCII character (a secret read \
                     from a file keeps its newline: use | trim)"
                );
            }
            Credentials::Token {
                id,
                secret: secret.to_string(),
            }
        }
        (_, _, Some(password)) => Credentials::Password {
            user: given(inv.str("api_user"), "api_user")
                .map_err(anyhow::Error::msg)?
                .to_string(),
            password: password.to_string(),
        },
        _ => {
            bail!("one of the following is required: api_password, api_token_id");
        }
    };
    let proxy = crate::pve::proxy::choose(&host, inv.str("proxy"), |k| std::env::var(k).ok())
        .map_err(anyhow::Error::msg)?;
    let conn = Connection {
        host,
        port: given(inv.int("api_port"), "api_port").map_err(anyhow::Error::msg)? as u16,
        trust,
        timeout: inv.duration("api_timeout").map_err(anyhow::Error::msg)?,
        budget: budget.clone(),
        proxy,
        credentials,
        hints: hints(),
        concurrency: Concurrency {
            slots: given(inv.int("api_concurrency"), "api_concurrency")
                .map_err(anyhow::Error::msg)? as usize,
            roots: Concurrency::roots(|key| std::env::var_os(key)),
        },
        secret_sink: crate::ansible::protocol::register_secret,
        interrupted: crate::interrupt::received,
    };
    Ok((conn, warnings))
}

/// Warnings raised before an error (choosing a proxy, say), kept with it as its context so
/// the failed result still carries them.
#[derive(Debug)]
pub struct Warned {
    /// What was being done.
    pub doing: String,
    pub warnings: Vec<String>,
}

impl fmt::Display for Warned {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.doing)
    }
}

/// Connects within the run's budget; a failure says where it tried to connect and keeps the
/// warnings raised before. At `-vvv` and more, a run whose requests pass no gate although
/// `api_concurrency` asked for one says why, as a warning (a module has no other channel).
pub fn connect(inv: &Invocation, budget: &Budget) -> anyhow::Result<(Client, Vec<String>)> {
    let (conn, mut warnings) = connection(inv, budget)?;
    let client = Client::connect(&conn, inv.ctx.check_mode).map_err(|e| {
        anyhow::Error::new(e).context(Warned {
            doing: format!(
                "connecting to the Proxmox VE API at {}:{}",
                conn.host, conn.port
            ),
            warnings: warnings.clone(),
        })
    })?;
    if let Some(why) = client.gate_note()
        && inv.ctx.verbosity >= 3
    {
        warnings.push(format!(
            "api_concurrency: no gate, this run's requests are not counted against this \
             controller's other runs ({why})"
        ));
    }
    Ok((client, warnings))
}
