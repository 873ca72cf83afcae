"""The ``vkgate`` command.

Subcommands dispatch lazily to the module that owns them, so ``vkgate config check`` does not
import the kubelet server and ``vkgate render`` works offline:

    vkgate run [-c vkgate.toml] [--set key=value ...]   the agent
    vkgate dev                                          local API server + Nomad + gateway demo
    vkgate config check FILE                            effective config (secrets masked)
    vkgate render POD.yaml [...]                        a pod's backend spec, offline
    vkgate templates check [DIR]                        render templates against sample pods
    vkgate version
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gateway import config as cfg
from vkgate_core.settings import SettingsError

VERSION = "0.1.0"


def _parse_sets(pairs: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        if "=" not in pair:
            raise cfg.ConfigError(pair, "--set expects key=value")
        key, value = pair.split("=", 1)
        cfg.set_dotted(out, key.strip(), value)
    return out


def add_settings_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-c", "--config", help="vkgate.toml path (env VKGATE_CONFIG)")
    p.add_argument("--node-name", help="node.name")
    p.add_argument("--backend", help="backend.kind: any installed backend (vkgate.translators)")
    p.add_argument("--kubeconfig", help="kube.kubeconfig")
    p.add_argument("--kubelet-port", help="kubelet.port")
    p.add_argument("--log-level", help="log.level")
    p.add_argument("--log-format", help="log.format: text or json")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any setting by dotted key, e.g. --set node.capacity.pods=200",
    )


def settings_from_args(args: argparse.Namespace) -> cfg.Settings:
    import os

    overrides = _parse_sets(args.set)
    for flag, key in (
        ("node_name", "node.name"),
        ("backend", "backend.kind"),
        ("kubeconfig", "kube.kubeconfig"),
        ("kubelet_port", "kubelet.port"),
        ("log_level", "log.level"),
        ("log_format", "log.format"),
    ):
        value = getattr(args, flag, None)
        if value is not None:
            cfg.set_dotted(overrides, key, value)
    path = args.config or os.environ.get("VKGATE_CONFIG") or None
    return cfg.load(path, overrides=overrides)


def _cmd_config_check(args: argparse.Namespace) -> int:
    try:
        settings = settings_from_args(args)
    except SettingsError as exc:
        print(f"vkgate: config error: {exc}", file=sys.stderr)
        return 1
    print(cfg.check_report(settings), end="")
    return 0


def _cmd_version(args: argparse.Namespace) -> int:
    print(f"vkgate {VERSION}")
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    try:
        settings = settings_from_args(args)
    except SettingsError as exc:
        print(f"vkgate: config error: {exc}", file=sys.stderr)
        return 1
    from gateway.app import run_forever

    return run_forever(settings)


def _cmd_dev(args: argparse.Namespace) -> int:
    """The one seam between the agent and the dev stack (docs/design/devstack.md): the dev
    stack is a package of the source checkout, not of the agent, so it is imported here, by
    name, only when ``vkgate dev`` runs."""
    dev_main = _load_devstack_main()
    if dev_main is None:
        print(
            "vkgate: `vkgate dev` runs from a source checkout of vkgate (the devstack/ package "
            "is not part of the installed agent): clone the repository and run "
            "`pip install -e .` there (README.md)",
            file=sys.stderr,
        )
        return 2
    return dev_main(args)


def _load_devstack_main() -> Callable[[argparse.Namespace], int] | None:
    # An editable install maps only the agent's packages; devstack/ sits beside them in the
    # checkout the gateway package was installed from.
    if importlib.util.find_spec("devstack") is None:
        checkout = Path(__file__).resolve().parents[1]
        if not (checkout / "devstack" / "dev.py").is_file():
            return None
        sys.path.append(str(checkout))
    main: Callable[[argparse.Namespace], int] = importlib.import_module("devstack.dev").main
    return main


def _cmd_render(args: argparse.Namespace) -> int:
    from gateway.templating.cli import render_main

    return render_main(args)


def _cmd_templates_check(args: argparse.Namespace) -> int:
    from gateway.templating.cli import templates_check_main

    return templates_check_main(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vkgate", description="Python virtual kubelet")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("run", help="run the virtual kubelet")
    add_settings_args(p)
    p.set_defaults(func=_cmd_run)

    p = sub.add_parser("dev", help="local API server + Nomad + gateway, a sample pod, its logs")
    add_settings_args(p)
    p.add_argument(
        "--backend-dev",
        dest="dev_backend",
        default=None,
        help="backend for the demo: a Nomad dev agent (default) or the simulated backend",
    )
    p.add_argument("--no-wait", action="store_true", help="exit after the sample pod's logs")
    p.add_argument(
        "--node-ip",
        default=None,
        help="an IPv4 address of this machine (the first of its interface) for the node and its"
        " pods, so the demo's Service gets endpoints (loopback ones are refused)",
    )
    p.add_argument(
        "--netns",
        action="store_true",
        help="run in a network namespace of its own (root), the node and pods on 198.51.100.30",
    )
    p.set_defaults(func=_cmd_dev)

    pc = sub.add_parser("config", help="configuration tools")
    csub = pc.add_subparsers(dest="config_command", required=True)
    p = csub.add_parser("check", help="validate and print the effective configuration")
    p.add_argument("file", nargs="?", help="vkgate.toml")
    add_settings_args(p)
    p.set_defaults(func=_cmd_config_check)

    p = sub.add_parser("render", help="print a pod's backend spec (offline)")
    p.add_argument(
        "pod",
        help="YAML file: a Pod, plus the ConfigMaps, Secrets, Services and Namespace it uses",
    )
    p.add_argument("--backend", default=None, help="an installed backend; default backend.kind")
    p.add_argument("--team")
    p.add_argument("--template")
    p.add_argument("--explain", action="store_true")
    p.add_argument("--show-secrets", action="store_true")
    p.add_argument("--templates-dir", help="extra template directory, searched first")
    p.add_argument("-c", "--config")
    p.add_argument("--node", help="with [[nodes]]: render as this node (default: the first)")
    p.set_defaults(func=_cmd_render)

    pt = sub.add_parser("templates", help="template tools")
    tsub = pt.add_subparsers(dest="templates_command", required=True)
    p = tsub.add_parser("check", help="render every template against sample pods")
    p.add_argument("dir", nargs="?")
    p.add_argument("--backend", default=None, help="one installed backend; default: all")
    p.add_argument("-c", "--config", help="vkgate.toml (backend tables, templates.dirs)")
    p.set_defaults(func=_cmd_templates_check)

    p = sub.add_parser("version", help="print the version")
    p.set_defaults(func=_cmd_version)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "command", None) == "config" and getattr(args, "file", None):
        args.config = args.file
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
