//! What the modules ask of the PVE version a cluster runs: `GET /version`, read once per run
//! (`pve::api::version`), and the refusals, before any write, of what that version cannot do,
//! each naming the version needed and what to do instead. The decisions are pure functions of
//! [`Capabilities`]; [`capabilities`] is the one read.

use anyhow::Context;

use crate::pve::api::version::{self, Capabilities, IMPORT_CONTENT};
use crate::pve::api::version::{IMPORT_DISK_IMAGES, IMPORT_FROM_IMPORT_VOLUMES, Since};
use crate::pve::client::Client;

/// The capabilities of the cluster's PVE version (one `GET /version` per run).
pub fn capabilities(client: &Client) -> anyhow::Result<Capabilities> {
    let read = version::read(client).context("reading the PVE version (GET /version)")?;
    Ok(read.capabilities())
}

fn needs(what: &str, since: &Since, caps: &Capabilities, instead: &str) -> String {
    format!(
        "{what} needs PVE {} or later ({}); this cluster runs PVE {}: {instead}",
        since.version, since.source, caps.version
    )
}

/// The `image` module's refusal of `content`/`filename` on this version, if any.
pub fn image_refusal(caps: &Capabilities, content: &str, filename: &str) -> Option<String> {
    if content != "import" {
        return None;
    }
    let iso_instead = "download it with content: iso and a .img filename, and give the VM \
                       import_from: the file's absolute path (/var/lib/vz/template/iso/NAME.img \
                       on storage local; PVE allows a path only to root@pam with a password)";
    if !caps.import_content {
        return Some(needs("content: import", &IMPORT_CONTENT, caps, iso_instead));
    }
    if !caps.import_disk_images && !filename.ends_with(".ova") {
        return Some(needs(
            &format!("content: import with filename {filename} (not .ova)"),
            &IMPORT_DISK_IMAGES,
            caps,
            iso_instead,
        ));
    }
    None
}

/// The `vm` module's refusal of `import_from` of `source` (for disk `slot`) on this version:
/// an `import` volume (`storage:import/file`) before qemu-server 8.2.7.
pub fn import_from_refusal(caps: &Capabilities, slot: &str, source: &str) -> Option<String> {
    let is_import_volume = source
        .split_once(':')
        .is_some_and(|(_, volume)| volume.starts_with("import/"));
    (is_import_volume && !caps.import_from_import_volumes).then(|| {
        needs(
            &format!("disks.{slot}.import_from {source} (an import volume)"),
            &IMPORT_FROM_IMPORT_VOLUMES,
            caps,
            "import from the file's absolute path (root@pam with a password only), or from \
             another VM's disk (an images volume)",
        )
    })
}

/// Whether a new VM's HA resource is made by the create itself (`ha-managed=1`, PVE 9.0.12
/// and later) rather than by `POST /cluster/ha/resources` after it.
pub fn ha_at_create(caps: &Capabilities) -> bool {
    caps.create_ha_managed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pve::api::version::Release;

    fn at(text: &str) -> Capabilities {
        Capabilities::of(Release::parse(text).unwrap())
    }

    #[test]
    fn import_content_is_refused_before_8_3_naming_the_alternative() {
        let e = image_refusal(&at("8.2.10"), "import", "noble.qcow2").unwrap();
        assert!(e.contains("needs PVE 8.3.0 or later"), "{e}");
        assert!(e.contains("runs PVE 8.2.10"), "{e}");
        assert!(e.contains("content: iso and a .img filename"), "{e}");
        let e = image_refusal(&at("8.3.7"), "import", "noble.qcow2").unwrap();
        assert!(e.contains("needs PVE 8.4.0"), "{e}");
        assert_eq!(image_refusal(&at("8.3.7"), "import", "appliance.ova"), None);
        assert_eq!(image_refusal(&at("8.4.0"), "import", "noble.qcow2"), None);
        assert_eq!(image_refusal(&at("8.0.9"), "iso", "noble.img"), None);
    }

    #[test]
    fn import_volumes_are_refused_as_sources_before_8_3() {
        let e = import_from_refusal(&at("8.2.10"), "scsi0", "local:import/noble.qcow2").unwrap();
        assert!(e.contains("disks.scsi0.import_from"), "{e}");
        assert!(e.contains("qemu-server 8.2.7"), "{e}");
        assert_eq!(
            import_from_refusal(&at("8.3.0"), "scsi0", "local:import/noble.qcow2"),
            None
        );
        assert_eq!(
            import_from_refusal(&at("8.0.9"), "scsi0", "/var/lib/vz/template/iso/a.img"),
            None
        );
        assert_eq!(
            import_from_refusal(&at("8.0.9"), "scsi0", "local-lvm:vm-9000-disk-0"),
            None
        );
    }

    #[test]
    fn ha_at_create_from_9_0_12() {
        assert!(!ha_at_create(&at("8.4.14")));
        assert!(!ha_at_create(&at("9.0.11")));
        assert!(ha_at_create(&at("9.0.12")));
    }
}
