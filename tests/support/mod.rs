//! Test support: start a `pve-sim`, make images with `qemu-img`, run the module binary the way
//! Ansible does (an args file as its only argument), and read what the simulator logged.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

pub mod least_privilege;

static N: AtomicU32 = AtomicU32::new(0);

/// A fresh scratch directory under `target/`.
pub fn scratch(tag: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn bin_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_vm"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The `pve-sim` binary of this build (built on demand if missing).
pub fn sim_bin() -> PathBuf {
    let p = bin_dir().join("pve-sim");
    if !p.exists() {
        let st = Command::new(env!("CARGO"))
            .args(["build", "-p", "pve-sim"])
            .status()
            .unwrap();
        assert!(st.success(), "building pve-sim failed");
    }
    p
}

/// Images shared by the tests of one run, made once.
pub fn image(name: &str, virtual_mib: u64, data_mib: u64) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("images");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    let lock = dir.join(format!("{name}.lock"));
    // Several test binaries may race to make the same image: the first to create the lock makes it.
    loop {
        if path.exists() {
            return path;
        }
        if std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&lock)
            .is_ok()
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let raw = dir.join(format!("{name}.raw"));
    // Random data (incompressible, like a real image's), then zeros up to the virtual size.
    let st = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "head -c {}M /dev/urandom > '{}'",
            data_mib,
            raw.display()
        ))
        .status()
        .unwrap();
    assert!(st.success());
    std::fs::OpenOptions::new()
        .write(true)
        .open(&raw)
        .unwrap()
        .set_len(virtual_mib << 20)
        .unwrap();
    let tmp = dir.join(format!("{name}.tmp"));
    let st = Command::new("qemu-img")
        .args(["convert", "-q", "-f", "raw", "-O", "qcow2"])
        .arg(&raw)
        .arg(&tmp)
        .status()
        .unwrap();
    assert!(st.success());
    std::fs::remove_file(&raw).unwrap();
    std::fs::rename(&tmp, &path).unwrap();
    path
}

/// A small cloud-image-like qcow2 (1 GiB virtual, 16 MiB of data).
pub fn small_image() -> PathBuf {
    image("small.qcow2", 1024, 16)
}

/// A file that claims to be qcow2 and is not.
pub fn corrupt_image() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("images");
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("corrupt.qcow2");
    if !p.exists() {
        std::fs::write(&p, b"QFI\xfbnot really a qcow2 image at all, just bytes").unwrap();
    }
    p
}

/// The virtual size of an image file.
pub fn virtual_size(path: &Path, fmt: &str) -> u64 {
    let out = Command::new("qemu-img")
        .args(["info", "--output=json", "-f", fmt])
        .arg(path)
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["virtual-size"].as_u64().unwrap()
}

pub const PASSWORD: &str = "Pve-Sim-Root-Pw-7731";
pub const TOKEN_ID: &str = "root@pam!ci";
pub const TOKEN_SECRET: &str = "0c1d2e3f-aaaa-bbbb-cccc-sekret-token";

/// A running simulator; stopped when dropped.
pub struct Sim {
    child: Child,
    pub dir: PathBuf,
    pub info: Value,
}

