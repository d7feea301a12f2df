//! Who may do what, after pve-access-control: the caller's identity (tickets, API tokens),
//! `user.cfg` (users, tokens, groups, roles, ACLs, pools), the privileges a user or token has
//! on a path and the checks on them (with each endpoint's schema `permissions`), the
//! read-only user, group and realm lists, and the `/pools` API (pve-manager's
//! `API2/Pool.pm`, over AccessControl.pm's pool data).

pub mod acl;
pub mod api_perms;
pub mod check;
pub mod identity;
pub mod lists;
pub mod pools;
pub mod roles;
pub mod user_cfg;
pub mod visibility;
