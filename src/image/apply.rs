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
fn storage_of(desired: &Desired) -> Storage {
    Node::new(&desired.node).storage(&desired.storage)
}

/// The file's entry in the storage's content listing, if it is there.
fn lookup(client: &Client, desired: &Desired, deadline: Instant) -> Result<Option<Value>, Failure> {
    let path = storage_of(desired).content();
    let params: Params = vec![("content".into(), desired.content.clone())];
    let list = ops::read(client, &path, &params, deadline).map_err(|e| {
        Failure::msg(format!(
            "listing {} on {}: {e}",
            desired.storage, desired.node
        ))
    })?;
    Ok(list
        .as_array()
        .into_iter()
        .flatten()
        .find(|v| v["volid"].as_str() == Some(desired.volid().as_str()))
        .cloned())
}

/// Runs the `image` module.
pub fn run(inv: &Invocation) -> Result<Outcome, Failure> {
    let desired = desired(inv).map_err(Failure::msg)?;
    let mut session = Session::start(inv)?;
    let mut changed = false;
    let result =
        converge(&mut session, &desired, inv.ctx.check_mode, &mut changed).map_err(|mut f| {
            f.data.insert("volid".into(), json!(desired.volid()));
            f
        });
    session.finish(result, changed)
}

/// Looks, plans, and (unless in check mode) carries out the plan; `changed` says whether
/// anything changed, also when a later step fails.
fn converge(
    session: &mut Session,
    desired: &Desired,
    check_mode: bool,
    changed: &mut bool,
) -> Result<Outcome, Failure> {
    let deadline = session.deadline;
    let before = lookup(&session.client, desired, deadline)?;
    let steps = plan(desired, before.is_some());
    let state = |e: bool| if e { "present" } else { "absent" };
    let header = format!("{} on {}", desired.volid(), desired.node);
    let mut o = Outcome::default();
    o.data.insert("volid".into(), json!(desired.volid()));
    if check_mode {
        // A checksum check on an existing file cannot be predicted without PVE reading it.
        o.changed =
            steps.contains(&Step::Delete) || (steps.contains(&Step::Download) && before.is_none());
        o.diff = Some(
            json!({"before": {"state": state(before.is_some())}, "after": {"state": state(desired.present)},
                             "before_header": header, "after_header": header}),
        );
        o.msg = if o.changed {
            format!(
                "would {} {}",
                if desired.present {
                    "download"
                } else {
                    "remove"
                },
                desired.volid()
            )
        } else {
            format!("{} is {}", desired.volid(), state(desired.present))
        };
        return Ok(o);
    }
    {
        for step in &steps {
            match step {
                Step::Delete => {
                    // The volume id holds '/' and ':': it travels as one encoded path segment.
                    let path = storage_of(desired).volume(&desired.volid());
                    let what = format!("removing {}", desired.volid());
                    match dispatch(
                        &session.client,
                        Method::Delete,
                        &path,
                        &Vec::new(),
                        deadline,
                        || None,
                    ) {
                        Ok(Dispatched::Task(upid)) => {
                            *changed = true;
                            session.wait(&upid, &what, false)?;
                        }
                        Ok(Dispatched::Done) => *changed = true,
                        Err(e) => return Err(Failure::msg(format!("{what}: {e}"))),
                    }
                }
                Step::Download => {
                    let url = desired
                        .url
                        .clone()
                        .ok_or_else(|| Failure::msg("url is required to download the image"))?;
                    let mut params: Params = vec![
                        ("content".into(), desired.content.clone()),
                        ("filename".into(), desired.filename.clone()),
                        ("url".into(), url.clone()),
                        (
                            "verify-certificates".into(),
                            if desired.verify_certificates {
                                "1"
                            } else {
                                "0"
                            }
                            .into(),
                        ),
                    ];
                    if let Some((algo, sum)) = &desired.checksum {
                        params.push(("checksum".into(), sum.clone()));
                        params.push(("checksum-algorithm".into(), algo.clone()));
                    }
                    let path = storage_of(desired).download_url();
                    let what = format!("downloading {url} to {}", desired.volid());
                    let client = &session.client;
                    let recover = || {
                        crate::pve::tasks::active_tasks(
                            client,
                            &desired.node,
                            None,
                            Some("download"),
                        )
                        .ok()?
                        .into_iter()
                        .find(|u| u.id.contains(&desired.filename))
                    };
                    match dispatch(client, Method::Post, &path, &params, deadline, recover) {
                        Ok(Dispatched::Task(upid)) => {
                            // The download's log has no progress lines the wait reads.
                            let r = session.wait(&upid, &what, false)?;
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
        lookup(&session.client, desired, deadline)?
    };
    o.changed = *changed;
    o.diff = Some(
        json!({"before": {"state": state(before.is_some())}, "after": {"state": state(after.is_some())},
                         "before_header": header, "after_header": header}),
    );
    o.msg = match (*changed, after.is_some()) {
        (true, true) => format!("downloaded {}", desired.volid()),
        (true, false) => format!("removed {}", desired.volid()),
        (false, true) => format!("{} is present", desired.volid()),
        (false, false) => format!("{} is absent", desired.volid()),
    };
    if let Some(a) = &after {
        o.data.insert("size".into(), a["size"].clone());
        o.data.insert("format".into(), a["format"].clone());
    }
    Ok(o)
}
