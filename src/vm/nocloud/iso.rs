//! The seed as bytes: an ISO 9660 image labelled `cidata` holding the seed's files, as PVE's
//! `commit_cloudinit_disk` makes one with `genisoimage -iso-level 3 -J -R -V cidata`: Rock
//! Ridge and Joliet names, so the guest's kernel shows cloud-init `user-data`, not `USER_DAT`.
//! Built in memory by `hadris-iso`; the image holds the time it was written, so a seed is
//! named by its files' content ([`super::seed::Seed::name`]), never by these bytes.

use std::io::Cursor;
use std::sync::Arc;

use hadris_iso::read::PathSeparator;
use hadris_iso::write::options::{BaseIsoLevel, CreationFeatures, IsoFormatOptions};
use hadris_iso::write::{File, InputFiles, IsoImageWriter};

use super::seed::Seed;

/// The volume id cloud-init's NoCloud datasource looks for.
pub const VOLUME_ID: &str = "cidata";

/// The seed's ISO image.
pub fn image(seed: &Seed) -> Result<Vec<u8>, String> {
    let files = InputFiles {
        path_separator: PathSeparator::ForwardSlash,
        files: seed
            .files()
            .into_iter()
            .map(|(name, contents)| File::File {
                name: Arc::new(name.to_string()),
                contents: contents.as_bytes().to_vec(),
            })
            .collect(),
    };
    let options = IsoFormatOptions {
        volume_name: VOLUME_ID.to_string(),
        sector_size: 2048,
        path_separator: PathSeparator::ForwardSlash,
        features: CreationFeatures {
            filenames: BaseIsoLevel::Level3 {
                supports_lowercase: false,
                supports_rrip: true,
            },
            ..CreationFeatures::extensions()
        },
        system_id: None,
        volume_set_id: None,
        publisher_id: None,
        preparer_id: None,
        application_id: Some("SANKOFA.PROXMOX".to_string()),
        strict_charset: false,
    };
    let mut buffer = Cursor::new(Vec::new());
    IsoImageWriter::create(&mut buffer, files, options)
        .map_err(|e| format!("writing the NoCloud seed image: {e}"))?;
    Ok(buffer.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use hadris_iso::read::IsoImage;

    #[test]
    fn the_image_holds_the_files_under_their_names_and_the_volume_id() {
        let seed = Seed::new(
            "#cloud-config\nhostname: web\n".into(),
            "instance-id: abc\n".into(),
            "version: 1\nconfig: []\n".into(),
            String::new(),
        );
        let bytes = image(&seed).expect("image");
        assert_eq!(bytes.len() % 2048, 0);
        // The primary volume descriptor (sector 16) carries the volume id at offset 40.
        let pvd = &bytes[16 * 2048..17 * 2048];
        assert_eq!(&pvd[1..6], b"CD001");
        assert_eq!(std::str::from_utf8(&pvd[40..46]).unwrap(), "cidata");
        let iso = IsoImage::open(Cursor::new(bytes)).expect("readable");
        let root = iso.root_dir();
        let mut seen = Vec::new();
        for entry in root.iter(&iso).entries() {
            let entry = entry.expect("entry");
            if entry.is_directory() {
                continue;
            }
            let name = entry.display_name().to_string();
            let content = iso.read_file(&entry).expect("read");
            seen.push((name, String::from_utf8(content).unwrap()));
        }
        seen.sort();
        assert_eq!(
            seen,
            vec![
                ("meta-data".to_string(), "instance-id: abc\n".to_string()),
                (
                    "network-config".to_string(),
                    "version: 1\nconfig: []\n".to_string()
                ),
                (
                    "user-data".to_string(),
                    "#cloud-config\nhostname: web\n".to_string()
                ),
                ("vendor-data".to_string(), String::new()),
            ]
        );
    }
}
