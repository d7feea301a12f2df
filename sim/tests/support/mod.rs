//! What the pve-sim suites share: a scratch directory, test images, a simulator started with
//! known users, raw HTTP requests (to see status lines exactly) and a ticket session.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

pub mod access;

pub static N: AtomicU32 = AtomicU32::new(0);

pub fn scratch(tag: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "simtest-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A qcow2 with `data_mib` of random data and `virt_mib` of virtual size (made once per run).
pub fn image(name: &str, virt_mib: u64, data_mib: u64) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("sim-images");
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    // Tests run in parallel: the first to create the lock file makes the image, others wait.
    let lock = dir.join(format!("{name}.lock"));
    let mine = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&lock)
        .is_ok();
    if !mine {
        while !p.exists() {
            std::thread::sleep(Duration::from_millis(100));
        }
        return p;
    }
    if !p.exists() {
        let raw = dir.join(format!("{name}.{}.raw", std::process::id()));
        let sh = format!(
            "head -c {data_mib}M /dev/urandom > '{}' && truncate -s {virt_mib}M '{}'",
            raw.display(),
            raw.display()
        );
        assert!(
            Command::new("sh")
                .arg("-c")
                .arg(sh)
                .status()
                .unwrap()
                .success()
        );
        let tmp = dir.join(format!("{name}.{}.tmp", std::process::id()));
        assert!(
            Command::new("qemu-img")
                .args(["convert", "-q", "-f", "raw", "-O", "qcow2"])
                .arg(&raw)
                .arg(&tmp)
                .status()
                .unwrap()
                .success()
        );
        std::fs::remove_file(&raw).unwrap();
        std::fs::rename(&tmp, &p).unwrap();
    }
    p
}

pub fn vsize(p: &Path, fmt: &str) -> u64 {
    let out = Command::new("qemu-img")
        .args(["info", "--output=json", "-f", fmt])
        .arg(p)
        .output()
        .unwrap();
    serde_json::from_slice::<Value>(&out.stdout).unwrap()["virtual-size"]
        .as_u64()
        .unwrap()
}

pub struct Sim {
    pub child: Child,
    pub dir: PathBuf,
    pub info: Value,
}

impl Drop for Sim {
    /// Stops pve-sim and removes its data (disk images of hundreds of MiB each), keeping it
    /// only when the test failed, for a look at what it left.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

impl Sim {
    pub fn start(args: &[&str], images: &[&Path]) -> Sim {
        let dir = scratch("sim");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_pve-sim"));
        cmd.arg("--data-dir").arg(dir.join("data")).args([
            "--listen",
            "127.0.0.1:0",
            "--auth-failure-delay",
            "0s",
        ]);
        cmd.args([
            "--user",
            "root@pam:rootpw",
            "--user",
            "auditor@pve:auditpw:audit",
            "--token",
            "root@pam!ci=tok-secret",
        ]);
        for i in images {
            cmd.arg("--seed-image").arg(i);
        }
        let mut child = cmd.args(args).stdout(Stdio::piped()).spawn().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        Sim {
            child,
            dir,
            info: serde_json::from_str(&line).unwrap(),
        }
    }

    pub fn plain(args: &[&str], images: &[&Path]) -> Sim {
        let mut a = vec!["--plain-http"];
        a.extend_from_slice(args);
        Sim::start(&a, images)
    }

    pub fn port(&self) -> u16 {
        self.info["port"].as_u64().unwrap() as u16
    }

    pub fn admin(&self, method: &str, path: &str, body: Value) -> Value {
        let addr = self.info["admin"]
            .as_str()
            .unwrap()
            .trim_start_matches("http://")
            .to_string();
        let (s, _, v) = raw(
            &addr,
            method,
            path,
            &[("Content-Type", "application/json")],
            &body.to_string(),
        );
        assert_eq!(s, 200, "{v}");
        v
    }

    pub fn data(&self) -> PathBuf {
        self.dir.join("data")
    }
}

/// One HTTP/1.1 request; returns (status, reason phrase, JSON body or Null).
pub fn raw(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String, Value) {
    let mut s = TcpStream::connect(addr).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if !body.is_empty() {
        req.push_str(&format!("Content-Length: {}\r\n", body.len()));
        if !headers.iter().any(|(k, _)| *k == "Content-Type") {
            req.push_str("Content-Type: application/x-www-form-urlencoded\r\n");
        }
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status_line = head.lines().next().unwrap_or("");
    let mut parts = status_line.splitn(3, ' ');
    parts.next();
    let status = parts.next().unwrap_or("0").parse().unwrap_or(0);
    let reason = parts.next().unwrap_or("").to_string();
    (
        status,
        reason,
        serde_json::from_str(body).unwrap_or(Value::Null),
    )
}

/// Serves `bytes` to every GET on a loopback port (a download source); returns the port.
pub fn serve_bytes(bytes: Vec<u8>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut c in listener.incoming().flatten() {
            // Read the whole request head, answer, then close politely (no reset).
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match c.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let _ = write!(
                c,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                bytes.len()
            );
            let _ = c.write_all(&bytes);
            let _ = c.shutdown(std::net::Shutdown::Write);
            let _ = c.read_to_end(&mut Vec::new());
        }
    });
    port
}

