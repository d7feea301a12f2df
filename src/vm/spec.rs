//! The `vm` module's argument spec: its options, their kinds, choices and defaults (the only
//! place a default is written), as Ansible validates them before the module reads them.
//! What the options mean in PVE's terms is built by [`super::desired`].

use serde_json::json;

use crate::ansible::spec::{Kind, Opt, Spec};
use crate::{connection, runner};

fn disk_options() -> Vec<Opt> {
    vec![
        Opt::new("slot", Kind::Str)
            .required()
            .aliases(&["interface"]),
        Opt::new("storage", Kind::Str),
        Opt::new("import_from", Kind::Str),
        Opt::new("size", Kind::Str),
        Opt::new("format", Kind::Str).choices(&["raw", "qcow2", "vmdk"]),
        Opt::new("cache", Kind::Str).choices(&[
            "none",
            "writethrough",
            "writeback",
            "unsafe",
            "directsync",
        ]),
        Opt::new("discard", Kind::Bool),
        Opt::new("ssd", Kind::Bool),
        Opt::new("iothread", Kind::Bool),
        Opt::new("backup", Kind::Bool),
        Opt::new("replicate", Kind::Bool),
        Opt::new("aio", Kind::Str).choices(&["native", "threads", "io_uring"]),
        Opt::new("state", Kind::Str)
            .default(json!("present"))
            .choices(&["present", "absent"]),
        Opt::new("purge", Kind::Bool).default(json!(false)),
        Opt::new("keep_source", Kind::Bool).default(json!(false)),
    ]
}

fn net_options() -> Vec<Opt> {
    vec![
        Opt::new("model", Kind::Str)
            .default(json!("virtio"))
            .choices(&["virtio", "e1000", "e1000e", "rtl8139", "vmxnet3"]),
        Opt::new("bridge", Kind::Str).default(json!("vmbr0")),
        Opt::new("macaddr", Kind::Str),
        Opt::new(
            "tag",
            Kind::Int {
                min: Some(1),
                max: Some(4094),
            },
        ),
        Opt::new("firewall", Kind::Bool),
        Opt::new(
            "mtu",
            Kind::Int {
                min: Some(1),
                max: Some(65520),
            },
        ),
        Opt::new(
            "queues",
            Kind::Int {
                min: Some(0),
                max: Some(64),
            },
        ),
        Opt::new("rate", Kind::Str),
        Opt::new("link_down", Kind::Bool),
    ]
}

fn ipconfig_options() -> Vec<Opt> {
    vec![
        Opt::new("ip", Kind::Str),
        Opt::new("gw", Kind::Str),
        Opt::new("ip6", Kind::Str),
        Opt::new("gw6", Kind::Str),
    ]
}

/// The power/lifecycle state asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    Present,
    Absent,
    Started,
    Stopped,
    Restarted,
}

