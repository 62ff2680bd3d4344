"""The batch pipeline: tasks exchange plain data, batches overlap within a bound, and every task
runner builds the same store.

Real flows on real files with the hash embedder; the Dask and process-pool runs start real
worker processes (slow-marked).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
import pkgutil
import shutil
import threading
import zipfile

import cloudpickle
import numpy as np
import pytest
from conftest import SAMPLE, shared
from prefect import Task
from quarry.flows.runners import plan_runner

import quarry
from quarry.core.settings import RUNNERS, Settings


@pytest.fixture
def tree(tmp_path):
    dest = tmp_path / "tree"
    shutil.copytree(SAMPLE, dest)
    return dest


def all_tasks() -> dict[str, Task]:
    """Every Prefect task quarry defines, by name (a new task is covered without editing this test)."""
    import quarry.tasks

    found = {}
    for info in pkgutil.iter_modules(quarry.tasks.__path__):
        module = importlib.import_module(f"quarry.tasks.{info.name}")
        found.update({obj.name: obj for obj in vars(module).values() if isinstance(obj, Task)})
    return found


def same(a, b) -> bool:
    """Deep equality that understands numpy arrays and dataclasses."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        return type(a) is type(b) and all(same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def test_every_task_takes_and_returns_plain_picklable_data(tree, tmp_path, run_flow, monkeypatch):
    """Issue 16.5: what a Dask or Ray worker would receive and send back survives cloudpickle, for
    every task of quarry.tasks (the index flow's, then the maintenance flow's)."""
    seen: dict[str, list] = {}
    lock = threading.Lock()
    for name, task in all_tasks().items():

        def spy(*args, _fn=task.fn, _name=name, **kwargs):
            result = _fn(*args, **kwargs)
            arguments = dict(inspect.signature(_fn).bind(*args, **kwargs).arguments)
            with lock:
                seen.setdefault(_name, []).append((arguments, result))
            return result

        monkeypatch.setattr(task, "fn", functools.wraps(task.fn)(spy))

    db = tmp_path / "db"
    first = run_flow([tree], db)
    assert first["added"] == 5
    deploys = tree / "runbooks" / "deploys.md"
    deploys.write_text(deploys.read_text() + "\nA new paragraph about quokka rollbacks.\n")
    (tree / "handbook" / "code-review.rst").rename(tree / "handbook" / "reviews.rst")
    import quarry
    from quarry.eval.sets import generate_set

    with quarry.open(db) as idx:  # a question set, so that the edit run's evaluation task runs too
        generate_set(idx, 5, "known-item", seed=0, name="pipe")
    second = run_flow([tree], db, evaluate={"sets": ["pipe"], "margin": 1.0})
    assert (second["updated"], second["moved"]) == (1, 1)
    from quarry.flows.maintain import maintain_flow

    assert maintain_flow(db=str(db))["check"]["healthy"]  # the other flow's tasks, on the same store

    assert set(seen) == set(all_tasks()), f"tasks that never ran: {set(all_tasks()) - set(seen)}"
    for name, calls in seen.items():
        for call in calls:
            back = cloudpickle.loads(cloudpickle.dumps(call))
            assert same(back, call), f"{name}: arguments or result change through cloudpickle"
    # only texts without a stored vector travel to the embedder: the edit run sends its one new chunk
    arguments, done = seen["embed"][-1]
    assert second["embedded_chunks"] == len(arguments["texts"]) == 1 < second["chunks"]
    assert "quokka" in arguments["texts"][0] and done.vectors.shape == (1, 64) and done.vectors.dtype == np.float32
    # the writer never travels: load and commit name the run, and find its writer in the flow's process
    assert all(set(args) == {"run_id", "records", "vectors"} for args, _ in seen["load"])


