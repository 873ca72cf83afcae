"""Templates on the gateway side: where they come from (folder or ConfigMaps, `source`),
rendering a pod offline (`offline`) and the `vkgate render` / `vkgate templates check`
commands (`cli`)."""
