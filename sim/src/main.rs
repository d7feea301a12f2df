//! `pve-sim`: a Proxmox VE API simulator for tests, benchmarks and demos.
//!
//! It serves `/api2/json` over HTTPS (or plain HTTP) on loopback with PVE's envelopes, error
//! codes, authentication, UPIDs, task logs and locks, and imports disks with the real
//! `qemu-img`. A second, plain-HTTP admin port injects faults and reports task timings.

mod access;
mod admin;
mod cli;
mod cluster;
mod faults;
mod guest;
mod ha;
mod http;
mod qemu;
mod schema;
mod state;
mod storage;
mod tasks;
mod tools;
mod versions;

use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use serde_json::{Value, json};

use crate::http::daemons::{Limits, Pvedaemon, Pveproxy};
use crate::state::{Options, Sim};

fn setup(o: &Options) -> Result<(), String> {
    for n in &o.nodes {
        for s in storage::volumes::all() {
            let d = storage::volumes::storage_dir(&o.data_dir, n, s.id);
            let subs: &[&str] = if s.kind == "dir" {
                &[
                    "import",
                    "template/iso",
                    "template/cache",
                    "snippets",
                    "images",
                ]
            } else {
                &[""]
            };
            for sub in subs {
                std::fs::create_dir_all(d.join(sub))
                    .map_err(|e| format!("{}: {e}", d.display()))?;
            }
        }
        for img in &o.seed_images {
            let name = img
                .file_name()
                .ok_or(format!("--seed-image: bad path {}", img.display()))?;
            let dst = storage::volumes::storage_dir(&o.data_dir, n, "local")
                .join("import")
                .join(name);
            if !dst.exists() {
                std::fs::hard_link(img, &dst)
                    .or_else(|_| std::fs::copy(img, &dst).map(|_| ()))
                    .map_err(|e| format!("--seed-image {}: {e}", img.display()))?;
            }
        }
    }
    Ok(())
}

fn run() -> Result<(), String> {
    let cli = cli::Cli::parse();
    let daemons = cli.daemon_options();
    let opts = cli.into_options()?;
    std::fs::create_dir_all(&opts.data_dir)
        .map_err(|e| format!("--data-dir {}: {e}", opts.data_dir.display()))?;
    setup(&opts)?;
    let tls = if opts.plain_http {
        None
    } else {
        Some(http::tls::generate(&opts.data_dir, &opts.nodes[0])?)
    };
    let fingerprint = tls
        .as_ref()
        .map(|t| t.fingerprint.clone())
        .unwrap_or_default();
    let listener =
        TcpListener::bind(&opts.listen).map_err(|e| format!("--listen {}: {e}", opts.listen))?;
    let admin = TcpListener::bind(&opts.admin_listen)
        .map_err(|e| format!("--admin-listen {}: {e}", opts.admin_listen))?;
    let api_addr = listener.local_addr().map_err(|e| e.to_string())?;
    let admin_addr = admin.local_addr().map_err(|e| e.to_string())?;
    let sim =
        Arc::new(Sim::new(opts.clone(), fingerprint.clone()).map_err(|e| format!("logs: {e}"))?);
    storage::storage_cfg::init(&sim);
    ha::rounds::spawn(&sim);
    if let Some(path) = &opts.scenario {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("--scenario {}: {e}", path.display()))?;
        let v: Value = serde_json::from_str(&text)
            .map_err(|e| format!("--scenario {}: {e}", path.display()))?;
        let mut f = sim.faults.lock().unwrap_or_else(|e| e.into_inner());
        for item in v
            .as_array()
            .ok_or("--scenario: expected a JSON array of faults")?
        {
            f.add(item).map_err(|e| format!("--scenario: {e}"))?;
        }
    }
    let scheme = if opts.plain_http { "http" } else { "https" };
    let info = json!({
        "api": format!("{scheme}://{api_addr}/api2/json"), "host": api_addr.ip().to_string(), "port": api_addr.port(),
        "admin": format!("http://{admin_addr}"), "fingerprint": fingerprint,
        "ca": if opts.plain_http { Value::Null } else { json!(opts.data_dir.join("pve-root-ca.pem")) },
        "data_dir": opts.data_dir, "nodes": opts.nodes,
    });
    std::fs::write(opts.data_dir.join("sim.json"), info.to_string()).map_err(|e| e.to_string())?;
    println!("{info}");
    if !opts.stats_interval.is_zero() {
        let stats_sim = sim.clone();
        std::thread::spawn(move || {
            loop {
                std::thread::sleep(stats_sim.opts.stats_interval);
                stats_sim.update_stats();
            }
        });
    }
    let admin_sim = sim.clone();
    std::thread::spawn(move || {
        http::server::serve(
            admin,
            None,
            Arc::new(admin::Admin { sim: admin_sim }),
            Pveproxy::new(4, Duration::ZERO, Limits::unlimited()),
        )
    });
    let pveproxy = Pveproxy::new(opts.workers, opts.request_cost, daemons.limits);
    let pvedaemon = Pvedaemon::new(
        daemons.daemon_workers,
        daemons.daemon_request_cost,
        daemons.proxy_timeout,
    );
    http::server::serve(
        listener,
        tls.map(|t| t.config),
        Arc::new(http::router::Api { sim, pvedaemon }),
        pveproxy,
    );
    Ok(())
}

fn main() {
    if let Err(e) = run() {
        eprintln!("pve-sim: {e}");
        std::process::exit(2);
    }
}
