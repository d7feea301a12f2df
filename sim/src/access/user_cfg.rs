//! `user.cfg` as data (pve-access-control's `AccessControl.pm`): its users and their API
//! tokens, groups, roles, the ACL tree, and the pools with `$usercfg->{vms}`; and
//! `parse_user_config`, which reads the file `/etc/pve/user.cfg` holds (`--user-cfg`).
//!
//! The pools ([`UserCfg`]) are held in [`crate::state::State`], since `/pools` and creates
//! change them; the rest ([`AccessCfg`]) is fixed at start. Apart from `pools` (the `/pools`
//! handlers, which use the state, the cluster resources and the storages) so that `state` uses
//! this leaf and never `pools` back: `pools` → `state` → `user_cfg`.

use std::collections::{BTreeMap, BTreeSet};

use crate::access::roles::{self, Role};

/// One pool of `user.cfg`.
#[derive(Default, Clone, Debug)]
pub struct Pool {
    pub comment: Option<String>,
    pub vms: BTreeSet<u32>,
    pub storage: BTreeSet<String>,
}

/// The pool part of `user.cfg`: the pools and which pool each VM is in (`$usercfg->{vms}`).
#[derive(Default, Clone, Debug)]
pub struct UserCfg {
    pub pools: BTreeMap<String, Pool>,
    pub vm_pool: BTreeMap<u32, String>,
}

/// An API token of `user.cfg` (`token:` line); its secret comes from `--token`.
#[derive(Default, Clone, Debug)]
pub struct Token {
    /// Privilege separation: the token has its own ACLs, intersected with its user's.
    pub privsep: bool,
}

/// A user of `user.cfg` (`user:` line).
#[derive(Default, Clone, Debug)]
pub struct User {
    pub enable: bool,
    /// Its tokens by name (the part after `!`).
    pub tokens: BTreeMap<String, Token>,
}

/// Roles granted on one path, by role name, with their propagate flag.
pub type Grants = BTreeMap<String, bool>;

/// One node of the ACL tree (`$cfg->{acl_root}`): what is granted on this path to users,
/// groups and tokens, and the paths below it by their next segment.
#[derive(Default, Clone, Debug)]
pub struct AclNode {
    pub children: BTreeMap<String, AclNode>,
    pub users: BTreeMap<String, Grants>,
    pub groups: BTreeMap<String, Grants>,
    pub tokens: BTreeMap<String, Grants>,
}

impl AclNode {
    /// AccessControl.pm `find_acl_tree_node`: the node of a normalized path, made on the way.
    pub fn node_mut(&mut self, path: &str) -> &mut AclNode {
        path.split('/')
            .filter(|seg| !seg.is_empty())
            .fold(self, |node, seg| {
                node.children.entry(seg.into()).or_default()
            })
    }

    /// The node of a normalized path, if any ACL is on it or below it.
    #[cfg(test)]
    pub fn node(&self, path: &str) -> Option<&AclNode> {
        path.split('/')
            .filter(|seg| !seg.is_empty())
            .try_fold(self, |node, seg| node.children.get(seg))
    }

    /// AccessControl.pm `iterate_acl_tree`: every path of the tree, `/` first.
    pub fn paths(&self) -> Vec<String> {
        let mut out = vec!["/".to_string()];
        fn walk(prefix: &str, node: &AclNode, out: &mut Vec<String>) {
            for (seg, child) in &node.children {
                let path = format!("{prefix}/{seg}");
                out.push(path.clone());
                walk(&path, child, out);
            }
        }
        walk("", self, &mut out);
        out
    }
}

/// The access part of `user.cfg`, as `parse_user_config` leaves it (built-in roles and
/// `root@pam` included, `userconfig_force_defaults`).
#[derive(Clone, Debug)]
pub struct AccessCfg {
    /// The PVE version whose privileges and built-in roles apply (`--pve-version`).
    pub version: String,
    pub users: BTreeMap<String, User>,
    /// Each group's members.
    pub groups: BTreeMap<String, BTreeSet<String>>,
    pub roles: BTreeMap<String, Role>,
    pub acl_root: AclNode,
    /// The pools as the file has them; the state starts from these.
    pub pools: UserCfg,
}

/// The role pve-sim gives a `--user NAME:PASSWORD:nosysaudit` that `user.cfg` lacks.
pub const NO_SYS_AUDIT_ROLE: &str = "PVESimNoSysAudit";

