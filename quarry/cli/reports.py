"""Rendering for people: what every command but `quarry search` prints (search: output.py)."""

from __future__ import annotations

import json

import click

from quarry.core.paths import printable

SHOWN_UNSUPPORTED = 5  # unsupported files named in a run's summary (all of them are in the run row)
RUNS_LEGEND = "+added ~updated >moved -deleted =unchanged ?unsupported !failed"


def echo_json(value) -> None:
    click.echo(json.dumps(value, indent=2, default=str, ensure_ascii=False))


def print_index_report(report: dict) -> None:
    """The summary of an index run (or of a dry run) on stdout; failures on stderr."""
    if report.get("dry_run"):
        _print_dry_run(report)
        return
    click.echo(
        f"indexed: {report['added']} added, {report['updated']} updated, {report['moved']} moved, "
        f"{report['deleted']} deleted, {report['skipped']} unchanged or empty, "
        f"{report['unsupported']} unsupported, {report['failed']} failed"
    )
    click.echo(
        f"chunks: {report['chunks']} written, {report['embedded_chunks']} embedded in {report['model_calls']} "
        f"model calls, {report['reused_vectors']} vectors reused"
        + (f", {report['truncated']} truncated" if report.get("truncated") else "")
    )
    if report.get("ocr_pages"):
        click.echo(f"ocr: {report['ocr_pages']} pages in {report['ocr_seconds']:.1f} s")
    if report.get("llm_calls") or report.get("llm_cached") or report.get("llm_fallback_windows"):
        click.echo(
            f"llm: {report['llm_calls']} calls, {report['llm_cached']} answers from cache, "
            f"{report['llm_prompt_tokens']} prompt + {report['llm_completion_tokens']} completion tokens"
        )
    for fb in report.get("llm_fallback_windows") or []:
        where = f" window {fb['window']}" if fb.get("window") is not None else ""
        click.echo(f"llm fallback: {fb['path']} {fb['kind']}{where}: {fb['error']}", err=True)
    if report.get("permissions_updated"):
        n = report["permissions_updated"]
        click.echo(f"permissions: {n} document{'' if n == 1 else 's'} changed who may read them (none re-parsed)")
    if report.get("rebuild"):
        click.echo(f"rebuilt: {report['rebuild']}")
    _print_unsupported(report.get("unsupported", 0), report.get("unsupported_files") or [])
    for err in report["errors"]:
        click.echo(f"failed: {printable(err['path'])}: {err['error']}", err=True)


def _print_unsupported(count: int, files: list[dict]) -> None:
    """The count of files quarry does not read, the first few by name and why."""
    if not count:
        return
    where = " (all of them in `quarry runs --json`)" if count > SHOWN_UNSUPPORTED else ""
    click.echo(
        f"unsupported: {count} file{'s' if count != 1 else ''} quarry does not read{where}; "
        "`quarry formats` lists what it reads"
    )
    for f in files[:SHOWN_UNSUPPORTED]:
        click.echo(f"  {printable(f['path'])}: {f['reason']}")
    if count > SHOWN_UNSUPPORTED:
        click.echo(f"  … and {count - SHOWN_UNSUPPORTED} more")


def _print_dry_run(report: dict) -> None:
    plan = report["plan"]
    click.echo(
        f"dry run: would add {plan['new']}, update {plan['changed']}, move {plan['moved']}, "
        f"delete {plan['removed']}; {plan['unchanged']} unchanged, {report['unsupported']} unsupported"
        + (f"; new permissions for {report['permissions']}" if report.get("permissions") else "")
    )
    guard = report.get("guard") or {}
    for reason in guard.get("refused") or []:
        click.echo(f"guard: the run would be refused: {reason} (--allow-deletes lets it through)")
    for failure in guard.get("failed_roots") or []:
        click.echo(f"guard: root {printable(failure['path'])} would fail, its documents kept: {failure['error']}")
    for verb, items in report["files"].items():
        for item in items:
            click.echo(
                f"  {verb}: {' -> '.join(map(printable, item)) if isinstance(item, (list, tuple)) else printable(item)}"
            )
    _print_unsupported(report.get("unsupported", 0), report.get("unsupported_files") or [])


