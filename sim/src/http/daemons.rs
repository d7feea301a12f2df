//! PVE's two API daemons as pve-sim serves them: pveproxy, whose workers each run one event
//! loop and own the connections they accepted, and pvedaemon, whose workers run the protected
//! handlers. The numbers are PVE's: pve-manager `PVE/Service/pveproxy.pm` and
//! `PVE/Service/pvedaemon.pm` (`max_workers => 3`, `keep_alive => 100`, `max_conn => 500`,
//! `max_requests => 1000`) and pve-http-server `PVE/APIServer/AnyEvent.pm` `new` (`timeout`
//! 5 s, `max_conn_soft_limit`). What a request costs in each daemon is pve-sim's own knob.
//!
//! What is simplified: PVE's workers are processes that take turns at one listening socket
//! (`accept`, under a lock file); here a new connection goes to the current worker with the
//! fewest connections. A pvedaemon worker takes any waiting request (pveproxy opens a fresh
//! connection to it for each one), so its pool is a counting semaphore.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// A connection's and a worker's limits, as AnyEvent.pm applies them.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Requests one connection may carry (AnyEvent.pm `keep_alive`: the count left, taken
    /// down by one per request header in `push_request_header`; pveproxy.pm passes 100).
    /// 0 keeps no connection alive.
    pub keep_alive: u32,
    /// An idle connection is closed after this long (AnyEvent.pm `new`: `timeout` 5 s, the
    /// handle's inactivity timeout, off while a request is handled).
    pub idle_timeout: Duration,
    /// A worker ends after this many requests (AnyEvent.pm `push_request_header`:
    /// `request_count >= max_requests` sets `end_loop`; pveproxy.pm passes 1000).
    pub max_requests: u64,
    /// Connections one worker holds at most (`max_conn`, 500 in pveproxy.pm); from
    /// [`Limits::soft_limit`] on, new connections are not kept alive.
    pub max_conn: usize,
}

impl Limits {
    /// No limit a client could meet (pve-sim's admin port is no PVE daemon).
    pub fn unlimited() -> Self {
        Limits {
            keep_alive: u32::MAX,
            idle_timeout: Duration::from_secs(60),
            max_requests: u64::MAX,
            max_conn: usize::MAX,
        }
    }

    /// AnyEvent.pm `new`: `max_conn_soft_limit = max_conn > 100 ? max_conn - 20 : max_conn`.
    pub fn soft_limit(&self) -> usize {
        if self.max_conn > 100 {
            self.max_conn - 20
        } else {
            self.max_conn
        }
    }
}

/// How the daemons serve, beside pveproxy's workers and cost (`--daemon-workers`,
/// `--daemon-request-cost`, the connection limits, `--proxy-timeout`).
#[derive(Clone, Debug)]
pub struct DaemonOptions {
    pub limits: Limits,
    pub daemon_workers: usize,
    pub daemon_request_cost: Duration,
    pub proxy_timeout: Duration,
}

/// A counting semaphore.
struct Semaphore {
    free: Mutex<usize>,
    cv: Condvar,
}

impl Semaphore {
    fn new(n: usize) -> Self {
        Semaphore {
            free: Mutex::new(n.max(1)),
            cv: Condvar::new(),
        }
    }

    /// Takes one unit, waiting at most until `deadline` (forever without one).
    fn acquire(&self, deadline: Option<Instant>) -> Option<Permit<'_>> {
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        while *free == 0 {
            free = match deadline {
                None => self.cv.wait(free).unwrap_or_else(|e| e.into_inner()),
                Some(at) => {
                    let now = Instant::now();
                    if now >= at {
                        return None;
                    }
                    self.cv
                        .wait_timeout(free, at - now)
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
            };
        }
        *free -= 1;
        Some(Permit { sem: self })
    }
}

/// One unit of a [`Semaphore`], given back when dropped.
pub struct Permit<'a> {
    sem: &'a Semaphore,
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        *self.sem.free.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        self.sem.cv.notify_one();
    }
}

/// AnyEvent::HTTP's `$MAX_PER_HOST` (4): the connections one pveproxy worker opens to
/// `localhost:85` at once; a proxied request beyond them waits for a slot, untimed (the
/// request's 30 s run from its connection on).
const PROXY_SLOTS_PER_WORKER: usize = 4;

