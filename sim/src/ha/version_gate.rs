//! Which HA configuration a `--pve-version` has: PVE 9 (pve-ha-manager 5.0.2) migrates HA
//! groups to node-affinity rules and refuses groups from then on; PVE 8 (pve-ha-manager 4.x)
//! has groups and no rules. The one place the HA side of pve-sim asks the version.

/// Whether this version has HA rules, and has migrated (and now refuses) HA groups:
/// pve-ha-manager 5.0.2 ("ha groups have been migrated to rules"), first shipped with PVE 9.0;
/// the row `Change::HaRules` of the version table (`crate::versions`).
pub fn has_rules(version: &str) -> bool {
    crate::versions::ha_groups_are_rules(version)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nine_has_rules_and_eight_groups() {
        assert!(has_rules("9.0") && has_rules("9.1") && has_rules("9.2"));
        assert!(!has_rules("8.4") && !has_rules("8.0"));
    }
}
