"""API keys: salted hashes only, the token shown once, bearer checks, revocation and expiry, keys kept
with the store (a file, or an object next to CURRENT on object storage), rate limits."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import threading
import time
from datetime import UTC, datetime

import pytest

from quarry.api.auth import ANONYMOUS, Authenticator, KeyRateLimiter
from quarry.api.errors import ApiError
from quarry.api.keys import FileKeys, KeyRing, ObjectKeys, key_store, parse_expiry
from quarry.core.errors import UsageError


@pytest.fixture
def ring(tmp_path):
    return KeyRing(FileKeys(tmp_path / "store" / "keys.json"))


def test_only_a_salted_hash_is_stored_and_the_token_checks(ring, tmp_path):
    key, token = ring.create("hr-app", ["group:hr"])
    assert token.startswith(f"qk_{key.id}_") and len(token) == 3 + 12 + 1 + 43
    raw = (tmp_path / "store" / "keys.json").read_text()
    secret = token[len(f"qk_{key.id}_") :]
    assert token not in raw and secret not in raw
    assert hashlib.sha256(secret.encode()).hexdigest() not in raw  # salted: not the bare hash either
    assert stat.S_IMODE(os.stat(tmp_path / "store" / "keys.json").st_mode) == 0o600
    ring.refresh()
    assert ring.verify(token).name == "hr-app"
    assert ring.verify(token).principals == ["group:hr"]


@pytest.mark.parametrize("bad", ["", "qk_", "not-a-key", "Bearer x", "qk_000000000000_" + "A" * 43])
def test_tokens_that_are_not_a_key(ring, bad):
    ring.create("a")
    ring.refresh()
    assert ring.verify(bad) is None


def test_a_wrong_secret_for_a_real_id_fails(ring):
    key, token = ring.create("a")
    ring.refresh()
    wrong = token[:-1] + ("A" if token[-1] != "A" else "B")
    assert ring.verify(wrong) is None


def test_revoked_and_expired_keys_are_refused(ring):
    _, revoked = ring.create("old")
    _, expiring = ring.create("soon", expires=time.time() + 0.3)
    _, fine = ring.create("fine")
    ring.revoke("old")
    time.sleep(0.4)
    ring.refresh()
    assert ring.verify(revoked) is None and ring.verify(expiring) is None and ring.verify(fine) is not None
    assert {k.name: k.status() for k in ring.list()} == {"old": "revoked", "soon": "expired", "fine": "active"}
    assert ring.required


def test_a_store_that_had_keys_stays_closed_when_the_last_is_revoked(ring):
    ring.refresh()
    assert not ring.required
    ring.create("only")
    ring.revoke("only")
    ring.refresh()
    assert ring.required and not [k for k in ring.list() if k.status() == "active"]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"name": "bad name"}, "key name"),
        ({"name": "x", "principals": ["alice"]}, "not a principal"),
        ({"name": "x", "principals": ["group:a"], "admin": True}, "not both"),
        ({"name": "x", "rate_limit": -1}, "rate-limit"),
    ],
)
def test_bad_keys_are_refused(ring, kwargs, message):
    with pytest.raises(UsageError, match=message):
        ring.create(**kwargs)


def test_names_are_unique_among_active_keys(ring):
    ring.create("app")
    with pytest.raises(UsageError, match="exists"):
        ring.create("app")
    ring.revoke("app")
    ring.create("app")  # a revoked key's name may be used again
    with pytest.raises(UsageError, match="no active key"):
        ring.revoke("nope")


def test_expiry_forms():
    now = 1_800_000_000.0
    assert parse_expiry("30d", now) == now + 30 * 86400
    assert parse_expiry("12h", now) == now + 12 * 3600
    assert parse_expiry("2w", now) == now + 14 * 86400
    assert parse_expiry("2027-01-31", now) == datetime(2027, 2, 1, tzinfo=UTC).timestamp()  # the whole day
    assert parse_expiry(None, now) is None
    for bad in ("soon", "0d", "2020-01-01"):
        with pytest.raises(UsageError):
            parse_expiry(bad, now)


def test_creates_in_parallel_lose_no_key(ring):
    threads = [threading.Thread(target=ring.create, args=(f"k{i}",)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(k.name for k in ring.list()) == sorted(f"k{i}" for i in range(12))


def test_a_store_on_object_storage_keeps_its_keys_next_to_current(tmp_path, monkeypatch):
    monkeypatch.setenv("QUARRY_STORE_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("QUARRY_KEYS_FILE", raising=False)
    from quarry.core.settings import store_path

    store = store_path(f"file://{tmp_path}/bucket/prefix")
    where = key_store(store)
    assert isinstance(where, ObjectKeys)
    ring = KeyRing(where)
    threads = [threading.Thread(target=ring.create, args=(f"k{i}",)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    body = json.loads((tmp_path / "bucket" / "prefix" / "keys.json").read_text())
    assert sorted(k["name"] for k in body["keys"]) == sorted(f"k{i}" for i in range(8))  # conditional puts
    _, token = ring.create("reader", ["group:x"])
    other = KeyRing(key_store(store))  # another server of the same store
    other.refresh()
    assert other.verify(token).principals == ["group:x"]
    monkeypatch.setenv("QUARRY_KEYS_FILE", str(tmp_path / "elsewhere.json"))
    assert isinstance(key_store(store), FileKeys)


def test_a_damaged_key_file_is_named(tmp_path):
    path = tmp_path / "keys.json"
    path.write_text("{not json")
    with pytest.raises(Exception, match="damaged"):
        KeyRing(FileKeys(path)).list()


# --- the bearer check and rate limits ------------------------------------------------------------


def test_the_authenticator_matrix(ring):
    auth = Authenticator(ring, rate_limit=1000)
    assert auth.caller(None) is ANONYMOUS  # a store without keys: anonymous, public documents only
    _, admin = ring.create("ops", admin=True)
    _, hr = ring.create("hr", ["group:hr"])
    _, plain = ring.create("plain")
    assert auth.caller(f"Bearer {admin}").principals is None and auth.caller(f"Bearer {admin}").admin
    assert auth.caller(f"Bearer {hr}").principals == ("group:hr", "public")
    assert auth.caller(f"bearer {plain}").principals == ("public",)
    for header in (None, "", "Basic abc", f"Token {hr}", "Bearer", "Bearer qk_nope"):
        with pytest.raises(ApiError) as err:
            auth.caller(header)
        assert err.value.status == 401
        assert hr not in err.value.message


def test_rate_limits_answer_429_with_retry_after(ring):
    auth = Authenticator(ring, rate_limit=1000)
    _, token = ring.create("slow", rate_limit=3)
    _, free = ring.create("free", rate_limit=0)
    for _ in range(3):
        auth.caller(f"Bearer {token}")
    with pytest.raises(ApiError) as err:
        auth.caller(f"Bearer {token}")
    assert err.value.status == 429 and int(err.value.headers["Retry-After"]) >= 1
    for _ in range(50):
        auth.caller(f"Bearer {free}")


def test_a_bucket_refills_at_its_rate_and_splits_over_workers():
    limiter = KeyRateLimiter(share=2)
    assert [limiter.wait("k", 120, now=0.0) for _ in range(60)] == [0.0] * 60  # 60 a minute in this worker
    assert limiter.wait("k", 120, now=0.0) == pytest.approx(1.0)
    assert limiter.wait("k", 120, now=1.0) == 0.0


def test_the_cli_shows_a_token_once_and_never_lists_it(tmp_path, cli):
    db = tmp_path / "db"
    db.mkdir()
    out = cli("keys", "create", "hr-app", "--principal", "group:hr", "--expires", "30d", "--db", db, "--json")
    assert out.returncode == 0, out.stderr
    created = json.loads(out.stdout)
    assert created["name"] == "hr-app" and created["token"].startswith("qk_") and created["principals"] == ["group:hr"]
    listed = cli("keys", "list", "--db", db, "--json")
    assert created["token"] not in listed.stdout and created["token"].split("_")[-1] not in listed.stdout
    assert json.loads(listed.stdout)[0]["status"] == "active" and "hash" not in json.loads(listed.stdout)[0]
    assert cli("keys", "create", "hr-app", "--db", db).returncode == 2
    out = cli("keys", "revoke", "hr-app", "--db", db)
    assert out.returncode == 0 and "revoked hr-app" in out.stdout
    table = cli("keys", "list", "--db", db).stdout.splitlines()
    assert table[0].split() == ["NAME", "ID", "STATUS", "READS", "AS", "EXPIRES", "RATE"]
    assert table[1].split()[0] == "hr-app" and table[1].split()[2] == "revoked"
    out = cli("keys", "create", "x", "--admin", "--principal", "group:a", "--db", db)
    assert out.returncode == 2 and "not both" in out.stderr
