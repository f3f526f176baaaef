"""Several chat UI processes behind HAProxy (``launch.sh --ui-workers N``, serving/proxy.py).

The pure parts (ports, log names, the HAProxy config as HAProxy reads it, its
``show stat`` answer, the status text) run anywhere. One test starts the real
``launch.sh --ui-only --ui-workers 2`` in front of the scripted server, drives it
as two browsers would (bench/harness.py's socket.io tab), kills a worker with
SIGKILL and sees the supervisor bring it back; it needs Debian's ``haproxy``
(tests/run.sh installs it) and is skipped without it.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from bench.harness import Tab, question
from serving import proxy, runstate
from serving.launcher import port_in_use
from serving.runstate import Process, Proxy, RunState
from serving.status import Probe, report
from tests.conftest import DATA, RunningFake, free_port
from tests.fakes.kimi_server import conversation
from tests.launching import ROOT, launch_env, live_processes_in_group, quiet_ports
from tests.test_launch_ops import launched, run, wait_for_text

HAPROXY = proxy.find_haproxy()
needs_haproxy = pytest.mark.skipif(
    HAPROXY is None, reason="haproxy is not installed (Debian: apt-get install haproxy)"
)

# --- the config, as HAProxy reads it ------------------------------------------------


def sections(config: str) -> dict[str, list[list[str]]]:
    """The config's sections (``"global"``, ``"frontend chat_ui"`` ...) as lists of
    keyword lines split into words, comments and blank lines left out."""
    found: dict[str, list[list[str]]] = {}
    current: list[list[str]] = []
    for raw in config.splitlines():
        line = raw.split("#", 1)[0].rstrip()
        if not line.strip():
            continue
        if not line[0].isspace():
            current = found.setdefault(line.strip(), [])
        else:
            current.append(line.split())
    return found


def lines_of(section: list[list[str]], *keyword: str) -> list[list[str]]:
    """The lines of ``section`` that start with the words ``keyword``."""
    return [line for line in section if line[: len(keyword)] == list(keyword)]


def seconds(value: str) -> float:
    """An HAProxy time (``5s``, ``10m``, ``1h``; a bare number is milliseconds) in seconds."""
    number, unit = re.fullmatch(r"(\d+)(ms|s|m|h|d)?", value).groups()  # type: ignore[union-attr]
    scale = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, None: 0.001}[unit]
    return int(number) * scale


def plan_with_busy_port(run_dir: Path, host: str = "127.0.0.1") -> proxy.ProxyPlan:
    """Three workers behind port 8300, where 8302 is taken and 8303 is vLLM's."""
    return proxy.make_plan(
        host=host,
        port=8300,
        workers=3,
        app_log="logs/app.log",
        run_dir=run_dir,
        in_use=lambda port: port == 8302,
        avoid=(8303,),
    )


def test_the_worker_logs_found_are_those_of_workers_1_to_n(tmp_path: Path) -> None:
    for name in ["app-1", "app-2", "app-4"]:  # no dot in the name; worker 3 never wrote
        (tmp_path / name).write_text("")
    assert proxy.worker_logs(str(tmp_path / "app")) == [
        str(tmp_path / "app-1"),
        str(tmp_path / "app-2"),
    ]
    assert proxy.worker_logs("") == []


def test_workers_get_the_next_free_ports_and_their_own_logs(tmp_path: Path) -> None:
    plan = plan_with_busy_port(tmp_path)
    assert [(w.name, w.port, w.log) for w in plan.workers] == [
        ("w1", 8301, "logs/app-1.log"),
        ("w2", 8304, "logs/app-2.log"),
        ("w3", 8305, "logs/app-3.log"),
    ]
    assert proxy.worker_log("", 1) == ""  # stderr only stays stderr only
    assert plan.config_path == tmp_path / "haproxy.cfg"
    assert plan.stats_socket == tmp_path.resolve() / "haproxy.sock"
    deep = tmp_path / ("x" * 120)  # longer than a Unix socket path may be
    assert plan_with_busy_port(deep).stats_socket is None
    with pytest.raises(ValueError):
        proxy.make_plan(
            host="127.0.0.1", port=8300, workers=1, app_log="", run_dir=tmp_path, in_use=bool
        )


