//! Building a request and sending it: the method, the URL (a read's parameters in its query),
//! the form body of a write, the headers, and the request's own time limit. What comes back
//! is [`super::answer`]'s to read.

use std::time::Duration;

use ureq::Agent;
use ureq::http::Response;

use crate::encode::form;

/// HTTP methods the API uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    Get,
    Post,
    Put,
    Delete,
}

impl Method {
    /// `GET`, `POST`, `PUT`, `DELETE`.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Delete => "DELETE",
        }
    }
}

/// Request parameters, in order.
pub type Params = Vec<(String, String)>;

/// A request to send: the method, the whole URL and the form body (empty for a read).
pub(super) struct Request {
    pub(super) method: Method,
    pub(super) url: String,
    pub(super) body: String,
}

impl Request {
    /// `method path` on the API at `base`, with `params` in the query of a `GET` or `DELETE`
    /// and in the form body of a `POST` or `PUT`.
    pub(super) fn new(base: &str, method: Method, path: &str, params: &Params) -> Request {
        let mut url = format!("{base}{path}");
        let body = form(params);
        if matches!(method, Method::Get | Method::Delete) && !params.is_empty() {
            url.push('?');
            url.push_str(&body);
            return Request {
                method,
                url,
                body: String::new(),
            };
        }
        Request { method, url, body }
    }

    /// Sends it with these headers, within `limit`.
    pub(super) fn send(
        &self,
        agent: &Agent,
        headers: &[(&'static str, String)],
        limit: Duration,
    ) -> Result<Response<ureq::Body>, ureq::Error> {
        let url = self.url.as_str();
        match self.method {
            Method::Get | Method::Delete => {
                let mut req = if self.method == Method::Get {
                    agent.get(url)
                } else {
                    agent.delete(url)
                };
                for (k, v) in headers {
                    req = req.header(*k, v);
                }
                req.config().timeout_global(Some(limit)).build().call()
            }
            Method::Post | Method::Put => {
                let mut req = if self.method == Method::Post {
                    agent.post(url)
                } else {
                    agent.put(url)
                };
                for (k, v) in headers {
                    req = req.header(*k, v);
                }
                req.content_type("application/x-www-form-urlencoded")
                    .config()
                    .timeout_global(Some(limit))
                    .build()
                    .send(self.body.as_bytes())
            }
        }
    }
}