pub fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// A ticket-authenticated session on a plain-HTTP simulator.
pub struct Session {
    pub addr: String,
    pub cookie: String,
    pub csrf: String,
}

impl Session {
    pub fn login(sim: &Sim) -> Session {
        Session::login_as(sim, "root@pam", "rootpw")
    }

    pub fn login_as(sim: &Sim, user: &str, password: &str) -> Session {
        let addr = format!("127.0.0.1:{}", sim.port());
        let (s, _, v) = raw(
            &addr,
            "POST",
            "/api2/json/access/ticket",
            &[],
            &format!("username={}&password={}", enc(user), enc(password)),
        );
        assert_eq!(s, 200);
        Session {
            addr,
            cookie: format!(
                "PVEAuthCookie={}",
                enc(v["data"]["ticket"].as_str().unwrap())
            ),
            csrf: v["data"]["CSRFPreventionToken"]
                .as_str()
                .unwrap()
                .to_string(),
        }
    }

    pub fn call(&self, method: &str, path: &str, params: &[(&str, &str)]) -> (u16, String, Value) {
        let form: String = params
            .iter()
            .map(|(k, v)| format!("{}={}", enc(k), enc(v)))
            .collect::<Vec<_>>()
            .join("&");
        let path = format!("/api2/json{path}");
        let headers = [
            ("Cookie", self.cookie.as_str()),
            ("CSRFPreventionToken", self.csrf.as_str()),
        ];
        if method == "GET" || method == "DELETE" {
            let p = if form.is_empty() {
                path
            } else {
                format!("{path}?{form}")
            };
            raw(&self.addr, method, &p, &headers, "")
        } else {
            raw(&self.addr, method, &path, &headers, &form)
        }
    }

    pub fn data(&self, method: &str, path: &str, params: &[(&str, &str)]) -> Value {
        let (s, r, v) = self.call(method, path, params);
        assert_eq!(s, 200, "{method} {path}: {s} {r} {v}");
        v["data"].clone()
    }

    /// Polls a task until it stops; returns its status object.
    pub fn wait(&self, upid: &str) -> Value {
        let node = upid.split(':').nth(1).unwrap();
        let t = Instant::now();
        loop {
            let st = self.data("GET", &format!("/nodes/{node}/tasks/{upid}/status"), &[]);
            if st["status"] == "stopped" {
                return st;
            }
            assert!(
                t.elapsed() < Duration::from_secs(120),
                "task {upid} never ended"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn log(&self, upid: &str) -> Vec<String> {
        let node = upid.split(':').nth(1).unwrap();
        self.data(
            "GET",
            &format!("/nodes/{node}/tasks/{upid}/log"),
            &[("limit", "0")],
        )
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["t"].as_str().unwrap().to_string())
        .collect()
    }
}

pub fn is_upid(s: &str, node: &str, ttype: &str, id: &str) -> bool {
    let p: Vec<&str> = s.split(':').collect();
    let hex8 = |x: &str| {
        x.len() == 8
            && x.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_lowercase())
    };
    p.len() == 9
        && p[0] == "UPID"
        && p[1] == node
        && hex8(p[2])
        && hex8(p[4])
        && p[5] == ttype
        && p[6] == id
        && p[8].is_empty()
}

/// Creates VM `vmid` on pve1 without disks and waits for the create.
pub fn quick_vm(s: &Session, vmid: &str, extra: &[(&str, &str)]) {
    let mut p = vec![("vmid", vmid), ("memory", "2048")];
    p.extend_from_slice(extra);
    let u = s.data("POST", "/nodes/pve1/qemu", &p);
    assert_eq!(s.wait(u.as_str().unwrap())["exitstatus"], "OK");
}

/// A VM's config on pve1 as GET …/config answers it.
pub fn config(s: &Session, vmid: &str) -> Value {
    s.data("GET", &format!("/nodes/pve1/qemu/{vmid}/config"), &[])
}

/// The config file as pve-sim keeps it (admin port).
pub fn file(sim: &Sim, vmid: &str) -> String {
    sim.admin("GET", &format!("/config-file/{vmid}"), Value::Null)["data"]
        .as_str()
        .unwrap()
        .to_string()
}
