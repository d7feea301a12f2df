//! NICs (`net0` …), with the format of qemu-server's `src/PVE/QemuServer/Network.pm`
//! (`$net_fmt`): the model is the default key, and `MODEL=MAC` is its key alias (`virtio=…`
//! is `model=virtio,macaddr=…`).
//!
//! PVE stores a NIC as `print_net(parse_net(...))` prints it (`update_vm_api` and, at create,
//! `add_random_macs`): `MODEL=MAC` first, then the other keys in byte order, with a random MAC
//! when none was given.

use std::fmt;
use std::str::FromStr;

use super::property::{Key, Kind, PropertyString, Schema, ValueError};

/// `$nic_model_list`, written once: the models [`MODELS`] names, and each as a key alias
/// (`virtio=BC:24:…` is `model=virtio,macaddr=BC:24:…`) in [`ALIASES`].
macro_rules! nic_models {
    ($($model:literal),*) => {
        /// `$nic_model_list`.
        pub const MODELS: &[&str] = &[$($model),*];
        static ALIASES: &[Key] = &[$(Key::key_alias($model, "macaddr", "model")),*];
    };
}

nic_models!(
    "e1000",
    "e1000-82540em",
    "e1000-82544gc",
    "e1000-82545em",
    "e1000e",
    "i82551",
    "i82557b",
    "i82559er",
    "ne2k_isa",
    "ne2k_pci",
    "pcnet",
    "rtl8139",
    "virtio",
    "vmxnet3"
);

/// `pve-bridge-id` (`parse_bridge_id`): `^[-_.\w\d]+$`.
fn bridge(value: &str) -> bool {
    !value.is_empty()
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

/// `trunks`: `\d+(?:-\d+)?(?:;\d+(?:-\d+)?)*`.
fn trunks(value: &str) -> bool {
    value.split(';').all(|range| {
        let mut ends = range.splitn(2, '-');
        ends.all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    })
}

static KEYS: &[Key] = &[
    Key::new("macaddr", Kind::Mac),
    Key::new("model", Kind::Enum(MODELS))
        .required()
        .default_key(),
    Key::new("bridge", Kind::Checked(bridge, "a bridge name")),
    Key::new("queues", Kind::Int(Some(0), Some(64))),
    Key::new("rate", Kind::Number(Some(0.0))),
    Key::new("tag", Kind::Int(Some(1), Some(4094))),
    Key::new("trunks", Kind::Checked(trunks, "vlanid[;vlanid...]")),
    Key::new("firewall", Kind::Bool),
    Key::new("link_down", Kind::Bool),
    Key::new("mtu", Kind::Int(Some(1), Some(65520))),
    Key::new("host-tunnel", Kind::Bool),
];

static NET: Schema = Schema {
    name: "net",
    keys: &[KEYS, ALIASES],
    skip: &[],
};

/// A NIC: its model, its MAC if one is set, and its other keys.
#[derive(Clone, Debug, PartialEq)]
pub struct Net {
    props: PropertyString,
}

impl Net {
    /// A NIC of `model` with no MAC and no other keys.
    pub fn new(model: &str) -> Result<Net, ValueError> {
        let mut props = PropertyString::new(&NET);
        props.set("model", model)?;
        Ok(Net { props })
    }

    /// The model (`virtio`).
    pub fn model(&self) -> &str {
        self.props.get("model").unwrap_or_default()
    }

    /// The MAC, as written.
    pub fn mac(&self) -> Option<&str> {
        self.props.get("macaddr")
    }

    /// A key's value (booleans as `1`/`0`).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.props.get(key)
    }

    /// Sets a key (`macaddr`, `bridge`, `tag` …), checked as PVE checks it.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), ValueError> {
        self.props.set(key, value)
    }

    /// True when `have` (what PVE stores) is this NIC: the same model and keys, and the same
    /// MAC if this one names one (PVE gives a NIC without one a random MAC, which is kept).
    pub fn matches(&self, have: &Net) -> bool {
        let mut want = self.clone();
        if want.mac().is_none()
            && let Some(mac) = have.mac()
        {
            want.props.set("macaddr", mac).ok();
        }
        want == *have
    }

    /// This NIC with `have`'s MAC when it names none: the value to send, so an update does
    /// not give the guest a new MAC.
    pub fn keeping_mac_of(&self, have: &Net) -> Net {
        let mut out = self.clone();
        if out.mac().is_none()
            && let Some(mac) = have.mac()
        {
            out.props.set("macaddr", mac).ok();
        }
        out
    }
}

