//! Reading an answer: what a request that got none becomes (refused, unreachable, cut TLS, no
//! answer in time), a redirect PVE's API never sends, a body over the size any PVE answer
//! has, and an answer's JSON, or PVE's error (its status, message and per-parameter errors).

use std::sync::{Arc, Mutex};

use serde_json::Value;
use ureq::http::Response;

use super::hints::{Hints, hinted};
use crate::error::ApiError;
use crate::proxy::ProxyChoice;
use crate::tls::{HandshakeCut, StatusLine};

/// The largest answer read (the biggest legitimate ones, a cluster listing or a page of a
/// task log, are well under a MiB); a larger one is refused, not buffered.
const MAX_BODY: u64 = 8 * 1024 * 1024;

/// An error's text without the link to rustls's manual that rustls appends to some of its
/// messages ("peer closed connection without sending TLS close_notify: https://docs.rs/…"):
/// the user needs what happened, not a library's how-to page.
fn without_manual_link(text: &str) -> String {
    match text.find(": https://docs.rs/rustls") {
        Some(at) => text[..at].to_string(),
        None => text.to_string(),
    }
}

/// The error of a request that got no answer (or whose answer could not be read): what
/// failed, whether anything was sent, and the caller's hint for it.
pub(super) fn transport_error(
    err: ureq::Error,
    base: &str,
    proxy: Option<&ProxyChoice>,
    hints: &Hints,
) -> ApiError {
    use std::io::ErrorKind as K;
    use ureq::Error as E;
    let text = without_manual_link(&err.to_string());
    // Through a proxy, a failed connection is a failed connection to the proxy, and a
    // refused CONNECT is the proxy's answer: neither heals by trying again.
    if let Some(p) = proxy {
        let refused_tunnel = matches!(err, E::ConnectProxyFailed(_));
        let unreachable = matches!(&err, E::Io(io) if matches!(io.kind(), K::ConnectionRefused | K::AddrNotAvailable | K::HostUnreachable | K::NetworkUnreachable))
            || matches!(
                err,
                E::ConnectionFailed
                    | E::HostNotFound
                    | E::Timeout(ureq::Timeout::Connect | ureq::Timeout::Resolve)
            );
        if refused_tunnel || unreachable {
            let what = if refused_tunnel {
                "refused to open a tunnel (CONNECT) to"
            } else {
                "cannot be reached to connect to"
            };
            return ApiError::Unreachable {
                source: Some(Arc::new(err)),
                detail: hinted(
                    format!(
                        "the proxy {} (from {}) {what} {base}: {text}",
                        p.shown, p.source
                    ),
                    "; ",
                    &hints.proxy,
                    "",
                ),
            };
        }
    }
    let refused = matches!(&err, E::Io(io) if matches!(io.kind(), K::ConnectionRefused | K::AddrNotAvailable | K::HostUnreachable | K::NetworkUnreachable));
    let connect = refused
        || matches!(
            err,
            E::ConnectionFailed
                | E::HostNotFound
                | E::Timeout(ureq::Timeout::Connect | ureq::Timeout::Resolve)
        );
    // Nothing was sent on a connection whose handshake was cut or went unanswered.
    if let E::Io(io) = &err
        && let Some(cut) = io.get_ref().and_then(|i| i.downcast_ref::<HandshakeCut>())
    {
        let detail = format!("connection to {base} failed: {cut}");
        return ApiError::Transport {
            source: Some(Arc::new(err)),
            detail,
            sent: false,
        };
    }
    let tls = matches!(err, E::Rustls(_) | E::Tls(_))
        || matches!(&err, E::Io(io) if io.get_ref().is_some_and(|inner| inner.is::<rustls::Error>()))
        || text.contains("certificate");
    let detail = if tls {
        hinted(
            format!("TLS connection to {base} failed: {text}"),
            ". ",
            &hints.tls,
            "",
        )
    } else if connect {
        hinted(
            format!("unable to connect to {base}: {text}"),
            " (",
            &hints.connect,
            ")",
        )
    } else if let E::Timeout(t) = &err {
        let name = if hints.timeout.is_empty() {
            "the request timeout"
        } else {
            &hints.timeout
        };
        format!("no answer from {base} within {name} ({t})")
    } else {
        format!("request to {base} failed: {text}")
    };
    // Nothing was sent when the connection or the TLS handshake failed.
    ApiError::Transport {
        source: Some(Arc::new(err)),
        detail,
        sent: !(connect || tls),
    }
}

/// Reads the answer to a request to `path` on the API at `base`: its JSON on a 200 (then
/// `answered` is called first, once the body is read), else PVE's error. `status_line` is the
/// reason the TLS layer saw in the status line (older PVE puts its message only there).
pub(super) fn read(
    mut resp: Response<ureq::Body>,
    base: &str,
    path: &str,
    status_line: &Mutex<StatusLine>,
    hints: &Hints,
    proxy: Option<&ProxyChoice>,
    answered: impl FnOnce(),
) -> Result<Value, ApiError> {
    let status = resp.status().as_u16();
    if (300..400).contains(&status) {
        let to = resp
            .headers()
            .get("location")
            .and_then(|l| l.to_str().ok())
            .map(crate::encode::quote)
            .unwrap_or_else(|| "elsewhere".into());
        return Err(ApiError::NotPve {
            source: None,
            detail: hinted(
                format!(
                    "{} answered {status} (a redirect to {to}), which PVE's API never does; it was not followed",
                    base
                ),
                ": ",
                &hints.not_pve,
                "",
            ),
        });
    }
    let text = resp
        .body_mut()
        .with_config()
        .limit(MAX_BODY)
        .read_to_string()
        .map_err(|e| match e {
            e @ ureq::Error::BodyExceedsLimit(_) => ApiError::NotPve {
                source: Some(Arc::new(e)),
                detail: format!(
                    "{} sent an answer larger than {} MiB to {path}; a PVE API answer is far smaller",
                    base,
                    MAX_BODY >> 20
                ),
            },
            other => transport_error(other, base, proxy, hints),
        })?;
    let reason = status_line
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .last_reason
        .take();
    if status == 200 {
        answered();
        return serde_json::from_str(&text).map_err(|e| ApiError::NotPve {
            source: Some(Arc::new(e)),
            detail: hinted(
                format!(
                    "{} did not answer like a PVE API (a {} byte non-JSON body)",
                    base,
                    text.len()
                ),
                "; ",
                &hints.not_pve,
                "",
            ),
        });
    }
    let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    let message = body["message"]
        .as_str()
        .map(|m| m.trim().to_string())
        .filter(|m| !m.is_empty())
        .or(reason)
        .unwrap_or_else(|| {
            resp.status()
                .canonical_reason()
                .unwrap_or("error")
                .to_string()
        });
    let errors = body["errors"].as_object().cloned().unwrap_or_default();
    Err(ApiError::Http {
        status,
        message,
        errors,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// rustls's "closed without close_notify" error, as ureq hands it over, reaches the user
    /// as what happened, without the link to rustls's manual.
    #[test]
    fn a_cut_tls_answer_is_reported_without_rustls_manual_link() {
        let cut = std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "peer closed connection without sending TLS close_notify: \
             https://docs.rs/rustls/latest/rustls/manual/_03_howto/index.html#unexpected-eof",
        );
        let error = transport_error(
            ureq::Error::Io(cut),
            "https://pve1:8006",
            None,
            &Hints::default(),
        );
        let shown = error.to_string();
        assert!(
            shown.contains("without sending TLS close_notify"),
            "{shown}"
        );
        assert!(!shown.contains("https://docs.rs"), "{shown}");
    }
}
