"""Every module of gateway/ and translators/ sits in an import-linter layer (the pod sync's
sub-packages too, and its decision stays pure), and every backend is in the independence
contract: a new module or backend cannot slip past the contracts."""

from __future__ import annotations

import configparser
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _contracts() -> dict[str, configparser.SectionProxy]:
    parser = configparser.ConfigParser()
    parser.read(ROOT / ".importlinter")
    return {s: parser[s] for s in parser.sections() if s.startswith("importlinter:contract:")}


def _layered(container: str) -> set[str]:
    for contract in _contracts().values():
        if contract.get("type") == "layers" and contract.get("containers", "").strip() == container:
            return {
                name
                for line in contract["layers"].split("\n")
                for name in re.split(r"[|:]", line)
                if name.strip()
                for name in [name.strip()]
            }
    raise AssertionError(f"no layers contract for {container}")


def _children(package: str) -> set[str]:
    folder = ROOT / package
    return {
        p.stem if p.is_file() else p.name
        for p in folder.iterdir()
        if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()
    }


def test_every_module_of_each_package_is_in_a_layer() -> None:
    for package in ("gateway", "translators"):
        children = _children(package)
        assert len(children) >= 10
        assert children - _layered(package) == set(), package
    # The layers inside the sub-packages that hold more than a handful of modules.
    for package in (
        "gateway/pods",
        "gateway/pods/resolve",
        "gateway/pods/status",
        "gateway/kubelet",
        "gateway/kubelet/api",
        "gateway/kubelet/streams",
        "gateway/templating",
        "translators/nomad",
        "translators/render",
    ):
        children = _children(package)
        assert len(children) >= 3, package
        assert children - _layered(package.replace("/", ".")) == set(), package
    # The pod sync's decision is pure: no kube client, resolver or status writer below it.
    pure = _contracts()["importlinter:contract:decide-pure"]
    assert pure["type"] == "forbidden"
    assert pure["source_modules"].split() == ["gateway.pods.decide"]
    assert set(pure["forbidden_modules"].split()) == {
        "gateway.kube",
        "gateway.pods.resolve",
        "gateway.pods.status.manager",
    }


def test_every_kubelet_auth_module_is_in_the_independence_contract() -> None:
    """gateway/kubelet/auth has no layers: its modules are independent of each other."""
    auth = _contracts()["importlinter:contract:kubelet-auth-independent"]
    assert auth["type"] == "independence"
    modules = {m.strip() for m in auth["modules"].split("\n") if m.strip()}
    assert modules == {f"gateway.kubelet.auth.{c}" for c in _children("gateway/kubelet/auth")}


def test_the_agent_never_imports_the_dev_stack() -> None:
    forbid = _contracts()["importlinter:contract:agent-without-devstack"]
    assert set(forbid["source_modules"].split()) == {
        "gateway",
        "translators",
        "templates",
        "vkgate_core",
    }
    assert forbid["forbidden_modules"].split() == ["devstack", "bench", "tools"]
    assert (ROOT / "devstack" / "dev.py").is_file()
    assert not (ROOT / "gateway" / "devstack").exists()


def test_every_backend_is_independent_of_the_others() -> None:
    independent = _contracts()["importlinter:contract:backends-independent"]
    modules = {m.strip() for m in independent["modules"].split("\n") if m.strip()}
    from translators import plugins

    built_in = {k for k in plugins.kinds() if k != "acme"}  # acme lives in its own distribution
    assert {f"translators.{k}" for k in built_in} == modules


def test_the_dev_stack_tools_and_benchmarks_keep_apart() -> None:
    below = _contracts()["importlinter:contract:devstack-below-bench-and-tools"]
    assert below["source_modules"].split() == ["devstack"]
    assert below["forbidden_modules"].split() == ["bench", "tools"]
    apart = _contracts()["importlinter:contract:tools-apart-from-bench"]
    assert apart["type"] == "independence" and apart["modules"].split() == ["tools", "bench"]


def test_the_neutral_core_imports_neither_side() -> None:
    core = _contracts()["importlinter:contract:core-below-both"]
    assert core["source_modules"].split() == ["vkgate_core"]
    assert set(core["forbidden_modules"].split()) == {"gateway", "translators", "templates"}
    assert _children("vkgate_core") == {
        "backoff",
        "clock",
        "imageregistry",
        "kubetypes",
        "ndjson",
        "quantity",
        "ratelimit",
        "retry",
        "settings",
        "timeparse",
    }


def test_every_core_module_is_in_the_independence_contract() -> None:
    core = _contracts()["importlinter:contract:core-modules-independent"]
    modules = {m.strip() for m in core["modules"].split("\n") if m.strip()}
    assert modules == {f"vkgate_core.{c}" for c in _children("vkgate_core")}
