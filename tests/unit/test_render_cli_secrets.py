"""`vkgate render` prints no secret value in any encoding, on any backend (docs/design/secrets.md,
"What vkgate prints").

The Nomad Variable holds a Secret env value JSON-escaped, Batch shell-quotes an argument that
expands one and base64s a Secret file: a mask that looks for the raw value alone printed all of
those.  Each case renders a pod through the real command (``gateway.cli.main``) and looks for
the secret in every string of the printed spec (keys too) and in stderr, as raw text, JSON- and
shell-escaped, and base64 (both alphabets, with and without padding).
"""

from __future__ import annotations

import base64
import json
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from gateway import cli

BACKENDS = ("nomad", "zun", "batch")
#: In-process renders (no worker processes to start per example).
CONFIG = '[templates]\nrender_workers = 0\n\n[backend.zun]\nsecret_env = "allow"\n'


@pytest.fixture(autouse=True)
def no_config_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VKGATE_CONFIG", raising=False)


def pod_yaml(secret: str, *, backend: str, files: bool = True) -> str:
    """A pod with the secret as a Secret env value, in a literal that expands it, in an
    argument and (not on Zun, which has no file volumes) as a Secret file."""
    container: dict[str, Any] = {
        "name": "app",
        "image": "nginx:1.27",
        "command": ["/bin/app"],
        "args": ["--pw=$(PW)", "$(PW)"],
        "env": [
            {"name": "PW", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "pw"}}},
            {"name": "DSN", "value": "postgres://app:$(PW)@db:5432/app"},
        ],
    }
    spec: dict[str, Any] = {"containers": [container]}
    if files and backend != "zun":
        spec["volumes"] = [{"name": "creds", "secret": {"secretName": "creds"}}]
        container["volumeMounts"] = [{"name": "creds", "mountPath": "/etc/creds"}]
    docs = [
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"}, "spec": spec},
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "creds"},
            "data": {"pw": base64.b64encode(secret.encode()).decode()},
        },
    ]
    return yaml.safe_dump_all(docs)


def render(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, backend: str, *extra: str
) -> tuple[int, str, str]:
    pod = tmp_path / "pod.yaml"
    pod.write_text(text)
    config = tmp_path / "vkgate.toml"
    config.write_text(CONFIG)
    code = cli.main(["render", str(pod), "--backend", backend, "-c", str(config), *extra])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def encodings(secret: str) -> set[str]:
    """What the test looks for: raw, JSON-escaped (ASCII and not), shell-quoted, base64."""
    data = secret.encode()
    found = {
        secret,
        json.dumps(secret)[1:-1],
        json.dumps(secret, ensure_ascii=False)[1:-1],
        shlex.quote(secret).removeprefix("'").removesuffix("'"),
    }
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        found |= {encode(data).decode(), encode(data).decode().rstrip("=")}
    return found


def strings(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for k, v in node.items():
            yield str(k)
            yield from strings(v)
    elif isinstance(node, list):
        for v in node:
            yield from strings(v)
    elif isinstance(node, str):
        yield node


def leaks(secret: str, out: str, err: str) -> list[str]:
    texts = [*strings(json.loads(out)), err] if out else [err]
    return sorted({e for e in encodings(secret) for t in texts if e in t})


# --------------------------------------------------------------------------- fixed cases

#: The characters JSON escapes (the Nomad Variable), and the shell's quote (Batch's command line).
TRICKY = {
    "quote": 'pa"ss-word-1',
    "backslash": "pa\\ss-word-2",
    "newline": "pa\nss-word-3",
    "single quote": "pa'ss-word-4",
    "all": "p\"a\\s\ns's-word-5",
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("secret", TRICKY.values(), ids=TRICKY.keys())
def test_render_masks_secrets_with_characters_that_need_escaping(
    backend: str, secret: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = pod_yaml(secret, backend=backend)
    code, out, err = render(tmp_path, capsys, text, backend, "--show-secrets")
    assert code == 0, err
    assert leaks(secret, out, err), "the secret reaches the spec (else this test proves nothing)"
    code, out, err = render(tmp_path, capsys, text, backend, "--explain")
    assert code == 0, err
    assert leaks(secret, out, err) == []
    assert "*****" in out


def test_a_refused_pod_prints_no_secret_either(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Zun refuses Secret files: the refusal and --explain are masked too."""
    secret = TRICKY["all"]
    code, out, err = render(tmp_path, capsys, pod_yaml(secret, backend="nomad"), "zun", "--explain")
    assert code == 1 and "secret volumes are not supported" in err
    assert leaks(secret, out, err) == []


def test_a_render_error_that_quotes_the_output_line_is_masked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A broken template: the error quotes the rendered line, which holds the secret."""
    secret = TRICKY["all"]
    tdir = tmp_path / "tpl" / "nomad"
    tdir.mkdir(parents=True)
    (tdir / "broken.j2").write_text(
        '{"Job": {"ID": "x", "pw": {{ containers[0].args | tojson }}, oops}}'
    )
    code, out, err = render(
        tmp_path,
        capsys,
        pod_yaml(secret, backend="nomad"),
        "nomad",
        "--templates-dir",
        str(tmp_path / "tpl"),
        "--template",
        "nomad/broken.j2",
    )
    assert code == 1 and "not valid JSON" in err and "*****" in err
    assert leaks(secret, out, err) == []


# --------------------------------------------------------------------------- any secret

SECRETS = st.text(
    alphabet=st.one_of(
        st.characters(codec="utf-8"),  # printable, unicode and control characters
        st.sampled_from("\"\\\n'$`{}%=*\t\r\x00"),
    ),
    min_size=4,
    max_size=40,
)
#: Rendered with an innocent value: a secret that is part of what every render prints (a key
#: name, the pod's uid, the mask itself) cannot be told apart, so such draws are skipped.
INNOCENT = "Zq7innocentvalue"


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_secret_string_is_printed_in_any_encoding(
    backend: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = render(tmp_path, capsys, pod_yaml(INNOCENT, backend=backend), backend)
    assert code == 0, err
    baseline = [*strings(json.loads(out)), err, "*****"]

    @settings(
        max_examples=12,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(secret=SECRETS)
    def check(secret: str) -> None:
        assume(not any(e in t for e in encodings(secret) for t in baseline))
        code, out, err = render(
            tmp_path, capsys, pod_yaml(secret, backend=backend), backend, "--explain"
        )
        assert code == 0, err
        assert leaks(secret, out, err) == []

    check()
