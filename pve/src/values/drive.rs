//! Drives (`scsi0`, `virtio0`, `ide2`, `sata0`, `efidisk0`, `tpmstate0`, `unused0`), with the
//! formats of qemu-server's `src/PVE/QemuServer/Drive.pm`: `%drivedesc_base` and the groups
//! each interface adds (`$ide_fmt`, `$scsi_fmt`, `$sata_fmt`, `$virtio_fmt`, `$efidisk_fmt`,
//! `$tpmstate_fmt`, `$unused_fmt`), and `import-from` where a disk can be allocated
//! (`$desc_with_alloc`).
//!
//! PVE stores a drive as `print_drive` prints it (`create_disks` in `API2/Qemu.pm` prints
//! every drive it is given, and fills in `size` from the volume): the volume first, then the
//! other keys in byte order, booleans as `1`/`0`, the size through `format_size`.

use std::fmt;
use std::str::FromStr;

use super::property::{Key, Kind, PropertyString, Schema, ValueError};
use super::size::Size;

/// `pve-qm-image-format`.
const IMAGE_FORMATS: &[&str] = &["raw", "qcow", "qed", "qcow2", "vmdk", "cloop"];

/// A volume id or a path (`pve-volume-id-or-qm-path`, in the shape the modules need: not
/// empty, no control characters or spaces).
fn volume(value: &str) -> bool {
    !value.is_empty() && !value.chars().any(|c| c.is_control() || c == ' ')
}

/// `urlencoded`: `^[-%a-zA-Z0-9_.!~*'()]*$`.
fn urlencoded(value: &str) -> bool {
    value
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-%_.!~*'()".contains(&b))
}

/// A `wwn`: `0x` and 16 hex digits.
fn wwn(value: &str) -> bool {
    value
        .strip_prefix("0x")
        .is_some_and(|h| h.len() >= 16 && h.bytes().take(16).all(|b| b.is_ascii_hexdigit()))
}

const VOLUME: Kind = Kind::Checked(volume, "a volume id or path");

