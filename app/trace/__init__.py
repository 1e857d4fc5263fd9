"""Walk, hook and record PyTorch autograd graphs; build the Trace document.

The only package that imports torch (the import contracts in `.importlinter` hold everyone else
to it). It writes Traces with the builders of `app.format`, which is torch-free, so the runner
and the web layer read them without loading torch. `tracer.trace_script` is the entry point; the
runner's worker process calls it.
"""