/// The kinds of `--user` (`:audit`, `:nosysaudit`, or neither).
#[derive(Clone, Copy, Debug)]
pub enum LegacyKind {
    Admin,
    Audit,
    NoSysAudit,
}

/// pve-common `PVE::Tools::split_list`: items separated by commas, semicolons or blanks.
fn split_list(text: &str) -> impl Iterator<Item = &str> {
    text.split([',', ';', ' ', '\t']).filter(|s| !s.is_empty())
}

fn name_chars(text: &str) -> bool {
    !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
}

/// pve-access-control `PVE::Auth::Plugin::verify_username`: `user@realm`, the user without
/// blanks, `:` or `/`, the realm a letter and then letters, digits, `.`, `-` or `_`.
pub fn is_userid(text: &str) -> bool {
    let Some((user, realm)) = text.rsplit_once('@') else {
        return false;
    };
    !user.is_empty()
        && !user.contains(|c: char| c.is_whitespace() || c == ':' || c == '/')
        && realm.len() >= 2
        && realm.starts_with(|c: char| c.is_ascii_alphabetic())
        && name_chars(realm)
}

/// AccessControl.pm `split_tokenid`: `user@realm!name` as the user and the token's name.
pub fn split_tokenid(text: &str) -> Option<(&str, &str)> {
    let (user, token) = text.split_once('!')?;
    (is_userid(user) && token.starts_with(|c: char| c.is_ascii_alphabetic()) && name_chars(token))
        .then_some((user, token))
}

/// AccessControl.pm `verify_poolname`: up to three `/`-separated names.
fn is_poolname(text: &str) -> bool {
    let parts: Vec<&str> = text.split('/').collect();
    parts.len() <= 3 && parts.iter().all(|p| name_chars(p))
}

/// AccessControl.pm `normalize_path`: one `/` between segments, none at the end, a leading
/// one, and only letters, digits, `.`, `-`, `_` and `/`.
pub fn normalize_path(text: &str) -> Option<String> {
    if text.is_empty() {
        return None;
    }
    let segs: Vec<&str> = text.split('/').filter(|s| !s.is_empty()).collect();
    let path = format!("/{}", segs.join("/"));
    path.bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b'/'))
        .then_some(path)
}

impl AccessCfg {
    /// An empty `user.cfg` of a PVE version, as `parse_user_config` makes it.
    pub fn new(version: &str) -> AccessCfg {
        let mut cfg = AccessCfg {
            version: version.into(),
            users: BTreeMap::new(),
            groups: BTreeMap::new(),
            roles: BTreeMap::new(),
            acl_root: AclNode::default(),
            pools: UserCfg::default(),
        };
        cfg.force_defaults();
        cfg
    }

    /// AccessControl.pm `userconfig_force_defaults`: the built-in roles, and `root@pam`.
    fn force_defaults(&mut self) {
        self.roles.extend(roles::builtin_roles(&self.version));
        self.users.entry("root@pam".into()).or_insert(User {
            enable: true,
            tokens: BTreeMap::new(),
        });
    }

    /// Grants `role` on `path` to a user, `@group` or token, as an `acl:` line does.
    pub fn grant(&mut self, path: &str, who: &str, role: &str, propagate: bool) {
        let node = self.acl_root.node_mut(path);
        let table = if let Some(group) = who.strip_prefix('@') {
            node.groups.entry(group.into()).or_default()
        } else if who.contains('!') {
            node.tokens.entry(who.into()).or_default()
        } else {
            node.users.entry(who.into()).or_default()
        };
        table.insert(role.into(), propagate);
    }

    /// A `--user` that `user.cfg` does not name, as pve-sim's kinds of users before
    /// `--user-cfg`: an administrator (`Administrator` on `/`), a read-only user
    /// (`PVEAuditor` on `/`), or one without `Sys.Audit` (the role [`NO_SYS_AUDIT_ROLE`] on
    /// `/`, every privilege but `Sys.Audit` and `Sys.Modify`).
    pub fn add_legacy_user(&mut self, user: &str, kind: LegacyKind) {
        if self.users.contains_key(user) {
            return;
        }
        self.users.insert(
            user.into(),
            User {
                enable: true,
                tokens: BTreeMap::new(),
            },
        );
        let role = match kind {
            LegacyKind::Admin => "Administrator",
            LegacyKind::Audit => "PVEAuditor",
            LegacyKind::NoSysAudit => {
                let privs = roles::privileges(&self.version)
                    .into_iter()
                    .filter(|p| !matches!(*p, "Sys.Audit" | "Sys.Modify"))
                    .map(String::from)
                    .collect();
                self.roles.insert(NO_SYS_AUDIT_ROLE.into(), privs);
                NO_SYS_AUDIT_ROLE
            }
        };
        self.grant("/", user, role, true);
    }