def _stages_line(durations: dict) -> str:
    """``discover 0.05s · parse 1.20s 740/s · … · total 3.10s`` (older runs: seconds only)."""
    parts = []
    for stage, d in (durations or {}).items():
        if isinstance(d, dict):
            rate = f" {d['rows_per_s']:.0f}/s" if d.get("rows_per_s") else ""
            parts.append(f"{stage} {d['seconds']:.2f}s{rate}")
        elif isinstance(d, (int, float)):
            parts.append(f"{stage} {d:.2f}s")
    return " · ".join(parts)


def print_runs(items: list[dict]) -> None:
    """``quarry runs``: one line per run (counts, embedding, the runner), the stages under it."""
    if not items:
        click.echo("no runs recorded")
        return
    click.echo(f"counts: {RUNS_LEGEND}")
    for r in items:
        if r["status"] in ("skipped", "refused", "rollback"):
            reason = r.get("message") or (r["errors"] or [{}])[0].get("error", "")
            click.echo(f"{r['run_id']}  {r['status']:<9} {reason}")
            continue
        click.echo(
            f"{r['run_id']}  {r['status']:<9} +{r['added']} ~{r['updated']} >{r['moved']} -{r['deleted']} "
            f"={r['skipped']} ?{r['unsupported']} !{r['failed']}  embedded {r['embedded_chunks']}, "
            f"reused {r['reused_vectors']}"
            + (
                f"; llm {r['llm_calls']} calls, {r['llm_cached']} cached, {len(r['llm_fallback_windows'])} fallbacks"
                if r["llm_calls"] or r["llm_cached"] or r["llm_fallback_windows"]
                else ""
            )
            + (f"; ocr {r['ocr_pages']} pages in {r['ocr_seconds']:.0f} s" if r["ocr_pages"] else "")
            + (f"; permissions of {r['permissions_updated']}" if r.get("permissions_updated") else "")
            + (f"  [{r['runner']}]" if r["runner"] else "")
        )
        stages = _stages_line(r["durations"])
        if stages:
            click.echo(f"    {stages}")
        for err in (r.get("errors") or [])[:3]:
            click.echo(f"    failed: {printable(err.get('path') or '')}: {err.get('error')}")
        if len(r.get("errors") or []) > 3:
            click.echo(f"    … {len(r['errors']) - 3} more failures (`quarry runs --json`)")


def print_generations(items: list[dict]) -> None:
    """``quarry rollback --list``: the kept generations, newest first."""
    for g in items:
        mark = "current" if g["current"] else ("restorable" if g["restorable"] else "not restorable")
        counts = f"{g['documents']} documents, {g['chunks']} chunks" if g["documents"] is not None else ""
        last = f", last run {g['last_run']} ({g.get('last_status')})" if g.get("last_run") else ""
        why = f": {g['why_not']}" if not g["current"] and not g["restorable"] and g.get("why_not") else ""
        click.echo(f"generation {g['generation']:<6} {mark:<15} {counts}{last}{why}")


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bytes):
        return value.hex()
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)


