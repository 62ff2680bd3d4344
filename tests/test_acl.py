"""Document permissions: rules files, POSIX modes, the run that applies them without re-parsing or
re-embedding, the sources a root remembers, and the permission filter on the library's calls."""

from __future__ import annotations

import os

import pytest

import quarry
from quarry.core.errors import NotFound, UsageError
from quarry.core.models import FileInfo
from quarry.core.plans import AclSource
from quarry.core.principals import caller, check, normalise
from quarry.ingest.acl import PosixPermissions, load_rules, principals_for, requested
from quarry.search.filters import Filter

RULES = """\
- path: "hr/**"
  principals: ["group:hr"]
- path: "eng/**"
  principals: ["group:eng", "group:hr"]
- path: "*.secret"
  principals: []
- path: "**"
  principals: ["public"]
"""


def write_tree(root):
    files = {
        "hr/salary.md": "# Salaries\n\nThe okapi team salary table for 2026: confidential pay bands.\n",
        "hr/deep/reviews.md": "# Reviews\n\nOkapi performance reviews, salary adjustments.\n",
        "eng/okapi.md": "# Build\n\nThe okapi build system compiles the salary calculator service.\n",
        "news/okapi.md": "# News\n\nThe okapi mascot won the company salary-day quiz.\n",
        "news/plan.secret": "okapi salary secret plan\n",
    }
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def info(root, rel) -> FileInfo:
    path = root / rel
    return FileInfo(path=str(path), root=str(root), rel_path=rel, file_type="md", size=1, mtime=0.0, sha256="")


# --- principals and rules ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value", ["public", "user:alice", "group:finance", "role:x.y", "user:alice@example.com", " group:hr "]
)
def test_principals_that_read(value):
    assert check(value) == value.strip()


@pytest.mark.parametrize(
    "value", ["", "alice", "user:", ":alice", "User:alice", "group:a,b", "user:a\nb", "g:" + "x" * 300, 7]
)
def test_principals_that_do_not(value):
    with pytest.raises(UsageError, match="principal"):
        check(value)


def test_a_caller_always_reads_public():
    assert caller(["group:hr", "group:hr"]) == ("group:hr", "public")
    assert caller(None) == ("public",)
    assert normalise("group:b, group:a") == ("group:a", "group:b")


def test_rules_first_match_wins_with_gitignore_globs(tmp_path):
    (tmp_path / "acl.yaml").write_text(RULES)
    rules = load_rules(tmp_path / "acl.yaml")
    assert rules.principals("hr/salary.md") == ("group:hr",)
    assert rules.principals("hr/deep/reviews.md") == ("group:hr",)
    assert rules.principals("eng/okapi.md") == ("group:eng", "group:hr")
    assert rules.principals("news/plan.secret") == ()  # an explicit "no one"
    assert rules.principals("news/deep/x.secret") == ()  # *.secret at any depth
    assert rules.principals("hrx/other.md") == ("public",)  # hr/** is not a prefix match


def test_a_file_no_rule_matches_is_read_by_no_one(tmp_path):
    (tmp_path / "acl.yaml").write_text('- path: "public/**"\n  principals: [public]\n')
    assert load_rules(tmp_path / "acl.yaml").principals("private/x.md") == ()


def test_url_globs_match_the_whole_path(tmp_path):
    (tmp_path / "acl.yaml").write_text(
        '- path: "s3://bucket/hr/*"\n  principals: [group:hr]\n- path: "**"\n  principals: [public]\n'
    )
    rules = load_rules(tmp_path / "acl.yaml")
    assert rules.principals("hr/a.md", "s3://bucket/hr/a.md") == ("group:hr",)
    assert rules.principals("eng/a.md", "s3://bucket/eng/a.md") == ("public",)