def test_batches_overlap_within_the_in_flight_bound(tree, tmp_path, run_flow, monkeypatch):
    """One file per batch, two batches in flight: the next batch is processing while one embeds or
    loads, and never more than two are between submission and load."""
    import quarry.flows.runners as runners
    from quarry.tasks.load import load_batch
    from quarry.tasks.process import process_batch

    monkeypatch.setattr(runners, "FILES_PER_BATCH", 1)
    state = {"now": 0, "max": 0}
    lock = threading.Lock()

    def started(*args, _fn=process_batch.fn, **kwargs):
        with lock:
            state["now"] += 1
            state["max"] = max(state["max"], state["now"])
        return _fn(*args, **kwargs)

    def loaded(*args, _fn=load_batch.fn, **kwargs):
        result = _fn(*args, **kwargs)
        with lock:
            state["now"] -= 1
        return result

    monkeypatch.setattr(process_batch, "fn", functools.wraps(process_batch.fn)(started))
    monkeypatch.setattr(load_batch, "fn", functools.wraps(load_batch.fn)(loaded))
    report = run_flow([tree], tmp_path / "db")
    assert report["added"] == 5 and state["now"] == 0
    assert state["max"] == plan_runner(Settings.from_env()).in_flight == 2


def test_runner_plans():
    threads = plan_runner(Settings.from_env(runner="threads"))
    assert (threads.workers, threads.in_flight, threads.files_per_batch) == (1, 2, 64)
    dask = plan_runner(Settings.from_env(runner="dask", workers=2))
    # every runner cuts the same batches; each worker parses in its thread and embeds on its share of the CPUs
    assert (dask.workers, dask.in_flight, dask.files_per_batch, dask.parse_workers) == (2, 4, 64, 1)
    assert dask.embed_threads >= 1
    remote = plan_runner(Settings.from_env(runner="dask", dask_address="tcp://10.0.0.5:8786", workers=8))
    assert remote.embed_threads == 0 and remote.in_flight == 16  # a remote worker uses its own CPUs


def test_an_unknown_runner_is_refused():
    from quarry.core.errors import ConfigError

    with pytest.raises(
        ConfigError, match="runner='spark' is not a known runner; choose one of threads, processes, dask, ray"
    ):
        Settings.from_env(runner="spark")
    assert RUNNERS == ("threads", "processes", "dask", "ray")


def test_every_stage_is_timed_and_counted(tree, tmp_path, run_flow):
    report = run_flow([tree], tmp_path / "db")
    d = report["durations"]
    assert list(d) == ["discover", "plan", "parse", "section", "context", "chunk", "embed", "load", "commit", "total"]
    assert d["parse"]["rows"] == 5 and d["chunk"]["rows"] == report["chunks"] == d["load"]["rows"]
    assert d["embed"]["rows"] == report["embedded_chunks"] and d["plan"]["rows"] == 5
    assert all(v["seconds"] >= 0 for v in d.values()) and d["total"]["seconds"] >= d["commit"]["seconds"] > 0
    assert d["parse"]["rows_per_s"] == pytest.approx(5 / d["parse"]["seconds"], rel=0.01)
    # wall time is the union of a stage's spans: never more than their sum, nor than the run
    assert all(
        d[s]["seconds"] <= d[s]["busy_seconds"] + 1e-6 and d[s]["seconds"] <= d["total"]["seconds"]
        for s in d
        if s != "total"
    )
    assert report["runner"] == "threads"


def test_a_stage_s_wall_time_is_the_union_of_its_spans():
    from quarry.core.models import StageClock

    clock = StageClock()
    clock.add("embed", 2.0, 10, start=100.0)  # two batches side by side for one second...
    clock.add("embed", 2.0, 10, start=101.0)
    clock.merge({"embed": [(110.0, 111.0)], "parse": [(99.0, 100.5)]}, {"embed": 5, "parse": 3})  # ...then one alone
    d = clock.as_dict()
    assert d["embed"] == {"seconds": 4.0, "busy_seconds": 5.0, "rows": 25, "rows_per_s": 6.2}
    assert list(d) == ["parse", "embed"] and d["parse"]["seconds"] == 1.5


