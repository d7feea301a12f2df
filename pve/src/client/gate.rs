//! The request gate: the runs of one controller together keep at most K requests in flight to
//! one PVE API endpoint (`api_host:api_port`), so pveproxy always has a worker for others.
//!
//! A fleet (one play, `forks: 50`) is fifty processes, each keeping one request in flight.
//! pveproxy serves with 3 workers (pve-manager `PVE/Service/pveproxy.pm`, `max_workers`), each
//! an event loop that owns the connections it accepted (pve-http-server
//! `PVE/APIServer/AnyEvent.pm`); with the fleet's requests queued on all three, an admin's web
//! UI waits behind them. The load relief ([`super::relief`]) paces one process from what its
//! own requests take; it cannot bound what fifty processes send together. The gate does.
//!
//! Slots are lock files, `slot-0` … `slot-{K-1}`, in a folder per endpoint under a directory
//! of the user's own ([`Concurrency::roots`]). A request holds one slot, an exclusive lock on
//! its own open file ([`std::fs::File::lock`], `flock` on Unix), from before it is sent until
//! its answer is read, and gives it back when its [`Pass`] is dropped, on every path. The
//! kernel releases a lock when its process ends, however it ends, so a killed run's slot is
//! never lost. Each request opens its slot anew, so the threads of one run (`vm_info`'s
//! parallel reads) count against K as separate processes do.
//!
//! A request first tries every slot without blocking, from one the run's jitter picks; when
//! none is free it blocks on one the jitter picks (the kernel wakes it when that one frees)
//! and tries the others every [`LOOK_AGAIN`], so a queue on one slot does not leave another
//! idle; the run's deadline or a signal ends the wait.
//!
//! Deadlock-free by construction: a request takes one slot, and nothing takes a second while
//! holding one. The client holds it around one exchange only; a re-login after a 401, a
//! retry, a task wait's next look and the relief's gaps are requests (or pauses) of their own,
//! made after the slot was given back.
//!
//! Guest agent calls (paths with `/agent/`) pass a gate of their own, `agent-slot-N` beside
//! the others ([`Gate::for_agent`]): while a guest boots, each of them waits in pvedaemon for
//! its guest-ping to time out, 3 s (qemu-server `PVE/QemuServer/Agent.pm`
//! `qga_check_running`), and a fleet waiting for its VMs' addresses would otherwise hold the
//! one slot for seconds at a time while its other requests, which pveproxy answers in
//! milliseconds, wait behind them. pvedaemon does the agent's waiting after pveproxy handed the
//! call on, so the web UI's poll does not wait behind them either way.
//!
//! Where no directory can be made or trusted (a read-only home, as in an execution environment
//! without one, a directory another user owns or may write), there is no gate: the run goes
//! on as before, and says why only when asked.

use std::ffi::OsString;
use std::fs::{DirBuilder, File, OpenOptions, TryLockError};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::Duration;

/// How often a request blocked on one slot tries the others.
const LOOK_AGAIN: Duration = Duration::from_millis(20);

/// The most slots a gate has: PVE's `MAX_WORKERS` allows 1 to 127 pveproxy workers (9.0).
pub const MOST_SLOTS: usize = 127;

/// How many requests the runs of this controller send to one API endpoint at once, and where
/// their slots may live.
#[derive(Clone, Debug, Default)]
pub struct Concurrency {
    /// The requests in flight at once; 0: no gate.
    pub slots: usize,
    /// Where the gates' folders may be made, by preference ([`Concurrency::roots`]).
    pub roots: Vec<Root>,
}

/// A directory under which gates live: an existing directory of the user's own (`anchor`),
/// and the folders below it that are made where missing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Root {
    /// The directory that must exist already (`$XDG_RUNTIME_DIR`, `$HOME`), checked as the
    /// folders below it are.
    pub anchor: PathBuf,
    /// The folders made below it (mode 0700) where missing.
    pub below: Vec<&'static str>,
}

impl Concurrency {
    /// The roots of this user's gates, `env` looking a variable up: the user's runtime
    /// directory (`$XDG_RUNTIME_DIR/sankofa-proxmox/gates`, a tmpfs of the user's own where
    /// systemd makes one), else `$HOME/.ansible/sankofa-proxmox/gates`, beside Ansible's own
    /// files. A relative or empty path is none.
    pub fn roots(env: impl Fn(&str) -> Option<OsString>) -> Vec<Root> {
        let dir = |key: &str| {
            env(key)
                .map(PathBuf::from)
                .filter(|path| path.is_absolute())
        };
        let mut roots = Vec::new();
        if let Some(anchor) = dir("XDG_RUNTIME_DIR") {
            roots.push(Root {
                anchor,
                below: vec!["sankofa-proxmox", "gates"],
            });
        }
        if let Some(anchor) = dir("HOME") {
            roots.push(Root {
                anchor,
                below: vec![".ansible", "sankofa-proxmox", "gates"],
            });
        }
        roots
    }
}

