"""The deletion guard: a run never empties an index by accident.

quarry re-indexes trees it does not control, on a schedule. A share that was unmounted for a
minute, a sync job that had not finished, a pattern with a typo, a narrowed ``--include``: each
makes files look deleted, and a run that believed it would delete, in one commit, an index that
took hours to build. The guard stands between the plan and the writer:

- **A root that cannot be seen is that root's failure.** Missing (the path is gone), unreadable
  (its listing failed) or empty (no regular file under it at all): its indexed documents are
  kept as they are, the root is a named failure of the run (exit 3), and the other roots are
  indexed normally. A missing root the store holds nothing from is a usage error (a typo). ``allow_deletes`` lets a missing or empty root delete (the user said so);
  an unreadable one never does: an error is not an absence.
- **Patterns that match nothing refuse the run.** Files exist under an indexed root, but
  ``--include``/``--exclude``/``.quarryignore`` leave none: the whole run stops before it writes.
- **A mass delete refuses the run.** A run that would delete more than ``max_share`` of the
  documents indexed under a root, when that is more than ``free`` documents, stops before it
  writes, naming the count and the root.

A refusal is a ``refused`` run row and :class:`~quarry.core.errors.RunRefused` (exit 4), so a
scheduler marks the run failed; ``allow_deletes`` (``--allow-deletes``,
``QUARRY_ALLOW_DELETES=1``) lets it through. Pure functions: the flow, ``--dry-run`` and the tests
call the same code.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from quarry.core.errors import UsageError
from quarry.core.models import FileError
from quarry.core.paths import display
from quarry.core.plans import CatalogDoc, Plan, scope_test
from quarry.ingest.discover import RootScan

__all__ = ["GuardLimits", "Verdict", "check_roots", "check_deletes", "pattern_flags", "ALLOW_HINT"]

ALLOW_HINT = "if that is intended, run again with --allow-deletes (QUARRY_ALLOW_DELETES=1 for a deployment)"


@dataclass(frozen=True)
class GuardLimits:
    """How much a run may delete without being told it may (Settings ``allow_deletes``,
    ``max_delete_share``, ``free_deletes``)."""

    allow_deletes: bool = False
    max_share: float = 0.5  # of the documents indexed under a root
    free: int = 5  # this many deletes always pass, whatever the share

    @classmethod
    def from_settings(cls, settings) -> GuardLimits:
        return cls(settings.allow_deletes, settings.max_delete_share, settings.free_deletes)


@dataclass
class Verdict:
    """What the guard decided for a run.

    ``scope``: the roots whose vanished documents may be deleted (the plan's scope);
    ``failures``: roots that are this run's named failures (their documents are kept);
    ``refusals``: why the whole run must stop before writing (empty when it may go on).
    """

    scope: list[str] = field(default_factory=list)
    failures: list[FileError] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)
    overridden: list[str] = field(default_factory=list)  # what would have stopped the run without allow_deletes

    @property
    def refused(self) -> bool:
        return bool(self.refusals)

    def message(self) -> str:
        """One line for a refused run: every reason, that nothing changed, and how to allow it."""
        return f"refused: {'; '.join(self.refusals)}. Nothing was changed; {ALLOW_HINT}"

    def to_dict(self) -> dict:
        return {
            "refused": self.refusals,
            "failed_roots": [{"path": display(f.path), "error": f.error} for f in self.failures],
        }


def pattern_flags(include: tuple[str, ...], exclude: tuple[str, ...]) -> tuple[str, ...]:
    """The patterns as the flags that gave them, for messages: ``("--include '*.md'", …)``."""
    return tuple(f"--include '{p}'" for p in include) + tuple(f"--exclude '{p}'" for p in exclude)


def _held(docs: list[CatalogDoc], root: str) -> int:
    scoped = scope_test([root])
    return sum(1 for d in docs if scoped(d.path))


def _documents(n: int) -> str:
    return f"{n} indexed document{'s' if n != 1 else ''}"


def check_roots(
    scans: list[RootScan], docs: list[CatalogDoc], limits: GuardLimits, patterns: tuple[str, ...] = ()
) -> Verdict:
    """Sort the roots of a run by what discovery saw under each (see the module docstring).

    ``docs`` are the committed documents; ``patterns`` the run's ``--include``/``--exclude``
    flags as the user gave them (``--include '*.md'``), named in the messages.
    """
    verdict = Verdict()
    for scan in scans:
        held = _held(docs, scan.root)
        kept = f"; its {_documents(held)} are kept" if held else ""
        if scan.status == "ok":
            verdict.scope.append(scan.root)
        elif scan.status == "missing":
            if not held:  # never indexed: a typo, not a share gone missing
                why = f" ({scan.error})" if scan.error and scan.error != "path not found" else ""
                raise UsageError(f"path not found: {display(scan.root)}{why}")
            if limits.allow_deletes:
                verdict.scope.append(scan.root)
            else:
                what = scan.error if scan.error and scan.error != "path not found" else "path not found"
                verdict.failures.append(FileError(scan.root, f"{what}{kept}"))
        elif scan.status == "unreadable":
            verdict.failures.append(FileError(scan.root, f"{scan.error}{kept}"))
        elif scan.status == "empty":
            if held and limits.allow_deletes:
                verdict.scope.append(scan.root)
            else:
                why = "no files under it (an unmounted share or an unfinished sync looks like this)"
                if held:
                    why += f"{kept}: if it was emptied on purpose, run again with --allow-deletes"
                verdict.failures.append(FileError(scan.root, why))
        elif scan.status == "unmatched":
            which = " ".join(patterns) or "the .quarryignore rules"
            leave = "leaves" if len(patterns) == 1 else "leave"
            seen = f"{scan.walked} file{'s' if scan.walked != 1 else ''}"
            if not held:
                verdict.failures.append(FileError(scan.root, f"{which} {leave} none of the {seen} under it"))
            elif limits.allow_deletes:
                verdict.scope.append(scan.root)
            else:
                verdict.refusals.append(
                    f"{which} {leave} none of the {seen} under {display(scan.root)}: "
                    f"the run would delete its {_documents(held)}"
                )
        else:  # a status this module does not know is a bug, and never a reason to delete
            verdict.failures.append(FileError(scan.root, f"not indexed ({scan.status})"))
    return verdict


def check_deletes(verdict: Verdict, plan: Plan, docs: list[CatalogDoc], limits: GuardLimits) -> Verdict:
    """Add a refusal for each root of ``verdict.scope`` from which ``plan`` would delete more than
    the limits allow. A file emptied to 0 bytes counts as a delete: its document goes."""
    if limits.allow_deletes:
        return verdict
    emptied = [f.path for f, _ in plan.changed if f.size == 0]
    if not plan.removed and not emptied:
        return verdict
    for root in verdict.scope:
        held = _held(docs, root)
        scoped = scope_test([root])
        gone = sum(1 for d in plan.removed if scoped(d.path)) + sum(1 for p in emptied if scoped(p))
        if held and gone > limits.free and gone > limits.max_share * held:
            verdict.refusals.append(
                f"the run would delete {gone} of the {held} documents indexed under {display(root)} "
                f"({100 * gone / held:.0f}%, more than the {100 * limits.max_share:.0f}% allowed)"
            )
    return verdict
