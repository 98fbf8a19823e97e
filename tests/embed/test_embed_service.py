"""The shared model service, for real: real processes, real Unix sockets, the local MiniLM model.

Tests that only start, find, race or refuse the service ask it for its ``status``, which never
loads a model, so they run without one; the vectors are checked with the real model.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import struct
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from coffer_mcp import Coffer, load_settings
from coffer_mcp.embed import CooldownEmbedder, EmbeddingConfig
from coffer_mcp.embed._rundir import RunFiles, ServiceUnavailableError
from coffer_mcp.embed._wire import recv_json, send_json
from coffer_mcp.errors import EmbeddingError
from coffer_mcp.services import embedding_config
from tests.embed.conftest import MODEL_NAME, long_texts
from tests.embed.service_support import (
    NO_MODEL,
    WAIT_SECONDS,
    assert_close,
    client,
    in_process,
    run_python,
    service_pids,
    shared,
    temporary_folder,
    wait_gone,
)

pytestmark = pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs Linux (/proc, pidfd)")

TEXTS = ["hello world", "a second, longer text about search engines", "Sourdough needs a lively starter"]
QUERY = "how do search engines rank pages"


@pytest.fixture
def folder() -> Iterator[Path]:
    yield from temporary_folder()


def files_of(folder: Path) -> RunFiles:
    sockets = list(folder.glob("embed-*.sock"))
    assert len(sockets) == 1, sockets
    return RunFiles(folder, sockets[0].name.removeprefix("embed-").removesuffix(".sock"))


# -- vectors ----------------------------------------------------------------------------------------


def test_the_first_embed_starts_one_service_whose_vectors_equal_in_process_ones(model_dir: Path, folder: Path) -> None:
    embedder = shared(folder, model_dir)
    assert service_pids(folder) == []  # making the embedder starts nothing
    vectors, query = embedder.embed_documents(TEXTS), embedder.embed_query(QUERY)
    local = in_process(model_dir)
    for got, expected in zip(vectors, local.embed_documents(TEXTS), strict=True):
        assert_close(got, expected)
    assert_close(query, local.embed_query(QUERY))
    assert embedder.dimensions() == 384
    status = client(embedder).status()
    assert service_pids(folder) == [status["pid"]]
    assert status["pid"] != os.getpid()
    assert status["identity"] == embedder.identity == f"fastembed:{MODEL_NAME}"
    assert client(embedder).local._model is None  # this process never loaded the model
    assert not client(embedder).in_process


def test_a_second_process_reuses_the_service_and_loads_no_model(model_dir: Path, folder: Path) -> None:
    first = shared(folder, model_dir)
    first.embed_query(QUERY)
    pid = client(first).status()["pid"]
    code = """
        import json, sys
        from pathlib import Path
        from coffer_mcp.embed import EmbeddingConfig, make_embedder
        config = EmbeddingConfig(model=sys.argv[1], model_path=Path(sys.argv[2]), service="auto",
                                 service_folder=Path(sys.argv[3]))
        embedder = make_embedder(config)
        vectors, query = embedder.embed_documents(json.loads(sys.argv[4])), embedder.embed_query(sys.argv[5])
        loaded = sorted({"fastembed", "onnxruntime"} & {m.split(".")[0] for m in sys.modules})
        print(json.dumps({"pid": embedder.provider.status()["pid"], "vectors": vectors, "query": query,
                          "loaded": loaded}))
    """
    second = run_python(code, MODEL_NAME, str(model_dir), str(folder), json.dumps(TEXTS), QUERY)
    assert second.returncode == 0, second.stderr
    answer = json.loads(second.stdout)  # stdout holds exactly the answer: the service never writes there
    assert answer["pid"] == pid
    assert answer["loaded"] == []
    assert service_pids(folder) == [pid]
    local = in_process(model_dir)
    for got, expected in zip(answer["vectors"], local.embed_documents(TEXTS), strict=True):
        assert_close(got, expected)
    assert_close(answer["query"], local.embed_query(QUERY))


def test_a_search_query_is_answered_while_the_service_embeds_someone_elses_long_texts(
    model_dir: Path, folder: Path
) -> None:
    embedder = shared(folder, model_dir)
    expected = embedder.embed_query(QUERY)  # the model is loaded
    bulk_done = threading.Event()
    # Four requests of 16 long texts: the query, sent once the first is seen, must not wait for the rest.
    bulk = threading.Thread(target=lambda: (embedder.embed_documents(long_texts(64)), bulk_done.set()))
    bulk.start()
    try:
        wait_for_the_request_of(bulk, embedder)
        assert_close(embedder.embed_query(QUERY), expected)
        assert not bulk_done.is_set()  # the query did not wait for the 64 long texts
    finally:
        bulk.join(WAIT_SECONDS)
    assert bulk_done.is_set()


def test_the_service_stays_under_600_mb_whatever_the_length_of_the_texts(model_dir: Path, folder: Path) -> None:
    # 16 texts padded to 512 tokens and run as one batch took the service to 1.9 GB.
    embedder = shared(folder, model_dir)
    assert len(embedder.embed_documents(long_texts(16))) == 16
    assert peak_rss_mb(client(embedder).status()["pid"]) < 600


def wait_for_the_request_of(bulk: threading.Thread, embedder: CooldownEmbedder) -> None:
    """Return once the service has received the request ``bulk`` is making (each status counts itself)."""
    before = client(embedder).status()["requests"]
    deadline = time.monotonic() + WAIT_SECONDS
    asked = 0
    while bulk.is_alive():
        asked += 1
        if client(embedder).status()["requests"] - asked > before:
            return
        assert time.monotonic() < deadline, "the service never received the request"
    raise AssertionError(f"the request was answered before it was seen (in process: {client(embedder).in_process})")


def peak_rss_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text(encoding="utf-8")
    return int(next(line for line in status.splitlines() if line.startswith("VmHWM:")).split()[1]) / 1024


def test_a_killed_service_is_replaced_by_the_next_call_and_its_stale_socket_removed(
    model_dir: Path, folder: Path
) -> None:
    embedder = shared(folder, model_dir)
    before = embedder.embed_query(QUERY)
    pid = client(embedder).status()["pid"]
    os.kill(pid, signal.SIGKILL)
    wait_gone(pid)
    assert files_of(folder).socket.exists()  # SIGKILL leaves the socket file behind
    assert_close(embedder.embed_query(QUERY), before)
    restarted = client(embedder).status()["pid"]
    assert restarted != pid
    assert service_pids(folder) == [restarted]
    assert not client(embedder).in_process


def test_a_service_killed_while_a_client_waits_is_replaced_within_that_call(model_dir: Path, folder: Path) -> None:
    embedder = shared(folder, model_dir)
    expected = embedder.embed_query(QUERY)
    pid = client(embedder).status()["pid"]
    os.kill(pid, signal.SIGSTOP)  # the request below waits on a service that cannot answer...
    answers: list[list[float]] = []
    waiting = threading.Thread(target=lambda: answers.append(embedder.embed_query(QUERY)))
    waiting.start()
    os.kill(pid, signal.SIGKILL)  # ...and then loses it
    waiting.join(timeout=WAIT_SECONDS)
    assert answers, "the call did not finish"
    assert_close(answers[0], expected)
    assert client(embedder).status()["pid"] != pid
    assert not client(embedder).in_process


def test_a_service_that_does_not_answer_in_time_is_left_for_in_process_embedding(model_dir: Path, folder: Path) -> None:
    embedder = shared(folder, model_dir, timeout_seconds=1)
    pid = client(embedder).status()["pid"]
    os.kill(pid, signal.SIGSTOP)  # hung: connections are accepted by the kernel, never answered
    assert_close(embedder.embed_query(QUERY), in_process(model_dir).embed_query(QUERY))
    assert client(embedder).in_process
    assert not embedder.cooling_down


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_when_the_service_cannot_be_used_embedding_falls_back_in_process_then_returns_to_it(
    model_dir: Path, folder: Path
) -> None:
    embedder = shared(folder, model_dir, cooldown_seconds=30)
    provider = client(embedder)
    provider._clock = clock = Clock()
    blocker = provider._client.files().socket
    blocker.write_text("not a socket", encoding="utf-8")
    vector = embedder.embed_query(QUERY)
    assert_close(vector, in_process(model_dir).embed_query(QUERY))
    assert provider.in_process
    assert provider.local._model is not None
    assert not embedder.cooling_down  # a fallback is not a failure
    assert service_pids(folder) == []
    assert blocker.read_text(encoding="utf-8") == "not a socket"
    blocker.unlink()
    clock.now += 29
    assert provider.in_process  # still within the retry pause: no attempt yet
    assert embedder.embed_query(QUERY) == vector
    assert service_pids(folder) == []
    clock.now += 2
    assert_close(embedder.embed_query(QUERY), vector)
    assert not provider.in_process
    assert provider.local._model is None
    assert len(service_pids(folder)) == 1


def test_a_model_error_in_the_service_is_the_same_embedding_error_as_in_process(tmp_path: Path, folder: Path) -> None:
    missing = tmp_path / "missing"
    with pytest.raises(EmbeddingError) as remote:
        shared(folder, missing).embed_documents(["text"])
    with pytest.raises(EmbeddingError) as local:
        in_process(missing).embed_documents(["text"])
    assert remote.value.to_dict() == local.value.to_dict()


def test_a_service_whose_model_cannot_be_loaded_exits_once_it_has_said_so(tmp_path: Path, folder: Path) -> None:
    # It idled for service_idle_seconds (5 minutes by default) holding nothing it could serve.
    embedder = shared(folder, tmp_path / "missing", service_idle_seconds=600)
    pid = client(embedder).status()["pid"]  # a status loads no model
    with pytest.raises(EmbeddingError):
        embedder.embed_documents(["text"])
    wait_gone(pid)
    assert service_pids(folder) == []
    log = client(embedder)._client.files().log.read_text(encoding="utf-8")
    assert "the model cannot be loaded: exiting" in log  # the service answered the call, then left


# -- starting, racing, idling ---------------------------------------------------------------------


def test_racing_processes_start_exactly_one_service(folder: Path) -> None:
    code = """
        import json, sys
        from pathlib import Path
        from coffer_mcp.embed import EmbeddingConfig, make_embedder
        config = EmbeddingConfig(model=sys.argv[1], model_path=Path(sys.argv[2]), service="auto",
                                 service_folder=Path(sys.argv[3]))
        embedder = make_embedder(config)
        sys.stdin.readline()  # all start together
        print(json.dumps(embedder.provider.status()["pid"]))
    """
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(code), MODEL_NAME, str(NO_MODEL), str(folder)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    for racer in racers:
        assert racer.stdin is not None
        racer.stdin.write("go\n")
        racer.stdin.flush()
    answers = [racer.communicate(timeout=120) for racer in racers]
    assert [racer.returncode for racer in racers] == [0] * 4, [err for _, err in answers]
    pids = {json.loads(out) for out, _ in answers}
    assert len(pids) == 1
    assert service_pids(folder) == sorted(pids)


def test_an_idle_service_exits_and_removes_its_socket_and_the_next_call_starts_another(folder: Path) -> None:
    embedder = shared(folder, service_idle_seconds=0.5)
    pid = client(embedder).status()["pid"]
    files = client(embedder)._client.files()
    wait_gone(pid)
    assert not files.socket.exists()
    assert client(embedder).status()["pid"] != pid


def test_constructing_the_shared_embedder_starts_and_imports_nothing(folder: Path) -> None:
    code = """
        import sys
        from pathlib import Path
        from coffer_mcp.embed import EmbeddingConfig, make_embedder
        config = EmbeddingConfig(model=sys.argv[1], model_path=Path(sys.argv[2]), service="auto",
                                 service_folder=Path(sys.argv[3]) / "run")
        embedder = make_embedder(config)
        embedder.identity, embedder.cooling_down
        heavy = {"fastembed", "onnxruntime", "numpy", "tokenizers", "huggingface_hub"}
        print(sorted(heavy & {m.split(".")[0] for m in sys.modules}), (Path(sys.argv[3]) / "run").exists())
    """
    result = run_python(code, MODEL_NAME, str(NO_MODEL), str(folder))
    assert result.stdout.strip() == "[] False", result.stderr
    assert service_pids(folder) == []


def test_the_setting_turns_the_service_on_by_default_and_off_from_config_yaml(tmp_path: Path) -> None:
    assert embedding_config(load_settings(home=tmp_path / "a")).service == "auto"
    home = tmp_path / "b"
    home.mkdir()
    (home / "config.yaml").write_text("embedding:\n  service: off\n  service_idle_seconds: 60\n", encoding="utf-8")
    config = embedding_config(load_settings(home=home))
    assert (config.service, config.service_idle_seconds) == ("off", 60)
    assert EmbeddingConfig().service == "off"  # the library default: callers opt in


def test_a_vector_knowledge_base_searches_hybrid_through_the_service(
    model_dir: Path, folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(folder))
    env = {"COFFER_EMBEDDING_MODEL": MODEL_NAME, "COFFER_EMBEDDING_MODEL_PATH": str(model_dir)}
    with Coffer(load_settings(env, home=tmp_path / "home")) as coffer:
        coffer.create_kb("v", vector=True)
        coffer.add_document("v", "engines.md", "# Search engines\n\nThey rank pages by links and text.")
        result = coffer.search("v", QUERY, 3)
        assert result.strategy == "hybrid"
        assert result.passages
        embedder, _ = coffer.providers.models.configured()  # the store's model is the one the settings name
        assert isinstance(embedder, CooldownEmbedder)
        status = client(embedder).status()
    assert status["requests"] >= 2
    assert service_pids(folder) == [status["pid"]]
    assert (folder / "coffer").is_dir()


# -- privacy --------------------------------------------------------------------------------------


def test_the_socket_is_0600_in_a_0700_folder_owned_by_the_user(folder: Path) -> None:
    run = folder / "run"
    client(shared(run)).status()
    files = files_of(run)
    assert stat.S_IMODE(run.stat().st_mode) == 0o700
    assert run.stat().st_uid == os.getuid()
    info = files.socket.lstat()
    assert stat.S_ISSOCK(info.st_mode)
    assert stat.S_IMODE(info.st_mode) == 0o600
    assert info.st_uid == os.getuid()
    for path in (files.lock, files.start_lock, files.log):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_file_at_the_socket_path_is_refused_and_left_alone(folder: Path) -> None:
    provider = client(shared(folder))
    path = provider._client.files().socket
    path.write_text("someone's file", encoding="utf-8")
    with pytest.raises(ServiceUnavailableError, match="not a socket"):
        provider.status()
    assert path.read_text(encoding="utf-8") == "someone's file"
    assert service_pids(folder) == []


def test_a_folder_other_users_can_reach_is_refused_not_repaired(folder: Path) -> None:
    folder.chmod(0o755)
    with pytest.raises(ServiceUnavailableError, match="mode 755"):
        client(shared(folder)).status()
    assert stat.S_IMODE(folder.stat().st_mode) == 0o755
    assert service_pids(folder) == []


@pytest.mark.skipif(os.getuid() != 0, reason="giving a file to another user needs root")
def test_a_socket_or_folder_owned_by_another_user_is_refused(folder: Path) -> None:
    provider = client(shared(folder))
    path = provider._client.files().socket
    with socket.socket(socket.AF_UNIX) as planted:
        planted.bind(str(path))
        planted.listen()
        os.chown(path, 65534, 65534)
        with pytest.raises(ServiceUnavailableError, match="belongs to user id 65534"):
            provider.status()
    path.unlink()
    os.chown(folder, 65534, 65534)
    with pytest.raises(ServiceUnavailableError, match="belongs to user id 65534"):
        provider.status()
    assert service_pids(folder) == []


def test_a_socket_path_too_long_for_unix_sockets_is_refused(folder: Path) -> None:
    with pytest.raises(ServiceUnavailableError, match="longer than"):
        RunFiles(folder / ("x" * 80), "0" * 16).prepare()


# -- the wire ---------------------------------------------------------------------------------------


def raw_request(path: Path, payload: bytes) -> dict[str, object] | None:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(60)
        sock.connect(str(path))
        sock.sendall(payload)
        try:
            return recv_json(sock, 1 << 16)
        except ConnectionError:
            return None


def test_the_service_answers_bad_requests_with_an_error_and_drops_oversized_frames(folder: Path) -> None:
    provider = client(shared(folder, batch_size=2))
    pid = provider.status()["pid"]
    path = files_of(folder).socket

    def request(message: dict[str, object]) -> dict[str, object] | None:
        body = json.dumps(message).encode()
        return raw_request(path, struct.pack(">I", len(body)) + body)

    unknown = request({"op": "shutdown"})
    assert unknown is not None
    assert unknown["ok"] is False
    assert "cannot answer" in str(unknown["message"])
    too_many = request({"op": "embed_documents", "texts": ["a", "b", "c"]})  # over the batch size
    assert too_many is not None
    assert too_many["ok"] is False
    assert raw_request(path, struct.pack(">I", 1 << 31)) is None  # 2 GB announced: closed unread
    assert raw_request(path, struct.pack(">I", 5) + b"nope!") is None  # not JSON
    # Longer than the service takes to notice it should exit (a second): a bad request once counted
    # as a model that cannot load, and the service left.
    time.sleep(2.5)
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(str(path))
        send_json(sock, {"op": "status"})
        assert recv_json(sock, 1 << 16)["pid"] == pid  # still serving
