"""A new store's private Prefect database starts as a copy of an empty, migrated one from the
cache, which the shipped one of the pinned Prefect version makes (flows/orchestration.py); the
server test that makes and uses one is in test_cli_manners.py."""

from __future__ import annotations

import sqlite3

from quarry.flows import orchestration


def _database(path, rows=()):
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE flow_run (id TEXT)")
    con.executemany("INSERT INTO flow_run VALUES (?)", [(r,) for r in rows])
    con.commit()
    con.close()


def _runs(path) -> list[str]:
    con = sqlite3.connect(path)
    try:
        return [r[0] for r in con.execute("SELECT id FROM flow_run ORDER BY id")]
    finally:
        con.close()


def test_without_a_kept_database_the_server_makes_one_and_it_is_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("QUARRY_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(orchestration, "_shipped", lambda: tmp_path / "none.sql.gz")  # another Prefect version
    database = tmp_path / "store" / "prefect" / "prefect.db"
    database.parent.mkdir(parents=True)
    template = orchestration._seed_database(database)
    assert template is not None and template.parent == tmp_path / "cache" / "prefect"
    assert not database.exists()  # the server creates and migrates it
    _database(database)  # what the server made, before any run
    orchestration._save_template(database, template)
    assert _runs(template) == [] and not list(template.parent.glob(".*.tmp"))


def test_a_new_database_is_a_copy_of_the_kept_one_and_an_old_one_is_left_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("QUARRY_CACHE_DIR", str(tmp_path / "cache"))
    template = orchestration._template()
    template.parent.mkdir(parents=True)
    _database(template)
    new = tmp_path / "new" / "prefect.db"
    new.parent.mkdir()
    (new.parent / "prefect.db-wal").write_bytes(b"a journal left behind")
    assert orchestration._seed_database(new) is None
    assert _runs(new) == [] and not (new.parent / "prefect.db-wal").exists()

    old = tmp_path / "old" / "prefect.db"
    old.parent.mkdir()
    _database(old, ["run-1"])
    assert orchestration._seed_database(old) is None
    assert _runs(old) == ["run-1"]  # its history stays


def test_the_kept_database_is_per_prefect_version(tmp_path, monkeypatch):
    from importlib.metadata import version

    monkeypatch.setenv("QUARRY_CACHE_DIR", str(tmp_path / "cache"))
    assert orchestration._template().name == f"empty-{version('prefect')}.db"


def _revision(path, revision):
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE IF NOT EXISTS alembic_version (version_num TEXT)")
    con.execute("DELETE FROM alembic_version")
    con.execute("INSERT INTO alembic_version VALUES (?)", (revision,))
    con.commit()
    con.close()


def test_only_a_database_at_the_kept_ones_revision_starts_lean(tmp_path, monkeypatch):
    """A server skips migrations and block registration only on a database this Prefect version
    migrated: a copy of the kept one, or a store's own at its revision; never an older one."""
    monkeypatch.setenv("QUARRY_CACHE_DIR", str(tmp_path / "cache"))
    database = tmp_path / "store" / "prefect.db"
    database.parent.mkdir()
    _revision(database, "3c5d9d1a2b7e")
    assert not orchestration._current(database)  # nothing kept to compare with
    template = orchestration._template()
    template.parent.mkdir(parents=True)
    _revision(template, "3c5d9d1a2b7e")
    assert orchestration._current(database)
    _revision(database, "0a1b2c3d4e5f")  # made by an older Prefect: its migrations must run
    assert not orchestration._current(database)
    database.unlink()
    assert not orchestration._current(database)
    copy = tmp_path / "new" / "prefect.db"
    copy.parent.mkdir()
    assert orchestration._seed_database(copy) is None and orchestration._current(copy)


def test_the_pinned_prefect_has_a_shipped_database_at_its_migrations_head():
    """flows/prefect-empty-<version>.sql.gz exists for the installed Prefect and is at the head of
    its SQLite migrations, with the block types a server registers (`make prefect-db` after a
    change of Prefect's version)."""
    import gzip
    from pathlib import Path

    import prefect.server.database
    from alembic.script import ScriptDirectory

    shipped = orchestration._shipped()
    assert shipped.is_file(), f"{shipped.name} is missing: run `make prefect-db`"
    migrations = Path(prefect.server.database.__file__).parent / "_migrations"
    head = ScriptDirectory(
        str(migrations), version_locations=[str(migrations / "versions" / "sqlite")]
    ).get_current_head()
    con = sqlite3.connect(":memory:")
    try:
        con.executescript(gzip.decompress(shipped.read_bytes()).decode("utf-8"))
        assert con.execute("SELECT version_num FROM alembic_version").fetchall() == [(head,)]
        assert con.execute("SELECT count(*) FROM block_type").fetchone()[0] > 0
        assert con.execute("SELECT count(*) FROM flow_run").fetchone()[0] == 0
    finally:
        con.close()


def test_a_users_first_store_starts_from_the_shipped_database(tmp_path, monkeypatch):
    """No kept database yet: it is made from the shipped SQL, not by a server's migrations, and the
    new store's database is a copy at this Prefect's revision (so its server starts lean)."""
    monkeypatch.setenv("QUARRY_CACHE_DIR", str(tmp_path / "cache"))
    database = tmp_path / "store" / "prefect" / "prefect.db"
    database.parent.mkdir(parents=True)
    assert orchestration._seed_database(database) is None
    assert orchestration._template().is_file() and _runs(database) == []
    assert orchestration._current(database)
    assert not list(orchestration._template().parent.glob(".*.tmp"))


def test_a_server_on_a_copy_of_the_kept_database_starts_lean_and_has_the_block_types(tmp_path, monkeypatch):
    """A real private server on a new store's database (a copy from the shipped dump) is started
    without the migration check and block registration, and still serves Prefect's block types."""
    import subprocess

    import httpx

    monkeypatch.setenv("QUARRY_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    envs = []
    real = subprocess.Popen

    def popen(args, **kwargs):
        envs.append(kwargs["env"])
        return real(args, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", popen)
    with orchestration.prefect_api(tmp_path / "logs", database=tmp_path / "store" / "prefect" / "prefect.db") as url:
        types = httpx.post(f"{url}/block_types/filter", json={}, timeout=30).json()
    assert {k: envs[-1].get(k) for k in orchestration.LEAN_START} == orchestration.LEAN_START
    assert "local-file-system" in {t["slug"] for t in types}
