"""Components' own settings (quarry/core/options.py): declared where a component registers, read,
checked, masked and fingerprinted by Settings with nothing in settings.py naming them. The
plugin package's end-to-end use of them is in tests/test_plugins.py."""

from __future__ import annotations

import pytest

from quarry.core import logs, registry
from quarry.core.errors import ConfigError
from quarry.core.options import Option, parse_value
from quarry.core.registry import SECTIONERS
from quarry.core.settings import Settings
from quarry.ingest.process import content_fingerprint

WIDTH = Option("optest_width", type=int, default=3, ge=1, le=9, fingerprint=True, help="cut width")
TOKEN = Option("optest_token", secret=True, required=True, env=("OPTEST_TOKEN",))
MODE = Option("optest_mode", default="fast", choices=("fast", "slow"))


@pytest.fixture
def sectioner(monkeypatch):
    """A sectioner registered for the test (the structure sectioner's factory under another name,
    with options), taken out of the registry afterwards."""
    SECTIONERS.load()
    factory = SECTIONERS.get("structure")
    SECTIONERS.add("optest", factory, options=(WIDTH, TOKEN, MODE))
    for name in ("QUARRY_OPTEST_WIDTH", "QUARRY_OPTEST_TOKEN", "OPTEST_TOKEN", "QUARRY_OPTEST_MODE"):
        monkeypatch.delenv(name, raising=False)
    yield "optest"
    for table in (SECTIONERS._items, SECTIONERS._info, SECTIONERS._options):
        table.pop("optest", None)
    SECTIONERS.version += 1
    for option in (WIDTH, TOKEN, MODE):
        registry._DECLARED.pop(option.name, None)


def test_a_chosen_components_options_are_read_and_checked(sectioner, monkeypatch):
    with pytest.raises(ConfigError, match=r"QUARRY_OPTEST_TOKEN \(or OPTEST_TOKEN\) is required by sectioner 'optest'"):
        Settings.from_env(sectioner=sectioner, embed_backend="hash")
    monkeypatch.setenv("OPTEST_TOKEN", "fallback-token-1")
    settings = Settings.from_env(sectioner=sectioner, embed_backend="hash")
    assert settings.option("optest_token") == "fallback-token-1" and settings.option("optest_width") == 3
    monkeypatch.setenv("QUARRY_OPTEST_TOKEN", "own-token-22")  # QUARRY_<NAME> before the fallback
    monkeypatch.setenv("QUARRY_OPTEST_WIDTH", "7")
    settings = Settings.from_env(sectioner=sectioner, embed_backend="hash")
    assert settings.option("optest_token") == "own-token-22" and settings.option("optest_width") == 7
    assert Settings.from_env(sectioner=sectioner, embed_backend="hash", optest_width=2).option("optest_width") == 2
    for value, why in (("12", "is above 9"), ("two", "is not a whole number")):
        monkeypatch.setenv("QUARRY_OPTEST_WIDTH", value)
        with pytest.raises(
            ConfigError, match=f"QUARRY_OPTEST_WIDTH='{value}' {why} \\(an option of sectioner 'optest'\\)"
        ):
            Settings.from_env(sectioner=sectioner, embed_backend="hash")
    monkeypatch.delenv("QUARRY_OPTEST_WIDTH")
    with pytest.raises(ConfigError, match="optest_mode='medium' is not one of fast, slow"):
        Settings.from_env(sectioner=sectioner, embed_backend="hash", optest_mode="medium")


def test_options_of_a_component_not_chosen_wait_until_it_is_used(sectioner):
    settings = Settings.from_env(embed_backend="hash")  # the structure sectioner: optest's token is not needed
    assert "options" not in settings.public_dict()
    with pytest.raises(ConfigError, match="QUARRY_OPTEST_TOKEN"):
        settings.option("optest_token")
    with pytest.raises(ConfigError, match="unknown setting 'optest_wdith'"):
        Settings.from_env(embed_backend="hash", optest_wdith=4)
    with pytest.raises(ConfigError, match="no component declares the option 'nothing_here'"):
        settings.option("nothing_here")


def test_a_secret_option_is_masked_and_a_shaping_one_is_fingerprinted(sectioner, monkeypatch):
    monkeypatch.setenv("QUARRY_OPTEST_TOKEN", "s3cr3t-value-9")  # a name no secret pattern catches
    narrow = Settings.from_env(sectioner=sectioner, embed_backend="hash", optest_width=2)
    wide = Settings.from_env(sectioner=sectioner, embed_backend="hash", optest_width=5)
    assert narrow.public_dict()["options"] == {"optest_width": 2, "optest_token": "***", "optest_mode": "fast"}
    assert "s3cr3t-value-9" not in repr(narrow) + str(narrow.public_dict())
    assert logs.scrub("calling with s3cr3t-value-9 failed") == "calling with *** failed"
    assert narrow.fingerprint_options() == {"optest_width": 2}
    assert content_fingerprint(narrow) != content_fingerprint(wide)  # a shaping option re-processes the index
    monkeypatch.setenv("QUARRY_OPTEST_TOKEN", "another-value-10")
    rotated = Settings.from_env(sectioner=sectioner, embed_backend="hash", optest_width=2)
    assert content_fingerprint(rotated) == content_fingerprint(narrow)  # a new key re-processes nothing
    assert rotated.option_key(SECTIONERS, sectioner) != narrow.option_key(SECTIONERS, sectioner)
    assert "another-value-10" not in str(rotated.option_key(SECTIONERS, sectioner))


def test_without_options_nothing_changes():
    """Stores built before options existed keep their fingerprint and their runs rows their shape."""
    settings = Settings.from_env(embed_backend="hash")
    assert settings.fingerprint_options() == {} and "options" not in settings.public_dict()
    assert content_fingerprint(settings) == "c52f36c08fc07c4b"  # the fingerprint these settings always had


def test_an_option_means_one_thing(sectioner):
    with pytest.raises(ValueError, match="option 'optest_width' of sectioner 'other' is declared differently"):
        SECTIONERS.add("other", SECTIONERS.get("structure"), options=(Option("optest_width", type=float),))
    assert "other" not in SECTIONERS
    with pytest.raises(ValueError, match="lower-case identifier"):
        Option("Bad-Name")
    with pytest.raises(ValueError, match="type must be str, int, float or bool"):
        Option("listy", type=list)


@pytest.mark.parametrize(
    ("option", "raw", "value"),
    [
        (Option("b", type=bool), "yes", True),
        (Option("b", type=bool), "0", False),
        (Option("b", type=bool), True, True),
        (Option("i", type=int), "42", 42),
        (Option("i", type=int), 7.0, 7),
        (Option("f", type=float, ge=0), "0.5", 0.5),
        (Option("s"), 12, "12"),
    ],
)
def test_values_are_read_as_their_type(option, raw, value):
    assert parse_value(option, raw) == value and type(parse_value(option, raw)) is type(value)


@pytest.mark.parametrize(
    ("option", "raw", "why"),
    [
        (Option("b", type=bool), "maybe", "is not a boolean"),
        (Option("i", type=int), "4.5", "is not a whole number"),
        (Option("i", type=int), 4.5, "is not a whole number"),
        (Option("i", type=int), True, "is not a whole number"),
        (Option("f", type=float, le=1), "2", "is above 1"),
    ],
)
def test_values_that_cannot_be_read_say_why(option, raw, why):
    with pytest.raises(ValueError, match=why):
        parse_value(option, raw)
