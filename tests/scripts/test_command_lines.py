"""scripts/ holds command lines only: each parses its arguments and calls the code that does
the work (experiments/simulation/, workers/bench/, or a stack harness it runs), without
reaching for sys.path, setting Django up at import or importing another script; and each one
still answers --help, so that a renamed option or module cannot leave it broken unnoticed."""

import ast
import runpy
import sys
from pathlib import Path

import pytest

SCRIPTS = sorted(p for p in (Path(__file__).resolve().parents[2] / "scripts").glob("*.py") if p.stem != "__init__")


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda path: path.stem)
def test_each_command_line_answers_help(path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", [str(path), "--help"])
    with pytest.raises(SystemExit) as exited:
        runpy.run_path(str(path), run_name="__main__")
    assert exited.value.code == 0
    assert capsys.readouterr().out.startswith("usage: ")


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda path: path.stem)
def test_a_command_line_neither_sets_the_path_nor_django_up_at_import_nor_imports_a_script(path):
    source = path.read_text()
    tree = ast.parse(source)
    assert "sys.path" not in source
    at_import = [node.value for node in tree.body if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)]
    assert "django.setup" not in [ast.unparse(call.func) for call in at_import]
    modules = [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    modules += [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
    assert not [name for name in modules if name == "scripts" or name.startswith("scripts.")]
