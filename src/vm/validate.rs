//! Checks of the `vm` module's values that end up inside PVE property strings, so that a
//! `,`, `=` or newline in an option cannot smuggle extra keys into a drive or NIC
//! definition: drive slots, plain property values, import sources, and disk sizes; and the
//! cloud-init DNS servers, as PVE's address format takes them.

use crate::ansible::text::quote;
use crate::ids::storage_id;
use crate::pve::values::{Size, SizeError, drive};

/// True for drive keys PVE accepts (`ide0`–`ide3`, `sata0`–`sata5`, `scsi0`–`scsi30`,
/// `virtio0`–`virtio15`, `efidisk0`, `tpmstate0`).
pub fn is_drive_slot(slot: &str) -> bool {
    crate::pve::values::drive::is_drive_key(slot)
}

/// Refuses a drive option that `slot`'s bus does not have (`ssd` on `virtio`, `iothread` on
/// `ide` or `sata`), as PVE refuses it with a 400 on the slot (Drive.pm's per-bus formats),
/// naming the option and the buses that take it.
pub fn drive_option(option: &str, slot: &str, key: &str) -> Result<(), String> {
    if drive::slot_takes(slot, key) {
        return Ok(());
    }
    let bus = slot.trim_end_matches(|c: char| c.is_ascii_digit());
    let buses: Vec<&str> = ["scsi", "virtio", "sata", "ide"]
        .into_iter()
        .filter(|bus| drive::slot_takes(&format!("{bus}0"), key))
        .collect();
    Err(format!(
        "{option}: PVE refuses {key} on a {bus} drive ({slot}); it is an option of {} drives only (give the disk such a slot, or leave {key} out)",
        buses.join(", ")
    ))
}

/// Refuses a slot for a CD-ROM (the cloud-init drive, `media=cdrom`) that cannot hold one:
/// PVE would store a VirtIO CD-ROM that `parse_drive` then reads as no drive at all.
pub fn cdrom_slot(option: &str, slot: &str) -> Result<(), String> {
    if drive::slot_takes_cdrom(slot) {
        return Ok(());
    }
    Err(format!(
        "{option} must be an ide, sata or scsi slot such as ide2 (the cloud-init drive is a CD-ROM, which a {slot} slot cannot hold), got {}",
        quote(slot)
    ))
}

/// A DNS server for cloud-init as qemu-server's `nameserver` (`address-list`) takes it:
/// pve-common's `pve_verify_address`, an IP address or a DNS name (`dns-name`), so that a
/// host name PVE stores is not refused and a value PVE answers with a 400 is refused first.
pub fn nameserver(option: &str, value: &str) -> Result<String, String> {
    if value.parse::<std::net::IpAddr>().is_ok() || crate::ids::dns_name(option, value).is_ok() {
        return Ok(value.to_string());
    }
    Err(format!(
        "{option} must be an IP address or a host name (PVE's address format), got {}",
        quote(value)
    ))
}

/// Refuses characters that would break out of a property string.
pub fn plain(option: &str, value: &str) -> Result<String, String> {
    if value.is_empty() {
        return Err(format!("{option} must not be empty"));
    }
    if let Some(c) = value
        .chars()
        .find(|c| matches!(c, ',' | '=' | ';' | '\n' | '\r' | '\0') || c.is_whitespace())
    {
        return Err(format!(
            "{option} must not contain {c:?} (got {value}): it would change the meaning of PVE's property string",
            value = quote(value)
        ));
    }
    Ok(value.to_string())
}

/// `local:import/noble.qcow2`, `local-lvm:vm-9000-disk-0`, or an absolute path.
pub fn import_source(option: &str, value: &str) -> Result<String, String> {
    let value = plain(option, value)?;
    if value.starts_with('/') {
        if value.contains("/../") || value.ends_with("/..") {
            return Err(format!(
                "{option} must not contain '..', got {value}",
                value = quote(&value)
            ));
        }
        return Ok(value);
    }
    match value.split_once(':') {
        Some((sid, path))
            if storage_id(option, sid).is_ok() && !path.is_empty() && !path.contains("..") =>
        {
            Ok(value)
        }
        _ => Err(format!(
            "{option} must be a volume ID such as local:import/noble.qcow2 (or an absolute path), got {value}",
            value = quote(&value)
        )),
    }
}

/// The smallest disk size taken: PVE allocates new disks in GiB with decimals, and below a
/// MiB a value rounds to nothing.
pub const MIN_DISK_SIZE: u64 = 1 << 20;
/// The largest: 1024 TiB, beyond any storage PVE manages (and far from overflowing).
pub const MAX_DISK_SIZE: u64 = 1 << 50;

