//! Every API path this client calls, in one place and by PVE's own grouping: the cluster
//! (pve-manager API2/Cluster.pm), a node's tasks (API2/Tasks.pm), its VMs (qemu-server
//! API2/Qemu.pm, API2/Qemu/Agent.pm) and its storages (pve-storage API2/Storage). Each value
//! put into a path (a node, a storage, a volume, a UPID) is encoded as one segment.

use crate::encode::{node_path, segment};
use crate::upid::Upid;

/// `GET /cluster/resources`: every guest, storage and node (guest data lags, from pvestatd).
pub const CLUSTER_RESOURCES: &str = "/cluster/resources";
/// `GET /version` (pve-manager API2.pm, version).
pub const VERSION: &str = "/version";
/// `GET /cluster/nextid`: a free vmid (not reserved: a parallel client may take it first).
pub const CLUSTER_NEXTID: &str = "/cluster/nextid";
/// `GET /cluster/options`: datacenter.cfg, parsed (its `next-id` range among it).
pub const CLUSTER_OPTIONS: &str = "/cluster/options";
/// `/cluster/ha/resources`: `POST` makes a guest an HA resource (pve-ha-manager
/// API2/HA/Resources.pm).
pub const HA_RESOURCES: &str = "/cluster/ha/resources";

/// `/cluster/ha/resources/vm:{vmid}`: one VM's HA resource (`GET`, `PUT`, `DELETE`).
pub fn ha_resource(vmid: u32) -> String {
    format!("{HA_RESOURCES}/{}", segment(&format!("vm:{vmid}")))
}

/// `/nodes/{node}`.
#[derive(Clone, Debug)]
pub struct Node(String);

impl Node {
    pub fn new(node: &str) -> Node {
        Node(node_path(node))
    }

    /// `…/qemu`: `GET` lists the node's VMs from their configs, `POST` creates one.
    pub fn qemu(&self) -> String {
        format!("{}/qemu", self.0)
    }

    /// One VM on the node.
    pub fn vm(&self, vmid: u32) -> Vm {
        Vm(format!("{}/qemu/{vmid}", self.0))
    }

    /// `…/tasks`: the node's task list.
    pub fn tasks(&self) -> String {
        format!("{}/tasks", self.0)
    }

    /// `…/storage`: the node's storages with their status (pve-storage API2/Storage/Status.pm).
    pub fn storages(&self) -> String {
        format!("{}/storage", self.0)
    }

    /// One storage on the node.
    pub fn storage(&self, storage: &str) -> Storage {
        Storage(format!("{}/storage/{}", self.0, segment(storage)))
    }
}

/// `/nodes/{node}/tasks/{upid}`: `DELETE` stops the task.
pub fn task(upid: &Upid) -> String {
    format!("{}/tasks/{}", node_path(&upid.node), segment(&upid.text))
}

/// `…/tasks/{upid}/status`.
pub fn task_status(upid: &Upid) -> String {
    format!("{}/status", task(upid))
}

/// `…/tasks/{upid}/log`.
pub fn task_log(upid: &Upid) -> String {
    format!("{}/log", task(upid))
}

/// `/nodes/{node}/qemu/{vmid}`: `DELETE` destroys the VM (`qmdestroy`).
#[derive(Clone, Debug)]
pub struct Vm(String);

impl Vm {
    /// The VM itself.
    pub fn path(&self) -> &str {
        &self.0
    }

    /// `…/config`: `GET` (pending values applied unless `current=1`), `POST` (`qmconfig`).
    pub fn config(&self) -> String {
        format!("{}/config", self.0)
    }

    /// `…/pending`: each key with its current and pending value.
    pub fn pending(&self) -> String {
        format!("{}/pending", self.0)
    }

    /// `…/status/current`: the power state as the node sees it now.
    pub fn status_current(&self) -> String {
        format!("{}/status/current", self.0)
    }

