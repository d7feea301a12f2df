//! Where the `vm` module adapts to the cluster's PVE version (`crate::pve_version`): a new
//! VM's HA resource made by the create itself where PVE has `ha-managed` (9.0.12 and later),
//! and, before any write, the refusal of what the version cannot do. Apart from `create` and
//! `shell` so that both keep a one-line hook.

use std::borrow::Cow;

use anyhow::anyhow;

use super::plan::{Plan, Step};
use super::shell::Runner;
use crate::pve_version;

impl Runner<'_> {
    /// The create's config, with `ha-managed=1` where PVE takes it and the `ha` option asks for
    /// a resource the create can make (state `started` or `stopped`, or the VM's power state;
    /// no `group`): PVE then adds it as `ha-manager add` would, in the create's task. Elsewhere
    /// the config as planned, and `converge_ha` adds the resource after the create.
    pub(super) fn config_with_ha<'c>(
        &self,
        config: &'c [(String, String)],
    ) -> anyhow::Result<Cow<'c, [(String, String)]>> {
        let Some(wanted) = &self.desired.ha else {
            return Ok(Cow::Borrowed(config));
        };
        let plain_state = matches!(wanted.state.as_deref(), None | Some("started" | "stopped"));
        if !plain_state || wanted.group.is_some() {
            return Ok(Cow::Borrowed(config));
        }
        if !pve_version::ha_at_create(&pve_version::capabilities(&self.session.client)?) {
            return Ok(Cow::Borrowed(config));
        }
        let mut with = config.to_vec();
        with.push(("ha-managed".into(), "1".into()));
        Ok(Cow::Owned(with))
    }

    /// Before the first write: what the plan asks that the cluster's PVE version cannot do
    /// (an `import_from` of an `import` volume before PVE 8.3), naming the version needed and
    /// the alternative. Reads the version only when a create imports from such a volume.
    pub(super) fn refuse_beyond_version(&self, plan: &Plan) -> anyhow::Result<()> {
        if !plan.steps.iter().any(|s| matches!(s, Step::Create { .. })) {
            return Ok(());
        }
        let imports: Vec<_> = self
            .desired
            .disks
            .iter()
            .filter_map(|d| d.import_from.as_deref().map(|src| (d.slot.as_str(), src)))
            .filter(|(_, src)| src.contains(":import/"))
            .collect();
        if imports.is_empty() {
            return Ok(());
        }
        let caps = pve_version::capabilities(&self.session.client)?;
        let refusals: Vec<String> = imports
            .iter()
            .filter_map(|(slot, src)| pve_version::import_from_refusal(&caps, slot, src))
            .collect();
        if refusals.is_empty() {
            Ok(())
        } else {
            Err(anyhow!("{}", refusals.join("; ")))
        }
    }
}
