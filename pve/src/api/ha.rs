//! A VM's HA resource (pve-ha-manager API2/HA/Resources.pm): read, add, update. Each write
//! is answered at once (`null`, no task), under the HA domain lock (`lock_ha_domain`); a
//! write refused on that lock is sent again within the deadline, and a write whose answer
//! was lost is not: the caller reads the resource again and converges from what it finds.

use serde::Deserialize;

use crate::answers::{Vmid, lenient, optional_number};
use crate::client::{Client, Method, Params};
use crate::error::ApiError;
use crate::ops;
use crate::paths;

/// A VM's HA resource as `GET /cluster/ha/resources/vm:N` answers it.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
pub struct HaResource {
    /// The requested state (`started`, `stopped`, `disabled`, `ignored`; PVE reads unset and
    /// `enabled` as `started`).
    #[serde(default)]
    pub state: Option<String>,
    /// The HA group (PVE 8; PVE 9 migrated groups to rules).
    #[serde(default)]
    pub group: Option<String>,
    /// The digest of `resources.cfg`, for an update that must not overwrite another's.
    #[serde(default)]
    pub digest: Option<String>,
    /// Whether the CRM moves the resource back to a node of higher priority (PVE 9; 1 when
    /// not set).
    #[serde(default, deserialize_with = "optional_number")]
    pub failback: Option<u64>,
    /// How often the LRM tries to restart the resource on its node (1 when not set).
    #[serde(default, deserialize_with = "optional_number")]
    pub max_restart: Option<u64>,
    /// How often the CRM tries to relocate it after failed starts (1 when not set).
    #[serde(default, deserialize_with = "optional_number")]
    pub max_relocate: Option<u64>,
}

impl HaResource {
    /// The requested state as the CRM reads it (Config.pm read_and_check_resources_config).
    pub fn requested_state(&self) -> &str {
        match self.state.as_deref() {
            None | Some("enabled") => "started",
            Some(state) => state,
        }
    }
}

/// `GET /cluster/ha/resources/vm:N`: the VM's HA resource, `None` when it is not one (a
/// read; PVE answers `no such resource 'vm:N'`).
pub fn resource(client: &Client, vmid: Vmid) -> Result<Option<HaResource>, ApiError> {
    match ops::read(client, &paths::ha_resource(vmid), &Vec::new()) {
        Ok(answer) => Ok(Some(lenient(answer))),
        Err(e) if e.is_no_such_ha_resource() => Ok(None),
        Err(e) => Err(e),
    }
}

/// The options of a VM's HA resource a write sets (pve-ha-manager Resources/PVEVM.pm,
/// options); one not given is left as it is.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HaOptions {
    /// The requested state (`started`, `stopped`, `disabled`, `ignored`).
    pub state: Option<String>,
    /// The HA group (PVE 8; PVE 9 refuses it, see
    /// [`crate::error::ApiError::is_ha_groups_migrated`]).
    pub group: Option<String>,
    /// `failback` (`0`/`1`; PVE 9, pve-ha-manager 5.0).
    pub failback: Option<String>,
    /// `max_restart`.
    pub max_restart: Option<String>,
    /// `max_relocate`.
    pub max_relocate: Option<String>,
}

impl HaOptions {
    /// Whether no option is to be set.
    pub fn is_empty(&self) -> bool {
        self.given().is_empty()
    }

    /// The options given, as the API names them, in the order they are sent.
    pub fn given(&self) -> Vec<(&'static str, &str)> {
        [
            ("state", &self.state),
            ("group", &self.group),
            ("failback", &self.failback),
            ("max_restart", &self.max_restart),
            ("max_relocate", &self.max_relocate),
        ]
        .into_iter()
        .filter_map(|(key, value)| Some((key, value.as_deref()?)))
        .collect()
    }

    fn params(&self) -> Params {
        self.given()
            .into_iter()
            .map(|(key, value)| (key.to_string(), value.to_string()))
            .collect()
    }
}

/// `POST /cluster/ha/resources`: makes the VM an HA resource with these options.
pub fn add(client: &Client, vmid: Vmid, options: &HaOptions) -> Result<(), ApiError> {
    let mut params: Params = vec![("sid".into(), format!("vm:{vmid}"))];
    params.extend(options.params());
    ops::write_unless_locked(client, Method::Post, paths::HA_RESOURCES, &params)
}

/// `PUT /cluster/ha/resources/vm:N`: sets these options of the VM's HA resource, only if
/// `resources.cfg` is still at `digest`.
pub fn update(
    client: &Client,
    vmid: Vmid,
    options: &HaOptions,
    digest: Option<&str>,
) -> Result<(), ApiError> {
    let mut params = options.params();
    if let Some(d) = digest {
        params.push(("digest".into(), d.to_string()));
    }
    ops::write_unless_locked(client, Method::Put, &paths::ha_resource(vmid), &params)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_options_given_are_the_body_keys() {
        let both = HaOptions {
            state: Some("started".into()),
            group: Some("fast".into()),
            ..Default::default()
        };
        assert_eq!(both.given(), [("state", "started"), ("group", "fast")]);
        assert_eq!(
            both.params(),
            vec![
                ("state".to_string(), "started".to_string()),
                ("group".to_string(), "fast".to_string())
            ]
        );
        let group = HaOptions {
            group: Some("fast".into()),
            ..Default::default()
        };
        assert_eq!(group.given(), [("group", "fast")]);
        assert!(!group.is_empty() && HaOptions::default().is_empty());
        assert!(HaOptions::default().params().is_empty());
    }
}