impl Sim {
    /// Starts `pve-sim` with the given extra options and images seeded into `local:import/`.
    pub fn start(images: &[&Path], extra: &[&str]) -> Sim {
        let dir = scratch("sim");
        let mut cmd = Command::new(sim_bin());
        cmd.arg("--data-dir").arg(dir.join("data")).args([
            "--listen",
            "127.0.0.1:0",
            "--auth-failure-delay",
            "0s",
        ]);
        cmd.args([
            "--user",
            &format!("root@pam:{PASSWORD}"),
            "--token",
            &format!("{TOKEN_ID}={TOKEN_SECRET}"),
        ]);
        for i in images {
            cmd.arg("--seed-image").arg(i);
        }
        cmd.args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = cmd.spawn().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let info: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("pve-sim did not start: {e}: {line:?}"));
        Sim { child, dir, info }
    }

    pub fn port(&self) -> u16 {
        self.info["port"].as_u64().unwrap() as u16
    }

    pub fn fingerprint(&self) -> String {
        self.info["fingerprint"].as_str().unwrap().to_string()
    }

    pub fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// Connection options for the module (password login, pinned certificate).
    pub fn conn(&self) -> Value {
        json!({"api_host": "127.0.0.1", "api_port": self.port(), "api_password": PASSWORD, "api_fingerprint": self.fingerprint()})
    }

    /// Connection options for another user (password login, pinned certificate).
    pub fn conn_as(&self, user: &str, password: &str) -> Value {
        json!({"api_host": "127.0.0.1", "api_port": self.port(), "api_user": user, "api_password": password,
               "api_fingerprint": self.fingerprint()})
    }

    /// Connection options with the API token and the CA file.
    pub fn token_conn(&self) -> Value {
        json!({"api_host": "127.0.0.1", "api_port": self.port(), "api_token_id": TOKEN_ID, "api_token_secret": TOKEN_SECRET,
               "ca_path": self.info["ca"]})
    }

    fn admin_call(&self, method: &str, path: &str, body: &Value) -> Value {
        let addr = self.info["admin"]
            .as_str()
            .unwrap()
            .trim_start_matches("http://")
            .to_string();
        let mut s = TcpStream::connect(&addr).unwrap();
        let body = body.to_string();
        write!(s, "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}", body.len()).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        let (head, body) = out.split_once("\r\n\r\n").unwrap();
        assert!(
            head.starts_with("HTTP/1.1 200"),
            "admin {method} {path}: {head} {body}"
        );
        serde_json::from_str(body).unwrap()
    }

    /// A VM's config file as pve-sim writes it (a plain `cipassword` shown as `********`, a
    /// crypt hash as it is).
    pub fn config_file(&self, vmid: u32) -> String {
        self.admin_call("GET", &format!("/config-file/{vmid}"), &Value::Null)["data"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// Holds a shared storage's cluster lock (`storage-X`) for `ms`, as another node's
    /// allocation would (pve-sim's admin `/storage-lock`).
    pub fn hold_storage_lock(&self, storage: &str, ms: u64) {
        self.admin_call(
            "POST",
            "/storage-lock",
            &json!({"storage": storage, "ms": ms}),
        );
    }

    /// Adds faults (see pve-sim's faults.rs).
    pub fn fault(&self, f: Value) {
        self.admin_call("POST", "/faults", &f);
    }

    pub fn clear_faults(&self) {
        self.admin_call("DELETE", "/faults", &Value::Null);
    }

    /// Holds a VM's lock from another task for `ms`.
    pub fn hold_lock(&self, vmid: u32, ms: u64, config_lock: Option<&str>) -> String {
        self.hold_lock_after(vmid, ms, config_lock, 0)
    }

    /// Like [`Sim::hold_lock`], but the config lock is set only after the file lock was held
    /// `after_ms`: a backup that starts while a request waits for the file lock.
    pub fn hold_lock_after(
        &self,
        vmid: u32,
        ms: u64,
        config_lock: Option<&str>,
        after_ms: u64,
    ) -> String {
        self.admin_call(
            "POST",
            "/lock",
            &json!({"vmid": vmid, "ms": ms, "config_lock": config_lock, "set_after_ms": after_ms}),
        )["data"]
            .as_str()
            .unwrap()
            .to_string()
    }

    /// What the guest of VM `vmid` read from its NoCloud seed at its last start (pve-sim's
    /// guest model, admin `GET /guest/{vmid}/seed`); `None` if it booted with none.
    pub fn guest_seed(&self, vmid: u32) -> Option<Value> {
        let addr = self.info["admin"]
            .as_str()
            .unwrap()
            .trim_start_matches("http://")
            .to_string();
        let mut s = TcpStream::connect(&addr).unwrap();
        write!(
            s,
            "GET /guest/{vmid}/seed HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        let (head, body) = out.split_once("\r\n\r\n").unwrap();
        if head.starts_with("HTTP/1.1 404") {
            return None;
        }
        let v: Value = serde_json::from_str(body).unwrap();
        Some(v["data"].clone())
    }

    pub fn revoke_tickets(&self) {
        self.admin_call("POST", "/revoke-tickets", &Value::Null);
    }

    /// Every task the simulator ran.
    pub fn tasks(&self) -> Vec<Value> {
        self.admin_call("GET", "/tasks", &Value::Null)["data"]
            .as_array()
            .unwrap()
            .clone()
    }

    /// How many tasks of this type the simulator ran.
    pub fn task_count(&self, ttype: &str) -> usize {
        self.tasks().iter().filter(|t| t["type"] == ttype).count()
    }

    /// The request log.
    pub fn requests(&self) -> Vec<Value> {
        std::fs::read_to_string(self.data().join("requests.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// Requests PVE refused because the VM was locked (`VM is locked (…)`, `… got timeout`).
    pub fn lock_refusals(&self) -> Vec<Value> {
        self.requests()
            .into_iter()
            .filter(|q| {
                q["error"]
                    .as_str()
                    .is_some_and(|e| e.contains(" is locked (") || e.contains("got timeout"))
            })
            .collect()
    }

    /// Requests that failed on the server, other than reads of a VM that does not exist
    /// (yet): the module looks for the VM by its config before creating it.
    pub fn server_errors(&self) -> Vec<Value> {
        self.requests()
            .into_iter()
            .filter(|q| q["status"].as_u64().is_some_and(|s| s >= 500))
            .filter(|q| {
                !(q["method"] == "GET"
                    && q["error"]
                        .as_str()
                        .is_some_and(|e| e.contains("does not exist")))
            })
            .collect()
    }

    /// Write requests (POST/PUT/DELETE) other than logins.
    pub fn writes(&self) -> Vec<Value> {
        self.requests()
            .into_iter()
            .filter(|r| r["method"] != "GET" && r["path"] != "/access/ticket")
            .collect()
    }

    /// A GET on the API with the token (a test's own view of the server).
    pub fn get(&self, path: &str) -> Value {
        curl(self, "GET", path, &[])
    }

    /// A write on the API with the token, as an administrator would make it outside the
    /// module (`POST /pools`, …); returns the body with `__status`.
    pub fn write(&self, method: &str, path: &str, form: &[(&str, &str)]) -> Value {
        curl(self, method, path, form)
    }

    /// The file behind a `local-lvm` volume.
    pub fn lvm_file(&self, node: &str, name: &str) -> PathBuf {
        self.data()
            .join("nodes")
            .join(node)
            .join("local-lvm")
            .join(format!("{name}.raw"))
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A GET made independently of the module's client, so a bug there cannot hide itself.
fn curl(sim: &Sim, method: &str, path: &str, form: &[(&str, &str)]) -> Value {
    let ca = sim.info["ca"]
        .as_str()
        .map(|f| std::fs::read(f).unwrap())
        .unwrap_or_default();
    let certs: Vec<ureq::tls::Certificate<'static>> = ureq::tls::parse_pem(&ca)
        .filter_map(|i| match i.ok()? {
            ureq::tls::PemItem::Certificate(c) => Some(c),
            _ => None,
        })
        .collect();
    let tls = ureq::tls::TlsConfig::builder()
        .root_certs(ureq::tls::RootCerts::new_with_certs(&certs))
        .build();
    let agent = ureq::Agent::config_builder()
        .tls_config(tls)
        .http_status_as_error(false)
        .build()
        .new_agent();
    // A simulator behind the forwarder serves plain HTTP (it has no CA then).
    let scheme = if sim.info["ca"].is_null() {
        "http"
    } else {
        "https"
    };
    let url = format!("{scheme}://127.0.0.1:{}/api2/json{path}", sim.port());
    let auth = format!("PVEAPIToken={TOKEN_ID}={TOKEN_SECRET}");
    let mut resp = match method {
        "GET" => agent.get(&url).header("Authorization", &auth).call(),
        "DELETE" => agent.delete(&url).header("Authorization", &auth).call(),
        "PUT" => agent
            .put(&url)
            .header("Authorization", &auth)
            .send_form(form.iter().copied()),
        _ => agent
            .post(&url)
            .header("Authorization", &auth)
            .send_form(form.iter().copied()),
    }
    .unwrap();
    let status = resp.status().as_u16();
    let text = resp.body_mut().read_to_string().unwrap();
    let mut v: Value = serde_json::from_str(&text).unwrap_or(json!({}));
    v["__status"] = json!(status);
    v
}

/// The result of one module run.
pub struct Run {
    pub result: Value,
    pub stdout: String,
    pub stderr: String,
    pub code: i32,
}

/// The runtime directory the modules of this test process share (as the runs of one
/// controller do): mode 0700, under cargo's temporary directory for the tests, one per
/// process so that an earlier run's records of a pve-sim on the same port count for nothing.
pub fn runtime_dir() -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let dir =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("runtime-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    dir
}

fn run_module_raw(args: &Value, signal_after: Option<Duration>) -> Run {
    run_binary(
        env!("CARGO_BIN_EXE_vm"),
        args,
        signal_after.map(|d| (d, "-TERM")),
    )
}

/// Runs the module and SIGKILLs it after `after`; returns whatever it printed (maybe nothing).
pub fn run_and_kill(args: Value, after: Duration) -> String {
    let dir = scratch("args");
    let path = dir.join("args");
    std::fs::write(&path, args.to_string()).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_vm"))
        .env("XDG_RUNTIME_DIR", runtime_dir())
        .arg(&path)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(after);
    let _ = child.kill();
    let mut out = String::new();
    let _ = child.stdout.take().unwrap().read_to_string(&mut out);
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
    out
}

/// Runs the `image` module with these options.
pub fn run_image(args: Value) -> Run {
    run_binary(env!("CARGO_BIN_EXE_image"), &args, None)
}

/// Runs the `snapshot` module.
pub fn run_snapshot(args: Value) -> Run {
    run_binary(env!("CARGO_BIN_EXE_snapshot"), &args, None)
}

/// Runs the `vm_info` module.
pub fn run_vm_info(args: Value) -> Run {
    run_binary(env!("CARGO_BIN_EXE_vm_info"), &args, None)
}

/// Runs the `vm` module with these environment variables added.
pub fn run_with_env(args: Value, env: &[(&str, &str)]) -> Run {
    run_binary_env(env!("CARGO_BIN_EXE_vm"), &args, None, env)
}

fn run_binary(bin: &str, args: &Value, signal_after: Option<(Duration, &str)>) -> Run {
    run_binary_env(bin, args, signal_after, &[])
}

fn run_binary_env(
    bin: &str,
    args: &Value,
    signal_after: Option<(Duration, &str)>,
    env: &[(&str, &str)],
) -> Run {
    let dir = scratch("args");
    let path = dir.join("args");
    std::fs::write(&path, args.to_string()).unwrap();
    let mut cmd = Command::new(bin);
    // Only the options given count: no PROXMOX_* fallback from the test's environment.
    // Nor a proxy of the machine running the tests: the simulator is on loopback.
    for (k, _) in std::env::vars()
        .filter(|(k, _)| k.starts_with("PROXMOX_") || k.to_ascii_lowercase().ends_with("_proxy"))
    {
        cmd.env_remove(k);
    }
    // The gate's slots and the roster live in this test run's own runtime directory, not in
    // the user's home (a test may give its own).
    cmd.env("XDG_RUNTIME_DIR", runtime_dir());
    cmd.envs(env.iter().copied());
    let mut child = cmd
        .arg(&path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some((d, sig)) = signal_after {
        std::thread::sleep(d);
        Command::new("kill")
            .args([sig, &child.id().to_string()])
            .status()
            .unwrap();
    }
    let mut stdout = String::new();
    let mut stderr = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let code = child.wait().unwrap().code().unwrap_or(-1);
    let _ = std::fs::remove_dir_all(&dir);
    let lines: Vec<&str> = stdout.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(
        lines.len(),
        1,
        "the module must print exactly one JSON line, got: {stdout:?} (stderr {stderr:?})"
    );
    let result: Value =
        serde_json::from_str(lines[0]).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"));
    Run {
        result,
        stdout,
        stderr,
        code,
    }
}

/// Merges option objects (later ones win).
pub fn merge(parts: &[Value]) -> Value {
    let mut out = serde_json::Map::new();
    for p in parts {
        for (k, v) in p.as_object().unwrap() {
            out.insert(k.clone(), v.clone());
        }
    }
    Value::Object(out)
}

/// Runs the module with these options, as Ansible would.
pub fn run(args: Value) -> Run {
    run_module_raw(&args, None)
}

/// Runs the module and sends it `signal` (`-HUP`, `-QUIT`, …) after `after`.
pub fn run_and_signal(args: Value, after: Duration, signal: &str) -> Run {
    run_binary(env!("CARGO_BIN_EXE_vm"), &args, Some((after, signal)))
}

/// Runs the module and sends it SIGTERM after `after`.
pub fn run_and_term(args: Value, after: Duration) -> Run {
    run_module_raw(&args, Some(after))
}

/// Asserts a successful result and returns it.
pub fn ok(r: Run) -> Value {
    assert!(
        r.result["failed"] != json!(true),
        "module failed: {}",
        r.result
    );
    assert_eq!(r.code, 0);
    r.result
}

/// Asserts a failed result and returns it.
pub fn failed(r: Run) -> Value {
    assert_eq!(
        r.result["failed"],
        json!(true),
        "module did not fail: {}",
        r.result
    );
    assert!(!r.stderr.contains("panicked"), "panic: {}", r.stderr);
    r.result
}

/// Serves `bytes` over plain HTTP on loopback (any path) until the test ends; returns the port.
/// `delay_per_mib` slows the answer down, to make a download take time.
pub fn serve_file(bytes: Vec<u8>, delay_per_mib: Duration) -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut c in listener.incoming().flatten() {
            let bytes = bytes.clone();
            std::thread::spawn(move || {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match c.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = write!(
                    c,
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    bytes.len()
                );
                for chunk in bytes.chunks(1 << 20) {
                    if c.write_all(chunk).is_err() {
                        return;
                    }
                    std::thread::sleep(delay_per_mib);
                }
                let _ = c.shutdown(std::net::Shutdown::Write);
                let _ = c.read_to_end(&mut Vec::new());
            });
        }
    });
    port
}

/// The SHA-256 of a file, from coreutils.
pub fn sha256(path: &Path) -> String {
    let out = Command::new("sha256sum").arg(path).output().unwrap();
    String::from_utf8(out.stdout)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

/// The types of the tasks a run reports (`qmcreate`, `resize`, …), in order.
pub fn task_types(r: &Value) -> Vec<String> {
    r["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["type"].as_str().unwrap().to_string())
        .collect()
}

/// The vmid the `vm` module gives a VM created by `name` alone on a cluster that lists the
/// VMs `taken` (its lowest free id from 100 up, spread by the name:
/// [`sankofa_proxmox::pve::api::cluster::spread_vmid`], first try).
pub fn auto_vmid(name: &str, taken: &[u32]) -> u64 {
    let lowest = (100..).find(|id| !taken.contains(id)).unwrap_or(100);
    u64::from(sankofa_proxmox::pve::api::cluster::spread_vmid(
        lowest, taken, name, 0,
    ))
}
