"""Can vkgate's token do what a node needs?  The ACL half of the Nomad backend's ``ping``.

A leader that answers is not enough for the Node to be Ready: with a token that lacks
``list-jobs`` the initial backend list fails with 403 and every pod stays Pending for ever
(measured on Nomad 1.6.3 with ACLs on; docs/design/nomad.md, "ACL").  So the ping also checks
the grants ``acl.py`` marks essential, in every namespace and region vkgate uses:

==========  ======================================  ===============================================
grant       probe                                   when
==========  ======================================  ===============================================
list-jobs   ``GET /jobs?per_page=1``                every ping
read-job    ``GET /job/<PROBE_JOB>`` (404 = allowed) every ping
submit-job  ``POST /job/<PROBE_JOB>/plan``           the first ping, then only while a refusal stands
            (a dry run: nothing is registered)      (a probe's, or a real submit's or delete's), so
                                                    the node turns Ready again once the policy is
                                                    fixed, even with no pod left to retry
==========  ======================================  ===============================================

Probes are not retried (the health loop is the retry).  Every refusal found is raised at once
as one ``BackendAuthError`` naming each missing grant; any other failure of a probe is
raised as it is (the health check counts it like an unreachable backend).  Nomad runs a
plan's admission checks before its ACL check, so the probe job must be valid: an answer
other than 200 or ``Permission denied`` leaves the submit state unknown (probed again).
"""

from __future__ import annotations

from typing import Any

from translators.base import BackendAuthError, BackendError, BackendNotFound
from translators.nomad.client import NomadClient
from vkgate_core.retry import NO_RETRY

#: The job ID the probes ask about; never registered (a plan is a dry run).
PROBE_JOB = "vkgate-acl-probe"


def probe_job() -> dict[str, Any]:
    """The smallest valid job: one batch group of count 0 (the plan schedules nothing)."""
    return {
        "Job": {
            "ID": PROBE_JOB,
            "Name": PROBE_JOB,
            "Type": "batch",
            "Datacenters": ["*"],
            "TaskGroups": [
                {
                    "Name": "probe",
                    "Count": 0,
                    "Tasks": [
                        {"Name": "probe", "Driver": "raw_exec", "Config": {"command": "true"}}
                    ],
                }
            ],
        }
    }


class AccessCheck:
    """The essential grants of one token, probed per (region, namespace)."""

    def __init__(self, client: NomadClient) -> None:
        self.client = client
        #: (region, namespace) → the submit probe's last verdict (absent: not known yet).
        self.can_submit: dict[tuple[str, str], bool] = {}

    def scopes(self) -> list[tuple[str, str]]:
        cfg = self.client.config
        return [(r, ns) for r in cfg.all_regions for ns in cfg.all_namespaces]

    async def check(self) -> None:
        """Raise ``BackendAuthError`` naming every essential grant the token lacks: the first
        refusal in full (call, answer, what it needs), the others by grant — one line that
        fits a Node condition."""
        refusals: dict[tuple[str, str], str] = {}
        for region, ns in self.scopes():
            for capability, message in await self._scope(region, ns):
                refusals.setdefault((ns, capability), message)
        if not refusals:
            return
        (_, message), *others = refusals.items()
        if others:
            also: dict[str, list[str]] = {}
            for ns, capability in (key for key, _ in others):
                also.setdefault(ns, []).append(capability)
            message += "; also refused: " + "; ".join(
                f'{", ".join(caps)} in namespace "{ns}"' for ns, caps in also.items()
            )
        raise BackendAuthError(message, status=403)

    async def _scope(self, region: str, ns: str) -> list[tuple[str, str]]:
        """(capability, refusal message) for each essential grant refused in one scope."""
        out: list[tuple[str, str]] = []
        try:
            await self.client.call(
                "GET", "/jobs", params={"per_page": 1}, namespace=ns, region=region, retry=NO_RETRY
            )
        except BackendAuthError as exc:
            out.append(("list-jobs", str(exc)))
        try:
            await self.client.call(
                "GET", f"/job/{PROBE_JOB}", namespace=ns, region=region, retry=NO_RETRY
            )
        except BackendNotFound:
            pass
        except BackendAuthError as exc:
            out.append(("read-job", str(exc)))
        known = self.can_submit.get((region, ns))
        if known is not True or self.client.refusals.get("submit-job", ns) is not None:
            try:
                await self.client.call(
                    "POST",
                    f"/job/{PROBE_JOB}/plan",
                    body=probe_job(),
                    namespace=ns,
                    region=region,
                    retry=NO_RETRY,
                )
                self.can_submit[(region, ns)] = True
            except BackendAuthError as exc:
                self.can_submit[(region, ns)] = False
                out.append(("submit-job", str(exc)))
            except BackendError:
                self.can_submit.pop((region, ns), None)  # not the ACL check's answer
                standing = self.client.refusals.get("submit-job", ns)
                if standing is not None:
                    out.append(("submit-job", standing))
        return out
