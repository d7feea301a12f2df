//! The PVE version a cluster runs (`GET /version`, pve-manager API2.pm) and what that version
//! can do ([`Capabilities`], pure): the module layer adapts to it and refuses, before any
//! write, what the version cannot do. Read once per run ([`crate::client::Client::get_once`]).
//!
//! `/version` names pve-manager's version; each capability starts at the first pve-manager
//! version whose `debian/control` requires the package version that brought it, so a cluster
//! that reports it surely has it.

use serde_json::Value;

use crate::client::Client;
use crate::error::ApiError;
use crate::paths;

/// A pve-manager version, `major.minor.patch` (PVE 7's `7.2-3` reads as 7.2.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Release {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl Release {
    /// A version as `/version` writes it: `9.0.4`, `8.4`, `7.2-3`; `None` for anything else.
    pub fn parse(text: &str) -> Option<Release> {
        let mut parts = text.trim().split(['.', '-']);
        let mut next = |required: bool| match parts.next() {
            Some(p) => p.parse::<u32>().ok(),
            None if required => None,
            None => Some(0),
        };
        let (major, minor, patch) = (next(true)?, next(true)?, next(false)?);
        Some(Release {
            major,
            minor,
            patch,
        })
    }

    const fn at(major: u32, minor: u32, patch: u32) -> Release {
        Release {
            major,
            minor,
            patch,
        }
    }
}

impl std::fmt::Display for Release {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// `GET /version`'s answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PveVersion {
    /// `version`: pve-manager's full version.
    pub version: Release,
    /// `release`: `major.minor`.
    pub release: String,
    /// `repoid`: pve-manager's commit.
    pub repoid: String,
}

impl PveVersion {
    /// The answer's `data`; an unreadable `version` is an error naming it.
    pub fn from_answer(data: &Value) -> Result<PveVersion, String> {
        let text = data["version"].as_str().unwrap_or_default();
        let version = Release::parse(text)
            .ok_or_else(|| format!("/version answered an unreadable version {data}"))?;
        Ok(PveVersion {
            version,
            release: data["release"].as_str().unwrap_or_default().to_string(),
            repoid: data["repoid"].as_str().unwrap_or_default().to_string(),
        })
    }

    /// What this version can do.
    pub fn capabilities(&self) -> Capabilities {
        Capabilities::of(self.version)
    }
}

/// `GET /version`, read once per run and shared by the run's threads.
pub fn read(client: &Client) -> Result<PveVersion, ApiError> {
    let data = client.get_once(paths::VERSION)?;
    PveVersion::from_answer(&data).map_err(|detail| ApiError::NotPve {
        source: None,
        detail,
    })
}

/// One capability: the version it starts at and where that comes from.
pub struct Since {
    pub version: Release,
    pub source: &'static str,
}

/// `import-from` takes `import` volumes.
pub const IMPORT_FROM_IMPORT_VOLUMES: Since = Since {
    version: Release::at(8, 3, 0),
    source: "qemu-server 8.2.7 (commit 0d41c7f5); pve-manager 8.3.0 requires it",
};
/// Directory storages hold `import` content; upload and download-url take `content=import`.
pub const IMPORT_CONTENT: Since = Since {
    version: Release::at(8, 3, 0),
    source: "libpve-storage-perl 8.2.8; pve-manager 8.3.0 requires it",
};
/// download-url and upload into `import` take `.qcow2`, `.raw`, `.vmdk` (before: `.ova`).
pub const IMPORT_DISK_IMAGES: Since = Since {
    version: Release::at(8, 4, 0),
    source: "libpve-storage-perl 8.3.6 (commit 76f695f); pve-manager 8.4.0 requires it",
};
/// The create call takes `ha-managed`.
pub const CREATE_HA_MANAGED: Since = Since {
    version: Release::at(9, 0, 12),
    source: "qemu-server 9.0.24 (commit 14823177); pve-manager 9.0.12 requires qemu-server 9.0.26",
};
/// HA groups become rules (pve-ha-manager 5.0.2).
pub const HA_RULES: Since = Since {
    version: Release::at(9, 0, 0),
    source: "pve-ha-manager 5.0.2; pve-manager 9.0.0 requires 5.0.3",
};
/// `VM.GuestAgent.*` replace `VM.Monitor`.
pub const GUEST_AGENT_PRIVILEGES: Since = Since {
    version: Release::at(9, 0, 0),
    source: "libpve-access-control 9.0.2; pve-manager 9.0.0 requires 9.0.3",
};

/// What a PVE version can do, of what the modules use (pure).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capabilities {
    pub version: Release,
    /// `import-from=<storage>:import/<file>`.
    pub import_from_import_volumes: bool,
    /// Storage content `import`.
    pub import_content: bool,
    /// `.qcow2`/`.raw`/`.vmdk` into `import` content.
    pub import_disk_images: bool,
    /// `ha-managed=1` at create.
    pub create_ha_managed: bool,
    /// HA rules instead of groups.
    pub ha_rules: bool,
    /// `VM.GuestAgent.*` privileges (no `VM.Monitor`).
    pub guest_agent_privileges: bool,
}

impl Capabilities {
    /// The capabilities of pve-manager `version`.
    pub fn of(version: Release) -> Capabilities {
        let has = |since: &Since| version >= since.version;
        Capabilities {
            version,
            import_from_import_volumes: has(&IMPORT_FROM_IMPORT_VOLUMES),
            import_content: has(&IMPORT_CONTENT),
            import_disk_images: has(&IMPORT_DISK_IMAGES),
            create_ha_managed: has(&CREATE_HA_MANAGED),
            ha_rules: has(&HA_RULES),
            guest_agent_privileges: has(&GUEST_AGENT_PRIVILEGES),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn versions_as_pve_writes_them() {
        assert_eq!(Release::parse("9.0.4"), Some(Release::at(9, 0, 4)));
        assert_eq!(Release::parse("8.4"), Some(Release::at(8, 4, 0)));
        assert_eq!(Release::parse("7.2-3"), Some(Release::at(7, 2, 3)));
        assert_eq!(Release::parse("nine"), None);
        assert_eq!(Release::parse("9"), None);
        let answer = json!({"version": "8.4.14", "release": "8.4", "repoid": "b502d23c55afcba1"});
        let v = PveVersion::from_answer(&answer).unwrap();
        assert_eq!(v.version.to_string(), "8.4.14");
        assert_eq!(v.release, "8.4");
        assert!(PveVersion::from_answer(&json!({"release": "8.4"})).is_err());
    }

    #[test]
    fn each_capability_on_both_sides_of_its_version() {
        let at = |text: &str| Capabilities::of(Release::parse(text).unwrap());
        assert!(!at("8.2.10").import_content && at("8.3.0").import_content);
        assert!(!at("8.2.10").import_from_import_volumes && at("8.3.0").import_from_import_volumes);
        assert!(!at("8.3.7").import_disk_images && at("8.4.0").import_disk_images);
        assert!(!at("9.0.11").create_ha_managed && at("9.0.12").create_ha_managed);
        assert!(!at("8.4.14").ha_rules && at("9.0.0").ha_rules);
        assert!(!at("8.4.14").guest_agent_privileges && at("9.0.0").guest_agent_privileges);
    }
}
