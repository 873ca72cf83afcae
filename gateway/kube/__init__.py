"""Kubernetes API access: the HTTP client, error mapping, list+watch reflector, events."""
