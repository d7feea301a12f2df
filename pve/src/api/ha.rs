//! A VM's HA resource (pve-ha-manager API2/HA/Resources.pm): read, add, update. Each write
//! is answered at once (`null`, no task), under the HA domain lock (`lock_ha_domain`); a
//! write refused on that lock is sent again within the deadline, and a write whose answer
//! was lost is not: the caller reads the resource again and converges from what it finds.

use serde::Deserialize;

use crate::answers::lenient;
use crate::client::{Client, Method, Params};
use crate::error::ApiError;
use crate::ops;
use crate::paths;
use crate::retry::{Awaiting, Interrupted, Step, until};

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
pub fn resource(client: &Client, vmid: u32) -> Result<Option<HaResource>, ApiError> {
    match ops::read(client, &paths::ha_resource(vmid), &Vec::new()) {
        Ok(answer) => Ok(Some(lenient(answer))),
        Err(e) if e.status() == Some(500) && e.to_string().contains("no such resource") => Ok(None),
        Err(e) => Err(e),
    }
}

/// `POST /cluster/ha/resources`: makes the VM an HA resource with these options (`state`,
/// `group`).
pub fn add(client: &Client, vmid: u32, options: &Params) -> Result<(), ApiError> {
    let mut params: Params = vec![("sid".into(), format!("vm:{vmid}"))];
    params.extend(options.iter().cloned());
    write(client, Method::Post, paths::HA_RESOURCES, &params)
}

/// `PUT /cluster/ha/resources/vm:N`: sets these options of the VM's HA resource, only if
/// `resources.cfg` is still at `digest`.
pub fn update(
    client: &Client,
    vmid: u32,
    options: &Params,
    digest: Option<&str>,
) -> Result<(), ApiError> {
    let mut params = options.clone();
    if let Some(d) = digest {
        params.push(("digest".into(), d.to_string()));
    }
    write(client, Method::Put, &paths::ha_resource(vmid), &params)
}

/// One write, sent again only when PVE surely did not carry it out because of a lock.
fn write(client: &Client, method: Method, path: &str, params: &Params) -> Result<(), ApiError> {
    let outcome = until(client.budget(), Awaiting::Transient, |_| {
        match client.write(method, path, params) {
            Ok(_) => Ok(Step::Done(Ok(()))),
            Err(e) if e.is_lock_contention() => Ok(Step::Again(Err(e))),
            Err(e) => Err(e),
        }
    });
    match outcome {
        Ok(Ok(Ok(()))) => Ok(()),
        Ok(Ok(Err(locked)) | Err(locked)) => Err(locked),
        Err(Interrupted(signal)) => Err(ApiError::Interrupted {
            signal,
            what: format!("{} {path}", method.as_str()),
        }),
    }
}
