//! The imperative shell of the `vm` module, its entry: build the desired VM from the
//! options, start the session, converge (see [`super::converge`]), and complete the result.

use serde_json::{Value, json};

use super::converge::converge;
use super::desired::desired;
use super::shell::Runner;
use crate::ansible::protocol::{Failure, Invocation, Outcome};
use crate::privileges::explain_refusal;
use crate::runner::{Session, failure};

/// Runs the `vm` module.
pub fn run(inv: &Invocation) -> Result<Outcome, Failure> {
    let desired = desired(inv).map_err(|e| failure(anyhow::Error::msg(e)))?;
    let mut runner = Runner {
        session: Session::start(inv).map_err(failure)?,
        desired: &desired,
        changes: Default::default(),
        prefetched: Default::default(),
        listed_ids: Default::default(),
        confirmed_names: Default::default(),
        notes: Default::default(),
        ha_carried: Vec::new(),
        acted_failures: 0,
        seed_changed_running: false,
    };
    let result = converge(&mut runner, inv.ctx.check_mode).map_err(explain_refusal);
    let notes = runner.notes.take();
    runner.session.log.warnings.extend(notes);
    let keys: Vec<(&str, Value)> = desired
        .vmid
        .map(|vmid| ("vmid", json!(vmid)))
        .into_iter()
        .collect();
    runner.session.finish(result, runner.changes.any(), &keys)
}
