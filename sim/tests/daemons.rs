//! pve-sim serves as PVE's two API daemons do (`sim/src/http/daemons.rs`): pveproxy's workers
//! and their connection limits (pve-http-server `PVE/APIServer/AnyEvent.pm`, with the numbers
//! of pve-manager `PVE/Service/pveproxy.pm`), protected calls handed to pvedaemon
//! (`PVE/HTTPServer.pm` `rest_handler`), and the 596 a client sees when pvedaemon does not
//! answer in time (`proxy_request`). Requests are written by hand on plain HTTP, so that each
//! `Connection` header and each close is seen as a client sees it.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::Sim;

const TOKEN: &str = "PVEAPIToken=root@pam!ci=tok-secret";

/// A protected call (qemu-server `PVE/API2/Qemu.pm` `vmlist`, `protected => 1`).
const PROTECTED: &str = "/api2/json/nodes/pve1/qemu";
/// A call pveproxy answers itself (pve-manager `PVE/API2/Cluster.pm` `resources`).
const UNPROTECTED: &str = "/api2/json/cluster/resources";

/// One answer as a client reads it.
struct Answer {
    status: u16,
    reason: String,
    /// The `Connection` header.
    connection: String,
    body: String,
}

/// One client connection, kept alive between requests.
struct Client {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Client {
    fn open(sim: &Sim) -> Client {
        let stream = TcpStream::connect(("127.0.0.1", sim.port())).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        Client {
            stream,
            buf: Vec::new(),
        }
    }

    /// Sends a GET with the API token and reads its answer (`Content-Length` bytes of body).
    fn get(&mut self, path: &str) -> Answer {
        let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: {TOKEN}\r\n\r\n");
        self.stream.write_all(req.as_bytes()).unwrap();
        let head_end = loop {
            if let Some(end) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break end;
            }
            assert!(self.fill(), "closed before an answer to GET {path}");
        };
        let head = String::from_utf8_lossy(&self.buf[..head_end]).to_string();
        self.buf.drain(..head_end + 4);
        let header = |name: &str| {
            head.lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
                })
                .unwrap_or_default()
        };
        let len: usize = header("content-length").parse().unwrap_or(0);
        while self.buf.len() < len {
            assert!(self.fill(), "closed within the body of GET {path}");
        }
        let body = String::from_utf8_lossy(&self.buf[..len]).to_string();
        self.buf.drain(..len);
        let mut status_line = head.lines().next().unwrap_or("").splitn(3, ' ');
        status_line.next();
        Answer {
            status: status_line.next().unwrap_or("0").parse().unwrap_or(0),
            reason: status_line.next().unwrap_or("").to_string(),
            connection: header("connection"),
            body,
        }
    }

    fn fill(&mut self) -> bool {
        let mut chunk = [0u8; 16 * 1024];
        match self.stream.read(&mut chunk) {
            Ok(0) | Err(_) => false,
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                true
            }
        }
    }

    /// Whether pve-sim closes the connection within `wait` (a read sees its end).
    fn closed_within(&mut self, wait: Duration) -> bool {
        self.stream.set_read_timeout(Some(wait)).unwrap();
        let mut byte = [0u8; 1];
        match self.stream.read(&mut byte) {
            Ok(0) => true,
            Ok(_) => panic!("unexpected bytes on an idle connection"),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => false,
            Err(_) => true,
        }
    }
}

/// The request log's entries for `path` (below `/api2/json`).
fn logged(sim: &Sim, path: &str) -> Vec<Value> {
    std::fs::read_to_string(sim.data().join("requests.jsonl"))
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["path"] == path)
        .collect()
}

#[test]
fn a_connection_carries_a_hundred_requests_then_closes() {
    let sim = Sim::plain(&[], &[]);
    let mut conn = Client::open(&sim);
    for n in 1..100 {
        let a = conn.get("/api2/json/version");
        assert_eq!(
            (a.status, a.connection.as_str()),
            (200, "Keep-Alive"),
            "{n}"
        );
    }
    let last = conn.get("/api2/json/version");
    assert_eq!((last.status, last.connection.as_str()), (200, "close"));
    assert!(conn.closed_within(Duration::from_secs(5)));
}

