"""translators.nomad.literal: the escapes Nomad needs (real-agent proof: tests/e2e/test_nomad_literal_e2e.py)."""

from __future__ import annotations

import pytest

from translators.base import TranslationError
from translators.nomad.literal import (
    ENV_FILE,
    POD_IP_SENTINEL,
    config_literal,
    needs_env_file,
    split_env,
)


@pytest.mark.parametrize(
    ("raw", "sent"),
    [
        ("${VAR:+yes}", "$${VAR:+yes}"),
        ("%{ if x }", "%%{ if x }"),
        ("$${HOME}", "$$${HOME}"),
        ("$ % { } \\ \" '", "$ % { } \\ \" '"),
        ("$(UNDEFINED)", "$(UNDEFINED)"),
        (
            f"http://{POD_IP_SENTINEL}:80/${{x}}",
            "http://${attr.unique.network.ip-address}:80/$${x}",
        ),
    ],
)
def test_config_strings_are_escaped_for_hcl_and_only_the_pod_ip_interpolates(
    raw: str, sent: str
) -> None:
    assert config_literal(raw) == sent


@pytest.mark.parametrize(
    ("value", "moved"),
    [
        ("${HOME}", True),
        ("x${attr.kernel.name}y", True),
        ("${VAR:+yes}", False),  # not a name Nomad's Env regexp matches
        ("$HOME %{x} ${", False),
        (POD_IP_SENTINEL, False),
    ],
)
def test_env_values_nomad_would_replace_move_to_the_env_file(value: str, moved: bool) -> None:
    assert needs_env_file(value) is moved


def test_split_env_writes_a_quoted_env_file_with_the_pod_ip_from_the_node() -> None:
    env = split_env(
        {
            "A": "plain",
            "B": 'say "${HOME}"\n',
            "C": f"{POD_IP_SENTINEL}:${{PORT}}",
            "D": POD_IP_SENTINEL,
        },
        container="app",
    )
    assert env.env == {"A": "plain", "D": "${attr.unique.network.ip-address}"}
    assert env.template is not None
    assert env.template["DestPath"] == ENV_FILE and env.template["Envvars"] is True
    assert env.template["EmbeddedTmpl"] == (
        'B="say \\"${HOME}\\"\\n"\n'
        'C="[[vkgate env "attr.unique.network.ip-address" vkgate]]:${PORT}"\n'
    )
    assert (env.template["LeftDelim"], env.template["RightDelim"]) == ("[[vkgate", "vkgate]]")


def test_env_file_delimiters_avoid_the_content() -> None:
    env = split_env({"B": "[[vkgate ${HOME}"}, container="app")
    assert env.template is not None and env.template["LeftDelim"] == "[[vkgate1"


def test_an_env_name_the_env_file_cannot_carry_is_a_clear_error() -> None:
    with pytest.raises(TranslationError, match=r"env var 'my-var'.*\$\{HOME\}") as err:
        split_env({"my-var": "${HOME}"}, container="app")
    assert err.value.field == "spec.containers[app].env[my-var]"
