//! Worker tasks as PVE's `fork_worker` runs them: a UPID, a log whose last line is the exit
//! status, a `running` → `stopped` life, and `received interrupt` when stopped by DELETE (or
//! `unexpected status` when killed because it did not stop within 5 s).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::state::{Sim, Task, epoch};

/// Formats a UPID exactly as `PVE::UPID::encode` does.
pub fn encode_upid(
    node: &str,
    pid: u32,
    pstart: u64,
    starttime: u64,
    ttype: &str,
    id: &str,
    user: &str,
) -> String {
    format!("UPID:{node}:{pid:08X}:{pstart:08X}:{starttime:08X}:{ttype}:{id}:{user}:")
}

/// What a running worker can do: log, sleep (interruptibly) and notice a stop request.
pub struct TaskCtx {
    pub sim: Arc<Sim>,
    pub upid: String,
    pub cancel: Arc<AtomicBool>,
    pub killed: Arc<AtomicBool>,
    /// The worker ignores SIGTERM (a `deaf_task` fault), as one stuck in I/O.
    pub deaf: bool,
}

/// The error a stopped task dies with.
pub const INTERRUPT: &str = "received interrupt";

impl TaskCtx {
    pub fn log(&self, line: impl Into<String>) {
        let line = line.into();
        let mut st = self.sim.lock();
        if let Some(t) = st.tasks.iter_mut().find(|t| t.upid == self.upid) {
            t.log.extend(line.lines().map(str::to_string));
        }
    }

    /// A stop request the worker heeds, or a kill it cannot ignore.
    pub fn cancelled(&self) -> bool {
        self.killed() || (!self.deaf && self.cancel.load(Ordering::Relaxed))
    }

    /// The worker was killed: it must leave everything as it is (no cleanup).
    pub fn killed(&self) -> bool {
        self.killed.load(Ordering::Relaxed)
    }

    /// Sleeps `d` (already scaled), returning `Err(received interrupt)` if the task is stopped.
    pub fn sleep(&self, d: Duration) -> Result<(), String> {
        let end = Instant::now() + d;
        loop {
            if self.cancelled() {
                return Err(INTERRUPT.into());
            }
            let now = Instant::now();
            if now >= end {
                return Ok(());
            }
            std::thread::sleep((end - now).min(Duration::from_millis(20)));
        }
    }
}

/// How a worker ended: `Ok(n)` with `n` warnings, or an error message.
pub type Outcome = Result<u32, String>;

/// How long `PVE::QemuConfig->lock_config` waits for a VM's file lock.
pub const LOCK_CONFIG_TIMEOUT: Duration = Duration::from_secs(10);

/// qemu-server's lock-then-fork: RPCEnvironment `fork_worker` (a task of `ttype` on the VM,
/// its UPID returned at once) whose work runs under `PVE::QemuConfig->lock_config` (the VM's
/// file lock, waited for [`LOCK_CONFIG_TIMEOUT`], held by the task and released when the work
/// ends however it ends), as `resize_vm`, `vm_start`, `destroy_vm`, `template` and
/// `update_vm_api` do.
pub fn fork_locked<F>(
    sim: &Arc<Sim>,
    node: &str,
    ttype: &str,
    vmid: u32,
    user: &str,
    work: F,
) -> String
where
    F: FnOnce(&Arc<Sim>, &TaskCtx) -> Outcome + Send + 'static,
{
    let worker_sim = sim.clone();
    spawn(sim, node, ttype, &vmid.to_string(), user, move |ctx| {
        worker_sim.lock_config(vmid, &ctx.upid, LOCK_CONFIG_TIMEOUT, || {
            work(&worker_sim, ctx)
        })
    })
}

/// Starts a worker task on `node` and returns its UPID at once.
pub fn spawn<F>(sim: &Arc<Sim>, node: &str, ttype: &str, id: &str, user: &str, work: F) -> String
where
    F: FnOnce(&TaskCtx) -> Outcome + Send + 'static,
{
    let upid = {
        let mut st = sim.lock();
        let pid = 0x1000 + (sim.random() % 0x3F000) as u32;
        let pstart = 1_000_000 + sim.boot.elapsed().as_millis() as u64 / 10;
        let starttime = epoch() as u64;
        let upid = encode_upid(node, pid, pstart, starttime, ttype, id, user);
        let hide = sim
            .faults
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take_hide(ttype);
        let deaf = sim
            .faults
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take_deaf(ttype);
        let cancel = Arc::new(AtomicBool::new(false));
        let killed = Arc::new(AtomicBool::new(false));
        st.tasks.push(Task {
            upid: upid.clone(),
            node: node.to_string(),
            pid,
            pstart,
            starttime,
            ttype: ttype.to_string(),
            id: id.to_string(),
            user: user.to_string(),
            log: Vec::new(),
            exitstatus: None,
            start_epoch: epoch(),
            end_epoch: None,
            cancel: cancel.clone(),
            killed: killed.clone(),
            visible_at: Instant::now() + hide,
        });
        (upid, cancel, killed, deaf)
    };
    let (upid, cancel, killed, deaf) = (upid.0, upid.1, upid.2, upid.3);
    let ctx = TaskCtx {
        sim: sim.clone(),
        upid: upid.clone(),
        cancel,
        killed,
        deaf,
    };
    let ttype = ttype.to_string();
    std::thread::spawn(move || {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(&ctx)))
            .unwrap_or_else(|_| Err("internal error in pve-sim worker".into()));
        let forced = ctx
            .sim
            .faults
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take_task_outcome(&ttype);
        let result = match (result, forced) {
            (Ok(_), Some(crate::faults::TaskOutcome::Fail(msg, lines))) => {
                {
                    let mut st = ctx.sim.lock();
                    if let Some(t) = st.tasks.iter_mut().find(|t| t.upid == ctx.upid) {
                        t.log
                            .extend((1..=lines).map(|i| format!("filler line {i} of {lines}")));
                    }
                }
                ctx.log(msg.clone());
                Err(msg)
            }
            (Ok(n), Some(crate::faults::TaskOutcome::Warnings(w))) => {
                for i in 0..w {
                    ctx.log(format!("WARN: simulated warning {} of {w}", i + 1));
                }
                Ok(n + w)
            }
            (r, _) => r,
        };
        finish(&ctx, result);
    });
    upid
}

fn finish(ctx: &TaskCtx, result: Outcome) {
    let (last, exit) = match result {
        Ok(0) => ("TASK OK".to_string(), "OK".to_string()),
        Ok(n) => (format!("TASK WARNINGS: {n}"), format!("WARNINGS: {n}")),
        Err(e) => {
            let e = e.replace('\n', " ");
            let e = e.trim().to_string();
            (format!("TASK ERROR: {e}"), e)
        }
    };
    let mut st = ctx.sim.lock();
    if ctx.killed() {
        return;
    }
    if let Some(t) = st.tasks.iter_mut().find(|t| t.upid == ctx.upid) {
        t.log.push(last);
        t.exitstatus = Some(exit);
        t.end_epoch = Some(epoch());
        ctx.sim.log_task(t);
    }
    drop(st);
    ctx.sim.cv.notify_all();
}
