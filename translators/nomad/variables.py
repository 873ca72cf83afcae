"""The job's own Nomad Variable: where a pod's files and Secret env values live, not the job.

Every ConfigMap, Secret, projected and downwardAPI file of the pod and every Secret env value is
an item of the Variable ``nomad/jobs/<job ID>`` (``variable_path``), in the job's namespace
(docs/design/secrets.md).  The job carries only task ``Templates`` that print one item each
(``file_template``, ``secret_env_template``; ``Variable.read``), with vkgate's own fixed
delimiters (the body is the job ID and item keys), so no pod data is ever evaluated as a
template and the job spec carries none of the file contents or Secret env values.

Two halves, one concept:

* rendering (pure): ``Variable`` collects the items while ``jobs.backend_info`` builds the
  tasks, and ``variable_size`` checks them against Nomad's limit before anything is sent;
* storage (I/O, internal to the package): ``VariableStore``, held by the translator, writes the
  items before the job is registered (only when they changed: a changed ConfigMap or Secret
  rewrites the Variable only, and the templates' ``ChangeMode: noop`` rewrites the files in the
  running task, as a kubelet updates mounted files) and deletes the Variable when the purged
  job's allocations have ended.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from typing import Any

from translators.base import BackendError, BackendNotFound, TranslationError
from translators.nomad import literal
from translators.nomad.client import NomadClient

log = logging.getLogger(__name__)

#: (region, namespace, job ID), as ``views.Key``.
Key = tuple[str, str, str]


def variable_path(jid: str) -> str:
    """The job's own Nomad Variable: its tasks may read it with their workload identity."""
    return f"nomad/jobs/{jid}"


#: Fixed delimiters of templates vkgate writes itself: the body is ours (variable path from the
#: job ID, ``[A-Za-z0-9._-]`` only; item keys ``f<n>``/``e<n>``), never pod data.
VAR_LEFT, VAR_RIGHT = "[[vkgate", "vkgate]]"


#: Nomad refuses a Variable whose items encode to more than 64 KiB (1.6.3 answers 500; checked
#: on the e2e cluster, docs/design/nomad.md "Variables").
MAX_VARIABLE_BYTES = 64 * 1024


def variable_size(items: Mapping[str, str]) -> int:
    """The items' size as Nomad's Go JSON encodes them (``<``, ``>``, ``&`` as ``\\u003c``)."""
    text = json.dumps(dict(items), ensure_ascii=False, separators=(",", ":"))
    return len(text.encode()) + 5 * sum(text.count(ch) for ch in "<>&")


