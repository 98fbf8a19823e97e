"""Open in editor / reveal in file manager: inside the store only, same-origin with the action token, argv only."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from coffer_mcp import Coffer
from coffer_mcp.web import NoOpenerError
from coffer_mcp.web._actions import Launch, plan
from tests.web.support import Recorder, Seeded, action_token, make_coffer, running, seed

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="the recording opener is a POSIX script")


@dataclass
class Viewer:
    """A server whose editor is the recording opener, and a client posing as its page."""

    http: httpx.Client
    origin: str
    token: str
    service: Coffer
    seeded: Seeded
    recorder: Recorder

    def post(self, path: str, *, origin: str | None = "same", token: str | None = "same", **headers: str):
        sent = dict(headers)
        if origin is not None:
            sent["Origin"] = self.origin if origin == "same" else origin
        if token is not None:
            sent["X-Coffer-Action-Token"] = self.token if token == "same" else token
        return self.http.post(f"/api/v1{path}", headers=sent)


@pytest.fixture(scope="module")
def recorder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recorder]:
    rec = Recorder(tmp_path_factory.mktemp("recorder"))
    yield rec
    rec.close()


@pytest.fixture(scope="module")
def viewer(tmp_path_factory: pytest.TempPathFactory, recorder: Recorder) -> Iterator[Viewer]:
    home = tmp_path_factory.mktemp("actions") / "home"
    editor = f"{recorder.command} --flag 'two words' '$(touch {home}/pwned)'"
    with make_coffer(home, editor=editor) as service:
        seeded = seed(service)
        with running(service) as url, httpx.Client(base_url=url, timeout=10) as http:
            yield Viewer(http, url, action_token(http.get("/").text), service, seeded, recorder)


def doc_path(viewer: Viewer, doc_id: str) -> str:
    return os.path.realpath(viewer.service.paths.kb("notes").doc(doc_id))


# -- what runs -----------------------------------------------------------------------------------


def test_open_starts_the_editor_with_an_argument_list_ending_in_the_document_path(viewer: Viewer) -> None:
    response = viewer.post(f"/knowledge_bases/notes/documents/{viewer.seeded.alpha}/open")
    assert response.status_code == 200, response.text
    assert response.json()["path"] == doc_path(viewer, viewer.seeded.alpha)
    argv = viewer.recorder.wait_call()
    home = viewer.service.paths.home
    # Split like a shell would, but never run by one: the substitution stays a literal argument.
    assert argv == ["--flag", "two words", f"$(touch {home}/pwned)", doc_path(viewer, viewer.seeded.alpha)]
    assert not (home / "pwned").exists()


def test_open_on_a_knowledge_base_opens_its_folder(viewer: Viewer) -> None:
    assert viewer.post("/knowledge_bases/notes/open").status_code == 200
    argv = viewer.recorder.wait_call()
    assert argv[-1] == os.path.realpath(viewer.service.paths.kb("notes").root)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux reveals through xdg-open")
def test_reveal_on_linux_opens_the_containing_folder_with_xdg_open(
    viewer: Viewer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "xdg-open"
    fake.write_text(f'#!/bin/sh\nexec {viewer.recorder.command} "$@"\n', encoding="utf-8")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    response = viewer.post(f"/knowledge_bases/notes/documents/{viewer.seeded.beta}/reveal")
    assert response.status_code == 200, response.text
    assert response.json()["opener"] == str(fake)
    assert viewer.recorder.wait_call() == [str(Path(doc_path(viewer, viewer.seeded.beta)).parent)]


# -- what is refused -----------------------------------------------------------------------------

BAD_TARGETS = [
    ("/knowledge_bases/notes/documents/%2E%2E/open", (400, 404)),
    ("/knowledge_bases/notes/documents/..%2F..%2Fkb.yaml/open", (400, 404)),
    ("/knowledge_bases/notes/documents/01ARZ3NDEKTSV4RRFFQ69G5FAV/open", (404,)),
    ("/knowledge_bases/notes/documents/01arz3ndektsv4rrffq69g5fav/reveal", (400,)),
    ("/knowledge_bases/%2E%2E/open", (400, 404)),
    ("/knowledge_bases/..%2F..%2Fetc/reveal", (400, 404)),
    ("/knowledge_bases/.hidden/open", (400,)),
    ("/knowledge_bases/NOTES/open", (400,)),
    ("/knowledge_bases/missing-kb/open", (404,)),
]


def test_traversal_and_unknown_targets_are_refused_without_calling_the_opener(viewer: Viewer) -> None:
    before = len(viewer.recorder.calls())
    for path, statuses in BAD_TARGETS:
        response = viewer.post(path)
        assert response.status_code in statuses, (path, response.status_code, response.text)
        assert set(response.json()) == {"code", "message", "hint"}
    # One legitimate call afterwards: the log then holds exactly that one new call.
    assert viewer.post(f"/knowledge_bases/notes/documents/{viewer.seeded.alpha}/open").status_code == 200
    viewer.recorder.wait_call()
    assert len(viewer.recorder.calls()) == before + 1


@pytest.mark.parametrize(
    ("origin", "token", "headers", "code"),
    [
        ("http://evil.example", "same", {}, "forbidden_origin"),
        (None, "same", {}, "forbidden_action"),
        ("same", None, {}, "forbidden_action"),
        ("same", "stale-token", {}, "forbidden_action"),
        ("same", "same", {"Sec-Fetch-Site": "cross-site"}, "forbidden_action"),
    ],
    ids=["cross-origin", "no-origin", "no-action-token", "wrong-action-token", "cross-site-fetch"],
)
def test_a_request_not_from_the_viewer_page_is_refused_with_403(
    viewer: Viewer, origin: str | None, token: str | None, headers: dict[str, str], code: str
) -> None:
    before = len(viewer.recorder.calls())
    response = viewer.post(
        f"/knowledge_bases/notes/documents/{viewer.seeded.alpha}/open", origin=origin, token=token, **headers
    )
    assert response.status_code == 403
    assert response.json()["code"] == code
    assert len(viewer.recorder.calls()) == before


def test_a_knowledge_base_folder_symlinked_out_of_the_store_is_refused(viewer: Viewer, tmp_path: Path) -> None:
    # A linked folder is no knowledge base anywhere (never listed nor indexed): the action says so
    # as every read does, and opens nothing.
    outside = tmp_path / "outside"
    (outside / "docs").mkdir(parents=True)
    link = viewer.service.paths.knowledge / "linked"
    link.symlink_to(outside, target_is_directory=True)
    try:
        response = viewer.post("/knowledge_bases/linked/reveal")
    finally:
        link.unlink()
    assert response.status_code == 404
    assert response.json()["code"] == "unknown_kb"
    assert "symbolic link" in response.json()["message"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="headless Linux is the case without an opener")
def test_without_an_editor_or_xdg_open_the_answer_is_a_clear_501(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    with make_coffer(tmp_path / "home") as service:
        seeded = seed(service)
        with running(service) as url, httpx.Client(base_url=url, timeout=10) as http:
            token = action_token(http.get("/").text)
            response = http.post(
                f"/api/v1/knowledge_bases/notes/documents/{seeded.alpha}/open",
                headers={"Origin": url, "X-Coffer-Action-Token": token},
            )
    assert response.status_code == 501
    body = response.json()
    assert body["code"] == "no_opener"
    assert "COFFER_EDITOR" in body["hint"]


def fake_xdg_open(folder: Path, status: int, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An ``xdg-open`` first on PATH that opens nothing and exits with ``status``."""
    fake = folder / "xdg-open"
    fake.write_text(f"#!/bin/sh\necho 'xdg-open: no method available' >&2\nexit {status}\n", encoding="utf-8")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    return fake


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux reveals through xdg-open")
def test_an_xdg_open_that_finds_no_program_is_a_501_not_a_success(
    viewer: Viewer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_xdg_open(tmp_path, 3, monkeypatch)  # what xdg-open does on a headless machine
    for path in (f"/knowledge_bases/notes/documents/{viewer.seeded.beta}/reveal", "/knowledge_bases/notes/reveal"):
        response = viewer.post(path)
        assert response.status_code == 501, response.text
        body = response.json()
        assert body["code"] == "no_opener"
        assert "xdg-open" in body["message"]
        assert "COFFER_EDITOR" in body["hint"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux reveals through xdg-open")
def test_an_opener_failing_otherwise_is_opener_failed_with_its_status(
    viewer: Viewer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_xdg_open(tmp_path, 4, monkeypatch)
    response = viewer.post("/knowledge_bases/notes/reveal")
    assert response.status_code == 500, response.text
    body = response.json()
    assert body["code"] == "opener_failed"
    assert body["message"] == "xdg-open exited with status 4 without opening anything."


def test_an_editor_that_exits_with_an_error_is_reported(tmp_path: Path) -> None:
    with make_coffer(tmp_path / "home", editor=f"{sys.executable} -c 'raise SystemExit(2)'") as service:
        seeded = seed(service)
        with running(service) as url, httpx.Client(base_url=url, timeout=10) as http:
            token = action_token(http.get("/").text)
            response = http.post(
                f"/api/v1/knowledge_bases/notes/documents/{seeded.alpha}/open",
                headers={"Origin": url, "X-Coffer-Action-Token": token},
            )
    assert response.status_code == 500, response.text
    assert response.json()["code"] == "opener_failed"
    assert "status 2" in response.json()["message"]


def test_each_server_process_has_its_own_action_token(viewer: Viewer, tmp_path: Path) -> None:
    with make_coffer(tmp_path / "home") as other, running(other) as url, httpx.Client(base_url=url) as http:
        assert action_token(http.get("/").text) != viewer.token


# -- the command plan, per platform (pure) -------------------------------------------------------

TARGET = Path("/home/u/.coffer/knowledge/notes/docs/01ARZ3NDEKTSV4RRFFQ69G5FAV.md")


def which_all(program: str) -> str:
    return f"/usr/bin/{program}"


def which_none(program: str) -> None:
    return None


def test_macos_opens_with_open_and_reveals_with_open_r() -> None:
    assert plan("open", TARGET, editor=None, platform="darwin", which=which_all).argv == ("open", str(TARGET))
    assert plan("reveal", TARGET, editor=None, platform="darwin", which=which_all).argv == ("open", "-R", str(TARGET))


def test_windows_opens_with_startfile_and_reveals_with_explorer_select() -> None:
    assert plan("open", TARGET, editor=None, platform="win32", which=which_all) == Launch(startfile=str(TARGET))
    reveal = plan("reveal", TARGET, editor=None, platform="win32", which=which_all)
    assert reveal.argv == ("explorer", f"/select,{TARGET}")


def test_linux_opens_with_xdg_open_and_reveals_the_containing_folder() -> None:
    opened = plan("open", TARGET, editor=None, platform="linux", which=which_all)
    assert opened.argv == ("/usr/bin/xdg-open", str(TARGET))
    reveal = plan("reveal", TARGET, editor=None, platform="linux", which=which_all)
    assert reveal.argv == ("/usr/bin/xdg-open", str(TARGET.parent))


def test_an_editor_with_arguments_is_split_and_resolved_on_path() -> None:
    launch = plan("open", TARGET, editor="code --reuse-window", platform="linux", which=which_all)
    assert launch.argv == ("/usr/bin/code", "--reuse-window", str(TARGET))


def test_a_terminal_editor_falls_back_to_the_desktop_opener() -> None:
    assert plan("open", TARGET, editor="vim", platform="darwin", which=which_all).argv == ("open", str(TARGET))


def test_reveal_ignores_the_editor() -> None:
    launch = plan("reveal", TARGET, editor="code", platform="darwin", which=which_all)
    assert launch.argv == ("open", "-R", str(TARGET))


@pytest.mark.parametrize("editor", [None, "missing-editor --x", "unbalanced 'quote"])
def test_without_a_usable_opener_the_error_says_to_set_coffer_editor(editor: str | None) -> None:
    with pytest.raises(NoOpenerError) as caught:
        plan("open", TARGET, editor=editor, platform="linux", which=which_none)
    assert "COFFER_EDITOR" in caught.value.hint
