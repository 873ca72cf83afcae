"""The one secret mask (translators/render/masking.py): every encoding of a secret value is
masked, inside larger strings and base64 blobs, in spec keys, in error messages and at the cut
of a quoted excerpt; short values only where a whole string is one."""

from __future__ import annotations

import base64
import json
import shlex

import pytest
import yaml

from translators.base import (
    EnvVar,
    ResolvedContainer,
    ResolvedPod,
    ResolvedVolume,
    TranslationError,
    VolumeFile,
)
from translators.render.masking import MASK, Masker, mask_secrets, masked_errors
from translators.render.output import parse_output
from vkgate_core.imageregistry import RegistryCredential

#: The three characters JSON escapes, the shell's quote, and HCL's interpolation.
SECRET = "p\"q\\r\ns't${u}"


def b64_forms(data: bytes) -> list[str]:
    forms = []
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        whole = encode(data).decode()
        forms += [whole, whole.rstrip("=")]
    return forms


ENCODED = {
    "raw": SECRET,
    "json": json.dumps(SECRET, ensure_ascii=False)[1:-1],
    "json ascii": json.dumps(SECRET)[1:-1],
    "json of json": json.dumps(json.dumps(SECRET)[1:-1])[1:-1],
    "hcl": json.dumps(SECRET)[1:-1].replace("${", "$${"),
    "yaml double": yaml.dump(SECRET, default_style='"', width=10**6).strip()[1:-1],
    "yaml single": SECRET.replace("'", "''"),
    "shell single": shlex.quote(SECRET)[1:-1],
    "shell single 2": SECRET.replace("'", "'\\''"),
    "shell double": SECRET.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$"),
    "repr": repr(SECRET)[1:-1],
    **{f"base64 {i}": f for i, f in enumerate(b64_forms(SECRET.encode()))},
    "base64 of json": base64.b64encode(json.dumps(SECRET)[1:-1].encode()).decode(),
}


@pytest.mark.parametrize("form", ENCODED.values(), ids=ENCODED.keys())
def test_every_encoding_is_masked_inside_a_larger_string(form: str) -> None:
    masked = Masker([SECRET]).text(f"before {form} after")
    assert masked == f"before {MASK} after"


