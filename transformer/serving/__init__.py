"""Serving translations over HTTP (transformer-serve; the `serve` extra: FastAPI, uvicorn, python-multipart,
py3langid).

requests (bodies and limits), libretranslate (LibreTranslate's API), native (the native API), engine (a model
with per-request settings), registry (the models by pair, the routes between languages), routing (a route run:
pivots, detection for `auto`), detection (language identification), access (API keys and rate limits), work (one
request's work bounded), batcher (requests decoded together, in turns; one per model), metrics, file_store
(translated files kept for download), service (a request's bounded steps), documents (files and format: html
through transformer.documents), app (the routes), server (the process), page.html (the page at /). May import the
Python API (api.py), decoding, data, documents, config and the shared modules; nothing in the library imports this
package (only commands/: cli.py when transformer-serve runs, keys.py reads access.py's keys files).
"""
