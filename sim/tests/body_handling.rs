//! pveproxy's body handling (pve-http-server AnyEvent.pm authenticate_and_handle_request,
//! file_upload_multipart) and rest_handler's answer for a path no handler serves.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;

use serde_json::Value;

use crate::support::*;

/// Sends a head and then the body in pieces (going on if the server stops reading), and
/// returns (status, reason, body text) of the answer.
fn send(addr: &str, head: &str, body: &[u8]) -> (u16, String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(head.as_bytes()).unwrap();
    for chunk in body.chunks(64 * 1024) {
        if s.write_all(chunk).is_err() {
            break;
        }
    }
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status_line = head.lines().next().unwrap_or("");
    let mut parts = status_line.splitn(3, ' ');
    parts.next();
    let status = parts.next().unwrap_or("0").parse().unwrap_or(0);
    (
        status,
        parts.next().unwrap_or("").to_string(),
        body.to_string(),
    )
}

fn head(s: &Session, method: &str, path: &str, ctype: &str, len: usize, csrf: bool) -> String {
    let csrf = if csrf {
        format!("CSRFPreventionToken: {}\r\n", s.csrf)
    } else {
        String::new()
    };
    format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nCookie: {}\r\n{csrf}Content-Type: {ctype}\r\nContent-Length: {len}\r\n\r\n",
        s.cookie
    )
}

/// A multipart/form-data body as a browser sends an upload: the fields, then the file.
fn multipart(boundary: &str, fields: &[(&str, &str)], name: &str, data: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    for (k, v) in fields {
        body.extend_from_slice(
            format!("--{boundary}\r\nContent-Disposition: form-data; name=\"{k}\"\r\n\r\n{v}\r\n")
                .as_bytes(),
        );
    }
    body.extend_from_slice(
        format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"filename\"; filename=\"{name}\"\r\nContent-Type: application/octet-stream\r\n\r\n"
        )
        .as_bytes(),
    );
    body.extend_from_slice(data);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    body
}

/// 3 MiB that look like an ISO's bytes, with line breaks and dashes that resemble a boundary.
fn payload() -> Vec<u8> {
    let mut data = Vec::with_capacity(3 << 20);
    let mut x: u32 = 0x1234_5678;
    while data.len() < 3 << 20 {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        data.extend_from_slice(&x.to_le_bytes());
        if x.is_multiple_of(97) {
            data.extend_from_slice(b"\r\n--sim");
        }
    }
    data
}