#[test]
fn keep_alive_is_the_count_of_requests_left() {
    let sim = Sim::plain(&["--keep-alive", "2"], &[]);
    let mut conn = Client::open(&sim);
    assert_eq!(conn.get("/api2/json/version").connection, "Keep-Alive");
    assert_eq!(conn.get("/api2/json/version").connection, "close");
    assert!(conn.closed_within(Duration::from_secs(5)));
    // A new connection starts afresh.
    let mut again = Client::open(&sim);
    assert_eq!(again.get("/api2/json/version").connection, "Keep-Alive");
}

#[test]
fn an_idle_connection_is_closed_after_the_timeout() {
    let sim = Sim::plain(&["--idle-timeout", "400ms"], &[]);
    let mut conn = Client::open(&sim);
    assert_eq!(conn.get("/api2/json/version").status, 200);
    let idle = Instant::now();
    assert!(
        !conn.closed_within(Duration::from_millis(150)),
        "closed early"
    );
    assert!(conn.closed_within(Duration::from_secs(5)), "never closed");
    let after = idle.elapsed();
    assert!(after >= Duration::from_millis(350), "{after:?}");
    // A connection in use stays open: the timeout counts idle time only.
    let mut busy = Client::open(&sim);
    for _ in 0..4 {
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(busy.get("/api2/json/version").connection, "Keep-Alive");
    }
}

#[test]
fn the_default_idle_timeout_is_five_seconds() {
    let sim = Sim::plain(&[], &[]);
    let mut conn = Client::open(&sim);
    assert_eq!(conn.get("/api2/json/version").status, 200);
    assert!(
        !conn.closed_within(Duration::from_millis(4500)),
        "closed early"
    );
    assert!(conn.closed_within(Duration::from_secs(3)), "never closed");
}

#[test]
fn a_worker_restarts_after_max_requests_and_its_connections_close() {
    let sim = Sim::plain(&["--workers", "1", "--max-requests", "3"], &[]);
    let mut first = Client::open(&sim);
    let mut second = Client::open(&sim);
    assert_eq!(first.get("/api2/json/version").connection, "Keep-Alive");
    assert_eq!(second.get("/api2/json/version").connection, "Keep-Alive");
    // The third request ends the worker (`end_loop`): it and each later answer on its
    // connections say close.
    assert_eq!(first.get("/api2/json/version").connection, "close");
    assert!(first.closed_within(Duration::from_secs(5)));
    let last = second.get("/api2/json/version");
    assert_eq!((last.status, last.connection.as_str()), (200, "close"));
    assert!(second.closed_within(Duration::from_secs(5)));
    // A new worker takes new connections.
    let mut fresh = Client::open(&sim);
    assert_eq!(fresh.get("/api2/json/version").connection, "Keep-Alive");
    let workers: Vec<u64> = logged(&sim, "/version")
        .iter()
        .map(|e| e["worker"].as_u64().unwrap())
        .collect();
    assert_eq!(workers, [0, 0, 0, 0, 1]);
}

#[test]
fn near_max_conn_new_connections_are_not_kept_alive() {
    let sim = Sim::plain(&["--workers", "1", "--max-conn", "3"], &[]);
    let mut first = Client::open(&sim);
    let mut second = Client::open(&sim);
    assert_eq!(first.get("/api2/json/version").connection, "Keep-Alive");
    assert_eq!(second.get("/api2/json/version").connection, "Keep-Alive");
    // conn_count + 1 >= max_conn_soft_limit (max_conn itself at 100 or less).
    let mut third = Client::open(&sim);
    let a = third.get("/api2/json/version");
    assert_eq!((a.status, a.connection.as_str()), (200, "close"));
    drop(first);
    drop(third);
    std::thread::sleep(Duration::from_millis(300));
    let mut later = Client::open(&sim);
    assert_eq!(later.get("/api2/json/version").connection, "Keep-Alive");
}

