"""Settings that load must hold: no boolean passes for a number, chunk settings checked as a pair."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from coffer_mcp import Coffer
from coffer_mcp.cli import main
from coffer_mcp.errors import ConfigError
from coffer_mcp.settings import Settings, bound_of, load_settings
from coffer_mcp.store.kbconfig import KbConfig
from scripts import gen_docs

NUMBER_SETTINGS = [
    name
    for name, field in Settings.model_fields.items()
    if any(kind in (int, float) for kind in (getattr(field.annotation, "__args__", None) or (field.annotation,)))
]
GROUPS = ("embedding", "rerank")


def config_yaml(home: Path, values: dict[str, Any]) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text(yaml.safe_dump(values), encoding="utf-8")


def as_config_key(name: str, value: Any) -> dict[str, Any]:
    """A setting as config.yaml spells it: the embedding and rerank ones in their groups."""
    group = next((g for g in GROUPS if name.startswith(f"{g}_")), None)
    return {group: {name.removeprefix(f"{group}_"): value}} if group else {name: value}


def test_the_number_settings_are_the_ones_expected() -> None:
    assert {"max_document_bytes", "grep_timeout", "chunk_size", "embedding_dimensions"} <= set(NUMBER_SETTINGS)
    assert "watch" not in NUMBER_SETTINGS


@pytest.mark.parametrize("value", [True, False])
@pytest.mark.parametrize("name", NUMBER_SETTINGS)
def test_no_number_setting_takes_true_or_false(tmp_path: Path, name: str, value: bool) -> None:
    config_yaml(tmp_path, as_config_key(name, value))
    with pytest.raises(ConfigError) as caught:
        load_settings(home=tmp_path)
    assert f"{name}: must be a number, not {str(value).lower()}" in caught.value.message
    assert "config.yaml" in caught.value.hint


def test_numbers_from_the_environment_still_load(tmp_path: Path) -> None:
    settings = load_settings({"COFFER_MAX_DOCUMENT_BYTES": "100", "COFFER_GREP_TIMEOUT": "2.5"}, home=tmp_path)
    assert (settings.max_document_bytes, settings.grep_timeout) == (100, 2.5)


def test_max_document_bytes_true_is_refused_on_the_command_line_not_a_one_byte_limit(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config_yaml(home, {"max_document_bytes": True})
    assert main(["--home", str(home), "kb", "list"]) == 1
    err = capsys.readouterr().err
    assert "max_document_bytes: must be a number, not true" in err
    assert f"hint: Fix max_document_bytes in {home.resolve() / 'config.yaml'}." in err


def test_inconsistent_chunk_settings_in_config_yaml_are_refused_naming_the_file_and_keys(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config_yaml(home, {"chunk_size": 100, "chunk_overlap": 90})
    assert main(["--home", str(home), "kb", "create", "ov"]) == 1
    err = capsys.readouterr().err
    config = home.resolve() / "config.yaml"
    assert (
        f"chunk_overlap (90, from chunk_overlap in {config}) must be less than half of chunk_size "
        f"(100, from chunk_size in {config})"
    ) in err
    assert f"hint: Fix chunk_overlap in {config}: below 50, or raise chunk_size." in err
    assert not (home / "knowledge" / "ov").exists()


def test_an_overlap_from_the_environment_against_the_default_chunk_size_names_both(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings({"COFFER_CHUNK_OVERLAP": "600"}, home=tmp_path)
    assert caught.value.message == (
        "Invalid configuration: chunk_overlap (600, from COFFER_CHUNK_OVERLAP in the environment) must be less "
        "than half of chunk_size (1024, from the default)."
    )


def test_a_small_chunk_size_alone_shrinks_the_default_overlap_in_proportion(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config_yaml(home, {"chunk_size": 200})
    assert load_settings(home=home).chunk_overlap == 25  # 128 for 1,024-character chunks
    assert main(["--home", str(home), "kb", "create", "small", "--json"]) == 0
    assert '"chunk_overlap": 25' in capsys.readouterr().out


def test_a_hand_typed_true_in_kb_yaml_is_no_chunk_overlap_of_one(home: Path) -> None:
    with Coffer(load_settings(home=home, embedding_provider="none")) as service:
        service.create_kb("notes", chunk_size=256, chunk_overlap=32)
        kb_yaml = home / "knowledge" / "notes" / "kb.yaml"
        data = yaml.safe_load(kb_yaml.read_text(encoding="utf-8"))
        kb_yaml.write_text(yaml.safe_dump({**data, "chunk_overlap": True}), encoding="utf-8")
        details = service.describe_kb("notes")
    # An invalid hand-edited value is ignored: the documented defaults apply (docs/configuration.md).
    assert details.chunk_overlap != 1
    assert (details.chunk_size, details.chunk_overlap) == (1024, 128)


def test_a_relative_allowed_dir_in_config_yaml_is_refused_naming_the_setting_and_the_file(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config_yaml(home, {"allowed_dirs": ["relative/dir", "~/x", "/srv/papers"]})
    assert main(["--home", str(home), "kb", "list"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [
        (
            "coffer: Invalid configuration: allowed_dirs: 'relative/dir' is relative, so it would mean a folder under "
            "whatever folder Coffer is started in."
        ),
        (
            f"  hint: Fix allowed_dirs in {home.resolve() / 'config.yaml'}: give absolute folders, or ones starting "
            "with ~ (e.g. ~/Documents)."
        ),
    ]


def test_a_relative_allowed_dir_in_the_environment_is_refused_and_home_and_absolute_ones_load(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings({"COFFER_ALLOWED_DIRS": "relative:/abs"}, home=tmp_path)
    assert caught.value.code == "invalid_config"
    assert "allowed_dirs: 'relative' is relative" in caught.value.message
    assert caught.value.hint == (
        "Fix COFFER_ALLOWED_DIRS in the environment: give absolute folders, or ones starting with ~ (e.g. ~/Documents)."
    )
    settings = load_settings({"COFFER_ALLOWED_DIRS": f"~/x{os.pathsep}/abs"}, home=tmp_path)
    assert settings.allowed_dirs == [Path("~/x").expanduser().resolve(), Path("/abs").resolve()]


@pytest.mark.parametrize(
    "url", ["coffer.example.com", "ftp://coffer.example.com", "https://x.example/base", "https://x.example/?a=1"]
)
def test_a_public_url_that_is_not_a_servers_root_address_is_refused(tmp_path: Path, url: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings({"COFFER_PUBLIC_URL": url}, home=tmp_path)
    assert "COFFER_PUBLIC_URL" in refused.value.hint


def test_a_public_url_and_the_oauth_mode_load_from_the_environment(tmp_path: Path) -> None:
    settings = load_settings(
        {"COFFER_PUBLIC_URL": "https://coffer.example.com/", "COFFER_AUTH": "oauth"}, home=tmp_path
    )
    assert (settings.public_url, settings.auth) == ("https://coffer.example.com", "oauth")


def described_fields() -> list[tuple[str, Any]]:
    settings = [(name, f) for name, f in Settings.model_fields.items() if not f.exclude]
    return settings + [(f"kb.yaml {name}", f) for name, f in KbConfig.model_fields.items()]


@pytest.mark.parametrize(("name", "field"), described_fields(), ids=[name for name, _ in described_fields()])
def test_every_setting_is_described_in_plain_sentences(name: str, field: Any) -> None:
    """The description is the setting's one explanation: the reference, README and server.json show it."""
    text = field.description or ""
    assert text.endswith("."), f"{name}: give its Field a description of one or more sentences"
    assert "](" not in text, f"{name}: plain text (links go in gen_docs.SEE_ALSO)"
    assert 30 <= len(gen_docs.summary(text)) <= 200, f"{name}: its first sentence should say what it does"


def test_a_knowledge_base_takes_its_chunk_defaults_and_bounds_from_the_global_settings() -> None:
    for name in ("chunk_size", "chunk_overlap"):
        assert KbConfig.model_fields[name].default == Settings.model_fields[name].default
    for bound in ("ge", "le"):
        assert bound_of(KbConfig, "chunk_size", bound) == bound_of(Settings, "chunk_size", bound)
