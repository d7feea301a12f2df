//! What the `image` module must do, from what the storage holds. Pure.

use super::spec::Desired;

/// One action.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// `DELETE …/content/{volid}` (before a forced download, or for `absent`).
    Delete,
    /// `POST …/download-url`. With a checksum on an existing file, PVE verifies the file and
    /// downloads nothing when it matches.
    Download,
}

/// The steps for an image that `exists` (or not) on the storage.
pub fn plan(desired: &Desired, exists: bool) -> Vec<Step> {
    match (desired.present, exists) {
        (false, true) => vec![Step::Delete],
        (false, false) => vec![],
        (true, false) => vec![Step::Download],
        (true, true) if desired.force => vec![Step::Delete, Step::Download],
        // PVE checks an existing file against the checksum without downloading it again.
        (true, true) if desired.checksum.is_some() => vec![Step::Download],
        (true, true) => vec![],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desired(present: bool, checksum: bool, force: bool) -> Desired {
        Desired {
            present,
            node: "pve1".into(),
            storage: "local".into(),
            content: "import".into(),
            filename: "a.qcow2".into(),
            url: Some("http://x/a.qcow2".into()),
            checksum: checksum.then(|| ("sha256".into(), "0".repeat(64))),
            verify_certificates: true,
            force,
        }
    }

    #[test]
    fn steps() {
        assert_eq!(
            plan(&desired(true, false, false), false),
            vec![Step::Download]
        );
        assert_eq!(plan(&desired(true, false, false), true), vec![]);
        assert_eq!(
            plan(&desired(true, true, false), true),
            vec![Step::Download]
        );
        assert_eq!(
            plan(&desired(true, false, true), true),
            vec![Step::Delete, Step::Download]
        );
        assert_eq!(
            plan(&desired(false, false, false), true),
            vec![Step::Delete]
        );
        assert_eq!(plan(&desired(false, false, false), false), vec![]);
    }
}