/// The `vm` module's argument spec.
pub fn argument_spec() -> Spec {
    let int = |min: i64, max: Option<i64>| Kind::Int {
        min: Some(min),
        max,
    };
    let mut options = connection::connection_options();
    options.extend(runner::wait_options("30m"));
    options.extend(vec![
        Opt::new("state", Kind::Str)
            .default(json!("present"))
            .choices(&["present", "absent", "started", "stopped", "restarted"]),
        crate::ids::vmid_option("vmid"),
        Opt::new("name", Kind::Str),
        Opt::new("node", Kind::Str),
        Opt::new("migrate", Kind::Bool).default(json!(false)),
        Opt::new("target_storage", Kind::Str),
        Opt::new("snapshot_before_change", Kind::Str),
        Opt::new("snapshot_retention", int(0, Some(10_000))).default(json!(0)),
        Opt::new("pool", Kind::Str),
        Opt::new("disks", Kind::ListOfDicts(disk_options())),
        Opt::new("unused_disks", Kind::Str)
            .default(json!("keep"))
            .choices(&["keep", "remove"]),
        Opt::new("cloudinit_storage", Kind::Str),
        Opt::new(
            "nocloud",
            Kind::Dict(vec![
                Opt::new("user_data", Kind::Raw),
                Opt::new("meta_data", Kind::Raw),
                Opt::new("network_config", Kind::Raw),
                Opt::new("vendor_data", Kind::Raw),
                Opt::new("storage", Kind::Str).default(json!("local")),
                Opt::new("show_data", Kind::Bool).default(json!(false)),
            ]),
        ),
        Opt::new("cloudinit_slot", Kind::Str).default(json!("ide2")),
        Opt::new("ciuser", Kind::Str),
        Opt::new("cipassword", Kind::Str).no_log(),
        Opt::new("update_password", Kind::Str)
            .default(json!("on_create"))
            .choices(&["on_create", "always"]),
        Opt::new("sshkeys", Kind::List(Box::new(Kind::Str))),
        Opt::new("ipconfig", Kind::ListOfDicts(ipconfig_options())),
        Opt::new("nameserver", Kind::List(Box::new(Kind::Str))),
        Opt::new("searchdomain", Kind::Str),
        Opt::new("citype", Kind::Str).choices(&["nocloud", "configdrive2", "opennebula"]),
        Opt::new("ciupgrade", Kind::Bool),
        Opt::new("cores", int(1, Some(1024))),
        Opt::new("sockets", int(1, Some(16))),
        Opt::new("memory", int(16, None)),
        Opt::new("balloon", int(0, None)),
        Opt::new("cpu", Kind::Str),
        Opt::new("machine", Kind::Str),
        Opt::new("bios", Kind::Str).choices(&["seabios", "ovmf"]),
        Opt::new("ostype", Kind::Str).choices(&[
            "other", "wxp", "w2k", "w2k3", "w2k8", "wvista", "win7", "win8", "win10", "win11",
            "l24", "l26", "solaris",
        ]),
        Opt::new("scsihw", Kind::Str).choices(&[
            "lsi",
            "lsi53c810",
            "virtio-scsi-pci",
            "virtio-scsi-single",
            "megasas",
            "pvscsi",
        ]),
        Opt::new("net", Kind::ListOfDicts(net_options())),
        Opt::new("vga", Kind::Str),
        Opt::new("serial", Kind::List(Box::new(Kind::Str))),
        Opt::new("agent", Kind::Bool),
        Opt::new("onboot", Kind::Bool),
        Opt::new("numa", Kind::Bool),
        Opt::new("protection", Kind::Bool),
        Opt::new("boot", Kind::Str),
        Opt::new("tags", Kind::List(Box::new(Kind::Str))),
        Opt::new("description", Kind::Str),
        Opt::new("extra_config", Kind::RawDict),
        Opt::new("purge", Kind::Bool).default(json!(true)),
        Opt::new("shutdown_timeout", int(0, Some(86400))).default(json!(180)),
        Opt::new("force_stop", Kind::Bool).default(json!(true)),
        Opt::new("restart", Kind::Str)
            .choices(&["never", "when_needed"])
            .default(json!("never")),
        Opt::new("wait_for_ip", Kind::Duration).default(json!("0s")),
        Opt::new("template", Kind::Bool).default(json!(false)),
        Opt::new(
            "clone",
            Kind::Dict(vec![
                crate::ids::vmid_option("vmid"),
                Opt::new("name", Kind::Str),
                Opt::new("full", Kind::Bool),
                Opt::new("storage", Kind::Str),
                Opt::new("snapname", Kind::Str),
            ]),
        ),
        Opt::new(
            "ha",
            Kind::Dict(vec![
                Opt::new("state", Kind::Str)
                    .choices(&["started", "stopped", "disabled", "ignored"]),
                Opt::new("group", Kind::Str),
                Opt::new("rule", Kind::Str),
                Opt::new(
                    "node_affinity",
                    Kind::Dict(vec![
                        Opt::new("nodes", Kind::RawDict).required(),
                        Opt::new("strict", Kind::Bool).default(json!(false)),
                    ]),
                ),
                Opt::new(
                    "resource_affinity",
                    Kind::ListOfDicts(vec![
                        Opt::new("affinity", Kind::Str)
                            .choices(&["positive", "negative"])
                            .required(),
                        Opt::new(
                            "vms",
                            Kind::List(Box::new(Kind::Int {
                                min: Some(100),
                                max: Some(999_999_999),
                            })),
                        )
                        .required(),
                    ]),
                ),
                Opt::new("failback", Kind::Bool),
                Opt::new(
                    "max_restart",
                    Kind::Int {
                        min: Some(0),
                        max: None,
                    },
                ),
                Opt::new(
                    "max_relocate",
                    Kind::Int {
                        min: Some(0),
                        max: None,
                    },
                ),
            ]),
        ),
        Opt::new(
            "efidisk",
            Kind::Dict(vec![
                Opt::new("storage", Kind::Str).required(),
                Opt::new("efitype", Kind::Str)
                    .choices(&["2m", "4m"])
                    .default(json!("4m")),
                Opt::new("pre_enrolled_keys", Kind::Bool).default(json!(false)),
                Opt::new("force", Kind::Bool).default(json!(false)),
            ]),
        ),
        Opt::new(
            "tpmstate",
            Kind::Dict(vec![
                Opt::new("storage", Kind::Str).required(),
                Opt::new("version", Kind::Str)
                    .choices(&["v1.2", "v2.0"])
                    .default(json!("v2.0")),
                Opt::new("force", Kind::Bool).default(json!(false)),
            ]),
        ),
        Opt::new(
            "cdroms",
            Kind::ListOfDicts(vec![
                Opt::new("slot", Kind::Str).required(),
                Opt::new("iso", Kind::Str),
                Opt::new("state", Kind::Str)
                    .choices(&["present", "absent"])
                    .default(json!("present")),
            ]),
        ),
    ]);
    let mut spec = Spec {
        options,
        ..Default::default()
    };
    connection::connection_rules(&mut spec);
    spec.required_one_of.push(vec!["vmid", "name"]);
    spec
}