/// Runs `paths` at once, one connection each; returns each answer and the time all took.
fn at_once(sim: &Sim, paths: &[&str]) -> (Vec<Answer>, Duration) {
    let started = Instant::now();
    let answers = std::thread::scope(|scope| {
        let running: Vec<_> = paths
            .iter()
            .map(|path| {
                let mut conn = Client::open(sim);
                scope.spawn(move || conn.get(path))
            })
            .collect();
        running
            .into_iter()
            .map(|r| r.join().unwrap())
            .collect::<Vec<_>>()
    });
    (answers, started.elapsed())
}

#[test]
fn pveproxys_cost_holds_its_workers_event_loop() {
    let one = Sim::plain(&["--workers", "1", "--request-cost", "300ms"], &[]);
    let (answers, took) = at_once(&one, &[UNPROTECTED, UNPROTECTED]);
    assert!(answers.iter().all(|a| a.status == 200));
    assert!(took >= Duration::from_millis(600), "{took:?}");
    let two = Sim::plain(&["--workers", "2", "--request-cost", "300ms"], &[]);
    let (answers, took) = at_once(&two, &[UNPROTECTED, UNPROTECTED]);
    assert!(answers.iter().all(|a| a.status == 200));
    assert!(took < Duration::from_millis(600), "{took:?}");
}

#[test]
fn protected_calls_queue_for_pvedaemon_and_the_rest_do_not() {
    let sim = Sim::plain(
        &["--daemon-workers", "1", "--daemon-request-cost", "400ms"],
        &[],
    );
    let started = Instant::now();
    let quick = std::thread::scope(|scope| {
        let slow: Vec<_> = (0..2)
            .map(|_| {
                let mut conn = Client::open(&sim);
                scope.spawn(move || conn.get(PROTECTED))
            })
            .collect();
        std::thread::sleep(Duration::from_millis(100));
        let asked = Instant::now();
        let answer = Client::open(&sim).get(UNPROTECTED);
        let quick = asked.elapsed();
        assert_eq!(answer.status, 200);
        for s in slow {
            assert_eq!(s.join().unwrap().status, 200);
        }
        quick
    });
    // One pvedaemon worker: the two protected calls ran one after the other.
    assert!(started.elapsed() >= Duration::from_millis(800));
    assert!(quick < Duration::from_millis(300), "{quick:?}");
    let daemons = |path: &str| -> Vec<String> {
        logged(&sim, path)
            .iter()
            .map(|e| e["daemon"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(daemons("/nodes/pve1/qemu"), ["pvedaemon", "pvedaemon"]);
    assert_eq!(daemons("/cluster/resources"), ["pveproxy"]);
    let queued = logged(&sim, "/nodes/pve1/qemu")
        .iter()
        .map(|e| e["queued_ms"].as_f64().unwrap())
        .fold(0.0, f64::max);
    assert!(queued >= 300.0, "{queued}");
}

#[test]
fn a_pvedaemon_that_does_not_answer_in_time_is_596() {
    // One pvedaemon worker at 250 ms a call, pveproxy waiting 400 ms: the first call is
    // answered, the second is done but late, the third never reaches pvedaemon.
    let sim = Sim::plain(
        &[
            "--daemon-workers",
            "1",
            "--daemon-request-cost",
            "250ms",
            "--proxy-timeout",
            "400ms",
        ],
        &[],
    );
    let (answers, _) = at_once(&sim, &[PROTECTED, PROTECTED, PROTECTED]);
    let mut statuses: Vec<u16> = answers.iter().map(|a| a.status).collect();
    statuses.sort();
    assert_eq!(statuses, [200, 596, 596]);
    for late in answers.iter().filter(|a| a.status == 596) {
        assert_eq!(late.reason, "Connection timed out");
        assert_eq!(late.connection, "close");
        assert_eq!(late.body, "");
    }
    let mut handled: Vec<u64> = logged(&sim, "/nodes/pve1/qemu")
        .iter()
        .map(|e| e["status"].as_u64().unwrap())
        .collect();
    handled.sort();
    // Two reached pvedaemon (200 each, one answered too late), and pveproxy logged two 596.
    assert_eq!(handled, [200, 200, 596, 596]);
    // Calls pveproxy answers itself do not wait for pvedaemon.
    let mut conn = Client::open(&sim);
    assert_eq!(conn.get(UNPROTECTED).status, 200);
}
