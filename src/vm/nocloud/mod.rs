//! The `nocloud` option: cloud-init user data without SSH. The module builds the NoCloud seed
//! (an ISO 9660 volume `cidata` holding user-data, meta-data, network-config and vendor-data)
//! in memory, uploads it over the API to an ISO storage, and attaches it as a CD-ROM in place
//! of PVE's own cloud-init drive; `cicustom` snippets, which the API cannot upload, are not
//! needed. Pure parts: [`wanted`] (the option, checked), [`seed`] (the files, generated as
//! qemu-server's Cloudinit.pm generates them), [`iso`] (the image), [`plan`] (whether the VM
//! holds the seed); the shell: `attach` (upload, attach, clean up), [`inherit`] (a clone
//! run without the option gets a seed of its own) and [`pending`] (whether a running guest
//! booted with the seed its VM holds).

mod attach;
pub mod inherit;
pub mod iso;
pub mod pending;
pub mod plan;
pub mod seed;
pub mod wanted;
