"""The pod lifecycle with the gateway authenticated as the deploy/ ServiceAccount — a token
of ``vkgate-system/vkgate`` bound only by deploy/common/rbac.yaml, never admin
(docs/design/rbac.md).

The tests below are the regular e2e tests (imported, so they run a second time here) with
``gateway_kubeconfig`` pointing at that token: creation to Running, env from ConfigMaps,
Secrets and Services, projected service-account tokens, graceful and forced deletes, image
pull secrets, and team templates from ConfigMaps (which also needs the namespace's team label).
Every gateway log must be free of authorization failures.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_pods import (  # noqa: F401  (the fixture and the tests run here again)
    ns,
    test_create_to_running_with_all_conditions,
    test_env_resolved_as_kubernetes_would,
    test_force_delete_removes_workload,
    test_graceful_delete_ends_when_backend_is_done,
    test_projected_service_account_token,
)
from test_pull_secrets_e2e import (  # noqa: F401
    test_pull_secrets_reach_the_backend_and_missing_ones_only_warn,
)
from test_templates_configmap import SYSTEM_NS, test_configmap_templates_per_team_live  # noqa: F401

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


@pytest.fixture(scope="session")
def service_account_kubeconfig(kubectl: Any, deploy_service_account: Any) -> Path:
    # templates.configmap_namespace is vkgate-system in deploy/; the templates test uses its
    # own namespace, so it gets the same Role there (as an operator would).
    kubectl("create", "namespace", SYSTEM_NS, check=False)
    for doc in yaml.safe_load_all((DEPLOY / "common" / "rbac.yaml").read_text()):
        if doc and doc["metadata"]["name"] == "vkgate-templates":
            doc["metadata"]["namespace"] = SYSTEM_NS
            kubectl("apply", "-f", "-", input=json.dumps(doc))
    path: Path = deploy_service_account.kubeconfig
    return path


@pytest.fixture
def gateway_kubeconfig(service_account_kubeconfig: Path) -> Path:
    return service_account_kubeconfig


@pytest.fixture
def start_gateway(start_gateway: Any, service_account_kubeconfig: Path) -> Iterator[Any]:
    """The usual factory, but every gateway runs as the ServiceAccount — also where the
    imported test chose another identity — and none may have been refused anything."""
    started: list[Any] = []

    def factory(settings: dict[str, Any] | None = None, **kwargs: Any) -> Any:
        settings = dict(settings or {})
        settings["kube"] = {
            **settings.get("kube", {}),
            "kubeconfig": str(service_account_kubeconfig),
        }
        gw = start_gateway(settings, **kwargs)
        started.append(gw)
        return gw

    yield factory
    assert started, "no gateway ran"
    for gw in started:
        assert gw.settings["kube"]["kubeconfig"] == str(service_account_kubeconfig)
        text = gw.log_text()
        assert "403 Forbidden" not in text and " is forbidden" not in text, text[-3000:]
