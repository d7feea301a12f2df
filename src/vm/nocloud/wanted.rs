//! The `nocloud` option, checked before any request: each part as the text the seed holds
//! (a dict dumped as `#cloud-config` YAML; a `#cloud-config` text, a network-config or a
//! meta-data parsed as YAML, refused naming the line), the ISO storage, and whether the
//! secret parts may be shown (`show_data`).

use serde_json::Value;

use super::seed::Parts;
use crate::ansible::protocol::{Invocation, register_secret};
use crate::ansible::spec::given;
use crate::ids::storage_id;

/// What the `nocloud` option asks for.
#[derive(Clone, Debug, PartialEq)]
pub struct Nocloud {
    pub parts: Parts,
    /// The ISO-capable storage the seed is uploaded to.
    pub storage: String,
    /// `show_data`: user-data and vendor-data may appear in the result and the diff.
    pub show_data: bool,
}

/// The headers cloud-init reads user-data and vendor-data by (cloudinit/handlers): a text
/// with another first line is not a part cloud-init runs.
const USER_DATA_HEADERS: &[&str] = &[
    "#cloud-config",
    "#!",
    "#include",
    "#cloud-boothook",
    "#part-handler",
    "#cloud-config-archive",
    "#cloud-config-jsonp",
    "## template: jinja",
    "Content-Type:",
    "MIME-Version:",
];

/// The `nocloud` option, or `None` when it is not given.
pub fn wanted(inv: &Invocation) -> Result<Option<Nocloud>, String> {
    let Some(option) = inv.params.get("nocloud").and_then(Value::as_object) else {
        return Ok(None);
    };
    if inv.str("cloudinit_storage").is_some() {
        return Err(
            "nocloud and cloudinit_storage exclude each other: nocloud attaches its own seed \
             ISO, and a second cidata volume beside PVE's cloud-init drive confuses cloud-init"
                .into(),
        );
    }
    let show_data = given(
        option.get("show_data").and_then(Value::as_bool),
        "nocloud.show_data",
    )?;
    let storage = storage_id(
        "nocloud.storage",
        given(
            option.get("storage").and_then(Value::as_str),
            "nocloud.storage",
        )?,
    )?;
    let script_part = |key: &str| -> Result<Option<String>, String> {
        let text = match option.get(key) {
            None | Some(Value::Null) => return Ok(None),
            Some(Value::Object(dict)) => cloud_config(key, dict)?,
            Some(Value::String(text)) => {
                let first = text.lines().next().unwrap_or_default();
                if !USER_DATA_HEADERS.iter().any(|h| first.starts_with(h)) {
                    return Err(format!(
                        "nocloud.{key} must begin with #cloud-config (YAML), #! (a script) or \
                         another header cloud-init reads, or be a dict; its first line is not one"
                    ));
                }
                if first.trim_end() == "#cloud-config" {
                    yaml_mapping(key, text)?;
                }
                text.clone()
            }
            Some(_) => return Err(format!("nocloud.{key} must be a string or a dict")),
        };
        if !show_data {
            register_secret(&text);
            if let Some(Value::Object(dict)) = option.get(key) {
                register_secret(&Value::Object(dict.clone()).to_string());
            }
        }
        Ok(Some(text))
    };
    let yaml_part = |key: &str| -> Result<Option<String>, String> {
        match option.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Object(dict)) => serde_yaml_ng::to_string(dict)
                .map(Some)
                .map_err(|e| format!("nocloud.{key}: {e}")),
            Some(Value::String(text)) => {
                yaml_mapping(key, text)?;
                Ok(Some(text.clone()))
            }
            Some(_) => Err(format!("nocloud.{key} must be a string (YAML) or a dict")),
        }
    };
    let parts = Parts {
        user_data: script_part("user_data")?,
        vendor_data: script_part("vendor_data")?,
        network_config: yaml_part("network_config")?,
        meta_data: yaml_part("meta_data")?,
    };
    Ok(Some(Nocloud {
        parts,
        storage,
        show_data,
    }))
}

/// A dict as `#cloud-config` YAML.
fn cloud_config(key: &str, dict: &serde_json::Map<String, Value>) -> Result<String, String> {
    let yaml = serde_yaml_ng::to_string(dict).map_err(|e| format!("nocloud.{key}: {e}"))?;
    Ok(format!("#cloud-config\n{yaml}"))
}

/// Refuses a text that is not YAML, or not a mapping, naming the line (the text itself is
/// never quoted: user-data is secret).
fn yaml_mapping(key: &str, text: &str) -> Result<(), String> {
    match serde_yaml_ng::from_str::<serde_yaml_ng::Value>(text) {
        Ok(serde_yaml_ng::Value::Mapping(_)) => Ok(()),
        Ok(serde_yaml_ng::Value::Null) => Ok(()),
        Ok(_) => Err(format!(
            "nocloud.{key} is YAML but not a mapping (key: value lines), which cloud-init needs"
        )),
        Err(e) => {
            let at = e
                .location()
                .map(|at| format!(" at line {}, column {}", at.line(), at.column()))
                .unwrap_or_default();
            let why = e.to_string();
            // serde_yaml's message ends with its own "at line N column M".
            let why = why.split(" at line ").next().unwrap_or(&why);
            Err(format!("nocloud.{key} is not valid YAML{at}: {why}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_yaml_is_refused_naming_the_line() {
        let err = yaml_mapping(
            "user_data",
            "#cloud-config\npackages:\n  - nginx\n runcmd: [x]\n",
        )
        .unwrap_err();
        assert!(
            err.starts_with("nocloud.user_data is not valid YAML at line 4"),
            "{err}"
        );
        assert!(yaml_mapping("user_data", "#cloud-config\npackages: [nginx]\n").is_ok());
        let err = yaml_mapping("meta_data", "- a\n- b\n").unwrap_err();
        assert!(err.contains("not a mapping"), "{err}");
    }

    #[test]
    fn a_dict_is_dumped_as_cloud_config() {
        let dict = serde_json::json!({"packages": ["nginx"], "package_update": true});
        let text = cloud_config("user_data", dict.as_object().unwrap()).unwrap();
        assert!(text.starts_with("#cloud-config\n"), "{text}");
        let back: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).unwrap();
        assert_eq!(back["packages"][0].as_str(), Some("nginx"));
        assert_eq!(back["package_update"].as_bool(), Some(true));
    }
}