    /// A `--token` that `user.cfg` does not name: a token without privilege separation, of
    /// a user added as an administrator when neither `user.cfg` nor `--user` has it.
    pub fn add_legacy_token(&mut self, tokenid: &str) {
        let Some((user, name)) = split_tokenid(tokenid) else {
            return;
        };
        self.add_legacy_user(user, LegacyKind::Admin);
        if let Some(owner) = self.users.get_mut(user) {
            owner.tokens.entry(name.into()).or_default();
        }
    }

    /// The token `user@realm!name`, if `user.cfg` has it.
    pub fn token(&self, tokenid: &str) -> Option<&Token> {
        let (user, name) = split_tokenid(tokenid)?;
        self.users.get(user)?.tokens.get(name)
    }

    /// AccessControl.pm `parse_user_config`. Where PVE warns and ignores a line, this
    /// refuses the file with PVE's warning, so that a test's typo does not pass unseen.
    pub fn parse(text: &str, version: &str) -> Result<AccessCfg, String> {
        let mut cfg = AccessCfg::new(version);
        for (n, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() {
                continue;
            }
            cfg.parse_line(line)
                .map_err(|warning| format!("user.cfg line {}: user config - {warning}", n + 1))?;
        }
        cfg.force_defaults();
        Ok(cfg)
    }