#[derive(Default)]
struct WorkerCounts {
    connections: usize,
    requests: u64,
    /// AnyEvent.pm `end_loop`: the worker takes no new connection, answers with
    /// `Connection: close`, and ends when its last connection closes.
    ending: bool,
}

/// One pveproxy worker: one event loop, so one request's Perl at a time, while the requests
/// it proxied to pvedaemon wait without holding it.
pub struct ProxyWorker {
    /// The worker's process number since pve-sim started (a restarted worker is a new one).
    pub serial: u64,
    event_loop: Mutex<()>,
    proxy_slots: Semaphore,
    counts: Mutex<WorkerCounts>,
}

impl ProxyWorker {
    fn new(serial: u64) -> Arc<Self> {
        Arc::new(ProxyWorker {
            serial,
            event_loop: Mutex::new(()),
            proxy_slots: Semaphore::new(PROXY_SLOTS_PER_WORKER),
            counts: Mutex::new(WorkerCounts::default()),
        })
    }

    fn counts(&self) -> MutexGuard<'_, WorkerCounts> {
        self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Holds the worker's event loop: no other request of this worker runs meanwhile.
    pub fn busy(&self) -> MutexGuard<'_, ()> {
        self.event_loop.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits for one of the worker's connections to pvedaemon (AnyEvent::HTTP `_get_slot`).
    pub fn proxy_slot(&self) -> Permit<'_> {
        self.proxy_slots
            .acquire(None)
            .expect("an untimed wait ends with a permit")
    }

    /// Whether the worker has reached `max_requests` and is ending.
    pub fn ending(&self) -> bool {
        self.counts().ending
    }
}

/// A connection accepted by a pveproxy worker; it leaves the worker's count when dropped.
pub struct Accepted {
    pub worker: Arc<ProxyWorker>,
    /// AnyEvent.pm `accept_connections`: `keep_alive` as the connection starts, 0 when the
    /// worker is near `max_conn` ("stop keep-alive when there are many open connections").
    pub keep_alive: u32,
}

impl Drop for Accepted {
    fn drop(&mut self) {
        let mut counts = self.worker.counts();
        counts.connections = counts.connections.saturating_sub(1);
    }
}

/// pveproxy: `--workers` event loops, each with its connections and its request count.
pub struct Pveproxy {
    pub limits: Limits,
    /// What pveproxy's own Perl costs per request (authentication, finding the handler,
    /// the permission check, and the handler itself when it is not protected).
    pub cost: Duration,
    workers: Mutex<Vec<Arc<ProxyWorker>>>,
    spawned: Mutex<u64>,
}

impl Pveproxy {
    pub fn new(workers: usize, cost: Duration, limits: Limits) -> Arc<Self> {
        let count = workers.max(1);
        Arc::new(Pveproxy {
            limits,
            cost,
            workers: Mutex::new((0..count as u64).map(ProxyWorker::new).collect()),
            spawned: Mutex::new(count as u64),
        })
    }

    /// A new connection, given to the worker with the fewest (AnyEvent.pm
    /// `accept_connections`). While every worker holds `max_conn`, it waits as PVE's
    /// `socket_watch` does, looking again each second.
    pub fn accept(&self) -> Accepted {
        loop {
            let workers = self.workers.lock().unwrap_or_else(|e| e.into_inner());
            let least = workers
                .iter()
                .min_by_key(|w| w.counts().connections)
                .cloned()
                .expect("at least one worker");
            drop(workers);
            let mut counts = least.counts();
            if counts.connections < self.limits.max_conn {
                let keep_alive = if counts.connections + 1 >= self.limits.soft_limit() {
                    0
                } else {
                    self.limits.keep_alive
                };
                counts.connections += 1;
                drop(counts);
                return Accepted {
                    worker: least,
                    keep_alive,
                };
            }
            drop(counts);
            std::thread::sleep(Duration::from_secs(1));
        }
    }

