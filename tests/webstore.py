"""A store for the web page tests: data/sample, a two-page PDF, and one restricted document.

``build(work)`` indexes a copy of ``data/sample`` plus ``reports/quarterly.pdf`` (two pages, written
here) and ``hr/salaries.md`` (readable by ``group:hr`` only, under an ACL rules file), runs a
second index after the PDF changed to unreadable bytes (so the runs page has two timed runs and
the document view a failure to show), and makes three keys: ``admin``, ``hr`` and ``outsider``
(``group:eng``: every public document, never the restricted one).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from quarry.api.keys import FileKeys, KeyRing

ROOT = Path(__file__).resolve().parents[1]
SECRET_WORD = "zanzibar"  # only in the restricted document
SECRET_TITLE = "Salary Bands Zanzibar"
SECRET_LINES = ("Band E3 starts at 70,000", "committee meets in March", "Support bands")  # its text, nowhere else
RULES = """\
- path: "hr/**"
  principals: ["group:hr"]
- path: "**"
  principals: ["public"]
"""
SALARIES = f"""# {SECRET_TITLE}

## Engineering bands

The {SECRET_WORD} pay review sets the engineering salary bands for the deploy and rollback on-call rota.
Band E3 starts at 70,000 and band E4 at 85,000; the {SECRET_WORD} committee meets in March.

## Support bands

Support salary bands follow the {SECRET_WORD} survey; on-call allowances are paid per deploy weekend.
"""


def tiny_pdf(pages: list[str]) -> bytes:
    """A PDF whose pages hold these lines of text (Helvetica), with a valid cross-reference table."""
    objects = ["<< /Type /Catalog /Pages 2 0 R >>", None, "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    kids = []
    for text in pages:
        lines = "".join(f"({line.replace('(', '').replace(')', '')}) Tj T* " for line in text.splitlines())
        stream = f"BT /F1 11 Tf 14 TL 60 740 Td {lines}ET"
        objects.append(f"<< /Length {len(stream)} >>\nstream\n{stream}\nendstream")
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {len(objects)} 0 R "
            "/Resources << /Font << /F1 3 0 R >> >> >>"
        )
        kids.append(f"{len(objects)} 0 R")
    objects[1] = f"<< /Type /Pages /Kids [{' '.join(kids)}] /Count {len(kids)} >>"
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n{body}\nendobj\n".encode("latin-1")
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += "".join(f"{o:010d} 00000 n \n" for o in offsets).encode()
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return bytes(out)


REPORT_PAGES = [
    "Quarterly deploy report\nDeploy frequency rose to 41 releases this quarter.\nRollback rate stayed under two percent.",
    "Second page: incident review\nThe March incident needed a rollback of the payments deploy.\nLessons are in the postmortem.",
]


@dataclass
class WebStore:
    db: Path
    tree: Path
    tokens: dict[str, str]
    secret_path: Path


def build(work: Path, extra: list[Path] = ()) -> WebStore:
    """Index the tree (in this process: the session's Prefect API must be up) and make the keys."""
    from quarry.flows.index import index_flow

    tree = work / "tree"
    shutil.copytree(ROOT / "data" / "sample", tree)
    (tree / "reports").mkdir()
    (tree / "reports" / "quarterly.pdf").write_bytes(tiny_pdf(REPORT_PAGES))
    (tree / "hr").mkdir()
    secret = tree / "hr" / "salaries.md"
    secret.write_text(SALARIES, encoding="utf-8")
    for path in extra:
        shutil.copy(path, tree / "reports" / path.name)
    (work / "acl.yaml").write_text(RULES)
    db = work / "db"
    index_flow([str(tree)], db=str(db), overrides={"acl_rules": str(work / "acl.yaml")})
    # a second run that cannot read the changed PDF: the stored version stays, the run names the failure
    (tree / "reports" / "quarterly.pdf").write_bytes(b"%PDF-1.4 damaged")
    (tree / "runbooks" / "deploys.md").write_text((tree / "runbooks" / "deploys.md").read_text() + "\nOne more line.\n")
    index_flow([str(tree)], db=str(db))
    ring = KeyRing(FileKeys(db / "keys.json"))
    tokens = {
        "admin": ring.create("admin", admin=True)[1],
        "hr": ring.create("hr", principals=["group:hr"])[1],
        "outsider": ring.create("outsider", principals=["group:eng"])[1],
    }
    return WebStore(db=db, tree=tree, tokens=tokens, secret_path=secret)
