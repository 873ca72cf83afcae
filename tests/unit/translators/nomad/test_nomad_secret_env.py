"""Secret env values as items of the job's Nomad Variable (translators/nomad/variables.py
``secret_env_template``): quoted for go-envparse, the pod IP placeholder as the one live
reference, names Nomad's env files cannot take refused with the field named."""

from __future__ import annotations

import json

import pytest

from translators.base import TranslationError
from translators.nomad.literal import POD_IP_SENTINEL
from translators.nomad.variables import Variable, secret_env_template


def test_each_secret_value_is_an_item_quoted_for_the_env_file() -> None:
    var = Variable("nomad/jobs/j")
    value = 'a "b" \\ ${HOME}\n{{ x }}'
    tmpl = secret_env_template(var, {"PW": value, "B": "2"}, container="app")
    assert tmpl is not None
    assert var.items == {"e0": json.dumps(value)[1:-1], "e1": "2"}
    assert tmpl["EmbeddedTmpl"] == (
        '[[vkgate with nomadVar "nomad/jobs/j" vkgate]]'
        'PW="[[vkgate .e0 vkgate]]"\nB="[[vkgate .e1 vkgate]]"\n[[vkgate end vkgate]]'
    )
    assert tmpl["Envvars"] is True and tmpl["ChangeMode"] == "noop"
    assert tmpl["DestPath"].startswith("secrets/")
    assert value not in json.dumps(tmpl)


def test_no_secret_env_no_template() -> None:
    var = Variable("nomad/jobs/j")
    assert secret_env_template(var, {}, container="app") is None
    assert var.items == {}


def test_the_pod_ip_placeholder_becomes_the_node_address_between_items() -> None:
    var = Variable("nomad/jobs/j")
    tmpl = secret_env_template(var, {"URL": f"http://{POD_IP_SENTINEL}:80"}, container="app")
    assert tmpl is not None
    assert var.items == {"e0": "http://", "e1": ":80"}
    assert (
        'URL="[[vkgate .e0 vkgate]][[vkgate env "attr.unique.network.ip-address" vkgate]]'
        '[[vkgate .e1 vkgate]]"'
    ) in tmpl["EmbeddedTmpl"]


def test_a_name_nomads_env_file_cannot_take_is_refused_naming_it() -> None:
    with pytest.raises(TranslationError) as err:
        secret_env_template(Variable("nomad/jobs/j"), {"my-var": "x"}, container="app")
    assert err.value.field == "spec.containers[app].env[my-var]"
    assert "[A-Za-z_][A-Za-z0-9_./]*" in str(err.value)