def print_sql(result, fmt: str, width: int = 60) -> None:
    """A :class:`~quarry.search.sql.SqlResult` as an aligned table (cells cut at ``width``
    characters), JSON, JSON Lines or CSV (whole values)."""
    if fmt == "json":
        echo_json(result.records())
        return
    if fmt == "jsonl":
        for record in result.records():
            click.echo(json.dumps(record, default=str, ensure_ascii=False))
        return
    if fmt == "csv":
        import csv
        import io

        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(result.columns)
        for row in result.rows:
            writer.writerow([_cell(v) for v in row])
            if buf.tell() > 1 << 16:
                click.echo(buf.getvalue(), nl=False)
                buf.seek(0)
                buf.truncate()
        click.echo(buf.getvalue(), nl=False)
        return
    if not result.columns:
        click.echo("(no result)")
        return
    cells = [[printable(_cell(v)).replace("\n", " ")[:width] for v in row] for row in result.rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(result.columns)]
    click.echo("  ".join(c.ljust(w) for c, w in zip(result.columns, widths)).rstrip())
    click.echo("  ".join("-" * w for w in widths))
    for row in cells:
        click.echo("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip())
    click.echo(f"({len(result.rows)} row{'s' if len(result.rows) != 1 else ''})")


def print_status(info: dict) -> None:
    """``quarry status``."""
    click.echo(f"store:     {info['store']} (generation {info['generation']})")
    click.echo(f"documents: {info['documents']}  sections: {info['sections']}  chunks: {info['chunks']}")
    click.echo(f"model:     {info['model']} ({info['dim']}-d)")
    index = info.get("search_index") or {}
    if len(index.get("segments") or []) > 1:
        click.echo(
            f"index:     {len(index['segments'])} segments (catalog layers), {index['deleted_rows']} rows "
            "replaced since the oldest: `quarry maintain` merges them"
        )
    full_text = info.get("full_text") or {}
    if full_text:
        click.echo(f"full text: {full_text['state']} (DuckDB's match_bm25 in quarry sql)")
    embedder = info.get("embedder") or {}
    if embedder.get("variant"):
        check = embedder.get("self_check") or {}
        detail = f", self-check cosine min {check['cosine_min']:.4f} vs fp32" if check else ""
        click.echo(f"embedder:  {embedder['backend']}, {embedder['variant']} model{detail} ({embedder['path']})")
    elif embedder:
        built = "" if embedder.get("path") is None else " (model not built yet)"
        click.echo(f"embedder:  {embedder['backend']}{built}")
    last = info["last_run"]
    if last:
        click.echo(
            f"last run:  {last['run_id']} {last['status']} at {last['finished']}: {last['added']} added, "
            f"{last['updated']} updated, {last['deleted']} deleted, {last['failed']} failed"
        )
    print_evals(info.get("last_evals") or [])


def print_evals(items: list[dict]) -> None:
    """The newest evaluation of each question set and mode (``quarry status``, ``quarry runs``)."""
    for e in items:
        k = e.get("k")
        click.echo(
            f"eval:      {e.get('set_name')} {e.get('mode')} on generation {e.get('generation')}: "
            f"recall@{k} {e.get('recall') or 0:.3f}, mrr@{k} {e.get('mrr') or 0:.3f} "
            f"({e.get('questions')} questions, {e.get('created')})"
            + (f"  FLAGGED: {e['flagged']}" if e.get("flagged") else "")
        )


def print_formats(rows: list[dict], engine: str | None) -> None:
    """``quarry formats``."""
    for r in rows:
        found = ", ".join(f"{name} at {where}" for name, where in r["programs"].items() if where)
        state = ("ok" + (f": {found}" if found else "")) if r["readable"] else "missing " + ", ".join(r["missing"])
        plugin = f"  (plugin {r['plugin']})" if r.get("plugin") else ""
        click.echo(f"{r['type']:<7} {' '.join(r['extensions'])[:48]:<48}  {r['library']}  [{state}]{plugin}")
        click.echo(f"{'':<7} {r['structure']}")
        if r["install"]:
            click.echo(f"{'':<7} to read these: {r['install']}")
    click.echo(
        f"OCR engine: {engine or 'none (pip install rapidocr-onnxruntime, or install tesseract)'}; "
        "other extensions are sniffed by content"
    )


def print_plugins(out: dict) -> None:
    """``quarry plugins``: each extension point's names, a plugin's marked; failures on stderr."""
    for kind, item in out.items():
        names = ", ".join(c["name"] + (f" [{c['plugin']}]" if c["plugin"] else "") for c in item["components"])
        click.echo(f"{kind:<16} {names}")
        for c in item["components"]:  # the settings a component declared, by the variable that sets each
            for o in c.get("options", ()):
                flags = ", ".join(f for f, on in (("required", o["required"]), ("secret", o["secret"])) if on)
                detail = "; ".join(x for x in (flags, o["help"]) if x)
                click.echo(f"{'':<16}   {c['name']}: {o['variable']}" + (f" ({detail})" if detail else ""))
        for error in item["errors"]:
            click.echo(f"{'':<16} failed: {error}", err=True)


def print_doctor(report, repair: bool) -> None:
    """``quarry doctor``: a line per check; what to do next, on stderr, when something is wrong."""
    for f in report.findings:
        mark = "ok" if f.ok else ("repaired" if f.repaired else "PROBLEM")
        click.echo(f"{mark:<9} {f.check}: {f.detail}" + (f" -> {f.repair}" if not f.ok else ""))
    if not report.healthy:
        if report.repairable and not repair:
            click.echo("run `quarry doctor --repair` to fix what is repairable", err=True)
        elif not report.repairable:
            click.echo("not repairable by quarry: see above for how to recover", err=True)


def print_maintain(report: dict) -> None:
    """``quarry maintain``."""
    if report["status"] == "skipped":
        click.echo(f"skipped: {report['reason']}")
        return
    c = report["compaction"]
    click.echo(f"store:       {report['store']} (generation {report['generation']})")
    click.echo(
        f"compaction:  {c['fragments_before']} -> {c['fragments_after']} fragments, "
        f"{c['versions_before']} -> {c['versions_after']} LanceDB versions"
    )
    click.echo(f"indices:     {len(report['indices'])}, rebuilt {sum(i['rebuilt'] for i in report['indices'])}")
    m = report["merge"]
    click.echo(
        f"layers:      {m['layers_before']} -> {1 if m['merged'] else m['layers_before']} catalog layers "
        f"and index segments" + (f" (merged as generation {m['generation']})" if m["merged"] else "")
    )
    click.echo(f"removed:     {len(report['removed'])} old generation files")
    ft = report.get("full_text") or {}
    build = ft.get("build") or {}
    if ft.get("built") and build:
        click.echo(
            f"full text:   built for match_bm25 in {build['seconds']:.1f} s ({build['cpu_seconds']:.1f} s CPU, "
            f"peak {build['peak_rss_mb']} MB)"
        )
    elif ft:
        click.echo(f"full text:   {ft['state']}" + (f" ({ft['error']})" if ft.get("error") else ""))
    click.echo(f"check:       {'healthy' if report['check']['healthy'] else 'PROBLEMS: run quarry doctor'}")


def print_eval(result: dict) -> None:
    """``quarry eval``: a line per mode."""
    click.echo(f"{result['dataset']} ({result['split']}, {result['queries']} queries)")
    click.echo(f"{'mode':<8} {'nDCG@10':>8} {'R@10':>8} {'R@100':>8} {'MRR@10':>8}")
    for mode, m in result["modes"].items():
        click.echo(f"{mode:<8} {m['ndcg@10']:>8.4f} {m['recall@10']:>8.4f} {m['recall@100']:>8.4f} {m['mrr@10']:>8.4f}")


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def print_corpus_report(r: dict) -> None:
    """``quarry corpus report`` as text: totals, then one small table per signal."""
    click.echo(f"generation {r['generation']}: {r['documents']} documents, {r['chunks']} chunks, {_size(r['bytes'])}")
    if r["documents_without_signals"]:
        click.echo(f"  {r['documents_without_signals']} documents indexed before corpus signals (quarry index --full)")
    click.echo(
        f"\nduplicates: {r['copies']} copies in {r['clusters']} clusters, {_size(r['bytes_saved'])} saved "
        "by keeping one of each"
    )
    for d in r["duplicates"][:20]:
        click.echo(
            f"  {d['copies']:>6} of {d['documents']:>6} documents  {_size(d['bytes_saved']):>9}  "
            f"{printable(d['root'])} : {printable(d['folder'])}"
        )
    click.echo("\nlanguages (chunks, documents):")
    for lang in r["languages"][:15]:
        click.echo(f"  {lang['lang']:<4} {lang['chunks']:>8} {lang['documents']:>8}")
    click.echo(
        f"\npersonal data and secrets: {r['chunks_with_pii']} chunks hold some (counts; values are never stored)"
    )
    for p in r["pii"]:
        click.echo(f"  {p['kind']:<12} {p['total']:>7} in {p['chunks']} chunks")
    click.echo("\nboilerplate (lines repeated across a root's documents):")
    for b in r["boilerplate"]:
        click.echo(
            f"  {printable(b['root'])}: {b['boilerplate_lines']} lines, {b['line_share']:.1%} of line "
            f"occurrences, {b['boilerplate_chunks']} chunks mostly boilerplate"
        )
