//! The shell of the `image` module: list the storage, carry out the plan (each task waited on
//! by its UPID), and report `changed`, `volid`, `size` and the tasks.

use serde_json::json;

use super::plan::{Step, plan};
use super::spec::{Desired, desired};
use anyhow::Context;

use crate::ansible::protocol::{Failure, Invocation, Outcome};
use crate::privileges::{explain_refusal, image_needs, preflight};
use crate::pve::answers::Volume;
use crate::pve::api::Dispatched;
use crate::pve::api::storage::{self, Download};
use crate::pve::client::Client;
use crate::runner::{Session, failure};

/// The file's entry in the storage's content listing, if it is there.
fn lookup(client: &Client, desired: &Desired) -> anyhow::Result<Option<Volume>> {
    let volumes = storage::content(client, &desired.node, &desired.storage, &desired.content)
        .with_context(|| format!("listing {} on {}", desired.storage, desired.node))?;
    let volid = desired.volid();
    Ok(volumes.into_iter().find(|v| v.volid == volid))
}

/// Runs the `image` module.
pub fn run(inv: &Invocation) -> Result<Outcome, Failure> {
    let desired = desired(inv).map_err(|e| failure(anyhow::Error::msg(e)))?;
    let mut session = Session::start(inv).map_err(failure)?;
    let mut changed = false;
    let result =
        converge(&mut session, &desired, inv.ctx.check_mode, &mut changed).map_err(explain_refusal);
    session.finish(result, changed, &[("volid", json!(desired.volid()))])
}

/// Looks, plans, and (unless in check mode) carries out the plan; `changed` says whether
/// anything changed, also when a later step fails.
fn converge(
    session: &mut Session,
    desired: &Desired,
    check_mode: bool,
    changed: &mut bool,
) -> anyhow::Result<Outcome> {
    let before = lookup(&session.client, desired)?;
    let steps = plan(desired, before.is_some());
    if steps.contains(&Step::Download) {
        let caps = crate::pve_version::capabilities(&session.client)?;
        if let Some(refusal) =
            crate::pve_version::image_refusal(&caps, &desired.content, &desired.filename)
        {
            anyhow::bail!("{refusal}");
        }
    }
    if !steps.is_empty() {
        preflight(
            &session.client,
            &image_needs(&desired.storage, &desired.node, &steps),
        )?;
    }
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
                    let what = format!("removing {}", desired.volid());
                    let volid = desired.volid();
                    match storage::delete_volume(
                        &session.client,
                        &desired.node,
                        &desired.storage,
                        &volid,
                    ) {
                        Ok(Dispatched::Task(task)) => {
                            *changed = true;
                            session.wait(&task, &what)?;
                        }
                        Ok(Dispatched::Done) => *changed = true,
                        Err(e) => return Err(anyhow::Error::new(e).context(what)),
                    }
                }
                Step::Download => {
                    let url = desired
                        .url
                        .clone()
                        .context("url is required to download the image")?;
                    let download = Download {
                        url: &url,
                        content: &desired.content,
                        filename: &desired.filename,
                        verify_certificates: desired.verify_certificates,
                        checksum: desired
                            .checksum
                            .as_ref()
                            .map(|(algorithm, sum)| (algorithm.as_str(), sum.as_str())),
                    };
                    let what = format!("downloading {url} to {}", desired.volid());
                    match storage::download_url(
                        &session.client,
                        &desired.node,
                        &desired.storage,
                        &download,
                    ) {
                        Ok(Dispatched::Task(task)) => {
                            let report = session.wait(&task, &what)?;
                            // PVE verified an existing file against the checksum and kept it.
                            if !storage::download_kept_existing(&report.log) {
                                *changed = true;
                            }
                        }
                        Ok(Dispatched::Done) => *changed = true,
                        Err(e) => return Err(anyhow::Error::new(e).context(what)),
                    }
                }
            }
        }
    }
    let after = if steps.is_empty() {
        before.clone()
    } else {
        lookup(&session.client, desired)?
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
        o.data.insert("size".into(), a.size.clone());
        o.data.insert("format".into(), a.format.clone());
    }
    Ok(o)
}
