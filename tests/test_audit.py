"""The audit log: a hash chain of entries written once each, on local stores and stores on object
storage; ``audit verify`` catches an edited, a removed and a reordered entry; real runs, key
commands and a real ``quarry api`` record the events an operator needs."""

from __future__ import annotations

import json
import logging
import shutil
import threading
import time

import httpx
import pytest
from apiserver import api_server

from quarry.api.keys import KeyRing, key_store
from quarry.core.errors import RunRefused
from quarry.store.audit import AuditLog, parse_since
from quarry.store.handle import open_store
from quarry.store.maintain import maintain
from quarry.store.rollback import rollback


def _log(tmp_path, where: str) -> AuditLog:
    if where == "local":
        return AuditLog(open_store(tmp_path / "db"))
    return AuditLog(open_store(f"file://{tmp_path}/objects/store"))


def _files(log: AuditLog, tmp_path, where: str):
    """The entry files as they lie: the store folder's, or the objects' under the file:// bucket."""
    folder = (tmp_path / "db" / "audit") if where == "local" else (tmp_path / "objects" / "store" / "audit")
    return sorted(folder.glob("*.json"))


@pytest.mark.parametrize("where", ["local", "object"])
def test_entries_chain_and_verify(tmp_path, where):
    log = _log(tmp_path, where)
    for i in range(4):
        log.append("maintain", {"generation": i}, key="ops" if i == 2 else None)
    entries = log.entries()
    assert [e["seq"] for e in entries] == [1, 2, 3, 4]
    assert entries[0]["prev"] == "0" * 64 and all(b["prev"] == a["hash"] for a, b in zip(entries, entries[1:]))
    assert entries[2]["who"]["key"] == "ops" and {"host", "pid", "user"} <= set(entries[0]["who"])
    result = log.verify()
    assert result.ok and result.entries == 4 and result.last_hash == entries[-1]["hash"]
    assert len(_files(log, tmp_path, where)) == 4  # one object per entry: nothing is ever rewritten


@pytest.mark.parametrize("where", ["local", "object"])
@pytest.mark.parametrize(
    "tamper, expected",
    [
        ("edit", "entry 2 does not match its hash (edited)"),
        ("edit-and-rehash", "entry 3 does not follow entry 2"),
        ("remove", "entry 2 is missing (removed)"),
        ("reorder", "entry 2 holds entry 3 (moved or reordered)"),
        ("renumber", "entry 2 does not follow entry 1"),
    ],
)
def test_verify_finds_an_edited_removed_or_reordered_entry(tmp_path, where, tamper, expected):
    from quarry.store.audit import _digest

    log = _log(tmp_path, where)
    for i in range(4):
        log.append("run.documents_deleted", {"deleted": i + 1})
    files = _files(log, tmp_path, where)
    second, third = json.loads(files[1].read_text()), json.loads(files[2].read_text())
    if tamper == "edit":
        second["details"]["deleted"] = 0
        files[1].write_text(json.dumps(second))
    elif tamper == "edit-and-rehash":  # a forger who recomputes the edited entry's own hash
        second["details"]["deleted"] = 0
        second["hash"] = _digest(second)
        files[1].write_text(json.dumps(second))
    elif tamper == "remove":
        files[1].unlink()
    elif tamper == "reorder":
        files[1].write_text(json.dumps(third))
        files[2].write_text(json.dumps(second))
    elif tamper == "renumber":  # entry 2 removed and the later ones renumbered to close the gap
        for path, nxt in zip(files[1:], files[2:]):
            entry = json.loads(nxt.read_text())
            entry["seq"] -= 1
            entry["hash"] = _digest(entry)
            path.write_text(json.dumps(entry))
        files[-1].unlink()
    result = log.verify()
    assert not result.ok
    assert any(p.startswith(expected) for p in result.problems), result.problems


def test_concurrent_writers_never_share_a_number(tmp_path):
    log = AuditLog(open_store(f"file://{tmp_path}/objects/store"))

    def write(n):
        for i in range(8):
            AuditLog(log.store).append("maintain", {"writer": n, "i": i})

    threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    result = log.verify()
    assert result.ok and result.entries == 32, result.problems