/// `%drivedesc_base`.
static BASE: &[Key] = &[
    Key::alias("volume", "file"),
    Key::new("file", VOLUME).required().default_key(),
    Key::new("media", Kind::Enum(&["cdrom", "disk"])).default("disk"),
    Key::new("snapshot", Kind::Bool),
    Key::new(
        "cache",
        Kind::Enum(&["none", "writethrough", "writeback", "unsafe", "directsync"]),
    ),
    Key::new("format", Kind::Enum(IMAGE_FORMATS)),
    Key::new("size", Kind::Size),
    Key::new("backup", Kind::Bool),
    Key::new("replicate", Kind::Bool).default("1"),
    Key::new("rerror", Kind::Enum(&["ignore", "report", "stop"])),
    Key::new(
        "werror",
        Kind::Enum(&["enospc", "ignore", "report", "stop"]),
    ),
    Key::new("aio", Kind::Enum(&["native", "threads", "io_uring"])),
    Key::new("discard", Kind::Enum(&["ignore", "on"])),
    Key::new("detect_zeroes", Kind::Bool),
    Key::new("serial", Kind::Checked(urlencoded, "URL-encoded")),
    Key::new("shared", Kind::Bool).default("0"),
    Key::new("bps", Kind::Int(None, None)),
    Key::new("bps_rd", Kind::Int(None, None)),
    Key::new("bps_wr", Kind::Int(None, None)),
    Key::new("mbps", Kind::Number(None)),
    Key::new("mbps_rd", Kind::Number(None)),
    Key::new("mbps_wr", Kind::Number(None)),
    Key::new("iops", Kind::Int(None, None)),
    Key::new("iops_rd", Kind::Int(None, None)),
    Key::new("iops_wr", Kind::Int(None, None)),
    Key::new("mbps_max", Kind::Number(None)),
    Key::new("mbps_rd_max", Kind::Number(None)),
    Key::new("mbps_wr_max", Kind::Number(None)),
    Key::new("iops_max", Kind::Int(None, None)),
    Key::new("iops_rd_max", Kind::Int(None, None)),
    Key::new("iops_wr_max", Kind::Int(None, None)),
    Key::new("bps_max_length", Kind::Int(Some(1), None)),
    Key::new("bps_rd_max_length", Kind::Int(Some(1), None)),
    Key::new("bps_wr_max_length", Kind::Int(Some(1), None)),
    Key::new("iops_max_length", Kind::Int(Some(1), None)),
    Key::new("iops_rd_max_length", Kind::Int(Some(1), None)),
    Key::new("iops_wr_max_length", Kind::Int(Some(1), None)),
    Key::alias("bps_rd_length", "bps_rd_max_length"),
    Key::alias("bps_wr_length", "bps_wr_max_length"),
    Key::alias("iops_rd_length", "iops_rd_max_length"),
    Key::alias("iops_wr_length", "iops_wr_max_length"),
];
static IOTHREAD: &[Key] = &[Key::new("iothread", Kind::Bool)];
static PRODUCT: &[Key] = &[Key::new("product", Kind::Str)];
static VENDOR: &[Key] = &[Key::new("vendor", Kind::Str)];
static MODEL: &[Key] = &[Key::new("model", Kind::Checked(urlencoded, "URL-encoded"))];
static QUEUES: &[Key] = &[Key::new("queues", Kind::Int(Some(2), None))];
static READONLY: &[Key] = &[Key::new("ro", Kind::Bool)];
static SCSIBLOCK: &[Key] = &[Key::new("scsiblock", Kind::Bool).default("0")];
static SSD: &[Key] = &[Key::new("ssd", Kind::Bool)];
static WWN: &[Key] = &[Key::new("wwn", Kind::Checked(wwn, "0x and 16 hex digits"))];
static IMPORT_FROM: &[Key] = &[Key::new("import-from", VOLUME)];
static EFI: &[Key] = &[
    Key::alias("volume", "file"),
    Key::new("file", VOLUME).required().default_key(),
    Key::new("format", Kind::Enum(IMAGE_FORMATS)),
    Key::new("size", Kind::Size),
    Key::new("efitype", Kind::Enum(&["2m", "4m"])).default("2m"),
    Key::new("pre-enrolled-keys", Kind::Bool).default("0"),
    Key::new("ms-cert", Kind::Enum(&["2011", "2023", "2023w", "2023k"])).default("2011"),
];
static TPM: &[Key] = &[
    Key::alias("volume", "file"),
    Key::new("file", VOLUME).required().default_key(),
    Key::new("format", Kind::Enum(&["raw", "qcow2", "vmdk", "subvol"])),
    Key::new("size", Kind::Size),
    Key::new("version", Kind::Enum(&["v1.2", "v2.0"])).default("v1.2"),
];
static UNUSED: &[Key] = &[
    Key::alias("volume", "file"),
    Key::new("file", VOLUME).required().default_key(),
];

/// `parse_drive` drops these legacy keys (`$DROPPED_PROPERTIES`).
const DROPPED: &[&str] = &["cyls", "heads", "secs", "trans"];

macro_rules! schemas {
    ($($name:ident, $alloc:ident = $label:literal [$($group:ident),*];)*) => {$(
        static $name: Schema = Schema { name: $label, keys: &[$($group),*], skip: DROPPED };
        static $alloc: Schema =
            Schema { name: $label, keys: &[$($group,)* IMPORT_FROM], skip: DROPPED };
    )*};
}

schemas! {
    IDE, IDE_ALLOC = "ide drive" [BASE, MODEL, SSD, WWN];
    SATA, SATA_ALLOC = "sata drive" [BASE, SSD, WWN];
    SCSI, SCSI_ALLOC = "scsi drive"
        [BASE, IOTHREAD, PRODUCT, QUEUES, READONLY, SCSIBLOCK, SSD, VENDOR, WWN];
    VIRTIO, VIRTIO_ALLOC = "virtio drive" [BASE, IOTHREAD, READONLY];
    EFIDISK, EFIDISK_ALLOC = "efidisk" [EFI];
    TPMSTATE, TPMSTATE_ALLOC = "tpmstate" [TPM];
}

/// `$unused_fmt` (no allocation: `$with_alloc_desc_cache` keeps it as it is).
static UNUSED_SCHEMA: Schema = Schema {
    name: "unused drive",
    keys: &[UNUSED],
    skip: DROPPED,
};