def _contents(db):
    """Documents, chunks and vectors of a store, independent of run ids and timestamps."""
    with quarry.open(db) as idx:
        con = idx.snapshot.con
        docs = sorted(con.execute("SELECT rel_path, sha256, title, n_chunks FROM documents").fetchall())
        chunks = sorted(
            con.execute(
                "SELECT d.rel_path, c.chunk_index, c.header, c.text, c.text_hash "
                "FROM chunks c JOIN documents d USING (doc_id)"
            ).fetchall()
        )
        table = idx.snapshot.table.to_arrow()
        vectors = dict(
            zip(table.column("chunk_id").to_pylist(), np.array(table.column("vector").to_pylist(), dtype=np.float32))
        )
        # BM25's ranking: the same texts give the same scores. (Hybrid's is not compared:
        # vectors equal to 1e-6, not bit for bit, since a worker embeds other batches, can swap two
        # chunks at the vector candidates' cut, and a fused score moves by the one that left.)
        hits = [
            (r.path.rsplit("/", 1)[-1], r.chunk_id.split(":")[-1], round(r.score, 6))
            for q in ("deploy rollback", "expense policy", "code review approval")
            for r in idx.search(q, k=10, mode="bm25").results
        ]
        runner = idx.runs(1)[0]["runner"]
    return docs, chunks, vectors, hits, runner


@pytest.mark.slow
@pytest.mark.parametrize("runner", ["dask", "processes", "ray"])
def test_a_distributed_runner_builds_the_store_a_threads_run_builds(runner, tmp_path, run_flow, monkeypatch):
    """Issue 17: real worker processes (a Dask LocalCluster of 2, a process pool of 2, or a local
    Ray with 2 CPUs) parse and embed; the flow's process loads and commits; the store equals the
    default runner's. Ray is the optional extra quarry[ray]: skipped where it is not installed."""
    if runner == "ray":
        pytest.importorskip("prefect_ray", reason="needs quarry[ray] (prefect-ray, ray)")
    # the hash embedder, whatever an earlier test left: a real model's int8 vectors depend on which
    # chunks share a batch, and the runners batch differently
    monkeypatch.setenv("QUARRY_EMBED_BACKEND", "hash")
    tree = tmp_path / "tree"
    shutil.copytree(SAMPLE, tree)
    shutil.copy(shared("pdf", "levels_of_agi.pdf"), tree / "agi.pdf")  # a heavy format: the parse pool in a worker
    with zipfile.ZipFile(tree / "bundle.zip", "w") as zf:  # members travel as paths; each worker reads the archive
        zf.write(shared("formats", "docx-tables.docx"), "docs/tables.docx")
        zf.write(shared("formats", "fake-email.eml"), "mail/fake-email.eml")
    threads = run_flow([tree], tmp_path / "threads")
    monkeypatch.setattr("quarry.flows.runners.FILES_PER_BATCH", 2)  # three batches: both workers get some
    other = run_flow([tree], tmp_path / runner, overrides={"runner": runner, "workers": 2})
    assert other["runner"] == runner and other["failed"] == threads["failed"] == 0
    assert (other["added"], other["chunks"]) == (threads["added"], threads["chunks"])
    a_docs, a_chunks, a_vectors, a_hits, a_runner = _contents(tmp_path / "threads")
    b_docs, b_chunks, b_vectors, b_hits, b_runner = _contents(tmp_path / runner)
    assert (a_docs, a_chunks, a_hits) == (b_docs, b_chunks, b_hits)
    assert a_vectors.keys() == b_vectors.keys()
    for chunk_id, vec in a_vectors.items():
        np.testing.assert_allclose(b_vectors[chunk_id], vec, atol=1e-6)
    assert (a_runner, b_runner) == ("threads", runner)
    assert {"bundle.zip!/docs/tables.docx", "bundle.zip!/mail/fake-email.eml"} <= {d[0] for d in b_docs}
    # a re-run with nothing to do starts no workers and embeds nothing
    again = run_flow([tree], tmp_path / runner, overrides={"runner": runner, "workers": 2})
    assert again["embedded_chunks"] == 0 and again["skipped"] == threads["added"]
