//! Storages, after pve-storage: volumes on real files made, imported, resized and snapshotted
//! with the real `qemu-img`, `storage.cfg` as data and its `API2/Storage/Config.pm`, the
//! node's storage list and volume deletion (`Status.pm`, `Content.pm`), and `download-url` and
//! `upload`.

pub mod config;
pub mod download;
pub mod status;
pub mod storage_cfg;
pub mod upload;
pub mod volume_snapshots;
pub mod volumes;
