//! The `image` module's options and the image they describe.

use serde_json::json;

use crate::ansible::protocol::Invocation;
use crate::ansible::spec::{Kind, Opt, Spec, given};
use crate::ansible::text::quote;
use crate::{connection, runner};

/// The image asked for.
#[derive(Clone, Debug, PartialEq)]
pub struct Desired {
    pub present: bool,
    pub node: String,
    pub storage: String,
    pub content: String,
    pub filename: String,
    pub url: Option<String>,
    /// (algorithm, lower-case hex digest)
    pub checksum: Option<(String, String)>,
    pub verify_certificates: bool,
    pub force: bool,
}

impl Desired {
    /// The volume id PVE gives the file (`local:import/noble.qcow2`).
    pub fn volid(&self) -> String {
        format!("{}:{}/{}", self.storage, self.content, self.filename)
    }
}

/// The `image` module's argument spec.
pub fn argument_spec() -> Spec {
    let mut options = connection::connection_options();
    options.extend(runner::wait_options("30m"));
    options.extend(vec![
        Opt::new("state", Kind::Str)
            .default(json!("present"))
            .choices(&["present", "absent"]),
        Opt::new("node", Kind::Str).required(),
        Opt::new("storage", Kind::Str).default(json!("local")),
        Opt::new("url", Kind::Str),
        Opt::new("filename", Kind::Str),
        Opt::new("checksum", Kind::Str),
        Opt::new("checksum_algorithm", Kind::Str)
            .default(json!("sha256"))
            .choices(&["md5", "sha1", "sha224", "sha256", "sha384", "sha512"]),
        Opt::new("content", Kind::Str)
            .default(json!("import"))
            .choices(&["import", "iso"]),
        Opt::new("verify_certificates", Kind::Bool).default(json!(true)),
        Opt::new("force", Kind::Bool).default(json!(false)),
    ]);
    let mut spec = Spec {
        options,
        ..Default::default()
    };
    connection::connection_rules(&mut spec);
    spec.required_if.push(("state", "present", vec!["url"]));
    spec.required_one_of.push(vec!["url", "filename"]);
    spec
}

const IMPORT_EXT: &[&str] = &[".qcow2", ".raw", ".vmdk", ".ova"];
const ISO_EXT: &[&str] = &[".iso", ".img"];