@pytest.mark.parametrize(
    "text, message",
    [
        ("{path: x}", "expected a list"),
        ("- path: x\n", "principals missing"),
        ("- path: 'a/**'\n  principals: [alice]\n", "rule 1: 'alice' is not a principal"),
        ("- path: '!a'\n  principals: []\n", "negated globs"),
        ("- path: a\n  principals: []\n  who: x\n", "unknown key 'who'"),
        ("- [a, b]\n", "expected {path"),
        ("- path: ''\n  principals: []\n", "path must be a glob"),
        ("- path: a\n  principals: {a: 1}\n", "principals must be a list"),
        ("- path: [unclosed\n", "not valid YAML at line"),
    ],
)
def test_bad_rules_files_name_the_file_and_the_rule(tmp_path, text, message):
    path = tmp_path / "acl.yaml"
    path.write_text(text)
    with pytest.raises(UsageError, match=message) as err:
        load_rules(path)
    assert str(path) in str(err.value)


def test_the_flags_ask_for_a_source():
    assert requested(None, None) is None
    assert requested("posix", None) == AclSource("posix")
    with pytest.raises(UsageError, match="needs --acl-rules"):
        requested("rules", None)
    with pytest.raises(UsageError, match="not found"):
        requested(None, "/nonexistent/acl.yaml")
    with pytest.raises(UsageError, match="disagree"):
        requested("posix", "/nonexistent/acl.yaml")


# --- POSIX ----------------------------------------------------------------------------------------


