"""No product module imports `batchrl.testing`: test envs and probes stay out of the product.

Every import statement of a module under `batchrl/` outside `testing/` counts, also one
deferred into a function; tests and `conftest.py` import freely.
"""

import ast
import pathlib

import batchrl

ROOT = pathlib.Path(batchrl.__file__).parent


def imports_of_testing(path: pathlib.Path) -> list[str]:
    """The lines of the module at `path` that import `batchrl.testing` or a module of it."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            base = node.module or ""
            targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        else:
            continue
        if any(t == "batchrl.testing" or t.startswith("batchrl.testing.") for t in targets):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_no_product_module_imports_the_testing_package():
    products = [
        path
        for path in ROOT.rglob("*.py")
        if not path.name.endswith("_test.py")
        and path.name != "conftest.py"
        and "testing" not in path.relative_to(ROOT).parts
    ]
    assert ROOT / "simulate.py" in products and len(products) > 100
    bad = {str(p.relative_to(ROOT)): found for p in products if (found := imports_of_testing(p))}
    assert not bad, f"product modules import batchrl.testing: {bad}"


def test_an_import_of_the_testing_package_is_found(tmp_path):
    module = tmp_path / "module.py"
    module.write_text(
        "import numpy\n"
        "from batchrl.testing import mock\n"
        "def f():\n"
        "    import batchrl.testing.jax_mock\n"
        "from batchrl.envs import testing_free\n"
    )
    assert imports_of_testing(module) == [
        "line 2: from batchrl.testing import mock",
        "line 4: import batchrl.testing.jax_mock",
    ]