class Variable:
    """The items of a job's Nomad Variable (docs/design/secrets.md): every volume file and
    every Secret env value of the pod, so none of them sits in the job spec."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.items: dict[str, str] = {}

    def put(self, prefix: str, value: str) -> str:
        key = f"{prefix}{sum(1 for k in self.items if k.startswith(prefix))}"
        self.items[key] = value
        return key

    def read(self, expression: str) -> str:
        """A template body that prints one item: the value is data, never template text."""
        return (
            f'{VAR_LEFT} with nomadVar "{self.path}" {VAR_RIGHT}'
            f"{VAR_LEFT} {expression} {VAR_RIGHT}{VAR_LEFT} end {VAR_RIGHT}"
        )


def file_template(var: Variable, content: bytes, mode: int, dest: str) -> dict[str, Any]:
    """A file whose content is an item of the job's Variable (base64 when not UTF-8);
    ``ChangeMode: noop``: a changed item rewrites the file without touching the task."""
    try:
        key = var.put("f", content.decode("utf-8"))
        expression = "." + key
    except UnicodeDecodeError:
        import base64

        key = var.put("f", base64.b64encode(content).decode())
        expression = f"base64Decode .{key}.Value"
    return {
        "EmbeddedTmpl": var.read(expression),
        "DestPath": dest,
        "ChangeMode": "noop",
        "Perms": f"{mode:04o}",
        "LeftDelim": VAR_LEFT,
        "RightDelim": VAR_RIGHT,
    }


#: Where a task's Secret env values are rendered (in-memory secrets dir, ``Envvars``).
SECRET_ENV_FILE = "secrets/vkgate-secret.env"


def secret_env_template(
    var: Variable, env: Mapping[str, str], *, container: str
) -> dict[str, Any] | None:
    """An ``Envvars`` template of the Secret env values, each an item of the job's Variable
    (quoted for go-envparse as ``literal.split_env`` quotes), so the values are not in
    ``Env``.  ``ChangeMode: noop``: a changed Secret reaches the file, not the running process
    (its env changes only with a restart, as on a kubelet)."""
    if not env:
        return None
    ip = f'{VAR_LEFT} env "{literal.POD_IP_ATTR}" {VAR_RIGHT}'
    lines = [f'{VAR_LEFT} with nomadVar "{var.path}" {VAR_RIGHT}']
    for key, value in env.items():
        if not literal.ENVFILE_KEY.fullmatch(key):
            raise TranslationError(
                f"env var {key!r} from a Secret: its value goes to a Nomad env file (so it is not"
                " in the job spec), and Nomad env files only take names matching"
                " [A-Za-z_][A-Za-z0-9_./]*",
                field=f"spec.containers[{container}].env[{key}]",
            )
        parts = [
            f"{VAR_LEFT} .{var.put('e', json.dumps(p, ensure_ascii=False)[1:-1])} {VAR_RIGHT}"
            for p in value.split(literal.POD_IP_SENTINEL)
        ]
        lines.append(f'{key}="{ip.join(parts)}"\n')
    lines.append(f"{VAR_LEFT} end {VAR_RIGHT}")
    return {
        "EmbeddedTmpl": "".join(lines),
        "DestPath": SECRET_ENV_FILE,
        "ChangeMode": "noop",
        "Perms": "0600",
        "Envvars": True,
        "LeftDelim": VAR_LEFT,
        "RightDelim": VAR_RIGHT,
    }


class VariableStore:
    """Writes and deletes the jobs' Variables for the translator (internal to the package),
    remembering what it wrote so an unchanged Variable costs no request."""

    def __init__(self, client: NomadClient) -> None:
        self.client = client
        #: (region, namespace, job ID) → digest of the Variable items last written.
        self.written: dict[Key, str] = {}
        #: Jobs this process registered without a Variable: their purge deletes none.
        self.no_variable: set[Key] = set()

    async def write(
        self, jid: str, items: Mapping[str, str], *, namespace: str, region: str
    ) -> None:
        """Write the job's Variable (the pod's files and Secret env values) when its items
        differ from what this process last wrote; a task's templates re-render from it
        (docs/design/secrets.md).  Nomad refuses a Variable without items, so none is written
        then."""
        key = (region, namespace, jid)
        digest = hashlib.sha256(json.dumps(items, sort_keys=True).encode()).hexdigest()
        if not items or self.written.get(key) == digest:
            return
        path = variable_path(jid)
        self.no_variable.discard(key)
        await self.client.call(
            "PUT",
            f"/var/nomad/jobs/{jid}",
            body={"Namespace": namespace, "Path": path, "Items": dict(items)},
            namespace=namespace,
            region=region,
        )
        self.written[key] = digest

    def registering(
        self, jid: str, items: Mapping[str, str], *, namespace: str, region: str
    ) -> None:
        """A job this process registers with no items and no Variable written before: its
        purge deletes none."""
        if not items and (region, namespace, jid) not in self.written:
            self.no_variable.add((region, namespace, jid))

    async def delete(self, jid: str, *, namespace: str, region: str) -> None:
        """Remove the purged job's Variable (none: 404, done).  A failure is logged, not
        raised: the job is gone already, and a delete must not hang on its leftovers."""
        self.written.pop((region, namespace, jid), None)
        if (region, namespace, jid) in self.no_variable:
            self.no_variable.discard((region, namespace, jid))
            return  # registered here without one: nothing to delete
        try:
            await self.client.call(
                "DELETE", f"/var/nomad/jobs/{jid}", namespace=namespace, region=region
            )
        except BackendNotFound:
            pass
        except BackendError as exc:
            log.warning("nomad: removing the Variable of job %s failed: %s", jid, exc)
