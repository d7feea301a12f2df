//! The shell of the `image` module: list the storage, carry out the plan (each task waited on
//! by its UPID), and report `changed`, `volid`, `size` and the tasks.

use std::time::Instant;

use serde_json::{Value, json};

use super::plan::{Step, plan};
use super::spec::{Desired, desired};
use crate::ansible::protocol::{Failure, Invocation, Outcome};
use crate::common::{self, TaskLog};
use crate::pve::client::{Client, Method, Params};
use crate::pve::encode::{node_path, segment};
use crate::pve::ops::{self, Dispatched, dispatch};
use crate::pve::tasks::TaskReport;
use crate::pve::wait::Policy;

/// `/nodes/{node}/storage/{storage}`, encoded.
fn storage_path(d: &Desired) -> String {
    format!("{}/storage/{}", node_path(&d.node), segment(&d.storage))
}

/// The file's entry in the storage's content listing, if it is there.
fn lookup(client: &Client, d: &Desired, deadline: Instant) -> Result<Option<Value>, Failure> {
    let path = format!("{}/content", storage_path(d));
    let params: Params = vec![("content".into(), d.content.clone())];
    let list = ops::read(client, &path, &params, deadline)
        .map_err(|e| Failure::msg(format!("listing {} on {}: {e}", d.storage, d.node)))?;
    Ok(list
        .as_array()
        .into_iter()
        .flatten()
        .find(|v| v["volid"].as_str() == Some(d.volid().as_str()))
        .cloned())
}

/// Runs the `image` module.
pub fn run(inv: &Invocation) -> Result<Outcome, Failure> {
    let started = Instant::now();
    let d = desired(inv).map_err(Failure::msg)?;
    let poll_interval = common::poll_interval(inv).map_err(Failure::msg)?;
    let (client, warnings) = common::connect(inv)?;
    let deadline = started + common::duration(inv, "timeout");
    let stop = inv.bool("stop_task_on_timeout").unwrap_or(false);
    let mut log = TaskLog {
        tasks: Vec::new(),
        warnings,
    };
    let before = lookup(&client, &d, deadline)?;
    let steps = plan(&d, before.is_some());
    let state = |e: bool| if e { "present" } else { "absent" };
    let header = format!("{} on {}", d.volid(), d.node);
    let mut o = Outcome::default();
    o.data.insert("volid".into(), json!(d.volid()));
    if inv.ctx.check_mode {
        // A checksum check on an existing file cannot be predicted without PVE reading it.
        o.changed =
            steps.contains(&Step::Delete) || (steps.contains(&Step::Download) && before.is_none());
        o.diff = Some(
            json!({"before": {"state": state(before.is_some())}, "after": {"state": state(d.present)},
                             "before_header": header, "after_header": header}),
        );
        o.msg = if o.changed {
            format!(
                "would {} {}",
                if d.present { "download" } else { "remove" },
                d.volid()
            )
        } else {
            format!("{} is {}", d.volid(), state(d.present))
        };
        return Ok(o);
    }
    let mut changed = false;
    let result = (|| -> Result<(), Failure> {
        for step in &steps {
            let policy = Policy::with_timeout(deadline.saturating_duration_since(Instant::now()))
                .with_cap(poll_interval);
            match step {
                Step::Delete => {
                    // The volume id holds '/' and ':': it travels as one encoded path segment.
                    let path = format!("{}/content/{}", storage_path(&d), segment(&d.volid()));
                    let what = format!("removing {}", d.volid());
                    match dispatch(
                        &client,
                        Method::Delete,
                        &path,
                        &Vec::new(),
                        deadline,
                        || None,
                    ) {
                        Ok(Dispatched::Task(upid)) => {
                            changed = true;
                            log.wait(&client, &upid, &policy, stop, &what)?;
                        }
                        Ok(Dispatched::Done) => changed = true,
                        Err(e) => return Err(Failure::msg(format!("{what}: {e}"))),
                    }
                }
                Step::Download => {
                    let url = d
                        .url
                        .clone()
                        .ok_or_else(|| Failure::msg("url is required to download the image"))?;
                    let mut params: Params = vec![
                        ("content".into(), d.content.clone()),
                        ("filename".into(), d.filename.clone()),
                        ("url".into(), url.clone()),
                        (
                            "verify-certificates".into(),
                            if d.verify_certificates { "1" } else { "0" }.into(),
                        ),
                    ];
                    if let Some((algo, sum)) = &d.checksum {
                        params.push(("checksum".into(), sum.clone()));
                        params.push(("checksum-algorithm".into(), algo.clone()));
                    }
                    let path = format!("{}/download-url", storage_path(&d));
                    let what = format!("downloading {url} to {}", d.volid());
                    let recover = || {
                        crate::pve::tasks::active_tasks(&client, &d.node, None, Some("download"))
                            .ok()?
                            .into_iter()
                            .find(|u| u.id.contains(&d.filename))
                    };
                    match dispatch(&client, Method::Post, &path, &params, deadline, recover) {
                        Ok(Dispatched::Task(upid)) => {
                            let r = log
                                .wait(&client, &upid, &policy, stop, &what)
                                .map_err(|f| Failure { changed, ..f })?;
                            // PVE verified an existing file against the checksum and kept it.
                            if !r.log.iter().any(|l| l.contains("got correct file already")) {
                                changed = true;
                            }
                        }
                        Ok(Dispatched::Done) => changed = true,
                        Err(e) => {
                            return Err(Failure {
                                changed,
                                ..Failure::msg(format!("{what}: {e}"))
                            });
                        }
                    }
                }
            }
        }
        Ok(())
    })();
    let tasks: Vec<Value> = log.tasks.iter().map(TaskReport::to_json).collect();
    let elapsed = (started.elapsed().as_secs_f64() * 1000.0).round() / 1000.0;
    if let Err(mut f) = result {
        f.changed = f.changed || changed;
        f.data.insert("volid".into(), json!(d.volid()));
        f.data.insert("tasks".into(), json!(tasks));
        f.data.insert("elapsed".into(), json!(elapsed));
        f.warnings.extend(log.warnings);
        return Err(f);
    }
    let after = if steps.is_empty() {
        before.clone()
    } else {
        lookup(&client, &d, deadline)?
    };
    o.changed = changed;
    o.diff = Some(
        json!({"before": {"state": state(before.is_some())}, "after": {"state": state(after.is_some())},
                         "before_header": header, "after_header": header}),
    );
    o.msg = match (changed, after.is_some()) {
        (true, true) => format!("downloaded {}", d.volid()),
        (true, false) => format!("removed {}", d.volid()),
        (false, true) => format!("{} is present", d.volid()),
        (false, false) => format!("{} is absent", d.volid()),
    };
    if let Some(a) = &after {
        o.data.insert("size".into(), a["size"].clone());
        o.data.insert("format".into(), a["format"].clone());
    }
    o.data.insert("tasks".into(), json!(tasks));
    o.data.insert("elapsed".into(), json!(elapsed));
    o.warnings = log.warnings;
    Ok(o)
}
