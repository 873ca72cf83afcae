"""vkgate's benchmarks: run by hand (``python -m bench.<name>``), never by CI.

Speed and memory targets live here, not in timed unit tests: a unit test that asserts "under
50 ms" fails on a busy machine and passes on a fast one, telling nobody anything.  Every number
here is reported next to a *baseline measured in the same run* (an ideal kubelet loop on the
same API server, ``json.dumps`` of the same dict), so a reader can judge a ratio even when the
machine was loaded.  Results are written to ``docs/benchmarks.md`` with ``--write-docs``.
"""
