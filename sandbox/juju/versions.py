"""What each Juju the sandbox plays does differently, as juju/juju's sources
and release notes say (docs/research/issue-41-sources.md has the citations).

`Controller(juju_version=...)` picks the rules by the version's major:

- Juju 3.x (3.6 is the LTS): what the rest of the sandbox plays.
- Juju 4.0 (4.0.0 on 14 November 2025; 4.0.15 the newest here):
  - a charm is deployed or refreshed from a packed `.charm` only (`juju
    deploy <directory>` is gone), and a charm whose manifest.yaml has no
    bases is refused ("charm metadata without bases in manifest not valid",
    internal/charm/meta.go): the series era's metadata is not a format;
  - no `leader-get`/`leader-set` hook tools (not registered in
    internal/worker/uniter/runner/jujuc/server.go), and the leadership
    resolver queues no `leader-settings-changed`;
  - no `pre-series-upgrade`/`post-series-upgrade` (internal/charm/hooks:
    `juju upgrade-machine` is gone);
  - relation settings are seeded with `ingress-address` and
    `egress-subnets` only: `private-address` is no longer maintained;
  - an action's parameters default to `additionalProperties: false`
    (internal/charm/actions.go ReadActionsYaml);
  - the hook environment has no `JUJU_SLA`, `JUJU_METER_STATUS` or
    `JUJU_METER_INFO` (and no `JUJU_TARGET_*`: no series upgrade).
"""
from __future__ import annotations

from dataclasses import dataclass

# the newest of each Juju the sandbox plays, by what operators call it
JUJU_3_6, JUJU_4 = "3.6.4", "4.0.15"
JUJU_RELEASES = {"3.6": JUJU_3_6, "4.0": JUJU_4}
SERIES_UPGRADE_HOOKS = ("pre-series-upgrade", "post-series-upgrade")
# Juju 4.0.0's release notes: "leader-get, leader-set hook tools are removed"
LEADER_SETTINGS_TOOLS = frozenset({"leader-get", "leader-set"})
NO_MANIFEST_BASES = "charm metadata without bases in manifest not valid"


@dataclass(frozen=True)
class JujuRules:
    version: str
    deploys_directories: bool = True           # `juju deploy ./dir`
    needs_manifest_bases: bool = False         # manifest.yaml with bases, or refused
    removed_tools: frozenset = frozenset()
    series_upgrade: bool = True                # pre/post-series-upgrade hooks
    leader_settings_changed: bool = True       # queued for non-leaders
    seeds_private_address: bool = True         # in a unit's relation settings
    actions_allow_extra_params: bool = True    # additionalProperties' default
    metering_env: bool = True                  # JUJU_SLA, JUJU_METER_STATUS/_INFO

    @property
    def major(self) -> int:
        return int(self.version.split(".", 1)[0])


def rules_for(version: str) -> JujuRules:
    if int(version.split(".", 1)[0]) < 4:
        return JujuRules(version)
    return JujuRules(version, deploys_directories=False, needs_manifest_bases=True,
                     removed_tools=LEADER_SETTINGS_TOOLS, series_upgrade=False,
                     leader_settings_changed=False, seeds_private_address=False,
                     actions_allow_extra_params=False, metering_env=False)


def manifest_problem(manifest: dict | None) -> str | None:
    """Juju 4's refusal of a charm's metadata, if it has one: no manifest
    bases (the v1, series-era format)."""
    bases = (manifest or {}).get("bases")
    if not bases or not all(isinstance(b, dict) and b.get("name") and b.get("channel")
                            for b in bases):
        return NO_MANIFEST_BASES
    return None