/// `$alldrive_fmt_with_alloc`: what `print_drive` prints with (every interface's keys).
static ALL: Schema = Schema {
    name: "drive",
    keys: &[
        BASE,
        IOTHREAD,
        MODEL,
        PRODUCT,
        QUEUES,
        READONLY,
        SCSIBLOCK,
        SSD,
        VENDOR,
        WWN,
        TPM_VERSION,
        EFI_TYPE,
        IMPORT_FROM,
    ],
    skip: DROPPED,
};
static TPM_VERSION: &[Key] = &[Key::new("version", Kind::Enum(&["v1.2", "v2.0"])).default("v1.2")];
static EFI_TYPE: &[Key] = &[
    Key::new("efitype", Kind::Enum(&["2m", "4m"])).default("2m"),
    Key::new("pre-enrolled-keys", Kind::Bool).default("0"),
    Key::new("ms-cert", Kind::Enum(&["2011", "2023", "2023w", "2023k"])).default("2011"),
];

/// Splits a drive key into its interface and index (`parse_drive_interface`), checked against
/// the slots PVE has (`ide0-3`, `sata0-5`, `scsi0-30`, `virtio0-15`, `efidisk0`, `tpmstate0`,
/// `unused0-255`).
pub fn slot_schema(slot: &str, with_alloc: bool) -> Option<&'static Schema> {
    let at = slot.find(|c: char| c.is_ascii_digit())?;
    let (interface, index) = slot.split_at(at);
    let index: u32 = index.parse().ok()?;
    if index.to_string() != slot[at..] {
        return None;
    }
    let (plain, alloc, max) = match interface {
        "ide" => (&IDE, &IDE_ALLOC, 4),
        "sata" => (&SATA, &SATA_ALLOC, 6),
        "scsi" => (&SCSI, &SCSI_ALLOC, 31),
        "virtio" => (&VIRTIO, &VIRTIO_ALLOC, 16),
        "efidisk" => (&EFIDISK, &EFIDISK_ALLOC, 1),
        "tpmstate" => (&TPMSTATE, &TPMSTATE_ALLOC, 1),
        "unused" => (&UNUSED_SCHEMA, &UNUSED_SCHEMA, 256),
        _ => return None,
    };
    (index < max).then_some(if with_alloc { alloc } else { plain })
}

/// True for a key that names a drive PVE has (`is_valid_drivename`, which leaves `unused`
/// out).
pub fn is_drive_key(key: &str) -> bool {
    !key.starts_with("unused") && slot_schema(key, false).is_some()
}

/// True when `slot`'s format has the option `key` (`ssd` is in `$ide_fmt`, `$scsi_fmt` and
/// `$sata_fmt`, not `$virtio_fmt`; `iothread` only in `$scsi_fmt` and `$virtio_fmt`). PVE
/// refuses any other with a 400 on the slot: `virtio0.ssd: property is not defined in schema`.
pub fn slot_takes(slot: &str, key: &str) -> bool {
    slot_schema(slot, true).is_some_and(|schema| schema.key(key).is_some())
}

/// True for a slot that can hold a CD-ROM, such as a cloud-init drive (`media=cdrom`):
/// `ide`, `sata` or `scsi`. `parse_drive` reads a VirtIO CD-ROM as no drive at all, and
/// `efidisk0`, `tpmstate0` and `unusedN` hold no media.
pub fn slot_takes_cdrom(slot: &str) -> bool {
    is_drive_key(slot)
        && ["ide", "sata", "scsi"]
            .iter()
            .any(|bus| slot.starts_with(bus))
}

/// The format of a stored volume as its name says (pve-storage's `parse_volname`: a
/// directory storage's `100/vm-100-disk-0.qcow2`, an LVM one's `vm-100-disk-0.qcow2` with
/// volume chains), `raw` for a name without one (LVM, ZFS, RBD volumes); `None` for a path
/// or a volume of no known format.
pub fn volume_format(file: &str) -> Option<&'static str> {
    let (storage, name) = file.split_once(':')?;
    if storage.is_empty() || storage.contains('/') || name.is_empty() {
        return None;
    }
    let base = name.rsplit('/').next().unwrap_or(name);
    match base.rsplit_once('.') {
        Some((_, ext)) => IMAGE_FORMATS.iter().copied().find(|f| *f == ext),
        None => Some("raw"),
    }
}

/// A drive: its volume (`file`) and options, read against its slot's format.
#[derive(Clone, Debug, PartialEq)]
pub struct Drive {
    props: PropertyString,
}

