"""Imports go one way: the explorer imports nothing of sim (a backend hands it data, e.g. its guide)."""
import ast
import os
import subprocess
import sys
from pathlib import Path

import pu1_explorer

EXPLORER = Path(pu1_explorer.__file__).parent


def _is_sim(module: str) -> bool:
    return module == "torch_sim" or module.startswith("torch_sim.")


def sim_imports(source: str) -> list[str]:
    """The modules of sim a Python source imports: import statements and import_module/__import__ of a constant."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if _is_sim(alias.name)]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and _is_sim(node.module or ""):
            found.append(node.module)
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None))
              in ("import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant)
              and _is_sim(str(node.args[0].value))):
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