/// Parses `20G`, `512M`, `1T`, `10240K`, `1.5G` (a bare number means GiB, and the unit may
/// be lower case), then reads it with PVE's size grammar ([`Size::parse_exact`]): whole KiB,
/// from 1 MiB to 1024 TiB.
pub fn parse_size(option: &str, value: &str) -> Result<u64, String> {
    let t = value.trim();
    let spelled = match t.chars().last() {
        Some(c @ ('k' | 'm' | 'g' | 't')) => {
            format!("{}{}", &t[..t.len() - 1], c.to_ascii_uppercase())
        }
        Some('K' | 'M' | 'G' | 'T') => t.to_string(),
        _ => format!("{t}G"),
    };
    let bytes = match Size::parse_exact(&spelled) {
        Ok(size) => size.bytes(),
        Err(SizeError::Grammar) => {
            return Err(format!(
                "{option} must be a size such as 20G, 512M or 1.5T (a number, then K, M, G or T), got {}",
                quote(value)
            ));
        }
        Err(SizeError::TooLarge) => {
            return Err(format!(
                "{option} must be at most 1024T, got {}",
                quote(value)
            ));
        }
        Err(SizeError::Fraction) => {
            return Err(format!(
                "{option} must be a whole number of KiB, got {}",
                quote(value)
            ));
        }
    };
    if bytes > MAX_DISK_SIZE {
        return Err(format!(
            "{option} must be at most 1024T, got {}",
            quote(value)
        ));
    }
    if bytes % 1024 != 0 {
        return Err(format!(
            "{option} must be a whole number of KiB, got {}",
            quote(value)
        ));
    }
    if bytes < MIN_DISK_SIZE {
        return Err(format!(
            "{option} must be at least 1M, got {}",
            quote(value)
        ));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drive_slots() {
        for ok in ["scsi0", "scsi30", "virtio15", "sata5", "ide3", "efidisk0"] {
            assert!(is_drive_slot(ok), "{ok}");
        }
        for bad in [
            "scsi31",
            "scsi",
            "scsi01",
            "virtio16",
            "nvme0",
            "scsi0,x=1",
            "",
        ] {
            assert!(!is_drive_slot(bad), "{bad}");
        }
    }

    #[test]
    fn options_and_slots_by_bus() {
        let e = drive_option("disks[1].ssd", "virtio0", "ssd").unwrap_err();
        assert!(
            e.starts_with("disks[1].ssd: PVE refuses ssd on a virtio drive (virtio0)")
                && e.contains("scsi, sata, ide"),
            "{e}"
        );
        let e = drive_option("disks[0].iothread", "sata0", "iothread").unwrap_err();
        assert!(e.contains("scsi, virtio drives only"), "{e}");
        assert!(drive_option("disks[0].ssd", "scsi0", "ssd").is_ok());
        assert!(drive_option("disks[0].discard", "virtio3", "discard").is_ok());
        assert!(cdrom_slot("cloudinit_slot", "ide2").is_ok());
        for slot in ["virtio1", "efidisk0", "tpmstate0"] {
            assert!(cdrom_slot("cloudinit_slot", slot).is_err(), "{slot}");
        }
    }

    #[test]
    fn property_string_injection_is_refused() {
        assert!(
            import_source("import_from", "local:import/a.qcow2,format=raw")
                .unwrap_err()
                .contains("','")
        );
        assert!(import_source("import_from", "local:import/a.qcow2\nscsi1: x").is_err());
        assert!(storage_id("storage", "local-lvm,size=1").is_err());
        assert!(import_source("import_from", "local:import/noble.qcow2").is_ok());
        assert!(import_source("import_from", "/var/lib/vz/template/noble.img").is_ok());
        assert!(import_source("import_from", "noble.qcow2").is_err());
    }

    #[test]
    fn nameservers_as_pve_verify_address_takes_them() {
        for ok in ["192.0.2.53", "2001:db8::53", "dns.example.com", "ns1"] {
            assert_eq!(nameserver("nameserver[0]", ok).as_deref(), Ok(ok));
        }
        for bad in ["bad_name", "192.0.2.53/24", "-ns", ""] {
            assert!(nameserver("nameserver[0]", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("size", "20G").unwrap(), 20 << 30);
        assert_eq!(parse_size("size", "512M").unwrap(), 512 << 20);
        assert_eq!(parse_size("size", "10").unwrap(), 10 << 30);
        assert!(parse_size("size", "-1G").is_err());
        assert!(parse_size("size", "big").is_err());
        assert_eq!(parse_size("size", "1.5G").unwrap(), 3 << 29);
        assert_eq!(parse_size("size", "2050M").unwrap(), 2050 << 20);
        for (bad, why) in [
            ("1K", "at least 1M"),
            ("0", "at least 1M"),
            ("99999999999999999999999T", "at most 1024T"),
            ("1025T", "at most 1024T"),
            ("1e3G", "must be a size"),
            ("0.0000001K", "whole number of KiB"),
            ("1.G", "must be a size"),
            (".5G", "must be a size"),
            ("NaNG", "must be a size"),
            ("infM", "must be a size"),
        ] {
            let e = parse_size("disks[0].size", bad).unwrap_err();
            assert!(
                e.contains(why) && e.starts_with("disks[0].size"),
                "{bad}: {e}"
            );
        }
    }
}