def test_posix_world_readable_in_open_folders_is_public(tmp_path):
    root = write_tree(tmp_path / "t")
    for path in [root, *root.rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    assert PosixPermissions().principals(info(root, "hr/salary.md")) == ("public",)


def test_posix_a_private_folder_hides_its_world_readable_files(tmp_path):
    """Files of umask 022 are 0644; the folder is what keeps them private."""
    root = write_tree(tmp_path / "t")
    os.chmod(root / "hr", 0o750)
    os.chmod(root / "hr" / "salary.md", 0o644)
    got = PosixPermissions().principals(info(root, "hr/salary.md"))
    st = os.stat(root / "hr")
    from quarry.ingest.acl import _group, _user

    assert "public" not in got
    assert set(got) == {_user(st.st_uid), _group(st.st_gid)}


def test_posix_owner_only_and_group_bits(tmp_path):
    root = write_tree(tmp_path / "t")
    target = root / "news" / "okapi.md"
    from quarry.ingest.acl import _group, _user

    st = os.stat(target)
    os.chmod(target, 0o600)
    assert PosixPermissions().principals(info(root, "news/okapi.md")) == (_user(st.st_uid),)
    os.chmod(target, 0o640)
    assert set(PosixPermissions().principals(info(root, "news/okapi.md"))) == {_user(st.st_uid), _group(st.st_gid)}
    os.chmod(target, 0o000)
    assert PosixPermissions().principals(info(root, "news/okapi.md")) == ()


def test_principals_for_uses_each_roots_source(tmp_path):
    root = write_tree(tmp_path / "t")
    (tmp_path / "acl.yaml").write_text(RULES)
    files = [info(root, "hr/salary.md"), info(root, "news/okapi.md")]
    got = principals_for(files, {str(root): AclSource("rules", str(tmp_path / "acl.yaml"))})
    assert got == {str(root / "hr/salary.md"): ("group:hr",), str(root / "news/okapi.md"): ("public",)}
    assert set(principals_for(files, {}).values()) == {("public",)}


# --- the flow -------------------------------------------------------------------------------------


@pytest.fixture
def tree(tmp_path):
    root = write_tree(tmp_path / "tree")
    (tmp_path / "acl.yaml").write_text(RULES)
    return root


def readable(db, principals, query="okapi salary", **kwargs) -> set[str]:
    with quarry.open(db) as idx:
        return {
            os.path.relpath(r.path, idx.store.parent / "tree")
            for r in idx.search(query, k=20, principals=principals, **kwargs).results
        }


def test_a_run_with_rules_sets_who_reads_each_document(tree, tmp_path, run_flow):
    db = tmp_path / "db"
    report = run_flow([tree], db, overrides={"acl_rules": str(tmp_path / "acl.yaml")})
    assert report["added"] == 5 and report["permissions_updated"] == 0  # new documents are not "updates"
    assert readable(db, ["group:eng"]) == {"eng/okapi.md", "news/okapi.md"}
    assert readable(db, ["group:hr"]) == {"hr/salary.md", "hr/deep/reviews.md", "eng/okapi.md", "news/okapi.md"}
    assert readable(db, []) == {"news/okapi.md"}
    assert readable(db, None) == {
        "hr/salary.md",
        "hr/deep/reviews.md",
        "eng/okapi.md",
        "news/okapi.md",
        "news/plan.secret",
    }  # the owner (no principals) reads everything


def test_changed_rules_update_principals_without_parsing_or_embedding(tree, tmp_path, run_flow):
    db = tmp_path / "db"
    run_flow([tree], db, overrides={"acl_rules": str(tmp_path / "acl.yaml")})
    (tmp_path / "acl.yaml").write_text(RULES.replace('["group:eng", "group:hr"]', '["group:eng"]'))
    report = run_flow([tree], db)  # no flags: the root remembers its rules file, re-read now
    assert (report["added"], report["updated"], report["chunks"], report["embedded_chunks"], report["model_calls"]) == (
        0,
        0,
        0,
        0,
        0,
    )
    assert not {"parse", "chunk", "embed"} & set(report["durations"])  # nothing parsed, nothing embedded
    assert report["permissions_updated"] == 1
    assert "eng/okapi.md" not in readable(db, ["group:hr"])
    assert readable(db, ["group:eng"]) == {"eng/okapi.md", "news/okapi.md"}
    again = run_flow([tree], db)  # nothing changed: nothing written
    assert again["permissions_updated"] == 0


def test_edited_and_moved_documents_keep_their_principals(tree, tmp_path, run_flow):
    """A run hands the writer only the principals that change and those of the documents it writes
    again: an edited restricted file (its row rewritten) and a moved one stay readable by exactly
    their principals, and the untouched ones too."""
    db = tmp_path / "db"
    run_flow([tree], db, overrides={"acl_rules": str(tmp_path / "acl.yaml")})
    salary = tree / "hr" / "salary.md"
    salary.write_text(salary.read_text() + "Okapi bonus bands were added in March.\n")
    (tree / "hr" / "deep" / "reviews.md").rename(tree / "hr" / "reviews.md")
    report = run_flow([tree], db)
    assert (report["updated"], report["moved"]) == (1, 1)
    assert readable(db, ["group:hr"]) == {"hr/salary.md", "hr/reviews.md", "eng/okapi.md", "news/okapi.md"}
    assert readable(db, ["group:eng"]) == {"eng/okapi.md", "news/okapi.md"}
    assert readable(db, []) == {"news/okapi.md"}


def test_chmod_under_posix_takes_effect_at_the_next_run(tree, tmp_path, run_flow):
    db = tmp_path / "db"
    for path in [tree, *tree.rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    run_flow([tree], db, overrides={"acl": "posix"})
    assert "hr/salary.md" in readable(db, [])
    os.chmod(tree / "hr", 0o750)
    report = run_flow([tree], db)
    assert report["permissions_updated"] == 2 and report["embedded_chunks"] == 0
    assert "hr/salary.md" not in readable(db, [])
    gid = os.stat(tree / "hr").st_gid
    from quarry.ingest.acl import _group

    assert "hr/salary.md" in readable(db, [_group(gid)])


def test_acl_none_makes_every_document_public_again(tree, tmp_path, run_flow):
    db = tmp_path / "db"
    run_flow([tree], db, overrides={"acl_rules": str(tmp_path / "acl.yaml")})
    report = run_flow([tree], db, overrides={"acl": "none"})
    assert report["permissions_updated"] == 4
    assert len(readable(db, [])) == 5


def test_a_missing_rules_file_stops_the_run_before_anything_changes(tree, tmp_path, run_flow):
    db = tmp_path / "db"
    run_flow([tree], db, overrides={"acl_rules": str(tmp_path / "acl.yaml")})
    (tmp_path / "acl.yaml").unlink()
    (tree / "news" / "new.md").write_text("okapi salary news")
    with pytest.raises(UsageError, match="acl.yaml of .* is missing"):
        run_flow([tree], db)
    assert readable(db, ["group:eng"]) == {"eng/okapi.md", "news/okapi.md"}


def test_the_cli_indexes_with_rules_and_searches_as_a_principal(tree, tmp_path, cli):
    db = tmp_path / "db"
    out = cli("index", tree, "--db", db, "--acl-rules", tmp_path / "acl.yaml")
    assert out.returncode == 0, out.stderr
    import json

    out = cli("search", "okapi salary", "--db", db, "--as", "group:eng", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert {os.path.basename(os.path.dirname(r["path"])) for r in data["results"]} == {"eng", "news"}
    assert data["generation"] == 1 and "readable by group:eng, public" in data["filter"]
    out = cli("export", tmp_path / "out", "--db", db, "--as", "group:eng", "--format", "jsonl")
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in (tmp_path / "out" / "documents.jsonl").read_text().splitlines()]
    assert sorted(r["rel_path"] for r in rows) == ["eng/okapi.md", "news/okapi.md"]
    assert all(r["principals"] for r in rows)
    out = cli("search", "okapi", "--db", db, "--as", "Alice")
    assert out.returncode == 2 and "is not a principal" in out.stderr


# --- the library's calls --------------------------------------------------------------------------


def test_document_and_chunk_views_answer_not_found_for_what_a_caller_may_not_read(tree, tmp_path, run_flow):
    db = tmp_path / "db"
    run_flow([tree], db, overrides={"acl_rules": str(tmp_path / "acl.yaml")})
    with quarry.open(db) as idx:
        hit = next(r for r in idx.search("salary table", k=10).results if r.path.endswith("hr/salary.md"))
        doc = idx.document(hit.doc_id, principals=["group:hr"])
        assert doc["path"].endswith("hr/salary.md") and doc["chunks"][0]["chunk_id"] == hit.chunk_id
        assert "principals" not in doc  # who else may read it is not a reader's business
        assert idx.document(hit.doc_id)["principals"] == ["group:hr"]
        for call in (
            lambda: idx.document(hit.doc_id, principals=["group:eng"]),
            lambda: idx.chunk(hit.chunk_id, principals=["group:eng"]),
            lambda: idx.document("0" * 20, principals=["group:hr"]),
        ):
            with pytest.raises(NotFound):
                call()
        assert idx.chunk(hit.chunk_id, neighbours=1, principals=["group:hr"])["window"]["chunk_ids"] == [hit.chunk_id]
        assert idx.status(principals=["group:eng"])["documents"] == 2
        assert "store" not in idx.status(principals=["group:eng"])
        assert idx.status()["documents"] == 5
    with quarry.open(db, principals=["group:eng"]) as idx:  # a restricted handle: every call as group:eng
        assert {r.path.rsplit("/", 2)[-2] for r in idx.search("okapi salary", k=10).results} == {"eng", "news"}
        assert {
            r.path.rsplit("/", 2)[-2] for r in idx.search("okapi salary", k=10, principals=["group:hr"]).results
        } == {"eng", "news"}  # a call never widens its handle
        with pytest.raises(NotFound):
            idx.document(hit.doc_id)


def test_a_catalog_from_before_principals_reads_as_all_public(tree, tmp_path, run_flow):
    """A store committed by an older quarry has no principals column: every document is public."""
    import duckdb

    from quarry.store.pointer import read_pointer

    db = tmp_path / "db"
    run_flow([tree], db, overrides={"acl_rules": str(tmp_path / "acl.yaml")})
    path = db / read_pointer(db).catalog
    con = duckdb.connect(str(path))
    con.execute("ALTER TABLE documents DROP COLUMN principals")
    con.close()
    assert len(readable(db, ["group:nobody"])) == 5
    with quarry.open(db) as idx:
        assert idx.status(principals=[])["documents"] == 5


def test_the_permission_clause_is_sql_with_a_bound_parameter():
    f = Filter.readable_by(["group:hr"]) & Filter.build(file_type="pdf")
    sql, params = f.sql()
    assert sql == "(list_has_any(d.principals, string_split(?, chr(10)))) AND (d.file_type = ?)"
    assert params == ["group:hr\npublic", "pdf"]
    assert f.restricted and not f.without_permissions().restricted
    assert str(f.without_permissions()) == "file_type = 'pdf'"
    with pytest.raises(UsageError):  # a newline would split one principal into two in the parameter
        Filter.readable_by(["group:hr\ngroup:admin"])
    hostile = Filter.readable_by(["group:hr'); DROP TABLE documents; --"])
    assert hostile.sql()[0] == "(list_has_any(d.principals, string_split(?, chr(10))))"  # the text is a value


def test_posix_reads_an_archive_member_as_its_archive(tmp_path):
    root = write_tree(tmp_path / "t")
    (root / "hr" / "pack.zip").write_bytes(b"PK")
    member = FileInfo(
        path=str(root / "hr" / "pack.zip") + "!/inner/doc.md",
        root=str(root),
        rel_path="hr/pack.zip!/inner/doc.md",
        file_type="md",
        size=1,
        mtime=0.0,
        sha256="",
    )
    for path in [root, root / "hr"]:
        os.chmod(path, 0o755)
    os.chmod(root / "hr" / "pack.zip", 0o644)
    assert PosixPermissions().principals(member) == ("public",)
    os.chmod(root / "hr", 0o700)
    assert "public" not in PosixPermissions().principals(member)


def test_new_principals_in_a_catalog_layer_survive_a_merge(tree, tmp_path, run_flow):
    """On a layered store a permission change writes the changed documents rows into the commit's
    layer (chunks stay in the base) and the roots' sources ride along; ``quarry maintain`` merges
    both into one catalog."""
    from quarry.store import maintain
    from quarry.store.layout import read_pointer

    db = tmp_path / "db"
    run_flow([tree], db, overrides={"acl_rules": str(tmp_path / "acl.yaml")})
    (tmp_path / "acl.yaml").write_text(RULES.replace('["group:eng", "group:hr"]', '["group:eng"]'))
    report = run_flow([tree], db)
    assert report["permissions_updated"] == 1 and report["embedded_chunks"] == 0
    assert len(read_pointer(db).layers) == 2  # a delta layer over the base
    with quarry.open(db) as idx:
        assert idx.status()["search_index"]["segments"][1]["rows"] == 0  # no chunk rewritten
    after = {p: readable(db, list(p)) for p in (("group:hr",), ("group:eng",), ())}
    assert "eng/okapi.md" not in readable(db, ["group:hr"])
    assert run_flow([tree], db)["permissions_updated"] == 0  # the layer remembers the root's rules file
    assert maintain.maintain(db)["merge"]["merged"]
    assert len(read_pointer(db).layers) == 1
    assert {p: readable(db, list(p)) for p in (("group:hr",), ("group:eng",), ())} == after
    assert run_flow([tree], db)["permissions_updated"] == 0  # and so does the merged base


def test_stored_principals_list_only_what_is_not_public_and_answer_for_every_path():
    """The catalog's principals as a run compares them: every path answers, public ones included,
    NULL (not decided) stays None, and a catalog without the column reads as all public."""
    import duckdb

    from quarry.store.acl import stored

    con = duckdb.connect()
    con.execute("CREATE TABLE documents (path VARCHAR, principals VARCHAR[])")
    con.execute(
        "INSERT INTO documents VALUES ('/r/a.md', ['public']), ('/r/b.md', ['group:hr', 'user:ann']), "
        "('/r/c.md', NULL), ('/r/d.md', []), ('/r/e.md', ['public', 'group:hr'])"
    )
    got = stored(con)
    assert dict(got) == {
        "/r/a.md": ("public",),
        "/r/b.md": ("group:hr", "user:ann"),
        "/r/c.md": None,
        "/r/d.md": (),
        "/r/e.md": ("public", "group:hr"),
    }
    assert "/r/a.md" in got and "/r/z.md" not in got and len(got) == 5
    with pytest.raises(KeyError):
        got["/r/z.md"]
    con.execute("ALTER TABLE documents DROP COLUMN principals")
    assert dict(stored(con)) == dict.fromkeys(("/r/a.md", "/r/b.md", "/r/c.md", "/r/d.md", "/r/e.md"), ("public",))