/// The folder of one endpoint's slots: the first 16 hex digits of the SHA-256 of
/// `host:port`, the host in lower case (DNS names are case-insensitive).
pub(super) fn folder(host: &str, port: u16) -> String {
    let endpoint = format!("{}:{port}", host.to_ascii_lowercase());
    let digest = ring::digest::digest(&ring::digest::SHA256, endpoint.as_bytes());
    digest.as_ref()[..8]
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// Whether a directory with this owner and mode may hold a gate for the user `me`: owned by
/// the user, and writable by no one else (another user who could write it could take or
/// swap the slots).
pub(super) fn trusted(owner: u32, mode: u32, me: u32) -> Result<(), String> {
    if owner != me {
        return Err(format!("owned by uid {owner}, not by this user (uid {me})"));
    }
    if mode & 0o022 != 0 {
        return Err(format!(
            "writable by its group or others (mode {:o})",
            mode & 0o7777
        ));
    }
    Ok(())
}

/// `dir` as it is, checked by [`trusted`].
fn check(dir: &Path, me: u32) -> Result<(), String> {
    let meta = std::fs::metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if !meta.is_dir() {
        return Err(format!("{} is not a directory", dir.display()));
    }
    trusted(meta.uid(), meta.mode(), me).map_err(|why| format!("{} is {why}", dir.display()))
}

/// The gate folder `name` under `root`: the anchor checked, the folders below it made
/// (mode 0700) where missing and checked.
fn made(root: &Root, name: &str, me: u32) -> Result<PathBuf, String> {
    check(&root.anchor, me)?;
    let mut dir = root.anchor.clone();
    for part in root.below.iter().copied().chain([name]) {
        dir = made_below(&dir, part, me)?;
    }
    Ok(dir)
}

/// `name` below `dir`, made (mode 0700) where missing and checked as it is.
fn made_below(dir: &Path, name: &str, me: u32) -> Result<PathBuf, String> {
    let sub = dir.join(name);
    match DirBuilder::new().mode(0o700).create(&sub) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot make {}: {e}", sub.display())),
    }
    check(&sub, me)?;
    Ok(sub)
}

/// The folder this controller's runs share for `host:port` (its gate's slots, the roster of
/// the VMs they make: [`super::roster`]): in the first of `roots` where it can be made and
/// trusted, `Err` saying why in none.
pub(super) fn endpoint_dir(roots: &[Root], host: &str, port: u16) -> Result<PathBuf, String> {
    let name = folder(host, port);
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    let mut why = Vec::new();
    for root in roots {
        match made(root, &name, me) {
            Ok(dir) => return Ok(dir),
            Err(e) => why.push(e),
        }
    }
    if why.is_empty() {
        why.push("neither XDG_RUNTIME_DIR nor HOME names a directory".into());
    }
    Err(why.join("; "))
}

/// `name` below `dir` (a folder [`endpoint_dir`] gave), made (mode 0700) where missing and
/// checked as it is.
pub(super) fn subfolder(dir: &Path, name: &str) -> Result<PathBuf, String> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    made_below(dir, name, unsafe { libc::geteuid() })
}

/// One request's slot, held until dropped (the file's lock goes with its last descriptor);
/// an unlocked pass where a slot could not be opened.
pub(super) struct Pass {
    _slot: Option<File>,
}

impl Pass {
    /// Whether this pass holds a slot.
    #[cfg(test)]
    fn holds(&self) -> bool {
        self._slot.is_some()
    }
}

/// One endpoint's gate, shared by the threads of a run.
#[derive(Debug)]
pub(super) struct Gate {
    dir: PathBuf,
    slots: usize,
    /// What the slot files are called: `slot` (`slot-0` …), `agent-slot` for the agent's.
    kind: &'static str,
    /// The jitter's state, from the run's seed: which slot a request tries first and which
    /// it blocks on.
    jitter: Mutex<u64>,
}