    fn parse_line(&mut self, line: &str) -> Result<(), String> {
        let data: Vec<&str> = line.split(':').map(str::trim).collect();
        let field = |i: usize| data.get(i).copied().unwrap_or("");
        let flag = |i: usize| !matches!(field(i), "" | "0");
        match data[0] {
            "user" => {
                let user = field(1);
                if !is_userid(user) {
                    return Err(format!("ignore user '{user}' - invalid user name"));
                }
                let expire = field(3);
                if !expire.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(format!(
                        "ignore user '{user}' - (illegal characters in expire '{expire}')"
                    ));
                }
                self.users.insert(
                    user.into(),
                    User {
                        enable: flag(2),
                        tokens: BTreeMap::new(),
                    },
                );
            }
            "group" => {
                let group = field(1);
                if !name_chars(group) {
                    return Err(format!(
                        "ignore group '{group}' - invalid characters in group name"
                    ));
                }
                let members = self.groups.entry(group.into()).or_default();
                for user in split_list(field(2)) {
                    if !is_userid(user) || !self.users.contains_key(user) {
                        return Err(format!("ignore invalid group member '{user}'"));
                    }
                    members.insert(user.into());
                }
            }
            "role" => {
                let role = field(1);
                if !name_chars(role) {
                    return Err(format!(
                        "ignore role '{role}' - invalid characters in role name"
                    ));
                }
                let privs = self.roles.entry(role.into()).or_default();
                for privilege in split_list(field(2)) {
                    if !roles::is_privilege(privilege, &self.version) {
                        return Err(format!("ignore invalid privilege '{privilege}'"));
                    }
                    privs.insert(privilege.into());
                }
            }
            "acl" => {
                let propagate = flag(1);
                let Some(path) = normalize_path(field(2)) else {
                    return Err(format!("ignore invalid path in acl '{}'", field(2)));
                };
                for role in split_list(field(4)) {
                    if !self.roles.contains_key(role) {
                        return Err(format!("ignore invalid acl role '{role}'"));
                    }
                    for who in split_list(field(3)) {
                        if let Some(group) = who.strip_prefix('@') {
                            if !self.groups.contains_key(group) {
                                return Err(format!("ignore invalid acl group '{group}'"));
                            }
                        } else if is_userid(who) {
                            if !self.users.contains_key(who) {
                                return Err(format!("ignore invalid acl member '{who}'"));
                            }
                        } else if split_tokenid(who).is_some() {
                            if self.token(who).is_none() {
                                return Err(format!("ignore invalid acl token '{who}'"));
                            }
                        } else {
                            return Err(format!("invalid user/group '{who}' in acl"));
                        }
                        self.grant(&path, who, role, propagate);
                    }
                }
            }
            "pool" => {
                let pool = field(1);
                if !is_poolname(pool) {
                    return Err(format!(
                        "ignore pool '{pool}' - invalid characters in pool name"
                    ));
                }
                let mut name = pool;
                while let Some((parent, _)) = name.rsplit_once('/') {
                    self.pools.pools.entry(parent.into()).or_default();
                    name = parent;
                }
                let entry = self.pools.pools.entry(pool.into()).or_default();
                if !field(2).is_empty() {
                    entry.comment = Some(field(2).into());
                }
                for vmid in split_list(field(3)) {
                    let Ok(id) = vmid.parse::<u32>() else {
                        return Err(format!("ignore invalid vmid '{vmid}' in pool '{pool}'"));
                    };
                    if self.pools.vm_pool.contains_key(&id) {
                        return Err(format!("ignore duplicate vmid '{vmid}' in pool '{pool}'"));
                    }
                    entry.vms.insert(id);
                    self.pools.vm_pool.insert(id, pool.into());
                }
                for sid in split_list(field(4)) {
                    entry.storage.insert(sid.into());
                }
            }
            "token" => {
                let tokenid = field(1);
                let Some((user, name)) = split_tokenid(tokenid) else {
                    return Err(format!("ignore invalid tokenid '{tokenid}'"));
                };
                let Some(owner) = self.users.get_mut(user) else {
                    return Err(format!("ignore token '{tokenid}' - user does not exist"));
                };
                owner.tokens.insert(name.into(), Token { privsep: flag(3) });
            }
            _ => return Err(format!("ignore config line: {line}")),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "\
user:root@pam:1:0:::root@example.com:::
user:ci@pve:1:0::::::
token:ci@pve!deploy:0:1::
group:ops:ci@pve::
role:Deployer:VM.Allocate,VM.PowerMgmt Datastore.AllocateSpace:
pool:web:web servers:100,101:local-lvm:
pool:web/eu::102::
acl:1:/pool/web:ci@pve!deploy:PVEVMAdmin:
acl:0:/vms/100:@ops:Deployer,PVEAuditor:
";

    // AccessControl.pm parse_user_config, with write_user_config's line order.
    #[test]
    fn parse_user_config_reads_each_kind_of_line() {
        let cfg = AccessCfg::parse(FILE, "9.1").unwrap();
        assert!(cfg.users["ci@pve"].enable);
        assert!(cfg.token("ci@pve!deploy").unwrap().privsep);
        assert_eq!(cfg.groups["ops"], BTreeSet::from(["ci@pve".to_string()]));
        assert_eq!(cfg.roles["Deployer"].len(), 3);
        assert!(cfg.roles.contains_key("PVEVMAdmin"));
        assert_eq!(cfg.pools.vm_pool[&102], "web/eu");
        assert_eq!(cfg.pools.pools["web"].storage.len(), 1);
        let pool_node = cfg.acl_root.node("/pool/web").unwrap();
        assert!(pool_node.tokens["ci@pve!deploy"]["PVEVMAdmin"]);
        let vm_node = cfg.acl_root.node("/vms/100").unwrap();
        assert_eq!(vm_node.groups["ops"].len(), 2);
        assert!(!vm_node.groups["ops"]["Deployer"]);
        assert_eq!(
            cfg.acl_root.paths(),
            ["/", "/pool", "/pool/web", "/vms", "/vms/100"]
        );
    }

    // parse_user_config warns "ignore invalid privilege" and the like; pve-sim refuses.
    #[test]
    fn lines_pve_ignores_are_refused_with_pves_warning() {
        for (text, warning) in [
            ("role:R:VM.Nope:", "ignore invalid privilege 'VM.Nope'"),
            (
                "acl:1:/:nobody@pve:PVEAdmin:",
                "ignore invalid acl member 'nobody@pve'",
            ),
            ("acl:1:/:root@pam:Nope:", "ignore invalid acl role 'Nope'"),
            (
                "token:x@pve!t:0:1::",
                "ignore token 'x@pve!t' - user does not exist",
            ),
            ("bogus:1", "ignore config line: bogus:1"),
            (
                "role:R:VM.Monitor:",
                "ignore invalid privilege 'VM.Monitor'",
            ),
        ] {
            let err = AccessCfg::parse(text, "9.1").unwrap_err();
            assert!(err.ends_with(warning), "{err}");
        }
    }

    // normalize_path.
    #[test]
    fn paths_are_normalized_as_pve_does() {
        assert_eq!(normalize_path("//vms//100/").as_deref(), Some("/vms/100"));
        assert_eq!(normalize_path("/").as_deref(), Some("/"));
        assert_eq!(normalize_path("storage").as_deref(), Some("/storage"));
        assert_eq!(normalize_path("/vms/1 0"), None);
    }
}
