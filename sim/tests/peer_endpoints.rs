//! The endpoints peers' playbooks use (community.proxmox's proxmox_disk, proxmox_pool,
//! proxmox_storage_info, proxmox_node_info and the access info modules), each as its PVE
//! handler answers: pools (pve-manager API2/Pool.pm), access lists (pve-access-control
//! API2/User.pm, Group.pm, Domains.pm), node version and network (API2/Nodes.pm,
//! API2/Network.pm), storage config (pve-storage API2/Storage/Config.pm, Status.pm diridx),
//! and a VM's disks moved and unlinked (qemu-server API2/Qemu.pm move_vm_disk, unlink).

use crate::support::{Session, Sim, config};
use serde_json::{Value, json};

/// A request that must fail with `status`: its reason phrase and body.
fn fails(
    s: &Session,
    status: u16,
    method: &str,
    path: &str,
    params: &[(&str, &str)],
) -> (String, Value) {
    let (code, reason, body) = s.call(method, path, params);
    assert_eq!(code, status, "{method} {path}: {code} {reason} {body}");
    (reason, body)
}

/// A task-returning request whose task must end OK; returns the UPID.
fn task_ok(s: &Session, method: &str, path: &str, params: &[(&str, &str)]) -> Value {
    let upid = s.data(method, path, params);
    let end = s.wait(upid.as_str().unwrap());
    assert_eq!(
        end["exitstatus"],
        "OK",
        "{method} {path}: {end} {:?}",
        s.log(upid.as_str().unwrap())
    );
    upid
}

fn vm(s: &Session, vmid: &str, extra: &[(&str, &str)]) {
    let mut p = vec![
        ("vmid", vmid),
        ("scsi0", "local-lvm:1"),
        ("net0", "virtio,bridge=vmbr0"),
    ];
    p.extend_from_slice(extra);
    task_ok(s, "POST", "/nodes/pve1/qemu", &p);
}