impl Drive {
    /// Reads the value of `slot` as `parse_drive($key, $data, $with_alloc)` does (with
    /// allocation: `STORAGE:SIZE_IN_GiB` and `import-from` are allowed), and its `size` as
    /// `parse_size` reads it.
    pub fn parse(slot: &str, value: &str) -> Result<Drive, ValueError> {
        let schema = slot_schema(slot, true)
            .ok_or_else(|| ValueError::new("drive", format!("invalid drive key: {slot}")))?;
        let props = PropertyString::parse(schema, value)?;
        let drive = Drive { props };
        if drive.is_cdrom() && (drive.get("snapshot") == Some("1") || drive.get("format").is_some())
        {
            return Err(ValueError::new(
                "drive",
                "a CD-ROM drive takes neither snapshot nor format",
            ));
        }
        if drive.is_cdrom() && slot.starts_with("virtio") {
            return Err(ValueError::new(
                "drive",
                "a VirtIO drive cannot be a CD-ROM",
            ));
        }
        Ok(drive)
    }

    /// Reads a drive PVE stored in `slot`: as [`Drive::parse`], keeping options this
    /// module's table of PVE's keys does not know (PVE wrote them, so they are valid), so a
    /// merge of asked options keeps them.
    pub fn parse_stored(slot: &str, value: &str) -> Result<Drive, ValueError> {
        let schema = slot_schema(slot, true)
            .ok_or_else(|| ValueError::new("drive", format!("invalid drive key: {slot}")))?;
        Ok(Drive {
            props: PropertyString::parse_stored(schema, value)?,
        })
    }

    /// Reads a drive PVE stored whose slot is not known, against every interface's keys
    /// (`$alldrive_fmt_with_alloc`), keeping options it does not know.
    pub fn parse_stored_any(value: &str) -> Result<Drive, ValueError> {
        Ok(Drive {
            props: PropertyString::parse_stored(&ALL, value)?,
        })
    }

    /// A drive on `file` with no options, for `slot`.
    pub fn new(slot: &str, file: &str) -> Result<Drive, ValueError> {
        let schema = slot_schema(slot, true)
            .ok_or_else(|| ValueError::new("drive", format!("invalid drive key: {slot}")))?;
        let mut props = PropertyString::new(schema);
        props.set("file", file)?;
        Ok(Drive { props })
    }

    /// A new volume of `size` on `storage` (`STORAGE:SIZE_IN_GiB`, `$NEW_DISK_RE`), the size
    /// written in exact decimal GiB (`1.5`, `0.0009765625`; any whole number of KiB is a
    /// finite decimal of GiB).
    pub fn allocate(slot: &str, storage: &str, size: Size) -> Result<Drive, ValueError> {
        Drive::new(slot, &format!("{storage}:{}", exact_gib(size.bytes())))
    }

    /// An import of `source` to `storage` (`STORAGE:0,import-from=SOURCE`).
    pub fn import(slot: &str, storage: &str, source: &str) -> Result<Drive, ValueError> {
        let mut drive = Drive::new(slot, &format!("{storage}:0"))?;
        drive.set("import-from", source)?;
        Ok(drive)
    }

    /// A cloud-init drive on `storage` (`STORAGE:cloudinit`).
    pub fn cloudinit(slot: &str, storage: &str) -> Result<Drive, ValueError> {
        Drive::new(slot, &format!("{storage}:cloudinit"))
    }

    /// The volume (or path, or `STORAGE:SIZE` for a new one).
    pub fn file(&self) -> &str {
        self.props.get("file").unwrap_or_default()
    }

    /// The storage of the volume (`local-lvm` of `local-lvm:vm-100-disk-0`), if it names one.
    pub fn storage(&self) -> Option<&str> {
        self.file()
            .split_once(':')
            .map(|(storage, _)| storage)
            .filter(|s| !s.is_empty() && !s.contains('/'))
    }

