//! The shell of the `ha` option: the VM's HA resource converged once the VM's config and power
//! state have, then its HA rules (PVE 9), and the VM then brought to that state, and to the
//! node its node-affinity rule prefers, by the HA stack (waited on as a power step is, see
//! `execute`). Apart from [`super::ha`] and [`super::ha_rules`] (the option, its changes and
//! rules, pure) so that the arrows go one way: `desired` → `ha`, and the shell (`converge` →
//! `ha_converge` → `shell`, `ha`, `ha_rules`) above them.
//!
//! Which PVE it is, the rules API tells: `GET /cluster/ha/rules` answers on PVE 9 and is a
//! `501` on PVE 8, where the options only PVE 9 has are refused before any write.

use std::collections::BTreeSet;

use anyhow::{Context, anyhow};
use serde_json::{Value, json};

use super::ha::{HaWanted, changes, shown};
use super::ha_rules::{RuleChange, destinations, rule_changes, shown_current, wanted_rules};
use super::plan::Current;
use super::shell::{Poll, Runner};
use crate::pve::api::ha_rules::{self, RulesListed};
use crate::pve::api::qemu::{self, Vm};
use crate::pve::api::{cluster, ha};
use crate::pve::retry::{self, Awaiting, until};

/// What converging the HA resource did (or, in check mode, would do).
pub(super) struct HaOutcome {
    /// What was changed, for the message (`made it an HA resource (state started)`).
    pub done: Option<String>,
    /// The resource before and after, for the result (`ha`) and the diff.
    pub before: Value,
    pub after: Value,
    /// The node the HA stack moved the VM to, to follow its node-affinity rule.
    pub node: Option<String>,
}

/// The options of a resource as [`shown`] reports them.
fn options(
    group: Option<String>,
    failback: Option<u64>,
    max_restart: Option<u64>,
    max_relocate: Option<u64>,
) -> Vec<(&'static str, Value)> {
    vec![
        ("group", json!(group)),
        ("failback", json!(failback.map(|f| f == 1))),
        ("max_restart", json!(max_restart)),
        ("max_relocate", json!(max_relocate)),
    ]
}

