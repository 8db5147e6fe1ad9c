"""The local model's launcher (dyna.llm_local) without the model: the file's checksum and
its assembly into the cache, and the server's life (waited for, its whole process group
stopped on exit, on an error, on a start-up timeout and on SIGTERM) with a stand-in
server, a small Python HTTP server that starts a child of its own."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import textwrap
import time
import types
import urllib.request
from pathlib import Path

import pytest

import dyna.llm_local.model as model_mod
import dyna.llm_local.server as server_mod
from dyna.cli import main
from dyna.errors import MissingExtraError, ModelChecksumError, ServerStartError
from dyna.llm_local import LocalServer, ensure_model, verify_model

FAKE_SERVER = textwrap.dedent('''
    import http.server, subprocess, sys, time
    import os
    mode, port = sys.argv[1], int(sys.argv[2])
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    print(f"child {child.pid}", flush=True)
    if len(sys.argv) > 3:   # a log of its own, when the launcher's is a temporary file
        with open(sys.argv[3], "w") as f:
            f.write(f"child {child.pid}\\n")
        with open(sys.argv[3] + ".pid", "w") as f:
            f.write(str(os.getpid()))
    if mode == "exit":
        print("boom: cannot load the model", flush=True)
        sys.exit(3)
    if mode == "mute":
        time.sleep(300)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = b'{"object": "list", "data": [{"id": "fake"}]}'
            self.send_response(200 if self.path == "/v1/models" else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    http.server.HTTPServer(("127.0.0.1", port), Handler).serve_forever()
''')


def _alive(pid: int) -> bool:
    """A process that exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def _gone(*pids: int, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not any(_alive(p) for p in pids):
            return True
        time.sleep(0.05)
    return False


def _child_pid(log: Path) -> int:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        for line in log.read_text().splitlines():
            if line.startswith("child "):
                return int(line.split()[1])
        time.sleep(0.05)
    raise AssertionError(f"no child pid in {log.read_text()!r}")


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """Make LocalServer start the stand-in server in ``mode`` (a checked model not needed)."""
    script = tmp_path / "fake_server.py"
    script.write_text(FAKE_SERVER)

    def use(mode: str):
        monkeypatch.setattr(server_mod, "require_server", lambda: None)
        monkeypatch.setattr(server_mod, "verify_model", Path)
        monkeypatch.setattr(server_mod, "ensure_model", lambda: Path("fake.gguf"))
        monkeypatch.setattr(server_mod, "server_command", lambda model, port, **kw: [
            sys.executable, str(script), mode, str(port)])
    return use


# ---------------------------------------------------------------- the model file

def test_a_file_with_another_sha256_is_refused_naming_both(tmp_path):
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"not the model")
    with pytest.raises(ModelChecksumError) as err:
        verify_model(bad)
    text = str(err.value)
    assert "\n" not in text and str(bad) in text
    assert model_mod.MODEL_SHA256 in text and hashlib.sha256(b"not the model").hexdigest() in text


def _fake_package(monkeypatch, data: bytes) -> list:
    calls = []

    def assemble(output_path, overwrite=False):
        calls.append(output_path)
        Path(output_path).write_bytes(data)
        return Path(output_path)

    monkeypatch.setitem(sys.modules, model_mod.MODEL_PACKAGE,
                        types.SimpleNamespace(assemble=assemble))
    return calls


def test_the_model_is_assembled_into_the_cache_once(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    data = b"GGUF weights"
    monkeypatch.setattr(model_mod, "MODEL_SHA256", hashlib.sha256(data).hexdigest())
    calls = _fake_package(monkeypatch, data)
    path = ensure_model()
    assert path == tmp_path / "cache" / "dyna" / "models" / model_mod.MODEL_FILE
    assert path.read_bytes() == data and len(calls) == 1
    assert ensure_model() == path and len(calls) == 1          # checked, not reassembled
    assert sorted(p.name for p in path.parent.iterdir()) == [model_mod.MODEL_FILE]


def test_a_wrong_assembly_leaves_nothing_and_names_both_digests(tmp_path, monkeypatch):
    _fake_package(monkeypatch, b"truncated")
    with pytest.raises(ModelChecksumError) as err:
        ensure_model(tmp_path)
    assert hashlib.sha256(b"truncated").hexdigest() in str(err.value)
    assert list(tmp_path.iterdir()) == []


def test_without_the_model_package_the_error_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, model_mod.MODEL_PACKAGE, None)
    with pytest.raises(MissingExtraError, match=r"local-llm"):
        ensure_model(tmp_path)


