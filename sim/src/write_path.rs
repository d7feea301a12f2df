//! The VM config write path: how a value given to create or update becomes what the config
//! file holds, and how GET answers it.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::api_schema;
use crate::qemu_config::random_mac;
use crate::schema::{self, Ty};
use crate::state::Sim;

/// Normalises a non-drive config value the way PVE writes it to the config file.
pub(crate) fn normalize(sim: &Sim, key: &str, value: &str) -> String {
    match api_schema::config_key_type(key) {
        Some(Ty::Bool) => {
            (if ["1", "true", "yes", "on"].contains(&value.to_ascii_lowercase().as_str()) {
                "1"
            } else {
                "0"
            })
            .into()
        }
        _ if key.starts_with("net") => {
            let mut kv = api_schema::parse_net(value).unwrap_or_default();
            if !kv.contains_key("macaddr") {
                kv.insert("macaddr".into(), random_mac(sim));
            }
            schema::print_net(&kv)
        }
        _ if key == "memory" => value.strip_prefix("current=").unwrap_or(value).to_string(),
        _ if key == "cipassword" => {
            // PVE stores a crypt() hash for Linux guests; only its presence matters here.
            let d = ring::digest::digest(&ring::digest::SHA256, value.as_bytes());
            format!(
                "$5$pvesim${}",
                d.as_ref()
                    .iter()
                    .take(16)
                    .map(|b| format!("{b:02x}"))
                    .collect::<String>()
            )
        }
        _ => value.to_string(),
    }
}

pub(crate) fn default_boot(conf: &BTreeMap<String, String>) -> String {
    let mut disks = Vec::new();
    let mut cds = Vec::new();
    for bus in ["ide", "sata", "scsi", "virtio"] {
        let mut keys: Vec<(u32, &String)> = conf
            .keys()
            .filter_map(|k| {
                k.strip_prefix(bus)
                    .and_then(|n| n.parse().ok())
                    .map(|n| (n, k))
            })
            .collect();
        keys.sort();
        for (_, k) in keys {
            let v = &conf[k];
            if v.contains("cloudinit") {
                continue;
            }
            if v.contains("media=cdrom") {
                cds.push(k.clone())
            } else {
                disks.push(k.clone())
            }
        }
    }
    let mut order = disks;
    order.extend(cds);
    if conf.contains_key("net0") {
        order.push("net0".into());
    }
    format!("order={}", order.join(";"))
}

/// A config value typed as PVE returns it, `cipassword` masked.
pub(crate) fn typed(k: &str, v: &str) -> Value {
    match (k, api_schema::config_key_type(k)) {
        ("cipassword", _) => json!("**********"),
        (_, Some(Ty::Int(..)) | Some(Ty::Bool)) => {
            v.parse::<i64>().map(|n| json!(n)).unwrap_or(json!(v))
        }
        (_, Some(Ty::Num(..))) => v.parse::<f64>().map(|n| json!(n)).unwrap_or(json!(v)),
        _ => json!(v),
    }
}