impl Runner<'_> {
    /// Converges the VM's HA resource and rules to the `ha` option; in check mode only says
    /// what it would change. A requested state that changed is then waited for, as the HA
    /// stack carries it out, and so is a move the node-affinity rule asks of the CRM.
    pub(super) fn converge_ha(
        &mut self,
        wanted: &HaWanted,
        cur: &Current,
        check_mode: bool,
    ) -> anyhow::Result<HaOutcome> {
        let id = format!("VM {} on {}", cur.vmid, cur.node);
        let client = &self.session.client;
        let current = ha::resource(client, cur.vmid)
            .with_context(|| format!("reading the HA resource of {id}"))?;
        let rules = match ha_rules::rules_of(client, cur.vmid)
            .with_context(|| format!("reading the HA rules of {id}"))?
        {
            RulesListed::Rules(rules) => Some(rules),
            RulesListed::NoRulesApi => {
                if let Some(option) = wanted.needs_rules() {
                    return Err(anyhow!(
                        "{option} needs PVE 9 (HA rules and failback came with pve-ha-manager \
                         5.0), and this PVE has no /cluster/ha/rules: on PVE 8 use ha.group \
                         (an HA group's nodes and priorities, restricted, nofailback) for {id}"
                    ));
                }
                None
            }
        };
        // A rule `ha.rule` names that does not hold the VM yet (an admin's) is not in the
        // VM's list: read from the whole list, so it is updated, not created again.
        let rules = match rules {
            Some(mut listed) if wanted.rule.is_some() => {
                let missing: Vec<String> = wanted_rules(cur.vmid, wanted)
                    .into_iter()
                    .map(|spec| spec.rule)
                    .filter(|rule| !listed.iter().any(|have| have.rule == *rule))
                    .collect();
                if !missing.is_empty() {
                    let all = ha_rules::all(client)
                        .with_context(|| format!("reading the HA rules (for ha.rule of {id})"))?;
                    listed.extend(all.into_iter().filter(|rule| missing.contains(&rule.rule)));
                }
                Some(listed)
            }
            other => other,
        };
        let set = changes(wanted, current.as_ref(), cur.running);
        let rule_writes = match &rules {
            Some(listed) => rule_changes(cur.vmid, wanted, listed)
                .map_err(|e| anyhow!("converging the HA rules of {id}: {e}"))?,
            None => Vec::new(),
        };
        let before = current.as_ref().map_or(Value::Null, |c| {
            let mut v = shown(
                cur.vmid,
                c.requested_state(),
                &options(c.group.clone(), c.failback, c.max_restart, c.max_relocate),
            );
            if let Some(listed) = &rules {
                let shown = shown_current(cur.vmid, wanted, listed);
                if shown.as_array().is_some_and(|a| !a.is_empty()) {
                    v["rules"] = shown;
                }
            }
            v
        });
        let state = set.state.clone().unwrap_or_else(|| {
            current
                .as_ref()
                .map_or("started", |c| c.requested_state())
                .to_string()
        });
        // What the option asks for, else what PVE has.
        let pick = |want: Option<u64>, had: Option<u64>| want.or(had);
        let mut after = shown(
            cur.vmid,
            &state,
            &options(
                set.group
                    .clone()
                    .or_else(|| current.as_ref().and_then(|c| c.group.clone())),
                pick(
                    wanted.failback.map(u64::from),
                    current.as_ref().and_then(|c| c.failback),
                ),
                pick(
                    wanted.max_restart,
                    current.as_ref().and_then(|c| c.max_restart),
                ),
                pick(
                    wanted.max_relocate,
                    current.as_ref().and_then(|c| c.max_relocate),
                ),
            ),
        );
        let specs = wanted_rules(cur.vmid, wanted);
        if !specs.is_empty() {
            after["rules"] = super::ha_rules::shown_rules(&specs);
        }
        if set.is_empty() && rule_writes.is_empty() {
            return Ok(HaOutcome {
                done: None,
                before,
                after,
                node: None,
            });
        }
        let listed = set
            .given()
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", ");
        let mut told = Vec::new();
        if !set.is_empty() {
            told.push(if current.is_some() {
                format!("set its HA resource's {listed}")
            } else {
                format!("made it an HA resource ({listed})")
            });
        }
        told.extend(rule_writes.iter().map(RuleChange::told));
        let done = told.join(", ");
        if check_mode {
            return Ok(HaOutcome {
                done: Some(done),
                before,
                after,
                node: None,
            });
        }
        let what = if current.is_some() {
            format!("setting {listed} of the HA resource vm:{}", cur.vmid)
        } else {
            format!("making {id} an HA resource ({listed})")
        };
        if !set.is_empty() {
            let written = match &current {
                Some(c) => ha::update(client, cur.vmid, &set, c.digest.as_deref()),
                None => ha::add(client, cur.vmid, &set),
            };
            let _ = self.changes.accepted();
            if let Err(e) = written {
                let hint = if e.is_ha_groups_migrated() {
                    " (PVE 9 replaced HA groups with rules: leave ha.group out, and give the VM \
                     ha.node_affinity, which the module writes as a node-affinity rule with POST \
                     /cluster/ha/rules)"
                } else {
                    ""
                };
                return Err(anyhow!("{what}: {e}{hint}"));
            }
        }
        for change in &rule_writes {
            let client = &self.session.client;
            let written = match change {
                RuleChange::Create(spec) => ha_rules::create(client, spec),
                RuleChange::Update(spec, digest) => {
                    ha_rules::update(client, spec, digest.as_deref())
                }
                RuleChange::Delete(rule) => ha_rules::delete(client, rule),
            };
            let _ = self.changes.accepted();
            written.map_err(|e| anyhow!("{} for {id}: {e}", change.doing()))?;
        }
        match set.state.as_deref() {
            Some("started") if !cur.running => self.reached(cur, true, &what)?,
            Some("stopped" | "disabled") if cur.running => self.reached(cur, false, &what)?,
            _ => {}
        }
        let placed = rule_writes.iter().any(|c| {
            matches!(c, RuleChange::Create(s) | RuleChange::Update(s, _)
                if s.kind.type_name() == "node-affinity")
        });
        let runs = state == "started";
        let mut node = None;
        if placed
            && runs
            && let Some(dests) = destinations(wanted, &cur.node)
            && !dests.contains(&cur.node)
        {
            node = Some(self.moved_by_ha(cur, &dests)?);
        }
        Ok(HaOutcome {
            done: Some(done),
            before,
            after,
            node,
        })
    }

    /// Waits until the HA stack has moved the VM to one of `dests`, as its node-affinity
    /// rule asks (Manager.pm next_state_started: a `migrate` its LRM carries out; bpg#2417),
    /// and it runs there with its HA service `started` again; returns that node.
    fn moved_by_ha(&mut self, cur: &Current, dests: &BTreeSet<String>) -> anyhow::Result<String> {
        let what = format!(
            "waiting for the HA stack to move VM {} from {} to {} (its node-affinity rule)",
            cur.vmid,
            cur.node,
            dests.iter().cloned().collect::<Vec<_>>().join(" or ")
        );
        let client = &self.session.client;
        let tried = until(&self.budget(), Awaiting::HaMotion, |_| -> Poll<String> {
            let listed = cluster::vm_resources(client).with_context(|| what.clone())?;
            let Some(on) = listed
                .iter()
                .find(|r| r.vmid == cur.vmid)
                .map(|r| r.node.clone())
            else {
                return Err(anyhow!("{what}: the VM disappeared meanwhile"));
            };
            if dests.contains(&on) {
                let status =
                    qemu::status(client, &Vm::new(&on, cur.vmid)).with_context(|| what.clone())?;
                if status
                    .as_ref()
                    .is_some_and(|s| s.running() && s.ha.state.as_deref() == Some("started"))
                {
                    return Ok(retry::Step::Done(Ok(on)));
                }
            }
            Ok(retry::Step::Again(Err(anyhow!(
                "{what}: it is on {on} at the run's timeout; check `ha-manager status`, or \
                 raise timeout"
            ))))
        });
        let node = self.ended(tried, &what)?;
        self.ha_carried.push(format!(
            "moved VM {} from {} to {node} (node affinity, hamigrate)",
            cur.vmid, cur.node
        ));
        Ok(node)
    }
}
