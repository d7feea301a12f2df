//! The `vm_info` module's options: which VMs, which of their facts are read, and how many
//! are read at once.

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

/// The per-VM facts a run reads beyond what the cluster listing (name, node, pool, tags,
/// template) and the nodes' VM lists (the power state) give, each at its own cost in requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Facts {
    /// The config, current values and pending changes in one read: 1 request per VM.
    pub config: bool,
    /// The snapshot list: 1 request per VM.
    pub snapshots: bool,
    /// The guest agent's addresses: 1 request per running VM with the agent on, after the
    /// config read that tells whether it is on (made for running VMs only, when `config` is
    /// not asked for).
    pub agent: bool,
}

impl Facts {
    /// Whether a VM in `status` needs its config read: for itself, or to tell whether its
    /// guest agent is on (only a running VM's agent answers).
    pub fn reads_config(&self, status: &str) -> bool {
        self.config || (self.agent && status == "running")
    }

    /// Whether a VM in `status` needs any per-VM request.
    pub fn reads_any(&self, status: &str) -> bool {
        self.snapshots || self.reads_config(status)
    }
}

/// The choices of the `facts` option, as the module's docs list them.
const FACT_CHOICES: &[&str] = &["config", "snapshots", "agent"];

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
        .default(json!(3)),
        Opt::new("facts", Kind::List(Box::new(Kind::Str)))
            .choices(FACT_CHOICES)
            .default(json!(FACT_CHOICES)),
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

/// The per-VM facts the validated options ask for (the spec's choices are the only values).
pub fn facts(inv: &Invocation) -> Facts {
    let asked: Vec<&str> = inv
        .params
        .get("facts")
        .and_then(|f| f.as_array())
        .map(|items| items.iter().filter_map(|f| f.as_str()).collect())
        .unwrap_or_default();
    Facts {
        config: asked.contains(&"config"),
        snapshots: asked.contains(&"snapshots"),
        agent: asked.contains(&"agent"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agent_needs_the_config_of_running_vms_only() {
        let agent = Facts {
            config: false,
            snapshots: false,
            agent: true,
        };
        assert!(agent.reads_config("running") && agent.reads_any("running"));
        assert!(!agent.reads_config("stopped") && !agent.reads_any("stopped"));
        let none = Facts {
            agent: false,
            ..agent
        };
        assert!(!none.reads_any("running"));
        let snapshots = Facts {
            snapshots: true,
            ..none
        };
        assert!(snapshots.reads_any("stopped") && !snapshots.reads_config("running"));
        let config = Facts {
            config: true,
            ..none
        };
        assert!(config.reads_config("stopped"));
    }
}
