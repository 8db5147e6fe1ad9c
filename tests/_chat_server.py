"""A chat-completions server on the loopback address, for tests without a network.

:class:`ChatServer` is a real HTTP server (stdlib :mod:`http.server`, a thread, port 0 on
127.0.0.1) that answers ``POST /v1/chat/completions`` from a script of recorded answers,
one per request, and keeps every request it got with the time it got it (its own
:func:`time.monotonic`), so a test can check what was sent and when.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def completion(content=None, tool_calls=None, prompt_tokens=120, completion_tokens=30,
               model="test-model"):
    """A chat-completions answer in the wire format (streaming off), as servers send it."""
    message = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {"id": "chatcmpl-test", "object": "chat.completion", "created": 1764590000,
            "model": model,
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if tool_calls else "stop"}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens}}


def tool_call(name, arguments, call_id="call_1"):
    """One tool call; ``arguments`` is sent as given when a string (it may be malformed),
    else as JSON."""
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments)
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": arguments}}


def ok(body):
    """A 200 answer with ``body``."""
    return {"status": 200, "body": body}


class ChatServer:
    """Loopback chat-completions server answering from ``script``.

    Each script item is a dict: ``status`` (HTTP status, default 200), ``body`` (JSON
    answer), ``raw`` (bytes sent as the body instead, e.g. not JSON), ``headers`` (extra
    headers, e.g. ``{"Retry-After": "1"}``), ``delay``
    (seconds to wait before answering). After the script, ``responder(body)`` gives the
    item (a recorded answer chosen by what was asked); without one a request beyond the
    script gets a 500 saying so (and is counted), so a test that sends more than it
    expects fails.

    Attributes
    ----------
    requests : list of dict
        ``{"t": monotonic seconds at receipt, "path", "headers", "body": parsed JSON}``.
    base_url : str
        ``http://127.0.0.1:<port>/v1``.
    """

    def __init__(self, script=(), responder=None):
        self.script = list(script)
        self.responder = responder
        self.requests: list[dict] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):   # quiet
                pass

            def do_POST(self):
                t = time.monotonic()
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n)
                with server._lock:
                    server.requests.append({"t": t, "path": self.path,
                                            "headers": dict(self.headers),
                                            "body": json.loads(raw)})
                    body = server.requests[-1]["body"]
                    if server.script:
                        item = server.script.pop(0)
                    elif server.responder is not None:
                        item = server.responder(body)
                    else:
                        item = {"status": 500, "body": {"error": "request beyond the script"}}
                if self.path != "/v1/chat/completions":
                    item = {"status": 404, "body": {"error": "not found"}}
                if item.get("delay"):
                    time.sleep(item["delay"])
                data = item["raw"] if "raw" in item else json.dumps(item.get("body", {})).encode()
                try:
                    self.send_response(item.get("status", 200))
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in (item.get("headers") or {}).items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):   # the client gave up
                    pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    def stop(self):
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