#[test]
fn pools_hold_the_vms_created_into_them() {
    let sim = Sim::plain(&[], &[]);
    let s = Session::login(&sim);
    // Pool.pm create_pool: names checked by verify_poolname, then under lock_user_config.
    assert_eq!(
        s.data("POST", "/pools", &[("poolid", "web"), ("comment", "front")]),
        Value::Null
    );
    let (r, _) = fails(&s, 500, "POST", "/pools", &[("poolid", "web")]);
    assert_eq!(r, "create pool failed: pool 'web' already exists");
    let (r, _) = fails(&s, 500, "POST", "/pools", &[("poolid", "1st")]);
    assert_eq!(r, "create pool failed: pool name must start with a letter");
    let (_, v) = fails(&s, 400, "POST", "/pools", &[("poolid", "a b")]);
    assert_eq!(
        v["errors"]["poolid"],
        "invalid format - pool name 'a b' contains invalid characters"
    );
    let (r, _) = fails(&s, 500, "POST", "/pools", &[("poolid", "nope/sub")]);
    assert_eq!(
        r,
        "create pool failed: parent 'nope' of pool 'nope/sub' does not exist"
    );
    assert_eq!(
        s.data("GET", "/pools", &[]),
        json!([{"poolid": "web", "comment": "front"}])
    );

    // create_vm: check_pool_exist up front (a 403), add_vm_to_pool at the end of the worker.
    let (r, _) = fails(
        &s,
        403,
        "POST",
        "/nodes/pve1/qemu",
        &[("vmid", "150"), ("pool", "nope")],
    );
    assert_eq!(r, "Permission check failed (pool 'nope' does not exist)");
    assert!(
        s.data("GET", "/cluster/resources", &[("type", "vm")])
            .as_array()
            .unwrap()
            .is_empty()
    );
    vm(&s, "100", &[("pool", "web")]);
    let pool = s.data("GET", "/pools", &[("poolid", "web")]);
    let members = pool[0]["members"].as_array().unwrap().clone();
    assert_eq!(members.len(), 1, "{pool}");
    assert_eq!(
        (members[0]["id"].clone(), members[0]["node"].clone()),
        (json!("qemu/100"), json!("pve1"))
    );
    // The deprecated path form answers the pool without its id.
    let read = s.data("GET", "/pools/web", &[]);
    assert_eq!(read["members"].as_array().map(Vec::len), Some(1));
    assert!(read.get("poolid").is_none());

    // update_pool: members added and removed, a VM in another pool only with allow-move.
    s.data("POST", "/pools", &[("poolid", "db")]);
    vm(&s, "101", &[]);
    s.data(
        "PUT",
        "/pools",
        &[("poolid", "db"), ("vms", "101"), ("storage", "local")],
    );
    let (r, _) = fails(
        &s,
        500,
        "PUT",
        "/pools",
        &[("poolid", "db"), ("vms", "100")],
    );
    assert_eq!(
        r,
        "update pools failed: VM 100 belongs already to pool 'web' and 'allow-move' is not set"
    );
    s.data(
        "PUT",
        "/pools",
        &[("poolid", "db"), ("vms", "100"), ("allow-move", "1")],
    );
    assert!(
        s.data("GET", "/pools", &[("poolid", "web")])[0]["members"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    let db = s.data("GET", "/pools", &[("poolid", "db"), ("type", "storage")]);
    assert_eq!(db[0]["members"][0]["id"], "storage/pve1/local");
    let (r, _) = fails(&s, 500, "DELETE", "/pools", &[("poolid", "db")]);
    assert_eq!(
        r,
        "delete pool failed: pool 'db' is not empty (contains VM 100)"
    );

    // destroy_vm's remove_vm_access takes the VM out; an empty pool can go.
    s.data(
        "PUT",
        "/pools",
        &[("poolid", "db"), ("storage", "local"), ("delete", "1")],
    );
    task_ok(&s, "DELETE", "/nodes/pve1/qemu/100", &[]);
    task_ok(&s, "DELETE", "/nodes/pve1/qemu/101", &[]);
    assert!(
        s.data("GET", "/pools", &[("poolid", "db")])[0]["members"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    s.data("DELETE", "/pools/db", &[]);
    let (r, _) = fails(&s, 500, "GET", "/pools/db", &[]);
    assert_eq!(r, "pool 'db' does not exist");
    // A reused id is in no pool.
    vm(&s, "100", &[]);
    s.data("DELETE", "/pools", &[("poolid", "web")]);
}

#[test]
fn access_lists_node_info_and_storage_config() {
    let sim = Sim::plain(&["--nodes", "pve1,pve2"], &[]);
    let s = Session::login(&sim);
    let users = s.data("GET", "/access/users", &[("full", "1")]);
    let root = users
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["userid"] == "root@pam")
        .unwrap();
    assert_eq!(root["realm-type"], "pam");
    assert_eq!(
        root["tokens"],
        json!([{"tokenid": "ci", "expire": 0, "privsep": 1}])
    );
    assert_eq!(s.data("GET", "/access/users/root@pam", &[])["enable"], 1);
    let (r, _) = fails(&s, 500, "GET", "/access/users/ghost@pve", &[]);
    assert_eq!(r, "no such user ('ghost@pve')");
    let realms: Vec<Value> = s
        .data("GET", "/access/domains", &[])
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["realm"].clone())
        .collect();
    assert_eq!(realms, vec![json!("pam"), json!("pve")]);
    assert_eq!(s.data("GET", "/access/domains/pve", &[])["type"], "pve");
    let (r, _) = fails(&s, 500, "GET", "/access/domains/ldap1", &[]);
    assert_eq!(r, "domain 'ldap1' does not exist");
    assert_eq!(s.data("GET", "/access/groups", &[]), json!([]));

    assert_eq!(
        s.data("GET", "/nodes/pve2/version", &[]),
        s.data("GET", "/version", &[])
    );
    let bridges = s.data("GET", "/nodes/pve2/network", &[("type", "any_bridge")]);
    assert_eq!(bridges.as_array().map(Vec::len), Some(1));
    assert_eq!(bridges[0]["iface"], "vmbr0");
    let all = s.data("GET", "/nodes/pve1/network", &[]);
    assert!(
        all.as_array().unwrap().iter().all(|i| i["iface"] != "lo"),
        "Network.pm never lists lo"
    );
    let (r, _) = fails(&s, 500, "GET", "/nodes/pve9/network", &[]);
    assert!(r.starts_with("hostname lookup 'pve9' failed"), "{r}");

    let local = s.data("GET", "/storage/local-lvm", &[]);
    assert_eq!(
        (local["type"].clone(), local["vgname"].clone()),
        (json!("lvmthin"), json!("pve"))
    );
    assert_eq!(
        s.data("GET", "/storage", &[("type", "dir")])
            .as_array()
            .map(Vec::len),
        Some(1)
    );
    let (r, _) = fails(&s, 500, "GET", "/storage/nfs1", &[]);
    assert_eq!(r, "storage 'nfs1' does not exist");
    let sub = s.data("GET", "/nodes/pve1/storage/local", &[]);
    assert!(
        sub.as_array()
            .unwrap()
            .contains(&json!({"subdir": "content"}))
    );
}

#[test]
fn move_disk_copies_or_reassigns_and_unlink_detaches() {
    let sim = Sim::plain(&["--task-duration", "qmcreate=100ms"], &[]);
    let s = Session::login(&sim);
    vm(&s, "100", &[]);
    vm(&s, "101", &[]);
    // Both targets, or neither, are parameter errors on both keys.
    let (_, v) = fails(
        &s,
        400,
        "POST",
        "/nodes/pve1/qemu/100/move_disk",
        &[("disk", "scsi0")],
    );
    assert_eq!(
        v["errors"]["storage"],
        "both 'storage' and 'target-vmid' missing, either needs to be set"
    );
    let (_, v) = fails(
        &s,
        400,
        "POST",
        "/nodes/pve1/qemu/100/move_disk",
        &[
            ("disk", "scsi0"),
            ("storage", "local"),
            ("target-vmid", "101"),
        ],
    );
    assert_eq!(
        v["errors"]["target-vmid"],
        "either set 'storage' or 'target-vmid', but not both"
    );
    let (r, _) = fails(
        &s,
        500,
        "POST",
        "/nodes/pve1/qemu/100/move_disk",
        &[("disk", "scsi0"), ("storage", "local-lvm")],
    );
    assert_eq!(r, "you can't move to the same storage with same format");
    let (r, _) = fails(
        &s,
        500,
        "POST",
        "/nodes/pve1/qemu/100/move_disk",
        &[("disk", "scsi1"), ("storage", "local")],
    );
    assert_eq!(r, "disk 'scsi1' does not exist");

    // A copy to a directory storage as qcow2; the source stays as unused0.
    let upid = task_ok(
        &s,
        "POST",
        "/nodes/pve1/qemu/100/move_disk",
        &[("disk", "scsi0"), ("storage", "local"), ("format", "qcow2")],
    );
    assert!(upid.as_str().unwrap().contains(":qmmove:100:"), "{upid}");
    let c = config(&s, "100");
    assert_eq!(c["scsi0"], "local:100/vm-100-disk-0.qcow2,size=1G");
    assert_eq!(c["unused0"], "local-lvm:vm-100-disk-0");
    assert!(s.log(upid.as_str().unwrap()).contains(
        &"adding source volume 'local-lvm:vm-100-disk-0' as 'unused0' to config".to_string()
    ));
    // With delete, the source volume is freed after the copy.
    task_ok(
        &s,
        "POST",
        "/nodes/pve1/qemu/100/move_disk",
        &[("disk", "scsi0"), ("storage", "local-lvm"), ("delete", "1")],
    );
    let c = config(&s, "100");
    assert_eq!(c["scsi0"], "local-lvm:vm-100-disk-1,size=1G");
    let left: Vec<Value> = s
        .data(
            "GET",
            "/nodes/pve1/storage/local/content",
            &[("vmid", "100")],
        )
        .as_array()
        .unwrap()
        .clone();
    assert!(left.is_empty(), "{left:?}");

    // A reassign renames the volume to the target VM's name and moves the key.
    let upid = task_ok(
        &s,
        "POST",
        "/nodes/pve1/qemu/100/move_disk",
        &[
            ("disk", "unused0"),
            ("target-vmid", "101"),
            ("target-disk", "scsi1"),
        ],
    );
    assert!(
        upid.as_str()
            .unwrap()
            .contains(":qmmove:100-unused0>101-scsi1:"),
        "{upid}"
    );
    assert!(config(&s, "100").get("unused0").is_none());
    assert_eq!(config(&s, "101")["scsi1"], "local-lvm:vm-101-disk-1");
    let (r, _) = fails(
        &s,
        500,
        "POST",
        "/nodes/pve1/qemu/101/move_disk",
        &[
            ("disk", "scsi1"),
            ("target-vmid", "100"),
            ("target-disk", "scsi0"),
        ],
    );
    assert_eq!(r, "Target disk key 'scsi0' is already in use for VM '100'");

    // unlink is update_vm with delete: the disk becomes unused.
    assert_eq!(
        s.data("PUT", "/nodes/pve1/qemu/101/unlink", &[("idlist", "scsi1")]),
        Value::Null
    );
    let c = config(&s, "101");
    assert!(c.get("scsi1").is_none());
    assert!(
        c.as_object()
            .unwrap()
            .values()
            .any(|v| v == "local-lvm:vm-101-disk-1"),
        "{c}"
    );
    let unused = c
        .as_object()
        .unwrap()
        .iter()
        .find(|(_, v)| *v == "local-lvm:vm-101-disk-1")
        .map(|(k, _)| k.clone())
        .unwrap();
    let volumes = |vmid: &str| -> Vec<Value> {
        s.data(
            "GET",
            "/nodes/pve1/storage/local-lvm/content",
            &[("vmid", vmid)],
        )
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["volid"].clone())
        .collect()
    };
    // An unusedN is always freed (update_vm_api: try_deallocate_drive).
    s.data("PUT", "/nodes/pve1/qemu/101/unlink", &[("idlist", &unused)]);
    assert!(config(&s, "101").get(&unused).is_none());
    assert_eq!(volumes("101"), vec![json!("local-lvm:vm-101-disk-0")]);
    // With force, a drive's volume is freed instead of kept as unused.
    s.data(
        "PUT",
        "/nodes/pve1/qemu/101/unlink",
        &[("idlist", "scsi0"), ("force", "1")],
    );
    let c = config(&s, "101");
    assert!(
        c.as_object()
            .unwrap()
            .keys()
            .all(|k| k != "scsi0" && !k.starts_with("unused")),
        "{c}"
    );
    assert!(volumes("101").is_empty());
}

#[test]
fn a_shared_storage_is_one_for_every_node_and_allocates_under_the_cluster_lock() {
    // An allocation holds the cluster lock 300 ms: 20 creates at once queue on it for 6 s,
    // under cfs_lock's 10 s.
    let sim = Sim::plain(
        &[
            "--nodes",
            "pve1,pve2,pve3",
            "--task-duration",
            "cfs-alloc=300ms",
            "--workers",
            "8",
        ],
        &[],
    );
    let s = Session::login(&sim);
    let (r, _) = fails(
        &s,
        500,
        "POST",
        "/storage",
        &[("storage", "nfs1"), ("type", "nfs"), ("server", "10.0.0.5")],
    );
    assert_eq!(r, "missing value for required option 'path'");
    let (r, _) = fails(
        &s,
        500,
        "POST",
        "/storage",
        &[("storage", "nfs1"), ("type", "rbd"), ("path", "/x")],
    );
    assert_eq!(r, "unexpected property 'path'");
    let created = s.data(
        "POST",
        "/storage",
        &[
            ("storage", "shared1"),
            ("type", "dir"),
            ("path", "/mnt/shared1"),
            ("shared", "1"),
            ("content", "images,iso"),
        ],
    );
    assert_eq!(created, json!({"storage": "shared1", "type": "dir"}));
    let (r, _) = fails(
        &s,
        500,
        "POST",
        "/storage",
        &[("storage", "shared1"), ("type", "dir"), ("path", "/x")],
    );
    assert_eq!(
        r,
        "create storage failed: storage ID 'shared1' already defined"
    );
    s.data(
        "POST",
        "/storage",
        &[("storage", "ceph1"), ("type", "rbd"), ("pool", "vms")],
    );
    // rbd is in @SHARED_STORAGE: shared whatever was given.
    assert_eq!(s.data("GET", "/storage/ceph1", &[])["shared"], 1);
    for n in ["pve1", "pve2", "pve3"] {
        let list = s.data("GET", &format!("/nodes/{n}/storage"), &[]);
        let e = list
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["storage"] == "shared1")
            .unwrap()
            .clone();
        assert_eq!(e["shared"], 1, "{n}: {e}");
    }

    let nodes = ["pve1", "pve2", "pve3"];
    let handles: Vec<_> = (0..20)
        .map(|i| {
            let s = Session::login(&sim);
            std::thread::spawn(move || {
                let vmid = (200 + i).to_string();
                let node = nodes[i % 3];
                let storage = if i % 2 == 0 { "shared1:1" } else { "ceph1:1" };
                let upid = s.data(
                    "POST",
                    &format!("/nodes/{node}/qemu"),
                    &[("vmid", &vmid), ("scsi0", storage)],
                );
                s.wait(upid.as_str().unwrap())["exitstatus"].clone()
            })
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap(), "OK");
    }
    // Every node sees every volume of the shared storages.
    for n in nodes {
        let on_dir = s.data("GET", &format!("/nodes/{n}/storage/shared1/content"), &[]);
        let on_rbd = s.data("GET", &format!("/nodes/{n}/storage/ceph1/content"), &[]);
        assert_eq!(
            (
                on_dir.as_array().unwrap().len(),
                on_rbd.as_array().unwrap().len()
            ),
            (10, 10),
            "{n}"
        );
    }

    // `nodes` restricts a storage to those nodes (storage_check_node); `disable` to none.
    s.data(
        "POST",
        "/storage",
        &[
            ("storage", "nfs2"),
            ("type", "nfs"),
            ("path", "/mnt/pve/nfs2"),
            ("server", "10.0.0.5"),
            ("export", "/vms"),
            ("nodes", "pve1"),
        ],
    );
    let listed = |n: &str| -> bool {
        s.data("GET", &format!("/nodes/{n}/storage"), &[])
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["storage"] == "nfs2")
    };
    assert!(listed("pve1") && !listed("pve2"));
    let upid = s.data(
        "POST",
        "/nodes/pve2/qemu",
        &[("vmid", "301"), ("scsi0", "nfs2:1")],
    );
    assert_eq!(
        s.wait(upid.as_str().unwrap())["exitstatus"],
        "unable to create VM 301 - storage 'nfs2' is not available on node 'pve2'"
    );

    // Another node holding the lock past cfs_lock's 10 s: the allocation fails with PVE's text.
    sim.admin(
        "POST",
        "/storage-lock",
        json!({"storage": "ceph1", "ms": 11000}),
    );
    let upid = s.data(
        "POST",
        "/nodes/pve2/qemu",
        &[("vmid", "300"), ("scsi0", "ceph1:1")],
    );
    let end = s.wait(upid.as_str().unwrap());
    assert_eq!(
        end["exitstatus"],
        "unable to create VM 300 - cfs-lock 'storage-ceph1' error: got lock request timeout"
    );
}

