//! Where the `vm` module adapts to the cluster's PVE version (`crate::pve_version`): a new
//! VM's HA resource made by the create itself where PVE has `ha-managed` (9.0.12 and later),
//! and a create PVE refused for what its version cannot do told with the version it needs and
//! the alternative. Apart from `create` so that it keeps a one-line hook.

use std::borrow::Cow;

use super::shell::Runner;
use crate::pve::error::ApiError;
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

    /// A create PVE refused for what its version cannot do, told with the version needed and
    /// the alternative: an `import_from` of an `import` volume before PVE 8.3, which PVE
    /// refuses in its parameter check, before it writes anything. The version is read only
    /// then, so a create that PVE takes costs no request more.
    pub(super) fn explain_beyond_version(&self, error: anyhow::Error) -> anyhow::Error {
        let refused = error
            .chain()
            .filter_map(|cause| cause.downcast_ref::<ApiError>())
            .any(ApiError::is_import_volume_refused);
        if !refused {
            return error;
        }
        let Ok(caps) = pve_version::capabilities(&self.session.client) else {
            return error;
        };
        let refusals: Vec<String> = self
            .desired
            .disks
            .iter()
            .filter_map(|disk| {
                let source = disk.import_from.as_deref()?;
                pve_version::import_from_refusal(&caps, &disk.slot, source)
            })
            .collect();
        if refusals.is_empty() {
            error
        } else {
            error.context(refusals.join("; "))
        }
    }
}