    /// The option `key` as read (booleans `1`/`0`, size as `format_size` prints it).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.props.get(key)
    }

    /// The option `key`, or what PVE assumes without it (`efitype` → `2m`).
    pub fn get_or_default(&self, key: &str) -> Option<&str> {
        self.props.get_or_default(key)
    }

    /// Sets an option, checked as PVE checks it.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), ValueError> {
        self.props.set(key, value)
    }

    /// Removes an option.
    pub fn remove(&mut self, key: &str) -> Option<String> {
        self.props.remove(key)
    }

    /// The options (every key but the volume), in byte order.
    pub fn options(&self) -> impl Iterator<Item = (&str, &str)> {
        self.props.iter().filter(|(k, _)| *k != "file")
    }

    /// The size PVE recorded.
    pub fn size(&self) -> Option<Size> {
        self.props.get("size").and_then(|s| s.parse().ok())
    }

    /// `media=cdrom` (`drive_is_cdrom`).
    pub fn is_cdrom(&self) -> bool {
        self.props.get("media") == Some("cdrom")
    }

    /// A cloud-init volume (`drive_is_cloudinit`: `[:/](vm-N-)?cloudinit(.FORMAT)?$`).
    pub fn is_cloudinit(&self) -> bool {
        let file = self.file();
        let Some(at) = file.rfind([':', '/']) else {
            return false;
        };
        let name = &file[at + 1..];
        let name = name
            .strip_prefix("vm-")
            .and_then(|rest| {
                let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
                (digits > 0)
                    .then(|| rest[digits..].strip_prefix('-'))
                    .flatten()
            })
            .unwrap_or(name);
        let base = name.strip_prefix("cloudinit");
        base.is_some_and(|rest| {
            rest.is_empty()
                || rest
                    .strip_prefix('.')
                    .is_some_and(|f| IMAGE_FORMATS.contains(&f))
        })
    }

    /// A volume still to be allocated (`$NEW_DISK_RE`: `[STORAGE:]SIZE_IN_GiB`).
    pub fn is_new_volume(&self) -> bool {
        let file = self.file();
        let size = file.rsplit_once(':').map_or(file, |(storage, size)| {
            if storage.is_empty() || storage.contains(['/', ' ']) {
                ""
            } else {
                size
            }
        });
        let (whole, frac) = size.split_once('.').unwrap_or((size, "0"));
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        digits(whole) && digits(frac)
    }

    /// The options of `want` this drive does not hold (absent options count as their default):
    /// what an update that changes only the options asked for must send.
    pub fn differing_options(&self, want: &Drive) -> Vec<String> {
        want.props
            .differing_keys(&self.props)
            .into_iter()
            .filter(|k| k != "file")
            .collect()
    }

    /// This drive with `want`'s options set on it (its volume and other options kept): the
    /// value that changes only the options asked for.
    pub fn merged(&self, want: &Drive) -> Result<Drive, ValueError> {
        let mut out = self.clone();
        for (k, v) in want.options() {
            out.set(k, v)?;
        }
        Ok(out)
    }
}

impl FromStr for Drive {
    type Err = ValueError;

    /// Reads a drive against every interface's keys (`$alldrive_fmt_with_alloc`), for a value
    /// whose slot is not known.
    fn from_str(value: &str) -> Result<Drive, ValueError> {
        Ok(Drive {
            props: PropertyString::parse(&ALL, value)?,
        })
    }
}

impl fmt::Display for Drive {
    /// `print_drive`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.props.fmt(f)
    }
}

