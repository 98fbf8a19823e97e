"""The rerank settings: off by default, from the environment or config.yaml's ``rerank:`` group; keys from the env."""

from __future__ import annotations

from pathlib import Path

import pytest

from coffer_mcp import load_settings
from coffer_mcp.errors import ConfigError
from coffer_mcp.services.providers import rerank_config

URL = "http://127.0.0.1:8080/v1/rerank"


def test_reranking_is_off_by_default(tmp_path: Path) -> None:
    settings = load_settings({}, home=tmp_path)
    assert settings.rerank_provider == "none"
    assert (settings.rerank_candidates, settings.rerank_timeout_ms, settings.rerank_cooldown_seconds) == (30, 2000, 30)
    assert rerank_config(settings).provider == "none"


def test_the_environment_configures_every_rerank_setting(tmp_path: Path) -> None:
    environ = {
        "COFFER_RERANK_PROVIDER": "http",
        "COFFER_RERANK_URL": URL,
        "COFFER_RERANK_MODEL": "bge-reranker-v2-m3",
        "COFFER_RERANK_CANDIDATES": "12",
        "COFFER_RERANK_TIMEOUT_MS": "750",
        "COFFER_RERANK_COOLDOWN_SECONDS": "2.5",
        "COFFER_RERANK_API_KEY": "sk-rerank",
    }
    config = rerank_config(load_settings(environ, home=tmp_path))
    assert (config.provider, config.url, config.model) == ("http", URL, "bge-reranker-v2-m3")
    assert (config.candidates, config.timeout_ms, config.cooldown_seconds, config.api_key) == (
        12,
        750,
        2.5,
        "sk-rerank",
    )
    assert "sk-rerank" not in repr(config)


def test_config_yaml_groups_the_rerank_settings_and_the_key_comes_from_the_variable_it_names(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text(
        f"rerank:\n  provider: http\n  url: {URL}\n  api_key_env: JINA_API_KEY\n  timeout_ms: 1500\n"
        "  cooldown_seconds: 0\n",
        encoding="utf-8",
    )
    settings = load_settings({"JINA_API_KEY": "jina-key", "COFFER_RERANK_API_KEY": "other"}, home=tmp_path)
    config = rerank_config(settings)
    assert (config.provider, config.url, config.timeout_ms, config.api_key) == ("http", URL, 1500, "jina-key")
    assert config.cooldown_seconds == 0
    assert "jina-key" not in settings.model_dump_json()


def test_a_plaintext_key_in_config_yaml_is_refused(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text(f"rerank:\n  provider: http\n  url: {URL}\n  api_key: sk-x\n", "utf-8")
    with pytest.raises(ConfigError, match="plaintext rerank API key") as caught:
        load_settings({}, home=tmp_path)
    assert "api_key_env" in caught.value.hint


def test_an_unknown_key_in_the_rerank_group_is_refused_naming_the_known_ones(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text("rerank:\n  provider: http\n  budget: 5\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="Unknown rerank settings") as caught:
        load_settings({}, home=tmp_path)
    assert "timeout_ms" in caught.value.hint


def test_the_http_reranker_without_a_url_is_refused_with_a_hint(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="needs the endpoint's URL") as caught:
        load_settings({"COFFER_RERANK_PROVIDER": "http"}, home=tmp_path)
    assert "COFFER_RERANK_URL" in caught.value.hint


def test_a_url_that_is_not_http_is_refused_naming_the_variable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="rerank_url") as caught:
        load_settings({"COFFER_RERANK_PROVIDER": "http", "COFFER_RERANK_URL": "file:///etc/passwd"}, home=tmp_path)
    assert "COFFER_RERANK_URL" in caught.value.hint


def test_a_fastembed_model_folder_without_the_models_name_is_refused(tmp_path: Path) -> None:
    environ = {"COFFER_RERANK_PROVIDER": "fastembed", "COFFER_RERANK_MODEL_PATH": str(tmp_path)}
    with pytest.raises(ConfigError, match="rerank model_path is set") as caught:
        load_settings(environ, home=tmp_path)
    assert "COFFER_RERANK_MODEL" in caught.value.hint


@pytest.mark.parametrize(("variable", "value"), [("COFFER_RERANK_CANDIDATES", "0"), ("COFFER_RERANK_TIMEOUT_MS", "-5")])
def test_a_cap_or_budget_out_of_range_is_refused(tmp_path: Path, variable: str, value: str) -> None:
    with pytest.raises(ConfigError, match=variable.removeprefix("COFFER_").lower()):
        load_settings({variable: value}, home=tmp_path)