/// Linked clones of a template on a shared storage: twenty at once queue on the cluster
/// lock and all succeed; a clone may go to another node only when every volume is shared
/// (Qemu.pm clone_vm, `$check_storage_access_clone`).
#[test]
fn parallel_linked_clones_on_a_shared_storage_and_clones_to_another_node() {
    let sim = Sim::plain(
        &[
            "--nodes",
            "pve1,pve2",
            "--task-duration",
            "cfs-alloc=300ms",
            "--workers",
            "8",
        ],
        &[],
    );
    let s = Session::login(&sim);
    s.data("POST", "/storage", &[("storage", "ceph1"), ("type", "rbd")]);
    task_ok(
        &s,
        "POST",
        "/nodes/pve1/qemu",
        &[("vmid", "100"), ("scsi0", "ceph1:1")],
    );
    task_ok(&s, "POST", "/nodes/pve1/qemu/100/template", &[]);
    let handles: Vec<_> = (0..20)
        .map(|i| {
            let s = Session::login(&sim);
            std::thread::spawn(move || {
                let newid = (200 + i).to_string();
                let upid = s.data("POST", "/nodes/pve1/qemu/100/clone", &[("newid", &newid)]);
                s.wait(upid.as_str().unwrap())["exitstatus"].clone()
            })
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap(), "OK");
    }
    let content = s.data("GET", "/nodes/pve2/storage/ceph1/content", &[]);
    assert_eq!(content.as_array().map(Vec::len), Some(21), "{content}");

    task_ok(
        &s,
        "POST",
        "/nodes/pve1/qemu/100/clone",
        &[("newid", "300"), ("target", "pve2")],
    );
    let c = s.data("GET", "/nodes/pve2/qemu/300/config", &[]);
    assert!(
        c["scsi0"]
            .as_str()
            .unwrap()
            .starts_with("ceph1:base-100-disk-0/vm-300-disk-0"),
        "{c}"
    );
    // A VM with a local volume stays on its node.
    vm(&s, "101", &[]);
    let (r, _) = fails(
        &s,
        500,
        "POST",
        "/nodes/pve1/qemu/101/clone",
        &[("newid", "301"), ("target", "pve2")],
    );
    assert_eq!(r, "can't clone VM to node 'pve2' (VM uses local storage)");
}

/// community.proxmox's inventory lists each node's containers beside its VMs: pve-container
/// API2/LXC.pm vmlist, empty on pve-sim (it runs no containers), refused for a node that is
/// not in the cluster as the VM list is.
#[test]
fn each_node_lists_its_containers_as_the_inventory_peer_reads_them() {
    let sim = Sim::plain(&["--nodes", "pve1,pve2"], &[]);
    let s = Session::login(&sim);
    vm(&s, "100", &[]);
    assert_eq!(s.data("GET", "/nodes/pve2/lxc", &[]), json!([]));
    assert_eq!(s.data("GET", "/nodes/pve1/lxc", &[]), json!([]));
    let (code, reason, _) = s.call("GET", "/nodes/pve9/qemu", &[]);
    assert_ne!(code, 200);
    let (r, _) = fails(&s, code, "GET", "/nodes/pve9/lxc", &[]);
    assert_eq!(r, reason);
}
