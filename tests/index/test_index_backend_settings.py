"""Choosing the index backend: COFFER_INDEX_BACKEND / --index-backend / config.yaml, and COFFER_DATABASE_URL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from coffer_mcp import Coffer, load_settings
from coffer_mcp.cli import main
from coffer_mcp.errors import ConfigError, StoreError

URL = "postgresql://coffer:s3cret-pass@db.invalid:5432/coffer"


def test_the_embedded_sqlite_index_is_the_default(tmp_path: Path) -> None:
    settings = load_settings(home=tmp_path)
    assert settings.index_backend == "sqlite"
    assert settings.database_url is None


def test_postgres_is_chosen_by_the_environment_with_its_url(tmp_path: Path) -> None:
    env = {"COFFER_INDEX_BACKEND": "postgres", "COFFER_DATABASE_URL": URL}
    settings = load_settings(env, home=tmp_path)
    assert settings.index_backend == "postgres"
    assert settings.database_url is not None
    assert settings.database_url.get_secret_value() == URL
    assert "s3cret-pass" not in repr(settings)  # the password never shows in a dump or a log line


def test_the_flag_wins_over_the_environment(tmp_path: Path) -> None:
    env = {"COFFER_INDEX_BACKEND": "postgres", "COFFER_DATABASE_URL": URL}
    assert load_settings(env, home=tmp_path, index_backend="sqlite").index_backend == "sqlite"


def test_postgres_without_a_url_says_which_variable_to_set(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings({"COFFER_INDEX_BACKEND": "postgres"}, home=tmp_path)
    assert "COFFER_DATABASE_URL" in caught.value.hint


def test_an_unknown_backend_is_refused_naming_the_variable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings({"COFFER_INDEX_BACKEND": "mysql"}, home=tmp_path)
    assert "COFFER_INDEX_BACKEND" in caught.value.hint


def test_a_password_in_config_yaml_is_refused(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text(f"index_backend: postgres\ndatabase_url: {URL}\n", encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_settings(home=tmp_path)
    assert "password" in caught.value.message
    assert "s3cret-pass" not in f"{caught.value.message} {caught.value.hint}"


def test_config_yaml_may_name_the_server_without_its_password(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text(
        "index_backend: postgres\ndatabase_url: postgresql://coffer@db.invalid/coffer\n", encoding="utf-8"
    )
    assert load_settings(home=tmp_path).index_backend == "postgres"


def test_the_cli_reports_a_missing_url_as_one_error_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--home", str(tmp_path), "--index-backend", "postgres", "kb", "list"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("coffer: The postgres index backend needs the server's address.")
    assert "COFFER_DATABASE_URL" in err


SQLITE_FIELDS = ("sqlite_binding", "sqlite_version", "fts5", "sqlite_vec_version")
POSTGRES_FIELDS = ("postgres_version", "postgres_driver", "pgvector_version")


def _doctor_json(home: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    main(["--home", str(home), "doctor", "--no-embed", "--json"])
    return json.loads(capsys.readouterr().out)


def test_doctor_json_names_the_postgres_server_its_driver_and_pgvector_in_fields_of_their_own(
    tmp_path: Path, postgres_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # It said "sqlite_version": "18.1", "sqlite_binding": "psycopg 3.2.9" and "fts5": true on PostgreSQL.
    monkeypatch.setenv("COFFER_INDEX_BACKEND", "postgres")
    monkeypatch.setenv("COFFER_DATABASE_URL", postgres_url)
    monkeypatch.setenv("COFFER_EMBEDDING_PROVIDER", "none")
    with Coffer(load_settings(home=tmp_path, index_backend="postgres", database_url=postgres_url)) as coffer:
        coffer.create_kb("notes")
    report = _doctor_json(tmp_path, capsys)
    assert report["index_backend"] == "postgres"
    assert report["postgres_version"].split(".")[0].isdigit()  # the server's, e.g. 18.1
    assert report["postgres_driver"].startswith("psycopg ")
    assert report["pgvector_version"].split(".")[0].isdigit()
    assert {field: report[field] for field in SQLITE_FIELDS} == dict.fromkeys(SQLITE_FIELDS)
    assert [kb["name"] for kb in report["knowledge_bases"]] == ["notes"]
    assert not [p for p in report["problems"] if "PostgreSQL" in p or "pgvector" in p]
    assert main(["--home", str(tmp_path), "doctor", "--no-embed"]) == 0
    server, driver, pgvector = (report[field] for field in POSTGRES_FIELDS)
    assert f"PostgreSQL {server} via {driver}; pgvector {pgvector}" in capsys.readouterr().out


def test_doctor_json_on_sqlite_keeps_its_sqlite_fields_and_has_no_postgres_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COFFER_EMBEDDING_PROVIDER", "none")
    report = _doctor_json(tmp_path, capsys)
    assert report["index_backend"] == "sqlite"
    assert report["sqlite_binding"] in ("sqlite3", "sqlean")
    assert report["sqlite_version"].split(".")[0] == "3"
    assert report["fts5"] is True
    assert report["sqlite_vec_version"]
    assert {field: report[field] for field in POSTGRES_FIELDS} == dict.fromkeys(POSTGRES_FIELDS)


def test_doctor_with_an_unreachable_database_says_so_without_the_password(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COFFER_INDEX_BACKEND", "postgres")
    monkeypatch.setenv("COFFER_DATABASE_URL", "postgresql://coffer:s3cret-pass@127.0.0.1:9/x")  # nothing listens
    status = main(["--home", str(tmp_path), "doctor", "--no-embed"])
    out = capsys.readouterr()
    assert status == 1
    text = out.out + out.err
    assert "PostgreSQL NOT reachable" in out.out  # the report itself, not only an error line
    assert "COFFER_DATABASE_URL" in text
    assert "s3cret-pass" not in text
    report = _doctor_json(tmp_path, capsys)
    assert (report["postgres_version"], report["pgvector_version"]) == (None, None)
    assert "Cannot connect to the PostgreSQL index" in report["problems"][0]


def test_index_rebuild_moves_a_store_from_sqlite_to_postgres(
    tmp_path: Path, postgres_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from coffer_mcp import Coffer

    with Coffer(load_settings(home=tmp_path)) as embedded:  # the files, indexed by SQLite
        embedded.create_kb("notes")
        embedded.add_document("notes", "tomatoes.md", "# Tomatoes\n\nStake them early in the season.")
        embedded.add_document("notes", "roses.md", "# Roses\n\nPrune in late winter.")
    monkeypatch.setenv("COFFER_DATABASE_URL", postgres_url)
    assert main(["--home", str(tmp_path), "index", "rebuild", "--backend", "postgres"]) == 0
    assert "notes: 2 documents, 2 indexed" in capsys.readouterr().out
    settings = load_settings(home=tmp_path, index_backend="postgres", database_url=postgres_url)
    with Coffer(settings) as shared:
        assert [p.title for p in shared.search("notes", "prune winter").passages] == ["Roses"]
        assert shared.verify("notes").ok


def test_a_misspelt_setting_in_config_yaml_names_the_one_it_resembles(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text("grep_timout: 5\n", encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_settings(home=tmp_path)
    assert caught.value.message == "Invalid configuration: grep_timout: no such setting (did you mean grep_timeout?)."
    assert "config.yaml" in caught.value.hint


def test_a_role_that_may_not_create_tables_is_told_which_privilege_it_lacks(
    tmp_path: Path, postgres_url: str, postgres_server: Any
) -> None:
    # PostgreSQL 15+ lets only the database's owner create tables in public: the error said to run
    # `coffer doctor`, the command that had just failed.
    import psycopg
    from psycopg import conninfo

    role = f"plain_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'pw-{role}'")
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")  # as an admin would, per deploy.md
    options = {**conninfo.conninfo_to_dict(postgres_url), "user": role, "password": f"pw-{role}"}
    url = conninfo.make_conninfo(**options)
    try:
        with pytest.raises(StoreError) as caught:
            Coffer(load_settings(home=tmp_path, index_backend="postgres", database_url=url)).list_kbs()
        assert "permission denied" in caught.value.message
        assert "owner" in caught.value.hint
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute(f"DROP OWNED BY {role}")
            conn.execute(f"DROP ROLE {role}")


@pytest.mark.parametrize("argv", [["doctor"], ["kb", "list"]], ids=["doctor", "kb-list"])
def test_postgres_without_its_driver_installed_says_which_extra_to_install(tmp_path: Path, argv: list[str]) -> None:
    # As if Coffer were installed without the postgres extra: importing psycopg fails.
    code = "import sys; sys.modules['psycopg'] = None; from coffer_mcp.cli import main; sys.exit(main(sys.argv[1:]))"
    env = {
        **{key: value for key, value in os.environ.items() if not key.startswith("COFFER_")},
        "COFFER_HOME": str(tmp_path / "home"),
        "COFFER_INDEX_BACKEND": "postgres",
        "COFFER_DATABASE_URL": "postgresql://coffer@127.0.0.1:1/coffer",
    }
    done = subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith("coffer: The postgres index backend needs the psycopg driver")
    assert "pip install -e '.[postgres]'" in done.stderr
