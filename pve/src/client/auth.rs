//! Authentication: the credentials, the ticket a password login gets (pve-access-control's
//! `/access/ticket`), the headers each request carries (the API token, or the ticket's cookie
//! and, on a write, its CSRF token), and the errors a refusal becomes.

use serde_json::{Map, Value};

use super::hints::{Hints, hinted};
use super::request::{Method, Params};
use crate::encode::url_encode;
use crate::error::ApiError;

/// A ticket login or an API token.
#[derive(Clone)]
pub enum Credentials {
    Password { user: String, password: String },
    Token { id: String, secret: String },
}

/// A login's ticket: the cookie and the CSRF token writes carry.
#[derive(Clone)]
pub(super) struct Ticket {
    pub(super) cookie: String,
    pub(super) csrf: String,
}

/// What a run reads once and keeps with its login (`GET /version`): the answers' `data` by
/// path, shared by the run's threads ([`super::Client::worker`]).
#[derive(Clone, Default)]
pub(super) struct RunCache(
    std::sync::Arc<std::sync::Mutex<std::collections::BTreeMap<String, Value>>>,
);

impl RunCache {
    /// The answer kept for `path`, or the one `read` gets, then kept.
    pub(super) fn get_or(
        &self,
        path: &str,
        read: impl FnOnce() -> Result<Value, ApiError>,
    ) -> Result<Value, ApiError> {
        if let Some(kept) = self.answers().get(path) {
            return Ok(kept.clone());
        }
        let answer = read()?;
        self.answers().insert(path.to_string(), answer.clone());
        Ok(answer)
    }

    fn answers(&self) -> std::sync::MutexGuard<'_, std::collections::BTreeMap<String, Value>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The headers that authenticate a request: the API token, or the ticket's cookie (and on a
/// write its CSRF token); none before a password login has a ticket.
pub(super) fn headers(
    credentials: &Credentials,
    ticket: Option<&Ticket>,
    method: Method,
) -> Vec<(&'static str, String)> {
    let mut headers = Vec::new();
    match credentials {
        Credentials::Token { id, secret } => {
            headers.push(("Authorization", format!("PVEAPIToken={id}={secret}")))
        }
        Credentials::Password { .. } => {
            if let Some(t) = ticket {
                headers.push(("Cookie", format!("PVEAuthCookie={}", url_encode(&t.cookie))));
                if method != Method::Get {
                    headers.push(("CSRFPreventionToken", t.csrf.clone()));
                }
            }
        }
    }
    headers
}

/// The form of a password login.
pub(super) fn login_form(user: &str, password: &str) -> Params {
    vec![
        ("username".to_string(), user.to_string()),
        ("password".to_string(), password.to_string()),
    ]
}

/// A login's error: a 401 says PVE refused `user`'s login (with the caller's hint).
pub(super) fn login_refused(error: ApiError, user: &str, hints: &Hints) -> ApiError {
    match error {
        ApiError::Http { status: 401, .. } => ApiError::Http {
            status: 401,
            message: hinted(
                format!("authentication failure: PVE refused the login of '{user}'"),
                " (",
                &hints.login,
                ")",
            ),
            errors: Map::new(),
        },
        other => other,
    }
}

/// The ticket in a login's answer (from `base`).
pub(super) fn ticket(answer: &Value, base: &str) -> Result<Ticket, ApiError> {
    let field = |name: &str| {
        answer["data"][name]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    let (cookie, csrf) = (field("ticket"), field("CSRFPreventionToken"));
    if cookie.is_empty() {
        return Err(ApiError::NotPve {
            source: None,
            detail: format!("{base} did not answer like a PVE API: no ticket in the login answer"),
        });
    }
    Ok(Ticket { cookie, csrf })
}

/// The error of a request PVE refused to authenticate (a ticket it would not renew, an API
/// token it refused).
pub(super) fn refused(credentials: &Credentials, hints: &Hints) -> ApiError {
    ApiError::Http {
        status: 401,
        message: match credentials {
            Credentials::Token { id, .. } => hinted(
                format!("authentication failure: PVE refused the API token '{id}'"),
                " (",
                &hints.token,
                ")",
            ),
            Credentials::Password { user, .. } => format!("authentication failure for '{user}'"),
        },
        errors: Map::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_run_reads_a_kept_answer_once_on_every_thread() {
        let cache = RunCache::default();
        let worker = cache.clone();
        let mut reads = 0;
        for _ in 0..2 {
            let got = cache.get_or("/version", || {
                reads += 1;
                Ok(json!({"release": "9.1"}))
            });
            assert_eq!(got.unwrap()["release"], "9.1");
        }
        let shared = worker.get_or("/version", || {
            Err(ApiError::NotPve {
                source: None,
                detail: "read again".into(),
            })
        });
        assert_eq!(shared.unwrap()["release"], "9.1");
        assert_eq!(reads, 1);
        let failed = cache.get_or("/other", || {
            Err(ApiError::NotPve {
                source: None,
                detail: "down".into(),
            })
        });
        assert!(failed.is_err());
        assert!(
            cache.get_or("/other", || Ok(json!(1))).is_ok(),
            "a failed read is not kept"
        );
    }
}