@pytest.mark.parametrize("before", range(6))
@pytest.mark.parametrize("after", range(4))
@pytest.mark.parametrize("encode", [base64.b64encode, base64.urlsafe_b64encode])
def test_base64_of_a_larger_blob_keeps_no_character_that_carries_a_secret_bit(
    before: int, after: int, encode: object
) -> None:
    """A whole file or env block base64'd at once: the secret sits at any byte offset."""
    secret = SECRET.encode()
    data = b"\x11" * before + secret + b"\x22" * after
    blob = encode(data).decode()  # type: ignore[operator]
    masked = Masker([SECRET]).text(f"VAR={blob};")
    head, _, tail = masked.removeprefix("VAR=").partition(MASK)
    assert _ and MASK not in tail
    # What is left of the blob are characters made of the neighbours' bits only.
    end = 8 * (before + len(secret))
    assert len(head) <= (8 * before) // 6
    assert len(tail.rstrip(";").rstrip("=")) <= -(-8 * len(data) // 6) - -(-end // 6)


def test_a_binary_file_is_masked_as_base64() -> None:
    content = b"\xff\xfe\x00secret-bytes\x80"
    pod = ResolvedPod(
        "ns",
        "web",
        "u",
        "vk",
        {},
        volumes=(ResolvedVolume("s", "secret", files=(VolumeFile("k", content),)),),
    )
    blob = base64.b64encode(content).decode()
    assert mask_secrets({"f0": blob, "x": f"a{blob}b"}, pod) == {"f0": MASK, "x": f"a{MASK}b"}


def test_every_kind_of_secret_of_a_pod_is_masked() -> None:
    pod = ResolvedPod(
        "ns",
        "web",
        "u",
        "vk",
        {},
        containers=(
            ResolvedContainer("app", "img", env=(EnvVar("PW", "env-secret", secret=True),)),
        ),
        init_containers=(
            ResolvedContainer("init", "img", env=(EnvVar("T", "init-secret", secret=True),)),
        ),
        volumes=(
            ResolvedVolume(
                "p", "projected", files=(VolumeFile("token", b"sa-token-value", secret=True),)
            ),
            ResolvedVolume("c", "configMap", files=(VolumeFile("conf", b"not-a-secret"),)),
        ),
        registry_credentials=(RegistryCredential("r.io", "u", "registry-pw"),),
    )
    spec = {"v": ["env-secret", "init-secret", "sa-token-value", "registry-pw", "not-a-secret"]}
    assert mask_secrets(spec, pod) == {"v": [MASK] * 4 + ["not-a-secret"]}


def test_a_short_secret_is_masked_only_as_a_whole_string() -> None:
    m = Masker(["ab\n"])
    assert m.text("ab\n") == MASK
    assert m.text("ab\\n") == MASK  # JSON-escaped, whole
    assert m.text("YWIK") == MASK  # base64, whole
    assert m.text("tab\nle") == "tab\nle"


def test_keys_are_masked_and_stay_apart() -> None:
    m = Masker(["secret-one", "secret-two"])
    assert m.spec({"secret-one": 1, "secret-two": 2, "k": ["secret-one"]}) == {
        MASK: 1,
        f"{MASK}~2": 2,
        "k": [MASK],
    }


def test_text_beside_the_mask_that_forms_the_secret_again_is_masked() -> None:
    assert "=***" not in Masker(["=***"]).text("--pw==***")


def test_an_excerpt_cut_inside_a_secret_keeps_none_of_it() -> None:
    """A render error quotes 120 characters of the bad output line: a secret that straddles
    the cut is masked up to the cut."""
    secret = "QZ7#" + "k" * 40
    text = '{"a": "' + "x" * 100 + secret + '" oops}'
    with pytest.raises(TranslationError) as info:
        parse_output("t/job.j2", text, max_size=10**6, max_depth=64)
    assert "QZ7" in str(info.value)  # the excerpt quotes the start of the secret
    masked = str(Masker([secret]).error(info.value))
    assert "QZ" not in masked and MASK in masked and "…" in masked


def test_a_yaml_error_snippet_keeps_none_of_the_secret() -> None:
    secret = "QZ7#-" + "k" * 30
    text = "a: [" + "x" * 60 + ", " + secret + "\nb: {"
    with pytest.raises(TranslationError) as info:
        parse_output("t/job.yaml.j2", text, max_size=10**6, max_depth=64)
    masked = str(Masker([secret]).error(info.value))
    assert "QZ7" not in masked and "kkkk" not in masked


def test_error_masks_the_message_and_the_detail() -> None:
    exc = TranslationError(f"bad value {SECRET!r}", template="nomad/job.j2", line=3, field="x")
    Masker([SECRET]).error(exc)
    assert SECRET not in str(exc) and repr(SECRET)[1:-1] not in str(exc)
    assert str(exc).startswith("nomad/job.j2:3: bad value ") and MASK in exc.detail


def test_masked_errors_masks_what_passes_through_and_reraises_it() -> None:
    pod = ResolvedPod(
        "ns",
        "web",
        "u",
        "vk",
        {},
        containers=(ResolvedContainer("app", "img", env=(EnvVar("PW", SECRET, secret=True),)),),
    )
    with pytest.raises(ValueError) as info, masked_errors(pod):
        raise ValueError(f"quantity: {SECRET!r}")
    assert str(info.value) == f"quantity: '{MASK}'"


def test_no_secrets_masks_nothing() -> None:
    m = Masker(())
    assert not m
    spec = {"a": ["*", SECRET]}
    assert m.spec(spec) is spec and m.text(SECRET) == SECRET
