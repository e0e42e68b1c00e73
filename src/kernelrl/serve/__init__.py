"""The evaluation service: HTTP API over a durable job store and local or Ray executors, plus a client.

Heavy pieces (FastAPI, Ray) are imported by the submodules that need them; `kernelrl.serve.client`
needs only httpx.
"""