def test_haproxy_config_keeps_each_browser_on_one_worker(tmp_path: Path) -> None:
    plan = plan_with_busy_port(tmp_path)
    found = sections(plan.config())
    front, back = found["frontend chat_ui"], found["backend chat_workers"]
    defaults = found["defaults"]

    # HAProxy listens where the single UI would; the workers only on loopback.
    assert lines_of(front, "bind") == [["bind", "127.0.0.1:8300"]]
    servers = lines_of(back, "server")
    assert [(s[1], s[2], s[s.index("cookie") + 1]) for s in servers] == [
        ("w1", "127.0.0.1:8301", "w1"),
        ("w2", "127.0.0.1:8304", "w2"),
        ("w3", "127.0.0.1:8305", "w3"),
    ]
    # Stickiness: a cookie HAProxy inserts, invisible to the app, not cached, not
    # readable by page scripts.
    [cookie] = lines_of(back, "cookie")
    assert cookie[1] == "KIMI_WORKER"
    assert {"insert", "indirect", "nocache", "httponly"} <= set(cookie)
    # Every worker is health-checked on the UI's status route.
    assert lines_of(back, "option", "httpchk") == [["option", "httpchk", "GET", "/kimi/status"]]
    [default_server] = lines_of(back, "default-server")
    assert "check" in default_server
    # A websocket may stay open for long silences; HTTP answers may take minutes.
    timeouts = {line[1]: seconds(line[2]) for line in lines_of(defaults, "timeout")}
    assert timeouts["tunnel"] >= 3600
    assert timeouts["server"] >= 300
    assert lines_of(defaults, "mode") == [["mode", "http"]]
    # The app sees the browser's address: what the browser sent is dropped first.
    forward = [" ".join(line) for line in front]
    assert forward.index("http-request del-header X-Forwarded-For") < forward.index(
        "option forwardfor"
    )
    [status_rule] = [line for line in forward if "/kimi/status" in line]
    assert status_rule.startswith("http-request deny") and "!{ src 127.0.0.0/8 ::1 }" in status_rule
    assert lines_of(found["global"], "stats", "socket")[0][2] == str(plan.stats_socket)


@pytest.mark.parametrize(
    ("host", "bind"), [("0.0.0.0", "0.0.0.0:8300"), ("::", "[::]:8300"), ("::1", "[::1]:8300")]
)
def test_haproxy_binds_the_ui_host(tmp_path: Path, host: str, bind: str) -> None:
    found = sections(plan_with_busy_port(tmp_path, host).config())
    assert lines_of(found["frontend chat_ui"], "bind") == [["bind", bind]]


@needs_haproxy
def test_haproxy_accepts_the_config_and_names_a_broken_one(tmp_path: Path) -> None:
    plan = plan_with_busy_port(tmp_path)
    plan.config_path.write_text(plan.config())
    assert proxy.validate(plan.config_path, str(HAPROXY)) == ""
    broken = tmp_path / "broken.cfg"
    broken.write_text(plan.config().replace("balance leastconn", "balance sometimes"))
    said = proxy.validate(broken, str(HAPROXY))
    assert said.startswith(f"parsing [{broken}:") and "balance only supports" in said, said


# A worker that dies with a request in its listen queue (accepted by the kernel, then
# dropped when the process goes): it closes the connection without an answer.
DYING_AND_LIVE_WORKERS = """
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class Worker(BaseHTTPRequestHandler):
    def do_GET(self):
        if sys.argv[2] == "dying" and self.path != "/kimi/status":
            self.close_connection = True
            return
        body = sys.argv[2].encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_GET

    def log_message(self, *args):
        pass

ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Worker).serve_forever()
"""