def test_since_and_unknown_events(tmp_path):
    log = AuditLog(open_store(tmp_path / "db"))
    log.append("maintain")
    assert log.entries(parse_since("1h")) and not log.entries(parse_since("2999-01-01"))
    with pytest.raises(ValueError, match="unknown audit event"):
        log.append("coffee")
    with pytest.raises(Exception, match="--since 'yesterday'"):
        parse_since("yesterday")


# --- real runs ---------------------------------------------------------------------------------


def _tree(root, n=12):
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        (root / f"hr-{i:02d}.md" if i < 3 else root / f"note{i:02d}.md").write_text(
            f"# Note {i}\n\nThe heron colony number {i} nests by the reservoir.\n"
        )
    return root


def _events(cli, db) -> list[dict]:
    done = cli("audit", "--db", db, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_runs_keys_and_rollback_are_recorded_and_verify_fails_on_tampering(cli, tmp_path, monkeypatch):
    import quarry

    monkeypatch.setenv("QUARRY_EMBED_BACKEND", "hash")
    tree, db = _tree(tmp_path / "tree"), tmp_path / "db"
    quarry.index([tree], db)
    rules = tmp_path / "acl.yaml"
    rules.write_text(
        '- path: "**/hr-*"\n  principals: ["group:hr", "user:ann"]\n- path: "**"\n  principals: ["public"]\n'
    )
    quarry.index([tree], db, acl_rules=str(rules))  # permissions change: 3 documents, 1 -> 3 principals
    gone = tmp_path / "gone"
    gone.mkdir()
    for i in range(3, 11):  # 8 of 12 documents go: more than the guard lets through
        shutil.move(tree / f"note{i:02d}.md", gone)
    with pytest.raises(RunRefused):
        quarry.index([tree], db)
    quarry.index([tree], db, allow_deletes=True)
    rollback(db)
    maintain(db)
    ring = KeyRing(key_store(open_store(db)), audit=AuditLog(open_store(db)))
    ring.create("alice", ["group:hr"])
    done = cli("keys", "revoke", "alice", "--db", db)
    assert done.returncode == 0, done.stderr

    events = _events(cli, db)
    names = [e["event"] for e in events]
    assert names == [
        "run.permissions_changed",
        "guard.refused",
        "guard.override",
        "run.documents_deleted",
        "rollback",
        "maintain",
        "key.created",
        "key.revoked",
    ]
    acl = events[0]["details"]
    assert acl["documents_changed"] == 3 and acl["before"] == {"documents": 12, "restricted": 0, "principals": 1}
    assert acl["after"] == {"documents": 12, "restricted": 3, "principals": 3}
    assert "would delete 8 of the 12" in events[1]["details"]["reasons"][0]
    assert (
        events[2]["details"]["deleted"] == 8 and "would delete 8 of the 12" in events[2]["details"]["would_refuse"][0]
    )
    assert events[3]["details"]["deleted"] == 8
    assert events[4]["details"]["to_generation"] == 2
    assert events[5]["details"]["generation"] >= 3 and events[5]["details"]["healthy"] is True
    assert events[7]["details"]["key_name"] == "alice" and events[7]["who"]["pid"] != events[6]["who"]["pid"]
    assert all(e["who"]["host"] and e["who"]["pid"] for e in events)
    text = cli("audit", "--db", db)
    assert text.returncode == 0 and "guard.override" in text.stdout and "key.revoked" in text.stdout

    assert cli("audit", "verify", "--db", db).returncode == 0
    entry = db / "audit" / "000000000003.json"
    edited = json.loads(entry.read_text())
    edited["details"]["deleted"] = 1
    entry.write_text(json.dumps(edited))
    done = cli("audit", "verify", "--db", db)
    assert done.returncode == 1 and "entry 3 does not match its hash (edited)" in done.stderr


def test_denied_requests_and_an_expired_key_are_recorded_by_the_api(tmp_path, monkeypatch):
    import quarry

    monkeypatch.setenv("QUARRY_EMBED_BACKEND", "hash")
    tree, db = _tree(tmp_path / "tree", 4), tmp_path / "db"
    quarry.index([tree], db)
    ring = KeyRing(key_store(open_store(db)), audit=AuditLog(open_store(db)))
    reader_key, reader = ring.create("reader", ["group:hr"])
    _, brief = ring.create("brief", [], expires=time.time() + 1.0)
    time.sleep(1.2)
    with api_server(db, log=tmp_path / "api.log", env={"QUARRY_EMBED_BACKEND": "hash"}) as (base, _):
        http = httpx.Client(base_url=base, timeout=30)
        assert http.get("/v1/runs", headers={"Authorization": f"Bearer {reader}"}).status_code == 403
        assert http.get("/v1/status", headers={"Authorization": f"Bearer {brief}"}).status_code == 401
        assert http.post("/v1/search", json={"query": "heron"}).status_code == 401
        forged = f"qk_{reader_key.id}_" + "y" * 43  # reader's id without reader's secret: blames nobody
        assert http.get("/v1/chunks/x", headers={"Authorization": f"Bearer {forged}"}).status_code == 401
        secret = reader.split("_", 2)[2]
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:  # entries are written after the answer
            events = AuditLog(open_store(db)).entries()
            if len([e for e in events if e["event"] in ("access.denied", "key.expired")]) >= 5:
                break
            time.sleep(0.2)
    denied = {
        (e["who"].get("key"), e["details"]["route"], e["details"]["status"])
        for e in events
        if e["event"] == "access.denied"
    }
    assert denied == {
        ("reader", "/v1/runs", 403),
        ("brief", "/v1/status", 401),
        ("none", "/v1/search", 401),
        ("unknown", "/v1/chunks/{chunk_id}", 401),
    }
    assert [
        e["details"].get("claimed_key")
        for e in events
        if e["event"] == "access.denied" and e["who"].get("key") == "unknown"
    ] == ["reader"]
    assert [e["details"]["key_name"] for e in events if e["event"] == "key.expired"] == ["brief"]
    assert all(e["who"]["client"] == "127.0.0.1" for e in events if e["event"] == "access.denied")
    raw = "".join(p.read_text() for p in (db / "audit").glob("*.json"))
    assert secret not in raw and reader not in raw
    assert AuditLog(open_store(db)).verify().ok


def test_an_expired_key_is_recorded_once(tmp_path):
    store = open_store(tmp_path / "db")
    ring = KeyRing(key_store(store), audit=AuditLog(store))
    ring.create("brief", [], expires=time.time() + 0.5)
    ring.create("lasting", [])
    assert ring.note_expired() == []
    time.sleep(0.6)
    assert [k.name for k in ring.note_expired()] == ["brief"]
    assert ring.note_expired() == []  # already in the log
    assert [e["event"] for e in AuditLog(store).entries()] == ["key.created", "key.created", "key.expired"]


def test_a_failing_audit_write_never_fails_the_key_command(tmp_path, caplog):
    store = open_store(tmp_path / "db")
    (tmp_path / "db").mkdir(exist_ok=True)
    (tmp_path / "db" / "audit").write_text("not a folder")  # every append fails (NotADirectoryError)
    ring = KeyRing(key_store(store), audit=AuditLog(store))
    with caplog.at_level(logging.WARNING, logger="quarry.audit"):
        key, token = ring.create("ops", [])
        assert token.startswith(f"qk_{key.id}_") and ring.list()[0].name == "ops"
        assert [k.name for k in ring.revoke("ops")] == ["ops"]
        ring.create("ops", [])  # the revoked name is free again
    assert sum("could not write the audit entry" in r.getMessage() for r in caplog.records) == 3


def test_note_expired_skips_a_damaged_entry_and_records_a_key_once_across_workers(tmp_path, monkeypatch, caplog):
    store = open_store(tmp_path / "db")
    ring = KeyRing(key_store(store), audit=AuditLog(store))
    ring.create("brief", [], expires=time.time() + 0.3)
    ring.create("lasting", [])
    (tmp_path / "db" / "audit" / "000000000001.json").write_text("{damaged")
    time.sleep(0.4)
    with caplog.at_level(logging.WARNING, logger="quarry.audit"):
        assert [k.name for k in ring.note_expired()] == ["brief"]
    assert any("cannot be read" in r.getMessage() for r in caplog.records)
    # a second worker that read the log before the first wrote: still one entry
    other = KeyRing(key_store(store), audit=AuditLog(store))
    monkeypatch.setattr(AuditLog, "entries", lambda self, since=None, tolerant=False: [])
    assert other.note_expired() == []
    names = sorted(p.name for p in (tmp_path / "db" / "audit").glob("0*.json"))
    assert names == ["000000000001.json", "000000000002.json", "000000000003.json"]
