//! The `vm_info` module's options: which VMs, and how many are read at once.

use serde_json::json;

use crate::ansible::protocol::Invocation;
use crate::ansible::spec::{Kind, Opt, Spec, given};
use crate::ids::VmSelector;
use crate::{connection, runner};

/// Which VMs are asked for; every given selector must match (none: all VMs).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Selection {
    /// `vmid`, `name`, `node`.
    pub vm: VmSelector,
    pub pool: Option<String>,
    /// A VM must have all of these tags.
    pub tags: Vec<String>,
    /// How many VMs are read at once.
    pub parallel: usize,
}

/// The `vm_info` module's argument spec.
pub fn argument_spec() -> Spec {
    let mut options = connection::connection_options();
    options.extend(runner::wait_options("5m"));
    options.extend(vec![
        crate::ids::vmid_option("vmid"),
        Opt::new("name", Kind::Str),
        Opt::new("node", Kind::Str),
        Opt::new("pool", Kind::Str),
        Opt::new("tags", Kind::List(Box::new(Kind::Str))).default(json!([])),
        Opt::new(
            "parallel",
            Kind::Int {
                min: Some(1),
                max: Some(64),
            },
        )
        .default(json!(8)),
    ]);
    let mut spec = Spec {
        options,
        ..Default::default()
    };
    connection::connection_rules(&mut spec);
    spec
}

/// The selection from validated options.
pub fn selection(inv: &Invocation) -> Result<Selection, String> {
    let tags = inv
        .params
        .get("tags")
        .and_then(|t| t.as_array())
        .map(|items| {
            items
                .iter()
                .filter_map(|t| t.as_str())
                .map(|t| t.trim().to_string())
                .filter(|t| !t.is_empty())
                .collect()
        })
        .unwrap_or_default();
    Ok(Selection {
        vm: VmSelector::from_invocation(inv)?,
        pool: inv.str("pool").map(str::to_string),
        tags,
        parallel: given(inv.int("parallel"), "parallel")? as usize,
    })
}
