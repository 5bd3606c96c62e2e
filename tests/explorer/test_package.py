"""The package `pu1_explorer` imports its engine on first use: the docs build, which needs only the fork server and
the Jupyter kernels, does not import torch in its own process."""
import pytest

from tests.conftest import run_python

FIRST_USE = """
import sys, types
import pu1_explorer.forkserver
print("torch" in sys.modules)
import pu1_explorer
import pu1_explorer.op_coverage, pu1_explorer.conformance, pu1_explorer.dispatch_tables  # the modules first
from pu1_explorer import coverage, scorecard, dispatch_table, Scorecard
print("torch" in sys.modules, isinstance(pu1_explorer.coverage, types.FunctionType),
      coverage is sys.modules["pu1_explorer.op_coverage"].coverage, scorecard is pu1_explorer.scorecard,
      Scorecard is sys.modules["pu1_explorer.conformance"].Scorecard)
print(dispatch_table("add.Tensor", ["CPU"])[0].kind, "key_set" in dir(pu1_explorer))
"""


def test_the_engine_is_imported_on_first_use_and_keeps_its_names():
    result = run_python(FIRST_USE)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines() == ["False", "True True True True True", "kernel True"]


def test_a_name_the_package_lacks_is_an_attribute_error():
    import pu1_explorer

    with pytest.raises(AttributeError, match="module 'pu1_explorer' has no attribute 'coverge'"):
        pu1_explorer.coverge  # noqa: B018


def test_no_public_name_is_also_the_name_of_a_submodule():
    """Importing a submodule sets the package attribute of its name: a function of the same name would be hidden."""
    import pkgutil

    import pu1_explorer

    submodules = {module.name for module in pkgutil.iter_modules(pu1_explorer.__path__)}
    assert submodules, "found no submodules"
    assert not submodules & set(pu1_explorer.__all__)
