"""What the public server allows one request, one upload and the queue: bounds a visitor cannot
raise, so no request can hold the server's memory or disk (app.py passes them to Gradio).

- a request body: at most MAX_BODY_BYTES (the largest widget value is a pasted config.json of
  MAX_CONFIG_CHARS characters), an upload at most MAX_UPLOAD_BYTES and a little for its form;
  one that says a larger length gets 413 before its body is read, one that streams more is cut
  off when it passes the limit (413 for an upload, whose begun files Gradio deletes; 400 from
  FastAPI's body parser for a call). Without it one call carried a 60 MB dropdown value, which
  Gradio kept in memory until the answer was read;
- uploaded files: at most MAX_UPLOAD_BYTES each (Gradio's max_file_size), deleted an hour after
  they came (Gradio's delete_cache): they are served back to anyone who has their path;
- the queue: at most QUEUE_MAX events waiting across all widgets; beyond it Gradio answers
  "queue full" instead of holding one more request;
- a file input given anything but an uploaded file's record: refused naming the input and what to
  send (explain_file_inputs), where Gradio's own answer was a bare "Error".
"""
from __future__ import annotations

import os

from starlette.formparsers import MultiPartException

from playbook.measured import MAX_UPLOAD_BYTES
from playbook.values import MAX_CONFIG_CHARS

MAX_BODY_BYTES = 8 * MAX_CONFIG_CHARS          # 2 MiB: a config.json even with every character escaped
UPLOAD_PATH = "/gradio_api/upload"
MAX_UPLOAD_BODY = MAX_UPLOAD_BYTES + 2**20     # the file and its multipart form
QUEUE_MAX = 256
DELETE_CACHE = (600, 3600)                     # every 10 minutes, files older than an hour


class BodyLimit:
    """ASGI middleware: a request whose body is over its path's limit gets 413, whether it says
    its length (Content-Length) or streams it (counted as it comes)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        cap = MAX_UPLOAD_BODY if scope.get("path", "").endswith(UPLOAD_PATH) else MAX_BODY_BYTES
        length = dict(scope.get("headers") or ()).get(b"content-length", b"")
        if length.isdigit() and int(length) > cap:
            return await _too_large(send, cap)
        seen, started = 0, False

        async def tracked(message):
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        async def counted():
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > cap:
                    raise _TooLarge(cap)
            return message

        try:
            await self.app(scope, counted, tracked)
        except _TooLarge:
            if not started:
                await _too_large(send, cap)


class _TooLarge(MultiPartException):
    """A multipart exception so that Gradio's upload route, reading a streamed form when the limit
    is passed, deletes the files it had begun and answers 413 itself (it matches the message)."""

    def __init__(self, cap: int = 0):
        super().__init__(f"request body exceeds maximum allowed size of {cap:,} bytes")


async def _too_large(send, cap: int) -> None:
    body = f"request body over {cap:,} bytes".encode()
    await send({"type": "http.response.start", "status": 413,
                "headers": [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def _not_an_upload(value, folder: str) -> bool:
    """Whether a File input's value is not one Gradio's own page sends: nothing, or the record (an
    object with a text `path`) of a file in Gradio's upload folder."""
    if value is None:
        return False
    path = value.get("path") if isinstance(value, dict) else None
    try:
        return not isinstance(path, str) or not os.path.realpath(path).startswith(os.path.realpath(folder) + os.sep)
    except (ValueError, OSError):                # a NUL in the path, a name too long
        return True


def explain_file_inputs(demo) -> None:
    """A value sent to a file input through the API that is not an uploaded file (text, a number, a
    path outside Gradio's upload folder) made Gradio answer a bare "Error" before any widget code
    ran: such a refusal now names the input and what to send, the value quoted as text."""
    import html

    import gradio as gr

    from calculators.specs.validate import show

    original = demo.preprocess_data

    async def preprocess_data(block_fn, inputs, state, explicit_call=False):
        try:
            return await original(block_fn, inputs, state, explicit_call)
        except gr.Error:
            raise
        except Exception:
            folder = gr.utils.get_upload_folder()
            for block, value in zip(block_fn.inputs, inputs):
                if isinstance(block, (gr.File, gr.UploadButton)) and _not_an_upload(value, folder):
                    path = value.get("path") if isinstance(value, dict) else None
                    got = html.escape(show(value if path is None else path), quote=False)   # shown as text
                    raise gr.Error(f"{block.label or 'the upload'}: {got} is not a file "
                                   "uploaded to this app; choose the file with the page's upload button (an API "
                                   f"client posts it to {UPLOAD_PATH} first and sends the path it answers)") from None
            raise

    demo.preprocess_data = preprocess_data