impl Gate {
    /// The gate of `host:port`, in the first of `concurrency`'s roots where its folder can be
    /// made and trusted ([`endpoint_dir`]); `Ok(None)` without one (0 slots), `Err` saying
    /// why none could be made.
    pub(super) fn open(
        concurrency: &Concurrency,
        host: &str,
        port: u16,
        seed: u64,
    ) -> Result<Option<Gate>, String> {
        if concurrency.slots == 0 {
            return Ok(None);
        }
        let dir = endpoint_dir(&concurrency.roots, host, port)?;
        Ok(Some(Gate {
            dir,
            slots: concurrency.slots.min(MOST_SLOTS),
            kind: "slot",
            jitter: Mutex::new(seed),
        }))
    }

    /// The gate of the guest agent's calls to the same endpoint: as many slots, its own
    /// files (`agent-slot-N`), so that a call waiting on a guest holds none of the others.
    pub(super) fn for_agent(&self) -> Gate {
        let seed = *self.jitter.lock().unwrap_or_else(|e| e.into_inner());
        Gate {
            dir: self.dir.clone(),
            slots: self.slots,
            kind: "agent-slot",
            jitter: Mutex::new(seed.rotate_left(17) ^ 0x9e37_79b9_7f4a_7c15),
        }
    }

    /// The directory holding the slots.
    #[cfg(test)]
    fn dir(&self) -> &Path {
        &self.dir
    }

    /// How many slots it has.
    pub(super) fn slots(&self) -> usize {
        self.slots
    }

    /// Takes a slot: at once where one is free, else once one frees. `give_up` is asked
    /// between looks (the run's deadline, a signal); its answer ends the wait. A slot that
    /// cannot be opened gives an unlocked pass: the gate never fails a request.
    pub(super) fn enter<E>(&self, give_up: &dyn Fn() -> Option<E>) -> Result<Pass, E> {
        let (first, blocked_on) = self.picks();
        match self.try_each(first) {
            Ok(Some(pass)) => return Ok(pass),
            Ok(None) => {}
            Err(_) => return Ok(Pass { _slot: None }),
        }
        let mut waiting = self.block_on(blocked_on);
        loop {
            match &waiting {
                Some(taken) => match taken.recv_timeout(LOOK_AGAIN) {
                    Ok(Ok(file)) => return Ok(Pass { _slot: Some(file) }),
                    Ok(Err(_)) | Err(RecvTimeoutError::Disconnected) => waiting = None,
                    Err(RecvTimeoutError::Timeout) => {}
                },
                None => std::thread::sleep(LOOK_AGAIN),
            }
            if let Some(stop) = give_up() {
                return Err(stop);
            }
            match self.try_each(first) {
                Ok(Some(pass)) => return Ok(pass),
                Ok(None) => {}
                Err(_) => return Ok(Pass { _slot: None }),
            }
        }
    }

    /// The slot tried first and the slot blocked on, from the jitter (the same step as the
    /// relief's).
    fn picks(&self) -> (usize, usize) {
        let mut jitter = self.jitter.lock().unwrap_or_else(|e| e.into_inner());
        *jitter = jitter
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let high = (*jitter >> 33) as usize;
        (high % self.slots, (high / self.slots) % self.slots)
    }

    fn path(&self, slot: usize) -> PathBuf {
        self.dir.join(format!("{}-{slot}", self.kind))
    }

    /// Every slot once, from `first`, without blocking: the first free one, locked.
    fn try_each(&self, first: usize) -> io::Result<Option<Pass>> {
        for slot in order(first, self.slots) {
            let file = open_slot(&self.path(slot))?;
            match file.try_lock() {
                Ok(()) => return Ok(Some(Pass { _slot: Some(file) })),
                Err(TryLockError::WouldBlock) => {}
                Err(TryLockError::Error(e)) => return Err(e),
            }
        }
        Ok(None)
    }

    /// A thread that blocks on `slot` and hands its locked file over; `None` where no thread
    /// could be started (the wait then looks every [`LOOK_AGAIN`]). Were the wait over before
    /// the lock came, the file is dropped unread (in the channel, or by a failed send), and
    /// the slot freed at once.
    fn block_on(&self, slot: usize) -> Option<Receiver<io::Result<File>>> {
        let (hand_over, taken) = mpsc::sync_channel(1);
        let path = self.path(slot);
        std::thread::Builder::new()
            .name("request-gate".into())
            .spawn(move || {
                let locked = open_slot(&path).and_then(|file| file.lock().map(|()| file));
                let _ = hand_over.send(locked);
            })
            .ok()
            .map(|_| taken)
    }
}

