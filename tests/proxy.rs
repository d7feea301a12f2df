//! Through a real HTTP proxy (Debian's tinyproxy, started here on loopback): `HTTPS_PROXY`
//! and the `proxy` option tunnel to PVE with `CONNECT`, the fingerprint pin still applies end
//! to end, `NO_PROXY` and `proxy: ""` connect directly, and a proxy that cannot be reached or
//! refuses the tunnel fails at once, naming the proxy.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::*;
use serde_json::json;

struct Tinyproxy {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Drop for Tinyproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Tinyproxy {
    /// Starts tinyproxy in the foreground; `allow_connect: false` refuses every tunnel.
    fn start(allow_connect: bool) -> Tinyproxy {
        let dir = scratch("tinyproxy");
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let log = dir.join("tinyproxy.log");
        std::fs::write(&log, "").unwrap();
        // tinyproxy drops root for this user; it must be able to write its log.
        let _ = Command::new("chmod").arg("0777").arg(&dir).status();
        let _ = Command::new("chmod").arg("0666").arg(&log).status();
        let root = is_root();
        let conf = format!(
            "Port {port}\nListen 127.0.0.1\nTimeout 60\nLogFile \"{}\"\nLogLevel Connect\nMaxClients 20\nAllow 127.0.0.1\n{}{}",
            log.display(),
            if allow_connect { "" } else { "ConnectPort 0\n" },
            if root {
                "User nobody\nGroup nogroup\n"
            } else {
                ""
            },
        );
        let conf_path = dir.join("tinyproxy.conf");
        std::fs::write(&conf_path, conf).unwrap();
        let child = Command::new("tinyproxy")
            .args(["-d", "-c"])
            .arg(&conf_path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("tinyproxy is not installed (apt-get install tinyproxy; .ci/run does)");
        let t = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "tinyproxy did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Tinyproxy { child, port, log }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// How many CONNECT tunnels it opened to this port.
    fn tunnels_to(&self, port: u16) -> usize {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("CONNECT") && l.contains(&format!(":{port}")))
            .count()
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

fn args(sim: &Sim, extra: serde_json::Value) -> serde_json::Value {
    merge(&[
        sim.conn(),
        json!({"node": "pve1", "vmid": 100, "name": "proxied", "cores": 1,
               "disks": [{"slot": "scsi0", "storage": "local-lvm", "size": "1G"}]}),
        extra,
    ])
}

#[test]
fn https_proxy_tunnels_with_the_pin_and_no_proxy_bypasses_it() {
    let proxy = Tinyproxy::start(true);
    let sim = Sim::start(&[], &[]);
    let url = proxy.url();
    // Through HTTPS_PROXY, with the certificate pinned end to end.
    let r = ok(run_with_env(
        args(&sim, json!({})),
        &[("HTTPS_PROXY", url.as_str())],
    ));
    assert_eq!(r["changed"], true);
    let through = proxy.tunnels_to(sim.port());
    assert!(through >= 1, "no CONNECT in tinyproxy's log");
    // A wrong pin still fails through the tunnel: TLS is PVE's, not the proxy's.
    let f = failed(run_with_env(
        args(&sim, json!({"api_fingerprint": "00".repeat(32)})),
        &[("https_proxy", url.as_str())],
    ));
    assert!(f["msg"].as_str().unwrap().contains("TLS"), "{}", f["msg"]);
    // NO_PROXY and proxy: "" connect directly.
    let before = proxy.tunnels_to(sim.port());
    ok(run_with_env(
        args(&sim, json!({})),
        &[
            ("HTTPS_PROXY", url.as_str()),
            ("NO_PROXY", "localhost,127.0.0.1"),
        ],
    ));
    ok(run_with_env(
        args(&sim, json!({"proxy": ""})),
        &[("HTTPS_PROXY", url.as_str())],
    ));
    assert_eq!(
        proxy.tunnels_to(sim.port()),
        before,
        "a bypass went through the proxy"
    );
    // The option wins over the environment.
    ok(run_with_env(
        args(&sim, json!({"proxy": url})),
        &[("HTTPS_PROXY", "http://127.0.0.1:1")],
    ));
    assert!(proxy.tunnels_to(sim.port()) > before);
}

#[test]
fn a_proxy_that_is_down_or_refuses_fails_at_once_naming_it() {
    let sim = Sim::start(&[], &[]);
    // Nothing listens there: the run fails at once, not after the 30-minute default timeout.
    let closed = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let t = Instant::now();
    let f = failed(run_with_env(
        args(&sim, json!({})),
        &[("HTTPS_PROXY", &format!("http://127.0.0.1:{closed}"))],
    ));
    let msg = f["msg"].as_str().unwrap();
    assert!(
        msg.contains(&format!(
            "the proxy http://127.0.0.1:{closed} (from HTTPS_PROXY)"
        )),
        "{msg}"
    );
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    // A proxy that refuses CONNECT.
    let refusing = Tinyproxy::start(false);
    let t = Instant::now();
    let f = failed(run_with_env(
        args(
            &sim,
            json!({"proxy": format!("http://user:Pr0xy-Pw@127.0.0.1:{}", refusing.port)}),
        ),
        &[],
    ));
    let msg = f["msg"].as_str().unwrap();
    assert!(msg.contains("refused to open a tunnel"), "{msg}");
    assert!(msg.contains("(from proxy)"), "{msg}");
    assert!(
        !f.to_string().contains("Pr0xy-Pw"),
        "the proxy password leaked: {f}"
    );
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
}