    /// Counts a request on `worker` (AnyEvent.pm `push_request_header`: `request_count++`,
    /// then `end_loop` at `max_requests`). An ending worker's place goes to a new one, as
    /// `wait_end_loop` forks away and PVE's daemon starts a fresh worker; the old one keeps
    /// its connections until they close.
    pub fn count_request(&self, worker: &Arc<ProxyWorker>) {
        let mut counts = worker.counts();
        counts.requests += 1;
        if counts.ending || counts.requests < self.limits.max_requests {
            return;
        }
        counts.ending = true;
        drop(counts);
        let mut workers = self.workers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(slot) = workers.iter_mut().find(|w| Arc::ptr_eq(w, worker)) {
            let mut spawned = self.spawned.lock().unwrap_or_else(|e| e.into_inner());
            *slot = ProxyWorker::new(*spawned);
            *spawned += 1;
        }
    }
}

/// pvedaemon: `--daemon-workers` workers behind `127.0.0.1:85`, each running one protected
/// handler at a time.
pub struct Pvedaemon {
    /// What pvedaemon's Perl costs per request, before the handler's own work.
    pub cost: Duration,
    /// pve-http-server AnyEvent.pm `proxy_request`: `http_request(... timeout => 30 ...)`,
    /// the longest pveproxy waits for pvedaemon's answer.
    pub proxy_timeout: Duration,
    workers: Semaphore,
}

impl Pvedaemon {
    pub fn new(workers: usize, cost: Duration, proxy_timeout: Duration) -> Arc<Self> {
        Arc::new(Pvedaemon {
            cost,
            proxy_timeout,
            workers: Semaphore::new(workers),
        })
    }

    /// A pvedaemon worker, if one is free before `deadline`.
    pub fn worker(&self, deadline: Instant) -> Option<Permit<'_>> {
        self.workers.acquire(Some(deadline))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// pveproxy's limits (pve-manager `PVE/Service/pveproxy.pm` `init`, `server_config`),
    /// which are pve-sim's defaults (`cli.rs`).
    fn pveproxy() -> Limits {
        Limits {
            keep_alive: 100,
            idle_timeout: Duration::from_secs(5),
            max_requests: 1000,
            max_conn: 500,
        }
    }

    #[test]
    fn the_soft_limit_is_anyevents() {
        let mut limits = pveproxy();
        assert_eq!(limits.soft_limit(), 480);
        limits.max_conn = 100;
        assert_eq!(limits.soft_limit(), 100);
    }

    #[test]
    fn connections_spread_and_near_max_conn_are_not_kept_alive() {
        let limits = Limits {
            max_conn: 2,
            ..pveproxy()
        };
        let proxy = Pveproxy::new(2, Duration::ZERO, limits);
        let first = proxy.accept();
        let second = proxy.accept();
        assert_ne!(first.worker.serial, second.worker.serial);
        assert_eq!(first.keep_alive, 100);
        // Each worker now holds one of two: the next connection reaches the soft limit.
        let third = proxy.accept();
        assert_eq!(third.keep_alive, 0);
        drop(third);
        drop(first);
        assert_eq!(proxy.accept().keep_alive, 100);
    }

    #[test]
    fn a_worker_at_max_requests_ends_and_a_new_one_takes_its_place() {
        let limits = Limits {
            max_requests: 2,
            ..pveproxy()
        };
        let proxy = Pveproxy::new(1, Duration::ZERO, limits);
        let conn = proxy.accept();
        proxy.count_request(&conn.worker);
        assert!(!conn.worker.ending());
        proxy.count_request(&conn.worker);
        assert!(conn.worker.ending());
        let next = proxy.accept();
        assert_eq!(next.worker.serial, 1);
        assert!(!next.worker.ending());
    }

    #[test]
    fn a_busy_pvedaemon_is_waited_for_until_the_deadline() {
        let daemon = Pvedaemon::new(1, Duration::ZERO, Duration::from_secs(30));
        let held = daemon.worker(Instant::now()).expect("a free worker");
        let started = Instant::now();
        assert!(
            daemon
                .worker(Instant::now() + Duration::from_millis(50))
                .is_none()
        );
        assert!(started.elapsed() >= Duration::from_millis(50));
        drop(held);
        assert!(daemon.worker(Instant::now()).is_some());
    }
}
