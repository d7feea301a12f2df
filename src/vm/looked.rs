//! What a find by name looked at, kept for the claim after the create: the leaf both the
//! run's state (`shell::Runner`) and the find (`find.rs`) name, so that neither uses the
//! other back.

use std::collections::BTreeSet;

/// What a find by name looked at, for the claim after the create
/// ([`crate::pve::api::named::came_since`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Looked {
    /// The VMs of its listing: their names were read, or their creates waited for.
    pub(super) seen: BTreeSet<u32>,
    /// When it listed them, by the API node's clock (the answer's `Date`).
    pub(super) listed_at: Option<u64>,
    /// Whether the cluster's recent tasks list every user's tasks to this user or token
    /// (`Sys.Audit` on `/`, shown by a read of datacenter.cfg's options, which PVE asks it
    /// for).
    pub(super) every_users_tasks: bool,
}
