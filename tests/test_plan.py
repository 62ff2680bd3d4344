from quarry.core.models import FileInfo
from quarry.core.plans import CatalogDoc
from quarry.ingest.plan import make_plan, new_doc_id


def f(path, sha, mtime=1.0):
    return FileInfo(path=path, root="/r", rel_path=path[3:], file_type="md", size=1, mtime=mtime, sha256=sha)


def test_plan_sorts_every_case():
    catalog = [
        CatalogDoc("d-same", "/r/same.md", "s1", 1.0),
        CatalogDoc("d-touched", "/r/touched.md", "s2", 1.0),
        CatalogDoc("d-edit", "/r/edit.md", "s3", 1.0),
        CatalogDoc("d-move", "/r/old-name.md", "s4", 1.0),
        CatalogDoc("d-gone", "/r/gone.md", "s5", 1.0),
        CatalogDoc("d-other", "/elsewhere/x.md", "s6", 1.0),  # outside the roots: untouched
    ]
    files = [
        f("/r/same.md", "s1"),
        f("/r/touched.md", "s2", 9.0),
        f("/r/edit.md", "s3-new"),
        f("/r/new-name.md", "s4"),
        f("/r/brand-new.md", "s7"),
    ]
    plan = make_plan(files, catalog, ["/r"])
    assert [d for _, d in plan.unchanged] == ["d-same", "d-touched"]
    assert [d for _, d in plan.touched] == ["d-touched"]
    assert [d for _, d in plan.changed] == ["d-edit"]
    assert [(x.path, d, old) for x, d, old in plan.moved] == [("/r/new-name.md", "d-move", "/r/old-name.md")]
    assert [d.doc_id for d in plan.removed] == ["d-gone"]
    assert [(x.path, d) for x, d in plan.new] == [("/r/brand-new.md", new_doc_id(files[-1]))]


def test_rebuild_turns_everything_into_changes_but_keeps_ids():
    catalog = [CatalogDoc("d1", "/r/a.md", "s1", 1.0), CatalogDoc("d2", "/r/old.md", "s2", 1.0)]
    plan = make_plan([f("/r/a.md", "s1"), f("/r/new.md", "s2")], catalog, ["/r"], rebuild=True)
    assert sorted(d for _, d in plan.changed) == ["d1", "d2"]
    assert not plan.unchanged and not plan.moved and not plan.removed


def test_root_prefix_is_not_a_directory_prefix():
    # /r2/x.md is not under /r even though the strings share a prefix.
    plan = make_plan([], [CatalogDoc("d", "/r2/x.md", "s", 1.0)], ["/r"])
    assert plan.removed == []


def test_duplicate_content_moves_one_and_adds_the_other():
    catalog = [CatalogDoc("d1", "/r/a.md", "s", 1.0)]
    plan = make_plan([f("/r/b.md", "s"), f("/r/c.md", "s")], catalog, ["/r"])
    assert len(plan.moved) == 1 and len(plan.new) == 1 and not plan.removed


def test_a_reparsed_format_turns_its_documents_into_changes_moves_included():
    catalog = [
        CatalogDoc("d1", "/r/a.md", "s1", 1.0),
        CatalogDoc("d2", "/r/old.md", "s2", 1.0),
        CatalogDoc("d3", "/r/c.txt", "s3", 1.0),
    ]
    text = FileInfo(path="/r/c.txt", root="/r", rel_path="c.txt", file_type="txt", size=1, mtime=1.0, sha256="s3")
    plan = make_plan([f("/r/a.md", "s1"), f("/r/new.md", "s2"), text], catalog, ["/r"], reparse={"md"})
    assert sorted(d for _, d in plan.changed) == ["d1", "d2"]
    assert [d for _, d in plan.unchanged] == ["d3"] and not plan.moved
    assert make_plan([text], catalog[2:], ["/r"], reparse={"pdf"}).unchanged == [(text, "d3")]


def test_scope_is_a_root_itself_a_folder_under_it_or_an_archive_member():
    from quarry.core.plans import scope_test

    roots = ["/r/docs", "/r/one.md", "/r/bundle.zip", "/s/"]
    inside = ["/r/docs", "/r/docs/a.md", "/r/one.md", "/r/bundle.zip", "/r/bundle.zip!/x/y.md", "/s/z.txt"]
    outside = ["/r/docs2/a.md", "/r/one.md.bak", "/r/bundle.zipx", "/r/doc", "/t/a.md", "/r/one.md/x"]
    test = scope_test(roots)
    assert all(test(p) for p in inside)
    assert not any(test(p) for p in outside[:-1])
    assert test("/r/one.md/x")  # a root given as a file still scopes what lies under its name