impl Net {
    /// Reads a NIC PVE stored: as `parse_net`, keeping keys this module's table of PVE's keys
    /// does not know.
    pub fn parse_stored(value: &str) -> Result<Net, ValueError> {
        Ok(Net {
            props: PropertyString::parse_stored(&NET, value)?,
        })
    }
}

impl FromStr for Net {
    type Err = ValueError;

    /// `parse_net` (without the random MAC it adds).
    fn from_str(value: &str) -> Result<Net, ValueError> {
        Ok(Net {
            props: PropertyString::parse(&NET, value)?,
        })
    }
}

impl fmt::Display for Net {
    /// `print_net`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.props.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(text: &str) -> Net {
        text.parse().unwrap()
    }

    #[test]
    fn prints_as_print_net() {
        assert_eq!(
            net("bridge=vmbr0,virtio=BC:24:11:2A:3B:4C,firewall=on,tag=10").to_string(),
            "virtio=BC:24:11:2A:3B:4C,bridge=vmbr0,firewall=1,tag=10"
        );
        assert_eq!(
            net("model=e1000,macaddr=bc:24:11:2a:3b:4c,bridge=vmbr1").to_string(),
            "e1000=bc:24:11:2a:3b:4c,bridge=vmbr1"
        );
        assert_eq!(
            net("virtio,bridge=vmbr0,link_down=no").to_string(),
            "virtio,bridge=vmbr0,link_down=0"
        );
        assert_eq!(
            net("virtio,bridge=vmbr0,trunks=10;20-30,mtu=1500,queues=4,rate=12.5").to_string(),
            "virtio,bridge=vmbr0,mtu=1500,queues=4,rate=12.5,trunks=10;20-30"
        );
    }

    #[test]
    fn compares_as_pve_stores() {
        let stored = net("virtio=BC:24:11:2A:3B:4C,bridge=vmbr0,firewall=1");
        assert!(net("virtio,bridge=vmbr0,firewall=yes").matches(&stored));
        assert!(net("virtio=bc:24:11:2a:3b:4c,firewall=1,bridge=vmbr0").matches(&stored));
        assert!(!net("virtio=BC:24:11:2A:3B:4D,bridge=vmbr0,firewall=1").matches(&stored));
        assert!(!net("e1000,bridge=vmbr0,firewall=1").matches(&stored));
        assert!(!net("virtio,bridge=vmbr0").matches(&stored));
        assert!(!net("virtio,bridge=vmbr0,firewall=1,tag=5").matches(&stored));
        assert_eq!(
            net("virtio,bridge=vmbr1")
                .keeping_mac_of(&stored)
                .to_string(),
            "virtio=BC:24:11:2A:3B:4C,bridge=vmbr1"
        );
    }

    #[test]
    fn refuses_what_pve_refuses() {
        for (value, wants) in [
            ("bridge=vmbr0", "model: property is missing"),
            ("virtio,e1000", "duplicate key"),
            ("virtio=01:00:00:00:00:01", "unicast MAC"),
            ("virtio,tag=4095", "maximum value of 4094"),
            ("virtio,bridge=vm br0", "a bridge name"),
            ("rtl8140", "enumeration"),
            (
                "virtio=BC:24:11:2A:3B:4C,macaddr=BC:24:11:2A:3B:4C",
                "duplicate key",
            ),
            (
                "macaddr=BC:24:11:2A:3B:4C,virtio=BC:24:11:2A:3B:4C",
                "already defined (via alias)",
            ),
            ("virtio,trunks=10;x", "vlanid"),
        ] {
            let e = value.parse::<Net>().unwrap_err();
            assert!(e.to_string().contains(wants), "{value}: {e}");
        }
    }
}