fn sha256(data: &[u8]) -> String {
    let dir = scratch("sum");
    let path = dir.join("data");
    std::fs::write(&path, data).unwrap();
    let out = Command::new("sha256sum").arg(&path).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

const UPLOAD: &str = "/api2/json/nodes/pve1/storage/local/upload";

/// AnyEvent.pm: `POST …/storage/{storage}/upload` is streamed (`file_upload_multipart`), not
/// held to the 512 KiB of other bodies, and needs no CSRF token (HTTPServer.pm auth_handler,
/// `$isUpload`); pve-storage Status.pm upload then verifies the checksum in an `imgcopy` task
/// and copies the file into the storage.
#[test]
fn an_upload_is_streamed_past_the_body_limit() {
    let sim = Sim::plain(&["--time-scale", "0.05"], &[]);
    let s = Session::login(&sim);
    let data = payload();
    let sum = sha256(&data);
    let boundary = "----pvesimBoundary7MA4YWxkTrZu0gW";
    let body = multipart(
        boundary,
        &[
            ("content", "iso"),
            ("checksum-algorithm", "sha256"),
            ("checksum", &sum),
        ],
        "my image.iso",
        &data,
    );
    let ctype = format!("multipart/form-data; boundary={boundary}");
    let (status, reason, answer) = send(
        &s.addr,
        &head(&s, "POST", UPLOAD, &ctype, body.len(), false),
        &body,
    );
    assert_eq!((status, reason.as_str()), (200, "OK"), "{answer}");
    let upid = serde_json::from_str::<Value>(&answer).unwrap()["data"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(is_upid(&upid, "pve1", "imgcopy", ""), "{upid}");
    assert_eq!(s.wait(&upid)["exitstatus"], "OK");
    let log = s.log(&upid);
    assert!(
        log.iter().any(|l| l.contains("checksum verified")),
        "{log:?}"
    );
    let content = s.data(
        "GET",
        "/nodes/pve1/storage/local/content",
        &[("content", "iso")],
    );
    let iso = content
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["volid"] == "local:iso/my_image.iso")
        .unwrap_or_else(|| panic!("{content}"));
    assert_eq!(iso["size"], data.len() as u64);

    // A wrong checksum fails the task, and nothing is stored.
    let body = multipart(
        boundary,
        &[
            ("content", "iso"),
            ("checksum-algorithm", "sha256"),
            ("checksum", &"0".repeat(64)),
        ],
        "other.iso",
        &data,
    );
    let (status, _, answer) = send(
        &s.addr,
        &head(&s, "POST", UPLOAD, &ctype, body.len(), false),
        &body,
    );
    assert_eq!(status, 200, "{answer}");
    let upid = serde_json::from_str::<Value>(&answer).unwrap()["data"]
        .as_str()
        .unwrap()
        .to_string();
    let exit = s.wait(&upid)["exitstatus"].as_str().unwrap().to_string();
    assert!(exit.starts_with("checksum mismatch: got '"), "{exit}");
    let content = s.data(
        "GET",
        "/nodes/pve1/storage/local/content",
        &[("content", "iso")],
    );
    assert!(!content.to_string().contains("other.iso"), "{content}");
    // The temporary upload files are gone (Status.pm unlinks them either way).
    let left: Vec<_> = std::fs::read_dir(sim.data().join("var-tmp"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// AnyEvent.pm: an upload that is not `multipart/form-data` with a boundary is refused, an
/// upload is authenticated before its body is read (401), and a body that ends before the
/// closing delimiter is `500 upload failed`; Status.pm: a storage without a path takes none.
#[test]
fn uploads_are_checked_before_and_while_they_are_read() {
    let sim = Sim::plain(&["--auth-failure-delay", "0s"], &[]);
    let s = Session::login(&sim);
    let (status, reason, _) = send(
        &s.addr,
        &head(
            &s,
            "POST",
            UPLOAD,
            "application/x-www-form-urlencoded",
            9,
            false,
        ),
        b"content=i",
    );
    assert_eq!(
        (status, reason.as_str()),
        (
            500,
            "upload 'Content-Type 'application/x-www-form-urlencoded' not implemented"
        )
    );
    let anonymous = format!(
        "POST {UPLOAD} HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=b\r\nContent-Length: 700000\r\n\r\n"
    );
    let (status, reason, _) = send(&s.addr, &anonymous, &vec![b'x'; 700_000]);
    assert_eq!((status, reason.as_str()), (401, "No ticket"));
    let boundary = "b0undary";
    let mut cut = multipart(boundary, &[("content", "iso")], "a.iso", &[7u8; 1000]);
    cut.truncate(cut.len() - 20);
    let ctype = format!("multipart/form-data; boundary={boundary}");
    let (status, reason, _) = send(
        &s.addr,
        &head(&s, "POST", UPLOAD, &ctype, cut.len(), false),
        &cut,
    );
    assert_eq!((status, reason.as_str()), (500, "upload failed"));
    let body = multipart(boundary, &[("content", "iso")], "a.iso", &[7u8; 1000]);
    let (status, reason, _) = send(
        &s.addr,
        &head(
            &s,
            "POST",
            "/api2/json/nodes/pve1/storage/local-lvm/upload",
            &ctype,
            body.len(),
            false,
        ),
        &body,
    );
    assert_eq!(status, 500);
    assert!(
        reason.starts_with("can't upload to storage type"),
        "{reason}"
    );
}

/// AnyEvent.pm authenticate_and_handle_request: a body over `$limit_max_post` (512 KiB) that
/// is not an upload is answered `501 for data too large` (the message as the body) without
/// being read, and changes nothing; a body on a method other than PUT or POST is
/// `501 Unexpected content for method 'GET'`.
#[test]
fn an_oversized_body_is_refused_with_501() {
    let sim = Sim::plain(&["--time-scale", "0.05"], &[]);
    let s = Session::login(&sim);
    quick_vm(&s, "100", &[("description", "kept")]);
    let body = format!("description={}", "x".repeat(600 * 1024));
    let (status, reason, text) = send(
        &s.addr,
        &head(
            &s,
            "PUT",
            "/api2/json/nodes/pve1/qemu/100/config",
            "application/x-www-form-urlencoded",
            body.len(),
            true,
        ),
        body.as_bytes(),
    );
    assert_eq!(
        (status, reason.as_str(), text.as_str()),
        (501, "for data too large", "for data too large")
    );
    assert_eq!(
        s.data("GET", "/nodes/pve1/qemu/100/config", &[])["description"],
        "kept"
    );
    // Just under the limit is read and handled (here refused by the schema's 8 KiB).
    let body = format!("description={}", "x".repeat(500 * 1024));
    let (status, reason, _) = send(
        &s.addr,
        &head(
            &s,
            "PUT",
            "/api2/json/nodes/pve1/qemu/100/config",
            "application/x-www-form-urlencoded",
            body.len(),
            true,
        ),
        body.as_bytes(),
    );
    assert_eq!(
        (status, reason.as_str()),
        (400, "Parameter verification failed.")
    );
    let (status, reason, text) = send(
        &s.addr,
        &head(&s, "GET", "/api2/json/version", "text/plain", 4, true),
        b"abcd",
    );
    assert_eq!(
        (status, reason.as_str(), text.as_str()),
        (
            501,
            "Unexpected content for method 'GET'",
            "Unexpected content for method 'GET'"
        )
    );
}

/// pve-manager HTTPServer.pm rest_handler: a path no handler serves is `501 Method 'M
/// $rel_uri' not implemented`, `$rel_uri` the URI-unescaped path below `/api2/json`, in the
/// status line and as the JSON `message` (no trailing newline).
#[test]
fn an_unknown_path_is_not_implemented_in_pves_words() {
    let sim = Sim::plain(&[], &[]);
    let s = Session::login(&sim);
    for (path, rel) in [
        ("/nodes/pve1/bogus", "/nodes/pve1/bogus"),
        ("/bogus/deeper", "/bogus/deeper"),
        ("/nodes/pve1/qemu/100/a%20b", "/nodes/pve1/qemu/100/a b"),
        (
            "/nodes/pve1/storage/local/nothing",
            "/nodes/pve1/storage/local/nothing",
        ),
    ] {
        let (status, reason, v) = s.call("GET", path, &[]);
        let want = format!("Method 'GET {rel}' not implemented");
        assert_eq!((status, reason.as_str()), (501, want.as_str()));
        assert_eq!(v["message"], want.as_str());
        assert_eq!(v["data"], Value::Null);
    }
}
