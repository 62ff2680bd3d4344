import os

import pytest
from conftest import shared

from quarry.core.errors import UsageError
from quarry.ingest.discover import discover, sha256_file


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "root"
    (root / "docs" / "sub").mkdir(parents=True)
    (root / "docs" / "a.md").write_text("# A\n\nalpha")
    (root / "docs" / "sub" / "b.txt").write_text("beta")
    (root / "docs" / "image.png").write_bytes(b"\x89PNG....")  # read by OCR (and fails there)
    (root / "docs" / "blob.bin").write_bytes(b"\x00\x01")
    (root / ".hidden").mkdir()
    (root / ".hidden" / "secret.md").write_text("no")
    (root / ".dotfile.md").write_text("no")
    (root / "drafts").mkdir()
    (root / "drafts" / "wip.md").write_text("draft")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "leak.md").write_text("outside the root")
    os.symlink(outside, root / "link-out")  # never followed
    os.symlink(root / "docs", root / "docs" / "sub" / "loop")  # a loop: entered once
    os.symlink(root / "docs" / "a.md", root / "alias.md")  # in-root alias of a file: one entry
    return root


def rels(files):
    return sorted(f.rel_path for f in files)


def test_walk_skips_hidden_links_out_and_loops(tree):
    readable, unsupported = discover([tree])
    assert rels(readable) == ["docs/a.md", "docs/image.png", "docs/sub/b.txt", "drafts/wip.md"]
    assert rels(unsupported) == ["docs/blob.bin"]
    a = next(f for f in readable if f.rel_path == "docs/a.md")
    assert a.sha256 == sha256_file(a.path) and a.size == 10 and a.file_type == "md"


def test_include_exclude_and_quarryignore(tree):
    (tree / ".quarryignore").write_text("drafts/\n")
    readable, _ = discover([tree])
    assert rels(readable) == ["docs/a.md", "docs/image.png", "docs/sub/b.txt"]
    readable, _ = discover([tree], include=["*.md"])
    assert rels(readable) == ["docs/a.md"]
    readable, _ = discover([tree], exclude=["docs/sub/*", "*.png"])
    assert rels(readable) == ["docs/a.md"]


def test_single_file_root_and_missing_root(tree, tmp_path):
    readable, _ = discover([tree / "docs" / "a.md"])
    assert rels(readable) == ["a.md"]
    with pytest.raises(UsageError, match="path not found"):
        discover([tmp_path / "nope"])


def test_real_handbook_tree():
    root = shared("trees", "sourcegraph-handbook")
    readable, unsupported = discover([root])
    assert sum(f.rel_path.endswith(".md") for f in readable) == 883
    # Three Markdown files without an extension are found by sniffing; images are read by OCR.
    assert sum(f.file_type == "md" for f in readable) == 886
    assert {f.file_type for f in readable} >= {"md", "image", "json", "txt"}
    assert unsupported and all(f.rel_path.endswith(".svg") for f in unsupported)


def test_the_file_discovery_builds_equals_the_dataclass_it_stands_for(tree):
    """``FileInfo.found`` skips the frozen dataclass's ``__init__``: every field set, equal and
    hashed as ``FileInfo(...)``, and still frozen."""
    import dataclasses

    from quarry.core.models import FileInfo

    args = {
        "path": str(tree / "a.md"),
        "root": str(tree),
        "rel_path": "a.md",
        "file_type": "md",
        "size": 5,
        "mtime": 1.5,
        "sha256": "ab" * 32,
        "vouched": True,
    }
    fast, slow = FileInfo.found(**args), FileInfo(**args)
    assert fast == slow and hash(fast) == hash(slow) and repr(fast) == repr(slow)
    assert set(vars(fast)) == {f.name for f in dataclasses.fields(FileInfo)}
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.size = 6
    found, _ = discover([tree])
    assert all(vars(f).keys() == vars(slow).keys() for f in found)


def test_discovery_pauses_the_collector_and_gives_it_back(tree, monkeypatch):
    # Discovery runs with the cyclic GC off (a record per file, no cycles) and turns it on again
    # afterwards, also when it fails; a caller that turned it off keeps it off.
    import gc

    from quarry.core import gcpause
    from quarry.ingest import plan

    seen = []

    def spy(*args, **kwargs):
        seen.append(gc.isenabled())
        return discover(*args, **kwargs)

    monkeypatch.setattr(plan, "discover", spy)
    assert gc.isenabled()
    found = plan.discover_roots([str(tree)])
    assert seen == [False] and gc.isenabled() and found.files

    def broken(*args, **kwargs):
        raise OSError("gone")

    monkeypatch.setattr(plan, "discover", broken)
    with pytest.raises(OSError):
        plan.discover_roots([str(tree)])
    assert gc.isenabled()

    gc.disable()
    try:
        with gcpause.paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
