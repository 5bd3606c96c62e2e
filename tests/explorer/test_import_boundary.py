"""Imports go one way: the explorer imports nothing of sim (a backend hands it data, e.g. its guide), and nothing
the project ships or runs to build its pages (packages, notebooks, docs tooling, Makefile) imports the tests."""
import json
import ast
import os
import subprocess
import sys
from pathlib import Path

import pu1_explorer

EXPLORER = Path(pu1_explorer.__file__).parent


PROJECT = EXPLORER.parents[1]


def _is_sim(module: str) -> bool:
    return module == "torch_sim" or module.startswith("torch_sim.")


def _is_tests(module: str) -> bool:
    return module == "tests" or module.startswith("tests.")


def sim_imports(source: str, wanted=_is_sim) -> list[str]:
    """The modules a Python source imports that `wanted` picks (default: sim's): import statements and
    import_module/__import__ of a constant."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if wanted(alias.name)]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and wanted(node.module or ""):
            found.append(node.module)
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None))
              in ("import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant)
              and wanted(str(node.args[0].value))):
            found.append(node.args[0].value)
    return found


def test_the_check_finds_every_way_of_importing_sim():
    source = ("import torch_sim\nfrom torch_sim.steps import GUIDE\nimport importlib\n"
              "importlib.import_module('torch_sim.guard')\n__import__('torch_sim')\nimport torch_simulator\n")
    assert sim_imports(source) == ["torch_sim", "torch_sim.steps", "torch_sim.guard", "torch_sim"]


def test_no_module_of_the_explorer_imports_sim():
    files = sorted(EXPLORER.rglob("*.py"))
    assert len(files) > 20 and EXPLORER / "guide" / "__init__.py" in files
    offenders = {str(path.relative_to(EXPLORER)): sim_imports(path.read_text()) for path in files}
    assert {path: names for path, names in offenders.items() if names} == {}


def test_importing_every_module_of_the_explorer_loads_nothing_of_sim():
    names = sorted(f"pu1_explorer.{'.'.join(path.relative_to(EXPLORER).with_suffix('').parts)}"
                   .removesuffix(".__init__") for path in EXPLORER.rglob("*.py"))
    program = ("import importlib, sys\nfor name in sys.argv[1:]:\n    importlib.import_module(name)\n"
               "print(len(sys.argv) - 1, sorted(m for m in sys.modules if m.split('.')[0] == 'torch_sim'))")
    result = subprocess.run([sys.executable, "-c", program, *names], capture_output=True, text=True, timeout=300,
                            env=dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[0] == str(len(names)) and result.stdout.strip().endswith("[]"), result.stdout


def _product_sources() -> dict[str, str]:
    """Every Python program the product ships or runs for its pages: the packages, examples, docs tooling and
    hooks, and the code cells of the notebooks."""
    sources = {str(path.relative_to(PROJECT)): path.read_text()
               for folder in ("backend", "explorer", "examples", "docs") for path in (PROJECT / folder).rglob("*.py")}
    for notebook in (PROJECT / "notebooks").glob("*.ipynb"):
        cells = json.loads(notebook.read_text())["cells"]
        code = "\n".join("".join(cell["source"]) for cell in cells if cell["cell_type"] == "code")
        sources[f"notebooks/{notebook.name}"] = "\n".join(line for line in code.splitlines()
                                                           if not line.lstrip().startswith(("%", "!")))
    return sources


def test_the_product_imports_nothing_of_the_tests():
    sources = _product_sources()
    assert "backend/torch_sim/steps.py" in sources and "notebooks/06_scorecard.ipynb" in sources
    offenders = {path: sim_imports(source, _is_tests) for path, source in sources.items()}
    assert {path: names for path, names in offenders.items() if names} == {}
    makefile = (PROJECT / "Makefile").read_text().split("\n$(VENV)/.installed:", 1)[1]
    setup_recipe = [line for line in makefile.splitlines()[1:40] if line.startswith("\t")]
    assert setup_recipe and not [line for line in setup_recipe if "tests." in line or "tests/" in line]


DISPATCHER = EXPLORER / "dispatcher.py"


def dispatcher_calls(source: str) -> list[str]:
    """The dispatcher introspection functions (`torch._C._dispatch_*`) a Python source names: as attributes
    (`torch._C._dispatch_keys`, `C._dispatch_keys`), imported (`from torch._C import _dispatch_keys`) or looked
    up by a constant name (`getattr(torch._C, "_dispatch_keys")`)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_dispatch_"):
            found.append(node.attr)
        elif isinstance(node, ast.ImportFrom):
            found += [alias.name for alias in node.names if alias.name.startswith("_dispatch_")]
        elif (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "getattr" and len(node.args) > 1
              and isinstance(node.args[1], ast.Constant) and str(node.args[1].value).startswith("_dispatch_")):
            found.append(node.args[1].value)
    return found


def test_the_check_finds_every_way_of_naming_a_dispatcher_function():
    source = ("import torch\nfrom torch import _C as C\nfrom torch._C import _dispatch_keys\n"
              "torch._C._dispatch_dump_table('aten::add')\nC._dispatch_get_all_op_names()\n"
              "getattr(torch._C, '_dispatch_library')\ntorch.device('privateuseone').type\n"
              "'torch._C._dispatch_keys in a string'\n")
    assert sorted(dispatcher_calls(source)) == ["_dispatch_dump_table", "_dispatch_get_all_op_names", "_dispatch_keys",
                                                "_dispatch_library"]


def test_only_the_dispatcher_module_calls_torchs_dispatcher_functions():
    files = sorted(EXPLORER.rglob("*.py"))
    assert DISPATCHER in files and dispatcher_calls(DISPATCHER.read_text())
    offenders = {str(path.relative_to(EXPLORER)): dispatcher_calls(path.read_text())
                 for path in files if path != DISPATCHER}
    assert {path: names for path, names in offenders.items() if names} == {}
