"""Container probes run by vkgate itself, like the kubelet's prober (``pkg/kubelet/prober``).

``spec`` parses a pod's probe into data, ``handlers`` runs one attempt (httpGet, tcpSocket
against the pod's address, exec through the translator) with the request bytes and rules of
``wire`` (which admission reads too), ``worker`` is one probe of one container on the agent's
clock with the kubelet's thresholds, and ``manager`` keeps the workers in step with the pods
and hands their results to the pod sync (docs/design/probes.md).  ``hooks`` runs the container
lifecycle hooks; their pure rules are ``hookspec``, which the pod sync's decision reads without
importing the runner.
"""