@needs_haproxy
def test_a_request_a_dying_worker_drops_unanswered_is_answered_by_another(
    tmp_path: Path,
) -> None:
    plan = proxy.make_plan(
        host="127.0.0.1",
        port=quiet_ports(3),
        workers=2,
        app_log="",
        run_dir=tmp_path,
        in_use=lambda port: False,
    )
    plan.config_path.write_text(plan.config())
    kinds = {"w1": "live", "w2": "dying"}
    started = [
        subprocess.Popen([sys.executable, "-c", DYING_AND_LIVE_WORKERS, str(w.port), kinds[w.name]])
        for w in plan.workers
    ]
    try:
        for worker in plan.workers:  # both listen before HAProxy's first health check
            deadline = time.monotonic() + 10
            while not port_in_use(worker.port):
                assert time.monotonic() < deadline, f"{worker.name} did not listen"
                time.sleep(0.05)
        started.append(subprocess.Popen([HAPROXY or "haproxy", "-db", "-f", str(plan.config_path)]))
        url = f"http://127.0.0.1:{plan.port}/"
        deadline = time.monotonic() + 10
        while True:
            try:
                answer = httpx.get(url, cookies={proxy.COOKIE: "w2"}, timeout=10)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "HAProxy did not listen"
                time.sleep(0.05)
        # The browser whose worker dropped its request gets the page from the other one.
        assert (answer.status_code, answer.text) == (200, "live")
        assert answer.cookies.get(proxy.COOKIE) == "w1"
        # A POST may have been acted on before the worker died: not sent twice.
        posted = httpx.post(url, cookies={proxy.COOKIE: "w2"}, content=b"x", timeout=10)
        assert posted.status_code == 502
    finally:
        for process in started:
            process.terminate()
            process.wait(timeout=10)


def test_more_than_one_worker_without_haproxy_says_what_to_install() -> None:
    [finding] = proxy.check_haproxy(2, find=lambda: None)
    assert finding.refuse
    assert finding.text == (
        "--ui-workers 2 (KIMI_UI_WORKERS) needs HAProxy in front of the workers, and no "
        "haproxy command is installed: install it (`sudo apt-get install haproxy` on Debian "
        "or Ubuntu), or use --ui-workers 1"
    )
    assert proxy.check_haproxy(1, find=lambda: None) == []
    assert proxy.check_haproxy(3, find=lambda: "/usr/sbin/haproxy") == []


def test_show_stat_gives_each_workers_state() -> None:
    # The first columns of HAProxy 2.6's `show stat` CSV, a frontend and a backend.
    answer = (
        "# pxname,svname,qcur,qmax,scur,smax,slim,stot,bin,bout,dreq,dresp,ereq,econ,"
        "eresp,wretr,wredis,status\n"
        "chat_ui,FRONTEND,,,0,1,8192,3,0,0,0,0,0,,,,,OPEN\n"
        "chat_workers,w1,0,0,0,1,,2,0,0,,0,,0,0,0,0,UP\n"
        "chat_workers,w2,0,0,0,0,,0,0,0,,0,,0,0,0,0,DOWN\n"
        "chat_workers,BACKEND,0,0,0,1,820,3,0,0,0,0,,0,0,0,0,UP\n"
    )
    assert proxy.parse_stat(answer) == {"w1": "UP", "w2": "DOWN"}
    assert proxy.server_states(Path("/nonexistent/haproxy.sock")) == {}


def test_status_lists_the_workers_their_restarts_and_what_haproxy_does_with_a_dead_one() -> None:
    state = RunState(
        launcher_pid=10,
        ui_host="127.0.0.1",
        workers=[
            Process(pid=21, port=8301, log="app-1.log", restarts=0),
            Process(pid=22, port=8302, log="app-2.log", restarts=1),
            Process(pid=0, port=8303, log="", restarts=2),
        ],
        proxy=Proxy(pid=20, port=8300, log=".run/haproxy.log", config=".run/haproxy.cfg"),
    )
    seen = Probe(
        health={},
        models={},
        ui=200,
        open_chats=3,
        workers={0: (200, 3), 1: (None, None), 2: (None, None)},
        balanced={"w1": "UP", "w2": "DOWN", "w3": "DOWN"},
    )
    text, healthy = report(state, seen, now=0, alive=lambda pid, _: pid != 22)
    assert not healthy
    assert text.splitlines()[2:] == [
        "chat UI: up, HAProxy pid 20, http://127.0.0.1:8300, 3 workers, open chats: 3",
        "  HAProxy config .run/haproxy.cfg, log .run/haproxy.log",
        "  worker 1: up, pid 21, port 8301, restarts 0, open chats: 3, HAProxy: UP, log app-1.log",
        "  worker 2: DOWN; HAProxy sends nobody there, pid 22, port 8302, restarts 1, "
        "HAProxy: DOWN, log app-2.log",
        "  worker 3: DOWN (waiting to be restarted); HAProxy sends nobody there, pid 0, "
        "port 8303, restarts 2, HAProxy: DOWN, log (stderr only)",
    ]


