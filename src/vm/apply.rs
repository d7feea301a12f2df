//! The imperative shell of the `vm` module, its entry: build the desired VM from the
//! options, start the session, converge (see [`super::converge`]), and complete the result.

use serde_json::json;

use super::converge::converge;
use super::desired::desired;
use super::shell::Runner;
use crate::ansible::protocol::{Failure, Invocation, Outcome};
use crate::pve::retry;
use crate::runner::Session;

/// Runs the `vm` module.
pub fn run(inv: &Invocation) -> Result<Outcome, Failure> {
    let desired = desired(inv).map_err(Failure::msg)?;
    let mut runner = Runner {
        session: Session::start(inv)?,
        desired: &desired,
        changes: Default::default(),
        seed: retry::seed(),
        prefetched: Default::default(),
    };
    let result = converge(&mut runner, inv.ctx.check_mode).map_err(|mut failure| {
        if let Some(vmid) = desired.vmid {
            failure.data.entry("vmid").or_insert(json!(vmid));
        }
        failure
    });
    runner.session.finish(result, runner.changes.any())
}
