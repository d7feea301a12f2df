//! The pool part of `user.cfg` as data (pve-access-control's `AccessControl.pm`: its pools and
//! `$usercfg->{vms}`), held in [`crate::state::State`].
//!
//! Apart from `pools` (the `/pools` handlers, which use the state, the cluster resources and
//! the storages) so that `state` uses this leaf and never `pools` back: `pools` → `state` →
//! `user_cfg`.

use std::collections::{BTreeMap, BTreeSet};

/// One pool of `user.cfg`.
#[derive(Default, Clone)]
pub struct Pool {
    pub comment: Option<String>,
    pub vms: BTreeSet<u32>,
    pub storage: BTreeSet<String>,
}

/// The pool part of `user.cfg`: the pools and which pool each VM is in (`$usercfg->{vms}`).
#[derive(Default)]
pub struct UserCfg {
    pub pools: BTreeMap<String, Pool>,
    pub vm_pool: BTreeMap<u32, String>,
}