# --- launch.sh --ui-workers 2 in front of the scripted server ----------------------


def upgrade_status(port: int, origin: str) -> int:
    """HTTP status of a socket.io websocket upgrade to 127.0.0.1:``port`` from ``origin``."""
    request = (
        "GET /ws/socket.io/?EIO=4&transport=websocket HTTP/1.1\r\n"
        f"Host: 127.0.0.1:{port}\r\nOrigin: {origin}\r\nUpgrade: websocket\r\n"
        "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        "Sec-WebSocket-Version: 13\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(request.encode())
        status_line = conn.recv(4096).split(b"\r\n", 1)[0]
    return int(status_line.split()[1])


def open_chats(port: int) -> int:
    """What a worker's ``/kimi/status`` says."""
    count: int = httpx.get(f"http://127.0.0.1:{port}/kimi/status", timeout=10).json()["open_chats"]
    return count


def add_user(env: dict[str, str], name: str, password: str) -> None:
    """Add a user who can sign in (the CLI, into ``KIMI_DATA_DIR``'s database)."""
    made = subprocess.run(
        [sys.executable, "-m", "backend.cli", "user", "add", name, "--password-stdin"],
        env=env,
        cwd=ROOT,
        input=password + "\n",
        text=True,
        capture_output=True,
        timeout=60,
    )
    assert made.returncode == 0, made.stderr


def test_haproxy_beyond_loopback_needs_a_user_like_the_ui(tmp_path: Path) -> None:
    env = launch_env(
        tmp_path,
        KIMI_APP_PYTHON=sys.executable,
        KIMI_UI_HOST="0.0.0.0",
        KIMI_UI_PORT=str(free_port()),
    )
    out = run(["--ui-only", "--ui-workers", "2"], env)
    assert out.returncode == 2
    assert "cannot start: the chat UI would listen on 0.0.0.0 with no user to sign in" in out.stderr
    assert not (tmp_path / "run" / "haproxy.cfg").exists()  # refused before anything started


def workers_env(tmp_path: Path, fake: RunningFake) -> tuple[dict[str, str], int]:
    """launch.sh's environment for UI workers in front of the scripted server, files in
    ``tmp_path``, restarts after 0.5 s; and the UI's port (the workers take the next two)."""
    ui_port = quiet_ports(3)
    env = launch_env(
        tmp_path,
        KIMI_APP_PYTHON=sys.executable,
        KIMI_BASE_URL=fake.base_url,
        KIMI_UI_PORT=str(ui_port),
        KIMI_APP_LOG=str(tmp_path / "app.log"),
        KIMI_RESTART_BASE_S="0.5",
    )
    return env, ui_port


@needs_haproxy
async def test_two_workers_behind_haproxy_keep_each_browser_on_its_worker(
    tmp_path: Path, fake: RunningFake
) -> None:
    env, ui_port = workers_env(tmp_path, fake)
    add_user(env, "alice", "alice-password-1")
    out = tmp_path / "launch.out"
    url = f"http://127.0.0.1:{ui_port}"
    photo = (DATA / "rocket.jpg").read_bytes()
    with launched(["--ui-only", "--ui-workers", "2"], env, out) as proc:
        wait_for_text(out, "chat UI:  http://", 240, proc)
        state = runstate.read(tmp_path / "run")
        assert state is not None and state.proxy is not None
        ports = {"w1": state.workers[0].port, "w2": state.workers[1].port}
        assert ui_port not in ports.values()
        groups = [state.proxy.pid, *(w.pid for w in state.workers)]

        # Signed in through the proxy on one worker, the token works on both: they
        # share CHAINLIT_AUTH_SECRET (and the users' database).
        signed = httpx.post(
            f"{url}/login", data={"username": "alice", "password": "alice-password-1"}, timeout=30
        )
        assert signed.status_code == 200, signed.text
        token = signed.cookies["access_token"]
        for port in ports.values():
            user = httpx.get(
                f"http://127.0.0.1:{port}/user", cookies={"access_token": token}, timeout=10
            )
            assert user.status_code == 200 and user.json()["identifier"] == "alice"

        async with httpx.AsyncClient(timeout=60) as http:
            tabs = [Tab(url, http, load_page=True, cookies={"access_token": token}) for _ in "ab"]
            for tab in tabs:
                await tab.open()
            # Two browsers, two workers: each tab got its own worker's cookie, and
            # each worker holds exactly one open chat.
            workers = [tab.cookies["KIMI_WORKER"] for tab in tabs]
            assert sorted(workers) == ["w1", "w2"]
            assert [open_chats(port) for port in ports.values()] == [1, 1]
            # A photo uploaded through the proxy reaches the worker holding the chat.
            fake.reset()
            with_photo = await tabs[0].ask(
                question("quick"), [await tabs[0].upload(photo, "rocket.jpg")]
            )
            text_only = await tabs[1].ask(question("quick"))
            for answer in (with_photo, text_only):
                assert answer.complete and not answer.error, answer
            parts = [m["content"] for r in fake.requests for m in conversation(r)]
            assert (
                sum(
                    isinstance(c, list) and any(p.get("type") == "image_url" for p in c)
                    for c in parts
                )
                == 1
            )
            for tab in tabs:
                await tab.close()

        # One database: the chat held by one worker is listed by the other.
        other = ports["w2" if workers[0] == "w1" else "w1"]
        deadline = time.monotonic() + 20
        while True:
            listed = httpx.post(
                f"http://127.0.0.1:{other}/project/threads",
                json={"pagination": {"first": 20}, "filter": {}},
                cookies={"access_token": token},
                timeout=10,
            )
            assert listed.status_code == 200, listed.text
            if len(listed.json()["data"]) == 2 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert len(listed.json()["data"]) == 2  # both tabs' chats, each kept by its worker

        # Host passes through unchanged: the app's Origin check holds through the proxy.
        assert upgrade_status(ui_port, "http://evil.example") == 403
        assert upgrade_status(ui_port, url) == 101
        # Each worker writes its own log.
        for i in (1, 2):
            assert "ended: done" in (tmp_path / f"app-{i}.log").read_text()

        status = run(["status"], env)
        assert status.returncode == 0, status.stdout + status.stderr
        for i, port in enumerate(ports.values(), 1):
            assert re.search(rf"worker {i}: up, pid \d+, port {port}, .*HAProxy: UP", status.stdout)
        assert f"model server 0: healthy, {fake.base_url} (not started" in status.stdout

        # A worker that dies is taken out by HAProxy's health check (new browsers go to
        # the other one) and restarted by the supervisor; status counts the restart.
        dead = state.workers[1].pid
        os.killpg(dead, signal.SIGKILL)
        # Gone, port closed: a request sent while it was dying was accepted into its
        # listen queue and then dropped (HAProxy answers 502 and does not resend it).
        deadline = time.monotonic() + 10
        while live_processes_in_group(dead):
            assert time.monotonic() < deadline, "the killed worker did not die"
            time.sleep(0.02)
        fresh = httpx.get(url, cookies={"KIMI_WORKER": "w2"}, timeout=10)
        assert fresh.status_code == 200
        text = wait_for_text(out, r"chat UI worker 2 answers again after \d+ s", 120, proc)
        assert f"chat UI worker 2 (pid {dead}) exited after" in text
        assert "restart 1 of chat UI worker 2 after it exited" in text
        deadline = time.monotonic() + 30
        while "HAProxy: UP" not in (status := run(["status"], env)).stdout.split("worker 2:")[1]:
            assert time.monotonic() < deadline, status.stdout
            time.sleep(1)
        assert status.returncode == 0, status.stdout
        again = runstate.read(tmp_path / "run")
        assert again is not None and again.workers[1].pid not in (0, dead)
        assert re.search(
            rf"worker 2: up, pid {again.workers[1].pid}, port {ports['w2']}, restarts 1, ",
            status.stdout,
        ), status.stdout
        (tmp_path / "status-after-restart.txt").write_text(status.stdout)
        groups.append(again.workers[1].pid)
        # Its browsers come back to it: a request naming it is served there (no new cookie).
        back = httpx.get(url, cookies={"KIMI_WORKER": "w2"}, timeout=10)
        assert back.status_code == 200 and "KIMI_WORKER" not in back.cookies

        stopped = run(["stop"], env)
        assert stopped.returncode == 0, stopped.stderr
        assert proc.wait(timeout=60) == 128 + signal.SIGTERM
    for group in groups:
        assert live_processes_in_group(group) == []
    assert not (tmp_path / "run" / runstate.STATE_FILE).exists()


def chainlit_app_root(pid: int) -> Path:
    """Where Chainlit keeps process ``pid``'s files: ``CHAINLIT_APP_ROOT`` in its
    environment, else its working directory (chainlit/config.py's ``APP_ROOT``)."""
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    for entry in environ:
        if entry.startswith(b"CHAINLIT_APP_ROOT="):
            return Path(entry.split(b"=", 1)[1].decode())
    return Path(os.readlink(f"/proc/{pid}/cwd"))


@needs_haproxy
async def test_a_worker_stopping_leaves_the_other_workers_uploads_and_logs_no_error(
    tmp_path: Path, fake: RunningFake
) -> None:
    env, ui_port = workers_env(tmp_path, fake)
    out = tmp_path / "launch.out"
    url = f"http://127.0.0.1:{ui_port}"
    with launched(["--ui-only", "--ui-workers", "2"], env, out) as proc:
        wait_for_text(out, "chat UI:  http://", 240, proc)
        state = runstate.read(tmp_path / "run")
        assert state is not None
        async with httpx.AsyncClient(timeout=60) as http:
            tab = Tab(url, http, load_page=True)
            await tab.open()
            mine = int(tab.cookies["KIMI_WORKER"].removeprefix("w")) - 1
            photo = await tab.upload((DATA / "rocket.jpg").read_bytes(), "rocket.jpg")
            root = chainlit_app_root(state.workers[mine].pid)
            (stored,) = (root / ".files").glob(f"*/{photo}*")
            # The other worker stops as SIGTERM asks (Chainlit's shutdown runs) and the
            # supervisor starts it again, even with its folder gone meanwhile.
            other = state.workers[1 - mine]
            other_root = chainlit_app_root(other.pid)
            assert other_root != root
            shutil.rmtree(other_root)
            os.killpg(other.pid, signal.SIGTERM)
            wait_for_text(out, rf"chat UI worker {2 - mine} answers again after \d+ s", 120, proc)
            assert stored.is_file()  # this tab's photo, still there to be sent
            answer = await tab.ask(question("quick"), [photo])
            assert answer.complete and not answer.error, answer
            await tab.close()
        # Each worker still reads the app's folder: its welcome pages and public files.
        for port in (w.port for w in state.workers):
            page = httpx.get(
                f"http://127.0.0.1:{port}/project/settings", params={"language": "zh-CN"}
            )
            assert page.json()["markdown"] == (ROOT / "chainlit_zh-CN.md").read_text()
            style = httpx.get(f"http://127.0.0.1:{port}/public/style.css")
            assert style.content == (ROOT / "public" / "style.css").read_bytes()
        stopped = run(["stop"], env)
        assert stopped.returncode == 0, stopped.stderr
        proc.wait(timeout=60)
    for log in (tmp_path / "app-1.log", tmp_path / "app-2.log", out):
        text = log.read_text(errors="replace")
        assert "Traceback" not in text and "shutdown failed" not in text, f"{log}:\n{text[-3000:]}"