/// pve-storage Storage.pm, normalize_content_filename: every character outside
/// `[a-zA-Z0-9_.-]` becomes `_` in the name download-url stores.
pub fn pve_normalized(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The longest file name `download-url` takes (its schema's maxLength).
const MAX_FILENAME: usize = 255;

/// The file name PVE will store: given, or the URL's last path segment (normalised as PVE
/// normalises it); for `import`, an Ubuntu-style `.img` (a qcow2) is saved as `.qcow2`, as PVE
/// requires. A given name that PVE would change is refused, so the `volid` reported and used
/// is the one PVE really stores.
pub fn filename(given: Option<&str>, url: Option<&str>, content: &str) -> Result<String, String> {
    let name = match (given, url) {
        (Some(f), _) => {
            let stored = pve_normalized(f);
            if stored != f && !f.contains(['/', '\\']) {
                let stored = crate::ansible::text::bounded(&stored);
                return Err(format!(
                    "filename {:?}: PVE would store it as {stored:?} (download-url replaces \
                     every character outside a-z, A-Z, 0-9, '_', '.', '-' with '_'); give \
                     filename: {stored}",
                    crate::ansible::text::bounded(f)
                ));
            }
            f.to_string()
        }
        (None, Some(u)) => {
            let path = u.split(['?', '#']).next().unwrap_or(u);
            let last = path.rsplit('/').next().unwrap_or("");
            let last = pve_normalized(&crate::pve::encode::url_decode(last));
            if content == "import" {
                match last.strip_suffix(".img") {
                    Some(stem) => format!("{stem}.qcow2"),
                    None => last,
                }
            } else {
                last
            }
        }
        (None, None) => return Err("filename or url is required".into()),
    };
    if name.is_empty()
        || name.starts_with('.')
        || name.contains(['/', '\\', ',', '=', ':', '\n', '\r', ' '])
    {
        return Err(format!(
            "filename must be a plain file name (no '/', ',', '=', ':', spaces), got {:?}",
            crate::ansible::text::bounded(&name)
        ));
    }
    // download-url's schema: `filename` maxLength 255.
    if name.len() > MAX_FILENAME {
        return Err(format!(
            "filename is {} bytes long; PVE allows at most {MAX_FILENAME}",
            name.len()
        ));
    }
    // PVE matches import extensions case-sensitively, ISO ones not (Status.pm, download_url).
    let (exts, candidate) = if content == "import" {
        (IMPORT_EXT, name.clone())
    } else {
        (ISO_EXT, name.to_ascii_lowercase())
    };
    let lower = name.to_ascii_lowercase();
    if !exts.iter().any(|e| candidate.ends_with(e)) {
        return Err(format!(
            "filename {:?}: for content {content} PVE accepts {}{}",
            crate::ansible::text::bounded(&name),
            exts.join(", "),
            if content == "import" && lower.ends_with(".img") {
                " (an Ubuntu .img is a qcow2: name it .qcow2)"
            } else {
                ""
            }
        ));
    }
    Ok(name)
}

/// Builds the desired image from validated options.
pub fn desired(inv: &Invocation) -> Result<Desired, String> {
    let content = given(inv.str("content"), "content")?.to_string();
    let url = inv.str("url").map(str::to_string);
    if let Some(u) = &url {
        if !(u.starts_with("http://") || u.starts_with("https://")) {
            return Err(format!(
                "url must be an http:// or https:// URL, got {u}",
                u = quote(u)
            ));
        }
        // A tab, a newline or any other control character (or a space) cannot be part of
        // a URL; percent-encode it (%09, %20).
        if let Some(c) = u.chars().find(|c| c.is_control() || c.is_whitespace()) {
            return Err(format!(
                "url must not contain {c:?} (percent-encode it), got {u}",
                u = quote(u)
            ));
        }
    }
    let checksum = match inv.str("checksum") {
        Some(c) => {
            let c = c.trim().to_ascii_lowercase();
            let algo = given(inv.str("checksum_algorithm"), "checksum_algorithm")?.to_string();
            let len = match algo.as_str() {
                "md5" => 32,
                "sha1" => 40,
                "sha224" => 56,
                "sha256" => 64,
                "sha384" => 96,
                _ => 128,
            };
            if c.len() != len || !c.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(format!(
                    "checksum must be {len} hex digits for checksum_algorithm {algo}"
                ));
            }
            Some((algo, c))
        }
        None => None,
    };
    Ok(Desired {
        present: inv.str("state") != Some("absent"),
        node: crate::ids::node_name("node", inv.str("node").unwrap_or_default())?,
        storage: crate::ids::storage_id("storage", given(inv.str("storage"), "storage")?)?,
        filename: filename(inv.str("filename"), url.as_deref(), &content)?,
        content,
        url,
        checksum,
        verify_certificates: given(inv.bool("verify_certificates"), "verify_certificates")?,
        force: given(inv.bool("force"), "force")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filenames_follow_pves_rules() {
        let u = "https://cloud-images.ubuntu.com/noble/current/noble-server-cloudimg-amd64.img";
        assert_eq!(
            filename(None, Some(u), "import").unwrap(),
            "noble-server-cloudimg-amd64.qcow2"
        );
        assert_eq!(
            filename(None, Some(u), "iso").unwrap(),
            "noble-server-cloudimg-amd64.img"
        );
        assert_eq!(
            filename(None, Some("https://x/debian-12.qcow2?raw=1"), "import").unwrap(),
            "debian-12.qcow2"
        );
        assert!(
            filename(Some("noble.img"), None, "import")
                .unwrap_err()
                .contains("name it .qcow2")
        );
        assert!(filename(Some("../etc/passwd.qcow2"), None, "import").is_err());
        assert!(filename(Some("a.qcow2,format=raw"), None, "import").is_err());
        assert!(filename(None, Some("https://x/"), "import").is_err());
        // PVE's normalisation: a name from the URL is stored as PVE stores it; a given name
        // PVE would change is refused with the name it would store.
        assert_eq!(
            filename(None, Some("https://x/my%20image%20(1).qcow2"), "import").unwrap(),
            "my_image__1_.qcow2"
        );
        let e = filename(Some("my image.qcow2"), None, "import").unwrap_err();
        assert!(e.contains("\"my_image.qcow2\""), "{e}");
        assert!(filename(Some("noble.QCOW2"), None, "import").is_err());
        assert_eq!(filename(Some("X.ISO"), None, "iso").unwrap(), "X.ISO");
        let long = "a".repeat(1 << 20) + " .qcow2";
        let e = filename(Some(&long), None, "import").unwrap_err();
        assert!(e.len() < 4096, "the message quoted the whole value");
    }
}