/// The `slots` slots, each once, from `first` on.
fn order(first: usize, slots: usize) -> impl Iterator<Item = usize> {
    (0..slots).map(move |step| (first + step) % slots)
}

/// A slot's file opened anew (a lock belongs to one opening of it), made where missing,
/// never through a symbolic link.
fn open_slot(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use std::os::unix::fs::PermissionsExt;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Instant;

    /// A fresh directory of this user's own, mode 0700.
    fn scratch(name: &str) -> PathBuf {
        static SERIAL: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "sankofa-gate-{name}-{}-{}",
            std::process::id(),
            SERIAL.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        DirBuilder::new().mode(0o700).create(&dir).unwrap();
        dir
    }

    fn concurrency(slots: usize, anchor: &Path) -> Concurrency {
        Concurrency {
            slots,
            roots: vec![Root {
                anchor: anchor.to_path_buf(),
                below: vec!["sankofa-proxmox", "gates"],
            }],
        }
    }

    fn never() -> Option<&'static str> {
        None
    }

    #[test]
    fn the_runtime_dir_comes_first_then_home_and_relative_paths_are_none() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |key: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == key)
                    .map(|(_, v)| OsString::from(v))
            }
        };
        let both = Concurrency::roots(env(&[
            ("XDG_RUNTIME_DIR", "/run/user/1000"),
            ("HOME", "/home/ops"),
        ]));
        assert_eq!(
            both,
            vec![
                Root {
                    anchor: "/run/user/1000".into(),
                    below: vec!["sankofa-proxmox", "gates"]
                },
                Root {
                    anchor: "/home/ops".into(),
                    below: vec![".ansible", "sankofa-proxmox", "gates"]
                },
            ]
        );
        let home_only = Concurrency::roots(env(&[("XDG_RUNTIME_DIR", ""), ("HOME", "/runner")]));
        assert_eq!(home_only.len(), 1);
        assert_eq!(home_only[0].anchor, PathBuf::from("/runner"));
        assert!(Concurrency::roots(env(&[("HOME", "relative/home")])).is_empty());
    }

    #[test]
    fn one_endpoint_one_folder_whatever_the_host_names_case() {
        assert_eq!(
            folder("PVE1.example.com", 8006),
            folder("pve1.example.com", 8006)
        );
        assert_ne!(
            folder("pve1.example.com", 8006),
            folder("pve1.example.com", 8007)
        );
        assert_ne!(
            folder("pve1.example.com", 8006),
            folder("pve2.example.com", 8006)
        );
        let name = folder("::1", 8006);
        assert_eq!(name.len(), 16);
        assert!(name.bytes().all(|b| b.is_ascii_hexdigit()));
    }

    #[test]
    fn a_directory_is_trusted_only_when_the_user_owns_it_and_no_one_else_may_write_it() {
        assert_eq!(trusted(1000, 0o40700, 1000), Ok(()));
        assert_eq!(trusted(1000, 0o40755, 1000), Ok(()));
        let other = trusted(0, 0o40700, 1000).unwrap_err();
        assert!(
            other.contains("uid 0") && other.contains("uid 1000"),
            "{other}"
        );
        let group = trusted(1000, 0o40770, 1000).unwrap_err();
        assert!(group.contains("770"), "{group}");
        assert!(trusted(1000, 0o41777, 1000).is_err());
    }

    #[test]
    fn slots_are_tried_each_once_from_the_first_picked() {
        assert_eq!(order(2, 4).collect::<Vec<_>>(), vec![2, 3, 0, 1]);
        assert_eq!(order(0, 1).collect::<Vec<_>>(), vec![0]);
        // Runs of different seeds start at, and block on, every slot.
        let dir = scratch("picks");
        let (mut firsts, mut blocked) = (BTreeSet::new(), BTreeSet::new());
        for seed in 0..64u64 {
            let gate = Gate::open(
                &concurrency(3, &dir),
                "pve",
                8006,
                seed.wrapping_mul(0x9e37_79b9_7f4a_7c15),
            )
            .unwrap()
            .unwrap();
            let (first, on) = gate.picks();
            assert!(first < 3 && on < 3);
            firsts.insert(first);
            blocked.insert(on);
        }
        assert_eq!(firsts.len(), 3);
        assert_eq!(blocked.len(), 3);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_folder_is_made_private_and_an_untrusted_one_is_refused() {
        let anchor = scratch("made");
        let gate = Gate::open(&concurrency(2, &anchor), "pve1", 8006, 1)
            .unwrap()
            .unwrap();
        assert!(gate.dir().starts_with(anchor.join("sankofa-proxmox/gates")));
        for dir in [
            anchor.join("sankofa-proxmox"),
            anchor.join("sankofa-proxmox/gates"),
            gate.dir().to_path_buf(),
        ] {
            let mode = std::fs::metadata(&dir).unwrap().mode() & 0o777;
            assert_eq!(mode, 0o700, "{}", dir.display());
        }
        // Another user could write it: no gate there, and the next root is used.
        std::fs::set_permissions(
            anchor.join("sankofa-proxmox/gates"),
            std::fs::Permissions::from_mode(0o777),
        )
        .unwrap();
        let refused = Gate::open(&concurrency(2, &anchor), "pve1", 8006, 1).unwrap_err();
        assert!(
            refused.contains("writable by its group or others"),
            "{refused}"
        );
        let next = scratch("next");
        let mut both = concurrency(2, &anchor);
        both.roots.extend(concurrency(2, &next).roots);
        let gate = Gate::open(&both, "pve1", 8006, 1).unwrap().unwrap();
        assert!(gate.dir().starts_with(&next));
        // A root that does not exist is not made: none at all.
        let missing = concurrency(2, &anchor.join("missing"));
        assert!(Gate::open(&missing, "pve1", 8006, 1).is_err());
        // No slots: no gate, and nothing asked of the disk.
        assert!(
            Gate::open(&concurrency(0, &anchor.join("missing")), "pve1", 8006, 1)
                .unwrap()
                .is_none()
        );
        let _ = std::fs::remove_dir_all(&anchor);
        let _ = std::fs::remove_dir_all(&next);
    }

    #[test]
    fn the_agents_calls_have_slots_of_their_own() {
        let anchor = scratch("agent");
        let gate = Gate::open(&concurrency(1, &anchor), "pve1", 8006, 3)
            .unwrap()
            .unwrap();
        let agent = gate.for_agent();
        let held = gate.enter(&never).unwrap();
        // The one general slot held: an agent call still passes, and holds its own.
        let call = agent.enter(&never).unwrap();
        assert!(held.holds() && call.holds());
        assert!(gate.dir().join("agent-slot-0").exists());
        let until = Instant::now() + Duration::from_millis(100);
        let second_call = agent.enter(&|| (Instant::now() >= until).then_some("deadline"));
        assert_eq!(
            second_call.err(),
            Some("deadline"),
            "the agent's gate has one slot too"
        );
        drop(call);
        let until = Instant::now() + Duration::from_millis(100);
        let other = gate.enter(&|| (Instant::now() >= until).then_some("deadline"));
        assert_eq!(
            other.err(),
            Some("deadline"),
            "an agent slot freed frees no general one"
        );
        drop(held);
        let _ = std::fs::remove_dir_all(&anchor);
    }

    #[test]
    fn at_most_k_passes_at_once_and_a_waiter_gets_the_slot_given_back() {
        let anchor = scratch("passes");
        let gate = Arc::new(
            Gate::open(&concurrency(2, &anchor), "pve1", 8006, 7)
                .unwrap()
                .unwrap(),
        );
        let first = gate.enter(&never).unwrap();
        let second = gate.enter(&never).unwrap();
        assert!(first.holds() && second.holds());
        // Both slots held (by this process's other requests as by other processes'): a
        // third waits until the deadline given.
        let until = Instant::now() + Duration::from_millis(150);
        let late = gate.enter(&|| (Instant::now() >= until).then_some("deadline"));
        assert_eq!(late.err(), Some("deadline"));
        // A waiter gets a slot as soon as one is given back, whichever it blocked on (it
        // keeps it: both slots stay held for the next round).
        let mut kept = Vec::new();
        for dropped in [first, second] {
            let waiter = {
                let gate = gate.clone();
                std::thread::spawn(move || {
                    let started = Instant::now();
                    let pass = gate.enter(&never).unwrap();
                    (pass, started.elapsed())
                })
            };
            std::thread::sleep(Duration::from_millis(100));
            drop(dropped);
            let (pass, waited) = waiter.join().unwrap();
            assert!(pass.holds());
            assert!(waited >= Duration::from_millis(90), "{waited:?}");
            assert!(waited < Duration::from_secs(2), "{waited:?}");
            kept.push(pass);
        }
        let until = Instant::now() + Duration::from_millis(50);
        let late = gate.enter(&|| (Instant::now() >= until).then_some("deadline"));
        assert_eq!(late.err(), Some("deadline"));
        let _ = std::fs::remove_dir_all(&anchor);
    }
}