# ---------------------------------------------------------------- the server's life

def test_the_server_answers_then_its_whole_group_is_stopped(tmp_path, fake):
    fake("serve")
    log = tmp_path / "server.log"
    with LocalServer(log=log, startup_timeout=30) as srv:
        pid, child = srv.process.pid, _child_pid(log)
        assert os.getpgid(pid) == pid != os.getpgid(0)      # a group of its own
        with urllib.request.urlopen(srv.base_url + "/models", timeout=5) as r:
            assert r.status == 200
        assert srv.base_url.startswith("http://127.0.0.1:") and srv.seconds_to_start > 0
    assert _gone(pid, child)


def test_an_exception_in_the_block_stops_the_group(tmp_path, fake):
    fake("serve")
    log = tmp_path / "server.log"
    with pytest.raises(RuntimeError, match="the test's own"):
        with LocalServer(log=log, startup_timeout=30) as srv:
            pid, child = srv.process.pid, _child_pid(log)
            raise RuntimeError("the test's own error")
    assert _gone(pid, child)


def test_a_server_that_exits_is_one_line_with_its_last_words(tmp_path, fake):
    fake("exit")
    log = tmp_path / "server.log"
    with pytest.raises(ServerStartError) as err:
        LocalServer(log=log, startup_timeout=30).start()
    text = str(err.value)
    assert "\n" not in text
    assert "exited with status 3" in text and "boom: cannot load the model" in text
    assert _gone(_child_pid(log))


def test_a_server_that_never_answers_is_stopped_at_the_timeout(tmp_path, fake):
    fake("mute")
    log = tmp_path / "server.log"
    t0 = time.monotonic()
    with pytest.raises(ServerStartError, match=r"within 1 s"):
        LocalServer(log=log, startup_timeout=1).start()
    assert time.monotonic() - t0 < 15
    assert _gone(_child_pid(log))


_SIGTERM_RUNNERS = {
    # the context manager in a program without a handler: the default SIGTERM after it
    "with": ("with m.LocalServer(log={log!r}, startup_timeout=30) as srv:\n"
             "    print(srv.process.pid, flush=True)\n"
             "    time.sleep(300)\n", -signal.SIGTERM),
    # `dyna llm serve`: the command's own handler after it (exit status 143)
    "cli": ("from dyna.cli import main\n"
            "sys.exit(main(['llm', 'serve', '--startup-timeout', '30']))\n", 143),
}


@pytest.mark.parametrize("runner", sorted(_SIGTERM_RUNNERS))
def test_sigterm_stops_the_group_and_still_ends_the_process(tmp_path, runner):
    log = tmp_path / "server.log"
    script = tmp_path / "fake_server.py"
    script.write_text(FAKE_SERVER)
    body, status = _SIGTERM_RUNNERS[runner]
    code = textwrap.dedent(f'''
        import sys, time
        from pathlib import Path
        import dyna.llm_local.server as m
        m.require_server = lambda: None
        m.verify_model = Path
        m.ensure_model = lambda: Path("fake.gguf")
        m.server_command = lambda model, port, **kw: [sys.executable, {str(script)!r},
                                                      "serve", str(port), {str(log)!r}]
    ''') + body.format(log=str(log) + ".out")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        proc.stdout.readline()          # the server answers
        child = _child_pid(log)
        pid = int(Path(str(log) + ".pid").read_text())
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == status
    finally:
        proc.kill()
        proc.wait(timeout=30)
        proc.stdout.close()
    assert _gone(pid, child)


# ---------------------------------------------------------------- the command line

def test_dyna_llm_serve_refuses_bad_input_in_one_line(capsys):
    for argv, field in ((["--port", "70000"], "port=70000"), (["--threads", "0"], "threads=0"),
                        (["--startup-timeout", "0"], "startup_timeout=0")):
        assert main(["llm", "serve", *argv]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and field in err, err


def test_dyna_llm_serve_without_the_extra_is_one_line(capsys, monkeypatch):
    monkeypatch.setattr(server_mod.importlib.util, "find_spec", lambda name: None)
    assert main(["llm", "serve"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install -e '.[local-llm]'" in err, err