/// Bytes as GiB in exact decimal (`1.5`, `0.0009765625`): a new disk is asked for as
/// `storage:<GiB>` (`$NEW_DISK_RE` allows a fraction), and any whole number of KiB is a finite
/// decimal of GiB.
pub fn exact_gib(bytes: u64) -> String {
    let whole = bytes >> 30;
    let mut frac = bytes & ((1 << 30) - 1);
    if frac == 0 {
        return whole.to_string();
    }
    let mut out = format!("{whole}.");
    while frac != 0 {
        frac *= 10;
        out.push(char::from(b'0' + (frac >> 30) as u8));
        frac &= (1 << 30) - 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canonical(slot: &str, value: &str) -> String {
        Drive::parse(slot, value).unwrap().to_string()
    }

    #[test]
    fn prints_as_print_drive() {
        assert_eq!(
            canonical(
                "scsi0",
                "ssd=on,discard=on,volume=local-lvm:vm-100-disk-0,iothread=yes,size=20480M,cache=none"
            ),
            "local-lvm:vm-100-disk-0,cache=none,discard=on,iothread=1,size=20G,ssd=1"
        );
        assert_eq!(
            canonical("virtio0", "local-lvm:vm-100-disk-1,backup=no,size=3584M"),
            "local-lvm:vm-100-disk-1,backup=0,size=3584M"
        );
        assert_eq!(
            canonical("ide2", "local-lvm:vm-100-cloudinit,media=cdrom"),
            "local-lvm:vm-100-cloudinit,media=cdrom"
        );
        assert_eq!(
            canonical(
                "efidisk0",
                "local-lvm:vm-100-disk-2,pre-enrolled-keys=true,efitype=4m,size=4M"
            ),
            "local-lvm:vm-100-disk-2,efitype=4m,pre-enrolled-keys=1,size=4M"
        );
        assert_eq!(
            canonical("tpmstate0", "local-lvm:vm-100-disk-3,size=4M,version=v2.0"),
            "local-lvm:vm-100-disk-3,size=4M,version=v2.0"
        );
        assert_eq!(
            canonical(
                "scsi1",
                "local-lvm:0,import-from=local:import/noble.qcow2,discard=on"
            ),
            "local-lvm:0,discard=on,import-from=local:import/noble.qcow2"
        );
        // Legacy geometry keys are dropped, legacy throttle names read as the new ones.
        assert_eq!(
            canonical(
                "ide0",
                "local:iso/x.iso,media=cdrom,cyls=3,iops_rd_length=2,iops_rd_max=9"
            ),
            "local:iso/x.iso,iops_rd_max=9,iops_rd_max_length=2,media=cdrom"
        );
    }

    #[test]
    fn compares_as_pve_stores() {
        let a = Drive::parse("scsi0", "local-lvm:vm-1-disk-0,discard=on,ssd=1,size=2G").unwrap();
        let b = Drive::parse(
            "scsi0",
            "size=2048M,ssd=true,discard=on,file=local-lvm:vm-1-disk-0",
        )
        .unwrap();
        assert_eq!(a, b);
        let c = Drive::parse("scsi0", "local-lvm:vm-1-disk-0,discard=on,ssd=0,size=2G").unwrap();
        assert_ne!(a, c);
        assert_eq!(a.size(), Some(Size::gib(2)));
        assert_eq!(a.storage(), Some("local-lvm"));
        let efi = Drive::parse("efidisk0", "local-lvm:vm-1-disk-1,size=4M").unwrap();
        assert_eq!(efi.get_or_default("efitype"), Some("2m"));
        assert_eq!(efi.get_or_default("pre-enrolled-keys"), Some("0"));
        assert_eq!(efi.get("efitype"), None);
    }

    #[test]
    fn options_merge_and_differ() {
        let have = Drive::parse(
            "scsi0",
            "local-lvm:vm-1-disk-0,discard=on,size=20G,replicate=1",
        )
        .unwrap();
        let mut want = Drive::new("scsi0", "local-lvm:1").unwrap();
        want.set("discard", "on").unwrap();
        want.set("replicate", "yes").unwrap();
        want.set("backup", "1").unwrap();
        assert_eq!(have.differing_options(&want), vec!["backup".to_string()]);
        let merged = have.merged(&want).unwrap();
        assert_eq!(
            merged.to_string(),
            "local-lvm:vm-1-disk-0,backup=1,discard=on,replicate=1,size=20G"
        );
        // An option absent from the drive counts as its default.
        let mut want = Drive::new("scsi0", "x:1").unwrap();
        want.set("shared", "off").unwrap();
        assert!(have.differing_options(&want).is_empty());
        want.set("shared", "on").unwrap();
        assert_eq!(have.differing_options(&want), vec!["shared".to_string()]);
    }

    #[test]
    fn a_stored_drive_keeps_options_it_does_not_know() {
        let have = Drive::parse_stored("scsi0", "local-lvm:vm-1-disk-0,size=2G,zoned=1").unwrap();
        let mut want = Drive::new("scsi0", "local-lvm:1").unwrap();
        want.set("ssd", "on").unwrap();
        assert_eq!(
            have.merged(&want).unwrap().to_string(),
            "local-lvm:vm-1-disk-0,size=2G,ssd=1,zoned=1"
        );
        let any = Drive::parse_stored_any("local-lvm:vm-1-disk-0,size=2048M,zoned=1").unwrap();
        assert_eq!(any.size(), Some(Size::gib(2)));
    }

    #[test]
    fn refuses_what_pve_refuses() {
        for (slot, value, wants) in [
            ("scsi0", "local-lvm:1,iothread=maybe", "boolean"),
            ("ide0", "local-lvm:1,iothread=1", "invalid key"),
            ("virtio0", "local:iso/x.iso,media=cdrom", "CD-ROM"),
            ("sata0", "local-lvm:1,cache=fast", "enumeration"),
            ("scsi0", "local-lvm:1,size=big", "disk size"),
            ("scsi0", "discard=on", "file: property is missing"),
            ("scsi31", "local-lvm:1", "invalid drive key"),
            ("ide4", "local-lvm:1", "invalid drive key"),
            ("efidisk1", "local-lvm:1", "invalid drive key"),
            ("scsi0", "local-lvm:1,queues=1", "minimum value of 2"),
            ("unused0", "local-lvm:1,import-from=x", "invalid key"),
        ] {
            let e = Drive::parse(slot, value).unwrap_err();
            assert!(e.to_string().contains(wants), "{slot}={value}: {e}");
        }
    }

    #[test]
    fn kinds_of_volume() {
        let drive = |value: &str| Drive::parse("ide2", value).unwrap();
        assert!(drive("local-lvm:vm-100-cloudinit,media=cdrom").is_cloudinit());
        assert!(drive("local:100/vm-100-cloudinit.qcow2,media=cdrom").is_cloudinit());
        assert!(drive("local-lvm:cloudinit").is_cloudinit());
        assert!(!drive("local-lvm:vm-100-disk-0").is_cloudinit());
        assert!(!drive("local:iso/cloudinit.iso,media=cdrom").is_cloudinit());
        assert!(drive("local-lvm:32").is_new_volume());
        assert!(drive("local-lvm:0.5").is_new_volume());
        assert!(drive("8").is_new_volume());
        assert!(!drive("local-lvm:vm-100-disk-0").is_new_volume());
        assert!(drive("local:iso/x.iso,media=cdrom").is_cdrom());
        assert!(is_drive_key("scsi30") && is_drive_key("tpmstate0"));
        assert!(!is_drive_key("unused0") && !is_drive_key("scsi01") && !is_drive_key("net0"));
    }

    #[test]
    fn options_and_media_by_bus() {
        assert!(
            slot_takes("scsi0", "ssd") && slot_takes("sata1", "ssd") && slot_takes("ide0", "ssd")
        );
        assert!(!slot_takes("virtio0", "ssd"));
        assert!(slot_takes("virtio0", "iothread") && slot_takes("scsi3", "iothread"));
        assert!(!slot_takes("sata0", "iothread") && !slot_takes("ide1", "iothread"));
        assert!(slot_takes("virtio0", "discard") && !slot_takes("scsi31", "discard"));
        assert!(slot_takes_cdrom("ide2") && slot_takes_cdrom("scsi5") && slot_takes_cdrom("sata0"));
        for slot in ["virtio0", "efidisk0", "tpmstate0", "unused0", "ide4"] {
            assert!(!slot_takes_cdrom(slot), "{slot}");
        }
    }

    #[test]
    fn volume_formats_by_name() {
        assert_eq!(
            volume_format("local:100/vm-100-disk-0.qcow2"),
            Some("qcow2")
        );
        assert_eq!(volume_format("local:100/vm-100-disk-1.raw"), Some("raw"));
        assert_eq!(volume_format("local-lvm:vm-100-disk-0"), Some("raw"));
        assert_eq!(volume_format("lvm:vm-100-disk-0.qcow2"), Some("qcow2"));
        assert_eq!(volume_format("/dev/sdb"), None);
        assert_eq!(volume_format("local:100/vm-100-disk-0.subvol"), None);
    }

    #[test]
    fn builds_new_disks() {
        assert_eq!(
            Drive::allocate("scsi0", "local-lvm", Size(3 << 29))
                .unwrap()
                .to_string(),
            "local-lvm:1.5"
        );
        assert_eq!(
            Drive::import("scsi0", "local-lvm", "local:import/noble.qcow2")
                .unwrap()
                .to_string(),
            "local-lvm:0,import-from=local:import/noble.qcow2"
        );
        assert_eq!(
            Drive::cloudinit("ide2", "local-lvm").unwrap().to_string(),
            "local-lvm:cloudinit"
        );
        assert_eq!(exact_gib(1 << 20), "0.0009765625");
        assert_eq!(exact_gib(20 << 30), "20");
    }
}
