//! The shell of the `image` module: list the storage, carry out the plan (each task waited on
//! by its UPID), and report `changed`, `volid`, `size` and the tasks.

use std::time::Instant;

use serde_json::{Value, json};

use super::plan::{Step, plan};
use super::spec::{Desired, desired};
use crate::ansible::protocol::{Failure, Invocation, Outcome};
use crate::pve::client::{Client, Method, Params};
use crate::pve::ops::{self, Dispatched, dispatch};
use crate::pve::paths::{Node, Storage};
use crate::runner::Session;

/// `/nodes/{node}/storage/{storage}`.
fn storage_of(d: &Desired) -> Storage {
    Node::new(&d.node).storage(&d.storage)
}

/// The file's entry in the storage's content listing, if it is there.
fn lookup(client: &Client, d: &Desired, deadline: Instant) -> Result<Option<Value>, Failure> {
    let path = storage_of(d).content();
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
    let d = desired(inv).map_err(Failure::msg)?;
    let mut s = Session::start(inv)?;
    let mut changed = false;
    let result = converge(&mut s, &d, inv.ctx.check_mode, &mut changed).map_err(|mut f| {
        f.data.insert("volid".into(), json!(d.volid()));
        f
    });
    s.finish(result, changed)
}

/// Looks, plans, and (unless in check mode) carries out the plan; `changed` says whether
/// anything changed, also when a later step fails.
fn converge(
    s: &mut Session,
    d: &Desired,
    check_mode: bool,
    changed: &mut bool,
) -> Result<Outcome, Failure> {
    let deadline = s.deadline;
    let before = lookup(&s.client, d, deadline)?;
    let steps = plan(d, before.is_some());
    let state = |e: bool| if e { "present" } else { "absent" };
    let header = format!("{} on {}", d.volid(), d.node);
    let mut o = Outcome::default();
    o.data.insert("volid".into(), json!(d.volid()));
    if check_mode {
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
    {
        for step in &steps {
            match step {
                Step::Delete => {
                    // The volume id holds '/' and ':': it travels as one encoded path segment.
                    let path = storage_of(d).volume(&d.volid());
                    let what = format!("removing {}", d.volid());
                    match dispatch(
                        &s.client,
                        Method::Delete,
                        &path,
                        &Vec::new(),
                        deadline,
                        || None,
                    ) {
                        Ok(Dispatched::Task(upid)) => {
                            *changed = true;
                            s.wait(&upid, &what, false)?;
                        }
                        Ok(Dispatched::Done) => *changed = true,
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
                    let path = storage_of(d).download_url();
                    let what = format!("downloading {url} to {}", d.volid());
                    let client = &s.client;
                    let recover = || {
                        crate::pve::tasks::active_tasks(client, &d.node, None, Some("download"))
                            .ok()?
                            .into_iter()
                            .find(|u| u.id.contains(&d.filename))
                    };
                    match dispatch(client, Method::Post, &path, &params, deadline, recover) {
                        Ok(Dispatched::Task(upid)) => {
                            // The download's log has no progress lines the wait reads.
                            let r = s.wait(&upid, &what, false)?;
                            // PVE verified an existing file against the checksum and kept it.
                            if !r.log.iter().any(|l| l.contains("got correct file already")) {
                                *changed = true;
                            }
                        }
                        Ok(Dispatched::Done) => *changed = true,
                        Err(e) => return Err(Failure::msg(format!("{what}: {e}"))),
                    }
                }
            }
        }
    }
    let after = if steps.is_empty() {
        before.clone()
    } else {
        lookup(&s.client, d, deadline)?
    };
    o.changed = *changed;
    o.diff = Some(
        json!({"before": {"state": state(before.is_some())}, "after": {"state": state(after.is_some())},
                         "before_header": header, "after_header": header}),
    );
    o.msg = match (*changed, after.is_some()) {
        (true, true) => format!("downloaded {}", d.volid()),
        (true, false) => format!("removed {}", d.volid()),
        (false, true) => format!("{} is present", d.volid()),
        (false, false) => format!("{} is absent", d.volid()),
    };
    if let Some(a) = &after {
        o.data.insert("size".into(), a["size"].clone());
        o.data.insert("format".into(), a["format"].clone());
    }
    Ok(o)
}
