//! Reading the files a user points the module at (the arguments file, `ca_path`): only
//! regular files, and only up to what such a file can legitimately hold, so `/dev/zero`, a
//! FIFO or a mistaken multi-gigabyte file ends in a clear error instead of a hang or an
//! exhausted memory.

use std::io::Read;

/// Reads a regular file of at most `max` bytes. `what` names it in errors (`ca_path`).
pub fn read_bounded(path: &str, max: u64, what: &str) -> Result<Vec<u8>, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("{what} {path}: {e}"))?;
    if !meta.is_file() {
        return Err(format!("{what} {path}: not a regular file"));
    }
    if meta.len() > max {
        return Err(format!(
            "{what} {path}: {} bytes, more than such a file holds (at most {max})",
            meta.len()
        ));
    }
    let mut data = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(max + 1).read_to_end(&mut data))
        .map_err(|e| format!("{what} {path}: {e}"))?;
    if data.len() as u64 > max {
        return Err(format!("{what} {path}: grew past {max} bytes while read"));
    }
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_bounded_regular_files() {
        assert!(
            read_bounded("/dev/zero", 1024, "ca_path")
                .unwrap_err()
                .contains("not a regular file")
        );
        assert!(read_bounded("/", 1024, "ca_path").is_err());
        let p = std::env::temp_dir().join(format!("sankofa-files-{}", std::process::id()));
        std::fs::write(&p, vec![b'x'; 2048]).unwrap();
        let path = p.to_str().unwrap();
        assert!(
            read_bounded(path, 1024, "ca_path")
                .unwrap_err()
                .contains("2048 bytes")
        );
        assert_eq!(read_bounded(path, 4096, "ca_path").unwrap().len(), 2048);
        std::fs::remove_file(&p).unwrap();
    }
}
