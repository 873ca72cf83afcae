"""The virtual Node: registration, status and conditions, Lease heartbeats, backend health."""
