//! The routes of `/cluster/ha/rules` (PVE 9, API2/HA/Rules.pm) and `/cluster/ha/groups`
//! (API2/HA/Groups.pm): the path's id as a parameter, the schema checked, the handler called.
//! PVE 8 has no rules API (pve-ha-manager 4.x: pve-http-server's 501 for a path no handler
//! serves). Kept out of the router so that its hook stays one line.

use crate::ha::version_gate::has_rules;
use crate::ha::{groups, rules};
use crate::http::handler::{ApiErr, ApiResult, Params};
use crate::schema;
use crate::state::Sim;

/// One request below `/cluster/ha/{kind}` (`kind`: `rules` or `groups`); `uri` is its path
/// without `/api2/json`, for the 501.
pub fn route(
    sim: &Sim,
    method: &str,
    kind: &str,
    rest: &[&str],
    params: &mut Params,
    uri: &str,
) -> ApiResult {
    let unknown = || Err(ApiErr::not_implemented(method, uri));
    if kind == "rules" {
        if !has_rules(&sim.opts.version) {
            return unknown();
        }
        return match (method, rest) {
            ("GET", []) => {
                schema::check(&schema::ha_rules_index(), params)?;
                rules::index(sim, params)
            }
            ("POST", []) => {
                schema::check(&schema::ha_rule_write(false), params)?;
                rules::check_formats(params)?;
                rules::create(sim, params)
            }
            (_, [id]) => {
                params.insert("rule".into(), id.to_string());
                match method {
                    "GET" => {
                        schema::check(&schema::ha_rule_id(), params)?;
                        rules::check_formats(params)?;
                        rules::read(sim, id)
                    }
                    "PUT" => {
                        schema::check(&schema::ha_rule_write(true), params)?;
                        rules::check_formats(params)?;
                        rules::update(sim, id, params)
                    }
                    "DELETE" => {
                        schema::check(&schema::ha_rule_id(), params)?;
                        rules::check_formats(params)?;
                        rules::delete(sim, id)
                    }
                    _ => unknown(),
                }
            }
            _ => unknown(),
        };
    }
    match (method, rest) {
        ("GET", []) => {
            schema::check(&[], params)?;
            groups::index(sim)
        }
        ("POST", []) => {
            schema::check(&schema::ha_group_write(false), params)?;
            groups::create(sim, params)
        }
        (_, [id]) => {
            params.insert("group".into(), id.to_string());
            match method {
                "GET" => {
                    schema::check(&schema::ha_group_id(), params)?;
                    groups::read(sim, id)
                }
                "PUT" => {
                    schema::check(&schema::ha_group_write(true), params)?;
                    groups::update(sim, id, params)
                }
                "DELETE" => {
                    schema::check(&schema::ha_group_id(), params)?;
                    groups::delete(sim, id)
                }
                _ => unknown(),
            }
        }
        _ => unknown(),
    }
}
