//! A synchronous client of the Proxmox VE API, free of Ansible: the module layer above it
//! (`sankofa_proxmox`) turns its errors into results and adds the hints that name options.
//!
//! * [`client`]: transport, authentication (ticket or token), bounded answers, and the
//!   [`client::Hints`] the caller gives for its error messages.
//! * [`error`]: API errors and their classification (safe to resend? lock contention?
//!   transient? refused by a worker before it acted?).
//! * [`budget`]: a run's time (deadline, jitter seed, clock), made once and handed down.
//! * [`ops`]: the retry semantics of a request: a dispatched task, a plain call;
//!   [`retry`]: how long each kind of wait pauses between tries, and the one retry and poll
//!   loop ([`retry::until`]).
//! * [`tasks`], [`wait`], [`upid`]: waiting on a task by its UPID; the wait policy is pure.
//!   [`task_progress`]: the live progress a wait tells an observer, when one is set.
//! * [`api`]: one function per PVE call the modules make (method, path, body, retry class,
//!   task); [`answers`]: the answers they read, as types; [`paths`]: the paths, by PVE's
//!   grouping.
//! * [`values`]: PVE's values as types (drives, NICs, boot order, sizes, tags, SSH keys …),
//!   parsed, printed and compared as PVE stores them.
//! * [`tls`], [`proxy`], [`encode`]: trust, proxies, path segments and form bodies.
//! * [`interrupt`]: signals end a wait cleanly (the one place that installs handlers).

// A failed wait carries its task report (UPID, log tail, progress); it ends the wait, so its
// size on the error path does not matter and boxing it would only add noise.
#![allow(clippy::result_large_err)]

pub mod answers;
pub mod api;
pub mod budget;
pub mod client;
pub mod encode;
pub mod error;
pub mod interrupt;
pub mod ops;
pub mod paths;
pub mod proxy;
pub mod retry;
pub mod task_progress;
pub mod tasks;
pub mod tls;
pub mod upid;
pub mod values;
pub mod wait;
