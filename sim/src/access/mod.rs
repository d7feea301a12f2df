//! Who may do what, after pve-access-control: the caller's identity (tickets, API tokens,
//! privileges), the read-only user, group and realm lists, and `user.cfg`'s pools (the
//! `/pools` API is pve-manager's `API2/Pool.pm`, over AccessControl.pm's pool data).

pub mod identity;
pub mod lists;
pub mod pools;
pub mod user_cfg;
