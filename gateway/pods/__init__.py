"""The backend-agnostic pod lifecycle: work queue, sync decisions, env/volume resolution,
PodStatus mapping and writeback (see ``controller.PodController``)."""
