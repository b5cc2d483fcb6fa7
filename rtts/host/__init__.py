"""The inference process: ONNX Runtime and the engines' heavy front ends, in a child.

Once imported, onnxruntime cannot be unloaded: its library and the memory it keeps
for itself stay in the process after every model is dropped (92 MB idle instead of
50 MB, measured with benchmarks/latency.py). So every session lives in one child
process, started when the first model loads and ended when the last one is dropped
(an idle unload), which gives all of that memory back, with whatever else engines
keep there (Kokoro's Mandarin and Japanese dictionaries). A bare child may be started
ahead of the first load (``Host.prestart``, the server's ``--spare-process``): it holds
Python, numpy and ONNX Runtime (~25 MB anonymous), so a wake skips its start. It also
contains a crash: a model that kills the child fails one request, and the next one
starts a new child and loads the model again.

Split by the side of the pipe it runs on:

* ``client``: the parent's ``Host`` (one per ``Service``, passed to the engines) and
  its ``RemoteSession``s, which look to an engine like an ONNX Runtime session;
* ``child``: the child's serve loop, which dispatches each request to a handler: its
  sessions' or one an engine registered by name (``EngineKind.host_ops``);
* ``sessions``: the child's ONNX Runtime sessions, tuned for a small CPU;
* ``errors``: ``EngineError``, raised on both sides of the pipe.

Beside them, what the process may hold: ``memory`` (the budget, what each part holds,
measured) and ``cgroup`` (the memory the service's cgroup allows).

Below the engines it serves: imports none of them (``native`` and the leaves only).
"""
