"""Root of the gateway's exception tree.

    GatewayError
    ├── gateway.kube.errors.ApiError …   the Kubernetes API said no (one mapping, in kube/errors.py)
    └── StartupError                     the agent cannot start (bad config, no Lease API)

Backend errors are ``translators.base.TranslatorError`` (drawn in translators/base.py).
"""


class GatewayError(Exception):
    """Base of every error the gateway raises itself."""


class StartupError(GatewayError):
    """The agent cannot start; the message says what to fix."""
