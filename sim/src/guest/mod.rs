//! A model of the guest, as far as tests need to see the end of what a module did: what
//! cloud-init found on a NoCloud seed when the VM started ([`seed`]), which the guest agent
//! then reports (its addresses) and the admin port serves (`GET /guest/{vmid}/seed`). No
//! part of PVE: PVE starts a real guest.

pub mod seed;