    /// `…/status/{start,stop,shutdown,reboot}` (`qmstart`, …).
    pub fn power(&self, action: &str) -> String {
        format!("{}/status/{action}", self.0)
    }

    /// `…/resize` (`resize`, PVE 8+).
    pub fn resize(&self) -> String {
        format!("{}/resize", self.0)
    }

    /// `…/move_disk` (`qmmove`): a disk to another storage.
    pub fn move_disk(&self) -> String {
        format!("{}/move_disk", self.0)
    }

    /// `…/unlink`: drives taken off the VM and their volumes freed.
    pub fn unlink(&self) -> String {
        format!("{}/unlink", self.0)
    }

    /// `…/template` (`qmtemplate`).
    pub fn template(&self) -> String {
        format!("{}/template", self.0)
    }

    /// `…/clone` (`qmclone`, its id the source's).
    pub fn clone_vm(&self) -> String {
        format!("{}/clone", self.0)
    }

    /// `…/migrate`: `GET` the preconditions, `POST` (`qmigrate`, or `hamigrate` for an
    /// HA-managed VM) moves the VM to another node.
    pub fn migrate(&self) -> String {
        format!("{}/migrate", self.0)
    }

    /// `…/cloudinit`: `GET` the options and what the drive holds, `PUT` regenerates it.
    pub fn cloudinit(&self) -> String {
        format!("{}/cloudinit", self.0)
    }

    /// `…/agent/{command}`: a guest agent command.
    pub fn agent(&self, command: &str) -> String {
        format!("{}/agent/{command}", self.0)
    }

    /// `…/snapshot`: `GET` the snapshots (and `current`), `POST` takes one (`qmsnapshot`).
    pub fn snapshots(&self) -> String {
        format!("{}/snapshot", self.0)
    }

    /// `…/snapshot/{snapname}`: `DELETE` removes it (`qmdelsnapshot`); below it `config` and
    /// `rollback` (`qmrollback`). A snapshot name is a `pve-configid` (letters, digits, `-`,
    /// `_`), safe in a path as it is.
    pub fn snapshot(&self, snapname: &str) -> String {
        format!("{}/snapshot/{snapname}", self.0)
    }
}

/// `/nodes/{node}/storage/{storage}`.
#[derive(Clone, Debug)]
pub struct Storage(String);

impl Storage {
    /// `…/content`: the storage's volumes.
    pub fn content(&self) -> String {
        format!("{}/content", self.0)
    }

    /// `…/content/{volid}`: `DELETE` removes a volume (the volid is one encoded segment).
    pub fn volume(&self, volid: &str) -> String {
        format!("{}/content/{}", self.0, segment(volid))
    }

    /// `…/download-url` (`download`).
    pub fn download_url(&self) -> String {
        format!("{}/download-url", self.0)
    }

    /// `…/upload` (`imgcopy`).
    pub fn upload(&self) -> String {
        format!("{}/upload", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_encode_their_segments() {
        let n = Node::new("pve1");
        assert_eq!(n.vm(100).config(), "/nodes/pve1/qemu/100/config");
        assert_eq!(
            n.vm(100).power("start"),
            "/nodes/pve1/qemu/100/status/start"
        );
        assert_eq!(n.vm(100).migrate(), "/nodes/pve1/qemu/100/migrate");
        assert_eq!(n.storages(), "/nodes/pve1/storage");
        assert_eq!(
            n.storage("local").volume("local:import/a b.qcow2"),
            "/nodes/pve1/storage/local/content/local:import%2Fa%20b.qcow2"
        );
        let u = Upid::parse("UPID:pve1:00001234:00005678:65000000:qmcreate:100:root@pam:").unwrap();
        assert_eq!(
            task_status(&u),
            "/nodes/pve1/tasks/UPID:pve1:00001234:00005678:65000000:qmcreate:100:root@pam:/status"
        );
    }
}
