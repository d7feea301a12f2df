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

/// A request to send: the method, the whole URL and the body (empty for a read) with its
/// content type: a form, or a `multipart/form-data` upload.
pub(super) struct Request {
    pub(super) method: Method,
    pub(super) url: String,
    pub(super) body: Vec<u8>,
    pub(super) content_type: String,
}

/// The content type of a write's form body.
const FORM: &str = "application/x-www-form-urlencoded";

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
                body: Vec::new(),
                content_type: FORM.to_string(),
            };
        }
        Request {
            method,
            url,
            body: body.into_bytes(),
            content_type: FORM.to_string(),
        }
    }

    /// A `POST` of `multipart/form-data` to `path`, as a browser uploads a file to PVE: the
    /// `fields` first, then the file as the part named `filename` (pve-http-server's
    /// `file_upload_multipart` takes the file only under that name, after the fields).
    pub(super) fn upload(
        base: &str,
        path: &str,
        fields: &Params,
        file_name: &str,
        contents: &[u8],
    ) -> Request {
        // A boundary the contents do not hold (a fixed text, lengthened until absent).
        let mut boundary = String::from("sankofa-upload-boundary");
        while contents
            .windows(boundary.len())
            .any(|window| window == boundary.as_bytes())
        {
            boundary.push('x');
        }
        let mut body = Vec::with_capacity(contents.len() + 512);
        for (key, value) in fields {
            body.extend_from_slice(
                format!(
                    "--{boundary}\r\nContent-Disposition: form-data; name=\"{key}\"\r\n\r\n{value}\r\n"
                )
                .as_bytes(),
            );
        }
        let quoted = file_name.replace(['"', '\r', '\n'], "_");
        body.extend_from_slice(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"filename\"; filename=\"{quoted}\"\r\nContent-Type: application/octet-stream\r\n\r\n"
            )
            .as_bytes(),
        );
        body.extend_from_slice(contents);
        body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
        Request {
            method: Method::Post,
            url: format!("{base}{path}"),
            body,
            content_type: format!("multipart/form-data; boundary={boundary}"),
        }
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
                req.content_type(self.content_type.as_str())
                    .config()
                    .timeout_global(Some(limit))
                    .build()
                    .send(self.body.as_slice())
            }
        }
    }
}
